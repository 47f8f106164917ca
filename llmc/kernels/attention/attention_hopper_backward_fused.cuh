// The Hopper attention backward in one kernel, as FlashAttention-3 (attention_hopper_backward.cuh says when it runs):
// the dK/dV kernel (attention_hopper_backward_kv.cuh) plus dQ += dS·K for each query tile, added into an fp32
// accumulator dQacc (B, T, NH·HS) by TMA reduce-adds, then converted to bf16 (scaled) by a small kernel.
// dQ is computed transposed, dQᵀ (HS x queries) = Kᵀ·dSᵀ: A = Kᵀ read MN-major from sK, B = dSᵀ written by the
// consumers into shared memory as [query][key] (K-major). Each consumer takes a 64 x kDqN piece: at HS 128 its 64
// head dims of the 64 queries (m64n64), at HS 64 its 32 of the 64 queries (m64n32; no branch around a wgmma, which
// would serialise them). The piece goes transposed into a 128-byte-swizzled fp32 tile that TMA reduce-adds (two
// boxes of 32 dims x kDqN queries) add into dQacc.
// The consumers never wait for the additions: they leave each piece in one of two buffers and go on, and one thread
// of the producer warpgroup (the dQ writer) issues the additions in the order a DqOrder gives.
#pragma once

#include "llmc/kernels/attention/attention_hopper_backward_kv.cuh"

namespace flash_hopper {

template <int kHS>
struct BackwardFusedConfig {
    using KV = BackwardKVConfig<kHS>;  // the dK/dV kernel's tiles, registers and operand placement
    static constexpr int kBk = KV::kBk, kBq = KV::kBq;
    static constexpr int kConsumers = KV::kConsumers, kThreads = KV::kThreads;
    static constexpr int kStages = kHS == 64 ? 4 : 2;  // at HS 128 the dQ pieces take the shared memory of two more
    static constexpr int kDqN = kHS == 64 ? 32 : kBq;  // queries of a consumer's dQ piece (see above)
    static constexpr int kDqBuffers = 2;  // per consumer: one being filled while the writer adds the other
    static constexpr int kProducerRegs = KV::kProducerRegs, kConsumerRegs = KV::kConsumerRegs;
    static constexpr bool kKRegs = KV::kKRegs, kVRegs = KV::kVRegs;
    static constexpr int kParts = KV::kParts;
    // dQᵀ's accumulator zeroed right before its product at HS 128, so its 32 registers are free while Sᵀ and dPᵀ
    // are live (at HS 64 it has 16 and is zeroed with them)
    static constexpr bool kDqZeroLate = kHS == 128;
    // the dK/dV kernel's, plus dSᵀ of both consumers (by tile parity) and the dQ pieces ([consumer][buffer]:
    // [dims / 32][kDqN queries][32 dims] fp32)
    struct Layout {
        hopper::Tile<bf16, kBk, kHS> k, v;
        struct {
            hopper::Tile<bf16, kBq, kHS> q, dO;
        } stage[kStages];
        hopper::Tile<bf16, kBq, kBk> ds[2];
        hopper::Tile<float, kDqN, 64> dq[kConsumers][kDqBuffers];
        float lse_d[kStages][2][kBq];
        struct {
            uint64_t kv_full;
            hopper::RingBarriers<kStages> ring;
            hopper::RingBarriers<kDqBuffers> dq[kConsumers];  // a consumer's 4 warps fill, the writer empties
        } barriers;
    };
    static constexpr int kSmemBytes = hopper::smem_bytes<Layout>();
    static_assert(kSmemBytes <= hopper::kSmemLimit, "shared memory");
};

// How the dQ writer orders its additions into dQacc. A DqOrder names the key block a thread block takes (its launch
// order), and around each query tile's additions waits for the block's turn (returning true for the tile's first
// contributor, which stores instead of adding) and hands the turn on. It may keep one int per query tile in device
// memory (BackwardWorkspace::turns, B·NH·ceil(T/32) of them). UnorderedDq (-ab flash-nondet): reduce-adds
// as they come into a zeroed dQacc, blocks longest first; not bit-reproducible. A deterministic order, through
// semaphores, is dev/cuda/attention_hopper_backward_ordered.cuh.
struct UnorderedDq {
    __device__ __forceinline__ UnorderedDq(int* /*turns*/, int /*bh*/, int /*n_q*/) {}
    __device__ __forceinline__ static int key_block(int block, int /*n_blocks*/) { return block; }
    __device__ __forceinline__ bool wait_turn(int /*i*/, int /*kb*/, int /*kb_diag*/) { return false; }
    __device__ __forceinline__ void pass_turn(int /*i*/) {}
};

// named barriers of the fused kernel (0 is __syncthreads)
constexpr int kBarrierDs = 1;        // both consumers' dSᵀ written (256 threads)
constexpr int kBarrierEpilogue = 2;  // + consumer: that consumer's dK/dV tile staged (128 threads)

// The origin of consumer c's dQ piece in the fused kernel: at HS 64 each consumer's piece is 32 of the tile's queries
// over the whole head (q_off), at HS 128 all of them over 64 head dimensions (dq_sub: which 64).
template <int kHS>
__device__ __forceinline__ void dq_piece_origin(int c, int* dq_sub, int* q_off) {
    *dq_sub = kHS == 128 ? c : 0;
    *q_off = kHS == 64 ? 32 * c : 0;
}

// The dQ writer (one thread): for each query tile, once both consumers' pieces are in their buffer, completes the
// previous tile's additions (then hands the turn on and releases the buffers), waits for this tile's turn, and
// issues the additions. Handing on before waiting keeps the chain between blocks one tile long.
template <typename Cfg, int kHS, typename Layout, typename DqOrder>
__device__ __forceinline__ void write_dq_pieces(Layout& L, DqOrder& order, const CUtensorMap* map_dqacc, int kb,
                                                int i_first, int n_q, int T, int h, int b) {
    using namespace hopper;
    static_assert(Cfg::kConsumers == 2, "one ring of pieces per consumer");
    Ring<Cfg::kDqBuffers> pieces[Cfg::kConsumers] = {Ring<Cfg::kDqBuffers>(L.barriers.dq[0]),
                                                     Ring<Cfg::kDqBuffers>(L.barriers.dq[1])};
    int prev = 0;  // the buffer of the previous tile's pieces
    for (int i = i_first; i < n_q; i++) {
        for (int c = 0; c < Cfg::kConsumers; c++) pieces[c].wait_full();
        if (i > i_first) {
            tma_store_wait<0>();
            order.pass_turn(i - 1);
            for (int c = 0; c < Cfg::kConsumers; c++) pieces[c].release(prev);
        }
        const int kb_diag = (min(T, (i + 1) * Cfg::kBq) - 1) / Cfg::kBk;  // the tile's first contributor
        const bool first = order.wait_turn(i, kb, kb_diag);
        for (int c = 0; c < Cfg::kConsumers; c++) {
            const auto& piece = L.dq[c][pieces[c].stage()];
            int dq_sub, q_off;
            dq_piece_origin<kHS>(c, &dq_sub, &q_off);
            const int col = h * kHS + 64 * dq_sub, row = i * Cfg::kBq + q_off;
            for (int box = 0; box < 2; box++) {
                if (first) tma_store_3d(map_dqacc, piece.box(box), col + 32 * box, row, b);
                else tma_reduce_add_3d(map_dqacc, piece.box(box), col + 32 * box, row, b);
            }
        }
        tma_store_commit();
        prev = pieces[0].stage();
        for (int c = 0; c < Cfg::kConsumers; c++) pieces[c].advance();
    }
    if (n_q > i_first) {
        tma_store_wait<0>();
        order.pass_turn(n_q - 1);
    }
}

template <int kHS, typename DqOrder>
__global__ void __launch_bounds__(BackwardFusedConfig<kHS>::kThreads, 1)
    backward_fused_kernel(const __grid_constant__ CUtensorMap map_kv, const __grid_constant__ CUtensorMap map_q,
                          const __grid_constant__ CUtensorMap map_dout, const __grid_constant__ CUtensorMap map_dqkv,
                          const __grid_constant__ CUtensorMap map_dqacc, const __grid_constant__ CUtensorMap map_lse_d,
                          int* __restrict__ turns, int T, int NH) {
    using Cfg = BackwardFusedConfig<kHS>;
    using namespace hopper;
    extern __shared__ uint8_t smem_raw[];
    auto& L = smem_layout<typename Cfg::Layout>(smem_raw);
    auto &sK = L.k, &sV = L.v;

    const int C = NH * kHS;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int kb = DqOrder::key_block(blockIdx.x, gridDim.x);
    const int k0 = kb * Cfg::kBk;
    const int i_first = k0 / Cfg::kBq, n_q = (T + Cfg::kBq - 1) / Cfg::kBq;

    Ring<Cfg::kStages> ring(L.barriers.ring);
    warp_specialized<Cfg::kProducerRegs, Cfg::kConsumerRegs>(
        [&] {
            prefetch_tensor_maps(&map_kv, &map_q, &map_dout, &map_dqkv, &map_dqacc, &map_lse_d);
            mbarrier_init(&L.barriers.kv_full, 1);
            L.barriers.ring.init(1, Cfg::kConsumers * 4);
            for (int c = 0; c < Cfg::kConsumers; c++) L.barriers.dq[c].init(4, 1);  // lane 0 of each consumer warp
        },
        [&] {  // ---- the producer (as in the dK/dV kernel) and the dQ writer (warp 1)
            if (threadIdx.x == 0) {
                produce_k_v_then_q_do(L, ring, &map_kv, &map_q, &map_dout, &map_lse_d, C, h, k0, b, bh, i_first, n_q);
            } else if (threadIdx.x == 32) {
                DqOrder order(turns, bh, n_q);
                write_dq_pieces<Cfg, kHS>(L, order, &map_dqacc, kb, i_first, n_q, T, h, b);
            }
        },
        [&](int consumer) {  // ---- consumers: keys kc0 .. kc0 + 63, rows kv_row.. of sK and sV
            const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
            const int row_in = warp * 16 + lane / 4;
            const int kv_row = consumer * 64, kc0 = k0 + kv_row;
            const float scale = rsqrtf((float)kHS), scale_log2 = scale * kLog2e;
            int dq_sub, q_off;  // where this consumer's dQ piece sits in the tile
            dq_piece_origin<kHS>(consumer, &dq_sub, &q_off);
            Ring<Cfg::kDqBuffers> pieces(L.barriers.dq[consumer]);  // this consumer's dQ pieces, to the writer

            float dv[kHS / 2], dk[kHS / 2];
            uint32_t k_frag[Cfg::kKRegs ? kHS / 16 : 1][4], v_frag[Cfg::kVRegs ? kHS / 16 : 1][4];
            start_dk_dv<Cfg>(L, kv_row, row_in, lane, dk, dv, k_frag, v_frag);
            constexpr int kParts = Cfg::kParts, kPq = Cfg::kBq / kParts;
            for (int i = i_first, n = 0; i < n_q; i++, n++, ring.advance(), pieces.advance()) {
                ring.wait_full();
                const auto& stage = L.stage[ring.stage()];
                const auto &sQ = stage.q, &sdO = stage.dO;
                auto& sdS = L.ds[n % 2];

                // zeroed where no product is in flight (see the dK/dV kernel; dQᵀ's too, here or before its product)
                // dQᵀ: 64 head dims x kDqN queries
                Accumulator<kPq> st[kParts], dpt[kParts];
                Accumulator<Cfg::kDqN> dqt;
#pragma unroll
                for (int part = 0; part < kParts; part++)
#pragma unroll
                    for (int x = 0; x < kPq / 2; x++) st[part].d[x] = 0.f, dpt[part].d[x] = 0.f;
                if constexpr (!Cfg::kDqZeroLate) dqt.zero();
                issue_st_dpt<Cfg, kParts, kPq>(st, dpt, k_frag, v_frag, sK, sV, kv_row, sQ, sdO);

#pragma unroll
                for (int part = 0; part < kParts; part++) {
                    part_p_and_ds<Cfg::kBq, kPq, kParts>(st[part], dpt[part], L.lse_d[ring.stage()], part,
                                                         i * Cfg::kBq, kc0, row_in, lane, scale_log2);
                    // dSᵀ also goes to shared memory as bf16 [query][key] for dQ (this consumer's 64 keys: box
                    // `consumer`)
                    dpt[part].for_each([&](float ds, int r, int j, int e) {
                        const int q_local = part * kPq + 8 * j + 2 * (lane % 4) + e, key_local = row_in + 8 * r;
                        *reinterpret_cast<bf16*>(sdS.box(consumer) + q_local * 128 +
                                                 sw128_chunk_offset(q_local, key_local / 8) + (key_local % 8) * 2) =
                            __float2bfloat16_rn(ds);
                    });
                    issue_dv_dk<kPq, kHS>(dv, dk, st[part], dpt[part], sdO, sQ, part);
                }
                fence_proxy_async();
                named_barrier_sync(kBarrierDs, 256);  // the dQ product reads both consumers' dSᵀ

                if constexpr (Cfg::kDqZeroLate) dqt.zero();
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < Cfg::kBk / 16; kk++)  // over the block's 128 keys
                    wgmma_ss<0, 1>(dqt.d, mn_major_descriptor(sK, kk, dq_sub),
                                   descriptor_plus(smem_descriptor_sw128(sdS.bytes),
                                                   (kk / 4) * sdS.kBoxBytes + q_off * 128 + (kk % 4) * 32),
                                   kk > 0 ? 1 : 0);
                wgmma_commit();
                wgmma_wait<0>();
                dqt.fence();
                if (lane == 0) ring.release();

                // dQᵀ element (head dim d, query q) -> fp32 piece [d / 32][q][32], 128-byte swizzle (conflict-free), in
                // the buffer the writer has finished with
                auto& piece = L.dq[consumer][pieces.stage()];
                pieces.wait_empty();
                dqt.for_each([&](float v, int r, int j, int e) {
                    const int q = 8 * j + 2 * (lane % 4) + e, d = row_in + 8 * r;
                    *reinterpret_cast<float*>(piece.box(d / 32) + q * 128 + sw128_chunk_offset(q, (d % 32) / 4) +
                                              (d % 4) * 4) = v;
                });
                fence_proxy_async();
                __syncwarp();
                if (lane == 0) pieces.arrive_full();
            }

            // ---- epilogue as in the dK/dV kernel, once the other consumer's last dQ product has read sK
            named_barrier_sync(kBarrierDs, 256);
            fence_accumulator(dk);
            fence_accumulator(dv);
            stage_tile(sK, kv_row, dk, scale, row_in, lane);
            stage_tile(sV, kv_row, dv, 1.f, row_in, lane);
            fence_proxy_async();
            named_barrier_sync(kBarrierEpilogue + consumer, 128);
            if (t == 0) {
                for (int sub = 0; sub < sK.kBoxes; sub++) {
                    tma_store_3d(&map_dqkv, sK.row(kv_row) + sub * sK.kBoxBytes, C + h * kHS + 64 * sub, kc0, b);
                    tma_store_3d(&map_dqkv, sV.row(kv_row) + sub * sV.kBoxBytes, 2 * C + h * kHS + 64 * sub, kc0, b);
                }
                tma_store_commit();
                tma_store_wait<0>();
            }
        });
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

}  // namespace flash_hopper
