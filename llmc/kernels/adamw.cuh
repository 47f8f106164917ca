// AdamW over every parameter tensor in one launch (each block knows its tensor, so each tensor gets its own weight
// decay and its own stochastic-rounding stream). fp32 optimizer state m, v; fp32 master weights when the parameters
// are bf16 (the update is applied to the master copy, then rounded stochastically into the bf16 copy).
// Without master weights (bf16 params only) the bf16 value is the starting point. Same math as torch.optim.AdamW:
//   m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;  p -= lr·( m/(1-β1^t) / (sqrt(v/(1-β2^t)) + eps) + wd·p )
#pragma once

#include <type_traits>

#include "llmc/core/cuda_common.h"

constexpr int kAdamWMaxTensors = 16;

struct AdamWTensorTable {
    size_t offset[kAdamWMaxTensors];
    size_t size[kAdamWMaxTensors];
    float weight_decay[kAdamWMaxTensors];
};

// One step's scalars: the learning rate, the moments' decay and bias corrections, the gradient scale (clipping),
// and the stochastic-rounding stream id mixed on the host from the seed and the step. grad_scale_at, when set, is a
// device float the kernels read the gradient scale from instead (clipping computed on the device: clip_scale in
// llmc/kernels/global_norm.cuh), so the update is queued without waiting for the norm.
struct AdamWStep {
    float lr, beta1, beta2, bias_correction1, bias_correction2, eps, grad_scale;
    uint32_t step_seed;
    const float* grad_scale_at;
};

// step >= 1 (bias correction); seed fixes the stochastic rounding (same seed + step -> same bits).
inline AdamWStep adamw_step(float lr, float beta1, float beta2, float eps, float grad_scale, int step, uint64_t seed) {
    AdamWStep s;
    s.lr = lr, s.beta1 = beta1, s.beta2 = beta2, s.eps = eps, s.grad_scale = grad_scale, s.grad_scale_at = nullptr;
    s.bias_correction1 = 1.0f - powf(beta1, (float)step);
    s.bias_correction2 = 1.0f - powf(beta2, (float)step);
    // Mix seed and step on the host into one 32-bit stream id; per-tensor streams are derived in the kernel.
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + (uint64_t)step * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    s.step_seed = (uint32_t)(x ^ (x >> 32));
    return s;
}

// The update of one value in registers: g the raw gradient, m and v updated in place, p the parameter (master
// copy or widened bf16); returns the new parameter. Shared by every AdamW kernel; each operation is spelled with its
// rounding (no contraction or fast-math division left to the compiler, which chose differently in the 4-wide
// kernel), so every kernel gives the same bits for the same element.
__device__ __forceinline__ float adamw_value(float grad, float& m, float& v, float p, float wd, const AdamWStep& s) {
    const float g = __fmul_rn(grad, s.grad_scale);
    m = __fmaf_rn(s.beta1, m, __fmul_rn(1.0f - s.beta1, g));
    v = __fmaf_rn(s.beta2, v, __fmul_rn(__fmul_rn(1.0f - s.beta2, g), g));
    const float mhat = __fdiv_rn(m, s.bias_correction1), vhat = __fdiv_rn(v, s.bias_correction2);
    const float step = __fmaf_rn(wd, p, __fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), s.eps)));
    return __fmaf_rn(-s.lr, step, p);
}

// The update of one element: `index` is its position in its tensor and `tensor_seed` the tensor's rounding stream,
// so the bf16 result depends only on the element, not on which kernel (whole tensors, 4 at a time, or a ZeRO
// shard: zero.cuh) or which rank updates it.
__device__ __forceinline__ void adamw_element(floatX* param, float* master, floatX grad, float* m, float* v, float wd,
                                              uint32_t index, uint32_t tensor_seed, const AdamWStep& s) {
    float mi = *m, vi = *v;
    const float p = adamw_value(to_float(grad), mi, vi, master ? *master : to_float(*param), wd, s);
    *m = mi;
    *v = vi;
    if (master) *master = p;
    store_param(param, p, index, tensor_seed);
}

// A kernel's step scalars, with the gradient scale read from the device where grad_scale_at says.
__device__ __forceinline__ AdamWStep resolve_step(AdamWStep s) {
    if (s.grad_scale_at) s.grad_scale = *s.grad_scale_at;
    return s;
}

// Tensor t's stochastic-rounding stream (blockIdx.y = t in the kernels below).
__device__ __forceinline__ uint32_t tensor_seed(int t, const AdamWStep& s) { return hash_u32((uint32_t)t, s.step_seed); }

__global__ void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v,
                             AdamWTensorTable table, AdamWStep step) {
    const AdamWStep s = resolve_step(step);
    const size_t offset = table.offset[blockIdx.y], size = table.size[blockIdx.y];
    const float wd = table.weight_decay[blockIdx.y];
    const uint32_t seed = tensor_seed(blockIdx.y, s);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += (size_t)gridDim.x * blockDim.x) {
        const size_t idx = offset + i;
        adamw_element(params + idx, master ? master + idx : nullptr, grads[idx], m + idx, v + idx, wd, (uint32_t)i,
                      seed, s);
    }
}

// The same, 4 elements per thread with 16-byte (fp32) and 8-byte (bf16) accesses, over the whole table in chunks of
// equal size: block b takes chunk b of the tensors' chunks numbered in table order, so every block has the same
// work and the last wave is short whatever the tensor sizes (with a grid-stride row of blocks per tensor, the
// largest tensors ran last on few blocks per SM). The update moves 28 bytes per parameter and is bound by memory;
// the optimizer state is touched once per step, so it is loaded and stored evict-first. kUnroll groups of 4 per
// thread, all loaded before any is computed: 1 by default, since more groups with fewer threads resident moved
// fewer bytes (dev/cuda/adamw; the timings are in docs/PERFORMANCE.md). Needs every tensor's offset and size to be multiples of 4
// (GPT-2's are: C % 8 == 0).
namespace adamw_detail {
constexpr int kDefaultUnroll = 1, kDefaultThreads = 256;
constexpr bool kDefaultEvictFirst = true;
__host__ __device__ inline size_t chunks(size_t size, size_t chunk) { return (size + chunk - 1) / chunk; }

template <bool kEvictFirst, typename T>
__device__ __forceinline__ T load(const T* p) { if constexpr (kEvictFirst) return __ldcs(p); else return *p; }
template <bool kEvictFirst, typename T>
__device__ __forceinline__ void store(T* p, T x) { if constexpr (kEvictFirst) __stcs(p, x); else *p = x; }
// 4 floatX as raw bits (8 bytes in bf16, 16 in fp32)
using Raw4 = std::conditional_t<sizeof(floatX) == 2, uint2, uint4>;
__device__ __forceinline__ float& component(float4& x, int k) { return k == 0 ? x.x : k == 1 ? x.y : k == 2 ? x.z : x.w; }
}  // namespace adamw_detail

template <int kUnroll = adamw_detail::kDefaultUnroll, int kThreads = adamw_detail::kDefaultThreads,
          bool kEvictFirst = adamw_detail::kDefaultEvictFirst>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel_chunks(floatX* params, float* master, const floatX* grads, float* m, float* v, AdamWTensorTable table,
                        int num_tensors, AdamWStep step) {
    using namespace adamw_detail;
    const AdamWStep s = resolve_step(step);
    constexpr size_t kChunk = 4 * kUnroll * kThreads;  // elements per block
    int t = 0;
    size_t chunk = blockIdx.x;
    while (t + 1 < num_tensors && chunk >= chunks(table.size[t], kChunk)) chunk -= chunks(table.size[t++], kChunk);
    const size_t size = table.size[t];
    const float wd = table.weight_decay[t];
    const uint32_t seed = tensor_seed(t, s);
    float4 g[kUnroll], mi[kUnroll], vi[kUnroll], p[kUnroll];
    size_t i[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
        i[u] = chunk * kChunk + 4 * ((size_t)u * kThreads + threadIdx.x);  // index in the tensor
        if (i[u] >= size) continue;
        const size_t idx = table.offset[t] + i[u];
        const Raw4 graw = load<kEvictFirst>(reinterpret_cast<const Raw4*>(grads + idx));
        const floatX* gx = reinterpret_cast<const floatX*>(&graw);
        g[u] = make_float4(to_float(gx[0]), to_float(gx[1]), to_float(gx[2]), to_float(gx[3]));
        mi[u] = load<kEvictFirst>(reinterpret_cast<const float4*>(m + idx));
        vi[u] = load<kEvictFirst>(reinterpret_cast<const float4*>(v + idx));
        if (master) {
            p[u] = load<kEvictFirst>(reinterpret_cast<const float4*>(master + idx));
        } else {
            const Raw4 praw = load<kEvictFirst>(reinterpret_cast<const Raw4*>(params + idx));
            const floatX* px = reinterpret_cast<const floatX*>(&praw);
            p[u] = make_float4(to_float(px[0]), to_float(px[1]), to_float(px[2]), to_float(px[3]));
        }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
        if (i[u] >= size) continue;
        const size_t idx = table.offset[t] + i[u];
        Raw4 out;
        floatX* ox = reinterpret_cast<floatX*>(&out);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            component(p[u], k) = adamw_value(component(g[u], k), component(mi[u], k), component(vi[u], k),
                                             component(p[u], k), wd, s);
            store_param(&ox[k], component(p[u], k), (uint32_t)(i[u] + k), seed);
        }
        store<kEvictFirst>(reinterpret_cast<float4*>(m + idx), mi[u]);
        store<kEvictFirst>(reinterpret_cast<float4*>(v + idx), vi[u]);
        if (master) store<kEvictFirst>(reinterpret_cast<float4*>(master + idx), p[u]);
        store<kEvictFirst>(reinterpret_cast<Raw4*>(params + idx), out);
    }
}

// Elements per block of adamw_kernel_chunks<kUnroll, kThreads>: the grid is the sum of every tensor's chunks.
constexpr size_t adamw_chunk_elements(int unroll = adamw_detail::kDefaultUnroll,
                                      int threads = adamw_detail::kDefaultThreads) {
    return 4 * (size_t)unroll * threads;
}
// Its grid: every tensor's chunks, in table order.
inline size_t adamw_chunk_blocks(const AdamWTensorTable& table, int num_tensors,
                                 int unroll = adamw_detail::kDefaultUnroll,
                                 int threads = adamw_detail::kDefaultThreads) {
    const size_t chunk = adamw_chunk_elements(unroll, threads);
    size_t blocks = 0;
    for (int t = 0; t < num_tensors; t++) blocks += adamw_detail::chunks(table.size[t], chunk);
    return blocks;
}

// s from adamw_step (its step >= 1: bias correction; its seed fixes the stochastic rounding: same seed + step ->
// same bits), with grad_scale_at set where the clipping factor is on the device.
inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v,
                         const AdamWTensorTable& table, int num_tensors, const AdamWStep& s, cudaStream_t stream = 0) {
    bool by_four = true;  // the pointers come from cudaMalloc'd blocks: 16-byte aligned at element multiples of 4
    for (int t = 0; t < num_tensors; t++) by_four = by_four && table.offset[t] % 4 == 0 && table.size[t] % 4 == 0;
    for (const void* p : {(const void*)params, (const void*)master, (const void*)grads, (const void*)m, (const void*)v})
        by_four = by_four && (uintptr_t)p % 16 == 0;
    if (by_four) {
        const size_t blocks = adamw_chunk_blocks(table, num_tensors);
        if (blocks == 0) return;
        adamw_kernel_chunks<<<(unsigned)blocks, adamw_detail::kDefaultThreads, 0, stream>>>(
            params, master, grads, m, v, table, num_tensors, s);
    } else {
        adamw_kernel<<<dim3(2 * device_sm_count(), num_tensors), 512, 0, stream>>>(params, master, grads, m, v, table,
                                                                                  s);
    }
    cudaCheckLaunch();
}
inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v,
                         const AdamWTensorTable& table, int num_tensors, float lr, float beta1, float beta2,
                         float eps, float grad_scale, int step, uint64_t seed, cudaStream_t stream = 0) {
    adamw_update(params, master, grads, m, v, table, num_tensors,
                 adamw_step(lr, beta1, beta2, eps, grad_scale, step, seed), stream);
}
