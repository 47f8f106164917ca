// Column sums of a matrix, deterministic: the bias gradient of a linear layer (dbias = Σ_rows dout) wherever no
// GEMM epilogue computes it, and the finishing pass of the kernels that leave per-tile partial sums (the LayerNorm
// backward, the Hopper attention and GELU backward).
#pragma once

#include "llmc/core/cuda_common.h"

// dbias[j] += scale · Σ_i dout[i][j] over N rows. Each thread sums a 16-byte group of adjacent columns over a
// fixed chunk of rows into fp32 partials (one 128-bit load per row: the sum is bound by reading dout once),
// then a second kernel adds the chunks in order. No atomics, so results repeat bit for bit.
// Chunks of 32 rows give enough blocks to keep the memory system busy at GPT-2 widths (768..3072 columns).
constexpr int kColumnSumRowsPerChunk = 32;
inline int column_sum_num_chunks(int rows) { return ceil_div(rows, kColumnSumRowsPerChunk); }
inline size_t column_sum_scratch_floats(int rows, int cols) { return (size_t)column_sum_num_chunks(rows) * cols; }

// One thread per group of Packed128<T>::size columns; needs cols % size == 0 and a 16-byte aligned x.
template <typename T>
__global__ void column_sum_partials_kernel(float* partials, const T* x, int rows, int cols) {
    constexpr int kVec = Packed128<T>::size;
    const int col0 = (blockIdx.x * blockDim.x + threadIdx.x) * kVec;
    const int chunk = blockIdx.y;
    if (col0 >= cols) return;
    const int r0 = chunk * kColumnSumRowsPerChunk;
    const int r1 = min(rows, r0 + kColumnSumRowsPerChunk);
    float acc[kVec] = {};
    for (int r = r0; r < r1; r++) {
        const Packed128<T> v = load128(x + (size_t)r * cols + col0);
        for (int k = 0; k < kVec; k++) acc[k] += to_float(v[k]);
    }
    for (int k = 0; k < kVec; k++) partials[(size_t)chunk * cols + col0 + k] = acc[k];
}

// Fallback for widths that are not a multiple of the vector: one thread per column.
template <typename T>
__global__ void column_sum_partials_scalar_kernel(float* partials, const T* x, int rows, int cols) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int chunk = blockIdx.y;
    if (col >= cols) return;
    const int r0 = chunk * kColumnSumRowsPerChunk;
    const int r1 = min(rows, r0 + kColumnSumRowsPerChunk);
    float acc = 0.0f;
    for (int r = r0; r < r1; r++) acc += to_float(x[(size_t)r * cols + col]);
    partials[(size_t)chunk * cols + col] = acc;
}

// out[j] += scale · Σ_k partials[k][j] over num_chunks partial rows, added in a fixed order (ordered_column_sum).
template <typename T>
__global__ void __launch_bounds__(kWarpSize * kColumnSumSplit)
    column_sum_finish_kernel(T* out, const float* partials, int num_chunks, int cols, float scale) {
    const int col = blockIdx.x * kWarpSize + threadIdx.x;
    const float acc = ordered_column_sum(partials, num_chunks, cols, col, col < cols);
    if (threadIdx.y != 0 || col >= cols) return;
    out[col] = from_float<T>(to_float(out[col]) + scale * acc);
}

template <typename T>
inline void column_sum_finish(T* out, const float* partials, int num_chunks, int cols, float scale,
                              cudaStream_t stream = 0) {
    column_sum_finish_kernel<<<ceil_div(cols, kWarpSize), dim3(kWarpSize, kColumnSumSplit), 0, stream>>>(
        out, partials, num_chunks, cols, scale);
    cudaCheckLaunch();
}

// out[j] += scale · Σ_i x[i][j]. scratch: column_sum_scratch_floats(rows, cols) floats.
inline void column_sum_accumulate(floatX* out, const floatX* x, int rows, int cols, float scale, float* scratch,
                                  cudaStream_t stream = 0) {
    constexpr int kVec = Packed128<floatX>::size;
    const int threads = 128;
    const int chunks = column_sum_num_chunks(rows);
    if (cols % kVec == 0 && (uintptr_t)x % 16 == 0) {
        const dim3 grid(ceil_div(cols / kVec, threads), chunks);
        column_sum_partials_kernel<<<grid, threads, 0, stream>>>(scratch, x, rows, cols);
    } else {
        column_sum_partials_scalar_kernel<<<dim3(ceil_div(cols, threads), chunks), threads, 0, stream>>>(scratch, x, rows,
                                                                                                        cols);
    }
    cudaCheckLaunch();
    column_sum_finish(out, scratch, chunks, cols, scale, stream);
}
