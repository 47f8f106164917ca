// LayerNorm over the channel dimension, eps kLayerNormEps (gpt2_config.h), with mean and 1/std saved for backward.
// fused_residual_layernorm_forward adds the residual stream and normalises in one kernel (the block's
// output leaves the residual add and goes straight into the next LayerNorm).
// Backward: dinp accumulates (it is the residual stream's gradient); dweight/dbias are reduced over rows
// deterministically: fixed chunks of rows into fp32 partials, then one ordered sum per channel. No atomics.
#pragma once

#include <type_traits>

#include "cuda_common.h"
#include "gpt2_config.h"

// One warp per row, 128-bit packs (C is a multiple of x128::size), the row held in registers: every load of the
// row is issued at once, so a row costs one memory latency, not one per pass. kPacks: packs per lane the kernel
// holds (C <= kPacks · 32 · x128::size; layernorm_packs picks the instance). kWeightsEarly: the weights and biases
// are loaded with the row (generation's decode step runs a few rows, where latency is all there is: 4.5 µs per
// call at 64 rows when each pass re-read the row); else they are read in the last pass, from L1/L2, where every
// row finds them: the registers they would hold cost occupancy on a training batch (212 registers at 8 packs).
// `residual_a`/`residual_b` non-null: residual_out = a + b is written and normalised.
constexpr int kLayerNormForwardThreads = 256;
template <int kPacks, bool kWeightsEarly>
__global__ void __launch_bounds__(kLayerNormForwardThreads)
    layernorm_forward_kernel(floatX* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                             floatX* residual_out, const floatX* inp, const floatX* residual_a,
                             const floatX* residual_b, const floatX* __restrict__ weight,
                             const floatX* __restrict__ bias, int N, int C) {
    pdl_trigger_and_wait();  // launched as a programmatic dependent (pdl): everything below reads its output
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (row >= N) return;
    const int packs = C / x128::size;
    const size_t base = (size_t)row * C;
    x128 v[kPacks], w[kWeightsEarly ? kPacks : 1], b[kWeightsEarly ? kPacks : 1];
#pragma unroll
    for (int i = 0; i < kPacks; i++) {
        const int c = (lane + i * kWarpSize) * x128::size;
        if (c < C) {
            if (residual_a) {
                // The stored (rounded) sum is what we normalise, so the backward sees the same input.
                const x128 ra = load128cs(residual_a + base + c), rb = load128cs(residual_b + base + c);
                for (int k = 0; k < x128::size; k++) v[i][k] = from_float<floatX>(to_float(ra[k]) + to_float(rb[k]));
            } else {
                v[i] = load128cs(inp + base + c);
            }
            if constexpr (kWeightsEarly) w[i] = load128(weight + c), b[i] = load128(bias + c);
        }
    }
    if (residual_a) {
#pragma unroll
        for (int i = 0; i < kPacks; i++)
            if (lane + i * kWarpSize < packs) store128(residual_out + base + (lane + i * kWarpSize) * x128::size, v[i]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPacks; i++)
        if (lane + i * kWarpSize < packs)
            for (int k = 0; k < x128::size; k++) sum += to_float(v[i][k]);
    const float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
#pragma unroll
    for (int i = 0; i < kPacks; i++)
        if (lane + i * kWarpSize < packs)
            for (int k = 0; k < x128::size; k++) {
                const float d = to_float(v[i][k]) - m;
                var += d * d;
            }
    const float s = rsqrtf(warp_reduce_sum(var) / C + (float)kLayerNormEps);
#pragma unroll
    for (int i = 0; i < kPacks; i++) {
        if (lane + i * kWarpSize < packs) {
            const int c = (lane + i * kWarpSize) * x128::size;
            const x128 wi = kWeightsEarly ? w[kWeightsEarly ? i : 0] : load128(weight + c);
            const x128 bi = kWeightsEarly ? b[kWeightsEarly ? i : 0] : load128(bias + c);
            x128 o;
            for (int k = 0; k < x128::size; k++)
                o[k] = from_float<floatX>((to_float(v[i][k]) - m) * s * to_float(wi[k]) + to_float(bi[k]));
            store128(out + base + c, o);
        }
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// The most channels a warp holds in registers: 16 packs per lane (4096 bf16, 2048 fp32; GPT-2 goes to 1600).
constexpr int kLayerNormMaxChannels = 16 * kWarpSize * x128::size;

inline void check_layernorm_channels(int C) {
    if (C % x128::size != 0 || C > kLayerNormMaxChannels) {
        fprintf(stderr, "error: layernorm: C = %d must be a multiple of %d, at most %d\n", C, x128::size,
                kLayerNormMaxChannels);
        exit(EXIT_FAILURE);
    }
}

// Calls f(std::integral_constant<int, P>()) with P the packs per lane a row of C channels needs, rounded up to an
// instance (1 to 8 exactly, then 12 and 16): registers not needed are occupancy lost. GPT-2 in bf16 needs 1 to 7;
// the 12 and 16 instances (fp32 above 1024 channels, bf16 above 2048) spill a few hundred bytes.
template <typename F>
inline void layernorm_packs(int C, F&& f) {
    const int per_lane = ceil_div(C / x128::size, kWarpSize);
    switch (per_lane) {
        case 1: f(std::integral_constant<int, 1>()); break;
        case 2: f(std::integral_constant<int, 2>()); break;
        case 3: f(std::integral_constant<int, 3>()); break;
        case 4: f(std::integral_constant<int, 4>()); break;
        case 5: f(std::integral_constant<int, 5>()); break;
        case 6: f(std::integral_constant<int, 6>()); break;
        case 7: f(std::integral_constant<int, 7>()); break;
        case 8: f(std::integral_constant<int, 8>()); break;
        default:
            if (per_lane <= 12) f(std::integral_constant<int, 12>());
            else f(std::integral_constant<int, 16>());
    }
}

// pdl: launched as a programmatic dependent of the kernel before it (generation's decode step, where a few rows
// make the launch the larger part). The weights come early when the rows fill at most one wave of blocks.
inline void launch_layernorm_forward(floatX* out, float* mean, float* rstd, floatX* residual_out, const floatX* inp,
                                     const floatX* a, const floatX* b, const floatX* weight, const floatX* bias, int N,
                                     int C, cudaStream_t stream, bool pdl) {
    const int rows_per_block = kLayerNormForwardThreads / kWarpSize, blocks = ceil_div(N, rows_per_block);
    const bool weights_early = blocks <= device_sm_count();
    PdlLaunch launch(dim3(blocks), dim3(kLayerNormForwardThreads), 0, stream, pdl);
    layernorm_packs(C, [&](auto packs) {
        auto kernel = weights_early ? layernorm_forward_kernel<decltype(packs)::value, true>
                                    : layernorm_forward_kernel<decltype(packs)::value, false>;
        cudaCheck(cudaLaunchKernelEx(&launch.config, kernel, out, mean, rstd, residual_out, inp, a, b, weight, bias,
                                     N, C));
    });
}

inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C, cudaStream_t stream = 0, bool pdl = false) {
    check_layernorm_channels(C);
    launch_layernorm_forward(out, mean, rstd, nullptr, inp, nullptr, nullptr, weight, bias, N, C, stream, pdl);
}

// residual_out = a + b; out = LayerNorm(residual_out).
inline void fused_residual_layernorm_forward(floatX* residual_out, floatX* out, float* mean, float* rstd,
                                             const floatX* a, const floatX* b, const floatX* weight,
                                             const floatX* bias, int N, int C, cudaStream_t stream = 0,
                                             bool pdl = false) {
    check_layernorm_channels(C);
    launch_layernorm_forward(out, mean, rstd, residual_out, nullptr, a, b, weight, bias, N, C, stream, pdl);
}

// ---------------------------------------------------------------- backward
// One kernel reads dout and inp once and produces everything: dinp += ∂loss/∂inp per row (128-bit packs), and per
// block the column sums over its rows of dout·norm (→ dweight), dout (→ dbias) and, optionally, of the updated dinp
// itself. That last sum is the bias gradient of the linear layer whose output feeds this residual stream (attproj
// for ln2, fcproj for the next ln1 or lnf), so that layer's backward has no bias pass of its own. Each warp keeps
// its column sums in its own slice of shared memory; the block then adds the warps' slices in a fixed order and
// writes one row of partials, and a second kernel adds the rows in a fixed order. No atomics: results repeat bit
// for bit.
constexpr int kLayerNormBackwardWarps = 4;
constexpr int kLayerNormRowsPerBlock = 32;  // N/32 partial rows to add at the end
inline int layernorm_num_chunks(int N) { return ceil_div(N, kLayerNormRowsPerBlock); }
inline size_t layernorm_backward_scratch_floats(int N, int C) { return (size_t)layernorm_num_chunks(N) * 3 * C; }
inline size_t layernorm_backward_smem_bytes(int C) { return (size_t)kLayerNormBackwardWarps * 3 * C * sizeof(float); }

// An empty asm that claims to change the pack: what was computed from it before (its elements in fp32) cannot be
// reused after, so the compiler keeps the row as packed 16-bit values between the two passes and converts again,
// instead of holding every element in an fp32 register (255 registers and spills at 7 packs per lane).
__device__ __forceinline__ void keep_packed(x128& v) {
    uint32_t* words = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
    for (int j = 0; j < 4; j++) asm volatile("" : "+r"(words[j]));
}

// partials[block][0][c] = Σ dout·norm, [1][c] = Σ dout, [2][c] = Σ dinp (after the update; only if sum_dinp).
// A warp holds its row in registers (kPacks packs per lane of dout, inp and dinp, all loaded at once) and the
// weights for all its rows. A lane's columns are the same in every row, so its slice of the shared column
// sums is private to it; each sum adds the warp's rows in order, then the block adds its warps in order.
template <int kPacks>
__global__ void __launch_bounds__(kLayerNormBackwardWarps * kWarpSize)
    layernorm_backward_kernel(floatX* __restrict__ dinp, float* __restrict__ partials, const floatX* __restrict__ dout,
                              const floatX* __restrict__ inp, const floatX* __restrict__ weight,
                              const float* __restrict__ mean, const float* __restrict__ rstd, int N, int C,
                              bool sum_dinp) {
    // [warp][3][k][pack]: element k of every pack, packs contiguous, so a warp's 32 lanes (consecutive packs)
    // touch 32 consecutive floats: no bank conflicts.
    extern __shared__ float ln_sums[];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int packs = C / x128::size;
    float* my_sums = ln_sums + (size_t)warp * 3 * C;
    for (int i = lane; i < 3 * C; i += kWarpSize) my_sums[i] = 0.0f;
    __syncwarp();
    x128 w[kPacks];
#pragma unroll
    for (int i = 0; i < kPacks; i++)
        if (lane + i * kWarpSize < packs) w[i] = load128(weight + (lane + i * kWarpSize) * x128::size);
    const int r0 = blockIdx.x * kLayerNormRowsPerBlock, r1 = min(N, r0 + kLayerNormRowsPerBlock);
    for (int row = r0 + warp; row < r1; row += kLayerNormBackwardWarps) {
        const size_t base = (size_t)row * C;
        x128 d[kPacks], x[kPacks], g[kPacks];
#pragma unroll
        for (int i = 0; i < kPacks; i++) {
            const int pk = lane + i * kWarpSize;
            if (pk < packs) {
                const int c = pk * x128::size;
                d[i] = load128cs(dout + base + c), x[i] = load128cs(inp + base + c), g[i] = load128(dinp + base + c);
            }
        }
        const float m = mean[row], s = rstd[row];
        float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
#pragma unroll
        for (int i = 0; i < kPacks; i++) {
            if (lane + i * kWarpSize < packs) {
                for (int k = 0; k < x128::size; k++) {
                    const float norm = (to_float(x[i][k]) - m) * s;
                    const float dnorm = to_float(d[i][k]) * to_float(w[i][k]);
                    dnorm_sum += dnorm;
                    dnorm_norm_sum += dnorm * norm;
                }
            }
        }
        const float dnorm_mean = warp_reduce_sum(dnorm_sum) / C;
        const float dnorm_norm_mean = warp_reduce_sum(dnorm_norm_sum) / C;
#pragma unroll
        for (int i = 0; i < kPacks; i++) keep_packed(d[i]), keep_packed(x[i]), keep_packed(w[i]);
#pragma unroll
        for (int i = 0; i < kPacks; i++) {
            const int pk = lane + i * kWarpSize;
            if (pk < packs) {
                for (int k = 0; k < x128::size; k++) {
                    const float norm = (to_float(x[i][k]) - m) * s;
                    const float dnorm = to_float(d[i][k]) * to_float(w[i][k]);
                    const float update = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
                    g[i][k] = from_float<floatX>(to_float(g[i][k]) + update);
                    const int at = k * packs + pk;
                    my_sums[at] += to_float(d[i][k]) * norm;
                    my_sums[C + at] += to_float(d[i][k]);
                    if (sum_dinp) my_sums[2 * C + at] += to_float(g[i][k]);
                }
                store128(dinp + base + pk * x128::size, g[i]);
            }
        }
    }
    __syncthreads();
    const int sums = sum_dinp ? 3 * C : 2 * C;
    for (int i = threadIdx.x; i < sums; i += blockDim.x) {
        const int q = i / C, col = i % C;
        const int at = q * C + (col % x128::size) * packs + col / x128::size;
        float acc = 0.0f;
        for (int wp = 0; wp < kLayerNormBackwardWarps; wp++) acc += ln_sums[(size_t)wp * 3 * C + at];
        partials[(size_t)blockIdx.x * 3 * C + i] = acc;
    }
}

// Adds the blocks' partial rows in a fixed order (ordered_column_sum), a block per 32 columns of the [3][C] rows.
__global__ void __launch_bounds__(kWarpSize * kColumnSumSplit)
    layernorm_backward_finish_kernel(floatX* dweight, floatX* dbias, floatX* dinp_sum, const float* partials,
                                     int num_chunks, int C) {
    const int i = blockIdx.x * kWarpSize + threadIdx.x;  // index into one [3][C] row
    const int used = dinp_sum ? 3 * C : 2 * C;
    const float acc = ordered_column_sum(partials, num_chunks, (size_t)3 * C, i, i < used);
    if (threadIdx.y != 0 || i >= used) return;
    floatX* out = i < C ? dweight + i : i < 2 * C ? dbias + (i - C) : dinp_sum + (i - 2 * C);
    *out = from_float<floatX>(to_float(*out) + acc);
}

// dinp, dweight, dbias accumulate; so does dinp_sum (C entries: += Σ_rows of dinp after the update) when given.
// scratch: layernorm_backward_scratch_floats(N, C) floats.
inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                               const floatX* weight, const float* mean, const float* rstd, int N, int C,
                               float* scratch, cudaStream_t stream = 0, floatX* dinp_sum = nullptr) {
    check_layernorm_channels(C);
    const size_t smem = layernorm_backward_smem_bytes(C);
    const int chunks = layernorm_num_chunks(N);
    const bool sum_dinp = dinp_sum != nullptr;
    layernorm_packs(C, [&](auto packs) {
        auto kernel = layernorm_backward_kernel<decltype(packs)::value>;
        static size_t smem_allowed = 48 * 1024;  // the default; raised once when a wider model needs more
        if (smem > smem_allowed) {
            cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            smem_allowed = smem;
        }
        kernel<<<chunks, kLayerNormBackwardWarps * kWarpSize, smem, stream>>>(dinp, scratch, dout, inp, weight, mean,
                                                                               rstd, N, C, sum_dinp);
        cudaCheckLaunch();
    });
    const int used = sum_dinp ? 3 * C : 2 * C;
    layernorm_backward_finish_kernel<<<ceil_div(used, kWarpSize), dim3(kWarpSize, kColumnSumSplit), 0, stream>>>(
        dweight, dbias, dinp_sum, scratch, chunks, C);
    cudaCheckLaunch();
}
