// Shared memory as the Hopper kernels lay it out: tiles in TMA's 128-byte swizzle, a kernel's layout as a struct of
// named tiles and barriers (its size from the struct), and the fence that hands tiles threads wrote to TMA or wgmma.
#pragma once

#include <cstddef>
#include <cstdint>

#include "llmc/hopper/arch.cuh"

namespace hopper {

// Where 16-byte chunk `chunk` (0..7) of row `row` sits inside that row of a tile of 128-byte rows with the 128-byte
// swizzle, as TMA reads and writes it: the chunk index XORed with the row's position in its 8-row atom. The chunk's
// address is tile + row * 128 + sw128_chunk_offset(row, chunk).
__device__ __forceinline__ int sw128_chunk_offset(int row, int chunk) { return (chunk ^ (row % 8)) * 16; }

// TMA's 128-byte swizzle: rows of 128 bytes whose 16-byte chunks are permuted within atoms of 8 rows.
constexpr int kSwizzleRowBytes = 128, kSwizzleAtomBytes = 8 * kSwizzleRowBytes;

// An R x C tile of T as TMA stores it with the 128-byte swizzle: boxes of one swizzle row's columns (64 bf16, 32
// fp32) one after the other, each R rows ([box][row][128 bytes]). It starts on a swizzle atom, as the swizzle and
// the wgmma descriptors (base offset 0) assume.
template <typename T, int R, int C>
struct alignas(kSwizzleAtomBytes) Tile {
    using Element = T;
    static constexpr int kRows = R, kCols = C;
    static constexpr int kBoxCols = kSwizzleRowBytes / (int)sizeof(T), kBoxes = C / kBoxCols;
    static constexpr int kBoxBytes = R * kSwizzleRowBytes, kBytes = kBoxes * kBoxBytes;
    static_assert(C % kBoxCols == 0 && R % 8 == 0, "whole boxes of whole swizzle atoms");
    uint8_t bytes[kBytes];

    __device__ __forceinline__ uint8_t* box(int b) { return bytes + b * kBoxBytes; }
    __device__ __forceinline__ const uint8_t* box(int b) const { return bytes + b * kBoxBytes; }
    // Row r of the first box; row r of box b is b * kBoxBytes further on.
    __device__ __forceinline__ uint8_t* row(int r) { return bytes + r * kSwizzleRowBytes; }
    __device__ __forceinline__ const uint8_t* row(int r) const { return bytes + r * kSwizzleRowBytes; }
};

// The dynamic shared memory rounded up to 1024 bytes (a swizzle atom, Tile's alignment), where a kernel's layout
// starts; launch with 1024 bytes to spare (smem_bytes). Rounded by adding to the shared array's own pointer, not
// through an integer, so the compiler still knows the result is shared memory: plain loads and stores through it
// compile to LDS/STS, not the generic LD/ST that an integer round trip leaves.
__device__ __forceinline__ uint8_t* smem_align_1024(uint8_t* raw) {
    return raw + ((1024 - (smem_addr(raw) & 1023)) & 1023);
}
template <typename Layout>
__device__ __forceinline__ Layout& smem_layout(uint8_t* raw) {
    return *reinterpret_cast<Layout*>(smem_align_1024(raw));
}

// The bytes of dynamic shared memory a kernel with this layout asks for. A layout is a struct of tiles with its
// barriers last, as member `barriers`: it takes up to their end (sizeof would add the padding to the tiles'
// 1024-byte alignment), plus 1024 bytes for aligning the base.
template <typename Layout>
constexpr int smem_bytes() {
    return (int)(offsetof(Layout, barriers) + sizeof(Layout::barriers)) + 1024;
}
constexpr int kSmemLimit = 227 * 1024;  // a block's dynamic shared memory on sm_90

// Ordinary stores (st.shared, stmatrix) that TMA or wgmma read next need this fence in each writing thread, then a
// barrier, because those units read through the async proxy.
__device__ __forceinline__ void fence_proxy_async() {
    LLMC_HOPPER_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace hopper
