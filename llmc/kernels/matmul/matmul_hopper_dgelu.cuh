// The backward through fc's GELU on Hopper, one kernel where cuBLASLt takes two passes:
//   dinp (M x N) = alpha · (dout (M x K) · weight (K x N)) ∘ gelu'(pre_gelu)      (bf16 in and out, fp32 accumulation)
//   partials[p][j] = Σ of the stored (bf16) dinp[i][j] over the 64 rows i of partial row p   (fp32)
//   gelu_out = gelu(pre_gelu), if asked for: under recompute (-r 1) the input of fcproj's weight gradient
// In GPT-2 this is fcproj's input gradient: dout = d(fcproj output) (BT x C), weight = W_fcproj as stored (C x 4C,
// nn.Linear's out x in), pre_gelu = fc's output before the GELU, and the column sums of dinp are fc's bias gradient,
// finished by matmul_dgelu_bias_grad (a fixed-order sum of the partial rows: deterministic, no atomics). cuBLASLt's
// DGELU epilogue runs its GELU derivative after the main loop, with the tensor cores idle, and its bias gradient
// (BGRADB, in fc's weight-gradient GEMM) needs a reduction kernel of its own; with both folded in here, this kernel
// and fc's weight gradient beat cuBLASLt's pair at d12 and d48, so the engine uses it on every Hopper GPU
// (docs/PERFORMANCE.md).
//
// Warp-specialised (a TMA producer feeding a ring of stages, pipeline.cuh; wgmma from 128-byte-swizzled shared
// memory; setmaxnreg) on a persistent grid (gemm_schedule.cuh), ping-pong rather than cooperative: each consumer
// warpgroup owns whole 128 x 128 output tiles (two m64n128k16 per k16 step, 128 fp32 accumulators per thread) and the
// two take the block's tiles in turn, so one runs its epilogue while the other keeps the tensor cores busy. The main
// loops take strict turns (a named barrier pair): a consumer waiting on a stage a whole tile ahead would otherwise see
// that stage's earlier phase of the same parity completed, and read the other consumer's data.
// pre_gelu arrives by TMA into the consumer's output tile while the tile before it is finished; the epilogue turns it
// into dinp in place (gelu and gelu' from one hardware tanh), writes gelu(pre_gelu) if asked, sends the tile out by
// TMA and sums its columns with a wgmma of ones. That epilogue, more than the tensor cores, sets the pace: with one
// epilogue warp per scheduler nothing hides its latencies.
// weight is K x N with N contiguous: B is MN-major, read as 64-row x 64-column boxes (one 128-byte swizzle row per
// K row) and handed to wgmma transposed.
// Rules: K % 8 == 0 and N % 8 == 0 (TMA row strides of 16 bytes), every pointer 16-byte aligned; any M >= 1.
#pragma once

#include "llmc/hopper/accumulator.cuh"
#include "llmc/hopper/arch.cuh"
#include "llmc/hopper/gemm_schedule.cuh"
#include "llmc/hopper/pipeline.cuh"
#include "llmc/hopper/smem.cuh"
#include "llmc/hopper/tma.cuh"
#include "llmc/hopper/warp_specialized.cuh"
#include "llmc/hopper/wgmma.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/matmul/matmul.cuh"

namespace matmul_dgelu {

using bf16 = __nv_bfloat16;

struct Config {
    static constexpr int BM = 128, BN = 128, BK = 64;
    static constexpr int kConsumers = 2, kThreads = 128 * (1 + kConsumers);
    // 4 stages, although 5 fit (measured: docs/PERFORMANCE.md, "A Hopper GEMM for the GELU backward")
    static constexpr int kStages = 4;
    // per stage A (BM x BK) and B (BK x BN, as BN/64 boxes of 64 K rows x 64 columns); each consumer's output tile:
    // pre_gelu lands in it, becomes dinp and leaves from it (two 128-row x 64-column boxes)
    struct Layout {
        hopper::Tile<bf16, BM, BK> a[kStages];
        hopper::Tile<bf16, BK, BN> b[kStages];
        hopper::Tile<bf16, BM, BN> tile[kConsumers];
        struct {
            hopper::RingBarriers<kStages> ring;
            uint64_t pre_full[kConsumers];  // per consumer: its pre_gelu tile has landed
        } barriers;
    };
    static constexpr int kStageBytes = (BM + BN) * BK * 2;
    static constexpr int kSmemBytes = hopper::smem_bytes<Layout>();
    static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
    static_assert(hopper::setmaxnreg_fits(kConsumers, kProducerRegs, kConsumerRegs), "setmaxnreg");
    static_assert(kSmemBytes <= hopper::kSmemLimit, "shared memory");
};

// Partial rows of 64 (each consumer tile's two row halves), and the scratch floats they take.
inline int partial_rows(int M) { return 2 * ((M + Config::BM - 1) / Config::BM); }

__global__ void __launch_bounds__(Config::kThreads, 1)
    dgelu_kernel(const __grid_constant__ CUtensorMap map_dout, const __grid_constant__ CUtensorMap map_weight,
                 const __grid_constant__ CUtensorMap map_pre, const __grid_constant__ CUtensorMap map_dinp,
                 float* __restrict__ partials, bf16* __restrict__ gelu_out, float alpha, int M, int N, int K) {
    using Cfg = Config;
    using namespace hopper;
    extern __shared__ uint8_t smem_raw[];
    auto& L = smem_layout<Cfg::Layout>(smem_raw);
    uint64_t* pre_full = L.barriers.pre_full;

    const int tiles_m = (M + Cfg::BM - 1) / Cfg::BM, tiles_n = (N + Cfg::BN - 1) / Cfg::BN;
    const int num_tiles = tiles_m * tiles_n, k_steps = (K + Cfg::BK - 1) / Cfg::BK;
    Ring<Cfg::kStages> ring(L.barriers.ring);

    warp_specialized<Cfg::kProducerRegs, Cfg::kConsumerRegs>(
        [&] {
            prefetch_tensor_maps(&map_dout, &map_weight, &map_pre, &map_dinp);
            for (int c = 0; c < Cfg::kConsumers; c++) mbarrier_init(&pre_full[c], 1);
            L.barriers.ring.init(1, 4);  // a stage is released by the 4 warps of one consumer
        },
        [&] {  // ---- producer (thread 0): every tile's k-steps in the block's tile order
            if (threadIdx.x != 0) return;
            for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
                int tm, tn;
                matmul_hopper::tile_coords(tile, tiles_m, tiles_n, &tm, &tn);
                for (int k = 0; k < k_steps; k++, ring.advance()) {
                    uint64_t* full = ring.acquire(Cfg::kStageBytes);
                    tma_load_2d(L.a[ring.stage()].bytes, &map_dout, full, k * Cfg::BK, tm * Cfg::BM);
                    auto& b = L.b[ring.stage()];
#pragma unroll
                    for (int box = 0; box < b.kBoxes; box++)
                        tma_load_2d(b.box(box), &map_weight, full, tn * Cfg::BN + 64 * box, k * Cfg::BK);
                }
            }
        },
        // ---- consumers: tiles 0, 2, 4, ... of the block go to consumer 0, 1, 3, 5, ... to consumer 1
        [&](int consumer) {
            const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
            const bool warp_leader = lane == 0;
            const int barrier_id = 1 + consumer;  // this consumer's 128 threads
            // named barriers 3 + c: consumer c may start its main loop (the other has waited on every stage before it)
            const int my_turn = 3 + consumer, their_turn = 3 + (1 - consumer);
            auto& tile_buf = L.tile[consumer];
            const int first_tile = blockIdx.x + consumer * gridDim.x, tile_stride = 2 * gridDim.x;
            // pre_gelu of a tile into the output tile (thread 0, once the last tile's stores have read the buffer)
            auto load_pre = [&](int tile) {
                int tm, tn;
                matmul_hopper::tile_coords(tile, tiles_m, tiles_n, &tm, &tn);
                tma_store_wait_read<0>();
                mbarrier_arrive_expect_tx(&pre_full[consumer], sizeof(tile_buf));
                tma_load_2d(tile_buf.box(0), &map_pre, &pre_full[consumer], tn * Cfg::BN, tm * Cfg::BM);
                tma_load_2d(tile_buf.box(1), &map_pre, &pre_full[consumer], tn * Cfg::BN + 64, tm * Cfg::BM);
            };
            if (t == 0 && first_tile < num_tiles) load_pre(first_tile);
            if (consumer == 1) ring.advance(k_steps);  // the block's first tile is consumer 0's
            uint32_t pre_phase = 0;
            Accumulator<128> acc[2];  // rows 0..63 and 64..127 of the tile (m64n128 each)
            for (int tile = first_tile; tile < num_tiles; tile += tile_stride) {
                int tm, tn;
                matmul_hopper::tile_coords(tile, tiles_m, tiles_n, &tm, &tn);
                if (tile != blockIdx.x) named_barrier_sync(my_turn, 256);  // all but the block's first tile
                int previous = -1;
                for (int k = 0; k < k_steps; k++) {
                    ring.wait_full();
                    const uint8_t* a = L.a[ring.stage()].bytes;
                    const uint8_t* b = L.b[ring.stage()].bytes;
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < Cfg::BK / 16; kk++) {
                        // B MN-major: 16 K rows of 128 bytes per k16 step; 64-column boxes the leading byte offset
                        // apart, 8-row groups 1024 bytes apart (stride byte offset)
                        const uint64_t desc_b = smem_descriptor_sw128(b + kk * 16 * 128, L.b[0].kBoxBytes, 1024);
#pragma unroll
                        for (int h = 0; h < 2; h++)
                            wgmma_ss<1>(acc[h].d, smem_descriptor_sw128(a + h * 64 * 128 + 32 * kk), desc_b,
                                        (k > 0 || kk > 0) ? 1 : 0);
                    }
                    wgmma_commit();
                    wgmma_wait<1>();  // the stage before is read: release it
                    if (previous >= 0 && warp_leader) ring.release(previous);
                    previous = ring.stage();
                    ring.advance();
                }
                // the block's next tile is theirs
                if (tile + gridDim.x < num_tiles) named_barrier_arrive(their_turn, 256);
                wgmma_wait<0>();
                acc[0].fence();
                acc[1].fence();
                if (warp_leader) ring.release(previous);
                ring.advance(k_steps);  // the other consumer's tile

                // epilogue: dinp = alpha · acc · gelu'(pre), in place of pre in the output tile (each thread reads and
                // writes its own bf16 pairs: 16-byte chunk c of row r sits at chunk c ^ (r % 8), no bank conflicts).
                // With gelu_out, gelu(pre) too, from the same tanh, stored from registers: the recompute fcproj's
                // weight gradient needs, without a pass of its own over pre_gelu (the quads of a warp fill 16-byte
                // pieces of 8 rows per store). Addresses are bases per thread plus constants (this thread's rows are
                // all ≡ lane / 4 mod 8, so its swizzle is fixed per chunk), and whole tiles skip the bounds tests.
                mbarrier_wait(&pre_full[consumer], pre_phase);
                pre_phase ^= 1;
                const int col_in = 2 * (lane % 4), quad = lane / 4;
                uint8_t* chunk_base[8];  // chunk c of this thread's first row, at column pair col_in
#pragma unroll
                for (int c = 0; c < 8; c++)
                    chunk_base[c] = tile_buf.bytes + (16 * warp + quad) * 128 + (c ^ quad) * 16 + 2 * col_in;
                const int row0 = tm * Cfg::BM + 16 * warp + quad, col0 = tn * Cfg::BN + col_in;
                const bool whole_tile = (tm + 1) * Cfg::BM <= M && (tn + 1) * Cfg::BN <= N;
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int half = 0; half < 2; half++) {
                        const int dr = 64 * h + 8 * half;  // this row's offset from the thread's first
                        const bool row_ok = row0 + dr < M;
                        bf16* g = gelu_out ? gelu_out + (size_t)(row0 + dr) * N + col0 : nullptr;
#pragma unroll
                        for (int j = 0; j < Cfg::BN / 8; j++) {
                            __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(
                                chunk_base[j % 8] + (j / 8) * tile_buf.kBoxBytes + dr * 128);
                            const float2 pre = __bfloat1622float2(*p);
                            const GeluAndSlope g0 = gelu_and_slope_fast(pre.x), g1 = gelu_and_slope_fast(pre.y);
                            *p = __floats2bfloat162_rn(alpha * acc[h].at(half, j, 0) * g0.slope,
                                                       alpha * acc[h].at(half, j, 1) * g1.slope);
                            if (gelu_out && (whole_tile || (row_ok && col0 + 8 * j < N)))
                                *reinterpret_cast<__nv_bfloat162*>(g + 8 * j) =
                                    __floats2bfloat162_rn(g0.value, g1.value);
                        }
                    }
                fence_proxy_async();  // st.shared above, read by the TMA store next
                named_barrier_sync(barrier_id, 128);
                if (t == 0) {
                    tma_store_2d(&map_dinp, tile_buf.box(0), tn * Cfg::BN, tm * Cfg::BM);
                    tma_store_2d(&map_dinp, tile_buf.box(1), tn * Cfg::BN + 64, tm * Cfg::BM);
                    tma_store_commit();
                }
                // column sums of the stored values per 64-row half (wgmma_column_sums_64_rows), into the accumulators
                // the epilogue above has consumed. Rows and columns past the matrix hold zeros (TMA filled zeros into
                // dout, weight and pre_gelu there).
                {
                    wgmma_fence();
#pragma unroll
                    for (int h = 0; h < 2; h++) wgmma_column_sums_64_rows(acc[h].d, tile_buf, 64 * h);
                    wgmma_commit();
                    wgmma_wait<0>();
                    acc[0].fence();
                    acc[1].fence();
                    if (warp == 0 && lane < 4) {
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            float* partial = partials + (size_t)(2 * tm + h) * N + tn * Cfg::BN + 2 * lane;
#pragma unroll
                            for (int j = 0; j < Cfg::BN / 8; j++)
                                if (tn * Cfg::BN + 8 * j + 2 * lane < N)
                                    *reinterpret_cast<float2*>(partial + 8 * j) =
                                        make_float2(acc[h].at(0, j, 0), acc[h].at(0, j, 1));
                        }
                    }
                }
                // the sums' wgmma reads (waited for) and the TMA store's (load_pre waits) come before the next load
                named_barrier_sync(barrier_id, 128);
                // the next pre_gelu lands during the wait for our turn
                if (t == 0 && tile + tile_stride < num_tiles) load_pre(tile + tile_stride);
            }
            if (t == 0) tma_store_wait<0>();  // the consumer's last stores are done before the block exits
        });
}

inline void launch(bf16* dinp, float* partials, bf16* gelu_out, const bf16* dout, const bf16* weight,
                   const bf16* pre_gelu, int M, int N, int K, float alpha, cudaStream_t stream) {
    using Cfg = Config;
    static const bool smem_ready = (hopper::allow_dynamic_smem(dgelu_kernel, Cfg::kSmemBytes), true);
    (void)smem_ready;
    using hopper::make_store_map_2d;
    using hopper::make_tensor_map_2d;
    constexpr auto kBf16 = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    constexpr auto kSw128 = CU_TENSOR_MAP_SWIZZLE_128B;
    const CUtensorMap map_dout = make_tensor_map_2d(dout, kBf16, 2, M, K, K, Cfg::BM, Cfg::BK, kSw128);
    const CUtensorMap map_weight = make_tensor_map_2d(weight, kBf16, 2, K, N, N, Cfg::BK, 64, kSw128);
    const CUtensorMap map_pre = make_tensor_map_2d(pre_gelu, kBf16, 2, M, N, N, Cfg::BM, 64, kSw128);
    const CUtensorMap map_dinp = make_store_map_2d(dinp, kBf16, 2, M, N, N, Cfg::BM, 64, kSw128, stream);
    const int tiles = ((M + Cfg::BM - 1) / Cfg::BM) * ((N + Cfg::BN - 1) / Cfg::BN);
    // two tiles per block at once (one per consumer): fewer blocks than SMs when there are few tiles
    const int blocks = std::min((tiles + 1) / 2, compute_sm_count());
    dgelu_kernel<<<blocks, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(map_dout, map_weight, map_pre, map_dinp, partials,
                                                                    gelu_out, alpha, M, N, K);
    cudaCheckLaunch();
}

}  // namespace matmul_dgelu

// fp32 scratch that matmul_backward_dgelu_hopper needs for an M x N dinp (its column-sum partials).
inline size_t matmul_dgelu_partials_floats(int M, int N) { return (size_t)matmul_dgelu::partial_rows(M) * N; }

// dinp (M x N) = alpha · (dout (M x K) · weight (K x N, N contiguous)) ∘ gelu'(pre_gelu (M x N)), and the column sums
// of dinp as partials (matmul_dgelu_partials_floats(M, N) floats) for matmul_dgelu_bias_grad; gelu_out (M x N, or
// null) = gelu(pre_gelu). Hopper and BF16 builds only (matmul_hopper_available(), kFloatXIsBF16).
inline void matmul_backward_dgelu_hopper(floatX* dinp, float* partials, const floatX* dout, const floatX* weight,
                                         const floatX* pre_gelu, int M, int N, int K, float alpha,
                                         cudaStream_t stream = 0, floatX* gelu_out = nullptr) {
    if (!kFloatXIsBF16) {
        fprintf(stderr, "error: matmul_backward_dgelu_hopper: bf16 only (this is an FP32 build)\n");
        exit(EXIT_FAILURE);
    }
    if (M < 1 || N < 8 || K < 8 || N % 8 != 0 || K % 8 != 0) {
        fprintf(stderr, "error: matmul_backward_dgelu_hopper: M %d, N %d, K %d: needs M >= 1 and N, K multiples of 8\n",
                M, N, K);
        exit(EXIT_FAILURE);
    }
    if ((reinterpret_cast<uintptr_t>(dinp) | reinterpret_cast<uintptr_t>(dout) | reinterpret_cast<uintptr_t>(weight) |
         reinterpret_cast<uintptr_t>(pre_gelu) | reinterpret_cast<uintptr_t>(partials) |
         reinterpret_cast<uintptr_t>(gelu_out)) % 16 != 0) {
        fprintf(stderr, "error: matmul_backward_dgelu_hopper: every pointer must be 16-byte aligned\n");
        exit(EXIT_FAILURE);
    }
    using bf16 = __nv_bfloat16;
    matmul_dgelu::launch(reinterpret_cast<bf16*>(dinp), partials, reinterpret_cast<bf16*>(gelu_out),
                         reinterpret_cast<const bf16*>(dout),
                         reinterpret_cast<const bf16*>(weight), reinterpret_cast<const bf16*>(pre_gelu), M, N, K, alpha,
                         stream);
}

// dbias[j] += scale · Σ_rows dinp[.][j] from the kernel's partials, added in a fixed order.
inline void matmul_dgelu_bias_grad(floatX* dbias, const float* partials, int M, int N, float scale,
                                   cudaStream_t stream = 0) {
    column_sum_finish(dbias, partials, matmul_dgelu::partial_rows(M), N, scale, stream);
}
