// AdamW over every parameter tensor in one launch (grid.y = tensor, so each tensor gets its own weight decay
// and its own stochastic-rounding stream). fp32 optimizer state m, v; fp32 master weights when the parameters
// are bf16 (the update is applied to the master copy, then rounded stochastically into the bf16 copy).
// Without master weights (bf16 params only) the bf16 value is the starting point. Same math as torch.optim.AdamW:
//   m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;  p -= lr·( m/(1-β1^t) / (sqrt(v/(1-β2^t)) + eps) + wd·p )
#pragma once

#include "cuda_common.h"

constexpr int kAdamWMaxTensors = 16;

struct AdamWTensorTable {
    size_t offset[kAdamWMaxTensors];
    size_t size[kAdamWMaxTensors];
    float weight_decay[kAdamWMaxTensors];
};

__global__ void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v,
                             AdamWTensorTable table, float lr, float beta1, float beta2, float bias_correction1,
                             float bias_correction2, float eps, float grad_scale, uint32_t step_seed) {
    const int t = blockIdx.y;
    const size_t offset = table.offset[t], size = table.size[t];
    const float wd = table.weight_decay[t];
    const uint32_t seed = hash_u32((uint32_t)t, step_seed);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += (size_t)gridDim.x * blockDim.x) {
        const size_t idx = offset + i;
        const float g = to_float(grads[idx]) * grad_scale;
        const float mi = beta1 * m[idx] + (1.0f - beta1) * g;
        const float vi = beta2 * v[idx] + (1.0f - beta2) * g * g;
        m[idx] = mi;
        v[idx] = vi;
        const float mhat = mi / bias_correction1, vhat = vi / bias_correction2;
        float p = master ? master[idx] : to_float(params[idx]);
        p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
        if (master) master[idx] = p;
        store_param(params + idx, p, (uint32_t)i, seed);
    }
}

// step >= 1 (bias correction); seed fixes the stochastic rounding (same seed + step -> same bits).
inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v,
                         const AdamWTensorTable& table, int num_tensors, float lr, float beta1, float beta2,
                         float eps, float grad_scale, int step, uint64_t seed, cudaStream_t stream = 0) {
    const float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    // Mix seed and step on the host into one 32-bit stream id; per-tensor streams are derived in the kernel.
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + (uint64_t)step * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    const uint32_t step_seed = (uint32_t)(x ^ (x >> 32));
    const int threads = 512;
    const dim3 grid(2 * device_sm_count(), num_tensors);
    adamw_kernel<<<grid, threads, 0, stream>>>(params, master, grads, m, v, table, lr, beta1, beta2, bc1, bc2, eps,
                                               grad_scale, step_seed);
    cudaCheckLaunch();
}
