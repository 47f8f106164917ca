// ZeRO-1 and -2 on the GPU (docs/MULTI_GPU.md): the device half of llmc/distributed/zero_plan.h. Each rank keeps the fp32
// master weights and AdamW moments of its shard only; a shard is the rank's slice of every bucket's staging buffer
// (zero_plan.h). -z 1: the averaged gradients a reduce-scatter leaves in the rank's slice of the staging buffer go
// back to their own places in the flat gradient buffer (those places are final once the bucket is packed), so no
// gradient shard is stored anywhere else: the update and the norm read the owned places of the flat gradients.
// -z 2: there is no flat gradient buffer to go back to (llmc/distributed/grad_slots.h): the slice is kept in a
// gradient shard, shard order like master, m and v, which the norm and the update read instead.
//
//   ZeroShard z = zero_shard_create(plan, c, num_ranks, rank);      // the rank's segments, on the device
//   zero_pack(b, flat, staging) / zero_unpack(b, staging, flat);    // a bucket's ranges <-> its staging buffer
//   zero_pack_zero_padded(b, grads, staging);                       // before a reduce-scatter
//   zero_unpack_owned(b, staging, grads, N, rank);                  // after it: the rank's slice back to flat
//   zero_pack_owned(b, params, staging, N, rank);                   // before an all-gather: the rank's slice only
//   zero_grad_norm(z, grads);                                       // L2 norm of the owned gradients
//   zero_grad_norm_square_queue(z, grads, square, stream);          // its square on the device, no host wait
//   zero_adamw_update(z, params, master, grads, m, v, table, step_args);  // the rank's elements only
//   -z 2 (the rank's averaged gradients kept in a gradient shard, shard order, instead of the flat buffer):
//   zero_shard_accumulate(shard + offset, slice, count, add);       // a bucket's slice in, after its reduce-scatter
//   zero_grad_norm_shard(z, shard);  zero_adamw_update_shard(z, params, master, shard, m, v, table, step_args);
//
// zero_adamw_update applies adamw_element (llmc/kernels/adamw.cuh) with each element's index in its tensor and its
// tensor's rounding stream, so every element gets the bits the unsharded adamw_update gives it, whichever rank
// owns it (tests/gpu/test_zero.cu checks this for 1, 2 and 3 ranks against adamw_update). The NCCL calls and the
// overlap with the backward live in the trainer; this file is the arithmetic they move data for.
#pragma once

#include <vector>

#include "llmc/core/cuda_common.h"
#include "llmc/distributed/zero_plan.h"
#include "llmc/kernels/adamw.cuh"
#include "llmc/kernels/global_norm.cuh"

// One owned piece on the device: shard[shard_offset + i] <-> flat[flat_offset + i], element index_in_tensor + i of
// tensor `tensor`.
struct ZeroDeviceSegment {
    size_t shard_offset, flat_offset, count;
    uint32_t index_in_tensor;
    int tensor;
};

// The kernels over a shard run one block per chunk of at most kZeroChunk elements of one segment, so a segment of
// a whole wte slice and one of a LayerNorm weight get work in proportion (a fixed list: a fixed sum order too).
constexpr uint32_t kZeroChunk = 32768;
struct ZeroDeviceChunk {
    uint32_t segment, start, count;  // segments[segment] elements [start, start + count)
};

// Which of a shard's chunks an update launch takes: with several ranks the update runs in two launches, wte's, wpe's
// and lnf's chunks first, so that their all-gather (what the next forward's encoder waits for) travels under the
// layers' update instead of after it. Each element is updated once, with the same bits, whichever launch.
enum class ZeroChunks { All, Outer, Layers };

struct ZeroShard {
    int num_ranks = 0, rank = 0;
    size_t elements = 0;                     // zero_shard_size: the length of master, m and v
    int num_segments = 0, num_chunks = 0;
    int first_outer_chunk = 0;               // chunks [first_outer_chunk, num_chunks): the buckets outside the layers
    ZeroDeviceSegment* segments = nullptr;   // device
    ZeroDeviceChunk* chunks = nullptr;       // device
    float* norm_partials = nullptr;          // device, num_chunks + 1
};

inline ZeroShard zero_shard_create(const std::vector<GradBucket>& plan, const GPT2Config& c, int num_ranks, int rank) {
    const auto table = gpt2_parameter_table(c);
    std::vector<size_t> tensor_offset(table.size());
    for (size_t i = 0, at = 0; i < table.size(); at += table[i].numel, i++) tensor_offset[i] = at;
    std::vector<ZeroDeviceSegment> host;
    for (const ZeroSegment& g : zero_owned_segments(plan, num_ranks, rank)) {
        if ((g.shard_offset | g.flat_offset | g.count) % 4 != 0) {  // the update's 4-wide accesses
            fprintf(stderr, "error: ZeRO shard: a segment of tensor %d is not a multiple of 4 elements (C %% 8 != 0?)\n",
                    g.tensor);
            exit(EXIT_FAILURE);
        }
        host.push_back({g.shard_offset, g.flat_offset, g.count, (uint32_t)(g.flat_offset - tensor_offset[g.tensor]),
                        g.tensor});
    }
    ZeroShard z;
    z.num_ranks = num_ranks, z.rank = rank, z.elements = zero_shard_size(plan, num_ranks);
    z.num_segments = (int)host.size();
    if (!host.empty()) {
        cudaCheck(cudaMalloc(&z.segments, host.size() * sizeof(ZeroDeviceSegment)));
        cudaCheck(cudaMemcpy(z.segments, host.data(), host.size() * sizeof(ZeroDeviceSegment), cudaMemcpyHostToDevice));
    }
    std::vector<ZeroDeviceChunk> chunks;
    int first_outer = -1;
    for (size_t g = 0; g < host.size(); g++) {
        const bool outer = !table[(size_t)host[g].tensor].per_layer;
        if (outer && first_outer < 0) first_outer = (int)chunks.size();
        if (!outer && first_outer >= 0) {  // zero_bucket_plan puts the buckets outside the layers last
            fprintf(stderr, "error: ZeRO shard: a layer's segment (tensor %d) after the tensors outside the layers\n",
                    host[g].tensor);
            exit(EXIT_FAILURE);
        }
        for (size_t at = 0; at < host[g].count; at += kZeroChunk)
            chunks.push_back({(uint32_t)g, (uint32_t)at, (uint32_t)std::min<size_t>(kZeroChunk, host[g].count - at)});
    }
    z.num_chunks = (int)chunks.size();
    z.first_outer_chunk = first_outer < 0 ? z.num_chunks : first_outer;
    if (!chunks.empty()) {
        cudaCheck(cudaMalloc(&z.chunks, chunks.size() * sizeof(ZeroDeviceChunk)));
        cudaCheck(cudaMemcpy(z.chunks, chunks.data(), chunks.size() * sizeof(ZeroDeviceChunk), cudaMemcpyHostToDevice));
    }
    cudaCheck(cudaMalloc(&z.norm_partials, ((size_t)z.num_chunks + 1) * sizeof(float)));
    return z;
}

inline void zero_shard_free(ZeroShard* z) {
    if (z->segments) cudaCheck(cudaFree(z->segments));
    if (z->chunks) cudaCheck(cudaFree(z->chunks));
    if (z->norm_partials) cudaCheck(cudaFree(z->norm_partials));
    *z = ZeroShard{};
}

// A bucket's ranges into its staging buffer, in table order (the padding after them is left as it is), and back.
// Device-to-device copies: 12 per layer bucket, bandwidth-bound.
template <typename T>
inline void zero_pack(const GradBucket& b, const T* flat, T* staging, cudaStream_t stream) {
    size_t at = 0;
    for (const FlatRange& r : b.ranges) {
        cudaCheck(cudaMemcpyAsync(staging + at, flat + r.offset, r.count * sizeof(T), cudaMemcpyDeviceToDevice, stream));
        at += r.count;
    }
}
// The same with the padding zeroed: what a reduce-scatter needs, so the shards' padding sums to zero (it is counted in
// the gradient norm). The staging buffer is shared by buckets of different sizes and by the all-gather, so its
// padding holds whatever was there before.
template <typename T>
inline void zero_pack_zero_padded(const GradBucket& b, const T* flat, T* staging, cudaStream_t stream) {
    zero_pack(b, flat, staging, stream);
    if (b.padded > b.elements)
        cudaCheck(cudaMemsetAsync(staging + b.elements, 0, (b.padded - b.elements) * sizeof(T), stream));
}
template <typename T>
inline void zero_unpack(const GradBucket& b, const T* staging, T* flat, cudaStream_t stream) {
    size_t at = 0;
    for (const FlatRange& r : b.ranges) {
        cudaCheck(cudaMemcpyAsync(flat + r.offset, staging + at, r.count * sizeof(T), cudaMemcpyDeviceToDevice, stream));
        at += r.count;
    }
}
// Only rank `rank`'s slice of the bucket's staging buffer, [rank * per, (rank + 1) * per), to or from its flat places
// (padding has none): after an in-place reduce-scatter (unpack) and before an in-place all-gather (pack).
template <typename T, bool kToFlat>
inline void zero_copy_owned(const GradBucket& b, T* flat, T* staging, int num_ranks, int rank, cudaStream_t stream) {
    const size_t per = b.shard_elements(num_ranks), begin = (size_t)rank * per, end = begin + per;
    size_t at = 0;  // staging index of the range's first element
    for (const FlatRange& r : b.ranges) {
        const size_t lo = std::max(begin, at), hi = std::min(end, at + r.count);
        if (lo < hi) {
            T* f = flat + r.offset + (lo - at);
            T* st = staging + lo;
            cudaCheck(cudaMemcpyAsync(kToFlat ? f : st, kToFlat ? st : f, (hi - lo) * sizeof(T), cudaMemcpyDeviceToDevice,
                                      stream));
        }
        at += r.count;
    }
}
template <typename T>
inline void zero_unpack_owned(const GradBucket& b, const T* staging, T* flat, int num_ranks, int rank,
                              cudaStream_t stream) {
    zero_copy_owned<T, true>(b, flat, const_cast<T*>(staging), num_ranks, rank, stream);
}
template <typename T>
inline void zero_pack_owned(const GradBucket& b, const T* flat, T* staging, int num_ranks, int rank,
                            cudaStream_t stream) {
    zero_copy_owned<T, false>(b, const_cast<T*>(flat), staging, num_ranks, rank, stream);
}

namespace zero_detail {

// One block per chunk: params (flat) and the shard's master, m, v (shard order); grads flat (-z 1: the owned places
// of the model's buffer) or, kShardGrads, in shard order (-z 2: the gradient shard). 4 elements per thread with
// 16-byte (fp32) and 8-byte (bf16) accesses as adamw_kernel_chunks (every segment's offsets and counts are multiples
// of 4: zero_shard_create checks), each element through adamw_value and store_param with its index in its tensor
// and its tensor's seed, so the bits are adamw_element's whichever kernel and layout.
template <bool kShardGrads>
__global__ void adamw_shard_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v,
                                   const ZeroDeviceSegment* segments, const ZeroDeviceChunk* chunks,
                                   AdamWTensorTable table, AdamWStep step) {
    using namespace adamw_detail;
    const AdamWStep s = resolve_step(step);
    const ZeroDeviceChunk c = chunks[blockIdx.x];  // chunks starts at the launch's first
    const ZeroDeviceSegment g = segments[c.segment];
    const float wd = table.weight_decay[g.tensor];
    const uint32_t seed = tensor_seed(g.tensor, s);  // adamw_kernel's stream for this tensor
    for (uint32_t i = c.start + 4 * threadIdx.x; i < c.start + c.count; i += 4 * blockDim.x) {
        const size_t at = g.shard_offset + i, flat = g.flat_offset + i;
        const Raw4 graw = load<true>(reinterpret_cast<const Raw4*>(grads + (kShardGrads ? at : flat)));
        const floatX* gx = reinterpret_cast<const floatX*>(&graw);
        float4 mi = load<true>(reinterpret_cast<const float4*>(m + at));
        float4 vi = load<true>(reinterpret_cast<const float4*>(v + at));
        float4 p;
        if (master) {
            p = load<true>(reinterpret_cast<const float4*>(master + at));
        } else {
            const Raw4 praw = load<true>(reinterpret_cast<const Raw4*>(params + flat));
            const floatX* px = reinterpret_cast<const floatX*>(&praw);
            p = make_float4(to_float(px[0]), to_float(px[1]), to_float(px[2]), to_float(px[3]));
        }
        Raw4 out;
        floatX* ox = reinterpret_cast<floatX*>(&out);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            component(p, k) = adamw_value(to_float(gx[k]), component(mi, k), component(vi, k), component(p, k), wd, s);
            store_param(&ox[k], component(p, k), g.index_in_tensor + i + k, seed);
        }
        store<true>(reinterpret_cast<float4*>(m + at), mi);
        store<true>(reinterpret_cast<float4*>(v + at), vi);
        if (master) store<true>(reinterpret_cast<float4*>(master + at), p);
        store<true>(reinterpret_cast<Raw4*>(params + flat), out);
    }
}

// Sum of squares: one partial per chunk; global_norm_finish_kernel adds them in order. 4 elements per thread and
// load, as the update reads them (one element per load left DRAM far from its bandwidth); the chunks are multiples of
// 4 at multiples of 4 (zero_shard_create checks), the same chunks in both layouts, so -z 1 and -z 2 sum alike.
template <bool kShardGrads>
__global__ void norm_partials_kernel(float* partials, const floatX* grads, const ZeroDeviceSegment* segments,
                                     const ZeroDeviceChunk* chunks) {
    using namespace adamw_detail;
    const ZeroDeviceChunk c = chunks[blockIdx.x];
    const ZeroDeviceSegment& g = segments[c.segment];
    const floatX* x = grads + (kShardGrads ? g.shard_offset : g.flat_offset) + c.start;
    float acc = 0.0f;
    for (uint32_t i = 4 * threadIdx.x; i < c.count; i += 4 * blockDim.x) {
        const Raw4 raw = load<false>(reinterpret_cast<const Raw4*>(x + i));
        const floatX* v = reinterpret_cast<const floatX*>(&raw);
#pragma unroll
        for (int k = 0; k < 4; k++) acc += to_float(v[k]) * to_float(v[k]);
    }
    acc = block_reduce_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// dst += src, rounded to nearest; 8 floatX (bf16) per thread and step, over `packs` 16-byte packs.
__global__ void shard_accumulate_kernel(floatX* dst, const floatX* src, size_t packs) {
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < packs; p += (size_t)gridDim.x * blockDim.x) {
        const x128 a = load128(dst + p * x128::size), b = load128cs(src + p * x128::size);
        x128 out;
#pragma unroll
        for (int k = 0; k < x128::size; k++) out[k] = (floatX)(to_float(a[k]) + to_float(b[k]));
        store128(dst + p * x128::size, out);
    }
}

// The norm into z.norm_partials[0] (and its square into *square when given), no host wait.
template <bool kShardGrads>
inline void grad_norm_queue(const ZeroShard& z, const floatX* grads, float* square, cudaStream_t stream) {
    if (z.num_chunks == 0) {
        cudaCheck(cudaMemsetAsync(z.norm_partials, 0, sizeof(float), stream));
        if (square) cudaCheck(cudaMemsetAsync(square, 0, sizeof(float), stream));
        return;
    }
    norm_partials_kernel<kShardGrads><<<z.num_chunks, 512, 0, stream>>>(z.norm_partials + 1, grads, z.segments, z.chunks);
    cudaCheckLaunch();
    global_norm_finish_kernel<<<1, 1024, 0, stream>>>(z.norm_partials, z.norm_partials + 1, z.num_chunks, square);
    cudaCheckLaunch();
}

template <bool kShardGrads>
inline float grad_norm(const ZeroShard& z, const floatX* grads, cudaStream_t stream) {
    grad_norm_queue<kShardGrads>(z, grads, nullptr, stream);
    float norm = 0.0f;
    cudaCheck(cudaMemcpyAsync(&norm, z.norm_partials, sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    return norm;
}

template <bool kShardGrads>
inline void adamw_update(const ZeroShard& z, floatX* params, float* master, const floatX* grads, float* m, float* v,
                         const AdamWTensorTable& table, const AdamWStep& s, ZeroChunks which, cudaStream_t stream) {
    const int begin = which == ZeroChunks::Outer ? z.first_outer_chunk : 0;
    const int end = which == ZeroChunks::Layers ? z.first_outer_chunk : z.num_chunks;
    if (end <= begin) return;
    adamw_shard_kernel<kShardGrads><<<end - begin, 512, 0, stream>>>(params, master, grads, m, v, z.segments,
                                                                      z.chunks + begin, table, s);
    cudaCheckLaunch();
}

}  // namespace zero_detail

// The L2 norm of the rank's owned gradients (grads: the flat buffer); deterministic, synchronizes `stream`.
inline float zero_grad_norm(const ZeroShard& z, const floatX* grads, cudaStream_t stream = 0) {
    return zero_detail::grad_norm<false>(z, grads, stream);
}
// The same over a gradient shard (-z 2: z.elements in shard order; its padding is not read): the same chunks in the
// same order, so the same float as zero_grad_norm over the same values at their flat places.
inline float zero_grad_norm_shard(const ZeroShard& z, const floatX* shard_grads, cudaStream_t stream = 0) {
    return zero_detail::grad_norm<true>(z, shard_grads, stream);
}

// The squared norm of the rank's owned gradients (the flat buffer, or -z 2's gradient shard) into *square on the
// device, no host wait: the square of zero_grad_norm's float, rounded once, as the ranks sum it.
inline void zero_grad_norm_square_queue(const ZeroShard& z, const floatX* grads, float* square, cudaStream_t stream) {
    zero_detail::grad_norm_queue<false>(z, grads, square, stream);
}
inline void zero_grad_norm_shard_square_queue(const ZeroShard& z, const floatX* shard_grads, float* square,
                                              cudaStream_t stream) {
    zero_detail::grad_norm_queue<true>(z, shard_grads, square, stream);
}

// AdamW on the rank's shard: params and grads are the full flat floatX buffers (only owned elements are read from
// grads and written to params), master (or null without master weights), m and v are shard-ordered arrays of
// z.elements. table: weight decay per tensor
// (its offsets and sizes are not used). Same step and seed as adamw_update gives the same bits per element.
// which: all the shard's chunks, or those of the tensors outside the layers or of the layers only (ZeroChunks).
inline void zero_adamw_update(const ZeroShard& z, floatX* params, float* master, const floatX* grads, float* m,
                              float* v, const AdamWTensorTable& table, const AdamWStep& s, cudaStream_t stream = 0,
                              ZeroChunks which = ZeroChunks::All) {
    zero_detail::adamw_update<false>(z, params, master, grads, m, v, table, s, which, stream);
}
// The same with the gradients read from a gradient shard (-z 2: shard order, like master, m and v).
inline void zero_adamw_update_shard(const ZeroShard& z, floatX* params, float* master, const floatX* shard_grads,
                                    float* m, float* v, const AdamWTensorTable& table, const AdamWStep& s,
                                    cudaStream_t stream = 0, ZeroChunks which = ZeroChunks::All) {
    zero_detail::adamw_update<true>(z, params, master, shard_grads, m, v, table, s, which, stream);
}

// -z 2: a bucket's averaged slice (after its reduce-scatter) into its place in the gradient shard: copied on a step's
// first backward, added on the later ones (gradient accumulation: one reduce-scatter per micro-step).
inline void zero_shard_accumulate(floatX* shard_at, const floatX* slice, size_t count, bool add, cudaStream_t stream) {
    if (count == 0) return;
    if (!add) {
        cudaCheck(cudaMemcpyAsync(shard_at, slice, count * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
        return;
    }
    if (count % x128::size != 0 || (uintptr_t)shard_at % 16 != 0 || (uintptr_t)slice % 16 != 0) {
        fprintf(stderr, "error: zero_shard_accumulate: %zu elements at %p, %p are not whole 16-byte packs\n", count,
                (void*)shard_at, (const void*)slice);
        exit(EXIT_FAILURE);
    }
    const size_t packs = count / x128::size;
    const unsigned blocks = (unsigned)std::min<size_t>((packs + 255) / 256, 4 * (size_t)device_sm_count());
    zero_detail::shard_accumulate_kernel<<<blocks, 256, 0, stream>>>(shard_at, slice, packs);
    cudaCheckLaunch();
}
