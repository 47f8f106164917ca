// LayerNorm over the channel dimension, eps 1e-5 as in GPT-2, with mean and 1/std saved for backward.
// fused_residual_layernorm_forward adds the residual stream and normalises in one kernel (the block's
// output leaves the residual add and goes straight into the next LayerNorm).
// Backward: dinp accumulates (it is the residual stream's gradient); dweight/dbias are reduced over rows
// deterministically: fixed chunks of rows into fp32 partials, then one ordered sum per channel. No atomics.
#pragma once

#include "cuda_common.h"

constexpr float kLayerNormEps = 1e-5f;

// One warp per row. `residual_a`/`residual_b` non-null: residual_out = a + b is written and normalised.
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, floatX* residual_out,
                                         const floatX* inp, const floatX* residual_a, const floatX* residual_b,
                                         const floatX* weight, const floatX* bias, int N, int C) {
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (row >= N) return;
    const size_t base = (size_t)row * C;
    const floatX* x = inp + base;
    if (residual_a) {
        // The stored (rounded) sum is what we normalise, so the backward sees the same input.
        for (int c = lane; c < C; c += kWarpSize) {
            residual_out[base + c] = from_float<floatX>(to_float(residual_a[base + c]) + to_float(residual_b[base + c]));
        }
        __syncwarp();
        x = residual_out + base;
    }
    float sum = 0.0f;
    for (int c = lane; c < C; c += kWarpSize) sum += to_float(x[c]);
    const float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += kWarpSize) {
        float d = to_float(x[c]) - m;
        var += d * d;
    }
    const float s = rsqrtf(warp_reduce_sum(var) / C + kLayerNormEps);
    for (int c = lane; c < C; c += kWarpSize) {
        float n = (to_float(x[c]) - m) * s;
        out[base + c] = from_float<floatX>(n * to_float(weight[c]) + to_float(bias[c]));
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C, cudaStream_t stream = 0) {
    const int threads = 256, rows_per_block = threads / kWarpSize;
    layernorm_forward_kernel<<<ceil_div(N, rows_per_block), threads, 0, stream>>>(out, mean, rstd, nullptr, inp,
                                                                                  nullptr, nullptr, weight, bias, N, C);
    cudaCheckLaunch();
}

// residual_out = a + b; out = LayerNorm(residual_out).
inline void fused_residual_layernorm_forward(floatX* residual_out, floatX* out, float* mean, float* rstd,
                                             const floatX* a, const floatX* b, const floatX* weight,
                                             const floatX* bias, int N, int C, cudaStream_t stream = 0) {
    const int threads = 256, rows_per_block = threads / kWarpSize;
    layernorm_forward_kernel<<<ceil_div(N, rows_per_block), threads, 0, stream>>>(
        out, mean, rstd, residual_out, nullptr, a, b, weight, bias, N, C);
    cudaCheckLaunch();
}

// dinp += LayerNorm backward; one warp per row.
__global__ void layernorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                               const floatX* weight, const float* mean, const float* rstd, int N,
                                               int C) {
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (row >= N) return;
    const size_t base = (size_t)row * C;
    const float m = mean[row], s = rstd[row];
    float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
    for (int c = lane; c < C; c += kWarpSize) {
        float norm = (to_float(inp[base + c]) - m) * s;
        float dnorm = to_float(dout[base + c]) * to_float(weight[c]);
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * norm;
    }
    const float dnorm_mean = warp_reduce_sum(dnorm_sum) / C;
    const float dnorm_norm_mean = warp_reduce_sum(dnorm_norm_sum) / C;
    for (int c = lane; c < C; c += kWarpSize) {
        float norm = (to_float(inp[base + c]) - m) * s;
        float dnorm = to_float(dout[base + c]) * to_float(weight[c]);
        float dx = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        dinp[base + c] = from_float<floatX>(to_float(dinp[base + c]) + dx);
    }
}

constexpr int kLayerNormRowsPerChunk = 128;
inline int layernorm_num_chunks(int N) { return ceil_div(N, kLayerNormRowsPerChunk); }
inline size_t layernorm_backward_scratch_floats(int N, int C) { return (size_t)layernorm_num_chunks(N) * 2 * C; }

// partials[chunk][0][c] = Σ dout·norm, partials[chunk][1][c] = Σ dout over the chunk's rows.
__global__ void layernorm_backward_params_partials_kernel(float* partials, const floatX* dout, const floatX* inp,
                                                          const float* mean, const float* rstd, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int r0 = blockIdx.y * kLayerNormRowsPerChunk, r1 = min(N, r0 + kLayerNormRowsPerChunk);
    float dw = 0.0f, db = 0.0f;
    for (int r = r0; r < r1; r++) {
        float d = to_float(dout[(size_t)r * C + c]);
        float norm = (to_float(inp[(size_t)r * C + c]) - mean[r]) * rstd[r];
        dw += d * norm;
        db += d;
    }
    partials[((size_t)blockIdx.y * 2) * C + c] = dw;
    partials[((size_t)blockIdx.y * 2 + 1) * C + c] = db;
}

__global__ void layernorm_backward_params_finish_kernel(floatX* dweight, floatX* dbias, const float* partials,
                                                        int num_chunks, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dw = 0.0f, db = 0.0f;
    for (int k = 0; k < num_chunks; k++) {
        dw += partials[((size_t)k * 2) * C + c];
        db += partials[((size_t)k * 2 + 1) * C + c];
    }
    dweight[c] = from_float<floatX>(to_float(dweight[c]) + dw);
    dbias[c] = from_float<floatX>(to_float(dbias[c]) + db);
}

// dinp, dweight, dbias accumulate. scratch: layernorm_backward_scratch_floats(N, C) floats.
inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                               const floatX* weight, const float* mean, const float* rstd, int N, int C,
                               float* scratch, cudaStream_t stream = 0) {
    const int threads = 256, rows_per_block = threads / kWarpSize;
    layernorm_backward_dinp_kernel<<<ceil_div(N, rows_per_block), threads, 0, stream>>>(dinp, dout, inp, weight, mean,
                                                                                        rstd, N, C);
    cudaCheckLaunch();
    const int chunks = layernorm_num_chunks(N);
    layernorm_backward_params_partials_kernel<<<dim3(ceil_div(C, threads), chunks), threads, 0, stream>>>(
        scratch, dout, inp, mean, rstd, N, C);
    cudaCheckLaunch();
    layernorm_backward_params_finish_kernel<<<ceil_div(C, threads), threads, 0, stream>>>(dweight, dbias, scratch,
                                                                                         chunks, C);
    cudaCheckLaunch();
}
