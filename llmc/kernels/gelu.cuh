// GELU, tanh form as in GPT-2: gelu(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
// Used when the GELU is not fused into the matmul epilogue (FP32 builds, recompute, FP8 runs). The backward can also
// fold max |output| into an FP8 tensor's amax (llmc/kernels/fp8/amax.cuh), so its cast needs no pass of its own to
// find it; the outputs are the same bits either way. (FP8 runs never write the forward's output: their casts take
// the GELU as they read, llmc/kernels/fp8/cast_transpose.cuh.)
#pragma once

#include "llmc/core/cuda_common.h"
#include "llmc/kernels/fp8/amax.cuh"

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

// gelu(x), given t = tanh(√(2/π)·(x + 0.044715·x³)).
__device__ __forceinline__ float gelu_given_tanh(float x, float tanh_out) { return 0.5f * x * (1.0f + tanh_out); }
__device__ __forceinline__ float gelu_value(float x) {
    float cube = 0.044715f * x * x * x;
    return gelu_given_tanh(x, tanhf(kGeluScale * (x + cube)));
}
// d gelu / dx, given t = tanh(√(2/π)·(x + 0.044715·x³)).
__device__ __forceinline__ float gelu_derivative_given_tanh(float x, float tanh_out) {
    float sech2 = 1.0f - tanh_out * tanh_out;
    return 0.5f * (1.0f + tanh_out) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}
__device__ __forceinline__ float gelu_derivative(float x) {
    float cube = 0.044715f * x * x * x;
    return gelu_derivative_given_tanh(x, tanhf(kGeluScale * (x + cube)));
}

// The hardware tanh (tanh.approx.f32, relative error about 2^-11, far below bf16's 2^-8): one MUFU instruction
// instead of tanhf's ~20, for epilogues that apply the GELU or its derivative to every output of a GEMM.
__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// gelu(x) and gelu'(x) together from one hardware tanh, in fewer operations than the two formulas above (the GELU
// backward epilogue computes both for every element of its tile): with t = tanh(√(2/π)·x·(1 + 0.044715·x²)) and
// a = (1 + t)/2, so that 1 − t² = 2a(1 − t),
//   gelu(x) = x·a,   gelu'(x) = a + a·x·(1 − t)·√(2/π)·(1 + 3·0.044715·x²).
struct GeluAndSlope {
    float value, slope;
};
__device__ __forceinline__ GeluAndSlope gelu_and_slope_fast(float x) {
    constexpr float k0 = kGeluScale, k1 = kGeluScale * 0.044715f, k3 = kGeluScale * 3.0f * 0.044715f;
    const float u = x * x;
    const float t = tanh_approx(x * fmaf(k1, u, k0));
    const float a = fmaf(0.5f, t, 0.5f);
    return {x * a, fmaf(a * fmaf(-x, t, x), fmaf(k3, u, k0), a)};
}

// n must be a multiple of x128::size (the model's B*T*4C always is).
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= n) return;
    x128 in = load128cs(inp + i), res;
    for (int k = 0; k < x128::size; k++) res[k] = from_float<floatX>(gelu_value(to_float(in[k])));
    store128(out + i, res);
}

// d_in_out holds dL/d(gelu output) on entry and dL/d(gelu input) on exit. amax: null, or max |dinp| folded into it.
__global__ void __launch_bounds__(kAmaxBlockThreads) gelu_backward_inplace_kernel(floatX* d_in_out, const floatX* inp,
                                                                                  size_t n, float* amax) {
    __shared__ unsigned int warp_max[kAmaxBlockThreads / 32];
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    unsigned int m = 0;
    if (i < n) {
        x128 d = load128(d_in_out + i), in = load128cs(inp + i);
        for (int k = 0; k < x128::size; k++) {
            d[k] = from_float<floatX>(to_float(d[k]) * gelu_derivative(to_float(in[k])));
            m = max(m, amax_bits(to_float(d[k])));
        }
        store128(d_in_out + i, d);
    }
    if (amax) fold_block_amax(m, amax, warp_max);
}

inline void check_packed_size(size_t n, const char* who) {
    if (n % x128::size != 0) {
        fprintf(stderr, "error: %s: %zu elements is not a multiple of %d\n", who, n, x128::size);
        exit(EXIT_FAILURE);
    }
}

inline void gelu_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t stream = 0) {
    check_packed_size(n, "gelu_forward");
    const int threads = 256;
    gelu_forward_kernel<<<ceil_div(n / x128::size, threads), threads, 0, stream>>>(out, inp, n);
    cudaCheckLaunch();
}
inline void gelu_backward_inplace(floatX* d_in_out, const floatX* inp, size_t n, cudaStream_t stream = 0,
                                  float* amax = nullptr) {
    check_packed_size(n, "gelu_backward");
    const int threads = kAmaxBlockThreads;
    gelu_backward_inplace_kernel<<<ceil_div(n / x128::size, threads), threads, 0, stream>>>(d_in_out, inp, n, amax);
    cudaCheckLaunch();
}
