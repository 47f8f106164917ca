// Generation's products for the few rows of a decode step: out (B, N) = epilogue(in'·Wᵀ + bias)
// with W (N, K) as the trainer stores it, where in' = LayerNorm(in) when LayerNorm weights are given (each block
// normalises the B rows itself, so the LayerNorm is not a kernel of its own), and the epilogue is GELU, or a residual
// add, or, for the QKV product, also the K and V columns written into the KV cache at the new position. cuBLASLt
// needs the LayerNorm and the cache append as separate kernels; at batch 1 those launches cost as much as the
// products. Values are rounded to floatX where the trainer's forward rounds them (the LayerNorm output, the product
// + bias before a residual add), so a decode step computes what the forward computes, up to summation order.
// One warp per output column at a time: the column's K weights are read as 16-byte vectors and dotted with up to
// kDecodeMaxRows rows held in shared memory as fp32; blocks with blockIdx.y = g take rows [g·rows, (g+1)·rows), so
// a larger batch reads W once from memory and again from L2 per group. Bound by reading W (the weight-bandwidth
// floor of a decode step) at small batches.
#pragma once

#include "cuda_common.h"
#include "gelu.cuh"
#include "gpt2_config.h"

constexpr int kDecodeMaxRows = 8;

struct DecodeMatvec {
    floatX* out;                 // (B, N)
    const floatX* in;            // (B, K)
    const floatX* ln_w = nullptr, *ln_b = nullptr;  // LayerNorm of `in` first, when given
    const floatX* W;             // (N, K)
    const floatX* bias = nullptr;
    const floatX* residual = nullptr;  // (B, N): out = residual + (product + bias)
    bool gelu = false;                 // out = gelu(product + bias)
    // the QKV product: columns [C, 2C) and [2C, 3C) also into k_cache / v_cache (B, NH, max_T, HS) at len[b] - 1
    floatX* k_cache = nullptr, *v_cache = nullptr;
    const int* len = nullptr;
    int NH = 0, HS = 0, max_T = 0;
    int B = 1, N = 0, K = 0;
    int rows = kDecodeMaxRows;  // rows per block (a group); tests lower it to exercise several groups
};

namespace decode_matvec_detail {

constexpr int kWarps = 8;
constexpr int kPrefetch = 12;  // 16-byte weight vectors per lane held in registers: a whole column up to K = 3072

// kRows: the most rows a block holds (a.rows rounded up to 1, 2, 4 or 8), so registers scale with the batch
template <int kRows>
__global__ void __launch_bounds__(kWarps * 32, 2) matvec_kernel(const DecodeMatvec a) {
    extern __shared__ float xs[];  // (rows of this group, K) fp32
    const int row0 = blockIdx.y * a.rows, B = min(a.rows, a.B - row0), K = a.K;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // The weights of this warp's first column are loaded before the inputs are staged and normalised (they do
    // not depend on them): the weight fetch overlaps the prologue instead of following it.
    const int stride = gridDim.x * kWarps;
    int n = blockIdx.x * kWarps + warp;
    Packed128<floatX> wreg[kPrefetch];
    auto load_column = [&](int col) {
        const floatX* w = a.W + (size_t)col * K;
#pragma unroll
        for (int v = 0; v < kPrefetch; v++)
            if ((lane + 32 * v) * 8 < K) wreg[v] = load128cs(w + (lane + 32 * v) * 8);  // read once: not kept in L1
    };
    if (n < a.N) load_column(n);
    for (int i = threadIdx.x; i < B * K / 8; i += blockDim.x) {
        const Packed128<floatX> v = load128(a.in + (size_t)row0 * K + (size_t)i * 8);
#pragma unroll
        for (int j = 0; j < 8; j++) xs[i * 8 + j] = to_float(v[j]);
    }
    __syncthreads();
    if (a.ln_w && warp < B) {  // warp r normalises row r, as layernorm_forward_kernel does (two passes, fp32)
        float* x = xs + (size_t)warp * K;
        float sum = 0.f;
        for (int k = lane; k < K; k += 32) sum += x[k];
        const float m = warp_reduce_sum(sum) / K;
        float var = 0.f;
        for (int k = lane; k < K; k += 32) var += (x[k] - m) * (x[k] - m);
        const float s = rsqrtf(warp_reduce_sum(var) / K + (float)kLayerNormEps);
        for (int k = lane; k < K; k += 32)
            x[k] = to_float(from_float<floatX>((x[k] - m) * s * to_float(a.ln_w[k]) + to_float(a.ln_b[k])));
    }
    if (a.ln_w) __syncthreads();

    const int C = a.NH * a.HS;
    for (; n < a.N; n += stride) {
        float acc[kRows];
#pragma unroll
        for (int r = 0; r < kRows; r++) acc[r] = 0.f;
        auto fma_vector = [&](const Packed128<floatX>& wv, int k) {
#pragma unroll
            for (int r = 0; r < kRows; r++) {
                if (r < B) {
                    const float4 x0 = *reinterpret_cast<const float4*>(xs + (size_t)r * K + k);
                    const float4 x1 = *reinterpret_cast<const float4*>(xs + (size_t)r * K + k + 4);
                    acc[r] += to_float(wv[0]) * x0.x + to_float(wv[1]) * x0.y + to_float(wv[2]) * x0.z +
                              to_float(wv[3]) * x0.w + to_float(wv[4]) * x1.x + to_float(wv[5]) * x1.y +
                              to_float(wv[6]) * x1.z + to_float(wv[7]) * x1.w;
                }
            }
        };
#pragma unroll
        for (int v = 0; v < kPrefetch; v++)
            if ((lane + 32 * v) * 8 < K) fma_vector(wreg[v], (lane + 32 * v) * 8);
        for (int k = (lane + 32 * kPrefetch) * 8; k < K; k += 32 * 8) fma_vector(load128cs(a.W + (size_t)n * K + k), k);
        if (n + stride < a.N) load_column(n + stride);  // in flight during this column's reduction and stores
        float mine = 0.f;  // lane r keeps row r's sum
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            if (r < B) {
                const float total = warp_reduce_sum(acc[r]);
                if (lane == r) mine = total;
            }
        }
        if (lane < B) {
            const int r = row0 + lane;
            float y = mine + (a.bias ? to_float(a.bias[n]) : 0.f);
            if (a.gelu) y = gelu_value(y);
            if (a.residual) y = to_float(from_float<floatX>(y)) + to_float(a.residual[(size_t)r * a.N + n]);
            const floatX o = from_float<floatX>(y);
            a.out[(size_t)r * a.N + n] = o;
            if (a.k_cache && n >= C) {
                const int c = n % C, h = c / a.HS, d = c % a.HS;
                floatX* cache = n < 2 * C ? a.k_cache : a.v_cache;
                cache[(((size_t)r * a.NH + h) * a.max_T + a.len[r] - 1) * a.HS + d] = o;
            }
        }
    }
}

}  // namespace decode_matvec_detail

// BF16 builds only: the kernel reads 8 elements per 16-byte vector (Packed128 of fp32 holds 4); FP32 builds decode
// through cuBLASLt (llmc/gpt2_decode.cuh chooses).
constexpr bool kDecodeMatvecAvailable = kFloatXIsBF16;

inline void decode_matvec(const DecodeMatvec& a, cudaStream_t stream) {
    using namespace decode_matvec_detail;
    if (!kDecodeMatvecAvailable) {
        fprintf(stderr, "error: decode_matvec: bf16 builds only\n");
        exit(EXIT_FAILURE);
    }
    const int rows = std::min(a.rows, a.B);
    const size_t smem = (size_t)rows * a.K * sizeof(float);
    if (a.B < 1 || a.rows < 1 || a.rows > kDecodeMaxRows || a.K % 8 != 0 ||
        (a.k_cache && (a.len == nullptr || a.N != 3 * a.NH * a.HS))) {
        fprintf(stderr, "error: decode_matvec: B %d, rows per block %d (1..%d), K %d (a multiple of 8), N %d\n", a.B,
                a.rows, kDecodeMaxRows, a.K, a.N);
        exit(EXIT_FAILURE);
    }
    auto kernel = rows == 1 ? matvec_kernel<1> : rows == 2 ? matvec_kernel<2> : rows <= 4 ? matvec_kernel<4>
                                                                                          : matvec_kernel<8>;
    if (smem > 48 * 1024)  // the opt-in above 48 KiB (not a stream operation: fine inside a graph capture)
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int blocks = std::min((a.N + kWarps - 1) / kWarps, device_sm_count() * 2);  // resident at once (128 regs)
    kernel<<<dim3(blocks, (a.B + rows - 1) / rows), kWarps * 32, smem, stream>>>(a);
    cudaCheckLaunch();
}
