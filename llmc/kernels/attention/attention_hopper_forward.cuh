// Causal attention forward on Hopper (FlashAttention-3's machinery: Shah et al. 2024, sections 3.1-3.2). Layouts
// as the mma.sync backend: qkv (B, T, 3, NH, HS) bf16 in; out (B, T, NH·HS) bf16 and lse (B, NH, T) fp32 (natural
// log) out; scale 1/sqrt(HS). HS 64 or 128, any T.
//
// One block per (query block of Br = 128 rows, b, h), the longest query blocks first, three warpgroups:
//   - the producer (warpgroup 0, registers given away with setmaxnreg) loads the block's Q once, then streams the
//     K and V tiles of Bc = 128 keys up to the diagonal by TMA through a ring of stages (pipeline.cuh);
//   - two consumers (64 query rows each) compute S = Q·Kᵀ with wgmma from shared memory, the online softmax on the
//     accumulators (exp2, the scale folded in, the causal mask only on tiles that reach past the diagonal), pack P
//     to bf16 in registers — S's accumulator layout is the register-A layout of the next product — and
//     O += P·V with wgmma (A from registers, V used as stored: MN-major);
//   - epilogue: O / l into this consumer's rows of sQ and out by TMA stores, which drop rows past T; LSE per row.
// The 3D tensor maps zero-fill rows past T, so partial tiles need no special loads; keys past T sit above the
// diagonal of every real query row and are masked with it.
// Overlap (FlashAttention-3's intra-warpgroup pipelining): each consumer issues S of tile j with P·V of tile j − 1
// behind it and runs tile j's softmax while that product is on the tensor cores; the two consumers are not otherwise
// synchronised (an explicit ping-pong on named barriers measured slower, docs/PERFORMANCE.md).
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "llmc/kernels/attention/attention_hopper_common.cuh"
#include "llmc/kernels/fp8/amax.cuh"

namespace flash_hopper {

template <int kHS>
struct ForwardConfig {
    static constexpr int HS = kHS;
    static constexpr int kBr = 128, kBc = 128;  // query rows per block (64 per consumer), keys per tile
    static constexpr int kConsumers = 2, kThreads = 128 * (1 + kConsumers);
    static constexpr int kStages = HS == 64 ? 4 : 3;
    static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
    // Q once (in the epilogue each consumer's rows of it stage that consumer's O), K and V per stage
    struct Layout {
        hopper::Tile<bf16, kBr, HS> q;
        struct {
            hopper::Tile<bf16, kBc, HS> k, v;
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

// The online softmax of one S tile (64 x kBc) in place, in the log2 domain: S becomes P = exp2(S·scale_log2 − m_new),
// m and l (this thread's part of each row's sum) are updated, and alpha receives exp2(m_old − m_new) for the O rows.
// kMask: keys past the diagonal (column + delta > row; delta = the tile's first key − first query, or kNoMask) are
// −inf first.
template <int kBc, bool kMask>
__device__ __forceinline__ void online_softmax(hopper::Accumulator<kBc>& s, float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], float scale_log2, const hopper::AccumulatorLane& at,
                                               int delta) {
    if (kMask) s.mask_above_diagonal(delta, at);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        // finite: every real row sees key 0 in its first tile
        const float m_new = fmaxf(m[r], s.row_max(r) * scale_log2);
        alpha[r] = exp2f(m[r] - m_new);
        m[r] = m_new;
        l[r] = l[r] * alpha[r] + s.exp2_row(r, scale_log2, m_new);
    }
}

// Issues O += P·V (A from registers, V used as stored: MN-major) as one wgmma group. The caller fences first (the
// register writes of P and of the rescaled O before the products read them).
template <int kBc, int kHS>
__device__ __forceinline__ void issue_pv(hopper::Accumulator<kHS>& o, const uint32_t (&p)[kBc / 16][4],
                                         const hopper::Tile<bf16, kBc, kHS>& sV) {
#pragma unroll
    for (int kk = 0; kk < kBc / 16; kk++) hopper::wgmma_rs<1>(o.d, p[kk], hopper::mn_major_descriptor(sV, kk), 1);
    hopper::wgmma_commit();
}

template <int kHS>
__global__ void __launch_bounds__(ForwardConfig<kHS>::kThreads, 1)
    forward_kernel(const __grid_constant__ CUtensorMap map_qkv, const __grid_constant__ CUtensorMap map_out,
                   float* __restrict__ lse, int T, int NH, float* out_amax) {
    using Cfg = ForwardConfig<kHS>;
    using namespace hopper;
    extern __shared__ uint8_t smem_raw[];
    auto& L = smem_layout<typename Cfg::Layout>(smem_raw);
    auto& sQ = L.q;
    auto& bar = L.barriers;

    const int C = NH * kHS;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int q_block = gridDim.x - 1 - blockIdx.x;  // longest first: the grid's tail is short blocks
    const int q0 = q_block * Cfg::kBr;
    const int n_tiles = (min(T, q0 + Cfg::kBr) + Cfg::kBc - 1) / Cfg::kBc;  // key tiles up to the diagonal
    Ring<Cfg::kStages> ring(bar.ring);

    warp_specialized<Cfg::kProducerRegs, Cfg::kConsumerRegs>(
        [&] {
            prefetch_tensor_maps(&map_qkv, &map_out);
            mbarrier_init(&bar.q_full, 1);
            bar.ring.init(1, Cfg::kConsumers * 4);
        },
        [&] {  // ---- producer (thread 0): Q once, then K and V of every tile up to the diagonal
            if (threadIdx.x != 0) return;
            mbarrier_arrive_expect_tx(&bar.q_full, sizeof(sQ));
            for (int sub = 0; sub < sQ.kBoxes; sub++)
                tma_load_3d(sQ.box(sub), &map_qkv, &bar.q_full, h * kHS + 64 * sub, q0, b);
            produce_k_v_tiles(L.kv, ring, &map_qkv, C, h, b, n_tiles);
        },
        [&](int consumer) {  // ---- consumers: query rows q_first .. q_first + 63, rows 64·consumer.. of sQ
            const int t = threadIdx.x % 128;
            const AccumulatorLane at(t);
            const int q_row = consumer * 64;     // the consumer's first row in sQ
            const int q_first = q0 + q_row;      // and its query
            const float scale_log2 = rsqrtf((float)kHS) * kLog2e;
            Accumulator<Cfg::kBc> s;            // S (64 x Bc)
            Accumulator<kHS> o;                 // O (64 x HS)
            uint32_t p_frag[Cfg::kBc / 16][4];  // P of the previous tile, bf16, the A operand of O += P·V
            o.zero();
            float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // this thread's rows (l: its part of the sum)
            float alpha[2];

            // Tile 0 alone: S, softmax, P. Masked only when it is also the last (diagonal) tile; branch-free.
            const KMajorRows<decltype(L.q)> q_rows(sQ, q_row);  // A of every S product
            mbarrier_wait(&bar.q_full, 0);
            ring.wait_full();
            wgmma_fence();
            wgmma_ss_over_head_dim(s.d, q_rows, L.kv[0].k, 0);
            wgmma_commit();
            wgmma_wait<0>();
            s.fence();
            online_softmax<Cfg::kBc, true>(s, m, l, alpha, scale_log2, at, n_tiles == 1 ? -q_first : kNoMask);
            s.to_a_fragments(p_frag);  // P, straight from S's accumulators

            // Tiles 1..n-1: S_j is issued with P_{j-1}·V_{j-1} behind it, and tile j's softmax runs while that
            // second product is still on the tensor cores (the intra-warpgroup overlap). Only the last tile reaches
            // the diagonal (query blocks and key tiles are both 128 wide), so the loop has no mask at all and the
            // last tile runs after it.
            static_assert(Cfg::kStages >= 2, "tile 1 is in the ring's second stage");
            int prev = ring.stage();  // the stage of tile j - 1, released once P_{j-1}·V_{j-1} is done
            ring.advance();
            auto next_tile = [&](auto masked, int j) {
                ring.wait_full();
                wgmma_fence();
                wgmma_ss_over_head_dim(s.d, q_rows, L.kv[ring.stage()].k, 0);
                wgmma_commit();
                issue_pv(o, p_frag, L.kv[prev].v);
                wgmma_wait<1>();  // S_j done; P_{j-1}·V_{j-1} may still run
                s.fence();
                online_softmax<Cfg::kBc, decltype(masked)::value>(s, m, l, alpha, scale_log2, at,
                                                                  j * Cfg::kBc - q_first);
                wgmma_wait<0>();
                o.fence();
                fence_fragments(p_frag);
                if (at.lane == 0) ring.release(prev);
                o.scale_rows(alpha);
                s.to_a_fragments(p_frag);  // P, straight from S's accumulators
                prev = ring.stage();
                ring.advance();
            };
            for (int j = 1; j < n_tiles - 1; j++) next_tile(std::false_type{}, j);
            if (n_tiles > 1) next_tile(std::true_type{}, n_tiles - 1);
            wgmma_fence();
            issue_pv(o, p_frag, L.kv[prev].v);
            wgmma_wait<0>();
            fence_fragments(p_frag);
            if (at.lane == 0) ring.release(prev);

            o.fence();
            // ---- epilogue: O / l -> bf16 -> this consumer's rows of sQ (its own, read only by its wgmmas, all done)
            l[0] = quad_sum(l[0]), l[1] = quad_sum(l[1]);
            const float inv[2] = {1.f / l[0], 1.f / l[1]};
            o.store(sQ, q_row, inv, at);
            if (out_amax) {  // max |O| as stored (bf16), rows past T left out: an FP8 cast's scale
                unsigned int mx = 0;
                o.for_each([&](float v, int r, int, int) {
                    const float stored = __bfloat162float(__float2bfloat16_rn(v * inv[r]));
                    if (q_first + at.row(r) < T) mx = max(mx, amax_bits(stored));
                });
                fold_warp_amax(mx, out_amax);
            }
            fence_proxy_async();
            named_barrier_sync(1 + consumer, 128);
            if (t == 0) {
                for (int sub = 0; sub < sQ.kBoxes; sub++)
                    tma_store_3d(&map_out, sQ.row(q_row) + sub * sQ.kBoxBytes, h * kHS + 64 * sub, q_first, b);
                tma_store_commit();
            }
            if (at.lane % 4 == 0) {
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int query = q_first + at.row(r);
                    if (query < T) lse[((size_t)b * NH + h) * T + query] = (m[r] + log2f(l[r])) * kLn2;
                }
            }
            if (t == 0) tma_store_wait<0>();
        });
}

template <int kHS>
inline void launch_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, cudaStream_t stream,
                           float* out_amax) {
    using Cfg = ForwardConfig<kHS>;
    static const bool smem_ready = (hopper::allow_dynamic_smem(forward_kernel<kHS>, Cfg::kSmemBytes), true);
    (void)smem_ready;
    const int C = NH * kHS;
    const CUtensorMap map_qkv = head_slice_map(qkv, B, T, 3 * C, Cfg::kBr);  // Q, K, V boxes of 128 rows
    const CUtensorMap map_out = head_slice_store_map(out, B, T, C, 64, stream);  // a consumer's O
    dim3 grid((T + Cfg::kBr - 1) / Cfg::kBr, B * NH);
    forward_kernel<kHS><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(map_qkv, map_out, lse, T, NH, out_amax);
    cudaCheckLaunch();
}

}  // namespace flash_hopper

// The Hopper forward (sm_90a builds on compute capability 9.0; see hopper_available()). HS 64 or 128. out_amax (null:
// none): max |out| folded in (llmc/kernels/fp8/amax.cuh), for an FP8 cast of out.
inline cudaError_t attention_hopper_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                                            int NH, int HS, cudaStream_t stream = 0, float* out_amax = nullptr) {
    if (HS == 64) flash_hopper::launch_forward<64>(out, lse, qkv, B, T, NH, stream, out_amax);
    else if (HS == 128) flash_hopper::launch_forward<128>(out, lse, qkv, B, T, NH, stream, out_amax);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}
