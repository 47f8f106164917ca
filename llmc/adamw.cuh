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

// Tensor t's stochastic-rounding stream (blockIdx.y = t in the kernels below).
__device__ __forceinline__ uint32_t tensor_seed(int t, const AdamWStep& s) { return hash_u32((uint32_t)t, s.step_seed); }

__global__ void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v,
                             AdamWTensorTable table, AdamWStep s) {
    const size_t offset = table.offset[blockIdx.y], size = table.size[blockIdx.y];
    const float wd = table.weight_decay[blockIdx.y];
    const uint32_t seed = tensor_seed(blockIdx.y, s);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += (size_t)gridDim.x * blockDim.x) {
        const size_t idx = offset + i;
        adamw_element(params + idx, master ? master + idx : nullptr, grads[idx], m + idx, v + idx, wd, (uint32_t)i,
                      seed, s);
    }
}

// The same, 4 elements per thread with 16-byte (fp32) and 8-byte (bf16) accesses: the update moves 28 bytes per
// parameter and is bound by memory, which the scalar kernel's 2-byte accesses of gradients and parameters leave
// partly idle. Needs every tensor's offset and size to be multiples of 4 (GPT-2's are: C % 8 == 0).
template <typename T>
struct alignas(4 * sizeof(T)) Four {
    T x[4];
};
__global__ void adamw_kernel_x4(floatX* params, float* master, const floatX* grads, float* m, float* v,
                                AdamWTensorTable table, AdamWStep s) {
    const size_t offset = table.offset[blockIdx.y], size = table.size[blockIdx.y];
    const float wd = table.weight_decay[blockIdx.y];
    const uint32_t seed = tensor_seed(blockIdx.y, s);
    const size_t stride = 4 * (size_t)gridDim.x * blockDim.x;
    for (size_t i = 4 * ((size_t)blockIdx.x * blockDim.x + threadIdx.x); i < size; i += stride) {
        const size_t idx = offset + i;
        const Four<floatX> g = *reinterpret_cast<const Four<floatX>*>(grads + idx);
        Four<float> mi = *reinterpret_cast<const Four<float>*>(m + idx);
        Four<float> vi = *reinterpret_cast<const Four<float>*>(v + idx);
        Four<float> p;
        if (master) {
            p = *reinterpret_cast<const Four<float>*>(master + idx);
        } else {
            const Four<floatX> q = *reinterpret_cast<const Four<floatX>*>(params + idx);
            for (int k = 0; k < 4; k++) p.x[k] = to_float(q.x[k]);
        }
        Four<floatX> out;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            p.x[k] = adamw_value(to_float(g.x[k]), mi.x[k], vi.x[k], p.x[k], wd, s);
            store_param(&out.x[k], p.x[k], (uint32_t)(i + k), seed);
        }
        *reinterpret_cast<Four<float>*>(m + idx) = mi;
        *reinterpret_cast<Four<float>*>(v + idx) = vi;
        if (master) *reinterpret_cast<Four<float>*>(master + idx) = p;
        *reinterpret_cast<Four<floatX>*>(params + idx) = out;
    }
}

// step >= 1 (bias correction); seed fixes the stochastic rounding (same seed + step -> same bits).
inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v,
                         const AdamWTensorTable& table, int num_tensors, float lr, float beta1, float beta2,
                         float eps, float grad_scale, int step, uint64_t seed, cudaStream_t stream = 0) {
    const AdamWStep s = adamw_step(lr, beta1, beta2, eps, grad_scale, step, seed);
    bool by_four = true;  // the pointers come from cudaMalloc'd blocks: 16-byte aligned at element multiples of 4
    for (int t = 0; t < num_tensors; t++) by_four = by_four && table.offset[t] % 4 == 0 && table.size[t] % 4 == 0;
    for (const void* p : {(const void*)params, (const void*)master, (const void*)grads, (const void*)m, (const void*)v})
        by_four = by_four && (uintptr_t)p % 16 == 0;
    const int threads = 512;
    const dim3 grid(2 * device_sm_count(), num_tensors);
    if (by_four) adamw_kernel_x4<<<grid, threads, 0, stream>>>(params, master, grads, m, v, table, s);
    else adamw_kernel<<<grid, threads, 0, stream>>>(params, master, grads, m, v, table, s);
    cudaCheckLaunch();
}
