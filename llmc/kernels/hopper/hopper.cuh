// Hopper's own machinery (sm_90), wrapped once: TMA tensor maps and bulk tensor copies, mbarriers, wgmma with its
// shared-memory matrix descriptors, setmaxnreg, named barriers and the async-proxy fence. The GEMM
// (llmc/kernels/hopper/matmul_hopper.cuh) and the Hopper attention kernels are written in these words. Each wrapper's comment
// states the rule it obeys (PTX ISA 8.x: "Tensor Copy", "mbarrier", "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate"; ../shared/design/attention.md, Step E).
// Build: wgmma and setmaxnreg exist only on the sm_90a target (`-gencode arch=compute_90a,code=sm_90a`, which the
// Makefiles pass for GPU_COMPUTE_CAPABILITY=90 and announce with -DLLMC_SM90A); on any other target the device
// wrappers compile to a trap and hopper_available() is false, so callers keep their pre-Hopper path.
#pragma once

#include <cuda.h>          // CUtensorMap and its enums (types only: the driver function comes through the runtime)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "llmc/core/cuda_common.h"
#include "llmc/core/options.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LLMC_HOPPER_DEVICE 1  // device code of the sm_90a pass: the instructions below exist
#endif

namespace hopper {

// ------------------------------------------------------------------------------------------ host side
// True when this binary carries sm_90a code and the current device is compute capability 9.0 (H100, H200), unless
// LLMC_NO_HOPPER=1 in the environment asks for the pre-Hopper kernels (a fallback, and A/B timings in one build).
inline bool hopper_available() {
#if defined(LLMC_SM90A)
    static const bool yes = [] {
        if (engine_options().no_hopper) return false;
        int dev = 0, major = 0, minor = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        return major == 9 && minor == 0;
    }();
    return yes;
#else
    return false;
#endif
}

// cuTensorMapEncodeTiled from the driver, found through the runtime (no -lcuda), once.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult found;
        cudaCheck(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || !p) {
            fprintf(stderr, "error: CUDA driver: cuTensorMapEncodeTiled not found (driver older than CUDA 12?)\n");
            exit(EXIT_FAILURE);
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

// Encodes a tiled tensor map of rank 2 or 3 (dims and byte strides innermost first, a box of `box`), or exits with
// one line saying what was asked for.
inline CUtensorMap encode_tensor_map(const void* base, CUtensorMapDataType dtype, int rank, const cuuint64_t* dims,
                                     const cuuint64_t* byte_strides, const cuuint32_t* box, CUtensorMapSwizzle swizzle) {
    CUtensorMap map;
    const cuuint32_t element_strides[3] = {1, 1, 1};
    const CUresult r = tensor_map_encoder()(&map, dtype, rank, const_cast<void*>(base), dims, byte_strides, box,
                                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "error: cuTensorMapEncodeTiled: %llu x %llu%s tensor (row stride %llu bytes), box %u x %u: error "
                        "%d (base 16-byte aligned? row stride a multiple of 16 bytes?)\n",
                (unsigned long long)dims[1], (unsigned long long)dims[0],
                rank == 3 ? (" x " + std::to_string(dims[2]) + " batches").c_str() : "",
                (unsigned long long)byte_strides[0], box[1], box[0], (int)r);
        exit(EXIT_FAILURE);
    }
    return map;
}

// A row-major matrix [rows][cols] (cols contiguous, row_stride elements apart) read or written in boxes of
// box_rows x box_cols. TMA's rules: base 16-byte aligned, row stride a multiple of 16 bytes, box sides <= 256,
// box_cols x element bytes a multiple of 16 and, with the 128-byte swizzle, at most 128 (one swizzle row).
// Reads outside the matrix fill zeros; writes outside it are dropped: partial tiles need no special case.
inline CUtensorMap make_tensor_map_2d(const void* base, CUtensorMapDataType dtype, int element_bytes, uint64_t rows,
                                      uint64_t cols, uint64_t row_stride, uint32_t box_rows, uint32_t box_cols,
                                      CUtensorMapSwizzle swizzle) {
    const cuuint64_t dims[2] = {cols, rows};
    const cuuint64_t strides[1] = {row_stride * element_bytes};
    const cuuint32_t box[2] = {box_cols, box_rows};
    return encode_tensor_map(base, dtype, 2, dims, strides, box, swizzle);
}

// A row-major [batches][rows][cols] tensor (cols contiguous; row_stride and batch_stride in elements) read or
// written in boxes of box_rows x box_cols of one batch: rows past `rows` are zero-filled on reads and dropped on
// writes within each batch (a 2D view of the same memory would spill into the next batch). Same rules as above.
inline CUtensorMap make_tensor_map_3d(const void* base, CUtensorMapDataType dtype, int element_bytes, uint64_t batches,
                                      uint64_t rows, uint64_t cols, uint64_t row_stride, uint64_t batch_stride,
                                      uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle) {
    const cuuint64_t dims[3] = {cols, rows, batches};
    const cuuint64_t strides[2] = {row_stride * element_bytes, batch_stride * element_bytes};
    const cuuint32_t box[3] = {box_cols, box_rows, 1};
    return encode_tensor_map(base, dtype, 3, dims, strides, box, swizzle);
}

// Lets `kernel` take `bytes` of dynamic shared memory (over 48 KB needs the opt-in). Launchers call it once per
// kernel: static const bool ready = (hopper::allow_dynamic_smem(kernel, bytes), true);
template <typename Kernel>
inline void allow_dynamic_smem(Kernel kernel, int bytes) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// ------------------------------------------------------------------------------------------ device side

#if defined(LLMC_HOPPER_DEVICE)
#define LLMC_HOPPER_ASM(...) asm volatile(__VA_ARGS__)
#else
#define LLMC_HOPPER_ASM(...) __trap()  // not the sm_90a pass: callers check hopper_available() first
#endif

// ---- mbarrier: a 64-bit shared-memory object that completes a phase when `count` arrivals have happened and
// the transaction bytes announced with expect_tx have landed. Waiters name the phase by its parity bit.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int count) {
    LLMC_HOPPER_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
// After initialising barriers, make them visible to the async proxy (TMA completes on them) before any use.
__device__ __forceinline__ void fence_barrier_init() {
    LLMC_HOPPER_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` more to land in this phase (the producer, before its TMA loads).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    LLMC_HOPPER_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                    : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
    LLMC_HOPPER_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so waiting for parity
// 1 returns at once: a producer starts on "empty" barriers with parity 1.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#if defined(LLMC_HOPPER_DEVICE)
    uint32_t done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(parity)
            : "memory");
    } while (!done);
#else
    __trap();
#endif
}

// ---- the kernels' common frame
// The dynamic shared memory rounded up to 1024 bytes: 128-byte-swizzled tiles start on 1024-byte boundaries (TMA's
// swizzle and the descriptors' base offset 0 assume it). Launch with 1024 bytes to spare. Rounded by adding to the
// shared array's own pointer, not through an integer, so the compiler still knows the result is shared memory: plain
// loads and stores through it compile to LDS/STS, not the generic LD/ST that an integer round trip leaves.
__device__ __forceinline__ uint8_t* smem_align_1024(uint8_t* raw) {
    return raw + ((1024 - (smem_addr(raw) & 1023)) & 1023);
}
// The barriers of a ring of `stages` buffers between producers and consumer warps: full[s] completes on the
// producers' arrivals (the TMA thread's arrive_expect_tx, plus one per further producer warp) and the bytes
// landing, empty[s] on one arrival per consumer warp. One thread calls it (after any barriers of its own), then
// the block synchronises.
__device__ __forceinline__ void ring_barriers_init(uint64_t* full, uint64_t* empty, int stages, int consumer_warps,
                                                   int producers = 1) {
    for (int s = 0; s < stages; s++) {
        mbarrier_init(&full[s], producers);
        mbarrier_init(&empty[s], consumer_warps);
    }
    fence_barrier_init();
}
// Where 16-byte chunk `chunk` (0..7) of row `row` sits inside that row of a tile of 128-byte rows with the 128-byte
// swizzle, as TMA reads and writes it: the chunk index XORed with the row's position in its 8-row atom. The chunk's
// address is tile + row * 128 + sw128_chunk_offset(row, chunk).
__device__ __forceinline__ int sw128_chunk_offset(int row, int chunk) { return (chunk ^ (row % 8)) * 16; }

// ---- TMA: one thread moves a whole box. Coordinates are (column, row), innermost first, in elements; the map
// is a __grid_constant__ kernel parameter (its address must stay in parameter space).
// global -> shared, completing `bytes of the box` on bar (the box's full size counts, zero-filled parts too).
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int col, int row) {
    LLMC_HOPPER_ASM(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(smem_addr(dst)), "l"(map), "r"(col), "r"(row), "r"(smem_addr(bar))
        : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int col, int row,
                                            int batch) {
    LLMC_HOPPER_ASM(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];\n" ::"r"(smem_addr(dst)), "l"(map), "r"(col), "r"(row), "r"(batch), "r"(smem_addr(bar))
        : "memory");
}
// shared -> global (rows and columns past the matrix are not written); tracked as a bulk group of this thread.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int col, int row) {
    LLMC_HOPPER_ASM("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];\n"
                    ::"l"(map), "r"(col), "r"(row), "r"(smem_addr(src))
                    : "memory");
}
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* src, int col, int row, int batch) {
    LLMC_HOPPER_ASM("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                    ::"l"(map), "r"(col), "r"(row), "r"(batch), "r"(smem_addr(src))
                    : "memory");
}
// shared -> global element-wise add (fp32 partial sums, e.g. the attention backward's dQ), a bulk group too.
__device__ __forceinline__ void tma_reduce_add_2d(const CUtensorMap* map, const void* src, int col, int row) {
    LLMC_HOPPER_ASM("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];\n"
                    ::"l"(map), "r"(col), "r"(row), "r"(smem_addr(src))
                    : "memory");
}
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap* map, const void* src, int col, int row, int batch) {
    LLMC_HOPPER_ASM("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                    ::"l"(map), "r"(col), "r"(row), "r"(batch), "r"(smem_addr(src))
                    : "memory");
}
__device__ __forceinline__ void tma_store_commit() { LLMC_HOPPER_ASM("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's bulk groups still read their shared-memory source (so it may be
// overwritten); the global writes may still be in flight.
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
    LLMC_HOPPER_ASM("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// Waits until at most kPending bulk groups are incomplete (their global writes done).
template <int kPending>
__device__ __forceinline__ void tma_store_wait() {
    LLMC_HOPPER_ASM("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}
// Hints the tensor map into the cache before its first use (it lives in kernel parameter space).
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
    LLMC_HOPPER_ASM("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// ---- proxies: ordinary stores (st.shared, stmatrix) that TMA or wgmma read next need this fence in each writing
// thread, then a barrier, because those units read through the async proxy.
__device__ __forceinline__ void fence_proxy_async() { LLMC_HOPPER_ASM("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- a semaphore in global memory that orders bulk writes of different blocks (the deterministic attention
// backward adds its dQ partial sums in a fixed block order). The writer completes its bulk group
// (tma_store_wait<0>), then releases; the next waits with acquire before issuing its own. The proxy fences order
// the async proxy's global writes against the generic proxy's semaphore accesses on both sides.
__device__ __forceinline__ void semaphore_wait_at_least(const int* sem, int target) {
#if defined(LLMC_HOPPER_DEVICE)
    int v;
    do {
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(sem) : "memory");
    } while (v < target);
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void semaphore_release_add(int* sem, int count) {
#if defined(LLMC_HOPPER_DEVICE)
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(sem), "r"(count) : "memory");
#else
    __trap();
#endif
}

// ---- named barriers 1..15 (0 is __syncthreads): `threads` (a multiple of 32) take part. sync waits; arrive
// signals without waiting (a producer of a hand-off), as in FlashAttention-3's ping-pong of two warpgroups.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- setmaxnreg: a warpgroup gives registers back (dec) or takes them (inc). Every thread of the warpgroup
// executes it; it takes effect only in a kernel with a register cap at entry (__launch_bounds__(threads, 1)).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() { LLMC_HOPPER_ASM("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() { LLMC_HOPPER_ASM("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }
// Whether one producer warpgroup at producer_regs and `consumers` warpgroups at consumer_regs fit the block's launch
// allocation under __launch_bounds__(threads, 1): the register file split evenly, per thread a multiple of 8 (168
// at 384 threads). setmaxnreg only moves registers within that allocation; a sum above it (e.g. 32 + 2 x 240 at 384
// threads, though 128 x 512 = 64K) leaves setmaxnreg.inc waiting forever.
constexpr bool setmaxnreg_fits(int consumers, int producer_regs, int consumer_regs) {
    const int threads = 128 * (1 + consumers), at_launch = 65536 / threads / 8 * 8;
    return producer_regs + consumers * consumer_regs <= (1 + consumers) * at_launch;
}

// ---- wgmma: a warpgroup (4 consecutive warps, the first a multiple of 4) multiplies m64 x nN x k16 bf16 into
// fp32 registers, asynchronously. fence before the first wgmma that touches accumulators other code wrote;
// commit closes a group of issued wgmmas; wait<N> returns when at most N groups are still running (only then
// may the accumulators be read or the operands' shared memory be reused).
__device__ __forceinline__ void wgmma_fence() { LLMC_HOPPER_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { LLMC_HOPPER_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() { LLMC_HOPPER_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory"); }
// Pins an accumulator's registers here. wgmma_wait orders memory, not registers: the wgmma asm names the
// accumulators as operands but the wait does not, so the compiler may move a read of an accumulator above the
// wait that makes it valid. Call it after each wait on the accumulators read next (as CUTLASS's
// warpgroup_fence_operand). (It does not guard against ptxas reusing loop-invariant A-fragment registers, the
// failure seen in the attention backward: see p_and_ds there.)
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

// Causal masks in the attention kernels test (column − row + delta > 0) per element, delta being the tile's first key
// minus its first query; tiles that do not reach the diagonal pass kNoMask, which no column − row difference
// overcomes.
constexpr int kNoMask = -(1 << 20);

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
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB), "n"(kTransA));
}

// acc (64 x N) = A·Bᵀ over a head dimension of kHS, both operands K-major in kHS/64 sub-tiles of [rows][64] bf16
// (128-byte swizzle), as the attention kernels keep Q, K, V, dO: `a` is the warpgroup's first row in A's first
// sub-tile, a_rows and b_rows the sub-tiles' row counts. Issued only (the caller fences, commits and waits).
// k16 step kk of such an operand: sub-tile kk / 4, 32 bytes per step inside its 128-byte rows.
__device__ __forceinline__ uint64_t head_dim_descriptor(const uint8_t* tile, int rows, int kk) {
    return descriptor_plus(smem_descriptor_sw128(tile), (kk / 4) * rows * 128 + (kk % 4) * 32);
}

template <int kHS, int kN>
__device__ __forceinline__ void wgmma_ss_over_head_dim(float (&acc)[kN], const uint8_t* a, int a_rows, const uint8_t* b,
                                                       int b_rows) {
#pragma unroll
    for (int kk = 0; kk < kHS / 16; kk++)
        wgmma_ss<0>(acc, head_dim_descriptor(a, a_rows, kk), head_dim_descriptor(b, b_rows, kk), kk > 0 ? 1 : 0);
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

// A fragments (the accumulator layout above, as attention packs P) of a warpgroup's 64 rows of a [kHS/64][rows][64]
// tile (128-byte swizzle) over the whole head dimension: rows that the S/dP products multiply by every streamed
// tile, read from shared memory once so those products read only their B operand from it (SS products at n64 read
// 4 KB per 32 tensor-core cycles, the whole of shared memory's bandwidth).
template <int kHS>
__device__ __forceinline__ void load_a_fragments(const uint8_t* rows, int row_count, int row_in, int lane,
                                                 uint32_t (&frag)[kHS / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < kHS / 16; kk++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = row_in + 8 * (i & 1), chunk = 2 * (kk % 4) + (i >> 1);
            frag[kk][i] = *reinterpret_cast<const uint32_t*>(rows + (kk / 4) * row_count * 128 + row * 128 +
                                                             sw128_chunk_offset(row, chunk) + 4 * (lane % 4));
        }
}

// acc (64 x N) = A·Bᵀ over the head dimension with A from registers (load_a_fragments) and B K-major in shared
// memory as in wgmma_ss_over_head_dim. Issued only.
template <int kHS, int kN>
__device__ __forceinline__ void wgmma_rs_over_head_dim(float (&acc)[kN], const uint32_t (&a)[kHS / 16][4],
                                                       const uint8_t* b, int b_rows) {
#pragma unroll
    for (int kk = 0; kk < kHS / 16; kk++) wgmma_rs<0>(acc, a[kk], head_dim_descriptor(b, b_rows, kk), kk > 0 ? 1 : 0);
}

// Column sums of 64 rows of a staged bf16 tile (128-byte swizzle, 64-column boxes box_bytes apart), on the tensor
// cores: sums (64 x N) = 1ᵀ·rows, A all ones from registers and the rows as the MN-major B operand (K = the 64 rows),
// so every row of the fp32 result holds the column sums; row 0 is warp 0's lanes 0..3, sums[4j], sums[4j + 1] being
// columns 8j + 2·lane and + 1. The bias gradients of the kernels whose output tiles are staged for a TMA store (the
// attention backward's dq, dk, dv; the GELU backward's dinp) take no pass of their own over the output this way.
// Issued only: the caller fences the tile (fence_proxy_async and a barrier) and the accumulators (wgmma_fence)
// before, commits and waits after.
template <int N>
__device__ __forceinline__ void wgmma_column_sums_64_rows(float (&sums)[N], const uint8_t* rows, uint32_t box_bytes) {
    constexpr uint32_t kOnes = 0x3F803F80u;  // two bf16 1.0
    const uint32_t ones[4] = {kOnes, kOnes, kOnes, kOnes};
    const uint64_t desc = smem_descriptor_sw128(rows, box_bytes, 1024);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_rs<1>(sums, ones, descriptor_plus(desc, kk * 16 * 128), kk > 0 ? 1 : 0);
}

#undef LLMC_HOPPER_ASM

}  // namespace hopper
