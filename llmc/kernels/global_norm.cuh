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

__global__ void global_norm_finish_kernel(float* out, const float* partials, int num_partials) {
    float acc = 0.0f;
    for (int i = threadIdx.x; i < num_partials; i += blockDim.x) acc += partials[i];
    acc = block_reduce_sum(acc);
    if (threadIdx.x == 0) *out = sqrtf(acc);
}

// scratch: global_norm_scratch_floats() floats; result lands in scratch[0] on the device and is returned.
inline size_t global_norm_scratch_floats() { return kGlobalNormBlocks + 1; }
inline float global_norm(const floatX* x, size_t n, float* scratch, cudaStream_t stream = 0) {
    global_norm_partials_kernel<<<kGlobalNormBlocks, kGlobalNormThreads, 0, stream>>>(scratch + 1, x, n);
    cudaCheckLaunch();
    global_norm_finish_kernel<<<1, 1024, 0, stream>>>(scratch, scratch + 1, kGlobalNormBlocks);
    cudaCheckLaunch();
    float norm = 0.0f;
    cudaCheck(cudaMemcpyAsync(&norm, scratch, sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    return norm;
}
