// ZeRO-1 groundwork (docs/MULTI_GPU.md): which gradients are exchanged together, and which part of them
// each rank owns. Host-only arithmetic on the parameter table; llmc/distributed/zero.cuh is the device side.
//
// The checkpoint's flat parameter order is tensor-major (all layers' ln1w, then all layers' ln1b, ...), so one
// layer's gradients are not contiguous. The layers' backward ends from the last layer to the first; a bucket is a
// run of consecutive layers [first, last], which is one contiguous range per per-layer tensor (12 ranges), plus two
// buckets of the tensors outside the layers: wpe, lnfw, lnfb, then wte alone (its gradient is complete only after
// the encoder backward, the very end; one range, exchanged in place when it splits evenly over the ranks, which
// GPT-2's padded vocabulary makes it do). For the exchange a bucket's ranges are packed, in table order, into a staging
// buffer padded to a multiple of num_ranks · kZeroAlign elements; a reduce-scatter of that buffer leaves rank r the
// summed slice [r · padded / N, (r + 1) · padded / N), whose master weights and AdamW moments only rank r keeps.
// zero_staging_to_flat maps a staging index back to the flat index; zero_owned_segments lists a rank's shard as
// contiguous pieces of single tensors (what the sharded AdamW update walks); zero_shard_from_flat and
// zero_flat_from_shards move optimizer state between shards and the flat order checkpoints keep, so they do not
// depend on N.
#pragma once

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/gpt2/gpt2_config.h"

constexpr size_t kZeroAlign = 64;  // elements: every shard starts 128-byte aligned in bf16

struct FlatRange {
    size_t offset = 0, count = 0;  // in elements of the flat parameter buffer
    int tensor = -1;               // its row of gpt2_parameter_table (AdamW's weight decay is per tensor)
};

struct GradBucket {
    int first_layer = -1, last_layer = -1;  // -1, -1: the tensors outside the layers
    std::vector<FlatRange> ranges;          // in table order: the staging buffer's order
    size_t elements = 0;                    // sum of the ranges' counts
    size_t padded = 0;                      // elements rounded up to a multiple of num_ranks * kZeroAlign
    // rank r owns staging elements [r * shard_elements(N), (r + 1) * shard_elements(N))
    size_t shard_elements(int num_ranks) const { return padded / (size_t)num_ranks; }
    // One range with no padding: its place in the flat buffer is its staging buffer (reduce-scattered and
    // all-gathered in place there, nothing copied).
    bool in_place() const { return ranges.size() == 1 && padded == elements; }
};

// Buckets in the order the backward completes them: layers from the last down, each bucket at least target_bytes
// of bf16 gradients (or the layers left), then wpe, lnfw and lnfb, then wte. target_bytes 0: one layer per bucket.
inline std::vector<GradBucket> zero_bucket_plan(const GPT2Config& c, size_t target_bytes, int num_ranks) {
    if (num_ranks < 1) throw std::invalid_argument("zero_bucket_plan: num_ranks must be >= 1");
    const auto table = gpt2_parameter_table(c);
    const int L = c.num_layers;
    std::vector<size_t> offset(table.size());
    size_t at = 0;
    size_t per_layer = 0;  // elements of one layer, over every per-layer tensor
    for (size_t i = 0; i < table.size(); i++) {
        offset[i] = at;
        at += table[i].numel;
        if (table[i].per_layer) per_layer += table[i].numel / L;
    }
    const size_t quantum = (size_t)num_ranks * kZeroAlign;
    auto finish = [&](GradBucket& b) {
        for (const FlatRange& r : b.ranges) b.elements += r.count;
        b.padded = (b.elements + quantum - 1) / quantum * quantum;
    };
    std::vector<GradBucket> plan;
    const size_t layers_per_bucket =
        per_layer == 0 ? 1 : std::max<size_t>(1, (target_bytes / 2 + per_layer - 1) / per_layer);
    for (int last = L - 1; last >= 0;) {
        const int first = (int)std::max<long long>(0, (long long)last - (long long)layers_per_bucket + 1);
        GradBucket b;
        b.first_layer = first;
        b.last_layer = last;
        for (size_t i = 0; i < table.size(); i++) {
            if (!table[i].per_layer) continue;
            const size_t each = table[i].numel / L;
            b.ranges.push_back({offset[i] + (size_t)first * each, (size_t)(last - first + 1) * each, (int)i});
        }
        finish(b);
        plan.push_back(b);
        last = first - 1;
    }
    // wte on its own, last: the largest tensor, complete only after the encoder backward, and one contiguous range,
    // so with a size that splits evenly it is exchanged in place (GradBucket::in_place) with no staging copies
    GradBucket rest, embedding;
    for (size_t i = 0; i < table.size(); i++) {
        if (table[i].per_layer) continue;
        (i == 0 ? embedding : rest).ranges.push_back({offset[i], table[i].numel, (int)i});
    }
    finish(rest);
    finish(embedding);
    plan.push_back(rest);
    plan.push_back(embedding);
    return plan;
}

// The flat index of staging element i of bucket b (i < b.elements; the padding maps nowhere).
inline size_t zero_staging_to_flat(const GradBucket& b, size_t i) {
    for (const FlatRange& r : b.ranges) {
        if (i < r.count) return r.offset + i;
        i -= r.count;
    }
    throw std::out_of_range("zero_staging_to_flat: index " + std::to_string(i) + " is padding or past the bucket");
}

// Elements one rank keeps of a per-parameter array (fp32 master weights, AdamW m, v): its slice of every bucket.
inline size_t zero_shard_size(const std::vector<GradBucket>& plan, int num_ranks) {
    size_t n = 0;
    for (const GradBucket& b : plan) n += b.shard_elements(num_ranks);
    return n;
}

// The contiguous pieces of what rank `rank` owns, in shard order: shard[shard_offset .. + count) holds
// flat[flat_offset .. + count), all of one tensor (the update kernel takes its weight decay from it). Padding is in
// no segment.
struct ZeroSegment {
    size_t shard_offset = 0, flat_offset = 0, count = 0;
    int tensor = -1;
};
inline std::vector<ZeroSegment> zero_owned_segments(const std::vector<GradBucket>& plan, int num_ranks, int rank) {
    std::vector<ZeroSegment> out;
    size_t shard_at = 0;
    for (const GradBucket& b : plan) {
        const size_t per = b.shard_elements(num_ranks), begin = (size_t)rank * per, end = begin + per;
        size_t staging = 0;  // staging index of the current range's first element
        for (const FlatRange& r : b.ranges) {
            const size_t lo = std::max(begin, staging), hi = std::min(end, staging + r.count);
            if (lo < hi) out.push_back({shard_at + (lo - begin), r.offset + (lo - staging), hi - lo, r.tensor});
            staging += r.count;
        }
        shard_at += per;
    }
    return out;
}

// Calls f(shard_index, flat_index) for every element rank `rank` owns.
template <typename F>
inline void zero_for_each_owned(const std::vector<GradBucket>& plan, int num_ranks, int rank, F f) {
    for (const ZeroSegment& g : zero_owned_segments(plan, num_ranks, rank))
        for (size_t k = 0; k < g.count; k++) f(g.shard_offset + k, g.flat_offset + k);
}

// A rank's shard of a flat array (padding = pad), and the flat array back from every rank's shard: checkpoints
// keep the flat order, so a state written with N ranks resumes with any other N.
template <typename T>
inline std::vector<T> zero_shard_from_flat(const std::vector<GradBucket>& plan, int num_ranks, int rank, const T* flat,
                                           T pad = T{}) {
    std::vector<T> shard(zero_shard_size(plan, num_ranks), pad);
    zero_for_each_owned(plan, num_ranks, rank, [&](size_t s, size_t k) { shard[s] = flat[k]; });
    return shard;
}
template <typename T>
inline void zero_flat_from_shards(const std::vector<GradBucket>& plan, int num_ranks,
                                  const std::vector<std::vector<T>>& shards, T* flat) {
    if ((int)shards.size() != num_ranks) throw std::invalid_argument("zero_flat_from_shards: one shard per rank");
    for (int r = 0; r < num_ranks; r++) {
        if (shards[r].size() != zero_shard_size(plan, num_ranks))
            throw std::invalid_argument("zero_flat_from_shards: shard " + std::to_string(r) + " has the wrong size");
        zero_for_each_owned(plan, num_ranks, r, [&](size_t s, size_t k) { flat[k] = shards[r][s]; });
    }
}
