// Flash attention backward on bf16 tensor cores (FlashAttention-2): the two kernels, their tile configurations and
// the launcher template. Which configurations are compiled is up to the includer: the engine's defaults in
// attention_flash.cuh, the sweep in dev/cuda/attention_flash_configs.cuh.
//
// D = rowsum(dO∘O) and dQ in one kernel (a block per query tile, K/V streamed), then dK, dV in a second (a block
// per key tile, Q/dO/LSE/D streamed). P is recomputed from Q, K and LSE in both. No atomics: every output element
// is written by exactly one thread, so results are bit-identical run to run.
// Layouts: qkv, dqkv (B, T, 3, NH, HS) bf16 (dqkv fully overwritten), out, dout (B, T, NH·HS) bf16, lse and the
// workspace D (B, NH, T) fp32. In every kernel Br = query rows per tile, Bc = key rows per tile.
#pragma once

#include <cmath>
#include <cstddef>

#include "llmc/core/cuda_common.h"
#include "llmc/mma/tiles.cuh"

namespace flash {

// The two score products both backward kernels recompute for a warp's 16 rows against a streamed tile of kCols rows
// (the dQ kernel: Bc keys; the dK/dV kernel: Br queries):
//   s = A1 · B1ᵀ,  dp = A2 · B2ᵀ.
// A1, A2 are the warp's rows row0..row0+15 of tiles sA1, sA2, or (kHoist) their fragments already in registers;
// B1, B2 are the tiles tB1, tB2. The dQ kernel passes A = Q, dO and B = K, V (S and dP); the dK/dV kernel passes
// A = K, V and B = Q, dO (Sᵀ and dPᵀ).
template <int HS, int kCols, bool kHoist>
__device__ __forceinline__ void backward_score_products(float (&s)[kCols / 8][4], float (&dp)[kCols / 8][4],
                                                        const uint32_t (&a1_frag)[kHoist ? HS / 16 : 1][4],
                                                        const uint32_t (&a2_frag)[kHoist ? HS / 16 : 1][4],
                                                        uint32_t sA1, uint32_t sA2, int row0, uint32_t tB1,
                                                        uint32_t tB2, int lane) {
#pragma unroll
    for (int n = 0; n < kCols / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t a1[4], a2[4];
        if constexpr (kHoist) {
#pragma unroll
            for (int e = 0; e < 4; e++) a1[e] = a1_frag[kk][e], a2[e] = a2_frag[kk][e];
        } else {
            load_a_frag<HS>(a1, sA1, row0, kk, lane);
            load_a_frag<HS>(a2, sA2, row0, kk, lane);
        }
#pragma unroll
        for (int nn = 0; nn < kCols / 16; nn++) {
            uint32_t b1[4], b2[4];
            load_b_frag_rows_n<HS>(b1, tB1, nn * 16, kk, lane);
            load_b_frag_rows_n<HS>(b2, tB2, nn * 16, kk, lane);
            mma_16816_pair(s, nn, a1, b1);
            mma_16816_pair(dp, nn, a2, b2);
        }
    }
}

// The configuration of one backward kernel. HS_ head size; Br_ = query rows per tile, Bc_ = key rows per tile: the
// block owns the rows of its side (the dQ kernel Br_ queries, the dK/dV kernel Bc_ keys; 16 per warp) and streams
// tiles of the other side. kHoist_: the operand fragments of the block's own rows (dQ: Q, dO; dK/dV: K, V) stay in
// registers for the whole loop (fewer ldmatrix, more registers). kMinBlocks_: blocks per SM for __launch_bounds__
// (caps the registers per thread).
template <int HS_, int Br_, int Bc_, bool kHoist_, int kMinBlocks_, bool kOwnsQueries_>
struct BackwardKernelConfig {
    static constexpr int HS = HS_, Br = Br_, Bc = Bc_, kMinBlocks = kMinBlocks_;
    static constexpr bool kHoist = kHoist_, kOwnsQueries = kOwnsQueries_;
    static constexpr int kOwnRows = kOwnsQueries ? Br : Bc, kStreamRows = kOwnsQueries ? Bc : Br;
    static constexpr int kWarps = kOwnRows / 16;
    static constexpr int kThreads = 32 * kWarps;
    static_assert(Br % 16 == 0 && Bc % 16 == 0 && HS % 16 == 0, "tiles are made of 16x16 mma operands");

    // Shared memory: two tiles of the block's own rows (they also stage its output stores), two stages of each of
    // the two streamed tiles (stage s at + s * kStageBytes), then two fp32 row statistics of kStatRows each (the dQ
    // kernel: D and LSE·log2e of its rows; the dK/dV kernel: LSE·log2e and D of both stages' query rows).
    static constexpr int kStatRows = kOwnsQueries ? Br : 2 * Br;
    static constexpr uint32_t kStageBytes = tile_bytes<kStreamRows, HS>();
    struct Layout {
        SwizzledTile<kOwnRows, HS> own0, own1;
        SwizzledTile<kStreamRows, HS> stream0[2], stream1[2];  // stage s at [0] + s * kStageBytes
        float stat0[kStatRows], stat1[kStatRows];
    };
    static constexpr size_t kSmemBytes = sizeof(Layout);
    static_assert(sizeof(SwizzledTile<kStreamRows, HS>) == kStageBytes, "stages are whole tiles, back to back");
};
template <int HS, int Br, int Bc, bool kHoist, int kMinBlocks>
using BackwardDQConfig = BackwardKernelConfig<HS, Br, Bc, kHoist, kMinBlocks, true>;
template <int HS, int Br, int Bc, bool kHoist, int kMinBlocks>
using BackwardDKVConfig = BackwardKernelConfig<HS, Br, Bc, kHoist, kMinBlocks, false>;

// Kernel 1: a block per (query tile, b, h). D = rowsum(dO∘O) for its rows (saved for kernel 2), then streams
// K/V tiles j <= diagonal: S = Q Kᵀ, P = exp2(S·scale·log2e − LSE·log2e), dP = dO Vᵀ, dS = P∘(dP − D), dQ += dS K.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    backward_dq_kernel(bf16* __restrict__ dqkv, float* __restrict__ D, const bf16* __restrict__ dout,
                       const bf16* __restrict__ out, const float* __restrict__ lse, const bf16* __restrict__ qkv,
                       int T, int NH) {
    constexpr int HS = Cfg::HS, Br = Cfg::Br, Bc = Cfg::Bc;
    constexpr bool kHoist = Cfg::kHoist;
    static_assert(Cfg::kOwnsQueries, "the dQ kernel's block owns query rows");
    extern __shared__ __align__(128) unsigned char flash_smem[];
    auto& L = shared_layout<typename Cfg::Layout>(flash_smem);  // own: Q, dO; streamed: K, V; statistics: D, LSE·log2e
    const uint32_t sQ = L.own0.addr(), sdO = L.own1.addr();
    const uint32_t sK = L.stream0[0].addr(), sV = L.stream1[0].addr();
    // the statistics' pointers from the block's base, as immediates: through L's members the compiler adds the offset
    // at every store instead of folding it into them
    using Layout = typename Cfg::Layout;
    float* sRowD = reinterpret_cast<float*>(flash_smem + offsetof(Layout, stat0));
    float* sRowLSE = reinterpret_cast<float*>(flash_smem + offsetof(Layout, stat1));

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int q_tile = gridDim.x - 1 - blockIdx.x;
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const bf16* Qg = qkv + (size_t)b * T * stride + h * HS;
    const bf16* Kg = Qg + C;
    const bf16* Vg = Qg + 2 * C;
    const bf16* dOg = dout + (size_t)b * T * C + h * HS;
    const bf16* Og = out + (size_t)b * T * C + h * HS;
    const size_t row_stat = ((size_t)b * NH + h) * T;  // (b, h) offset into LSE and D
    const int q0 = q_tile * Br;
    const float scale = 1.f / sqrtf((float)HS);
    const float scale_log2 = scale * kLog2e;

    const int kv_len = min(T, q0 + Br);
    const int num_kv = (kv_len + Bc - 1) / Bc;

    load_tile_async<Br, HS, Cfg::kThreads>(sQ, Qg, stride, q0, T);
    load_tile_async<Br, HS, Cfg::kThreads>(sdO, dOg, C, q0, T);
    load_tile_async<Bc, HS, Cfg::kThreads>(sK, Kg, stride, 0, T);
    load_tile_async<Bc, HS, Cfg::kThreads>(sV, Vg, stride, 0, T);
    cp_async_commit();

    // D for this warp's 16 rows, while the copies fly: lanes split the head dimension (all loads issued
    // before any is used), then a warp reduction per row.
    float rowdot[16];
#pragma unroll
    for (int r = 0; r < 16; r++) {
        const int row = q0 + warp * 16 + r;
        rowdot[r] = 0.f;
#pragma unroll
        for (int d0 = 0; d0 < HS; d0 += 64) {
            if (row < T) {
                const size_t at = (size_t)row * C + d0 + 2 * lane;
                float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dOg + at));
                float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(Og + at));
                rowdot[r] += x.x * y.x + x.y * y.y;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 16; r++) {
        const int row = q0 + warp * 16 + r;
        float acc = rowdot[r];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (lane == 0) {
            sRowD[warp * 16 + r] = acc;
            // rows past T get LSE = +inf, so their P is exactly zero
            sRowLSE[warp * 16 + r] = row < T ? lse[row_stat + row] * kLog2e : INFINITY;
            if (row < T) D[row_stat + row] = acc;
        }
    }
    __syncwarp();
    const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    const float rowD[2] = {sRowD[warp * 16 + g], sRowD[warp * 16 + g + 8]};
    const float rowL[2] = {sRowLSE[warp * 16 + g], sRowLSE[warp * 16 + g + 8]};

    // kHoist: Q and dO operand fragments stay in registers for the whole loop
    uint32_t q_frag[kHoist ? HS / 16 : 1][4], do_frag[kHoist ? HS / 16 : 1][4];
    float dq[HS / 8][4];
#pragma unroll
    for (int i = 0; i < HS / 8; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;

    for (int j = 0; j < num_kv; j++) {
        const int stage = j & 1;
        pipeline_step<Bc, HS, Cfg::kThreads>(sK, sV, stage, j + 1 < num_kv, Kg, stride, Vg, stride, (j + 1) * Bc, T,
                                             [] {});
        if (kHoist && j == 0) {
#pragma unroll
            for (int kk = 0; kk < HS / 16; kk++) {
                load_a_frag<HS>(q_frag[kk], sQ, warp * 16, kk, lane);
                load_a_frag<HS>(do_frag[kk], sdO, warp * 16, kk, lane);
            }
        }
        const uint32_t tK = sK + stage * Cfg::kStageBytes, tV = sV + stage * Cfg::kStageBytes;
        const int k0 = j * Bc;

        float s[Bc / 8][4], dp[Bc / 8][4];
        backward_score_products<HS, Bc, kHoist>(s, dp, q_frag, do_frag, sQ, sdO, warp * 16, tK, tV, lane);

        // P (masked where the tile reaches the future or T), then dS written over S, which is not needed again.
        float (&dS)[Bc / 8][4] = s;
        const bool needs_mask = k0 + Bc - 1 > q0 + warp * 16 || k0 + Bc > T;
#pragma unroll
        for (int n = 0; n < Bc / 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                float p = exp2f(s[n][e] * scale_log2 - rowL[r]);
                if (needs_mask) {
                    int key = k0 + 8 * n + 2 * t + (e & 1);
                    if (key > rows[r] || key >= T) p = 0.f;
                }
                dS[n][e] = p * (dp[n][e] - rowD[r]);
            }
        }

        // dQ += dS K
#pragma unroll
        for (int kk = 0; kk < Bc / 16; kk++) {
            uint32_t a[4];
            accumulators_to_a_frag(a, dS, kk);
#pragma unroll
            for (int nn = 0; nn < HS / 16; nn++) {
                uint32_t bfr[4];
                load_b_frag_rows_k<HS>(bfr, tK, kk * 16, nn, lane);
                mma_16816_pair(dq, nn, a, bfr);
            }
        }
        __syncthreads();
    }
    store_warp_rows<HS>(dq, scale, sQ, warp * 16, dqkv + (size_t)b * T * stride + h * HS, stride, q0 + warp * 16,
                        T, lane);
}

// Kernel 2: a block per (key tile, b, h); each warp owns 16 keys. Streams query tiles i from the diagonal on:
// Sᵀ = K Qᵀ, Pᵀ = exp2(Sᵀ·scale·log2e − LSE), dV += Pᵀ dO, dPᵀ = V dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − D), dK += dSᵀ Q.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    backward_dkv_kernel(bf16* __restrict__ dqkv, const float* __restrict__ D, const bf16* __restrict__ dout,
                        const float* __restrict__ lse, const bf16* __restrict__ qkv, int T, int NH) {
    constexpr int HS = Cfg::HS, Br = Cfg::Br, Bc = Cfg::Bc;
    constexpr bool kHoist = Cfg::kHoist;
    static_assert(!Cfg::kOwnsQueries, "the dK/dV kernel's block owns key rows");
    extern __shared__ __align__(128) unsigned char flash_smem[];
    auto& L = shared_layout<typename Cfg::Layout>(flash_smem);  // own: K, V; streamed: Q, dO; statistics: LSE·log2e, D
    const uint32_t sK = L.own0.addr(), sV = L.own1.addr();
    const uint32_t sQ = L.stream0[0].addr(), sdO = L.stream1[0].addr();
    using Layout = typename Cfg::Layout;  // the statistics from the base, as in the dQ kernel
    float* sLSE = reinterpret_cast<float*>(flash_smem + offsetof(Layout, stat0));  // [2][Br]
    float* sD = reinterpret_cast<float*>(flash_smem + offsetof(Layout, stat1));    // [2][Br]

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int kv_tile = blockIdx.x;  // the first tiles see the most queries, so they go first
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const bf16* Qg = qkv + (size_t)b * T * stride + h * HS;
    const bf16* Kg = Qg + C;
    const bf16* Vg = Qg + 2 * C;
    const bf16* dOg = dout + (size_t)b * T * C + h * HS;
    const size_t row_stat = ((size_t)b * NH + h) * T;
    const int k0 = kv_tile * Bc;
    const float scale = 1.f / sqrtf((float)HS);
    const float scale_log2 = scale * kLog2e;

    const int first_q = k0 / Br;
    const int num_q = (T + Br - 1) / Br;

    auto load_row_stats = [&](int stage, int i) {
        for (int r = threadIdx.x; r < Br; r += Cfg::kThreads) {
            int row = i * Br + r;
            sLSE[stage * Br + r] = row < T ? lse[row_stat + row] * kLog2e : INFINITY;
            sD[stage * Br + r] = row < T ? D[row_stat + row] : 0.f;
        }
    };

    load_tile_async<Bc, HS, Cfg::kThreads>(sK, Kg, stride, k0, T);
    load_tile_async<Bc, HS, Cfg::kThreads>(sV, Vg, stride, k0, T);
    load_tile_async<Br, HS, Cfg::kThreads>(sQ, Qg, stride, first_q * Br, T);
    load_tile_async<Br, HS, Cfg::kThreads>(sdO, dOg, C, first_q * Br, T);
    cp_async_commit();
    load_row_stats(0, first_q);

    // kHoist: K and V operand fragments stay in registers for the whole loop
    uint32_t k_frag[kHoist ? HS / 16 : 1][4], v_frag[kHoist ? HS / 16 : 1][4];
    float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
    for (int i = 0; i < HS / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[i][e] = dv[i][e] = 0.f;
    const int keys[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};

    for (int i = first_q; i < num_q; i++) {
        const int stage = (i - first_q) & 1;
        pipeline_step<Br, HS, Cfg::kThreads>(sQ, sdO, stage, i + 1 < num_q, Qg, stride, dOg, C, (i + 1) * Br, T,
                                             [&] { load_row_stats(stage ^ 1, i + 1); });
        if (kHoist && i == first_q) {
#pragma unroll
            for (int kk = 0; kk < HS / 16; kk++) {
                load_a_frag<HS>(k_frag[kk], sK, warp * 16, kk, lane);
                load_a_frag<HS>(v_frag[kk], sV, warp * 16, kk, lane);
            }
        }
        const uint32_t tQ = sQ + stage * Cfg::kStageBytes, tdO = sdO + stage * Cfg::kStageBytes;
        const float* rowL = sLSE + stage * Br;
        const float* rowD = sD + stage * Br;
        const int q0 = i * Br;

        float s[Br / 8][4], dp[Br / 8][4];
        backward_score_products<HS, Br, kHoist>(s, dp, k_frag, v_frag, sK, sV, warp * 16, tQ, tdO, lane);

        // Pᵀ written over Sᵀ, dSᵀ over dPᵀ. Queries before this warp's keys are masked (rows past T have LSE = +inf).
        float (&dS)[Br / 8][4] = dp;  // transposed: rows are this warp's keys
        const bool needs_mask = q0 < k0 + warp * 16 + 15;
#pragma unroll
        for (int n = 0; n < Br / 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = 8 * n + 2 * t + (e & 1);
                float p = exp2f(s[n][e] * scale_log2 - rowL[c]);
                if (needs_mask && q0 + c < keys[e >> 1]) p = 0.f;
                s[n][e] = p;
                dS[n][e] = p * (dp[n][e] - rowD[c]);
            }
        }

        // dV += Pᵀ dO ; dK += dSᵀ Q
#pragma unroll
        for (int kk = 0; kk < Br / 16; kk++) {
            uint32_t pa[4], da[4];
            accumulators_to_a_frag(pa, s, kk);
            accumulators_to_a_frag(da, dS, kk);
#pragma unroll
            for (int nn = 0; nn < HS / 16; nn++) {
                uint32_t ob[4], qb[4];
                load_b_frag_rows_k<HS>(ob, tdO, kk * 16, nn, lane);
                load_b_frag_rows_k<HS>(qb, tQ, kk * 16, nn, lane);
                mma_16816_pair(dv, nn, pa, ob);
                mma_16816_pair(dk, nn, da, qb);
            }
        }
        __syncthreads();
    }
    bf16* dKg = dqkv + (size_t)b * T * stride + C + h * HS;
    store_warp_rows<HS>(dk, scale, sK, warp * 16, dKg, stride, k0 + warp * 16, T, lane);
    store_warp_rows<HS>(dv, 1.f, sV, warp * 16, dKg + C, stride, k0 + warp * 16, T, lane);
}

// One backward configuration: the dQ kernel's and the dK/dV kernel's (each owns the rows of its own side, so the
// two may tile differently: with 8 warps the dQ kernel owns Br = 128 queries, the dK/dV kernel Bc = 128 keys).
template <class DQ_, class DKV_>
struct BackwardConfig {
    using DQ = DQ_;
    using DKV = DKV_;
    static_assert(DQ::kOwnsQueries && !DKV::kOwnsQueries, "a dQ kernel configuration, then a dK/dV one");
    static_assert(DQ::HS == DKV::HS, "both kernels of a backward work on one head size");
};

// D is the workspace (B·NH·T floats): written by the dQ kernel, read by the dK/dV kernel.
template <class Cfg>
inline cudaError_t launch_backward(bf16* dqkv, float* D, const bf16* dout, const bf16* out, const float* lse,
                                   const bf16* qkv, int B, int T, int NH, cudaStream_t stream) {
    using DQ = typename Cfg::DQ;
    using DKV = typename Cfg::DKV;
    auto dq_kernel = backward_dq_kernel<DQ>;
    auto dkv_kernel = backward_dkv_kernel<DKV>;
    static const cudaError_t smem_err = [&] {
        cudaError_t e = allow_smem(dq_kernel, DQ::kSmemBytes);
        return e != cudaSuccess ? e : allow_smem(dkv_kernel, DKV::kSmemBytes);
    }();
    if (smem_err != cudaSuccess) return smem_err;
    cudaError_t err;
    dq_kernel<<<dim3((T + DQ::Br - 1) / DQ::Br, B * NH), DQ::kThreads, DQ::kSmemBytes, stream>>>(
        dqkv, D, dout, out, lse, qkv, T, NH);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    dkv_kernel<<<dim3((T + DKV::Bc - 1) / DKV::Bc, B * NH), DKV::kThreads, DKV::kSmemBytes, stream>>>(
        dqkv, D, dout, lse, qkv, T, NH);
    return cudaGetLastError();
}

}  // namespace flash
