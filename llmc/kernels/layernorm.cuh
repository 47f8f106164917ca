// LayerNorm over the channel dimension, eps kLayerNormEps (gpt2_config.h), with mean and 1/std saved for backward
// (llmc/kernels/layernorm_backward.cuh). fused_residual_layernorm_forward adds the residual stream and normalises in
// one kernel (the block's output leaves the residual add and goes straight into the next LayerNorm).
// It can fold max |out| (the stored values) into an FP8 amax (llmc/kernels/fp8/amax.cuh), so an FP8 GEMM that reads
// the output (qkv's and fc's inputs) needs no amax pass of its own; and, when the scale is known before the output
// (delayed scaling), write the output in E4M3 instead of bf16 (LayerNormFp8Out).
#pragma once

#include <type_traits>

#include "llmc/core/cuda_common.h"
#include "llmc/gpt2/gpt2_config.h"
#include "llmc/kernels/fp8/amax.cuh"
#include "llmc/kernels/fp8/pack.cuh"

// The output in E4M3 (delayed scaling): y = fp8(out · *scale) in out's layout, written instead of out, each value
// rounded to floatX first (the bytes a cast of the stored out would write); a value that is not finite sets
// *overflow_descale (the GEMM's) to NaN, as the casts do (llmc/kernels/fp8/cast_transpose.cuh's ScaleSource).
struct LayerNormFp8Out {
    uint8_t* y = nullptr;
    const float* scale = nullptr;
    float* overflow_descale = nullptr;
};

// One warp per row, 128-bit packs (C is a multiple of x128::size), the row held in registers: every load of the
// row is issued at once, so a row costs one memory latency, not one per pass. kPacks: packs per lane the kernel
// holds (C <= kPacks · 32 · x128::size; layernorm_packs picks the instance). kWeightsEarly: the weights and biases
// are loaded with the row (generation's decode step runs a few rows, where latency is all there is, and a pass that
// re-reads the row costs a latency); else they are read in the last pass, from L1/L2, where every
// row finds them: the registers they would hold cost occupancy on a training batch (212 registers at 8 packs).
// `residual_a`/`residual_b` non-null: residual_out = a + b is written and normalised. kAmax: max |out| folded into
// out_amax, per warp (a warp is a row, and leaves early past the last row); kFp8: fp8.y written instead of out
// (with kAmax). Compile-time choices, so that runs without FP8 run the kernel they ran before it could.
constexpr int kLayerNormForwardThreads = 256;
template <int kPacks, bool kWeightsEarly, bool kAmax, bool kFp8 = false>
__global__ void __launch_bounds__(kLayerNormForwardThreads)
    layernorm_forward_kernel(floatX* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                             floatX* residual_out, const floatX* inp, const floatX* residual_a,
                             const floatX* residual_b, const floatX* __restrict__ weight,
                             const floatX* __restrict__ bias, int N, int C, float* out_amax, LayerNormFp8Out fp8) {
    static_assert(!kFp8 || kAmax, "an FP8 output's amax goes to its history");
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
    float fp8_scale = 1.f;
    if constexpr (kFp8) fp8_scale = *fp8.scale;
    unsigned int mx = 0;
#pragma unroll
    for (int i = 0; i < kPacks; i++) {
        if (lane + i * kWarpSize < packs) {
            const int c = (lane + i * kWarpSize) * x128::size;
            const x128 wi = kWeightsEarly ? w[kWeightsEarly ? i : 0] : load128(weight + c);
            const x128 bi = kWeightsEarly ? b[kWeightsEarly ? i : 0] : load128(bias + c);
            x128 o;
            for (int k = 0; k < x128::size; k++) {
                o[k] = from_float<floatX>((to_float(v[i][k]) - m) * s * to_float(wi[k]) + to_float(bi[k]));
                if constexpr (kAmax) mx = max(mx, amax_bits(to_float(o[k])));
            }
            if constexpr (kFp8) {  // a pack's bytes: 8 (bf16 packs) or 4 (fp32)
                uint32_t word[x128::size / 4];
                for (int q = 0; q < x128::size / 4; q++)
                    word[q] = fp8x4<Fp8Format::E4M3>(to_float(o[4 * q]) * fp8_scale, to_float(o[4 * q + 1]) * fp8_scale,
                                                     to_float(o[4 * q + 2]) * fp8_scale,
                                                     to_float(o[4 * q + 3]) * fp8_scale);
                uint8_t* dst = fp8.y + base + c;
                if constexpr (x128::size == 8) *reinterpret_cast<uint2*>(dst) = make_uint2(word[0], word[1]);
                else *reinterpret_cast<uint32_t*>(dst) = word[0];
            } else {
                store128(out + base + c, o);
            }
        }
    }
    if constexpr (kFp8) if (amax_bits_nonfinite(mx)) *fp8.overflow_descale = NAN;
    if constexpr (kAmax) fold_warp_amax(mx, out_amax);
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
                                     int C, cudaStream_t stream, bool pdl, float* out_amax, LayerNormFp8Out fp8) {
    if (fp8.y && (!out_amax || !fp8.scale || !fp8.overflow_descale || (uintptr_t)fp8.y % x128::size != 0)) {
        fprintf(stderr, "error: layernorm_forward: an FP8 output needs an amax, a scale, a descale and y aligned to "
                "a pack's bytes\n");
        exit(EXIT_FAILURE);
    }
    const int rows_per_block = kLayerNormForwardThreads / kWarpSize, blocks = ceil_div(N, rows_per_block);
    const bool weights_early = blocks <= device_sm_count();
    PdlLaunch launch(dim3(blocks), dim3(kLayerNormForwardThreads), 0, stream, pdl);
    auto launch_with = [&](auto amax, auto to_fp8) {
        layernorm_packs(C, [&](auto packs) {
            constexpr int kPacks = decltype(packs)::value;
            constexpr bool kAmax = decltype(amax)::value, kFp8 = decltype(to_fp8)::value;
            auto kernel = layernorm_forward_kernel<kPacks, false, kAmax, kFp8>;
            // FP8 outputs are training batches' (many rows): their weights come late, one instance fewer
            if constexpr (!kFp8) if (weights_early) kernel = layernorm_forward_kernel<kPacks, true, kAmax, false>;
            cudaCheck(cudaLaunchKernelEx(&launch.config, kernel, out, mean, rstd, residual_out, inp, a, b, weight,
                                         bias, N, C, out_amax, fp8));
        });
    };
    if (fp8.y) launch_with(std::true_type(), std::true_type());
    else if (out_amax) launch_with(std::true_type(), std::false_type());
    else launch_with(std::false_type(), std::false_type());
}

// out_amax (null: none): *out_amax = max(*out_amax, max |out|); fp8.y (null: none): E4M3 y written instead of out.
inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C, cudaStream_t stream = 0, bool pdl = false,
                              float* out_amax = nullptr, LayerNormFp8Out fp8 = {}) {
    check_layernorm_channels(C);
    launch_layernorm_forward(out, mean, rstd, nullptr, inp, nullptr, nullptr, weight, bias, N, C, stream, pdl,
                             out_amax, fp8);
}

// residual_out = a + b; out = LayerNorm(residual_out).
inline void fused_residual_layernorm_forward(floatX* residual_out, floatX* out, float* mean, float* rstd,
                                             const floatX* a, const floatX* b, const floatX* weight,
                                             const floatX* bias, int N, int C, cudaStream_t stream = 0,
                                             bool pdl = false, float* out_amax = nullptr, LayerNormFp8Out fp8 = {}) {
    check_layernorm_channels(C);
    launch_layernorm_forward(out, mean, rstd, residual_out, nullptr, a, b, weight, bias, N, C, stream, pdl,
                             out_amax, fp8);
}
