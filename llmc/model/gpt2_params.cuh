// One model's parameters (or their gradients) on the device as named tensors: a base pointer into the flat buffer,
// in gpt2_parameter_table order, and the table's offsets. The trainer, generation and the decode step all index
// parameters through it.
#pragma once

#include <array>
#include <vector>

#include "llmc/core/cuda_common.h"
#include "llmc/gpt2/gpt2_config.h"

// Where the training model keeps its gradients. Flat (the default): one buffer in table order, as the parameters.
// Otherwise (ZeRO-2, llmc/distributed/grad_slots.h) a buffer of `elements` that holds only the tensors outside the
// layers, at `offsets` (the exchange's layout, with padding between them); the layers' gradients are written where
// GPT2Params::slices points, into memory the exchange owns.
struct GradLayout {
    size_t elements = 0;                                 // 0: flat
    std::array<size_t, kNumParameterTensors> offsets{};  // the tensors outside the layers (the others' unused)
    bool flat() const { return elements == 0; }
};

struct GPT2Params {
    floatX* base = nullptr;
    std::array<size_t, kNumParameterTensors> offsets{};
    std::array<size_t, kNumParameterTensors> layer_stride{};  // elements between two layers' slices (0: not per layer)
    // Optional (ZeRO-2's gradients): layer l's slice of per-layer tensor t is slices[l * kNumParameterTensors + t]
    // instead of base + offsets[t] + l * layer_stride[t]; the tensors outside the layers stay at base + offsets[t].
    std::vector<floatX*> slices;

    GPT2Params() = default;
    GPT2Params(const GPT2Config& c, floatX* flat) : base(flat), offsets(gpt2_parameter_offsets(c)) {
        const auto table = gpt2_parameter_table(c);
        for (int t = 0; t < kNumParameterTensors; t++)
            layer_stride[t] = table[t].per_layer ? table[t].numel / c.num_layers : 0;
    }
    // A gradient buffer in `layout` (flat: as above; else the tensors outside the layers at layout.offsets, and
    // the layers' slices to be set in `slices` by the memory's owner before a backward).
    GPT2Params(const GPT2Config& c, floatX* buffer, const GradLayout& layout) : GPT2Params(c, buffer) {
        if (layout.flat()) return;
        for (int t = 0; t < kNumParameterTensors; t++) offsets[t] = layer_stride[t] ? 0 : layout.offsets[t];
    }
    // Layer `layer`'s slice of a tensor (the whole tensor for the ones that are not per layer).
    floatX* operator()(ParamTensor t, int layer = 0) const {
        if (!slices.empty() && layer_stride[t]) return slices[(size_t)layer * kNumParameterTensors + t];
        return base + offsets[t] + (size_t)layer * layer_stride[t];
    }
};
