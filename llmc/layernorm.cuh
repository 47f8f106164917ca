// LayerNorm over the channel dimension, eps 1e-5 as in GPT-2, with mean and 1/std saved for backward.
// fused_residual_layernorm_forward adds the residual stream and normalises in one kernel (the block's
// output leaves the residual add and goes straight into the next LayerNorm).
// Backward: dinp accumulates (it is the residual stream's gradient); dweight/dbias are reduced over rows
// deterministically: fixed chunks of rows into fp32 partials, then one ordered sum per channel. No atomics.
#pragma once

#include "cuda_common.h"

constexpr float kLayerNormEpsilon = 1e-5f;

// One warp per row, 128-bit packs (C is a multiple of x128::size). `residual_a`/`residual_b` non-null:
// residual_out = a + b is written and normalised.
__global__ void layernorm_forward_kernel(floatX* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                         floatX* residual_out, const floatX* inp, const floatX* residual_a,
                                         const floatX* residual_b, const floatX* __restrict__ weight,
                                         const floatX* __restrict__ bias, int N, int C) {
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (row >= N) return;
    const int packs = C / x128::size;
    const size_t base = (size_t)row * C;
    const floatX* x = inp + base;
    if (residual_a) {
        // The stored (rounded) sum is what we normalise, so the backward sees the same input. Each lane reads
        // back only the packs it wrote itself.
        for (int pk = lane; pk < packs; pk += kWarpSize) {
            const size_t at = base + pk * x128::size;
            const x128 a = load128cs(residual_a + at), b = load128cs(residual_b + at);
            x128 r;
            for (int k = 0; k < x128::size; k++) r[k] = from_float<floatX>(to_float(a[k]) + to_float(b[k]));
            store128(residual_out + at, r);
        }
        x = residual_out + base;
    }
    float sum = 0.0f;
    for (int pk = lane; pk < packs; pk += kWarpSize) {
        const x128 v = load128(x + pk * x128::size);
        for (int k = 0; k < x128::size; k++) sum += to_float(v[k]);
    }
    const float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
    for (int pk = lane; pk < packs; pk += kWarpSize) {
        const x128 v = load128(x + pk * x128::size);
        for (int k = 0; k < x128::size; k++) {
            const float d = to_float(v[k]) - m;
            var += d * d;
        }
    }
    const float s = rsqrtf(warp_reduce_sum(var) / C + kLayerNormEpsilon);
    for (int pk = lane; pk < packs; pk += kWarpSize) {
        const int c = pk * x128::size;
        const x128 v = load128cs(x + c), w = load128(weight + c), b = load128(bias + c);
        x128 o;
        for (int k = 0; k < x128::size; k++) {
            o[k] = from_float<floatX>((to_float(v[k]) - m) * s * to_float(w[k]) + to_float(b[k]));
        }
        store128(out + base + c, o);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

inline void check_layernorm_channels(int C) {
    if (C % x128::size != 0) {
        fprintf(stderr, "error: layernorm: C = %d must be a multiple of %d\n", C, x128::size);
        exit(EXIT_FAILURE);
    }
}

inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C, cudaStream_t stream = 0) {
    check_layernorm_channels(C);
    const int threads = 256, rows_per_block = threads / kWarpSize;
    layernorm_forward_kernel<<<ceil_div(N, rows_per_block), threads, 0, stream>>>(out, mean, rstd, nullptr, inp,
                                                                                  nullptr, nullptr, weight, bias, N, C);
    cudaCheckLaunch();
}

// residual_out = a + b; out = LayerNorm(residual_out).
inline void fused_residual_layernorm_forward(floatX* residual_out, floatX* out, float* mean, float* rstd,
                                             const floatX* a, const floatX* b, const floatX* weight,
                                             const floatX* bias, int N, int C, cudaStream_t stream = 0) {
    check_layernorm_channels(C);
    const int threads = 256, rows_per_block = threads / kWarpSize;
    layernorm_forward_kernel<<<ceil_div(N, rows_per_block), threads, 0, stream>>>(
        out, mean, rstd, residual_out, nullptr, a, b, weight, bias, N, C);
    cudaCheckLaunch();
}

// dinp += LayerNorm backward; one warp per row, 128-bit packs.
__global__ void layernorm_backward_dinp_kernel(floatX* __restrict__ dinp, const floatX* __restrict__ dout,
                                               const floatX* __restrict__ inp, const floatX* __restrict__ weight,
                                               const float* __restrict__ mean, const float* __restrict__ rstd, int N,
                                               int C) {
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (row >= N) return;
    const int packs = C / x128::size;
    const size_t base = (size_t)row * C;
    const float m = mean[row], s = rstd[row];
    float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
    for (int pk = lane; pk < packs; pk += kWarpSize) {
        const int c = pk * x128::size;
        const x128 d = load128(dout + base + c), x = load128(inp + base + c), w = load128(weight + c);
        for (int k = 0; k < x128::size; k++) {
            const float norm = (to_float(x[k]) - m) * s;
            const float dnorm = to_float(d[k]) * to_float(w[k]);
            dnorm_sum += dnorm;
            dnorm_norm_sum += dnorm * norm;
        }
    }
    const float dnorm_mean = warp_reduce_sum(dnorm_sum) / C;
    const float dnorm_norm_mean = warp_reduce_sum(dnorm_norm_sum) / C;
    for (int pk = lane; pk < packs; pk += kWarpSize) {
        const int c = pk * x128::size;
        const x128 d = load128(dout + base + c), x = load128(inp + base + c), w = load128(weight + c);
        x128 g = load128(dinp + base + c);
        for (int k = 0; k < x128::size; k++) {
            const float norm = (to_float(x[k]) - m) * s;
            const float dnorm = to_float(d[k]) * to_float(w[k]);
            g[k] = from_float<floatX>(to_float(g[k]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s);
        }
        store128(dinp + base + c, g);
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
    check_layernorm_channels(C);
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
