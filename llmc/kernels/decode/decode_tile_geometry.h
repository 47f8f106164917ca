// The tensor-core decode products' page geometry (llmc/kernels/decode/decode_persistent_tiles.cuh), written once for
// the kernel and for host checks (tests/unit/test_decode_tiles.cpp): a page is a tile of up to kTileRows rows of a
// block's share of a matrix x one chunk of K, a row's K cut into chunks of at most kTileMaxK columns at multiples
// of 16 (the mma's k-step), rows a stride apart that is 16 bytes past a multiple of 128 (ldmatrix's eight rows in
// eight bank groups). Host-only programs include it with g++ alone: DECODE_TILE_HD adds __host__ __device__ under
// nvcc.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DECODE_TILE_HD __host__ __device__ __forceinline__
#else
#define DECODE_TILE_HD inline
#endif

namespace decode_persistent {

// The widest chunk and the ring's pages: a compile-time choice (dev/cuda/decode_step's variants build others, for
// the ring-depth measurements in docs/DECODE.md); narrower chunks make smaller pages, so more of them fit.
#ifndef LLMC_DECODE_TILE_MAX_K
#define LLMC_DECODE_TILE_MAX_K 1280
#endif
#ifndef LLMC_DECODE_TILE_STAGES
#define LLMC_DECODE_TILE_STAGES 4
#endif
// A page's release by the consumers: every thread's arrival (0), or one a warp after __syncwarp (1: ldmatrix reads a
// page warp-wide, and the warp's mma has consumed it before lane 0 arrives); a knob for the measurement of the
// arrivals' cost (dev/cuda/decode_step_warprel)
#ifndef LLMC_DECODE_WARP_RELEASE
#define LLMC_DECODE_WARP_RELEASE 0
#endif
// Pages whose release thread 0 holds past the phase's own release: a product phase's last N. The release's fence
// waits for the copies the SM has in flight, so the next phase's copies into those stages are better issued after it
// than before (docs/DECODE.md, "The release's fence and the copies in flight"; dev/cuda/decode_step_hold<N>)
#ifndef LLMC_DECODE_HOLD_PAGES
#define LLMC_DECODE_HOLD_PAGES 2
#endif
// When thread 0 lets the held pages go: 0 after the phase's release; 1 (the default) after the next phase's wait, so
// the wait's polls do not queue behind their copies either; 2 after the next phase's staging (an attention phase:
// its wait). Measured in docs/DECODE.md ("A page's instructions, profiled"); dev/cuda/decode_step_hold<N>u<when>
#ifndef LLMC_DECODE_HOLD_UNTIL
#define LLMC_DECODE_HOLD_UNTIL 1
#endif
// The producer's copies in flight, at most (0: as many as the ring has free pages): it waits for page j - N to land
// before it issues page j, so the burst of a ring's worth of copies at a phase's end does not queue ahead of the
// consumers' own loads and fence (a measurement knob, dev/cuda/decode_step_inflight<N>)
#ifndef LLMC_DECODE_INFLIGHT
#define LLMC_DECODE_INFLIGHT 0
#endif
constexpr int kTileRows = 16, kTileMaxK = LLMC_DECODE_TILE_MAX_K, kTileStages = LLMC_DECODE_TILE_STAGES;
constexpr bool kTileWarpRelease = LLMC_DECODE_WARP_RELEASE != 0;
constexpr int kHoldPages = LLMC_DECODE_HOLD_PAGES, kHoldUntil = LLMC_DECODE_HOLD_UNTIL,
              kInflight = LLMC_DECODE_INFLIGHT;
static_assert(kHoldUntil >= 0 && kHoldUntil <= 2, "held pages go after the release, the next wait or the next staging");
static_assert(kInflight >= 0 && kInflight < kTileStages, "a page in flight is one the consumers have not released");
static_assert(kHoldPages >= 0 && kHoldPages <= kTileStages, "the held pages are distinct stages of the ring");
static_assert(kTileMaxK % 16 == 0 && kTileMaxK >= 128, "a chunk is whole 16-column steps");
constexpr int kTilePageBytes = kTileRows * ((2 * kTileMaxK + 127) / 128 * 128 + 16);  // the widest stride, 16 rows

// A row's chunks of K (K a multiple of 16), where chunk c begins (c = chunks: K), a page's row stride in bytes.
DECODE_TILE_HD int tile_chunks(int K) { return (K + kTileMaxK - 1) / kTileMaxK; }
DECODE_TILE_HD int chunk_begin(int K, int c, int chunks) { return 16 * ((K / 16) * c / chunks); }
DECODE_TILE_HD int tile_stride(int K, int chunks) {
    const int widest = 16 * ((K / 16 + chunks - 1) / chunks);
    return (2 * widest + 127) / 128 * 128 + 16;
}

// The chunks of a row in order without a division a chunk (chunk_begin's integer division costs a page's consumers
// about 45 dependent instructions, on the path of every page): K / 16 = q chunks + r, so chunk c is q steps of 16
// columns, or q + 1 where r c / chunks passes an integer; rem is r (c + 1) mod chunks. restart() is chunk 0.
struct ChunkWalk {
    int q, r, chunks, k0 = 0, steps = 0, rem = 0;
    // from a TileCut's q and r (no division), or from K
    DECODE_TILE_HD ChunkWalk(int q_, int r_, int chunks_) : q(q_), r(r_), chunks(chunks_) { restart(); }
    DECODE_TILE_HD ChunkWalk(int K, int chunks_) : ChunkWalk(K / 16 / chunks_, K / 16 % chunks_, chunks_) {}
    DECODE_TILE_HD void restart() { k0 = 0, rem = 0, take(); }
    DECODE_TILE_HD void next() { k0 += 16 * steps, take(); }

  private:
    DECODE_TILE_HD void take() {
        rem += r;
        const bool wide = rem >= chunks;
        rem -= wide ? chunks : 0;
        steps = q + (wide ? 1 : 0);
    }
};

// A product's pages for the kernel, computed on the host into its phase (Phase::tiles), so that the consumers do no
// integer division between one phase's wait and its first page (each costs them 0.15-0.3 us on that path, wherever
// it sits: docs/DECODE.md): the row's chunks, the page's row stride, and the walk's K / 16 = q chunks + r.
// chunks 0: not set (with_tiles sets it; a check in the kernel pushed it into spills, docs/DECODE.md).
struct TileCut {
    int chunks = 0, stride = 0, q = 0, r = 0;
};
inline TileCut tile_cut(int K) {  // the walk's q and r as ChunkWalk finds them
    const int chunks = tile_chunks(K);
    const ChunkWalk walk(K, chunks);
    return {chunks, tile_stride(K, chunks), walk.q, walk.r};
}

// A block's rows of a product of n rows over `blocks` blocks, [n block / blocks, n (block + 1) / blocks), without a
// division: inv = 2^40 / blocks rounded up gives floor(x / blocks) exactly as floor(x inv / 2^40) for x blocks < 2^40
// (the error x (inv blocks - 2^40) / 2^40 stays below 1), so for n (block + 1) < 2^30 at up to 1024 blocks (every
// GPT-2 shape: n <= 2^16). Made once a launch (its one 64-bit division), used every phase.
struct RowSplit {
    uint64_t inv;
    DECODE_TILE_HD explicit RowSplit(int blocks) : inv(((1ull << 40) + (uint64_t)blocks - 1) / (uint64_t)blocks) {}
    DECODE_TILE_HD int div(int x) const { return (int)(((uint64_t)x * inv) >> 40); }
    DECODE_TILE_HD void rows(int n, int block, int* begin, int* end) const {
        *begin = div(n * block), *end = div(n * (block + 1));
    }
};

}  // namespace decode_persistent
