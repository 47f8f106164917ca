// ZeRO-2's gradient memory (docs/MULTI_GPU.md, "ZeRO-2"): where every bucket of the plan (zero_plan.h) is
// reduce-scattered, as host arithmetic. The layers' gradients are never held whole: the backward writes each layer
// bucket's gradients straight into one of a ring of kGradSlots slots, in the bucket's staging layout (its ranges in
// table order, as zero_pack lays them out: tensor t's range covers layers first..last, so layer l's slice of t is at
// the range's start + (l - first) * t's per-layer size), and the bucket is reduce-scattered in place there. Bucket k
// of the plan uses slot k % kGradSlots: the backward needs a slot again three buckets later, by when the slot's
// reduce-scatter has had the backward of a whole bucket and more to finish. The tensors outside the layers stay in
// the model's gradient buffer (wte's gradient is summed from the classifier at the start of the backward to the
// encoder at the end, so it is held whole), which is laid out as the staging buffers of their two buckets, padding
// included, so they are reduce-scattered in place too: no bucket is packed.
//
// The all-gather of parameters after the update (as -z 1) needs a staging buffer for the buckets that are not
// in_place(): a layer bucket uses its slot (idle between the backward's last reduce-scatter and the next backward),
// a bucket outside the layers a slot when it fits, else a buffer of its own (gather_staging_elements; 0 for GPT-2
// sizes unless wte does not split evenly over the ranks).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/distributed/zero_plan.h"
#include "llmc/gpt2/gpt2_config.h"

constexpr int kGradSlots = 3;
// Slots and the model buffer's bucket areas start at multiples of this many elements: 256 bytes in bf16, the alignment
// cuBLASLt's heuristic assumes of the weight-gradient GEMMs' outputs (llmc/kernels/matmul/matmul.cuh, check_alignment).
constexpr size_t kGradAreaAlign = 128;

struct GradSlotLayout {
    int num_slots = 0;
    size_t slot_elements = 0;           // each slot: the largest layer bucket, padded, rounded up to kGradAreaAlign
                                        // (slot s starts at s * this)
    std::vector<int> slot_of_bucket;    // per bucket of the plan: its slot; -1 for the buckets outside the layers
    std::vector<size_t> outer_offset;   // per bucket outside the layers: its staging area in the model's buffer
    size_t outer_elements = 0;          // the model's gradient buffer: those buckets' padded sizes, in plan order,
                                        // each starting at a multiple of kGradAreaAlign
    std::array<size_t, kNumParameterTensors> outer_tensor_offset{};  // tensors outside the layers, in that buffer
    // [layer * kNumParameterTensors + t] for per-layer tensor t: layer l's slice, as an element offset from the
    // first slot's start (unused entries: kNoSlice)
    std::vector<size_t> slice;
    std::vector<int> gather_slot;       // per bucket: the slot its all-gather stages through; -1: in place, or
    size_t gather_staging_elements = 0; // the buffer of the outer buckets that are not in place and exceed a slot

    static constexpr size_t kNoSlice = ~(size_t)0;
    size_t slot_start(int s) const { return (size_t)s * slot_elements; }
    size_t slots_elements() const { return (size_t)num_slots * slot_elements; }
};

inline GradSlotLayout grad_slot_layout(const std::vector<GradBucket>& plan, const GPT2Config& c,
                                       int num_slots = kGradSlots) {
    if (num_slots < 1) throw std::invalid_argument("grad_slot_layout: num_slots must be >= 1");
    const auto table = gpt2_parameter_table(c);
    const auto offsets = gpt2_parameter_offsets(c);
    const size_t L = (size_t)c.num_layers;
    GradSlotLayout g;
    g.num_slots = num_slots;
    g.slot_of_bucket.assign(plan.size(), -1);
    g.outer_offset.assign(plan.size(), 0);
    g.gather_slot.assign(plan.size(), -1);
    g.slice.assign(L * kNumParameterTensors, GradSlotLayout::kNoSlice);
    for (const GradBucket& b : plan)
        if (b.first_layer >= 0) g.slot_elements = std::max(g.slot_elements, round_up(b.padded, kGradAreaAlign));
    for (size_t k = 0; k < plan.size(); k++) {
        const GradBucket& b = plan[k];
        if (b.first_layer >= 0) {
            const int s = (int)(k % (size_t)num_slots);
            g.slot_of_bucket[k] = g.gather_slot[k] = s;
            size_t at = 0;  // the range's first staging index
            for (const FlatRange& r : b.ranges) {
                const size_t each = table[(size_t)r.tensor].numel / L;
                if (!table[(size_t)r.tensor].per_layer || r.count != (size_t)(b.last_layer - b.first_layer + 1) * each ||
                    r.offset != offsets[(size_t)r.tensor] + (size_t)b.first_layer * each)
                    throw std::logic_error("grad_slot_layout: a layer bucket's range is not layers first..last of one "
                                           "per-layer tensor");
                for (int l = b.first_layer; l <= b.last_layer; l++)
                    g.slice[(size_t)l * kNumParameterTensors + (size_t)r.tensor] =
                        g.slot_start(s) + at + (size_t)(l - b.first_layer) * each;
                at += r.count;
            }
        } else {
            g.outer_elements = round_up(g.outer_elements, kGradAreaAlign);
            g.outer_offset[k] = g.outer_elements;
            size_t at = 0;
            for (const FlatRange& r : b.ranges) {
                if (table[(size_t)r.tensor].per_layer || r.offset != offsets[(size_t)r.tensor] ||
                    r.count != table[(size_t)r.tensor].numel)
                    throw std::logic_error("grad_slot_layout: a bucket outside the layers holds part of a tensor");
                g.outer_tensor_offset[(size_t)r.tensor] = g.outer_elements + at;
                at += r.count;
            }
            g.outer_elements += b.padded;
            if (!b.in_place()) {
                if (b.padded <= g.slot_elements) g.gather_slot[k] = (int)(k % (size_t)num_slots);
                else g.gather_staging_elements = std::max(g.gather_staging_elements, b.padded);
            }
        }
    }
    for (size_t l = 0; l < L; l++)
        for (int t = 0; t < kNumParameterTensors; t++)
            if (table[(size_t)t].per_layer && g.slice[l * kNumParameterTensors + (size_t)t] == GradSlotLayout::kNoSlice)
                throw std::logic_error("grad_slot_layout: layer " + std::to_string(l) + " of tensor " +
                                       table[(size_t)t].name + " is in no bucket");
    return g;
}

// The backward hands out slots in plan order (GradExchange::layer_begins): before layer `layer` begins (L: before the
// classifier and lnf) every bucket up to the one returned must have its slot: the layer's own and the layer below's,
// whose fcproj bias gradient this layer's first LayerNorm backward (lnf's for L) writes. bucket_of_layer: layer l's
// bucket in the plan (a lower layer's is later in the plan).
inline int grad_slots_needed_through(const std::vector<int>& bucket_of_layer, int layer) {
    return bucket_of_layer[(size_t)std::max(0, layer - 1)];
}
