// Generation's products for the few rows of a decode step: out (B, N) = epilogue(in'·Wᵀ + bias)
// with W (N, K) as the trainer stores it, where in' = LayerNorm(in) when LayerNorm weights are given (each block
// normalises the B rows itself, so the LayerNorm is not a kernel of its own), and the epilogue is GELU, or a residual
// add, or, for the QKV product, also the K and V columns written into the KV cache at the new position. cuBLASLt
// needs the LayerNorm and the cache append as separate kernels; at batch 1 those launches cost as much as the
// products. Values are rounded to floatX where the trainer's forward rounds them (the LayerNorm output, the product
// + bias before a residual add), so a decode step computes what the forward computes, up to summation order.
// One warp per output column at a time: the column's K weights are read as 16-byte vectors and dotted with up to
// kDecodeMaxRows rows held in shared memory as fp32; blocks with blockIdx.y = g take rows [g·rows, (g+1)·rows), so
// a larger batch reads W once from memory and again from L2 per group. One row (batch 1) whose K fits the
// preloaded vectors takes the register path instead: each warp holds its lanes' part of the row (and normalises
// it), no shared memory. The classifier can also pick the greedy token (DecodeGreedyPick). Launched as
// programmatic dependents, every kernel loads its first weights before waiting for the kernel before it.
#pragma once

#include "llmc/core/cuda_common.h"
#include "llmc/gpt2/gpt2_config.h"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/sampling/sampling.cuh"

constexpr int kDecodeMaxRows = 8;

// The greedy pick folded into the classifier's product (generation's loop at temperature 0): each block keeps the
// highest rank (sampling_rule.h: the key of the stored, rounded logit, ties to the lowest id) of its columns below V
// per row, and the last block to finish (a count per row group, which it resets) takes the
// maximum over the blocks' partials and does what pick_tokens does after its choice: the token into next_tokens
// and tokens_out, len advanced. A maximum is exact, so the order the blocks finish in changes nothing.
struct DecodeGreedyPick {
    unsigned long long* partials = nullptr;  // (B, blocks): decode_greedy_pick_partials(B), no initial values
    unsigned* count = nullptr;               // (row groups), zero before the first call; each call leaves it zero
    int V = 0;                               // the real vocabulary (columns from V on are padding)
    const int* prompt_len = nullptr;
    int* len = nullptr;
    int* next_tokens = nullptr;
    int* tokens_out = nullptr;  // (max_new, B)
    int max_new = 0, B = 0;
};

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
    DecodeGreedyPick pick = {};  // the classifier: also the greedy pick of each row, when pick.partials is set
    // decode_mma (llmc/kernels/decode/decode_mma.cuh) only: K in `splits` slices (0: its choice), their fp32 tiles in partials
    // (splits, B, N) and a counter per column tile and row group (zero before, left zero)
    int splits = 0;
    float* partials = nullptr;
    unsigned* counters = nullptr;
};

namespace decode_matvec_detail {

constexpr int kWarps = 8;
constexpr int kStage = 2;   // 16-byte vectors per thread per staging pass (B·K/8 <= 512 in one memory latency)
constexpr int kBlocksPerSM = 3;  // at most 85 registers: 24 warps per SM, so d12's products (up to 3072 columns)
                                 // take one pass, every column's weights requested at once
constexpr int kPre = 3;          // 16-byte weight vectors per lane loaded before the prologue (K = 768 whole)
constexpr int kPreWide = 12;     // the same for products of up to one block per SM (K = 3072 whole: d12's fc
                                 // projection, whose 9 other vectors were loaded after the wait)
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
// residual add, rounded where the forward rounds; the QKV product's K and V columns also into the cache at
// position pos (len[r] - 1). bias, res and pos: loaded by the caller ahead of the products, so their latency hides
// behind the weights' (a load between the stores here could not move ahead of them: they may alias).
__device__ __forceinline__ void store_column(const DecodeMatvec& a, int r, int n, float sum, float bias, float res,
                                             int pos) {
    float y = sum + bias;
    if (a.gelu) y = gelu_value(y);
    if (a.residual) y = to_float(from_float<floatX>(y)) + res;
    const floatX o = from_float<floatX>(y);
    a.out[(size_t)r * a.N + n] = o;
    const int C = a.NH * a.HS;
    if (a.k_cache && n >= C) {
        const int c = n % C, h = c / a.HS, d = c % a.HS;
        floatX* cache = n < 2 * C ? a.k_cache : a.v_cache;
        cache[(((size_t)r * a.NH + h) * a.max_T + pos) * a.HS + d] = o;
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

// The warp's sums of each row's partial dot products, row r's total in lane r.
template <int kRows>
__device__ __forceinline__ float sums_to_lanes(const float (&acc)[kRows], int B) {
    const int lane = threadIdx.x % 32;
    float mine = 0.f;
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        if (r < B) {
            const float total = warp_reduce_sum(acc[r]);
            if (lane == r) mine = total;
        }
    }
    return mine;
}

// The dot products of one weight column w (K elements) with the B rows of xs (fp32, K each) over the slice
// [k_begin, k_end) of K, a warp's work: each lane takes 16-byte vectors lane, lane + 32, ...; the first kPre of them
// come from wpre when `preloaded` (loaded before the kernel's prologue). Returns row r's sum in lane r.
template <int kRows, int kPreV>
__device__ __forceinline__ float column_dot(const floatX* w, const float* xs, int K, int B, int k_begin, int k_end,
                                            const int4 (&wpre)[kPreV], bool preloaded) {
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
        for (int v = 0; v < kPreV; v++, k += 32 * 8)
            if (k < k_end) fma_vector(as_packed(wpre[v]), k);
    }
#pragma unroll 4
    for (; k < k_end; k += 32 * 8) fma_vector(load128cs(w + k), k);
    return sums_to_lanes<kRows>(acc, B);
}

// A warp's LayerNorm of one row of K, its lane holding the row's 16-byte vectors lane, lane + 32, ... in x (those at
// or past K/8 unused); weight_bias(v, w, b) gives the LayerNorm weights' and biases' vector v (from registers or
// shared memory). Two-pass statistics as layernorm_forward_kernel computes them, the output rounded to floatX in
// place. decode_matvec's register path and decode_mma's prologue.
template <int kV, typename WeightBias>
__device__ __forceinline__ void layernorm_vectors(int4 (&x)[kV], WeightBias weight_bias, int K) {
    const int lane = threadIdx.x % 32;
    auto valid = [&](int v) { return (lane + 32 * v) * 8 < K; };
    float sum = 0.f;
#pragma unroll
    for (int v = 0; v < kV; v++) {
        if (!valid(v)) continue;
        const Packed128<floatX> xv = as_packed(x[v]);
#pragma unroll
        for (int e = 0; e < 8; e++) sum += to_float(xv[e]);
    }
    const float m = warp_reduce_sum(sum) / K;
    float var = 0.f;
#pragma unroll
    for (int v = 0; v < kV; v++) {
        if (!valid(v)) continue;
        const Packed128<floatX> xv = as_packed(x[v]);
#pragma unroll
        for (int e = 0; e < 8; e++) var += (to_float(xv[e]) - m) * (to_float(xv[e]) - m);
    }
    const float sd = rsqrtf(warp_reduce_sum(var) / K + (float)kLayerNormEps);
#pragma unroll
    for (int v = 0; v < kV; v++) {
        if (!valid(v)) continue;
        int4 w, b;
        weight_bias(v, w, b);
        const Packed128<floatX> xv = as_packed(x[v]), wv = as_packed(w), bv = as_packed(b);
        Packed128<floatX> y;
#pragma unroll
        for (int e = 0; e < 8; e++) y[e] = from_float<floatX>((to_float(xv[e]) - m) * sd * to_float(wv[e]) + to_float(bv[e]));
        x[v] = *reinterpret_cast<const int4*>(&y);
    }
}

// The register path (one row whose K the kPreV vectors per lane cover: d12's every product at batch 1): each warp
// loads its lanes' vectors of the row itself (the same vectors as its weights: lane, lane + 32, ...), so no shared
// memory and no __syncthreads, and, with LayerNorm weights, normalises them itself (every warp the same two-pass
// statistics, as layernorm_forward_kernel computes them, the output rounded to floatX). A one-warp LayerNorm
// between two __syncthreads, the staged path, costs more than the product saves at batch 1.
// kNormalize false: the caller guarantees no LayerNorm (the wide kernels: fewer registers).
template <int kRows, int kPreV, bool kNormalize>
__device__ __forceinline__ void rows_to_registers(int4 (&xr)[kRows][kPreV], const DecodeMatvec& a, int row0, int B) {
    const int lane = threadIdx.x % 32, K = a.K;
    auto valid = [&](int v) { return (lane + 32 * v) * 8 < K; };
    int4 lw[kNormalize ? kPreV : 1], lb[kNormalize ? kPreV : 1];
#pragma unroll
    for (int v = 0; v < kPreV; v++) {
        if (!valid(v)) continue;
#pragma unroll
        for (int r = 0; r < kRows; r++)
            if (r < B) xr[r][v] = *reinterpret_cast<const int4*>(a.in + (size_t)(row0 + r) * K + (lane + 32 * v) * 8);
        if (kNormalize && a.ln_w) {
            lw[kNormalize ? v : 0] = *reinterpret_cast<const int4*>(a.ln_w + (lane + 32 * v) * 8);  // (v when used)
            lb[kNormalize ? v : 0] = *reinterpret_cast<const int4*>(a.ln_b + (lane + 32 * v) * 8);
        }
    }
    if constexpr (kNormalize) {
        if (a.ln_w) {
#pragma unroll
            for (int r = 0; r < kRows; r++)
                if (r < B) layernorm_vectors<kPreV>(xr[r], [&](int v, int4& w, int4& b) { w = lw[v], b = lb[v]; }, K);
        }
    }
}

// column_dot's register path: the column's kPreV vectors in w, the rows' in xr. Returns row r's sum in lane r.
template <int kRows, int kPreV>
__device__ __forceinline__ float column_dot_registers(const int4 (&w)[kPreV], const int4 (&xr)[kRows][kPreV], int K,
                                                      int B) {
    const int lane = threadIdx.x % 32;
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; r++) acc[r] = 0.f;
#pragma unroll
    for (int v = 0; v < kPreV; v++) {
        if ((lane + 32 * v) * 8 >= K) continue;
        const Packed128<floatX> wv = as_packed(w[v]);
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            if (r < B) {
                const Packed128<floatX> x = as_packed(xr[r][v]);
                acc[r] += to_float(wv[0]) * to_float(x[0]) + to_float(wv[1]) * to_float(x[1]) +
                          to_float(wv[2]) * to_float(x[2]) + to_float(wv[3]) * to_float(x[3]) +
                          to_float(wv[4]) * to_float(x[4]) + to_float(wv[5]) * to_float(x[5]) +
                          to_float(wv[6]) * to_float(x[6]) + to_float(wv[7]) * to_float(x[7]);
            }
        }
    }
    return sums_to_lanes<kRows>(acc, B);
}

// The end of the classifier's greedy pick (DecodeGreedyPick): lane r of each warp holds its best for row
// row0 + r; the block's best per row goes to the partials, and the block that finishes last picks.
__device__ __forceinline__ void pick_greedy(const DecodeGreedyPick& p, unsigned long long best, int row0, int B) {
    __shared__ unsigned long long block_best[kWarps][kDecodeMaxRows];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane < B) block_best[warp][lane] = best;
    __syncthreads();
    if (threadIdx.x < B) {
        unsigned long long b = block_best[0][threadIdx.x];
        for (int w = 1; w < kWarps; w++) b = max(b, block_best[w][threadIdx.x]);
        p.partials[(size_t)(row0 + threadIdx.x) * gridDim.x + blockIdx.x] = b;
    }
    if (!last_to_arrive(p.count + blockIdx.y, gridDim.x)) return;
    for (int r = warp; r < B; r += kWarps) {
        unsigned long long b = sampling_rule::rank_floor();
        for (int i = lane; i < (int)gridDim.x; i += 32) b = max(b, __ldcg(p.partials + (size_t)(row0 + r) * gridDim.x + i));
#pragma unroll
        for (int off = 16; off > 0; off /= 2) b = max(b, __shfl_xor_sync(0xffffffffu, b, off));
        if (lane == 0)
            store_pick(row0 + r, sampling_rule::rank_id(b), p.len[row0 + r], p.prompt_len, p.len, p.next_tokens,
                       p.tokens_out, p.max_new, p.B);
    }
}

// kRows: the most rows a block holds (a.rows rounded up to 1, 2, 4 or 8), so registers scale with the batch
// kPick: the classifier with the greedy pick (a.pick; no residual, GELU or cache append). kPreV: weight vectors per
// lane loaded before the wait, kPre (3 blocks per SM) or kPreWide (grids of at most one block per SM). kInRegs: the
// register path (rows_to_registers; K <= kPreV · 256), else the rows staged in shared memory.
template <int kRows, bool kPick, int kPreV, bool kInRegs>
__global__ void __launch_bounds__(kWarps * 32, kPreV == kPre ? kBlocksPerSM : 1) matvec_kernel(const DecodeMatvec a) {
    extern __shared__ float xs[];  // (rows of this group, K) fp32
    const int row0 = blockIdx.y * a.rows, B = min(a.rows, a.B - row0), K = a.K;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // Before anything that depends on the kernel before this one: this warp's first weight columns are requested
    // into L2 and the first kPre vectors of its first column loaded into registers. Launched as a programmatic
    // dependent (a.pdl), the kernel runs this while the one before it finishes, so the weight fetch overlaps that
    // kernel's tail, this kernel's launch and its prologue (timings: docs/PERFORMANCE.md, Generation).
    const int stride = gridDim.x * kWarps;
    int n = blockIdx.x * kWarps + warp;
    auto prefetch_column = [&](int col) {
        const floatX* w = a.W + (size_t)col * K;
        for (int k = lane * 64; k < K; k += 32 * 64) asm volatile("prefetch.global.L2 [%0];" ::"l"(w + k));
    };
#pragma unroll
    for (int j = 0; j < kAhead; j++)
        if (n + j * stride < a.N) prefetch_column(n + j * stride);
    int4 wpre[kPreV];
    if (n < a.N) {
#pragma unroll
        for (int v = 0; v < kPreV; v++)
            if ((lane + 32 * v) * 8 < K) wpre[v] = load_weights(a.W + (size_t)n * K + (lane + 32 * v) * 8);
    }
    pdl_trigger_and_wait();  // everything below reads what the kernel before wrote
    int4 xr[kInRegs ? kRows : 1][kInRegs ? kPreV : 1];
    if constexpr (kInRegs) {
        rows_to_registers<kRows, kPreV, kPreV == kPre>(xr, a, row0, B);
    } else {
        float* ln_ws = xs + (size_t)B * K;  // ln_w, then ln_b (K each), when given
        stage_rows(xs, ln_ws, a.in + (size_t)row0 * K, B, K, a.ln_w, a.ln_b);
        if (a.ln_w) layernorm_rows(xs, ln_ws, B, K);
    }
    // one column's dot products: its first kPreV vectors preloaded in wpre (the warp's first column) or not
    auto dot = [&](int col, bool preloaded) {
        if constexpr (kInRegs) {
            // wide grids have a warp per column: only the preloaded one
            if constexpr (kPreV == kPreWide) {
                return column_dot_registers<kRows, kPreV>(wpre, xr, K, B);
            } else {
                if (preloaded) return column_dot_registers<kRows, kPreV>(wpre, xr, K, B);
                int4 w[kPreV];
#pragma unroll
                for (int v = 0; v < kPreV; v++)
                    if ((lane + 32 * v) * 8 < K) w[v] = load_weights(a.W + (size_t)col * K + (lane + 32 * v) * 8);
                return column_dot_registers<kRows, kPreV>(w, xr, K, B);
            }
        } else {
            return column_dot<kRows, kPreV>(a.W + (size_t)col * K, xs, K, B, 0, K, wpre, preloaded);
        }
    };

    const int r_mine = row0 + lane;
    const int pos_mine = a.k_cache && lane < B ? a.len[r_mine] - 1 : 0;  // the QKV product's cache position
    // the greedy pick: lane r's best (key, id) of row r over this warp's columns
    unsigned long long best = sampling_rule::rank_floor();
    auto column_done = [&](int col, float sum, float bias, float res) {
        if (lane < B) {
            if constexpr (kPick) {
                const floatX o = from_float<floatX>(sum + bias);
                a.out[(size_t)r_mine * a.N + col] = o;
                if (col < a.pick.V) best = max(best, sampling_rule::rank(sampling_detail::KeyOf<floatX>::key(o), col));
            } else {
                store_column(a, r_mine, col, sum, bias, res, pos_mine);
            }
        }
    };
    auto residual_of = [&](int col) {  // the epilogue's operands, loaded early so their latency hides
        return !kPick && a.residual && lane < B ? to_float(a.residual[(size_t)r_mine * a.N + col]) : 0.f;
    };
    for (; n < a.N; n += stride) {
        if (n + kAhead * stride < a.N) prefetch_column(n + kAhead * stride);
        const float bias = a.bias ? to_float(a.bias[n]) : 0.f, res = residual_of(n);
        // this warp's first column: its first weights are in registers
        column_done(n, dot(n, n < stride), bias, res);
    }
    if constexpr (kPick) pick_greedy(a.pick, best, row0, B);
}

}  // namespace decode_matvec_detail

// BF16 builds only: the kernel reads 8 elements per 16-byte vector (Packed128 of fp32 holds 4); FP32 builds decode
// through cuBLASLt (llmc/inference/decode_step.cuh chooses).
constexpr bool kDecodeMatvecAvailable = kFloatXIsBF16;

// Blocks a product's grid has at most (every block resident), and the partials a greedy pick needs for B rows.
inline int decode_matvec_max_blocks() { return device_sm_count() * decode_matvec_detail::kBlocksPerSM; }
inline size_t decode_greedy_pick_partials(int B) { return (size_t)B * decode_matvec_max_blocks(); }

inline void decode_matvec(const DecodeMatvec& a, cudaStream_t stream) {
    using namespace decode_matvec_detail;
    if (!kDecodeMatvecAvailable) {
        fprintf(stderr, "error: decode_matvec: bf16 builds only\n");
        exit(EXIT_FAILURE);
    }
    const int rows = std::min(a.rows, a.B);
    if (a.B < 1 || a.rows < 1 || a.rows > kDecodeMaxRows || a.K % 8 != 0 ||
        (a.k_cache && (a.len == nullptr || a.N != 3 * a.NH * a.HS)) ||
        (a.pick.partials && (a.gelu || a.residual || a.k_cache || a.pick.B != a.B || a.pick.V > a.N))) {
        fprintf(stderr, "error: decode_matvec: B %d, rows per block %d (1..%d), K %d (a multiple of 8), N %d (a greedy "
                "pick: a plain product of B rows, V <= N)\n", a.B, a.rows, kDecodeMaxRows, a.K, a.N);
        exit(EXIT_FAILURE);
    }
    // The register path for one row whose K the preloaded vectors cover (two rows held in registers spilled);
    // wide: the grid has at most one block per SM, a warp per column, no LayerNorm, so 12 vectors per lane fit.
    const int blocks = std::min((a.N + kWarps - 1) / kWarps, decode_matvec_max_blocks());  // all resident
    const bool wide = rows == 1 && blocks <= device_sm_count() && a.K > kPre * 256 && a.K <= kPreWide * 256 &&
                      !a.ln_w && !a.pick.partials;
    const bool in_regs = rows == 1 && (wide || a.K <= kPre * 256);
    auto kernel = rows == 1 ? matvec_kernel<1, false, kPre, false> : rows == 2 ? matvec_kernel<2, false, kPre, false>
                  : rows <= 4 ? matvec_kernel<4, false, kPre, false> : matvec_kernel<8, false, kPre, false>;
    if (a.pick.partials)  // the classifier: many columns, never wide
        kernel = in_regs ? matvec_kernel<1, true, kPre, true>
                 : rows == 1 ? matvec_kernel<1, true, kPre, false> : rows == 2 ? matvec_kernel<2, true, kPre, false>
                 : rows <= 4 ? matvec_kernel<4, true, kPre, false> : matvec_kernel<8, true, kPre, false>;
    else if (wide)
        kernel = matvec_kernel<1, false, kPreWide, true>;
    else if (in_regs)
        kernel = matvec_kernel<1, false, kPre, true>;
    const size_t smem = in_regs ? 0 : (size_t)(rows + (a.ln_w ? 2 : 0)) * a.K * sizeof(float);
    if (smem > 48 * 1024)  // the opt-in above 48 KiB (not a stream operation: fine inside a graph capture)
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    PdlLaunch launch(dim3(blocks, (a.B + rows - 1) / rows), dim3(kWarps * 32), smem, stream, a.pdl);
    cudaCheck(cudaLaunchKernelEx(&launch.config, kernel, a));
}
