// Causal attention backward on Hopper, on the machinery of llmc/kernels/hopper/hopper.cuh and the layouts of the forward
// (llmc/kernels/hopper/attention_hopper_forward.cuh): qkv, dqkv (B, T, 3, NH, HS) bf16 (dqkv fully overwritten), out, dout
// (B, T, NH·HS) bf16, lse and the workspace D (B, NH, T) fp32. HS 64 or 128, any T.
//
// Two schemes, both validated against the fp64 reference (dev/cuda/attention_backward, variants 4-6):
// A. Deterministic by construction, like the mma.sync backward (the engine's default on Hopper): every output
//    element is written once, by one thread, no atomics and no reduction across blocks:
//   1. D = rowsum(dO∘O) from the bf16 O (HS/8 threads per row, 16-byte loads);
//   2. dK, dV: one block per 128 keys (two consumer warpgroups of 64), Q and dO tiles of 64 queries streamed by
//      TMA from the diagonal down, their LSE and D staged beside them by a producer warp; Sᵀ = K·Qᵀ and
//      dPᵀ = V·dOᵀ with wgmma, K and V as register A operands loaded once at HS 64 (from shared memory at HS 128,
//      whose registers go to dK, dV and the 64-query Sᵀ, dPᵀ), Pᵀ = exp(Sᵀ − LSE) and dSᵀ = Pᵀ∘(dPᵀ − D) in
//      registers (the causal test only on tiles that cross the diagonal), then dV += Pᵀ·dO and dK += dSᵀ·Q with
//      Pᵀ, dSᵀ as register A operands (the accumulator layout is the A layout) and dO, Q as MN-major B. At HS 64
//      each tile goes in two parts of 32 queries so one part's elementwise work overlaps the other part's products;
//   3. dQ: one block per 128 queries (Q, dO as register A operands), K and V tiles of 64 keys streamed up to the
//      diagonal; S and dP again, dS in registers, dQ += dS·K (K as MN-major B).
//    It computes S and dP twice (7 products instead of 5), and still beats B's ordered mode (docs/PERFORMANCE.md).
//    Both kernels can also leave the column sums of their output tiles (the qkv bias gradient; staged_column_sums).
// B. Fused, as FlashAttention-3 (section 4 below): the dK/dV kernel plus dQ pieces that a writer thread adds into
//    an fp32 accumulator by TMA reduce-adds, either in a fixed order through a semaphore per query tile
//    (deterministic) or unordered (not bit-reproducible; the fastest at HS 64, T >= 4096).
// Scale 1/sqrt(HS) is folded into the exponent and applied once to dK and dQ at the end.
#pragma once

#include <cuda_bf16.h>

#include "llmc/kernels/hopper/hopper.cuh"

namespace flash_hopper {

using bf16 = __nv_bfloat16;

// ------------------------------------------------------------------------------------------ 1. D = rowsum(dO∘O)
// kHS / 8 threads per row, 16-byte loads: (b, t, h) rows with h fastest are one contiguous stream of out and dout.
template <int kHS>
__global__ void backward_d_kernel(float* __restrict__ D, const bf16* __restrict__ out, const bf16* __restrict__ dout,
                                  int B, int T, int NH) {
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
        D[((size_t)b * NH + h) * T + t] = sum;
    }
}

template <int kHS>
inline void launch_backward_d(float* D, const bf16* out, const bf16* dout, int B, int T, int NH, cudaStream_t stream) {
    const long long threads = (long long)B * T * NH * (kHS / 8);
    backward_d_kernel<kHS><<<(unsigned)((threads + 255) / 256), 256, 0, stream>>>(D, out, dout, B, T, NH);
    cudaCheckLaunch();
}

// The MN-major B operand of a product over k (tile rows: queries or keys, HS contiguous) for k16 step kk: sub-tiles of
// 64 columns are rows·128 bytes apart (leading byte offset), 8-row groups 1024 (as V in the forward).
__device__ __forceinline__ uint64_t mn_major_descriptor(const uint8_t* tile, int rows, int kk) {
    return hopper::descriptor_plus(hopper::smem_descriptor_sw128(tile, rows * 128, 1024), kk * 16 * 128);
}

using hopper::pack_a_fragments;

// LSE (in log2 units) and D of every streamed query tile, in shared memory beside the ring ([stage][2][kBq] fp32),
// written by one producer warp, with LSE = +inf past T so that P is 0 there without a test. Loaded per element
// from global memory by the consumers, they cost 64-bit address arithmetic, predicates and long-scoreboard stalls
// in the elementwise phase (the compiler sinks the loads past the wgmma wait).
template <typename Cfg>
__device__ __forceinline__ void produce_lse_d(float* lse_d, uint64_t* full, uint64_t* empty, const float* lse_bh,
                                              const float* D_bh, int T, int i_first, int n_q, int lane) {
    using namespace hopper;
    for (int i = i_first, n = 0; i < n_q; i++, n++) {
        const int stage = n % Cfg::kStages;
        mbarrier_wait(&empty[stage], ((n / Cfg::kStages) & 1) ^ 1);
        float* dst = lse_d + stage * 2 * Cfg::kBq;
        for (int q = lane; q < Cfg::kBq; q += 32) {
            const int query = i * Cfg::kBq + q;
            dst[q] = query < T ? lse_bh[query] * 1.4426950408889634f : INFINITY;
            dst[Cfg::kBq + q] = query < T ? D_bh[query] : 0.f;
        }
        __syncwarp();
        if (lane == 0) mbarrier_arrive(&full[stage]);
    }
}

// The LSE and D of the query columns this thread holds in an Sᵀ accumulator of kPq queries from q_local0.
template <int kBq, int kPq>
__device__ __forceinline__ void read_lse_d(const float* lse_d_stage, int q_local0, int lane, float (&lse2)[kPq / 8][2],
                                           float (&d)[kPq / 8][2]) {
#pragma unroll
    for (int jj = 0; jj < kPq / 8; jj++) {
        const float2 l = *reinterpret_cast<const float2*>(lse_d_stage + q_local0 + 8 * jj + 2 * (lane % 4));
        const float2 x = *reinterpret_cast<const float2*>(lse_d_stage + kBq + q_local0 + 8 * jj + 2 * (lane % 4));
        lse2[jj][0] = l.x, lse2[jj][1] = l.y, d[jj][0] = x.x, d[jj][1] = x.y;
    }
}

// Pᵀ = exp2(scale_log2·Sᵀ − LSE) and dSᵀ = Pᵀ∘(dPᵀ − D), in place, over kPq query columns of a 64-key
// accumulator pair, P = 0 where key > query. `delta` is this thread's first key minus its first query, so the
// test per element is one compare with a constant; tiles that do not cross the diagonal pass kNoMask (no
// branch between a masked and an unmasked copy of this loop: CUDA 13's ptxas then reused the registers of
// loop-invariant wgmma A fragments inside the loop, docs/PERFORMANCE.md).
using hopper::kNoMask;
template <int kPq>
__device__ __forceinline__ void p_and_ds(float (&st)[kPq / 2], float (&dpt)[kPq / 2], const float (&lse2)[kPq / 8][2],
                                         const float (&d)[kPq / 8][2], float scale_log2, int delta) {
#pragma unroll
    for (int jj = 0; jj < kPq / 8; jj++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = exp2f(st[4 * jj + e] * scale_log2 - lse2[jj][e & 1]);
            if (delta + 8 * (e >> 1) > 8 * jj + (e & 1)) p = 0.f;
            st[4 * jj + e] = p;
            dpt[4 * jj + e] = p * (dpt[4 * jj + e] - d[jj][e & 1]);
        }
}

// One query part's elementwise step in the dK/dV and fused kernels: its LSE and D from the staged stage (read before
// the wait, so they are in registers when the products land), the wait for the part's Sᵀ and dPᵀ (later parts'
// products and earlier dV/dK may still run), then Pᵀ and dSᵀ in place, masked only where the part's first query
// is below the consumer's last key (kc0 + 63).
template <int kBq, int kPq, int kParts>
__device__ __forceinline__ void part_p_and_ds(float (&st)[kPq / 2], float (&dpt)[kPq / 2], const float* lse_d_stage,
                                              int part, int q_tile_first, int kc0, int row_in, int lane,
                                              float scale_log2) {
    float lse2[kPq / 8][2], d_q[kPq / 8][2];
    read_lse_d<kBq, kPq>(lse_d_stage, part * kPq, lane, lse2, d_q);
    hopper::wgmma_wait<kParts - 1>();
    hopper::fence_accumulator(st);
    hopper::fence_accumulator(dpt);
    const int q_first = q_tile_first + part * kPq;
    const int delta = q_first < kc0 + 63 ? kc0 + row_in - (q_first + 2 * (lane % 4)) : kNoMask;
    p_and_ds<kPq>(st, dpt, lse2, d_q, scale_log2, delta);
}

// The origin of consumer c's dQ piece in the fused kernel: at HS 64 each consumer's piece is 32 of the tile's queries
// over the whole head (q_off), at HS 128 all of them over 64 head dimensions (dq_sub: which 64).
template <int kHS>
__device__ __forceinline__ void dq_piece_origin(int c, int* dq_sub, int* q_off) {
    *dq_sub = kHS == 128 ? c : 0;
    *q_off = kHS == 64 ? 32 * c : 0;
}

// dV += Pᵀ·dO and dK += dSᵀ·Q over query part `part` (kPq of the tile's kBq queries): Pᵀ and dSᵀ packed as
// register A operands (the accumulator layout is the A layout), dO and Q as MN-major B. One wgmma group, issued
// only.
template <int kBq, int kPq, int kHS>
__device__ __forceinline__ void issue_dv_dk(float (&dv)[kHS / 2], float (&dk)[kHS / 2], const float (&pt)[kPq / 2],
                                            const float (&dst)[kPq / 2], const uint8_t* do_tile, const uint8_t* q_tile,
                                            int part) {
    using namespace hopper;
    uint32_t p_frag[kPq / 16][4], ds_frag[kPq / 16][4];
    pack_a_fragments<kPq>(pt, p_frag);
    pack_a_fragments<kPq>(dst, ds_frag);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kPq / 16; kk++)
        wgmma_rs<1>(dv, p_frag[kk], mn_major_descriptor(do_tile, kBq, part * kPq / 16 + kk), 1);
#pragma unroll
    for (int kk = 0; kk < kPq / 16; kk++)
        wgmma_rs<1>(dk, ds_frag[kk], mn_major_descriptor(q_tile, kBq, part * kPq / 16 + kk), 1);
    wgmma_commit();
}

// Writes a consumer's 64 x HS fp32 accumulator, times `scale`, as bf16 into its 64 rows of a [kSub][rows][64]
// tile (128-byte swizzle) that TMA then stores.
template <int kHS>
__device__ __forceinline__ void stage_tile(uint8_t* tile_rows, int tile_row_count, const float (&acc)[kHS / 2],
                                           float scale, int row_in, int lane) {
#pragma unroll
    for (int jj = 0; jj < kHS / 8; jj++) {
        uint8_t* box = tile_rows + (jj / 8) * tile_row_count * 128;
        const int chunk = jj % 8;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = row_in + 8 * r;
            const __nv_bfloat162 v = __floats2bfloat162_rn(acc[4 * jj + 2 * r] * scale, acc[4 * jj + 2 * r + 1] * scale);
            *reinterpret_cast<__nv_bfloat162*>(box + row * 128 + hopper::sw128_chunk_offset(row, chunk) + 4 * (lane % 4)) = v;
        }
    }
}

// The bias gradient of q, k or v is the column sum of dq, dk or dv over all (b, t). The two-kernel scheme sums the
// columns of each consumer's output tile as staged for the TMA store (bf16, 64 rows) with one more product on the
// tensor cores (hopper::wgmma_column_sums_64_rows), and writes them as one partial row (3C floats per row; row
// b·2·ceil(T/128) + first row / 64), which column_sum_finish adds in a fixed order: deterministic, and no pass of
// its own over dqkv (cuBLASLt's BGRADB epilogue in the qkv weight-gradient GEMM ran a reduction kernel over it).
// Rows at or past T are 0 in the staged tile (their P is 0; dev/cuda/attention_backward checks the sums at odd T).
// Called by the consumer's 128 threads after the tile is staged and fenced.
template <int kHS>
__device__ __forceinline__ void staged_column_sums(const uint8_t* rows, int tile_rows, float* partial, int warp,
                                                   int lane) {
    using namespace hopper;
    float cs[kHS / 2];  // zeroed for the same reason as st, dpt in the dK/dV kernel
#pragma unroll
    for (int i = 0; i < kHS / 2; i++) cs[i] = 0.f;
    wgmma_fence();
    wgmma_column_sums_64_rows(cs, rows, tile_rows * 128);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulator(cs);
    if (warp == 0 && lane < 4) {  // row 0 of the result: columns 8·jj + 2·lane, + 1
#pragma unroll
        for (int jj = 0; jj < kHS / 8; jj++)
            *reinterpret_cast<float2*>(partial + 8 * jj + 2 * lane) = make_float2(cs[4 * jj], cs[4 * jj + 1]);
    }
}

// The backward kernels' producer (one thread): the block's K and V tiles once, then Q and dO of every query tile
// from the diagonal down through the ring of Cfg::kStages stages.
template <typename Cfg, int kHS>
__device__ __forceinline__ void produce_k_v_then_q_do(uint8_t* smem, uint8_t* sK, uint8_t* sV, uint64_t* kv_full,
                                                      uint64_t* full, uint64_t* empty, const CUtensorMap* map_kv,
                                                      const CUtensorMap* map_q, const CUtensorMap* map_dout, int C,
                                                      int h, int k0, int b, int i_first, int n_q) {
    using namespace hopper;
    mbarrier_arrive_expect_tx(kv_full, 2 * Cfg::kKBytes);
    for (int sub = 0; sub < Cfg::kSub; sub++) {
        tma_load_3d(sK + sub * Cfg::kBk * 128, map_kv, kv_full, C + h * kHS + 64 * sub, k0, b);
        tma_load_3d(sV + sub * Cfg::kBk * 128, map_kv, kv_full, 2 * C + h * kHS + 64 * sub, k0, b);
    }
    for (int i = i_first, n = 0; i < n_q; i++, n++) {
        const int stage = n % Cfg::kStages;
        mbarrier_wait(&empty[stage], ((n / Cfg::kStages) & 1) ^ 1);
        mbarrier_arrive_expect_tx(&full[stage], Cfg::kStageBytes);
        uint8_t* q_tile = smem + Cfg::kStageOffset + stage * Cfg::kStageBytes;
        uint8_t* do_tile = q_tile + Cfg::kQBytes;
        for (int sub = 0; sub < Cfg::kSub; sub++) {
            tma_load_3d(q_tile + sub * Cfg::kBq * 128, map_q, &full[stage], h * kHS + 64 * sub, i * Cfg::kBq, b);
            tma_load_3d(do_tile + sub * Cfg::kBq * 128, map_dout, &full[stage], h * kHS + 64 * sub,
                        i * Cfg::kBq, b);
        }
    }
}

// Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ of one streamed query tile (64 keys x kPq queries per part, over HS) in the dK/dV and
// fused kernels: a wgmma group per part, K and V as register A operands where Cfg::kKRegs, Cfg::kVRegs, else from
// their rows in shared memory. Issued only; st and dpt zeroed by the caller where no product is in flight.
template <typename Cfg, int kHS, int kParts, int kPq, int kKF, int kVF>
__device__ __forceinline__ void issue_st_dpt(float (&st)[kParts][kPq / 2], float (&dpt)[kParts][kPq / 2],
                                             const uint32_t (&k_frag)[kKF][4], const uint32_t (&v_frag)[kVF][4],
                                             const uint8_t* k_rows, const uint8_t* v_rows, const uint8_t* q_tile,
                                             const uint8_t* do_tile) {
    using namespace hopper;
    wgmma_fence();
#pragma unroll
    for (int part = 0; part < kParts; part++) {
        const uint8_t* q_rows = q_tile + part * kPq * 128;
        const uint8_t* do_rows = do_tile + part * kPq * 128;
        if constexpr (Cfg::kKRegs) wgmma_rs_over_head_dim<kHS>(st[part], k_frag, q_rows, Cfg::kBq);
        else wgmma_ss_over_head_dim<kHS>(st[part], k_rows, Cfg::kBk, q_rows, Cfg::kBq);
        if constexpr (Cfg::kVRegs) wgmma_rs_over_head_dim<kHS>(dpt[part], v_frag, do_rows, Cfg::kBq);
        else wgmma_ss_over_head_dim<kHS>(dpt[part], v_rows, Cfg::kBk, do_rows, Cfg::kBq);
        wgmma_commit();
    }
}

// ------------------------------------------------------------------------------------------ 2. dK, dV
template <int kHS>
struct BackwardKVConfig {
    static constexpr int kBk = 128, kBq = 64;  // keys per block (64 per consumer), queries per streamed tile
    static constexpr int kConsumers = 2, kThreads = 128 * (1 + kConsumers);
    static constexpr int kSub = kHS / 64;
    static constexpr int kKBytes = kBk * kHS * 2, kQBytes = kBq * kHS * 2;
    static constexpr int kStages = 4;
    // K, V [kSub][kBk][64]; per stage Q, dO [kSub][kBq][64]; LSE and D [kStages][2][kBq]; barriers
    static constexpr int kVOffset = kKBytes, kStageOffset = 2 * kKBytes, kStageBytes = 2 * kQBytes;
    static constexpr int kLseOffset = kStageOffset + kStages * kStageBytes;
    static constexpr int kBarrierOffset = kLseOffset + kStages * 2 * kBq * 4;
    static constexpr int kSmemBytes = kBarrierOffset + (1 + 2 * kStages) * 8 + 1024;
    static constexpr int kProducerRegs = kHS == 64 ? 40 : 24, kConsumerRegs = kHS == 64 ? 232 : 240;
    static_assert(hopper::setmaxnreg_fits(kConsumers, kProducerRegs, kConsumerRegs), "setmaxnreg");
    // K and V rows as the register A operands of Sᵀ and dPᵀ at HS 64 (16 registers per 64 head dims). At HS 128 dK
    // and dV take 128 of the 240 registers and Sᵀ, dPᵀ of 64 queries 64 more, so both come from shared memory
    // (K in registers forced 32-query tiles, 1.5-2% slower, docs/PERFORMANCE.md).
    static constexpr bool kKRegs = kHS == 64, kVRegs = kHS == 64;
    // queries of a tile in kParts parts with their own wgmma groups (see the kernel); at HS 128 two parts were
    // slower (no registers left to hold both parts' operands)
    static constexpr int kParts = kHS == 64 ? 2 : 1;
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

template <int kHS>
__global__ void __launch_bounds__(BackwardKVConfig<kHS>::kThreads, 1)
    backward_kv_kernel(const __grid_constant__ CUtensorMap map_kv, const __grid_constant__ CUtensorMap map_q,
                       const __grid_constant__ CUtensorMap map_dout, const __grid_constant__ CUtensorMap map_dqkv,
                       const float* __restrict__ lse, const float* __restrict__ D, float* __restrict__ bias_partials,
                       int T, int NH) {
    using Cfg = BackwardKVConfig<kHS>;
    using namespace hopper;
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = smem_align_1024(smem_raw);
    uint8_t* sK = smem;
    uint8_t* sV = smem + Cfg::kVOffset;
    uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Cfg::kBarrierOffset);
    uint64_t* full = kv_full + 1;
    uint64_t* empty = full + Cfg::kStages;

    const int C = NH * kHS;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int k0 = blockIdx.x * Cfg::kBk;
    const int i_first = k0 / Cfg::kBq, n_q = (T + Cfg::kBq - 1) / Cfg::kBq;  // query tiles from the diagonal down
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        tma_prefetch_map(&map_kv);
        tma_prefetch_map(&map_q);
        tma_prefetch_map(&map_dout);
        tma_prefetch_map(&map_dqkv);
        mbarrier_init(kv_full, 1);
        ring_barriers_init(full, empty, Cfg::kStages, Cfg::kConsumers * 4, 2);
    }
    __syncthreads();
    const float* lse_bh = lse + ((size_t)b * NH + h) * T;
    const float* D_bh = D + ((size_t)b * NH + h) * T;
    float* lse_d = reinterpret_cast<float*>(smem + Cfg::kLseOffset);

    if (warpgroup == 0) {  // ---- producers: TMA (thread 0), LSE and D (warp 2)
        setmaxnreg_dec<Cfg::kProducerRegs>();
        if (threadIdx.x == 0) {
            produce_k_v_then_q_do<Cfg, kHS>(smem, sK, sV, kv_full, full, empty, &map_kv, &map_q, &map_dout, C, h, k0, b,
                                            i_first, n_q);
        } else if (threadIdx.x / 32 == 2) {
            produce_lse_d<Cfg>(lse_d, full, empty, lse_bh, D_bh, T, i_first, n_q, threadIdx.x % 32);
        }
        return;
    }

    // ---- consumers: keys kc0 .. kc0 + 63
    setmaxnreg_inc<Cfg::kConsumerRegs>();
    const int consumer = warpgroup - 1;
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    const int row_in = warp * 16 + lane / 4;
    const int kc0 = k0 + consumer * 64;
    const float scale = rsqrtf((float)kHS), scale_log2 = scale * 1.4426950408889634f;

    float dv[kHS / 2], dk[kHS / 2];
#pragma unroll
    for (int i = 0; i < kHS / 2; i++) dv[i] = 0.f, dk[i] = 0.f;

    mbarrier_wait(kv_full, 0);
    uint32_t k_frag[Cfg::kKRegs ? kHS / 16 : 1][4], v_frag[Cfg::kVRegs ? kHS / 16 : 1][4];
    if constexpr (Cfg::kKRegs) load_a_fragments<kHS>(sK + consumer * 64 * 128, Cfg::kBk, row_in, lane, k_frag);
    if constexpr (Cfg::kVRegs) load_a_fragments<kHS>(sV + consumer * 64 * 128, Cfg::kBk, row_in, lane, v_frag);
    // A query tile in kParts parts, each with its own wgmma groups: the elementwise work of part p runs while the
    // products of part p + 1 (or the dV/dK products of part p - 1) keep the tensor cores busy.
    constexpr int kParts = Cfg::kParts, kPq = Cfg::kBq / kParts;
    for (int i = i_first, n = 0; i < n_q; i++, n++) {
        const int stage = n % Cfg::kStages;
        mbarrier_wait(&full[stage], (n / Cfg::kStages) & 1);
        const uint8_t* q_tile = smem + Cfg::kStageOffset + stage * Cfg::kStageBytes;
        const uint8_t* do_tile = q_tile + Cfg::kQBytes;

        // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (64 keys x kPq queries per part, over HS)
        // zeroed although the first product overwrites them (scale-d 0): left undefined, the compiler copies
        // registers into them between the fence and the wgmmas, and ptxas then serialises the products (C7519)
        float st[kParts][kPq / 2], dpt[kParts][kPq / 2];
#pragma unroll
        for (int part = 0; part < kParts; part++)
#pragma unroll
            for (int x = 0; x < kPq / 2; x++) st[part][x] = 0.f, dpt[part][x] = 0.f;
        issue_st_dpt<Cfg, kHS, kParts, kPq>(st, dpt, k_frag, v_frag, sK + consumer * 64 * 128, sV + consumer * 64 * 128,
                                            q_tile, do_tile);
        const float* lse_d_stage = lse_d + stage * 2 * Cfg::kBq;

#pragma unroll
        for (int part = 0; part < kParts; part++) {
            part_p_and_ds<Cfg::kBq, kPq, kParts>(st[part], dpt[part], lse_d_stage, part, i * Cfg::kBq, kc0, row_in,
                                                 lane, scale_log2);
            issue_dv_dk<Cfg::kBq, kPq, kHS>(dv, dk, st[part], dpt[part], do_tile, q_tile, part);
        }
        wgmma_wait<0>();
        if (lane == 0) mbarrier_arrive(&empty[stage]);
    }

    // ---- epilogue: dK·scale and dV into this consumer's rows of the K and V tiles (its own; every product that
    // read them is done), then TMA stores into dqkv (rows past T dropped)
    uint8_t* k_rows = sK + consumer * 64 * 128;
    uint8_t* v_rows = sV + consumer * 64 * 128;
    fence_accumulator(dk);
    fence_accumulator(dv);
    stage_tile<kHS>(k_rows, Cfg::kBk, dk, scale, row_in, lane);
    stage_tile<kHS>(v_rows, Cfg::kBk, dv, 1.f, row_in, lane);
    fence_proxy_async();
    named_barrier_sync(1 + consumer, 128);
    if (t == 0) {
        for (int sub = 0; sub < Cfg::kSub; sub++) {
            tma_store_3d(&map_dqkv, k_rows + sub * Cfg::kBk * 128, C + h * kHS + 64 * sub, kc0, b);
            tma_store_3d(&map_dqkv, v_rows + sub * Cfg::kBk * 128, 2 * C + h * kHS + 64 * sub, kc0, b);
        }
        tma_store_commit();
    }
    if (bias_partials) {  // the k and v bias gradients' partial row of this consumer's 64 keys
        float* row = bias_partials + ((size_t)b * 2 * gridDim.x + kc0 / 64) * 3 * C + h * kHS;
        staged_column_sums<kHS>(k_rows, Cfg::kBk, row + C, warp, lane);
        staged_column_sums<kHS>(v_rows, Cfg::kBk, row + 2 * C, warp, lane);
    }
    if (t == 0) tma_store_wait<0>();
}

// ------------------------------------------------------------------------------------------ 3. dQ
// dS = P∘(dP − D) in place in dp, P = exp2(scale_log2·S − LSE), over kBk key columns of a 64-query accumulator
// pair (rows: this thread's two queries), P = 0 where key > query; `delta` = first key − first query, or kNoMask.
template <int kBk>
__device__ __forceinline__ void ds_by_rows(const float (&s)[kBk / 2], float (&dp)[kBk / 2], const float (&lse_row)[2],
                                           const float (&d_row)[2], float scale_log2, int delta) {
#pragma unroll
    for (int jj = 0; jj < kBk / 8; jj++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = e >> 1;
            float p = exp2f(s[4 * jj + e] * scale_log2 - lse_row[r]);
            if (delta + 8 * jj + (e & 1) > 8 * r) p = 0.f;
            dp[4 * jj + e] = p * (dp[4 * jj + e] - d_row[r]);
        }
}

template <int kHS>
struct BackwardQConfig {
    static constexpr int kBq = 128, kBk = 64;  // queries per block (64 per consumer), keys per streamed tile
    static constexpr int kConsumers = 2, kThreads = 128 * (1 + kConsumers);
    static constexpr int kSub = kHS / 64;
    static constexpr int kQBytes = kBq * kHS * 2, kKBytes = kBk * kHS * 2;
    static constexpr int kStages = 4;
    // Q, dO [kSub][kBq][64]; per stage K, V [kSub][kBk][64]; barriers
    static constexpr int kDoOffset = kQBytes, kStageOffset = 2 * kQBytes, kStageBytes = 2 * kKBytes;
    static constexpr int kBarrierOffset = kStageOffset + kStages * kStageBytes;
    static constexpr int kSmemBytes = kBarrierOffset + (1 + 2 * kStages) * 8 + 1024;
    static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
    static_assert(hopper::setmaxnreg_fits(kConsumers, kProducerRegs, kConsumerRegs), "setmaxnreg");
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

template <int kHS>
__global__ void __launch_bounds__(BackwardQConfig<kHS>::kThreads, 1)
    backward_q_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_dout,
                      const __grid_constant__ CUtensorMap map_kv, const __grid_constant__ CUtensorMap map_dqkv,
                      const float* __restrict__ lse, const float* __restrict__ D, float* __restrict__ bias_partials,
                      int T, int NH) {
    using Cfg = BackwardQConfig<kHS>;
    using namespace hopper;
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = smem_align_1024(smem_raw);
    uint8_t* sQ = smem;
    uint8_t* sdO = smem + Cfg::kDoOffset;
    uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Cfg::kBarrierOffset);
    uint64_t* full = q_full + 1;
    uint64_t* empty = full + Cfg::kStages;

    const int C = NH * kHS;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int q_block = gridDim.x - 1 - blockIdx.x;  // longest first
    const int q0 = q_block * Cfg::kBq;
    const int n_k = (min(T, q0 + Cfg::kBq) + Cfg::kBk - 1) / Cfg::kBk;  // key tiles up to the diagonal
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        tma_prefetch_map(&map_q);
        tma_prefetch_map(&map_dout);
        tma_prefetch_map(&map_kv);
        tma_prefetch_map(&map_dqkv);
        mbarrier_init(q_full, 1);
        ring_barriers_init(full, empty, Cfg::kStages, Cfg::kConsumers * 4);
    }
    __syncthreads();

    if (warpgroup == 0) {  // ---- producer
        setmaxnreg_dec<Cfg::kProducerRegs>();
        if (threadIdx.x == 0) {
            mbarrier_arrive_expect_tx(q_full, 2 * Cfg::kQBytes);
            for (int sub = 0; sub < Cfg::kSub; sub++) {
                tma_load_3d(sQ + sub * Cfg::kBq * 128, &map_q, q_full, h * kHS + 64 * sub, q0, b);
                tma_load_3d(sdO + sub * Cfg::kBq * 128, &map_dout, q_full, h * kHS + 64 * sub, q0, b);
            }
            for (int j = 0; j < n_k; j++) {
                const int stage = j % Cfg::kStages;
                mbarrier_wait(&empty[stage], ((j / Cfg::kStages) & 1) ^ 1);
                mbarrier_arrive_expect_tx(&full[stage], Cfg::kStageBytes);
                uint8_t* k_tile = smem + Cfg::kStageOffset + stage * Cfg::kStageBytes;
                uint8_t* v_tile = k_tile + Cfg::kKBytes;
                for (int sub = 0; sub < Cfg::kSub; sub++) {
                    tma_load_3d(k_tile + sub * Cfg::kBk * 128, &map_kv, &full[stage], C + h * kHS + 64 * sub,
                                j * Cfg::kBk, b);
                    tma_load_3d(v_tile + sub * Cfg::kBk * 128, &map_kv, &full[stage], 2 * C + h * kHS + 64 * sub,
                                j * Cfg::kBk, b);
                }
            }
        }
        return;
    }

    // ---- consumers: queries qc0 .. qc0 + 63
    setmaxnreg_inc<Cfg::kConsumerRegs>();
    const int consumer = warpgroup - 1;
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    const int row_in = warp * 16 + lane / 4;
    const int qc0 = q0 + consumer * 64;
    const float scale = rsqrtf((float)kHS), scale_log2 = scale * 1.4426950408889634f;
    float lse_row[2], d_row[2];  // this thread's rows row_in, row_in + 8
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int query = qc0 + row_in + 8 * r;
        const size_t at = ((size_t)b * NH + h) * T + query;
        lse_row[r] = query < T ? __ldg(lse + at) * 1.4426950408889634f : 0.f;
        d_row[r] = query < T ? __ldg(D + at) : 0.f;
    }
    float dq[kHS / 2];
#pragma unroll
    for (int i = 0; i < kHS / 2; i++) dq[i] = 0.f;

    mbarrier_wait(q_full, 0);
    // Q and dO rows as the register A operands of S and dP (as K and V in the dK/dV kernel; splitting the key tile
    // into parts as there made this kernel slower, docs/PERFORMANCE.md)
    uint32_t q_frag[kHS / 16][4], do_frag[kHS / 16][4];
    load_a_fragments<kHS>(sQ + consumer * 64 * 128, Cfg::kBq, row_in, lane, q_frag);
    load_a_fragments<kHS>(sdO + consumer * 64 * 128, Cfg::kBq, row_in, lane, do_frag);
    for (int j = 0; j < n_k; j++) {
        const int stage = j % Cfg::kStages;
        mbarrier_wait(&full[stage], (j / Cfg::kStages) & 1);
        const uint8_t* k_tile = smem + Cfg::kStageOffset + stage * Cfg::kStageBytes;
        const uint8_t* v_tile = k_tile + Cfg::kKBytes;

        // S = Q·Kᵀ and dP = dO·Vᵀ (64 queries x 64 keys, over HS)
        float s[Cfg::kBk / 2], dp[Cfg::kBk / 2];  // zeroed for the same reason as st, dpt above
#pragma unroll
        for (int x = 0; x < Cfg::kBk / 2; x++) s[x] = 0.f, dp[x] = 0.f;
        wgmma_fence();
        wgmma_rs_over_head_dim<kHS>(s, q_frag, k_tile, Cfg::kBk);
        wgmma_rs_over_head_dim<kHS>(dp, do_frag, v_tile, Cfg::kBk);
        wgmma_commit();
        wgmma_wait<0>();
        fence_accumulator(s);
        fence_accumulator(dp);

        // dS = P∘(dP − D), P = exp(scale·S − LSE), 0 above the diagonal (tested in the tile that crosses it)
        const int delta = j * Cfg::kBk + Cfg::kBk - 1 > qc0 ? j * Cfg::kBk + 2 * (lane % 4) - (qc0 + row_in) : kNoMask;
        ds_by_rows<Cfg::kBk>(s, dp, lse_row, d_row, scale_log2, delta);
        uint32_t ds_frag[Cfg::kBk / 16][4];
        pack_a_fragments<Cfg::kBk>(dp, ds_frag);

        // dQ += dS·K (over the 64 keys; K as MN-major B)
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Cfg::kBk / 16; kk++) wgmma_rs<1>(dq, ds_frag[kk], mn_major_descriptor(k_tile, Cfg::kBk, kk), 1);
        wgmma_commit();
        wgmma_wait<0>();
        if (lane == 0) mbarrier_arrive(&empty[stage]);
    }

    // ---- epilogue: dQ·scale into this consumer's rows of the Q tile, then a TMA store into dqkv
    uint8_t* q_rows = sQ + consumer * 64 * 128;
    fence_accumulator(dq);
    stage_tile<kHS>(q_rows, Cfg::kBq, dq, scale, row_in, lane);
    fence_proxy_async();
    named_barrier_sync(1 + consumer, 128);
    if (t == 0) {
        for (int sub = 0; sub < Cfg::kSub; sub++)
            tma_store_3d(&map_dqkv, q_rows + sub * Cfg::kBq * 128, h * kHS + 64 * sub, qc0, b);
        tma_store_commit();
    }
    if (bias_partials) {  // the q bias gradient's partial row of this consumer's 64 queries
        float* row = bias_partials + ((size_t)b * 2 * gridDim.x + qc0 / 64) * 3 * C + h * kHS;
        staged_column_sums<kHS>(q_rows, Cfg::kBq, row, warp, lane);
    }
    if (t == 0) tma_store_wait<0>();
}

// ------------------------------------------------------------------------------------------ 4. fused dK, dV, dQ
// One kernel, as FlashAttention-3: the dK/dV kernel above, plus dQ += dS·K for each query tile, added into an fp32
// accumulator dQacc (B, T, NH·HS) by TMA reduce-adds, then converted to bf16 (scaled) by a small kernel.
// dQ is computed transposed, dQᵀ(HS x queries) = Kᵀ·dSᵀ: A = Kᵀ read MN-major from the K tile already in shared
// memory, B = dSᵀ written by the consumers into shared memory as [query][key] (K-major). Each consumer takes a
// 64 x kDqN piece: at HS 128 its 64 head dims of the 64 queries (m64n64), at HS 64 its 32 of the 64 queries
// (m64n32; no branch around a wgmma, which would serialise them). The piece goes transposed into a
// 128-byte-swizzled fp32 tile that TMA reduce-adds (two boxes of 32 dims x kDqN queries) add into dQacc.
// The consumers never wait for the additions: they leave each piece in one of two buffers and go on, and one
// thread of the producer warpgroup (the dQ writer) issues the additions, in the order the scheme needs:
//   kOrdered (deterministic): the additions into each query tile happen in a fixed order, key blocks from the
//   diagonal down, through a semaphore per (b, h, query tile): the first contributor stores, the others wait for
//   their turn. Blocks launch shortest first, so every block waits only on blocks launched before it.
//   !kOrdered: unordered reduce-adds into a zeroed dQacc, blocks longest first: faster, not bit-reproducible.
template <int kHS>
struct BackwardFusedConfig {
    using KV = BackwardKVConfig<kHS>;  // the dK/dV kernel's tiles, registers and operand placement
    static constexpr int kBk = KV::kBk, kBq = KV::kBq;
    static constexpr int kConsumers = KV::kConsumers, kThreads = KV::kThreads;
    static constexpr int kSub = kHS / 64;
    static constexpr int kKBytes = kBk * kHS * 2, kQBytes = kBq * kHS * 2;
    static constexpr int kStages = kHS == 64 ? 4 : 2;  // at HS 128 the dQ pieces take the shared memory of two more
    static constexpr int kDsBytes = kBq * kBk * 2;     // dSᵀ of both consumers, [consumer][kBq][64 keys]
    static constexpr int kDqN = kHS == 64 ? 32 : kBq;  // queries of a consumer's dQ piece (see the kernel)
    static constexpr int kDqBytes = 64 * kDqN * 4;     // one consumer's dQ piece, [2][kDqN queries][32 dims] fp32
    static constexpr int kDqBuffers = 2;  // per consumer: one being filled while the writer adds the other
    static constexpr int kVOffset = kKBytes, kStageOffset = 2 * kKBytes, kStageBytes = 2 * kQBytes;
    static constexpr int kDsOffset = kStageOffset + kStages * kStageBytes;   // two buffers (by tile parity)
    static constexpr int kDqOffset = kDsOffset + 2 * kDsBytes;               // [consumer][buffer]
    static constexpr int kLseOffset = kDqOffset + kConsumers * kDqBuffers * kDqBytes;  // [kStages][2][kBq] fp32
    static constexpr int kBarrierOffset = kLseOffset + kStages * 2 * kBq * 4;
    // kv_full, the ring's full and empty, the dQ buffers' full and empty
    static constexpr int kBarriers = 1 + 2 * kStages + 2 * kConsumers * kDqBuffers;
    static constexpr int kSmemBytes = kBarrierOffset + kBarriers * 8 + 1024;
    static constexpr int kProducerRegs = KV::kProducerRegs, kConsumerRegs = KV::kConsumerRegs;
    static constexpr bool kKRegs = KV::kKRegs, kVRegs = KV::kVRegs;
    static constexpr int kParts = KV::kParts;
    // dQᵀ's accumulator zeroed right before its product at HS 128, so its 32 registers are free while Sᵀ and dPᵀ
    // are live (at HS 64 it has 16 and is zeroed with them)
    static constexpr bool kDqZeroLate = kHS == 128;
    static constexpr int kUnits = kConsumers;  // semaphore increments per key block and tile (one per consumer)
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// named barriers of the fused kernel (0 is __syncthreads)
constexpr int kBarrierDs = 1;        // both consumers' dSᵀ written (256 threads)
constexpr int kBarrierEpilogue = 2;  // + consumer: that consumer's dK/dV tile staged (128 threads)

// The dQ writer (one thread): for each query tile, once both consumers' pieces are in their buffer, completes the
// previous tile's additions (then releases its semaphore and buffers), waits for this tile's turn (ordered), and
// issues the additions. Releasing before waiting keeps the chain between blocks one tile long.
template <typename Cfg, int kHS, bool kOrdered>
__device__ __forceinline__ void write_dq_pieces(uint8_t* smem, uint64_t* dq_full, uint64_t* dq_empty,
                                                const CUtensorMap* map_dqacc, int* sem_bh, int kb, int i_first,
                                                int n_q, int T, int h, int b) {
    using namespace hopper;
    for (int i = i_first, n = 0; i < n_q; i++, n++) {
        const int buf = n % Cfg::kDqBuffers;
        for (int c = 0; c < Cfg::kConsumers; c++) mbarrier_wait(&dq_full[c * Cfg::kDqBuffers + buf], (n / 2) & 1);
        if (n > 0) {
            tma_store_wait<0>();
            if (kOrdered) semaphore_release_add(sem_bh + i - 1, Cfg::kUnits);
            for (int c = 0; c < Cfg::kConsumers; c++)
                mbarrier_arrive(&dq_empty[c * Cfg::kDqBuffers + (n - 1) % Cfg::kDqBuffers]);
        }
        bool first = false;
        if (kOrdered) {  // contributors to tile i, from the diagonal key block down to block 0
            const int kb_diag = (min(T, (i + 1) * Cfg::kBq) - 1) / Cfg::kBk;
            first = kb == kb_diag;
            if (!first) semaphore_wait_at_least(sem_bh + i, Cfg::kUnits * (kb_diag - kb));
        }
        for (int c = 0; c < Cfg::kConsumers; c++) {
            const uint8_t* piece = smem + Cfg::kDqOffset + (c * Cfg::kDqBuffers + buf) * Cfg::kDqBytes;
            int dq_sub, q_off;
            dq_piece_origin<kHS>(c, &dq_sub, &q_off);
            const int col = h * kHS + 64 * dq_sub, row = i * Cfg::kBq + q_off;
            for (int box = 0; box < 2; box++) {
                if (first) tma_store_3d(map_dqacc, piece + box * Cfg::kDqN * 128, col + 32 * box, row, b);
                else tma_reduce_add_3d(map_dqacc, piece + box * Cfg::kDqN * 128, col + 32 * box, row, b);
            }
        }
        tma_store_commit();
    }
    if (n_q > i_first) {
        tma_store_wait<0>();
        if (kOrdered) semaphore_release_add(sem_bh + n_q - 1, Cfg::kUnits);
    }
}

template <int kHS, bool kOrdered>
__global__ void __launch_bounds__(BackwardFusedConfig<kHS>::kThreads, 1)
    backward_fused_kernel(const __grid_constant__ CUtensorMap map_kv, const __grid_constant__ CUtensorMap map_q,
                          const __grid_constant__ CUtensorMap map_dout, const __grid_constant__ CUtensorMap map_dqkv,
                          const __grid_constant__ CUtensorMap map_dqacc, const float* __restrict__ lse,
                          const float* __restrict__ D, int* __restrict__ semaphores, int T, int NH) {
    using Cfg = BackwardFusedConfig<kHS>;
    using namespace hopper;
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = smem_align_1024(smem_raw);
    uint8_t* sK = smem;
    uint8_t* sV = smem + Cfg::kVOffset;
    uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Cfg::kBarrierOffset);
    uint64_t* full = kv_full + 1;
    uint64_t* empty = full + Cfg::kStages;
    uint64_t* dq_full = empty + Cfg::kStages;                     // [consumer][buffer]
    uint64_t* dq_empty = dq_full + Cfg::kConsumers * Cfg::kDqBuffers;

    const int C = NH * kHS;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int n_kb = gridDim.x;
    const int kb = kOrdered ? n_kb - 1 - (int)blockIdx.x : (int)blockIdx.x;  // ordered: shortest first
    const int k0 = kb * Cfg::kBk;
    const int i_first = k0 / Cfg::kBq, n_q = (T + Cfg::kBq - 1) / Cfg::kBq;
    const int warpgroup = threadIdx.x / 128;
    int* sem_bh = semaphores + (size_t)bh * n_q;

    if (threadIdx.x == 0) {
        tma_prefetch_map(&map_kv);
        tma_prefetch_map(&map_q);
        tma_prefetch_map(&map_dout);
        tma_prefetch_map(&map_dqkv);
        tma_prefetch_map(&map_dqacc);
        mbarrier_init(kv_full, 1);
        ring_barriers_init(full, empty, Cfg::kStages, Cfg::kConsumers * 4, 2);
        for (int x = 0; x < Cfg::kConsumers * Cfg::kDqBuffers; x++) {
            mbarrier_init(&dq_full[x], 4);  // lane 0 of each consumer warp
            mbarrier_init(&dq_empty[x], 1);  // the dQ writer
        }
        fence_barrier_init();
    }
    __syncthreads();
    const float* lse_bh = lse + ((size_t)b * NH + h) * T;
    const float* D_bh = D + ((size_t)b * NH + h) * T;
    float* lse_d = reinterpret_cast<float*>(smem + Cfg::kLseOffset);

    if (warpgroup == 0) {  // ---- producers (as in the dK/dV kernel) and the dQ writer (warp 1)
        setmaxnreg_dec<Cfg::kProducerRegs>();
        if (threadIdx.x == 0) {
            produce_k_v_then_q_do<Cfg, kHS>(smem, sK, sV, kv_full, full, empty, &map_kv, &map_q, &map_dout, C, h, k0, b,
                                            i_first, n_q);
        } else if (threadIdx.x == 32) {
            write_dq_pieces<Cfg, kHS, kOrdered>(smem, dq_full, dq_empty, &map_dqacc, sem_bh, kb, i_first, n_q, T, h, b);
        } else if (threadIdx.x / 32 == 2) {
            produce_lse_d<Cfg>(lse_d, full, empty, lse_bh, D_bh, T, i_first, n_q, threadIdx.x % 32);
        }
        return;
    }

    setmaxnreg_inc<Cfg::kConsumerRegs>();
    const int consumer = warpgroup - 1;
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    const int row_in = warp * 16 + lane / 4;
    const int kc0 = k0 + consumer * 64;
    const float scale = rsqrtf((float)kHS), scale_log2 = scale * 1.4426950408889634f;
    int dq_sub, q_off;  // where this consumer's dQ piece sits in the tile
    dq_piece_origin<kHS>(consumer, &dq_sub, &q_off);

    float dv[kHS / 2], dk[kHS / 2];
#pragma unroll
    for (int i = 0; i < kHS / 2; i++) dv[i] = 0.f, dk[i] = 0.f;

    mbarrier_wait(kv_full, 0);
    uint32_t k_frag[Cfg::kKRegs ? kHS / 16 : 1][4], v_frag[Cfg::kVRegs ? kHS / 16 : 1][4];
    if constexpr (Cfg::kKRegs) load_a_fragments<kHS>(sK + consumer * 64 * 128, Cfg::kBk, row_in, lane, k_frag);
    if constexpr (Cfg::kVRegs) load_a_fragments<kHS>(sV + consumer * 64 * 128, Cfg::kBk, row_in, lane, v_frag);
    constexpr int kParts = Cfg::kParts, kPq = Cfg::kBq / kParts;
    for (int i = i_first, n = 0; i < n_q; i++, n++) {
        const int stage = n % Cfg::kStages;
        mbarrier_wait(&full[stage], (n / Cfg::kStages) & 1);
        const uint8_t* q_tile = smem + Cfg::kStageOffset + stage * Cfg::kStageBytes;
        const uint8_t* do_tile = q_tile + Cfg::kQBytes;
        uint8_t* ds_tile = smem + Cfg::kDsOffset + (n % 2) * Cfg::kDsBytes;
        uint8_t* ds_rows = ds_tile + consumer * Cfg::kBq * 128;

        // zeroed where no product is in flight (see the dK/dV kernel; dQᵀ's too, here or before its product)
        float st[kParts][kPq / 2], dpt[kParts][kPq / 2], dqt[Cfg::kDqN / 2];  // dQᵀ: 64 head dims x kDqN queries
#pragma unroll
        for (int part = 0; part < kParts; part++)
#pragma unroll
            for (int x = 0; x < kPq / 2; x++) st[part][x] = 0.f, dpt[part][x] = 0.f;
        if constexpr (!Cfg::kDqZeroLate) {
#pragma unroll
            for (int x = 0; x < Cfg::kDqN / 2; x++) dqt[x] = 0.f;
        }
        issue_st_dpt<Cfg, kHS, kParts, kPq>(st, dpt, k_frag, v_frag, sK + consumer * 64 * 128, sV + consumer * 64 * 128,
                                            q_tile, do_tile);
        const float* lse_d_stage = lse_d + stage * 2 * Cfg::kBq;

#pragma unroll
        for (int part = 0; part < kParts; part++) {
            part_p_and_ds<Cfg::kBq, kPq, kParts>(st[part], dpt[part], lse_d_stage, part, i * Cfg::kBq, kc0, row_in,
                                                 lane, scale_log2);
            // dSᵀ also goes to shared memory as bf16 [query][key] for dQ
#pragma unroll
            for (int jj = 0; jj < kPq / 8; jj++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int q_local = part * kPq + 8 * jj + 2 * (lane % 4) + (e & 1);
                    const int key_local = row_in + 8 * (e >> 1);
                    *reinterpret_cast<bf16*>(ds_rows + q_local * 128 + sw128_chunk_offset(q_local, key_local / 8) +
                                             (key_local % 8) * 2) = __float2bfloat16_rn(dpt[part][4 * jj + e]);
                }
            issue_dv_dk<Cfg::kBq, kPq, kHS>(dv, dk, st[part], dpt[part], do_tile, q_tile, part);
        }
        fence_proxy_async();
        named_barrier_sync(kBarrierDs, 256);  // the dQ product reads both consumers' dSᵀ

        if constexpr (Cfg::kDqZeroLate) {
#pragma unroll
            for (int x = 0; x < Cfg::kDqN / 2; x++) dqt[x] = 0.f;
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Cfg::kBk / 16; kk++)  // over the block's 128 keys
            wgmma_ss<0, 1>(dqt, mn_major_descriptor(sK + dq_sub * Cfg::kBk * 128, Cfg::kBk, kk),
                           descriptor_plus(smem_descriptor_sw128(ds_tile),
                                           (kk / 4) * Cfg::kBq * 128 + q_off * 128 + (kk % 4) * 32),
                           kk > 0 ? 1 : 0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_accumulator(dqt);
        if (lane == 0) mbarrier_arrive(&empty[stage]);

        // dQᵀ element (head dim d, query q) -> fp32 piece [d / 32][q][32], 128-byte swizzle (conflict-free), in
        // the buffer the writer has finished with
        const int buf = n % Cfg::kDqBuffers;
        uint8_t* piece = smem + Cfg::kDqOffset + (consumer * Cfg::kDqBuffers + buf) * Cfg::kDqBytes;
        mbarrier_wait(&dq_empty[consumer * Cfg::kDqBuffers + buf], ((n / 2) & 1) ^ 1);
#pragma unroll
        for (int jj = 0; jj < Cfg::kDqN / 8; jj++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int q = 8 * jj + 2 * (lane % 4) + (e & 1), d = row_in + 8 * (e >> 1);
                *reinterpret_cast<float*>(piece + (d / 32) * Cfg::kDqN * 128 + q * 128 +
                                          sw128_chunk_offset(q, (d % 32) / 4) + (d % 4) * 4) = dqt[4 * jj + e];
            }
        fence_proxy_async();
        __syncwarp();
        if (lane == 0) mbarrier_arrive(&dq_full[consumer * Cfg::kDqBuffers + buf]);
    }

    // ---- epilogue as in the dK/dV kernel, once the other consumer's last dQ product has read sK
    named_barrier_sync(kBarrierDs, 256);
    uint8_t* k_rows = sK + consumer * 64 * 128;
    uint8_t* v_rows = sV + consumer * 64 * 128;
    fence_accumulator(dk);
    fence_accumulator(dv);
    stage_tile<kHS>(k_rows, Cfg::kBk, dk, scale, row_in, lane);
    stage_tile<kHS>(v_rows, Cfg::kBk, dv, 1.f, row_in, lane);
    fence_proxy_async();
    named_barrier_sync(kBarrierEpilogue + consumer, 128);
    if (t == 0) {
        for (int sub = 0; sub < Cfg::kSub; sub++) {
            tma_store_3d(&map_dqkv, k_rows + sub * Cfg::kBk * 128, C + h * kHS + 64 * sub, kc0, b);
            tma_store_3d(&map_dqkv, v_rows + sub * Cfg::kBk * 128, 2 * C + h * kHS + 64 * sub, kc0, b);
        }
        tma_store_commit();
        tma_store_wait<0>();
    }
}

// dQ (bf16, into dqkv's Q slots) = scale · dQacc, four elements per thread.
__global__ void dq_convert_kernel(bf16* __restrict__ dqkv, const float* __restrict__ dqacc, long long n4, int C,
                                  float scale) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n4) return;
    const long long e = idx * 4, bt = e / C;
    const int c = (int)(e % C);
    const float4 v = *reinterpret_cast<const float4*>(dqacc + e);
    __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(dqkv + bt * 3 * C + c);
    dst[0] = __floats2bfloat162_rn(v.x * scale, v.y * scale);
    dst[1] = __floats2bfloat162_rn(v.z * scale, v.w * scale);
}

enum class DqMode { TwoKernels, Ordered, Unordered };

// Workspace of the fused backward: dQacc (B·T·C fp32), D (B·NH·T fp32), semaphores (B·NH·ceil(T/32) ints).
inline size_t fused_workspace_bytes(int B, int T, int NH, int HS) {
    return (size_t)B * NH * T * 4 + (size_t)B * T * NH * HS * 4 + (size_t)B * NH * ((T + 31) / 32) * 4;
}

template <int kHS>
inline void launch_backward_fused(bf16* dqkv, float* workspace, const bf16* dout, const bf16* out, const float* lse,
                                  const bf16* qkv, int B, int T, int NH, bool ordered, cudaStream_t stream) {
    using F = BackwardFusedConfig<kHS>;
    static const bool smem_ready = (hopper::allow_dynamic_smem(backward_fused_kernel<kHS, true>, F::kSmemBytes),
                                    hopper::allow_dynamic_smem(backward_fused_kernel<kHS, false>, F::kSmemBytes), true);
    (void)smem_ready;
    const int C = NH * kHS;
    const int n_q = (T + F::kBq - 1) / F::kBq;
    float* dqacc = workspace;  // first: TMA and the float4 conversion want it 16-byte aligned
    float* D = dqacc + (size_t)B * T * C;
    int* semaphores = reinterpret_cast<int*>(D + (size_t)B * NH * T);
    if (ordered) cudaCheck(cudaMemsetAsync(semaphores, 0, (size_t)B * NH * n_q * sizeof(int), stream));
    else cudaCheck(cudaMemsetAsync(dqacc, 0, (size_t)B * T * C * sizeof(float), stream));
    launch_backward_d<kHS>(D, out, dout, B, T, NH, stream);
    using hopper::make_tensor_map_3d;
    const auto sw = CU_TENSOR_MAP_SWIZZLE_128B;
    const uint64_t qkv_batch = (uint64_t)T * 3 * C, o_batch = (uint64_t)T * C;
    const auto bf = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const CUtensorMap qkv_128 = make_tensor_map_3d(qkv, bf, 2, B, T, 3 * C, 3 * C, qkv_batch, 128, 64, sw);
    const CUtensorMap q_tiles = make_tensor_map_3d(qkv, bf, 2, B, T, 3 * C, 3 * C, qkv_batch, F::kBq, 64, sw);
    const CUtensorMap dout_tiles = make_tensor_map_3d(dout, bf, 2, B, T, C, C, o_batch, F::kBq, 64, sw);
    const CUtensorMap dqkv_64 = make_tensor_map_3d(dqkv, bf, 2, B, T, 3 * C, 3 * C, qkv_batch, 64, 64, sw);
    const CUtensorMap dqacc_map = make_tensor_map_3d(dqacc, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, B, T, C, C, o_batch,
                                                     F::kDqN, 32, sw);
    const dim3 grid((T + F::kBk - 1) / F::kBk, B * NH);
    if (ordered)
        backward_fused_kernel<kHS, true><<<grid, F::kThreads, F::kSmemBytes, stream>>>(
            qkv_128, q_tiles, dout_tiles, dqkv_64, dqacc_map, lse, D, semaphores, T, NH);
    else
        backward_fused_kernel<kHS, false><<<grid, F::kThreads, F::kSmemBytes, stream>>>(
            qkv_128, q_tiles, dout_tiles, dqkv_64, dqacc_map, lse, D, semaphores, T, NH);
    cudaCheckLaunch();
    const long long n4 = (long long)B * T * C / 4;
    dq_convert_kernel<<<(unsigned)((n4 + 255) / 256), 256, 0, stream>>>(dqkv, dqacc, n4, C, rsqrtf((float)kHS));
    cudaCheckLaunch();
}

// Partial rows of the two-kernel scheme's bias-gradient sums (3C floats each): one per (b, 64 rows of each block
// of 128).
inline int backward_bias_partial_rows(int B, int T) { return B * 2 * ((T + 127) / 128); }

template <int kHS>
inline void launch_backward(bf16* dqkv, float* D, const bf16* dout, const bf16* out, const float* lse, const bf16* qkv,
                            int B, int T, int NH, float* bias_partials, cudaStream_t stream) {
    static_assert(BackwardKVConfig<kHS>::kBk == 128 && BackwardQConfig<kHS>::kBq == 128, "backward_bias_partial_rows");
    using KV = BackwardKVConfig<kHS>;
    using Q = BackwardQConfig<kHS>;
    static const bool smem_ready = (hopper::allow_dynamic_smem(backward_kv_kernel<kHS>, KV::kSmemBytes),
                                    hopper::allow_dynamic_smem(backward_q_kernel<kHS>, Q::kSmemBytes), true);
    (void)smem_ready;
    const int C = NH * kHS;
    launch_backward_d<kHS>(D, out, dout, B, T, NH, stream);
    using hopper::make_tensor_map_3d;
    const auto bf = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const auto sw = CU_TENSOR_MAP_SWIZZLE_128B;
    const uint64_t qkv_batch = (uint64_t)T * 3 * C, o_batch = (uint64_t)T * C;
    // boxes of 64 columns (one head's 64-column slice) x 128 or 64 rows
    const CUtensorMap qkv_128 = make_tensor_map_3d(qkv, bf, 2, B, T, 3 * C, 3 * C, qkv_batch, 128, 64, sw);
    const CUtensorMap qkv_64 = make_tensor_map_3d(qkv, bf, 2, B, T, 3 * C, 3 * C, qkv_batch, 64, 64, sw);
    const CUtensorMap q_kv = make_tensor_map_3d(qkv, bf, 2, B, T, 3 * C, 3 * C, qkv_batch, KV::kBq, 64, sw);
    const CUtensorMap dout_128 = make_tensor_map_3d(dout, bf, 2, B, T, C, C, o_batch, 128, 64, sw);
    const CUtensorMap dout_kv = make_tensor_map_3d(dout, bf, 2, B, T, C, C, o_batch, KV::kBq, 64, sw);
    const CUtensorMap dqkv_64 = make_tensor_map_3d(dqkv, bf, 2, B, T, 3 * C, 3 * C, qkv_batch, 64, 64, sw);
    backward_kv_kernel<kHS><<<dim3((T + KV::kBk - 1) / KV::kBk, B * NH), KV::kThreads, KV::kSmemBytes, stream>>>(
        qkv_128, q_kv, dout_kv, dqkv_64, lse, D, bias_partials, T, NH);
    cudaCheckLaunch();
    backward_q_kernel<kHS><<<dim3((T + Q::kBq - 1) / Q::kBq, B * NH), Q::kThreads, Q::kSmemBytes, stream>>>(
        qkv_128, dout_128, qkv_64, dqkv_64, lse, D, bias_partials, T, NH);
    cudaCheckLaunch();
}

}  // namespace flash_hopper

// Scratch the backward needs (HS 64 or 128): the fused modes' dQ accumulator, D and semaphores; D alone for the
// two-kernel scheme.
inline size_t attention_hopper_backward_workspace_bytes(int B, int T, int NH, int HS) {
    return flash_hopper::fused_workspace_bytes(B, T, NH, HS);
}

// dqkv is overwritten; out and lse are the forward's outputs for the same qkv. HS 64 or 128. mode: Ordered (the
// default: deterministic), Unordered (faster, not bit-reproducible), TwoKernels (deterministic, dQ recomputed).
// bias_partials (TwoKernels only; else nullptr): flash_hopper::backward_bias_partial_rows(B, T) rows of 3C floats,
// overwritten with partial column sums of dqkv; column_sum_finish over them gives the qkv bias gradient.
inline cudaError_t attention_hopper_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                                             const float* lse, const __nv_bfloat16* qkv, int B, int T, int NH, int HS,
                                             float* workspace, cudaStream_t stream = 0,
                                             flash_hopper::DqMode mode = flash_hopper::DqMode::Ordered,
                                             float* bias_partials = nullptr) {
    using flash_hopper::DqMode;
    if (HS != 64 && HS != 128) return cudaErrorInvalidValue;
    if (bias_partials && mode != DqMode::TwoKernels) return cudaErrorInvalidValue;
    if (mode == DqMode::TwoKernels) {
        if (HS == 64)
            flash_hopper::launch_backward<64>(dqkv, workspace, dout, out, lse, qkv, B, T, NH, bias_partials, stream);
        else
            flash_hopper::launch_backward<128>(dqkv, workspace, dout, out, lse, qkv, B, T, NH, bias_partials, stream);
    } else {
        const bool ordered = mode == DqMode::Ordered;
        if (HS == 64) flash_hopper::launch_backward_fused<64>(dqkv, workspace, dout, out, lse, qkv, B, T, NH, ordered, stream);
        else flash_hopper::launch_backward_fused<128>(dqkv, workspace, dout, out, lse, qkv, B, T, NH, ordered, stream);
    }
    return cudaGetLastError();
}
