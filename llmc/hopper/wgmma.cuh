// wgmma, Hopper's asynchronous warpgroup matrix multiply-accumulate (PTX ISA 8.x, "Asynchronous Warpgroup Level
// Matrix Multiply-Accumulate"): its fences, the shared-memory matrix descriptors of tiles in the 128-byte swizzle
// (smem.cuh), the m64nNk16 bf16 products with A from shared memory or registers, the accumulator layout and what
// moves between it and tiles or A fragments, and the products over whole tiles the attention kernels run.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "llmc/hopper/arch.cuh"
#include "llmc/hopper/smem.cuh"

namespace hopper {

// ---- wgmma: a warpgroup (4 consecutive warps, the first a multiple of 4) multiplies m64 x nN x k16 bf16 into
// fp32 registers, asynchronously. fence before the first wgmma that touches accumulators other code wrote;
// commit closes a group of issued wgmmas; wait<N> returns when at most N groups are still running (only then
// may the accumulators be read or the operands' shared memory be reused).
__device__ __forceinline__ void wgmma_fence() { LLMC_HOPPER_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { LLMC_HOPPER_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
    LLMC_HOPPER_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Pins an accumulator's registers here. wgmma_wait orders memory, not registers: the wgmma asm names the
// accumulators as operands but the wait does not, so the compiler may move a read of an accumulator above the
// wait that makes it valid. Call it after each wait on the accumulators read next (as CUTLASS's
// warpgroup_fence_operand). (It does not guard against ptxas reusing loop-invariant A-fragment registers, the
// failure seen in the attention backward: see p_and_ds in attention_hopper_backward_parts.cuh.)
template <int N>
__device__ __forceinline__ void fence_accumulator(float (&acc)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(acc[i])::"memory");
}

// The same for A fragments held in registers by a wgmma still running (wgmma_rs reads them asynchronously): called
// after the wait that retires it, it keeps the fragments live, so nothing else is allocated to those registers
// while the product may still read them.
template <int N>
__device__ __forceinline__ void fence_fragments(uint32_t (&frag)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int k = 0; k < 4; k++) asm volatile("" : "+r"(frag[i][k])::"memory");
}

// Shared-memory matrix descriptor of a tile stored as TMA writes it with the 128-byte swizzle: rows of 128 bytes
// (64 bf16), 8-row atoms of 1024 bytes. K-major (each row holds K): the stride byte offset is the 1024 bytes
// between atoms and the leading byte offset is unused (1). The tile must start 1024-byte aligned (base offset
// 0); moving along K inside the atom is moving the start address (32 bytes per k16 step), as the swizzle is a
// function of the address. MN-major operands (transposed, e.g. V used as stored) pass their own offsets:
// lbo = bytes between 64-element column blocks, sbo = bytes between 8-row groups along K.
__device__ __forceinline__ uint64_t smem_descriptor_sw128(const void* tile, uint32_t lbo = 16, uint32_t sbo = 1024) {
    const uint32_t addr = smem_addr(tile);
    uint64_t d = (uint64_t)((addr & 0x3FFFF) >> 4);
    d |= (uint64_t)((lbo & 0x3FFFF) >> 4) << 16;
    d |= (uint64_t)((sbo & 0x3FFFF) >> 4) << 32;
    d |= (uint64_t)1 << 62;  // swizzle mode 1: 128 bytes
    return d;
}
// The descriptor of the same operand `bytes` (a multiple of 16) further on: the start address field is the low
// 14 bits, in 16-byte units, and shared addresses stay below 2^18, so no carry leaves it. Built this way, the
// descriptors of a tile's k16 steps cost one add each instead of the masks and shifts above (they are issued
// once per wgmma, in the inner loops).
__device__ __forceinline__ uint64_t descriptor_plus(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// A K-major operand: a tile's rows from `row` on, whose columns hold K (Q, K, V, dO over the head dimension); its
// k16 step kk is box kk / 4, 32 bytes per step inside the 128-byte rows. Built once outside a loop for an operand
// every iteration reads (the forward's Q rows), it keeps the address arithmetic out of the loop, which the compiler
// does not always hoist.
template <typename Tile>
struct KMajorRows {
    uint64_t desc;  // step 0
    // The descriptor passes through a register move the compiler cannot see into, so it stays where it is made
    // (else it may be recomputed at every use, inside the loop).
    __device__ __forceinline__ KMajorRows(const Tile& t, int row) : desc(smem_descriptor_sw128(t.row(row))) {
        asm("mov.b64 %0, %0;" : "+l"(desc));
    }
    __device__ __forceinline__ uint64_t step(int kk) const {
        return descriptor_plus(desc, (kk / 4) * Tile::kBoxBytes + (kk % 4) * 32);
    }
};
template <typename Tile>
__device__ __forceinline__ uint64_t k_major_descriptor(const Tile& t, int row, int kk) {
    return KMajorRows<Tile>(t, row).step(kk);
}
// The MN-major descriptor of k16 step kk of a tile used transposed, its rows running along K (V as B of O += P·V):
// its boxes are the leading byte offset apart, 8-row groups 1024 bytes (the stride byte offset), 16 rows per step.
template <typename Tile>
__device__ __forceinline__ uint64_t mn_major_descriptor(const Tile& t, int kk, int box = 0) {
    return descriptor_plus(smem_descriptor_sw128(t.box(box), Tile::kBoxBytes, 1024), kk * 16 * 128);
}

// Accumulator layout (m64nN, fp32, per warpgroup thread t): warp w = t / 32 owns rows 16w..16w+15; lane l holds,
// for each 8-column block j, d[4j + 0..1] at row 16w + l/4, columns 8j + 2(l%4) + 0..1, and d[4j + 2..3] at row
// 16w + l/4 + 8, same columns. That is also the A-from-registers layout of the next product (4 bf16x2 per k16).
// wgmma_ss: A and B from shared memory (descriptors); wgmma_rs: A from registers. kTransB 1: B is MN-major;
// kTransA 1: A is MN-major (M contiguous, e.g. Kᵀ read from a K tile stored keys x head dims).
// scale_d 0 overwrites d (the first product of a sum), 1 accumulates.
template <int kTransB, int kTransA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    LLMC_HOPPER_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15},"
        " %16, %17, p, 1, 1, %20, %19;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB), "n"(kTransA));
}

template <int kTransB, int kTransA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    LLMC_HOPPER_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
        " %32, %33, p, 1, 1, %36, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB), "n"(kTransA));
}

template <int kTransB, int kTransA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    LLMC_HOPPER_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
        " %64, %65, p, 1, 1, %68, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB), "n"(kTransA));
}

template <int kTransB, int kTransA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    LLMC_HOPPER_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95},"
        " %96, %97, p, 1, 1, %100, %99;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB), "n"(kTransA));
}

template <int kTransB, int kTransA = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    LLMC_HOPPER_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},"
        " %128, %129, p, 1, 1, %132, %131;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]),
          "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
          "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),
          "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]),
          "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB), "n"(kTransA));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    LLMC_HOPPER_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15},"
        " {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    LLMC_HOPPER_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
        " {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    LLMC_HOPPER_ASM(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
        " {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
}

// Packs the k16 slices of a 64 x kN fp32 accumulator (values final) into bf16 A fragments of the next product: the
// accumulator layout is the register-A layout, k16 slice kk being 8-column blocks 2kk and 2kk + 1.
template <int kN>
__device__ __forceinline__ void pack_a_fragments(const float (&acc)[kN / 2], uint32_t (&frag)[kN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < kN / 16; kk++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const __nv_bfloat162 pair = __floats2bfloat162_rn(acc[8 * kk + 2 * i], acc[8 * kk + 2 * i + 1]);
            frag[kk][i] = *reinterpret_cast<const uint32_t*>(&pair);
        }
}

// Writes a 64 x C fp32 accumulator, row r times scale[r % 2] (rows row_in and row_in + 8 of this thread), as bf16
// into rows first_row.. of a tile of C columns, which TMA stores next.
template <typename Tile>
__device__ __forceinline__ void store_accumulator(Tile& t, int first_row, const float (&acc)[Tile::kCols / 2],
                                                  const float (&scale)[2], int row_in, int lane) {
    uint8_t* rows = t.row(first_row);
#pragma unroll
    for (int jj = 0; jj < Tile::kCols / 8; jj++) {
        uint8_t* box = rows + (jj / 8) * Tile::kBoxBytes;
        const int chunk = jj % 8;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = row_in + 8 * r;
            const __nv_bfloat162 v =
                __floats2bfloat162_rn(acc[4 * jj + 2 * r] * scale[r], acc[4 * jj + 2 * r + 1] * scale[r]);
            *reinterpret_cast<__nv_bfloat162*>(box + row * 128 + sw128_chunk_offset(row, chunk) + 4 * (lane % 4)) = v;
        }
    }
}

// ---- products over whole tiles, K being the tiles' columns (the head dimension, in attention), both operands
// K-major: a warpgroup's 64 rows of A from a_row, N rows of B from b_row. Issued only (the caller fences, commits
// and waits).
// acc (64 x N) = A·Bᵀ, A and B from shared memory.
template <int kN, typename TileA, typename TileB>
__device__ __forceinline__ void wgmma_ss_over_head_dim(float (&acc)[kN], const KMajorRows<TileA>& a, const TileB& b,
                                                       int b_row) {
    static_assert(TileA::kCols == TileB::kCols, "A and B share K");
#pragma unroll
    for (int kk = 0; kk < TileA::kCols / 16; kk++)
        wgmma_ss<0>(acc, a.step(kk), k_major_descriptor(b, b_row, kk), kk > 0 ? 1 : 0);
}
template <int kN, typename TileA, typename TileB>
__device__ __forceinline__ void wgmma_ss_over_head_dim(float (&acc)[kN], const TileA& a, int a_row, const TileB& b,
                                                       int b_row) {
    wgmma_ss_over_head_dim(acc, KMajorRows<TileA>(a, a_row), b, b_row);
}

// A fragments (the accumulator layout above, as attention packs P) of a warpgroup's 64 rows of a tile from
// first_row, over all its columns: rows that the S/dP products multiply by every streamed tile, read from shared
// memory once so those products read only their B operand from it (SS products at n64 read 4 KB per 32
// tensor-core cycles, the whole of shared memory's bandwidth).
template <typename Tile>
__device__ __forceinline__ void load_a_fragments(const Tile& t, int first_row, int row_in, int lane,
                                                 uint32_t (&frag)[Tile::kCols / 16][4]) {
    const uint8_t* rows = t.row(first_row);
#pragma unroll
    for (int kk = 0; kk < Tile::kCols / 16; kk++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = row_in + 8 * (i & 1), chunk = 2 * (kk % 4) + (i >> 1);
            frag[kk][i] = *reinterpret_cast<const uint32_t*>(rows + (kk / 4) * Tile::kBoxBytes + row * 128 +
                                                             sw128_chunk_offset(row, chunk) + 4 * (lane % 4));
        }
}

// acc (64 x N) = A·Bᵀ with A from registers (load_a_fragments) and B from shared memory.
template <int kN, int kK16, typename TileB>
__device__ __forceinline__ void wgmma_rs_over_head_dim(float (&acc)[kN], const uint32_t (&a)[kK16][4],
                                                       const TileB& b, int b_row) {
    static_assert(kK16 * 16 == TileB::kCols, "A and B share K");
#pragma unroll
    for (int kk = 0; kk < kK16; kk++) wgmma_rs<0>(acc, a[kk], k_major_descriptor(b, b_row, kk), kk > 0 ? 1 : 0);
}

// Column sums of 64 rows of a staged bf16 tile from first_row, on the tensor cores: sums (64 x C) = 1ᵀ·rows, A all
// ones from registers and the rows as the MN-major B operand (K = the 64 rows), so every row of the fp32 result
// holds the column sums; row 0 is warp 0's lanes 0..3, sums[4j], sums[4j + 1] being columns 8j + 2·lane and + 1.
// The bias gradients of the kernels whose output tiles are staged for a TMA store (the attention backward's dq,
// dk, dv; the GELU backward's dinp) take no pass of their own over the output this way. Issued only: the caller
// fences the tile (fence_proxy_async and a barrier) and the accumulators (wgmma_fence) before, commits and waits
// after.
template <typename Tile>
__device__ __forceinline__ void wgmma_column_sums_64_rows(float (&sums)[Tile::kCols / 2], const Tile& t,
                                                          int first_row) {
    constexpr uint32_t kOnes = 0x3F803F80u;  // two bf16 1.0
    const uint32_t ones[4] = {kOnes, kOnes, kOnes, kOnes};
    const uint64_t desc = smem_descriptor_sw128(t.row(first_row), Tile::kBoxBytes, 1024);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_rs<1>(sums, ones, descriptor_plus(desc, kk * 16 * 128), kk > 0 ? 1 : 0);
}

}  // namespace hopper
