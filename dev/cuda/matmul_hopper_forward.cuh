// The forward matrix multiply on Hopper: out (M x N) = inp (M x K) · weightᵀ (weight N x K, like nn.Linear)
// + bias, bf16 in and out, fp32 accumulation: matmul_forward variant 5 (cuBLASLt is the engine's forward). Its tile
// schedule is the engine's (llmc/hopper/gemm_schedule.cuh), shared with the GELU-backward GEMM.
//
// Warp-specialised and persistent (the FlashAttention-3 / CUTLASS "ping-pong-free" shape):
//   - one block per SM, looping over output tiles of BM x BN (BM = 128, BN 128/192/256 chosen per shape) in an
//     order that keeps a band of A rows and all of B's columns in L2;
//   - warpgroup 0 is the producer: one thread streams A (BM x 64) and B (BN x 64) boxes of each K step by TMA
//     through a ring of stages (llmc/hopper/pipeline.cuh); it gives its registers away (setmaxnreg);
//   - warpgroups 1 and 2 are consumers, 64 rows of the tile each: per stage four wgmma m64nBNk16 read A and B from
//     shared memory (128-byte swizzle, as TMA wrote them), one group of them is kept in flight while the stage
//     before is released; the epilogue adds the bias, writes bf16 into shared memory and leaves by TMA stores
//     (whole lines, asynchronous) while the producer already loads the next tile.
// Rules: K % 8 == 0 (TMA needs 16-byte row strides; every GPT-2 K is a multiple of 64), inp and weight 16-byte
// aligned; any M, N >= 1 (partial tiles: TMA fills zeros past the matrix, the epilogue stores only inside it).
#pragma once

#include <cuda_bf16.h>

#include <algorithm>

#include "llmc/hopper/accumulator.cuh"
#include "llmc/hopper/arch.cuh"
#include "llmc/hopper/gemm_schedule.cuh"
#include "llmc/hopper/pipeline.cuh"
#include "llmc/hopper/smem.cuh"
#include "llmc/hopper/tma.cuh"
#include "llmc/hopper/warp_specialized.cuh"
#include "llmc/hopper/wgmma.cuh"

namespace matmul_hopper {

using bf16 = __nv_bfloat16;

template <int kBN>
struct Config {
    static constexpr int BM = 128, BN = kBN, BK = 64;  // BK = 64 bf16 = one 128-byte swizzle row
    static constexpr int kConsumers = BM / 64;          // warpgroups, 64 rows each
    static constexpr int kThreads = 128 * (1 + kConsumers);
    static constexpr int kStageBytes = (BM + BN) * BK * 2, kOutBytes = 64 * BN * 2;
    static constexpr int kStages = std::min(6, (hopper::kSmemLimit - 2048 - kConsumers * kOutBytes) / kStageBytes);
    // per stage A and B (all stages of A first), then each consumer's output tile on its way out (64 x 64 boxes)
    struct Layout {
        hopper::Tile<bf16, BM, BK> a[kStages];
        hopper::Tile<bf16, BN, BK> b[kStages];
        hopper::Tile<bf16, 64, BN> out[kConsumers];
        struct {
            hopper::RingBarriers<kStages> ring;
        } barriers;
    };
    static constexpr int kSmemBytes = hopper::smem_bytes<Layout>();
    static constexpr int kAccum = BN / 2;  // fp32 accumulators per consumer thread (m64nBN / 128 threads)
    static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
    static_assert(hopper::setmaxnreg_fits(kConsumers, kProducerRegs, kConsumerRegs), "setmaxnreg");
};

// kTmaStore: the output leaves through shared memory and TMA stores (whole 128-byte lines, asynchronous; needs
// N % 8 == 0 and a 16-byte aligned out); else each thread stores its accumulator pairs directly.
template <int kBN, bool kTmaStore>
__global__ void __launch_bounds__(Config<kBN>::kThreads, 1)
    forward_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_out, bf16* __restrict__ out, const bf16* __restrict__ bias,
                   int M, int N, int K) {
    using Cfg = Config<kBN>;
    using namespace hopper;
    extern __shared__ uint8_t smem_raw[];
    auto& L = smem_layout<typename Cfg::Layout>(smem_raw);

    const int tiles_m = (M + Cfg::BM - 1) / Cfg::BM, tiles_n = (N + kBN - 1) / kBN;
    const int num_tiles = tiles_m * tiles_n, k_steps = (K + Cfg::BK - 1) / Cfg::BK;

    Ring<Cfg::kStages> ring(L.barriers.ring);
    warp_specialized<Cfg::kProducerRegs, Cfg::kConsumerRegs>(
        [&] {
            prefetch_tensor_maps(&map_a, &map_b);
            if (kTmaStore) tma_prefetch_map(&map_out);
            L.barriers.ring.init(1, Cfg::kConsumers * 4);
        },
        [&] {  // ---- producer
            if (threadIdx.x == 0) {
                for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
                    int tm, tn;
                    tile_coords(tile, tiles_m, tiles_n, &tm, &tn);
                    for (int k = 0; k < k_steps; k++, ring.advance()) {
                        uint64_t* full = ring.acquire(Cfg::kStageBytes);
                        tma_load_2d(L.a[ring.stage()].bytes, &map_a, full, k * Cfg::BK, tm * Cfg::BM);
                        tma_load_2d(L.b[ring.stage()].bytes, &map_b, full, k * Cfg::BK, tn * kBN);
                    }
                }
            }
        },
        [&](int consumer) {  // ---- consumers
            // rows 64·consumer .. of the tile
            const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
            const bool warp_leader = lane == 0;
            Accumulator<kBN> acc;  // m64 x BN, Cfg::kAccum registers
            for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
                int tm, tn;
                tile_coords(tile, tiles_m, tiles_n, &tm, &tn);
                int previous = -1;
                for (int k = 0; k < k_steps; k++) {
                    ring.wait_full();
                    const uint8_t* a = L.a[ring.stage()].row(64 * consumer);
                    const uint8_t* b = L.b[ring.stage()].bytes;
                    wgmma_fence();
                    // 32 bytes along K per k16 step, inside the swizzle row
#pragma unroll
                    for (int kk = 0; kk < Cfg::BK / 16; kk++) {
                        wgmma_ss<0>(acc.d, smem_descriptor_sw128(a + 32 * kk), smem_descriptor_sw128(b + 32 * kk),
                                    (k > 0 || kk > 0) ? 1 : 0);
                    }
                    wgmma_commit();
                    wgmma_wait<1>();  // the products of the stage before are done: release it
                    if (previous >= 0 && warp_leader) ring.release(previous);
                    previous = ring.stage();
                    ring.advance();
                }
                wgmma_wait<0>();
                acc.fence();
                if (warp_leader) ring.release(previous);

                // epilogue: + bias, bf16 (bias loads first, all in flight together, then the adds)
                const int row_in = warp * 16 + lane / 4;  // this thread's first row in the consumer's 64
                const int col_in = 2 * (lane % 4);        // and first column in each 8-column block
                if (bias) {
#pragma unroll
                    for (int j = 0; j < kBN / 8; j++) {
                        const int col = tn * kBN + 8 * j + col_in;
                        const float b0 = col < N ? __bfloat162float(__ldg(bias + col)) : 0.f;
                        const float b1 = col + 1 < N ? __bfloat162float(__ldg(bias + col + 1)) : 0.f;
                        acc.at(0, j, 0) += b0, acc.at(0, j, 1) += b1, acc.at(1, j, 0) += b0, acc.at(1, j, 1) += b1;
                    }
                }
                if constexpr (kTmaStore) {
                    // into this consumer's output tile as TMA reads it (64 x 64 boxes, 128-byte swizzle: 16-byte chunk
                    // c of row r sits at chunk c ^ (r % 8)); the 8 rows of a store land in 8 different chunks, so no
                    // bank conflicts
                    auto& tile_out = L.out[consumer];
                    const int barrier_id = 1 + consumer, leader = t == 0;
                    if (leader) tma_store_wait_read<0>();  // the previous tile's stores have read the buffer
                    named_barrier_sync(barrier_id, 128);
#pragma unroll
                    for (int j = 0; j < kBN / 8; j++) {
                        uint8_t* box = tile_out.box(j / 8);
                        const int chunk = j % 8;
#pragma unroll
                        for (int half = 0; half < 2; half++) {
                            const int r = row_in + 8 * half;
                            const __nv_bfloat162 v =
                                __floats2bfloat162_rn(acc.at(half, j, 0), acc.at(half, j, 1));
                            uint8_t* at = box + r * 128 + sw128_chunk_offset(r, chunk) + col_in * 2;
                            *reinterpret_cast<__nv_bfloat162*>(at) = v;
                        }
                    }
                    fence_proxy_async();  // st.shared above, read by TMA next
                    named_barrier_sync(barrier_id, 128);
                    if (leader) {
#pragma unroll
                        for (int b = 0; b < kBN / 64; b++) {
                            tma_store_2d(&map_out, tile_out.box(b), tn * kBN + 64 * b, tm * Cfg::BM + consumer * 64);
                        }
                        tma_store_commit();
                    }
                } else {
                    const int row0 = tm * Cfg::BM + consumer * 64 + row_in;
                    const bool pairs = (N % 2) == 0;  // bf16x2 stores stay 4-byte aligned
#pragma unroll
                    for (int j = 0; j < kBN / 8; j++) {
                        const int col = tn * kBN + 8 * j + col_in;
                        if (col >= N) break;
#pragma unroll
                        for (int half = 0; half < 2; half++) {
                            const int row = row0 + 8 * half;
                            if (row >= M) continue;
                            const float v0 = acc.at(half, j, 0), v1 = acc.at(half, j, 1);
                            bf16* dst = out + (size_t)row * N + col;
                            if (pairs) {
                                *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(v0, v1);
                            } else {
                                dst[0] = __float2bfloat16(v0);
                                if (col + 1 < N) dst[1] = __float2bfloat16(v1);
                            }
                        }
                    }
                }
            }
            if (kTmaStore && t == 0) tma_store_wait<0>();  // the block's last stores are done before it exits
        });
}

// Work per SM for a tile width: the most tiles any SM runs x the tile's columns (a persistent grid), with a
// small premium for narrow tiles (more shared-memory traffic per FLOP). The smallest wins.
inline int choose_bn(int M, int N, int num_sms) {
    const int widths[3] = {256, 192, 128};
    const double premium[3] = {1.0, 1.03, 1.08};
    int best = 256;
    double best_cost = 1e300;
    for (int i = 0; i < 3; i++) {
        const long long tiles = (long long)((M + 127) / 128) * ((N + widths[i] - 1) / widths[i]);
        const double cost = (double)((tiles + num_sms - 1) / num_sms) * widths[i] * premium[i];
        if (cost < best_cost) { best_cost = cost; best = widths[i]; }
    }
    return best;
}

template <int kBN, bool kTmaStore>
inline void launch(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int M, int N, int K,
                   int num_sms, cudaStream_t stream) {
    using Cfg = Config<kBN>;
    static const bool smem_ready = (hopper::allow_dynamic_smem(forward_kernel<kBN, kTmaStore>, Cfg::kSmemBytes), true);
    (void)smem_ready;
    const CUtensorMap map_a = hopper::make_tensor_map_2d(inp, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, M, K, K, Cfg::BM,
                                                         Cfg::BK, CU_TENSOR_MAP_SWIZZLE_128B);
    const CUtensorMap map_b = hopper::make_tensor_map_2d(weight, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, N, K, K, kBN,
                                                         Cfg::BK, CU_TENSOR_MAP_SWIZZLE_128B);
    CUtensorMap map_out = {};
    if (kTmaStore) {
        map_out = hopper::make_store_map_2d(out, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, M, N, N, 64, 64,
                                            CU_TENSOR_MAP_SWIZZLE_128B, stream);
    }
    const int tiles = ((M + Cfg::BM - 1) / Cfg::BM) * ((N + kBN - 1) / kBN);
    forward_kernel<kBN, kTmaStore><<<std::min(tiles, num_sms), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(
        map_a, map_b, map_out, out, bias, M, N, K);
    cudaCheckLaunch();
}

template <int kBN>
inline void launch(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int M, int N, int K,
                   int num_sms, cudaStream_t stream) {
    const bool tma_store = N % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
    if (tma_store) launch<kBN, true>(out, inp, weight, bias, M, N, K, num_sms, stream);
    else launch<kBN, false>(out, inp, weight, bias, M, N, K, num_sms, stream);
}

}  // namespace matmul_hopper

// out (M x N) = inp (M x K) · weightᵀ + bias (N entries, or null). bn: the tile width (128, 192 or 256; 0 = chosen
// from the shape).
inline void matmul_forward_hopper(__nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                  const __nv_bfloat16* bias, int M, int N, int K, cudaStream_t stream = 0, int bn = 0) {
    if (M < 1 || N < 1 || K < 8 || K % 8 != 0) {
        fprintf(stderr, "error: matmul_forward_hopper: M %d, N %d, K %d: needs M, N >= 1 and K a multiple of 8\n", M, N,
                K);
        exit(EXIT_FAILURE);
    }
    if ((reinterpret_cast<uintptr_t>(inp) | reinterpret_cast<uintptr_t>(weight)) % 16 != 0) {
        fprintf(stderr, "error: matmul_forward_hopper: inp and weight must be 16-byte aligned\n");
        exit(EXIT_FAILURE);
    }
    const int sms = matmul_hopper::num_sms();
    if (bn == 0) bn = matmul_hopper::choose_bn(M, N, sms);
    switch (bn) {
        case 256: matmul_hopper::launch<256>(out, inp, weight, bias, M, N, K, sms, stream); break;
        case 192: matmul_hopper::launch<192>(out, inp, weight, bias, M, N, K, sms, stream); break;
        case 128: matmul_hopper::launch<128>(out, inp, weight, bias, M, N, K, sms, stream); break;
        default:
            fprintf(stderr, "error: matmul_forward_hopper: tile width %d (128, 192 or 256)\n", bn);
            exit(EXIT_FAILURE);
    }
}
