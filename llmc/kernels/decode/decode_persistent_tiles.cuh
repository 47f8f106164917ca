// The persistent decode step's products on the tensor cores (Step::tiles; llmc/kernels/decode/decode_persistent.cuh
// has the design). The FFMA products (decode_persistent_products.cuh) spend about seven instructions a weight and
// no faster than the weights stream (docs/DECODE.md, "Where a product's time goes"); mma.sync m16n8k16 takes 256
// multiply-adds in one instruction, with the weights as the 16 x 16 A tile and x as B (its eight columns all x, one
// read back).
//   - A page is a tile: up to kTileRows rows of the block's share x one chunk of K, a row a bulk copy, rows a
//     stride apart that puts the eight rows an ldmatrix phase reads in eight bank groups (decode_tile_geometry.h).
//   - The eight warps split a chunk's 16-column steps (warp w: steps w, w + 8, ...) and keep their 16 row sums in an
//     accumulator across the chunks of a row group; after the group's last chunk the warps' sums are added in warp
//     order (deterministic), then the epilogue (decode_persistent_products.cuh) stores each row.
//   - Rows past the group's end read its last row (their sums are never used); the staging writes x as bf16 pairs
//     too (stage_input's xb: every x the step multiplies is a bf16 value, LayerNorm, attention and GELU outputs), so
//     B is exact.
#pragma once

#include "llmc/hopper/pipeline.cuh"
#include "llmc/hopper/tma.cuh"
#include "llmc/kernels/decode/decode_persistent_common.cuh"
#include "llmc/kernels/decode/decode_persistent_products.cuh"
#include "llmc/kernels/decode/decode_tile_geometry.h"
#include "llmc/mma/tiles.cuh"

namespace decode_persistent {

static_assert(kPartials >= kTileRows * kWarps, "a row group's sums fit a partials buffer");

// The producer warp's copies of one product phase's tiles: each lane r < the group's rows waits for the page to be
// free itself (so its copy is ordered after the consumers' reads by its own acquire), lane 0 arms the page's barrier
// with its bytes, then lane r copies row r's piece. Every lane keeps the same ring. Timeline: the first and last
// page's issue.
// kInflight: lane 0 first waits for the page kInflight before this one to land (lag: that page's place in the ring).
__device__ __forceinline__ void produce_tiles(const Phase& ph, const Step& s, int i, const RowSplit& split,
                                              uint8_t* pages, hopper::Ring<kTileStages>& ring,
                                              hopper::Ring<kTileStages>& lag, int& issued) {
    const int lane = threadIdx.x % 32, K = ph.K, chunks = ph.tiles.chunks, stride = ph.tiles.stride;
    int begin, end;
    rows_of(split, ph.N, &begin, &end);
    ChunkWalk walk(ph.tiles.q, ph.tiles.r, chunks);
    for (int g0 = begin; g0 < end; g0 += kTileRows) {
        const int n = min(kTileRows, end - g0);
        walk.restart();
        for (int c = 0; c < chunks; c++, ring.advance(), walk.next()) {
            const int k0 = walk.k0, kc = 16 * walk.steps;
            if (lane < n) ring.wait_empty();
            if (kInflight > 0 && lane == 0 && issued++ >= kInflight) lag.wait_full(), lag.advance();
            if (lane == 0) {
                hopper::mbarrier_arrive_expect_tx(ring.full_barrier(), (uint32_t)(n * kc * sizeof(bf16)));
                if (s.timeline && g0 == begin && c == 0) mark_value(s, i, kMarkFirstIssued, clock64());
                if (s.timeline && g0 + kTileRows >= end && c == chunks - 1)
                    mark_value(s, i, kMarkLastIssued, clock64());
            }
            __syncwarp();  // the barrier armed before any copy completes on it
            if (lane < n)
                hopper::bulk_load_1d(pages + (size_t)ring.stage() * kTilePageBytes + (size_t)lane * stride,
                                     ph.W + (size_t)(g0 + lane) * K + k0, (uint32_t)(kc * sizeof(bf16)),
                                     ring.full_barrier());
        }
    }
}

// Thread 0's held pages (product_tiles' kHoldPages, their stages a bitmask) released, the mask left empty.
__device__ __forceinline__ void release_held(const hopper::Ring<kTileStages>& ring, unsigned& held) {
    for (; held; held &= held - 1) ring.release(__ffs(held) - 1);
}

// The block's rows of one product phase, tile by tile from the ring (decode_persistent_products.cuh's product, on
// the tensor cores). part: two buffers of kTileRows x kWarps sums, alternated by sliced_pages.
__device__ void product_tiles(const Phase& ph, const Step& s, int i, int begin, int end, const uint8_t* pages,
                              const uint32_t* xb, float* partials, const float* rows_bias, const float* rows_res,
                              unsigned long long* red_key, hopper::Ring<kTileStages>& ring, int& sliced_pages,
                              unsigned& held) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int chunks = ph.tiles.chunks, stride = ph.tiles.stride;  // with_tiles, on the host: no division here
    const bool rows = ph.bias || ph.epilogue == Epilogue::Residual;
    unsigned long long best = sampling_rule::rank_floor(), waited = 0;  // waited: the timeline's cycles
    // ldmatrix's A fragment: lane l gives row (l & 7) + 8 ((l >> 3) & 1), columns 8 (l >> 4) of the 16-column step
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
    const uint32_t pages_addr = smem_addr(pages);
    bf16* const y = output_row(ph, s);
    // kHoldPages: thread 0 keeps the phase's last pages (from page hold_from on) and releases them past the phase's
    // own release (kHoldUntil: after it, or after the next phase's wait; held: their stages)
    const int hold_from = ((end - begin + kTileRows - 1) / kTileRows) * chunks - kHoldPages;
    int page = 0;
    ChunkWalk walk(ph.tiles.q, ph.tiles.r, chunks);
    for (int g0 = begin; g0 < end; g0 += kTileRows) {
        const int n = min(kTileRows, end - g0);
        const uint32_t row_off = (uint32_t)(min(a_row, n - 1) * stride + a_col * 2);
        float d[4] = {0.f, 0.f, 0.f, 0.f};
        walk.restart();
        for (int c = 0; c < chunks; c++, ring.advance(), page++, walk.next()) {
            const int k0 = walk.k0, steps = walk.steps;
            wait_page(s, ring, waited);
            if (!(s.diagnose & kSkipProducts)) {
                const uint32_t tile = pages_addr + (uint32_t)ring.stage() * kTilePageBytes + row_off;
                // B: x[k0 + 16 step + 2 (l % 4) + {0, 1}] and the same 8 on; every column alike
                const uint32_t* xk = xb + k0 / 2 + lane % 4;
                for (int st = warp; st < steps; st += kWarps) {
                    uint32_t a[4];
                    flash::ldmatrix_x4(a, tile + (uint32_t)st * 32);
                    flash::mma_16816(d, a, xk[st * 8], xk[st * 8 + 4]);
                }
            }
            if (kHoldPages > 0 && threadIdx.x == 0 && page >= hold_from) {
                held |= 1u << ring.stage();  // thread 0 is the arriving lane of warp 0 either way
                if constexpr (kTileWarpRelease) __syncwarp();
            } else if constexpr (kTileWarpRelease) {
                __syncwarp();
                if (lane == 0) ring.release();
            } else {
                ring.release();  // every thread: an arrival releases only its own thread's reads of the page
            }
        }
        if (s.diagnose & kSkipProducts) continue;
        // D's column 0: lanes 4 g hold rows g (d[0]) and g + 8 (d[2])
        float* part = partials + (sliced_pages & 1) * kPartials;
        if (lane % 4 == 0) part[(lane / 4) * kWarps + warp] = d[0], part[(lane / 4 + 8) * kWarps + warp] = d[2];
        consumers_sync();
        for (int r = threadIdx.x; r < n; r += kConsumers) {
            float t = 0.f;
            for (int w = 0; w < kWarps; w++) t += part[r * kWarps + w];
            const int row = g0 + r;
            epilogue(ph, s, y, row, t, rows ? rows_bias[row - begin] : 0.f, rows ? rows_res[row - begin] : 0.f,
                     best);
        }
        sliced_pages++;  // the groups' sums alternate two buffers: the barrier of the one between orders the reuse
    }
    finish_product(ph, s, i, waited, best, red_key);
}

}  // namespace decode_persistent
