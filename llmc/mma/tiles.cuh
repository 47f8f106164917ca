// Tile primitives of the flash attention kernels (attention_flash_forward.cuh, attention_flash_backward.cuh):
// PTX wrappers (cp.async, ldmatrix, mma.sync m16n8k16 bf16 -> fp32), the XOR-swizzled shared-memory tile layout,
// operand-fragment loads, the accumulator -> A-operand conversion, the two-stage cp.async pipeline step and the
// accumulator store. Everything here works on one tile or one warp's 16 rows, so the kernels read as the algorithm.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "llmc/core/cuda_common.h"

namespace flash {

using bf16 = __nv_bfloat16;

// ------------------------------------------------------------------------------------------ PTX wrappers
// smem_addr, cp_async_16, cp_async_commit, cp_async_wait: llmc/core/cuda_common.h.

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c (16x8 fp32) += a (16x16 bf16, row-major fragment) * b (16x8 bf16, column fragment)
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Accumulator n-tiles 2·nn and 2·nn + 1 += a · b, where b is a pair of B fragments as load_b_frag_rows_n /
// load_b_frag_rows_k return them (b[0], b[1] for the first n-tile, b[2], b[3] for the second).
template <int kNTiles>
__device__ __forceinline__ void mma_16816_pair(float (&acc)[kNTiles][4], int nn, const uint32_t (&a)[4],
                                               const uint32_t (&b)[4]) {
    mma_16816(acc[2 * nn], a, b[0], b[1]);
    mma_16816(acc[2 * nn + 1], a, b[2], b[3]);
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// An mma accumulator block as the A operand of the next product: the fp32 accumulators of n-tiles 2·kk and
// 2·kk + 1 (a 16x16 block, columns 16·kk..16·kk+15) sit in each thread exactly where the A fragment of that block
// wants them, so rounding them to bf16 pairs is the whole conversion (no trip through shared memory).
template <int kNTiles>
__device__ __forceinline__ void accumulators_to_a_frag(uint32_t (&a)[4], const float (&acc)[kNTiles][4], int kk) {
    a[0] = pack_bf16x2(acc[2 * kk][0], acc[2 * kk][1]);
    a[1] = pack_bf16x2(acc[2 * kk][2], acc[2 * kk][3]);
    a[2] = pack_bf16x2(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    a[3] = pack_bf16x2(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

// ------------------------------------------------------------------------------------------ shared-memory tiles
// A tile is kRows x HS bf16, row-major, with the 16-byte chunks of row r permuted by XOR (r & 7): the eight rows
// an ldmatrix phase touches then sit in eight different bank groups. Tiles start at 128-byte boundaries
// (the configurations' shared-memory offsets assert it), so the permutation alone decides the banks.
template <int kRows, int HS>
constexpr uint32_t tile_bytes() {
    return static_cast<uint32_t>(kRows * HS * sizeof(bf16));
}

// Such a tile as a member of a kernel's shared-memory layout (a struct of named tiles, as the Hopper kernels'
// hopper::Tile layouts): 128-byte aligned, its shared-space address for the PTX wrappers.
template <int kRows, int HS>
struct SwizzledTile {
    static constexpr int kTileRows = kRows, kCols = HS;
    alignas(128) unsigned char bytes[tile_bytes<kRows, HS>()];
    __device__ __forceinline__ uint32_t addr() const { return smem_addr(bytes); }
};
// A layout struct over a block's dynamic shared memory.
template <typename Layout>
__device__ __forceinline__ Layout& shared_layout(unsigned char* smem) {
    return *reinterpret_cast<Layout*>(smem);
}

template <int HS>
__device__ __forceinline__ uint32_t tile_chunk_addr(uint32_t base, int row, int chunk) {
    return base + static_cast<uint32_t>((row * HS + ((chunk ^ (row & 7)) << 3)) * 2);
}

// Copies rows [t0, t0 + kRows) of one head's Q, K or V (row stride `stride` elements) into a tile; rows >= T
// become zeros.
template <int kRows, int HS, int kThreads>
__device__ __forceinline__ void load_tile_async(uint32_t tile, const bf16* src, size_t stride, int t0, int T) {
    constexpr int kChunksPerRow = HS / 8;
    constexpr int kChunks = kRows * kChunksPerRow;
    static_assert(kChunks % kThreads == 0, "tile chunks must divide evenly among threads");
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; i++) {
        int id = threadIdx.x + i * kThreads;
        int row = id / kChunksPerRow, chunk = id % kChunksPerRow;
        bool valid = t0 + row < T;
        const bf16* g = src + (valid ? static_cast<size_t>(t0 + row) * stride + chunk * 8 : 0);
        cp_async_16(tile_chunk_addr<HS>(tile, row, chunk), g, valid);
    }
}

// A-operand fragments (16 rows x 16 columns starting at column 16*kk) of a row-major tile, rows row0..row0+15.
template <int HS>
__device__ __forceinline__ void load_a_frag(uint32_t (&a)[4], uint32_t tile, int row0, int kk, int lane) {
    int row = row0 + (lane & 7) + ((lane >> 3) & 1) * 8;
    int chunk = 2 * kk + (lane >> 4);
    ldmatrix_x4(a, tile_chunk_addr<HS>(tile, row, chunk));
}

// B operand = tileᵀ (tile rows are the n index, columns the k index), for two n-tiles n0..n0+15, k 16*kk..+15.
// b[0], b[1] feed n-tile n0; b[2], b[3] feed n-tile n0 + 8.
template <int HS>
__device__ __forceinline__ void load_b_frag_rows_n(uint32_t (&b)[4], uint32_t tile, int n0, int kk, int lane) {
    int row = n0 + (lane & 7) + (lane >> 4) * 8;
    int chunk = 2 * kk + ((lane >> 3) & 1);
    ldmatrix_x4(b, tile_chunk_addr<HS>(tile, row, chunk));
}

// B operand = tile itself (tile rows are the k index, columns the n index), k rows k0..k0+15, n columns
// 16*nn..+15. b[0], b[1] feed n-tile 2*nn; b[2], b[3] feed n-tile 2*nn + 1.
template <int HS>
__device__ __forceinline__ void load_b_frag_rows_k(uint32_t (&b)[4], uint32_t tile, int k0, int nn, int lane) {
    int row = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
    int chunk = 2 * nn + (lane >> 4);
    ldmatrix_x4_trans(b, tile_chunk_addr<HS>(tile, row, chunk));
}

// One step of the two-stage cp.async pipeline every kernel here runs: if there is a next tile, start copying rows
// [next_row0, next_row0 + kRows) of X and Y into the other stage and run `while_copying` (work that overlaps the
// copies); then wait until this stage's tiles have landed and the whole block can see them.
template <int kRows, int HS, int kThreads, typename F>
__device__ __forceinline__ void pipeline_step(uint32_t sX, uint32_t sY, int stage, bool has_next, const bf16* Xg,
                                              size_t x_stride, const bf16* Yg, size_t y_stride, int next_row0, int T,
                                              F&& while_copying) {
    if (has_next) {
        const uint32_t next = (stage ^ 1) * tile_bytes<kRows, HS>();
        load_tile_async<kRows, HS, kThreads>(sX + next, Xg, x_stride, next_row0, T);
        load_tile_async<kRows, HS, kThreads>(sY + next, Yg, y_stride, next_row0, T);
        cp_async_commit();
        while_copying();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
    __syncthreads();
}

// Writes a warp's 16 x HS fp32 accumulator (times `mul`) as bf16 to global rows t0..t0+15 (< T), staging
// through the warp's own 16 rows of a shared tile so that global stores are 16 bytes wide.
template <int HS>
__device__ __forceinline__ void store_warp_rows(float (&acc)[HS / 8][4], float mul, uint32_t tile, int row0,
                                                bf16* dst, size_t stride, int t0, int T, int lane) {
    int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = row0 + g + 8 * r;
            uint32_t v = pack_bf16x2(acc[dn][2 * r] * mul, acc[dn][2 * r + 1] * mul);
            uint32_t addr = tile_chunk_addr<HS>(tile, row, dn) + t * 4;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v));
        }
    }
    __syncwarp();
    constexpr int kChunksPerRow = HS / 8;
#pragma unroll
    for (int i = 0; i < 16 * kChunksPerRow / 32; i++) {
        int id = lane + 32 * i;
        int row = id / kChunksPerRow, chunk = id % kChunksPerRow;
        if (t0 + row < T) {
            uint4 v;
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                         : "r"(tile_chunk_addr<HS>(tile, row0 + row, chunk)));
            *reinterpret_cast<uint4*>(dst + static_cast<size_t>(t0 + row) * stride + chunk * 8) = v;
        }
    }
}

// ------------------------------------------------------------------------------------------ launch
// Raises a kernel's dynamic shared-memory limit above the default 48 KB. Called once per kernel instantiation
// (a function-local static in each launcher); processes drive one GPU each, so once per process is enough.
template <typename Kernel>
inline cudaError_t allow_smem(Kernel kernel, size_t bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

}  // namespace flash
