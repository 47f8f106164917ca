// One model's parameters (or their gradients) on the device as named tensors: a base pointer into the flat buffer,
// in gpt2_parameter_table order, and the table's offsets. The trainer, generation and the decode step all index
// parameters through it.
#pragma once

#include <array>

#include "llmc/core/cuda_common.h"
#include "llmc/model/gpt2_config.h"

struct GPT2Params {
    floatX* base = nullptr;
    std::array<size_t, kNumParameterTensors> offsets{};
    std::array<size_t, kNumParameterTensors> layer_stride{};  // elements between two layers' slices (0: not per layer)

    GPT2Params() = default;
    GPT2Params(const GPT2Config& c, floatX* flat) : base(flat), offsets(gpt2_parameter_offsets(c)) {
        const auto table = gpt2_parameter_table(c);
        for (int t = 0; t < kNumParameterTensors; t++)
            layer_stride[t] = table[t].per_layer ? table[t].numel / c.num_layers : 0;
    }
    // Layer `layer`'s slice of a tensor (the whole tensor for the ones that are not per layer).
    floatX* operator()(ParamTensor t, int layer = 0) const {
        return base + offsets[t] + (size_t)layer * layer_stride[t];
    }
};
