// The Hopper attention backward's dQ kernel (the two-kernel scheme's second; attention_hopper_backward.cuh): one
// block per Bq = 128 queries (two consumers of 64, Q and dO as register A operands), K and V tiles of Bk = 64 keys
// streamed up to the diagonal; S and dP again, dS = P∘(dP − D) in registers, dQ += dS·K (K as MN-major B).
#pragma once

#include "llmc/kernels/attention/attention_hopper_backward_parts.cuh"

namespace flash_hopper {

// dS = P∘(dP − D) in place in dp, P = exp2(scale_log2·S − LSE), over kBk key columns of a 64-query accumulator
// pair (rows: this thread's two queries), P = 0 where key > query; `delta` = first key − first query, or kNoMask.
template <int kBk>
__device__ __forceinline__ void ds_by_rows(hopper::Accumulator<kBk>& s, hopper::Accumulator<kBk>& dp,
                                           const float (&lse_row)[2], const float (&d_row)[2], float scale_log2,
                                           int delta) {
    s.for_each_with(dp, [&](float& x, float& g, int r, int j, int e) {
        float p = exp2f(x * scale_log2 - lse_row[r]);
        if (delta + 8 * j + e > 8 * r) p = 0.f;
        g = p * (g - d_row[r]);
    });
}

template <int kHS>
struct BackwardQConfig {
    static constexpr int kBq = 128, kBk = 64;  // queries per block (64 per consumer), keys per streamed tile
    static constexpr int kConsumers = 2, kThreads = 128 * (1 + kConsumers);
    static constexpr int kStages = 4;
    static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
    // Q and dO (in the epilogue each consumer's rows of Q stage its dQ), per stage K and V
    struct Layout {
        hopper::Tile<bf16, kBq, kHS> q, dO;
        struct {
            hopper::Tile<bf16, kBk, kHS> k, v;
        } kv[kStages];
        struct {
            uint64_t q_full;
            hopper::RingBarriers<kStages> ring;
        } barriers;
    };
    static constexpr int kSmemBytes = hopper::smem_bytes<Layout>();
    static_assert(hopper::setmaxnreg_fits(kConsumers, kProducerRegs, kConsumerRegs), "setmaxnreg");
    static_assert(kSmemBytes <= hopper::kSmemLimit, "shared memory");
};

template <int kHS>
__global__ void __launch_bounds__(BackwardQConfig<kHS>::kThreads, 1)
    backward_q_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_dout,
                      const __grid_constant__ CUtensorMap map_kv, const __grid_constant__ CUtensorMap map_dqkv,
                      const float* __restrict__ lse_d, float* __restrict__ bias_partials, int T, int NH,
                      float* dqkv_amax) {
    using Cfg = BackwardQConfig<kHS>;
    using namespace hopper;
    extern __shared__ uint8_t smem_raw[];
    auto& L = smem_layout<typename Cfg::Layout>(smem_raw);
    auto &sQ = L.q, &sdO = L.dO;

    const int C = NH * kHS;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int q_block = gridDim.x - 1 - blockIdx.x;  // longest first
    const int q0 = q_block * Cfg::kBq;
    const int n_k = (min(T, q0 + Cfg::kBq) + Cfg::kBk - 1) / Cfg::kBk;  // key tiles up to the diagonal

    Ring<Cfg::kStages> ring(L.barriers.ring);
    warp_specialized<Cfg::kProducerRegs, Cfg::kConsumerRegs>(
        [&] {
            prefetch_tensor_maps(&map_q, &map_dout, &map_kv, &map_dqkv);
            mbarrier_init(&L.barriers.q_full, 1);
            L.barriers.ring.init(1, Cfg::kConsumers * 4);
        },
        [&] {  // ---- producer
            if (threadIdx.x == 0) {
                mbarrier_arrive_expect_tx(&L.barriers.q_full, sizeof(sQ) + sizeof(sdO));
                for (int sub = 0; sub < sQ.kBoxes; sub++) {
                    tma_load_3d(sQ.box(sub), &map_q, &L.barriers.q_full, h * kHS + 64 * sub, q0, b);
                    tma_load_3d(sdO.box(sub), &map_dout, &L.barriers.q_full, h * kHS + 64 * sub, q0, b);
                }
                produce_k_v_tiles(L.kv, ring, &map_kv, C, h, b, n_k);
            }
        },
        [&](int consumer) {  // ---- consumers: queries qc0 .. qc0 + 63, rows q_row.. of sQ and sdO
            const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
            const int row_in = warp * 16 + lane / 4;
            const int q_row = consumer * 64, qc0 = q0 + q_row;
            const float scale = rsqrtf((float)kHS), scale_log2 = scale * kLog2e;
            float lse_row[2], d_row[2];  // this thread's rows row_in, row_in + 8 (padded: every query has a place)
            const int Tp = padded_T(T);
            const float* lse_d_bh = lse_d + (size_t)bh * 2 * Tp;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int query = qc0 + row_in + 8 * r;
                lse_row[r] = __ldg(lse_d_bh + query);
                d_row[r] = __ldg(lse_d_bh + Tp + query);
            }
            float dq[kHS / 2];
#pragma unroll
            for (int i = 0; i < kHS / 2; i++) dq[i] = 0.f;

            mbarrier_wait(&L.barriers.q_full, 0);
            // Q and dO rows as the register A operands of S and dP (as K and V in the dK/dV kernel; splitting the key
            // tile into parts as there made this kernel slower, docs/PERFORMANCE.md)
            uint32_t q_frag[kHS / 16][4], do_frag[kHS / 16][4];
            load_a_fragments(sQ, q_row, row_in, lane, q_frag);
            load_a_fragments(sdO, q_row, row_in, lane, do_frag);
            for (int j = 0; j < n_k; j++, ring.advance()) {
                ring.wait_full();
                const auto& kv = L.kv[ring.stage()];

                // S = Q·Kᵀ and dP = dO·Vᵀ (64 queries x 64 keys, over HS)
                Accumulator<Cfg::kBk> s, dp;  // zeroed for the same reason as the dK/dV kernel's st, dpt
#pragma unroll
                for (int x = 0; x < Cfg::kBk / 2; x++) s.d[x] = 0.f, dp.d[x] = 0.f;
                wgmma_fence();
                wgmma_rs_over_head_dim(s.d, q_frag, kv.k, 0);
                wgmma_rs_over_head_dim(dp.d, do_frag, kv.v, 0);
                wgmma_commit();
                wgmma_wait<0>();
                s.fence();
                dp.fence();

                // dS = P∘(dP − D), P = exp(scale·S − LSE), 0 above the diagonal (tested in the tile that crosses it)
                const int delta =
                    j * Cfg::kBk + Cfg::kBk - 1 > qc0 ? j * Cfg::kBk + 2 * (lane % 4) - (qc0 + row_in) : kNoMask;
                ds_by_rows<Cfg::kBk>(s, dp, lse_row, d_row, scale_log2, delta);
                uint32_t ds_frag[Cfg::kBk / 16][4];
                dp.to_a_fragments(ds_frag);

                // dQ += dS·K (over the 64 keys; K as MN-major B)
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < Cfg::kBk / 16; kk++)
                    wgmma_rs<1>(dq, ds_frag[kk], mn_major_descriptor(kv.k, kk), 1);
                wgmma_commit();
                wgmma_wait<0>();
                if (lane == 0) ring.release();
            }

            // ---- epilogue: dQ·scale into this consumer's rows of sQ, then a TMA store into dqkv
            fence_accumulator(dq);
            stage_tile(sQ, q_row, dq, scale, row_in, lane);
            if (dqkv_amax) fold_staged_amax(dq, scale, dqkv_amax);
            fence_proxy_async();
            named_barrier_sync(1 + consumer, 128);
            if (t == 0) {
                for (int sub = 0; sub < sQ.kBoxes; sub++)
                    tma_store_3d(&map_dqkv, sQ.row(q_row) + sub * sQ.kBoxBytes, h * kHS + 64 * sub, qc0, b);
                tma_store_commit();
            }
            if (bias_partials) {  // the q bias gradient's partial row of this consumer's 64 queries
                float* row = bias_partials + ((size_t)b * 2 * gridDim.x + qc0 / 64) * 3 * C + h * kHS;
                staged_column_sums(sQ, q_row, row, warp, lane);
            }
            if (t == 0) tma_store_wait<0>();
        });
}

}  // namespace flash_hopper
