// The Hopper attention backward's dK/dV kernel (the two-kernel scheme's first; attention_hopper_backward.cuh): one
// block per Bk = 128 keys, two consumer warpgroups of 64 keys, Q and dO tiles of Bq = 64 queries streamed by TMA
// from the diagonal down, their LSE and D staged beside them. Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ with
// wgmma, K and V as register A operands loaded once at HS 64 (from shared memory at HS 128, whose registers go to
// dK, dV and the 64-query Sᵀ, dPᵀ), Pᵀ = exp(Sᵀ − LSE) and dSᵀ = Pᵀ∘(dPᵀ − D) in registers (the causal test only on
// tiles that cross the diagonal), then dV += Pᵀ·dO and dK += dSᵀ·Q with Pᵀ, dSᵀ as register A operands (the
// accumulator layout is the A layout) and dO, Q as MN-major B. At HS 64 each tile goes in two parts of 32 queries
// so that one part's elementwise work overlaps the other part's products.
#pragma once

#include "llmc/kernels/attention/attention_hopper_backward_parts.cuh"

namespace flash_hopper {

template <int kHS>
struct BackwardKVConfig {
    static constexpr int kBk = 128, kBq = 64;  // keys per block (64 per consumer), queries per streamed tile
    static constexpr int kConsumers = 2, kThreads = 128 * (1 + kConsumers);
    static constexpr int kStages = 4;
    static constexpr int kProducerRegs = kHS == 64 ? 40 : 24, kConsumerRegs = kHS == 64 ? 232 : 240;
    // K and V rows as the register A operands of Sᵀ and dPᵀ at HS 64 (16 registers per 64 head dims). At HS 128 dK
    // and dV take 128 of the 240 registers and Sᵀ, dPᵀ of 64 queries 64 more, so both come from shared memory
    // (K in registers forced 32-query tiles, slower: docs/PERFORMANCE.md).
    static constexpr bool kKRegs = kHS == 64, kVRegs = kHS == 64;
    // queries of a tile in kParts parts with their own wgmma groups (see the kernel); at HS 128 two parts were
    // slower (no registers left to hold both parts' operands)
    static constexpr int kParts = kHS == 64 ? 2 : 1;
    // K and V (in the epilogue each consumer's rows of them stage its dK and dV), per stage Q and dO, LSE and D (one
    // TMA box: BackwardWorkspace::lse_d)
    struct Layout {
        hopper::Tile<bf16, kBk, kHS> k, v;
        struct {
            hopper::Tile<bf16, kBq, kHS> q, dO;
        } stage[kStages];
        float lse_d[kStages][2][kBq];
        struct {
            uint64_t kv_full;
            hopper::RingBarriers<kStages> ring;  // Q, dO, LSE and D fill a stage (TMA: 1 producer)
        } barriers;
    };
    static constexpr int kSmemBytes = hopper::smem_bytes<Layout>();
    static_assert(hopper::setmaxnreg_fits(kConsumers, kProducerRegs, kConsumerRegs), "setmaxnreg");
    static_assert(kSmemBytes <= hopper::kSmemLimit, "shared memory");
};

template <int kHS>
__global__ void __launch_bounds__(BackwardKVConfig<kHS>::kThreads, 1)
    backward_kv_kernel(const __grid_constant__ CUtensorMap map_kv, const __grid_constant__ CUtensorMap map_q,
                       const __grid_constant__ CUtensorMap map_dout, const __grid_constant__ CUtensorMap map_dqkv,
                       const __grid_constant__ CUtensorMap map_lse_d, float* __restrict__ bias_partials, int T,
                       int NH, float* dqkv_amax) {
    using Cfg = BackwardKVConfig<kHS>;
    using namespace hopper;
    extern __shared__ uint8_t smem_raw[];
    auto& L = smem_layout<typename Cfg::Layout>(smem_raw);
    auto &sK = L.k, &sV = L.v;

    const int C = NH * kHS;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int k0 = blockIdx.x * Cfg::kBk;
    const int i_first = k0 / Cfg::kBq, n_q = (T + Cfg::kBq - 1) / Cfg::kBq;  // query tiles from the diagonal down

    Ring<Cfg::kStages> ring(L.barriers.ring);
    warp_specialized<Cfg::kProducerRegs, Cfg::kConsumerRegs>(
        [&] {
            prefetch_tensor_maps(&map_kv, &map_q, &map_dout, &map_dqkv, &map_lse_d);
            mbarrier_init(&L.barriers.kv_full, 1);
            L.barriers.ring.init(1, Cfg::kConsumers * 4);
        },
        [&] {  // ---- producer: TMA (thread 0)
            if (threadIdx.x == 0)
                produce_k_v_then_q_do(L, ring, &map_kv, &map_q, &map_dout, &map_lse_d, C, h, k0, b, bh, i_first, n_q);
        },
        [&](int consumer) {  // ---- consumers: keys kc0 .. kc0 + 63, rows kv_row.. of sK and sV
            const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
            const int row_in = warp * 16 + lane / 4;
            const int kv_row = consumer * 64, kc0 = k0 + kv_row;
            const float scale = rsqrtf((float)kHS), scale_log2 = scale * kLog2e;

            float dv[kHS / 2], dk[kHS / 2];
            uint32_t k_frag[Cfg::kKRegs ? kHS / 16 : 1][4], v_frag[Cfg::kVRegs ? kHS / 16 : 1][4];
            start_dk_dv<Cfg>(L, kv_row, row_in, lane, dk, dv, k_frag, v_frag);
            // A query tile in kParts parts, each with its own wgmma groups: the elementwise work of part p runs while
            // the products of part p + 1 (or the dV/dK products of part p - 1) keep the tensor cores busy.
            constexpr int kParts = Cfg::kParts, kPq = Cfg::kBq / kParts;
            for (int i = i_first; i < n_q; i++, ring.advance()) {
                ring.wait_full();
                const auto& stage = L.stage[ring.stage()];
                const auto &sQ = stage.q, &sdO = stage.dO;

                // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (64 keys x kPq queries per part, over HS)
                // zeroed although the first product overwrites them (scale-d 0): left undefined, the compiler copies
                // registers into them between the fence and the wgmmas, and ptxas then serialises the products (C7519)
                Accumulator<kPq> st[kParts], dpt[kParts];
#pragma unroll
                for (int part = 0; part < kParts; part++)
#pragma unroll
                    for (int x = 0; x < kPq / 2; x++) st[part].d[x] = 0.f, dpt[part].d[x] = 0.f;
                issue_st_dpt<Cfg, kParts, kPq>(st, dpt, k_frag, v_frag, sK, sV, kv_row, sQ, sdO);

#pragma unroll
                for (int part = 0; part < kParts; part++) {
                    part_p_and_ds<Cfg::kBq, kPq, kParts>(st[part], dpt[part], L.lse_d[ring.stage()], part,
                                                         i * Cfg::kBq, kc0, row_in, lane, scale_log2);
                    issue_dv_dk<kPq, kHS>(dv, dk, st[part], dpt[part], sdO, sQ, part);
                }
                wgmma_wait<0>();
                if (lane == 0) ring.release();
            }

            // ---- epilogue: dK·scale and dV into this consumer's rows of sK and sV (its own; every product that read
            // them is done), then TMA stores into dqkv (rows past T dropped)
            fence_accumulator(dk);
            fence_accumulator(dv);
            stage_tile(sK, kv_row, dk, scale, row_in, lane);
            stage_tile(sV, kv_row, dv, 1.f, row_in, lane);
            if (dqkv_amax) fold_staged_amax(dk, scale, dqkv_amax), fold_staged_amax(dv, 1.f, dqkv_amax);
            fence_proxy_async();
            named_barrier_sync(1 + consumer, 128);
            if (t == 0) {
                for (int sub = 0; sub < sK.kBoxes; sub++) {
                    tma_store_3d(&map_dqkv, sK.row(kv_row) + sub * sK.kBoxBytes, C + h * kHS + 64 * sub, kc0, b);
                    tma_store_3d(&map_dqkv, sV.row(kv_row) + sub * sV.kBoxBytes, 2 * C + h * kHS + 64 * sub, kc0, b);
                }
                tma_store_commit();
            }
            if (bias_partials) {  // the k and v bias gradients' partial row of this consumer's 64 keys
                float* row = bias_partials + ((size_t)b * 2 * gridDim.x + kc0 / 64) * 3 * C + h * kHS;
                staged_column_sums(sK, kv_row, row + C, warp, lane);
                staged_column_sums(sV, kv_row, row + 2 * C, warp, lane);
            }
            if (t == 0) tma_store_wait<0>();
        });
}

}  // namespace flash_hopper
