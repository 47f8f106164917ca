// Global L2 norm of all gradients, deterministic: a fixed grid sums squares into one fp32 partial per block,
// then one block adds the partials in order. The grid size is a constant, so the result does not depend on
// the device's SM count either.
#pragma once

#include "llmc/core/cuda_common.h"

constexpr int kGlobalNormBlocks = 512;
constexpr int kGlobalNormThreads = 512;

// 16-byte packs where x is 16-byte aligned (the gradients always are), then the elements past the last whole pack:
// element-wise 2-byte loads leave DRAM far from its bandwidth.
__global__ void global_norm_partials_kernel(float* partials, const floatX* x, size_t n) {
    float acc = 0.0f;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    const size_t packs = reinterpret_cast<uintptr_t>(x) % 16 == 0 ? n / x128::size : 0;
    for (size_t p = first; p < packs; p += stride) {
        const x128 v = load128cs(x + p * x128::size);
#pragma unroll
        for (int k = 0; k < x128::size; k++) acc += to_float(v[k]) * to_float(v[k]);
    }
    for (size_t i = packs * x128::size + first; i < n; i += stride) {
        float v = to_float(x[i]);
        acc += v * v;
    }
    acc = block_reduce_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// IEEE single-precision operations with subnormals kept, whatever -ftz (--use_fast_math) does to the C++ spelling:
// the floats the host's mulss / sqrtss / divss / comparisons give, where the host used to compute the clipping.
__device__ __forceinline__ float host_mul(float a, float b) {
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float host_sqrt(float a) {
    float r;
    asm("sqrt.rn.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
}
__device__ __forceinline__ float host_div(float a, float b) {
    float r;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ bool host_greater(float a, float b) {  // false when either is NaN
    unsigned int r;
    asm("{ .reg .pred p; setp.gt.f32 p, %1, %2; selp.u32 %0, 1, 0, p; }" : "=r"(r) : "f"(a), "f"(b));
    return r != 0;
}

// The norm into *out; with `square` also its square (rounded once, as a host float product: a ZeRO shard's norm is
// summed over ranks as squares).
__global__ void global_norm_finish_kernel(float* out, const float* partials, int num_partials, float* square) {
    float acc = 0.0f;
    for (int i = threadIdx.x; i < num_partials; i += blockDim.x) acc += partials[i];
    acc = block_reduce_sum(acc);
    if (threadIdx.x == 0) {
        const float norm = sqrtf(acc);
        *out = norm;
        if (square) *square = host_mul(norm, norm);
    }
}

// Clipping on the device, so the update needs no host round trip: from the norm (or, squared, its square summed over
// ranks) the norm and the factor the gradients are scaled by (grad_clip / norm where the norm exceeds grad_clip > 0,
// else 1), the floats the host's sqrtf and / gave.
__device__ __forceinline__ void clip_norm_and_scale(float norm_or_square, bool squared, float grad_clip, float* norm,
                                                    float* scale) {
    *norm = squared ? host_sqrt(norm_or_square) : norm_or_square;
    *scale = host_greater(grad_clip, 0.0f) && host_greater(*norm, grad_clip) ? host_div(grad_clip, *norm) : 1.0f;
}
// clip_state[0] = the norm, clip_state[1] = the factor
__global__ void clip_scale_kernel(const float* norm_or_square, int squared, float grad_clip, float* clip_state) {
    clip_norm_and_scale(*norm_or_square, squared != 0, grad_clip, &clip_state[0], &clip_state[1]);
}
inline void clip_scale(const float* norm_or_square, bool squared, float grad_clip, float* clip_state,
                       cudaStream_t stream) {
    clip_scale_kernel<<<1, 1, 0, stream>>>(norm_or_square, squared ? 1 : 0, grad_clip, clip_state);
    cudaCheckLaunch();
}

// scratch: global_norm_scratch_floats() floats; result lands in scratch[0] on the device (global_norm_queue: no host
// wait) and global_norm returns it.
inline size_t global_norm_scratch_floats() { return kGlobalNormBlocks + 1; }
inline void global_norm_queue(const floatX* x, size_t n, float* scratch, cudaStream_t stream = 0) {
    global_norm_partials_kernel<<<kGlobalNormBlocks, kGlobalNormThreads, 0, stream>>>(scratch + 1, x, n);
    cudaCheckLaunch();
    global_norm_finish_kernel<<<1, 1024, 0, stream>>>(scratch, scratch + 1, kGlobalNormBlocks, nullptr);
    cudaCheckLaunch();
}
inline float global_norm(const floatX* x, size_t n, float* scratch, cudaStream_t stream = 0) {
    global_norm_queue(x, n, scratch, stream);
    float norm = 0.0f;
    cudaCheck(cudaMemcpyAsync(&norm, scratch, sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    return norm;
}
