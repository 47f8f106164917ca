// The pieces the Hopper attention backward kernels share (attention_hopper_backward.cuh says how they fit): the
// D = rowsum(dO∘O) pre-pass, the producers of the dK/dV and fused kernels (K and V once, then Q, dO, LSE and D per
// query tile), and the steps of their consumers: Sᵀ and dPᵀ, Pᵀ and dSᵀ, dV and dK, and the epilogue's column sums.
#pragma once

#include <cuda_bf16.h>

#include "llmc/kernels/attention/attention_hopper_common.cuh"
#include "llmc/kernels/fp8/amax.cuh"

namespace flash_hopper {

// ------------------------------------------------------------------------------------------ D = rowsum(dO∘O)
// The rows the backward kernels read per query (BackwardWorkspace::lse_d): for each (b, h) LSE·log2(e), then D =
// rowsum(dO∘O), each padded_T(T) long, the pads LSE +inf and D 0 (a padded query's P is 0, so no kernel tests
// query < T). kHS / 8 threads per row, 16-byte loads: (b, t, h) rows with h fastest are one contiguous stream of out
// and dout; the thread of t = T − 1 also writes its row's pads.
template <int kHS>
__global__ void backward_d_kernel(float* __restrict__ lse_d, const float* __restrict__ lse,
                                  const bf16* __restrict__ out, const bf16* __restrict__ dout, int B, int T, int NH) {
    constexpr int kLanes = kHS / 8;  // threads per row
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long row = idx / kLanes;  // (b, t, h), h fastest
    const bool valid = row < (long long)B * T * NH;
    float sum = 0.f;
    if (valid) {
        const uint4 a = *reinterpret_cast<const uint4*>(out + idx * 8);
        const uint4 c = *reinterpret_cast<const uint4*>(dout + idx * 8);
        const __nv_bfloat162* a2 = reinterpret_cast<const __nv_bfloat162*>(&a);
        const __nv_bfloat162* c2 = reinterpret_cast<const __nv_bfloat162*>(&c);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 x = __bfloat1622float2(a2[i]), y = __bfloat1622float2(c2[i]);
            sum += x.x * y.x + x.y * y.y;
        }
    }
#pragma unroll
    for (int off = kLanes / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffff, sum, off);
    if (valid && idx % kLanes == 0) {
        const int h = (int)(row % NH);
        const long long bt = row / NH;
        const int b = (int)(bt / T), t = (int)(bt % T);
        const int Tp = padded_T(T);
        float* lse_row = lse_d + ((size_t)b * NH + h) * 2 * Tp;  // then D at + Tp
        lse_row[t] = lse[((size_t)b * NH + h) * T + t] * kLog2e;
        lse_row[Tp + t] = sum;
        if (t == T - 1)
            for (int pad = T; pad < Tp; pad++) lse_row[pad] = INFINITY, lse_row[Tp + pad] = 0.f;
    }
}

template <int kHS>
inline void launch_backward_d(float* lse_d, const float* lse, const bf16* out, const bf16* dout, int B, int T, int NH,
                              cudaStream_t stream) {
    const long long threads = (long long)B * T * NH * (kHS / 8);
    backward_d_kernel<kHS><<<(unsigned)((threads + 255) / 256), 256, 0, stream>>>(lse_d, lse, out, dout, B, T, NH);
    cudaCheckLaunch();
}

// The lse_d rows as the dK/dV and fused kernels stream them: a box of both rows (LSE, D) of one (b, h) over Bq
// queries, landing as the stage's [2][Bq] floats.
inline CUtensorMap lse_d_map(const float* lse_d, int B, int T, int NH, int Bq) {
    const int Tp = padded_T(T);
    return hopper::make_tensor_map_3d(lse_d, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, (uint64_t)B * NH, 2, Tp, Tp,
                                      2 * (uint64_t)Tp, 2, Bq, CU_TENSOR_MAP_SWIZZLE_NONE);
}

// ------------------------------------------------------------------------------------------ producers
// The dK/dV and fused kernels' TMA producer (one thread): the block's K and V tiles once, then Q, dO, LSE and D of
// every query tile from the diagonal down through the ring. Layout: their shared-memory layout (sK, sV, stages of sQ
// and sdO, lse_d beside them, kv_full). LSE and D are staged (loaded per element by the consumers, they cost 64-bit
// address arithmetic, predicates and long-scoreboard stalls in the elementwise phase) by TMA, not by a warp's stores:
// racecheck pairs a thread's store with the consumers' reads and does not see the mbarrier that orders them.
template <typename Layout, typename Ring>
__device__ __forceinline__ void produce_k_v_then_q_do(Layout& L, Ring ring, const CUtensorMap* map_kv,
                                                      const CUtensorMap* map_q, const CUtensorMap* map_dout,
                                                      const CUtensorMap* map_lse_d, int C, int h, int k0, int b,
                                                      int bh, int i_first, int n_q) {
    using namespace hopper;
    constexpr int kHS = decltype(L.k)::kCols, kBq = decltype(L.stage[0].q)::kRows;
    mbarrier_arrive_expect_tx(&L.barriers.kv_full, sizeof(L.k) + sizeof(L.v));
    for (int sub = 0; sub < L.k.kBoxes; sub++) {
        tma_load_3d(L.k.box(sub), map_kv, &L.barriers.kv_full, C + h * kHS + 64 * sub, k0, b);
        tma_load_3d(L.v.box(sub), map_kv, &L.barriers.kv_full, 2 * C + h * kHS + 64 * sub, k0, b);
    }
    for (int i = i_first; i < n_q; i++, ring.advance()) {
        uint64_t* full = ring.acquire(sizeof(L.stage[0]) + sizeof(L.lse_d[0]));
        auto& stage = L.stage[ring.stage()];
        for (int sub = 0; sub < L.k.kBoxes; sub++) {
            tma_load_3d(stage.q.box(sub), map_q, full, h * kHS + 64 * sub, i * kBq, b);
            tma_load_3d(stage.dO.box(sub), map_dout, full, h * kHS + 64 * sub, i * kBq, b);
        }
        tma_load_3d(L.lse_d[ring.stage()], map_lse_d, full, i * kBq, 0, bh);
    }
}

// ------------------------------------------------------------------------------------------ consumer steps
// A dK/dV consumer's start (the dK/dV and fused kernels): dK and dV zeroed, and once K and V have landed, its 64 rows
// of them as register A operands where Cfg keeps them there (kKRegs, kVRegs).
template <typename Cfg, typename Layout, int kAcc, int kKF, int kVF>
__device__ __forceinline__ void start_dk_dv(Layout& L, int kv_row, int row_in, int lane, float (&dk)[kAcc],
                                            float (&dv)[kAcc], uint32_t (&k_frag)[kKF][4],
                                            uint32_t (&v_frag)[kVF][4]) {
#pragma unroll
    for (int i = 0; i < kAcc; i++) dv[i] = 0.f, dk[i] = 0.f;
    hopper::mbarrier_wait(&L.barriers.kv_full, 0);
    if constexpr (Cfg::kKRegs) hopper::load_a_fragments(L.k, kv_row, row_in, lane, k_frag);
    if constexpr (Cfg::kVRegs) hopper::load_a_fragments(L.v, kv_row, row_in, lane, v_frag);
}

// The LSE and D of the query columns this thread holds in an Sᵀ accumulator of kPq queries from q_local0.
template <int kBq, int kPq>
__device__ __forceinline__ void read_lse_d(const float (&lse_d)[2][kBq], int q_local0, int lane,
                                           float (&lse2)[kPq / 8][2], float (&d)[kPq / 8][2]) {
#pragma unroll
    for (int jj = 0; jj < kPq / 8; jj++) {
        const float2 l = *reinterpret_cast<const float2*>(&lse_d[0][q_local0 + 8 * jj + 2 * (lane % 4)]);
        const float2 x = *reinterpret_cast<const float2*>(&lse_d[1][q_local0 + 8 * jj + 2 * (lane % 4)]);
        lse2[jj][0] = l.x, lse2[jj][1] = l.y, d[jj][0] = x.x, d[jj][1] = x.y;
    }
}

// Pᵀ = exp2(scale_log2·Sᵀ − LSE) and dSᵀ = Pᵀ∘(dPᵀ − D), in place, over kPq query columns of a 64-key
// accumulator pair, P = 0 where key > query. `delta` is this thread's first key minus its first query, so the
// test per element is one compare with a constant; tiles that do not cross the diagonal pass kNoMask (no
// branch between a masked and an unmasked copy of this loop: CUDA 13's ptxas then reused the registers of
// loop-invariant wgmma A fragments inside the loop, docs/PERFORMANCE.md).
template <int kPq>
__device__ __forceinline__ void p_and_ds(hopper::Accumulator<kPq>& st, hopper::Accumulator<kPq>& dpt,
                                         const float (&lse2)[kPq / 8][2], const float (&d)[kPq / 8][2],
                                         float scale_log2, int delta) {
    // rows are keys (row half r), columns queries (block j, element e): the statistics are the columns'
    st.for_each_with(dpt, [&](float& s, float& dp, int r, int j, int e) {
        float p = exp2f(s * scale_log2 - lse2[j][e]);
        if (delta + 8 * r > 8 * j + e) p = 0.f;
        s = p;
        dp = p * (dp - d[j][e]);
    });
}

// One query part's elementwise step in the dK/dV and fused kernels: its LSE and D from the staged stage (read before
// the wait, so they are in registers when the products land), the wait for the part's Sᵀ and dPᵀ (later parts'
// products and earlier dV/dK may still run), then Pᵀ and dSᵀ in place, masked only where the part's first query
// is below the consumer's last key (kc0 + 63).
template <int kBq, int kPq, int kParts>
__device__ __forceinline__ void part_p_and_ds(hopper::Accumulator<kPq>& st, hopper::Accumulator<kPq>& dpt,
                                              const float (&lse_d)[2][kBq], int part, int q_tile_first, int kc0,
                                              int row_in, int lane, float scale_log2) {
    float lse2[kPq / 8][2], d_q[kPq / 8][2];
    read_lse_d<kBq, kPq>(lse_d, part * kPq, lane, lse2, d_q);
    hopper::wgmma_wait<kParts - 1>();
    st.fence();
    dpt.fence();
    const int q_first = q_tile_first + part * kPq;
    const int delta = q_first < kc0 + 63 ? kc0 + row_in - (q_first + 2 * (lane % 4)) : kNoMask;
    p_and_ds<kPq>(st, dpt, lse2, d_q, scale_log2, delta);
}

// Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ of one streamed query tile (64 keys from kv_row x kPq queries per part, over HS) in the
// dK/dV and fused kernels: a wgmma group per part, K and V as register A operands where Cfg::kKRegs, Cfg::kVRegs,
// else from sK, sV. Issued only; st and dpt zeroed by the caller where no product is in flight.
template <typename Cfg, int kParts, int kPq, int kKF, int kVF, typename KVTile, typename QTile>
__device__ __forceinline__ void issue_st_dpt(hopper::Accumulator<kPq> (&st)[kParts],
                                             hopper::Accumulator<kPq> (&dpt)[kParts],
                                             const uint32_t (&k_frag)[kKF][4], const uint32_t (&v_frag)[kVF][4],
                                             const KVTile& sK, const KVTile& sV, int kv_row, const QTile& sQ,
                                             const QTile& sdO) {
    using namespace hopper;
    wgmma_fence();
#pragma unroll
    for (int part = 0; part < kParts; part++) {
        if constexpr (Cfg::kKRegs) wgmma_rs_over_head_dim(st[part].d, k_frag, sQ, part * kPq);
        else wgmma_ss_over_head_dim(st[part].d, sK, kv_row, sQ, part * kPq);
        if constexpr (Cfg::kVRegs) wgmma_rs_over_head_dim(dpt[part].d, v_frag, sdO, part * kPq);
        else wgmma_ss_over_head_dim(dpt[part].d, sV, kv_row, sdO, part * kPq);
        wgmma_commit();
    }
}

// dV += Pᵀ·dO and dK += dSᵀ·Q over query part `part` (kPq of the tile's Bq queries): Pᵀ and dSᵀ packed as
// register A operands (the accumulator layout is the A layout), dO and Q as MN-major B. One wgmma group, issued
// only.
template <int kPq, int kHS, typename QTile>
__device__ __forceinline__ void issue_dv_dk(float (&dv)[kHS / 2], float (&dk)[kHS / 2],
                                            const hopper::Accumulator<kPq>& pt, const hopper::Accumulator<kPq>& dst,
                                            const QTile& sdO, const QTile& sQ, int part) {
    using namespace hopper;
    uint32_t p_frag[kPq / 16][4], ds_frag[kPq / 16][4];
    pt.to_a_fragments(p_frag);
    dst.to_a_fragments(ds_frag);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kPq / 16; kk++)
        wgmma_rs<1>(dv, p_frag[kk], mn_major_descriptor(sdO, part * kPq / 16 + kk), 1);
#pragma unroll
    for (int kk = 0; kk < kPq / 16; kk++)
        wgmma_rs<1>(dk, ds_frag[kk], mn_major_descriptor(sQ, part * kPq / 16 + kk), 1);
    wgmma_commit();
}

// Writes a consumer's 64 x HS fp32 accumulator times `scale` as bf16 into rows first_row.. of a tile that TMA then
// stores.
template <typename Tile>
__device__ __forceinline__ void stage_tile(Tile& t, int first_row, const float (&acc)[Tile::kCols / 2], float scale,
                                           int row_in, int lane) {
    const float row_scale[2] = {scale, scale};
    hopper::store_accumulator(t, first_row, acc, row_scale, row_in, lane);
}

// max |acc·scale| as stage_tile stores it (bf16) folded into *amax, per warp (llmc/kernels/fp8/amax.cuh): dqkv's, for
// the FP8 cast of qkv's output gradient. Rows past T hold zeros (as the bias sums below rely on), so they add
// nothing. Every lane of the consumer's warps calls it.
template <int kN>
__device__ __forceinline__ void fold_staged_amax(const float (&acc)[kN], float scale, float* amax) {
    unsigned int m = 0;
#pragma unroll
    for (int i = 0; i < kN; i++) m = max(m, amax_bits(__bfloat162float(__float2bfloat16_rn(acc[i] * scale))));
    fold_warp_amax(m, amax);
}

// The bias gradient of q, k or v is the column sum of dq, dk or dv over all (b, t). The two-kernel scheme sums the
// columns of each consumer's output tile as staged for the TMA store (bf16, 64 rows) with one more product on the
// tensor cores (hopper::wgmma_column_sums_64_rows), and writes them as one partial row (3C floats per row; row
// b·2·ceil(T/128) + first row / 64), which column_sum_finish adds in a fixed order: deterministic, and no pass of
// its own over dqkv (cuBLASLt's BGRADB epilogue in the qkv weight-gradient GEMM ran a reduction kernel over it).
// Rows at or past T are 0 in the staged tile (their P is 0; dev/cuda/attention_backward checks the sums at odd T).
// Called by the consumer's 128 threads after the tile is staged and fenced.
template <typename Tile>
__device__ __forceinline__ void staged_column_sums(const Tile& t, int first_row, float* partial, int warp, int lane) {
    using namespace hopper;
    constexpr int kHS = Tile::kCols;
    Accumulator<kHS> cs;  // zeroed for the same reason as the dK/dV kernel's st, dpt
    cs.zero();
    wgmma_fence();
    wgmma_column_sums_64_rows(cs.d, t, first_row);
    wgmma_commit();
    wgmma_wait<0>();
    cs.fence();
    if (warp == 0 && lane < 4) {  // row 0 of the result: columns 8·j + 2·lane, + 1
#pragma unroll
        for (int j = 0; j < kHS / 8; j++)
            *reinterpret_cast<float2*>(partial + 8 * j + 2 * lane) = make_float2(cs.at(0, j, 0), cs.at(0, j, 1));
    }
}

// Partial rows of the two-kernel scheme's bias-gradient sums (3C floats each): one per (b, 64 rows of each block
// of 128).
inline int backward_bias_partial_rows(int B, int T) { return B * 2 * ((T + 127) / 128); }

}  // namespace flash_hopper
