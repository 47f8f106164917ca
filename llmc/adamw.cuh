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

// One step's scalars: the learning rate, the moments' decay and bias corrections, the gradient scale (clipping),
// and the stochastic-rounding stream id mixed on the host from the seed and the step.
struct AdamWStep {
    float lr, beta1, beta2, bias_correction1, bias_correction2, eps, grad_scale;
    uint32_t step_seed;
};

// step >= 1 (bias correction); seed fixes the stochastic rounding (same seed + step -> same bits).
inline AdamWStep adamw_step(float lr, float beta1, float beta2, float eps, float grad_scale, int step, uint64_t seed) {
    AdamWStep s;
    s.lr = lr, s.beta1 = beta1, s.beta2 = beta2, s.eps = eps, s.grad_scale = grad_scale;
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

// The update of one element: `index` is its position in its tensor and `tensor_seed` the tensor's rounding stream,
// so the bf16 result depends only on the element, not on which kernel (whole tensors, or a ZeRO shard: zero.cuh)
// or which rank updates it.
__device__ __forceinline__ void adamw_element(floatX* param, float* master, floatX grad, float* m, float* v, float wd,
                                              uint32_t index, uint32_t tensor_seed, const AdamWStep& s) {
    const float g = to_float(grad) * s.grad_scale;
    const float mi = s.beta1 * *m + (1.0f - s.beta1) * g;
    const float vi = s.beta2 * *v + (1.0f - s.beta2) * g * g;
    *m = mi;
    *v = vi;
    const float mhat = mi / s.bias_correction1, vhat = vi / s.bias_correction2;
    float p = master ? *master : to_float(*param);
    p -= s.lr * (mhat / (sqrtf(vhat) + s.eps) + wd * p);
    if (master) *master = p;
    store_param(param, p, index, tensor_seed);
}

__global__ void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v,
                             AdamWTensorTable table, AdamWStep s) {
    const int t = blockIdx.y;
    const size_t offset = table.offset[t], size = table.size[t];
    const float wd = table.weight_decay[t];
    const uint32_t seed = hash_u32((uint32_t)t, s.step_seed);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += (size_t)gridDim.x * blockDim.x) {
        const size_t idx = offset + i;
        adamw_element(params + idx, master ? master + idx : nullptr, grads[idx], m + idx, v + idx, wd, (uint32_t)i,
                      seed, s);
    }
}

// step >= 1 (bias correction); seed fixes the stochastic rounding (same seed + step -> same bits).
inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v,
                         const AdamWTensorTable& table, int num_tensors, float lr, float beta1, float beta2,
                         float eps, float grad_scale, int step, uint64_t seed, cudaStream_t stream = 0) {
    const AdamWStep s = adamw_step(lr, beta1, beta2, eps, grad_scale, step, seed);
    const int threads = 512;
    const dim3 grid(2 * device_sm_count(), num_tensors);
    adamw_kernel<<<grid, threads, 0, stream>>>(params, master, grads, m, v, table, s);
    cudaCheckLaunch();
}
