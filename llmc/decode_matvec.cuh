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
    bool pdl = false;  // launched as a programmatic dependent of the kernel before it (Hopper; see the kernel)
};

namespace decode_matvec_detail {

constexpr int kWarps = 8;
constexpr int kStage = 2;   // 16-byte vectors per thread per staging pass (B·K/8 <= 512 in one memory latency)
constexpr int kBlocksPerSM = 3;  // at most 85 registers: 24 warps per SM, so d12's products (up to 3072 columns)
                                 // take one pass, every column's weights requested at once
constexpr int kPre = 3;          // 16-byte weight vectors per lane loaded before the prologue (K = 768 whole)
constexpr int kAhead = 4;        // columns a warp requests into L2 ahead of the one it computes (the classifier's
                                 // 50304 columns are 16 passes at d12)

// Stages `rows` rows of `in` (K each, contiguous) into xs as fp32 and, when ln_w is given, the LayerNorm's weights
// into ln_ws (ln_w, then ln_b: K each); rows may be 0 (the weights only). Each pass issues all of its global loads
// before any shared-memory store: a store to shared memory may alias a generic load, so the compiler would
// otherwise wait out one memory latency per vector. Blocks of kWarps warps; ends with __syncthreads.
__device__ __forceinline__ void stage_rows(float* xs, float* ln_ws, const floatX* in, int rows, int K,
                                           const floatX* ln_w, const floatX* ln_b) {
    const int row_vectors = rows * K / 8, ln_vectors = ln_w ? K / 8 : 0;
    for (int base = 0; base < row_vectors || base < ln_vectors; base += kStage * kWarps * 32) {
        Packed128<floatX> xv[kStage], wv[kStage], bv[kStage];
#pragma unroll
        for (int j = 0; j < kStage; j++) {
            const int i = base + j * kWarps * 32 + threadIdx.x;
            if (i < row_vectors) xv[j] = load128(in + (size_t)i * 8);
            if (i < ln_vectors) wv[j] = load128(ln_w + i * 8), bv[j] = load128(ln_b + i * 8);
        }
#pragma unroll
        for (int j = 0; j < kStage; j++) {
            const int i = base + j * kWarps * 32 + threadIdx.x;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                if (i < row_vectors) xs[i * 8 + e] = to_float(xv[j][e]);
                if (i < ln_vectors) ln_ws[i * 8 + e] = to_float(wv[j][e]), ln_ws[K + i * 8 + e] = to_float(bv[j][e]);
            }
        }
    }
    __syncthreads();
}

// Warp r normalises row r of xs in place with the weights stage_rows put in ln_ws, as layernorm_forward_kernel
// does (two passes, fp32, the output rounded to floatX); ends with __syncthreads.
__device__ __forceinline__ void layernorm_rows(float* xs, const float* ln_ws, int rows, int K) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp < rows) {
        float* x = xs + (size_t)warp * K;
        auto x4 = [&](int k) { return *reinterpret_cast<const float4*>(x + k); };
        float sum = 0.f;
        for (int k = lane * 4; k < K; k += 128) {
            const float4 v = x4(k);
            sum += v.x + v.y + v.z + v.w;
        }
        const float m = warp_reduce_sum(sum) / K;
        float var = 0.f;
        for (int k = lane * 4; k < K; k += 128) {
            const float4 v = x4(k);
            var += (v.x - m) * (v.x - m) + (v.y - m) * (v.y - m) + (v.z - m) * (v.z - m) + (v.w - m) * (v.w - m);
        }
        const float s = rsqrtf(warp_reduce_sum(var) / K + (float)kLayerNormEps);
        for (int k = lane * 4; k < K; k += 128) {
            const float4 v = x4(k);
            const float4 w = *reinterpret_cast<const float4*>(ln_ws + k);
            const float4 b = *reinterpret_cast<const float4*>(ln_ws + K + k);
            float4 y;
            y.x = to_float(from_float<floatX>((v.x - m) * s * w.x + b.x));
            y.y = to_float(from_float<floatX>((v.y - m) * s * w.y + b.y));
            y.z = to_float(from_float<floatX>((v.z - m) * s * w.z + b.z));
            y.w = to_float(from_float<floatX>((v.w - m) * s * w.w + b.w));
            *reinterpret_cast<float4*>(x + k) = y;
        }
    }
    __syncthreads();
}

// Column n of row r (r: the row's index in the whole batch) from its dot product `sum`: bias, GELU or the
// residual add, rounded where the forward rounds; the QKV product's K and V columns also into the cache.
// bias and res: loaded by the caller ahead of the products, so their latency hides behind the weights'.
__device__ __forceinline__ void store_column(const DecodeMatvec& a, int r, int n, float sum, float bias, float res) {
    float y = sum + bias;
    if (a.gelu) y = gelu_value(y);
    if (a.residual) y = to_float(from_float<floatX>(y)) + res;
    const floatX o = from_float<floatX>(y);
    a.out[(size_t)r * a.N + n] = o;
    const int C = a.NH * a.HS;
    if (a.k_cache && n >= C) {
        const int c = n % C, h = c / a.HS, d = c % a.HS;
        floatX* cache = n < 2 * C ? a.k_cache : a.v_cache;
        cache[(((size_t)r * a.NH + h) * a.max_T + a.len[r] - 1) * a.HS + d] = o;
    }
}

// Weights preloaded into registers ahead of their use stay raw 16-byte values: held as Packed128 of bf16, the
// compiler may split them into 16-bit halves (twice the registers) and spill them.
__device__ __forceinline__ int4 load_weights(const floatX* p) { return __ldcs(reinterpret_cast<const int4*>(p)); }
__device__ __forceinline__ Packed128<floatX> as_packed(int4 raw) {
    Packed128<floatX> out;
    *reinterpret_cast<int4*>(&out) = raw;
    return out;
}

// The dot products of one weight column w (K elements) with the B rows of xs (fp32, K each) over the slice
// [k_begin, k_end) of K, a warp's work: each lane takes 16-byte vectors lane, lane + 32, ...; the first kPre of them
// come from wpre when `preloaded` (loaded before the kernel's prologue). Returns row r's sum in lane r.
template <int kRows>
__device__ __forceinline__ float column_dot(const floatX* w, const float* xs, int K, int B, int k_begin, int k_end,
                                            const int4 (&wpre)[kPre], bool preloaded) {
    const int lane = threadIdx.x % 32;
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
    int k = k_begin + lane * 8;
    if (preloaded) {
#pragma unroll
        for (int v = 0; v < kPre; v++, k += 32 * 8)
            if (k < k_end) fma_vector(as_packed(wpre[v]), k);
    }
#pragma unroll 4
    for (; k < k_end; k += 32 * 8) fma_vector(load128cs(w + k), k);
    float mine = 0.f;  // lane r keeps row r's sum
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        if (r < B) {
            const float total = warp_reduce_sum(acc[r]);
            if (lane == r) mine = total;
        }
    }
    return mine;
}

// kRows: the most rows a block holds (a.rows rounded up to 1, 2, 4 or 8), so registers scale with the batch
template <int kRows>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSM) matvec_kernel(const DecodeMatvec a) {
    extern __shared__ float xs[];  // (rows of this group, K) fp32
    const int row0 = blockIdx.y * a.rows, B = min(a.rows, a.B - row0), K = a.K;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // Before anything that depends on the kernel before this one: this warp's first weight columns are requested
    // into L2 and the first kPre vectors of its first column loaded into registers. Launched as a programmatic
    // dependent (a.pdl), the kernel runs this while the one before it finishes, so the weight fetch overlaps that
    // kernel's tail, this kernel's launch and its prologue (d12 batch 1: 0.371 -> 0.334 ms per step with both).
    const int stride = gridDim.x * kWarps;
    int n = blockIdx.x * kWarps + warp;
    auto prefetch_column = [&](int col) {
        const floatX* w = a.W + (size_t)col * K;
        for (int k = lane * 64; k < K; k += 32 * 64) asm volatile("prefetch.global.L2 [%0];" ::"l"(w + k));
    };
#pragma unroll
    for (int j = 0; j < kAhead; j++)
        if (n + j * stride < a.N) prefetch_column(n + j * stride);
    int4 wpre[kPre];
    if (n < a.N) {
#pragma unroll
        for (int v = 0; v < kPre; v++)
            if ((lane + 32 * v) * 8 < K) wpre[v] = load_weights(a.W + (size_t)n * K + (lane + 32 * v) * 8);
    }
    pdl_trigger_and_wait();  // everything below reads what the kernel before wrote
    float* ln_ws = xs + (size_t)B * K;  // ln_w, then ln_b (K each), when given
    stage_rows(xs, ln_ws, a.in + (size_t)row0 * K, B, K, a.ln_w, a.ln_b);
    if (a.ln_w) layernorm_rows(xs, ln_ws, B, K);

    for (; n < a.N; n += stride) {
        if (n + kAhead * stride < a.N) prefetch_column(n + kAhead * stride);
        // the epilogue's operands, loaded now so their latency hides behind the weights'
        const int r_mine = row0 + lane;
        const float bias = a.bias ? to_float(a.bias[n]) : 0.f;
        const float res = a.residual && lane < B ? to_float(a.residual[(size_t)r_mine * a.N + n]) : 0.f;
        // this warp's first column: its first weights are in registers
        const float mine = column_dot<kRows>(a.W + (size_t)n * K, xs, K, B, 0, K, wpre, n < stride);
        if (lane < B) store_column(a, r_mine, n, mine, bias, res);
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
    const size_t smem = (size_t)(rows + (a.ln_w ? 2 : 0)) * a.K * sizeof(float);
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
    const int blocks = std::min((a.N + kWarps - 1) / kWarps, device_sm_count() * kBlocksPerSM);  // all resident
    PdlLaunch launch(dim3(blocks, (a.B + rows - 1) / rows), dim3(kWarps * 32), smem, stream, a.pdl);
    cudaCheck(cudaLaunchKernelEx(&launch.config, kernel, a));
}
