// TMA, Hopper's tensor memory accelerator: tensor maps built on the host (a matrix's shape, strides, box and swizzle)
// and the bulk copies one thread issues with them: global -> shared completing on an mbarrier (pipeline.cuh),
// shared -> global as stores or element-wise adds, tracked as bulk groups. PTX ISA 8.x, "Tensor Copy".
#pragma once

#include <cuda.h>          // CUtensorMap and its enums (types only: the driver function comes through the runtime)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "llmc/hopper/arch.cuh"

namespace hopper {

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
                                     const cuuint64_t* byte_strides, const cuuint32_t* box,
                                     CUtensorMapSwizzle swizzle) {
    CUtensorMap map;
    const cuuint32_t element_strides[3] = {1, 1, 1};
    const CUresult r = tensor_map_encoder()(&map, dtype, rank, const_cast<void*>(base), dims, byte_strides, box,
                                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr,
                "error: cuTensorMapEncodeTiled: %llu x %llu%s tensor (row stride %llu bytes), box %u x %u: error %d "
                "(base 16-byte aligned? row stride a multiple of 16 bytes?)\n",
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

// A map that kernels write through (TMA stores and reduce-adds). compute-sanitizer's initcheck does not see TMA's
// writes (as it does not see cuBLASLt's: llmc/kernels/matmul/matmul.cuh), so the memory the map covers is marked initialized
// on `stream` as the map is made; initcheck keeps checking every other write and every read.
inline CUtensorMap make_store_map_2d(void* base, CUtensorMapDataType dtype, int element_bytes, uint64_t rows,
                                     uint64_t cols, uint64_t row_stride, uint32_t box_rows, uint32_t box_cols,
                                     CUtensorMapSwizzle swizzle, cudaStream_t stream) {
    sanitizer_mark_initialized(base, ((rows - 1) * row_stride + cols) * element_bytes, stream);
    return make_tensor_map_2d(base, dtype, element_bytes, rows, cols, row_stride, box_rows, box_cols, swizzle);
}
inline CUtensorMap make_store_map_3d(void* base, CUtensorMapDataType dtype, int element_bytes, uint64_t batches,
                                     uint64_t rows, uint64_t cols, uint64_t row_stride, uint64_t batch_stride,
                                     uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle,
                                     cudaStream_t stream) {
    sanitizer_mark_initialized(base, ((batches - 1) * batch_stride + (rows - 1) * row_stride + cols) * element_bytes,
                               stream);
    return make_tensor_map_3d(base, dtype, element_bytes, batches, rows, cols, row_stride, batch_stride, box_rows,
                              box_cols, swizzle);
}

// ---- device side: one thread moves a whole box. Coordinates are (column, row), innermost first, in elements; the
// map is a __grid_constant__ kernel parameter (its address must stay in parameter space).
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
// global -> shared without a tensor map: `bytes` contiguous bytes (a multiple of 16; both addresses 16-byte aligned),
// completing them on bar ("Bulk copy", cp.async.bulk: a decode step's weight rows, already contiguous).
__device__ __forceinline__ void bulk_load_1d(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    LLMC_HOPPER_ASM("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                    ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar))
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
// shared -> global element-wise add (fp32 partial sums: the fused attention backward's dQ), a bulk group too.
__device__ __forceinline__ void tma_reduce_add_2d(const CUtensorMap* map, const void* src, int col, int row) {
    LLMC_HOPPER_ASM("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];\n"
                    ::"l"(map), "r"(col), "r"(row), "r"(smem_addr(src))
                    : "memory");
}
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap* map, const void* src, int col, int row,
                                                  int batch) {
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


}  // namespace hopper
