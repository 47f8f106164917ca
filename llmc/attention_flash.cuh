// Causal flash attention on bf16 tensor cores (FlashAttention-2 loop order), forward and backward.
//
// Layout, as the QKV projection writes it and the rest of the model reads it:
//   qkv  (B, T, 3, NH, HS) bf16     Q, K, V of every head packed per token
//   out  (B, T, NH*HS)     bf16     heads concatenated
//   lse  (B, NH, T)        fp32     natural-log log-sum-exp of each scaled score row (saved for backward)
//   dqkv (B, T, 3, NH, HS) bf16     fully overwritten by the backward (not accumulated)
// Softmax scale 1/sqrt(HS); HS = 64 or 128; any T >= 1 (tiles are padded and masked).
//
// Forward: one thread block per (query tile of Br rows, b, h); each warp owns 16 query rows. K/V tiles of Bc
// keys stream through shared memory with cp.async (two stages, the next tile loads while this one computes);
// S = Q·Kᵀ and O += P·V run as mma.sync m16n8k16 bf16 with fp32 accumulators, operands fetched by ldmatrix from
// XOR-swizzled shared memory (no bank conflicts); the running max m and sum l stay in registers; tiles above the
// diagonal are never visited.
// Backward: D = rowsum(dO∘O) and dQ in one kernel (a block per query tile, K/V streamed), then dK, dV in a
// second (a block per key tile, Q/dO/LSE/D streamed). P is recomputed from Q, K and LSE in both. No atomics:
// every output element is written by exactly one thread, so results are bit-identical run to run.
//
// Launchers return cudaSuccess or the launch error; callers check it (cudaCheck in llmc/cuda_common.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "cuda_common.h"

namespace flash {

using bf16 = __nv_bfloat16;

// ------------------------------------------------------------------------------------------ PTX wrappers
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared; when !valid the 16 bytes are zero-filled and nothing is read.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c (16x8 fp32) += a (16x16 bf16, row-major fragment) * b (16x8 bf16, column fragment)
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// ------------------------------------------------------------------------------------------ shared-memory tiles
// A tile is kRows x HS bf16, row-major, with the 16-byte chunks of row r permuted by XOR (r & 7): the eight rows
// an ldmatrix phase touches then sit in eight different bank groups.
template <int HS>
__device__ __forceinline__ uint32_t tile_chunk_addr(uint32_t base, int row, int chunk) {
    return base + static_cast<uint32_t>((row * HS + ((chunk ^ (row & 7)) << 3)) * 2);
}

// Copies rows [t0, t0 + kRows) of one head's Q, K or V (row stride `stride` elements) into a tile; rows >= T
// become zeros.
template <int kRows, int HS, int kThreads>
__device__ __forceinline__ void load_tile_async(uint32_t tile, const bf16* src, size_t stride, int t0, int T) {
    constexpr int kChunksPerRow = HS / 8;
    constexpr int kChunks = kRows * kChunksPerRow;
    static_assert(kChunks % kThreads == 0, "tile chunks must divide evenly among threads");
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; i++) {
        int id = threadIdx.x + i * kThreads;
        int row = id / kChunksPerRow, chunk = id % kChunksPerRow;
        bool valid = t0 + row < T;
        const bf16* g = src + (valid ? static_cast<size_t>(t0 + row) * stride + chunk * 8 : 0);
        cp_async_16(tile_chunk_addr<HS>(tile, row, chunk), g, valid);
    }
}

// A-operand fragments (16 rows x 16 columns starting at column 16*kk) of a row-major tile, rows row0..row0+15.
template <int HS>
__device__ __forceinline__ void load_a_frag(uint32_t (&a)[4], uint32_t tile, int row0, int kk, int lane) {
    int row = row0 + (lane & 7) + ((lane >> 3) & 1) * 8;
    int chunk = 2 * kk + (lane >> 4);
    ldmatrix_x4(a, tile_chunk_addr<HS>(tile, row, chunk));
}

// B operand = tileᵀ (tile rows are the n index, columns the k index), for two n-tiles n0..n0+15, k 16*kk..+15.
// b[0], b[1] feed n-tile n0; b[2], b[3] feed n-tile n0 + 8.
template <int HS>
__device__ __forceinline__ void load_b_frag_rows_n(uint32_t (&b)[4], uint32_t tile, int n0, int kk, int lane) {
    int row = n0 + (lane & 7) + (lane >> 4) * 8;
    int chunk = 2 * kk + ((lane >> 3) & 1);
    ldmatrix_x4(b, tile_chunk_addr<HS>(tile, row, chunk));
}

// B operand = tile itself (tile rows are the k index, columns the n index), k rows k0..k0+15, n columns
// 16*nn..+15. b[0], b[1] feed n-tile 2*nn; b[2], b[3] feed n-tile 2*nn + 1.
template <int HS>
__device__ __forceinline__ void load_b_frag_rows_k(uint32_t (&b)[4], uint32_t tile, int k0, int nn, int lane) {
    int row = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
    int chunk = 2 * nn + (lane >> 4);
    ldmatrix_x4_trans(b, tile_chunk_addr<HS>(tile, row, chunk));
}

// One step of the two-stage cp.async pipeline every kernel here runs: if there is a next tile, start copying rows
// [next_row0, next_row0 + kRows) of X and Y into the other stage and run `while_copying` (work that overlaps the
// copies); then wait until this stage's tiles have landed and the whole block can see them.
template <int kRows, int HS, int kThreads, typename F>
__device__ __forceinline__ void pipeline_step(uint32_t sX, uint32_t sY, int stage, bool has_next, const bf16* Xg,
                                              size_t x_stride, const bf16* Yg, size_t y_stride, int next_row0, int T,
                                              F&& while_copying) {
    if (has_next) {
        const uint32_t next = (stage ^ 1) * kRows * HS * 2;
        load_tile_async<kRows, HS, kThreads>(sX + next, Xg, x_stride, next_row0, T);
        load_tile_async<kRows, HS, kThreads>(sY + next, Yg, y_stride, next_row0, T);
        cp_async_commit();
        while_copying();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
    __syncthreads();
}

// Writes a warp's 16 x HS fp32 accumulator (times `mul`) as bf16 to global rows t0..t0+15 (< T), staging
// through the warp's own 16 rows of a shared tile so that global stores are 16 bytes wide.
template <int HS>
__device__ __forceinline__ void store_warp_rows(float (&acc)[HS / 8][4], float mul, uint32_t tile, int row0,
                                                bf16* dst, size_t stride, int t0, int T, int lane) {
    int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = row0 + g + 8 * r;
            uint32_t v = pack_bf16x2(acc[dn][2 * r] * mul, acc[dn][2 * r + 1] * mul);
            uint32_t addr = tile_chunk_addr<HS>(tile, row, dn) + t * 4;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v));
        }
    }
    __syncwarp();
    constexpr int kChunksPerRow = HS / 8;
#pragma unroll
    for (int i = 0; i < 16 * kChunksPerRow / 32; i++) {
        int id = lane + 32 * i;
        int row = id / kChunksPerRow, chunk = id % kChunksPerRow;
        if (t0 + row < T) {
            uint4 v;
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                         : "r"(tile_chunk_addr<HS>(tile, row0 + row, chunk)));
            *reinterpret_cast<uint4*>(dst + static_cast<size_t>(t0 + row) * stride + chunk * 8) = v;
        }
    }
}

// ------------------------------------------------------------------------------------------ forward
// kMT = 16-row m-tiles per warp: with 2, every K/V operand fragment read from shared memory feeds two MMAs
// (half the ldmatrix traffic per FLOP) at the price of twice the accumulator registers.
template <int HS, int kWarps, int Bc, int kMT = 1>
struct ForwardConfig {
    static constexpr int kWarpRows = 16 * kMT;
    static constexpr int Br = kWarpRows * kWarps;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr size_t kSmemBytes = (size_t)(Br + 4 * Bc) * HS * sizeof(bf16);  // Q + 2 stages of K, V
};

template <int HS, int kWarps, int Bc, int kMinBlocks, int kMT>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks)  // kMinBlocks per SM caps the registers per thread
    forward_kernel(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ qkv, int T, int NH) {
    using Cfg = ForwardConfig<HS, kWarps, Bc, kMT>;
    constexpr int Br = Cfg::Br;
    static_assert(Bc % 16 == 0 && HS % 16 == 0, "tiles are made of 16x16 mma operands");
    extern __shared__ __align__(128) unsigned char flash_smem[];
    const uint32_t sQ = smem_addr(flash_smem);
    const uint32_t sK = sQ + Br * HS * 2;       // stage s at sK + s * Bc * HS * 2
    const uint32_t sV = sK + 2 * Bc * HS * 2;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int q_tile = gridDim.x - 1 - blockIdx.x;  // longest rows (most K/V tiles) start first
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const bf16* Qg = qkv + (size_t)b * T * stride + h * HS;
    const bf16* Kg = Qg + C;
    const bf16* Vg = Qg + 2 * C;
    const int q0 = q_tile * Br;
    const int warp_row0 = warp * Cfg::kWarpRows;  // first row of this warp inside the tile
    const float scale_log2 = kLog2e / sqrtf((float)HS);

    // Keys this tile can see: [0, min(T, q0 + Br)).
    const int kv_len = min(T, q0 + Br);
    const int num_kv = (kv_len + Bc - 1) / Bc;

    load_tile_async<Br, HS, Cfg::kThreads>(sQ, Qg, stride, q0, T);
    load_tile_async<Bc, HS, Cfg::kThreads>(sK, Kg, stride, 0, T);
    load_tile_async<Bc, HS, Cfg::kThreads>(sV, Vg, stride, 0, T);
    cp_async_commit();

    uint32_t qf[kMT][HS / 16][4];
    float o[kMT][HS / 8][4];
    float m[kMT][2], l[kMT][2];  // running row max (log2 domain) and sum (this thread's columns until the end)
    int rows[kMT][2];            // the query rows this thread holds: g and g + 8 of each m-tile
#pragma unroll
    for (int mt = 0; mt < kMT; mt++) {
#pragma unroll
        for (int i = 0; i < HS / 8; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            m[mt][r] = -INFINITY;
            l[mt][r] = 0.f;
            rows[mt][r] = q0 + warp_row0 + mt * 16 + g + 8 * r;
        }
    }

    for (int j = 0; j < num_kv; j++) {
        const int stage = j & 1;
        pipeline_step<Bc, HS, Cfg::kThreads>(sK, sV, stage, j + 1 < num_kv, Kg, stride, Vg, stride, (j + 1) * Bc, T,
                                             [] {});
        if (j == 0) {
#pragma unroll
            for (int mt = 0; mt < kMT; mt++)
#pragma unroll
                for (int kk = 0; kk < HS / 16; kk++) load_a_frag<HS>(qf[mt][kk], sQ, warp_row0 + mt * 16, kk, lane);
        }
        const uint32_t tK = sK + stage * Bc * HS * 2, tV = sV + stage * Bc * HS * 2;
        const int k0 = j * Bc;

        // S = Q Kᵀ
        float s[kMT][Bc / 8][4];
#pragma unroll
        for (int mt = 0; mt < kMT; mt++)
#pragma unroll
            for (int n = 0; n < Bc / 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) {
#pragma unroll
            for (int nn = 0; nn < Bc / 16; nn++) {
                uint32_t bfr[4];
                load_b_frag_rows_n<HS>(bfr, tK, nn * 16, kk, lane);
#pragma unroll
                for (int mt = 0; mt < kMT; mt++) {
                    mma_16816(s[mt][2 * nn], qf[mt][kk], bfr[0], bfr[1]);
                    mma_16816(s[mt][2 * nn + 1], qf[mt][kk], bfr[2], bfr[3]);
                }
            }
        }

        // Scale into the log2 domain; mask the future (and keys past T) only on tiles that reach it.
        const bool needs_mask = k0 + Bc - 1 > q0 + warp_row0 || k0 + Bc > T;
#pragma unroll
        for (int mt = 0; mt < kMT; mt++) {
#pragma unroll
            for (int n = 0; n < Bc / 8; n++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float v = s[mt][n][e] * scale_log2;
                    if (needs_mask) {
                        int key = k0 + 8 * n + 2 * t + (e & 1);
                        if (key > rows[mt][e >> 1] || key >= T) v = -INFINITY;
                    }
                    s[mt][n][e] = v;
                }
            }
        }

        // Online softmax: new max, rescale what was accumulated, P = exp2(S - m).
#pragma unroll
        for (int mt = 0; mt < kMT; mt++) {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = m[mt][r];
#pragma unroll
                for (int n = 0; n < Bc / 8; n++) mx = fmaxf(mx, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float base = mx == -INFINITY ? 0.f : mx;  // a row with nothing visible yet stays all-zero
                const float alpha = exp2f(m[mt][r] - base);
                m[mt][r] = mx;
                float sum = 0.f;
#pragma unroll
                for (int n = 0; n < Bc / 8; n++) {
                    s[mt][n][2 * r] = exp2f(s[mt][n][2 * r] - base);
                    s[mt][n][2 * r + 1] = exp2f(s[mt][n][2 * r + 1] - base);
                    sum += s[mt][n][2 * r] + s[mt][n][2 * r + 1];
                }
                l[mt][r] = l[mt][r] * alpha + sum;
#pragma unroll
                for (int dn = 0; dn < HS / 8; dn++) {
                    o[mt][dn][2 * r] *= alpha;
                    o[mt][dn][2 * r + 1] *= alpha;
                }
            }
        }

        // O += P V  (P goes from accumulator layout straight into A-operand registers)
#pragma unroll
        for (int kk = 0; kk < Bc / 16; kk++) {
            uint32_t a[kMT][4];
#pragma unroll
            for (int mt = 0; mt < kMT; mt++) {
                a[mt][0] = pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int nn = 0; nn < HS / 16; nn++) {
                uint32_t bfr[4];
                load_b_frag_rows_k<HS>(bfr, tV, kk * 16, nn, lane);
#pragma unroll
                for (int mt = 0; mt < kMT; mt++) {
                    mma_16816(o[mt][2 * nn], a[mt], bfr[0], bfr[1]);
                    mma_16816(o[mt][2 * nn + 1], a[mt], bfr[2], bfr[3]);
                }
            }
        }
        __syncthreads();  // this stage is refilled by the next iteration's copy
    }

    // Final normalisation, LSE, and the store (through this warp's rows of the Q tile).
#pragma unroll
    for (int mt = 0; mt < kMT; mt++) {
        float inv[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 1);
            l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 2);
            inv[r] = 1.f / l[mt][r];
            if (t == 0 && rows[mt][r] < T)
                lse[((size_t)b * NH + h) * T + rows[mt][r]] = (m[mt][r] + log2f(l[mt][r])) * kLn2;
        }
#pragma unroll
        for (int dn = 0; dn < HS / 8; dn++) {
            o[mt][dn][0] *= inv[0];
            o[mt][dn][1] *= inv[0];
            o[mt][dn][2] *= inv[1];
            o[mt][dn][3] *= inv[1];
        }
        store_warp_rows<HS>(o[mt], 1.f, sQ, warp_row0 + mt * 16, out + (size_t)b * T * C + h * HS, C,
                            q0 + warp_row0 + mt * 16, T, lane);
    }
}

// ------------------------------------------------------------------------------------------ backward
// The two score products both backward kernels recompute for a warp's 16 rows against a tile of kCols rows:
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
            mma_16816(s[2 * nn], a1, b1[0], b1[1]);
            mma_16816(s[2 * nn + 1], a1, b1[2], b1[3]);
            mma_16816(dp[2 * nn], a2, b2[0], b2[1]);
            mma_16816(dp[2 * nn + 1], a2, b2[2], b2[3]);
        }
    }
}

// Kernel 1: a block per (query tile, b, h). D = rowsum(dO∘O) for its rows (saved for kernel 2), then streams
// K/V tiles j <= diagonal: S = Q Kᵀ, P = exp2(S·scale·log2e − LSE·log2e), dP = dO Vᵀ, dS = P∘(dP − D), dQ += dS K.
template <int HS, int kWarps, int Bc>
struct BackwardDQConfig {
    static constexpr int Br = 16 * kWarps;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr size_t kSmemBytes = (size_t)(2 * Br + 4 * Bc) * HS * sizeof(bf16) + 2 * Br * sizeof(float);
};

template <int HS, int kWarps, int Bc, bool kHoist, int kMinBlocks>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks)
    backward_dq_kernel(bf16* __restrict__ dqkv, float* __restrict__ D, const bf16* __restrict__ dout,
                       const bf16* __restrict__ out, const float* __restrict__ lse, const bf16* __restrict__ qkv,
                       int T, int NH) {
    using Cfg = BackwardDQConfig<HS, kWarps, Bc>;
    constexpr int Br = Cfg::Br;
    extern __shared__ __align__(128) unsigned char flash_smem[];
    const uint32_t sQ = smem_addr(flash_smem);
    const uint32_t sdO = sQ + Br * HS * 2;
    const uint32_t sK = sdO + Br * HS * 2;
    const uint32_t sV = sK + 2 * Bc * HS * 2;
    float* sRowD = reinterpret_cast<float*>(flash_smem + (2 * Br + 4 * Bc) * HS * 2);
    float* sRowLSE = sRowD + Br;

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

    // kHoist: Q and dO operand fragments stay in registers for the whole loop (fewer ldmatrix, more registers)
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
        const uint32_t tK = sK + stage * Bc * HS * 2, tV = sV + stage * Bc * HS * 2;
        const int k0 = j * Bc;

        float s[Bc / 8][4], dp[Bc / 8][4];
        backward_score_products<HS, Bc, kHoist>(s, dp, q_frag, do_frag, sQ, sdO, warp * 16, tK, tV, lane);

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
                s[n][e] = p * (dp[n][e] - rowD[r]);  // dS
            }
        }

        // dQ += dS K
#pragma unroll
        for (int kk = 0; kk < Bc / 16; kk++) {
            uint32_t a[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                             pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int nn = 0; nn < HS / 16; nn++) {
                uint32_t bfr[4];
                load_b_frag_rows_k<HS>(bfr, tK, kk * 16, nn, lane);
                mma_16816(dq[2 * nn], a, bfr[0], bfr[1]);
                mma_16816(dq[2 * nn + 1], a, bfr[2], bfr[3]);
            }
        }
        __syncthreads();
    }
    store_warp_rows<HS>(dq, scale, sQ, warp * 16, dqkv + (size_t)b * T * stride + h * HS, stride, q0 + warp * 16,
                        T, lane);
}

// Kernel 2: a block per (key tile, b, h); each warp owns 16 keys. Streams query tiles i from the diagonal on:
// Sᵀ = K Qᵀ, Pᵀ = exp2(Sᵀ·scale·log2e − LSE), dV += Pᵀ dO, dPᵀ = V dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − D), dK += dSᵀ Q.
template <int HS, int kWarps, int Br>
struct BackwardDKVConfig {
    static constexpr int Bc = 16 * kWarps;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr size_t kSmemBytes = (size_t)(2 * Bc + 4 * Br) * HS * sizeof(bf16) + 4 * Br * sizeof(float);
};

template <int HS, int kWarps, int Br, bool kHoist, int kMinBlocks>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks)
    backward_dkv_kernel(bf16* __restrict__ dqkv, const float* __restrict__ D, const bf16* __restrict__ dout,
                        const float* __restrict__ lse, const bf16* __restrict__ qkv, int T, int NH) {
    using Cfg = BackwardDKVConfig<HS, kWarps, Br>;
    constexpr int Bc = Cfg::Bc;
    extern __shared__ __align__(128) unsigned char flash_smem[];
    const uint32_t sK = smem_addr(flash_smem);
    const uint32_t sV = sK + Bc * HS * 2;
    const uint32_t sQ = sV + Bc * HS * 2;    // stage s at sQ + s * Br * HS * 2
    const uint32_t sdO = sQ + 2 * Br * HS * 2;
    float* sLSE = reinterpret_cast<float*>(flash_smem + (2 * Bc + 4 * Br) * HS * 2);  // [2][Br]
    float* sD = sLSE + 2 * Br;                                                           // [2][Br]

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
        const uint32_t tQ = sQ + stage * Br * HS * 2, tdO = sdO + stage * Br * HS * 2;
        const float* rowL = sLSE + stage * Br;
        const float* rowD = sD + stage * Br;
        const int q0 = i * Br;

        float s[Br / 8][4], dp[Br / 8][4];
        backward_score_products<HS, Br, kHoist>(s, dp, k_frag, v_frag, sK, sV, warp * 16, tQ, tdO, lane);

        // Pᵀ into s, dSᵀ into dp. Queries before this warp's keys are masked (rows past T have LSE = +inf).
        const bool needs_mask = q0 < k0 + warp * 16 + 15;
#pragma unroll
        for (int n = 0; n < Br / 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = 8 * n + 2 * t + (e & 1);
                float p = exp2f(s[n][e] * scale_log2 - rowL[c]);
                if (needs_mask && q0 + c < keys[e >> 1]) p = 0.f;
                s[n][e] = p;
                dp[n][e] = p * (dp[n][e] - rowD[c]);
            }
        }

        // dV += Pᵀ dO ; dK += dSᵀ Q
#pragma unroll
        for (int kk = 0; kk < Br / 16; kk++) {
            uint32_t pa[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                              pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            uint32_t da[4] = {pack_bf16x2(dp[2 * kk][0], dp[2 * kk][1]), pack_bf16x2(dp[2 * kk][2], dp[2 * kk][3]),
                              pack_bf16x2(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                              pack_bf16x2(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
#pragma unroll
            for (int nn = 0; nn < HS / 16; nn++) {
                uint32_t ob[4], qb[4];
                load_b_frag_rows_k<HS>(ob, tdO, kk * 16, nn, lane);
                load_b_frag_rows_k<HS>(qb, tQ, kk * 16, nn, lane);
                mma_16816(dv[2 * nn], pa, ob[0], ob[1]);
                mma_16816(dv[2 * nn + 1], pa, ob[2], ob[3]);
                mma_16816(dk[2 * nn], da, qb[0], qb[1]);
                mma_16816(dk[2 * nn + 1], da, qb[2], qb[3]);
            }
        }
        __syncthreads();
    }
    bf16* dKg = dqkv + (size_t)b * T * stride + C + h * HS;
    store_warp_rows<HS>(dk, scale, sK, warp * 16, dKg, stride, k0 + warp * 16, T, lane);
    store_warp_rows<HS>(dv, 1.f, sV, warp * 16, dKg + C, stride, k0 + warp * 16, T, lane);
}

// ------------------------------------------------------------------------------------------ launch helpers
// Raises a kernel's dynamic shared-memory limit above the default 48 KB. Called once per kernel instantiation
// (a function-local static in each launcher); processes drive one GPU each, so once per process is enough.
template <typename Kernel>
inline cudaError_t allow_smem(Kernel kernel, size_t bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

inline bool head_size_supported(int HS, const char* who) {
    if (HS == 64 || HS == 128) return true;
    fprintf(stderr, "%s: head size %d is not supported (flash attention is built for 64 and 128)\n", who, HS);
    return false;
}

template <int HS, int kWarps, int Bc, int kMinBlocks, int kMT = 1>
inline cudaError_t launch_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, cudaStream_t stream) {
    using Cfg = ForwardConfig<HS, kWarps, Bc, kMT>;
    auto kernel = forward_kernel<HS, kWarps, Bc, kMinBlocks, kMT>;
    static const cudaError_t err = allow_smem(kernel, Cfg::kSmemBytes);
    if (err != cudaSuccess) return err;
    dim3 grid((T + Cfg::Br - 1) / Cfg::Br, B * NH);
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(out, lse, qkv, T, NH);
    return cudaGetLastError();
}

template <int HS, int kWarps, int kTile, bool kHoist, int kMinBlocks = 1>
inline cudaError_t launch_backward(bf16* dqkv, float* D, const bf16* dout, const bf16* out, const float* lse,
                                   const bf16* qkv, int B, int T, int NH, cudaStream_t stream) {
    using DQ = BackwardDQConfig<HS, kWarps, kTile>;
    using DKV = BackwardDKVConfig<HS, kWarps, kTile>;
    auto dq_kernel = backward_dq_kernel<HS, kWarps, kTile, kHoist, kMinBlocks>;
    auto dkv_kernel = backward_dkv_kernel<HS, kWarps, kTile, kHoist, kMinBlocks>;
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

// ------------------------------------------------------------------------------------------ public API
// Tile configurations (`config`; 0 = the tuned default, what the engine uses; dev/cuda sweeps the others):
//   forward   1: Br 64 (4 warps), Bc 64, >= 2 blocks/SM     2: Br 128 (8 warps), Bc 64, >= 1 block/SM
//             3: Br 64 (4 warps), Bc 128, >= 2 blocks/SM    4: as 1 with >= 4 (HS 64) / 3 (HS 128) blocks/SM
//             5: Br 128 (4 warps of 32 rows each), Bc 64     6: as 5 with Bc 32    (HS 128: 5, 6 = 1; they spill)
//   backward  1: 64-row tiles, 4 warps, operand fragments re-read from shared memory each tile
//             2: as 1, with the loop-invariant operand fragments held in registers
//             3: 128-row tiles (8 warps) against 64-row tiles, fragments re-read
//             4: HS 64: as 2, registers capped for >= 3 blocks/SM; HS 128: as 1 (a cap spills)
constexpr int kFlashForwardConfigs = 6;
constexpr int kFlashBackwardConfigs = 4;
// Defaults measured on an H200 (docs/PERFORMANCE.md, Attention): Bc 128 pays for HS 64; HS 128 wants Bc 64.
// Backward at HS 64: three blocks per SM (config 4, registers capped, a small spill) hide more of the ldmatrix
// latency than two; measured at B8..32 T1024, B2 T2048, B4 T4096 and B1 T16384 it is level or faster everywhere.
inline int attention_flash_forward_default_config(int HS) { return HS == 64 ? 3 : 1; }
inline int attention_flash_backward_default_config(int HS) { return HS == 64 ? 4 : 1; }

inline cudaError_t attention_flash_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                                           int NH, int HS, cudaStream_t stream, int config = 0) {
    if (!flash::head_size_supported(HS, "attention_flash_forward")) return cudaErrorInvalidValue;
    if (config == 0) config = attention_flash_forward_default_config(HS);
    switch (HS * 10 + config) {
        case 641: return flash::launch_forward<64, 4, 64, 2>(out, lse, qkv, B, T, NH, stream);
        case 642: return flash::launch_forward<64, 8, 64, 1>(out, lse, qkv, B, T, NH, stream);
        case 643: return flash::launch_forward<64, 4, 128, 2>(out, lse, qkv, B, T, NH, stream);
        case 644: return flash::launch_forward<64, 4, 64, 4>(out, lse, qkv, B, T, NH, stream);
        case 1281: return flash::launch_forward<128, 4, 64, 2>(out, lse, qkv, B, T, NH, stream);
        case 1282: return flash::launch_forward<128, 8, 64, 1>(out, lse, qkv, B, T, NH, stream);
        case 1283: return flash::launch_forward<128, 4, 128, 2>(out, lse, qkv, B, T, NH, stream);
        case 1284: return flash::launch_forward<128, 4, 64, 3>(out, lse, qkv, B, T, NH, stream);
        case 645: return flash::launch_forward<64, 4, 64, 1, 2>(out, lse, qkv, B, T, NH, stream);
        case 646: return flash::launch_forward<64, 4, 32, 1, 2>(out, lse, qkv, B, T, NH, stream);
        case 1285:
        case 1286: return flash::launch_forward<128, 4, 64, 2>(out, lse, qkv, B, T, NH, stream);
    }
    fprintf(stderr, "attention_flash_forward: config %d is not one of 0..%d\n", config, kFlashForwardConfigs);
    return cudaErrorInvalidValue;
}

// Bytes of scratch the backward needs (D = rowsum(dO∘O), one float per (b, h, t)).
inline size_t attention_flash_backward_workspace_bytes(int B, int T, int NH) {
    return (size_t)B * NH * T * sizeof(float);
}

// dqkv is overwritten. out and lse are the forward's outputs for the same qkv. workspace: see above.
inline cudaError_t attention_flash_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                                            const float* lse, const __nv_bfloat16* qkv, int B, int T, int NH, int HS,
                                            float* workspace, cudaStream_t stream, int config = 0) {
    if (!flash::head_size_supported(HS, "attention_flash_backward")) return cudaErrorInvalidValue;
    if (config == 0) config = attention_flash_backward_default_config(HS);
    float* D = workspace;
    switch (HS * 10 + config) {
        case 641: return flash::launch_backward<64, 4, 64, false>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 642: return flash::launch_backward<64, 4, 64, true>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 643: return flash::launch_backward<64, 8, 64, false>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 1281: return flash::launch_backward<128, 4, 64, false>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 1282: return flash::launch_backward<128, 4, 64, true>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 1283: return flash::launch_backward<128, 8, 64, false>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 644: return flash::launch_backward<64, 4, 64, true, 3>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 1284: return flash::launch_backward<128, 4, 64, false, 2>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
    }
    fprintf(stderr, "attention_flash_backward: config %d is not one of 0..%d\n", config, kFlashBackwardConfigs);
    return cudaErrorInvalidValue;
}
