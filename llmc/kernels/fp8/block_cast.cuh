// FP8 casts with a scale per block instead of per tensor (DeepSeek-V3's fine-grained quantization; cuBLASLt's
// VEC128_32F and BLK128x128_32F scale modes on Hopper, llmc/kernels/matmul/matmul_fp8.cuh): x (rows, cols) in floatX,
// K-major as a GEMM operand is (cols = K contiguous), cut into 1x128 blocks along K (activations and gradients: an
// outlier costs the precision of its own 128 values only, so E4M3 can serve gradients too) or 128x128 blocks
// (weights: W's transpose has the same blocks, so its bytes and its grid are W's transposed, with the grid's own
// padding). Each block's scale is the power of two its own amax gives
// (fp8_scale_from_amax, margin 0; an all-zero block keeps scale 1), so scaling rounds nothing; the descale (1 /
// scale) is written where cuBLASLt reads it:
//   1x128    descales[(c / 128) * ld + r],  ld = rows rounded up to 4      (TransformerEngine's "GEMM-ready" order)
//   128x128  descales[(r / 128) * ld + c / 128],  ld = ceil(cols / 128) rounded up to 4
// The last block of a row (cols % 128) and the last band of rows (rows % 128) may be partial. fp8_block_cast writes
// y alone; fp8_block_cast_transpose writes y and yT, each in 1x128 blocks of its own K. A block holding a
// value that is not finite gets a NaN descale, so the GEMM's output says so (as the per-tensor casts do). One pass:
// each block is read once, its amax taken in registers, its bytes and its descale written. (--use_fast_math flushes
// a denormal input to zero: a block of denormals gets descale 1 and zero codes.)
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "llmc/core/cuda_common.h"
#include "llmc/core/fp8.h"
#include "llmc/kernels/fp8/cast_transpose.cuh"
#include "llmc/kernels/fp8/pack.cuh"

constexpr int kFp8Block = 128;
LLMC_FP8_HD inline int fp8_blocks_of(int n) { return (n + kFp8Block - 1) / kFp8Block; }

// The descale grid's leading dimension and size in floats (padding included), and where block (r, c)'s descale is.
LLMC_FP8_HD inline size_t fp8_block_ld(int rows, int cols, Fp8Granularity b) {
    return b == Fp8Granularity::k1x128 ? (size_t)(rows + 3) / 4 * 4 : (size_t)(fp8_blocks_of(cols) + 3) / 4 * 4;
}
inline size_t fp8_block_descales(int rows, int cols, Fp8Granularity b) {
    return (size_t)(b == Fp8Granularity::k1x128 ? fp8_blocks_of(cols) : fp8_blocks_of(rows)) * fp8_block_ld(rows, cols, b);
}
LLMC_FP8_HD inline size_t fp8_block_index(int r, int c, size_t ld, Fp8Granularity b) {
    return b == Fp8Granularity::k1x128 ? (size_t)(c / kFp8Block) * ld + r : (size_t)(r / kFp8Block) * ld + c / kFp8Block;
}

namespace fp8_block_detail {

LLMC_FP8_HD inline float descale_of(float amax, bool finite, Fp8Format F) {
    // in double: exact for a power of two, and untouched by --use_fast_math
    return finite ? (float)(1.0 / (double)fp8_scale_from_amax(amax, F, 0, 1.f)) : NAN;
}

// 1x128: a warp per block, 4 values a lane (cols % 4 == 0, so a lane's 4 are all in or all out of the row).
template <Fp8Format F>
__global__ void cast_1x128_kernel(const floatX* x, int rows, int cols, uint8_t* y, float* descales, size_t ld) {
    const int lane = threadIdx.x % kWarpSize;
    const int blocks_per_row = fp8_blocks_of(cols);
    const long long block = (long long)blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (block >= (long long)rows * blocks_per_row) return;
    const int r = (int)(block / blocks_per_row), c = (int)(block % blocks_per_row) * kFp8Block + 4 * lane;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (c < cols) {
        const floatX* p = x + (size_t)r * cols + c;
        for (int i = 0; i < 4; i++) v[i] = (float)p[i];
    }
    float amax = 0.f;
    bool finite = true;
    for (int i = 0; i < 4; i++) amax = fmaxf(amax, fabsf(v[i])), finite = finite && isfinite(v[i]);
    for (int o = kWarpSize / 2; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    finite = __all_sync(0xffffffffu, finite);
    const float scale = fp8_scale_from_amax(amax, F, 0, 1.f);
    if (c < cols)
        *reinterpret_cast<uint32_t*>(y + (size_t)r * cols + c) = fp8x4<F>(v[0] * scale, v[1] * scale, v[2] * scale,
                                                                          v[3] * scale);
    if (lane == 0) descales[fp8_block_index(r, c, ld, Fp8Granularity::k1x128)] = descale_of(amax, finite, F);
}

// 128x128: a block of 256 threads per tile; 16 threads a row, 8 values each (cols % 8 == 0), 16 rows a pass, 8 passes.
template <Fp8Format F>
__global__ void __launch_bounds__(256) cast_128x128_kernel(const floatX* x, int rows, int cols, uint8_t* y,
                                                           float* descales, size_t ld) {
    constexpr int kPasses = kFp8Block / 16;
    const int r0 = blockIdx.y * kFp8Block + threadIdx.x / 16, c = blockIdx.x * kFp8Block + 8 * (threadIdx.x % 16);
    float v[kPasses][8];
    float amax = 0.f;
    bool finite = true;
    for (int p = 0; p < kPasses; p++) {
        const int r = r0 + 16 * p;
        for (int i = 0; i < 8; i++) v[p][i] = 0.f;
        if (r < rows && c < cols) {
            const floatX* src = x + (size_t)r * cols + c;
            for (int i = 0; i < 8; i++) v[p][i] = (float)src[i];
        }
        for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(v[p][i])), finite = finite && isfinite(v[p][i]);
    }
    __shared__ float warp_amax[8];
    __shared__ int warp_finite[8];
    for (int o = kWarpSize / 2; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    finite = __all_sync(0xffffffffu, finite);
    const int warp = threadIdx.x / kWarpSize;
    if (threadIdx.x % kWarpSize == 0) warp_amax[warp] = amax, warp_finite[warp] = finite;
    __syncthreads();
    amax = 0.f, finite = true;
    for (int w = 0; w < 8; w++) amax = fmaxf(amax, warp_amax[w]), finite = finite && warp_finite[w];
    const float scale = fp8_scale_from_amax(amax, F, 0, 1.f);
    for (int p = 0; p < kPasses; p++) {
        const int r = r0 + 16 * p;
        if (r >= rows || c >= cols) continue;
        const uint32_t lo = fp8x4<F>(v[p][0] * scale, v[p][1] * scale, v[p][2] * scale, v[p][3] * scale);
        const uint32_t hi = fp8x4<F>(v[p][4] * scale, v[p][5] * scale, v[p][6] * scale, v[p][7] * scale);
        *reinterpret_cast<uint2*>(y + (size_t)r * cols + c) = make_uint2(lo, hi);
    }
    if (threadIdx.x == 0)
        descales[fp8_block_index(blockIdx.y * kFp8Block, blockIdx.x * kFp8Block, ld, Fp8Granularity::k128x128)] =
            descale_of(amax, finite, F);
}

// y and yT at once, both K-major operands in 1x128 blocks (an activation or a gradient that is both a GEMM's A and,
// transposed, a weight gradient's operand): a block of 256 threads per 128 x 128 tile of x, staged in shared memory;
// y's blocks are the tile's rows (16 threads a row, 8 values each), yT's its columns (2 threads a column, 64 rows
// each, 16-byte stores).
// BF16 builds only (FP8 training's; a float tile would be 64 KB of static shared memory): elsewhere it does nothing
// and fp8_block_cast_transpose refuses. kGelu: x is a GELU's input and gelu(x), as gelu_forward stores it, is cast.
template <Fp8Format F, bool kGelu>
__global__ void __launch_bounds__(256) cast_transpose_1x128_kernel(const floatX* x, int rows, int cols, uint8_t* y,
                                                                   float* y_descales, uint8_t* yT,
                                                                   float* yT_descales) {
    if constexpr (!kFloatXIsBF16) return;
    __shared__ __nv_bfloat16 tile[kFp8Block][kFp8Block];
    const int r0 = blockIdx.y * kFp8Block, c0 = blockIdx.x * kFp8Block;
    const int tr = threadIdx.x / 16, tc = 8 * (threadIdx.x % 16);
    for (int p = 0; p < kFp8Block / 16; p++) {  // rows tr + 16p: load, then y's row block
        const int r = r0 + tr + 16 * p, c = c0 + tc;
        float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (r < rows && c < cols)
            for (int i = 0; i < 8; i++)
                v[i] = fp8_cast_detail::operand_value<kGelu, false>(x[(size_t)r * cols + c + i], x[0]);
        for (int i = 0; i < 8; i++) tile[tr + 16 * p][tc + i] = __float2bfloat16(v[i]);  // exact: v is a bf16 value
        float amax = 0.f;
        bool finite = true;
        for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(v[i])), finite = finite && isfinite(v[i]);
        for (int o = 8; o > 0; o /= 2) {  // the 16 threads of the row (a half warp)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            finite = __shfl_xor_sync(0xffffffffu, (int)finite, o) && finite;
        }
        const float scale = fp8_scale_from_amax(amax, F, 0, 1.f);
        if (r < rows && c < cols) {
            const uint32_t lo = fp8x4<F>(v[0] * scale, v[1] * scale, v[2] * scale, v[3] * scale);
            const uint32_t hi = fp8x4<F>(v[4] * scale, v[5] * scale, v[6] * scale, v[7] * scale);
            *reinterpret_cast<uint2*>(y + (size_t)r * cols + c) = make_uint2(lo, hi);
        }
        if (threadIdx.x % 16 == 0 && r < rows)
            y_descales[fp8_block_index(r, c0, fp8_block_ld(rows, cols, Fp8Granularity::k1x128), Fp8Granularity::k1x128)] =
                descale_of(amax, finite, F);
    }
    __syncthreads();
    // yT: column c0 + tc2 of x is row c of yT; its 128 values from rows r0.. are one block of yT's K (= x's rows)
    const int tc2 = threadIdx.x / 2, half = threadIdx.x % 2, c = c0 + tc2;
    float amax = 0.f;
    bool finite = true;
    for (int i = 0; i < 64; i++) {
        const float v = (float)tile[64 * half + i][tc2];
        amax = fmaxf(amax, fabsf(v)), finite = finite && isfinite(v);
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    finite = __shfl_xor_sync(0xffffffffu, (int)finite, 1) && finite;
    const float scale = fp8_scale_from_amax(amax, F, 0, 1.f);
    if (c >= cols) return;
    for (int q = 0; q < 4; q++) {  // 16 rows of x at a time: 16 bytes of yT
        const int rr = 64 * half + 16 * q;
        if (r0 + rr >= rows) break;
        uint32_t w[4];
        for (int j = 0; j < 4; j++)
            w[j] = fp8x4<F>((float)tile[rr + 4 * j][tc2] * scale, (float)tile[rr + 4 * j + 1][tc2] * scale,
                            (float)tile[rr + 4 * j + 2][tc2] * scale, (float)tile[rr + 4 * j + 3][tc2] * scale);
        // rows % 16 == 0: a group of 16 is all in or all out
        *reinterpret_cast<uint4*>(yT + (size_t)c * rows + r0 + rr) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    if (half == 0)
        yT_descales[fp8_block_index(c, r0, fp8_block_ld(cols, rows, Fp8Granularity::k1x128), Fp8Granularity::k1x128)] =
            descale_of(amax, finite, F);
}

}  // namespace fp8_block_detail

// x (rows, cols) to F with a scale per block: y (rows, cols) bytes, descales as the header's grid (fp8_block_descales
// floats; the padding is left as it is). cols a multiple of 8 (1x128: of 4 would do), y 8-byte aligned.
template <Fp8Format F>
inline void fp8_block_cast(const floatX* x, int rows, int cols, Fp8Granularity blocks, uint8_t* y, float* descales,
                           cudaStream_t stream) {
    if (rows < 1 || cols < 8 || cols % 8 != 0 || (uintptr_t)y % 8 != 0 || blocks == Fp8Granularity::kTensor) {
        fprintf(stderr, "error: fp8_block_cast: %d x %d (cols a multiple of 8, y 8-byte aligned, 1x128 or 128x128 "
                "blocks)\n", rows, cols);
        exit(EXIT_FAILURE);
    }
    using namespace fp8_block_detail;
    const size_t ld = fp8_block_ld(rows, cols, blocks);
    const int col_blocks = fp8_blocks_of(cols);
    if (blocks == Fp8Granularity::k1x128) {
        const long long warps = (long long)rows * col_blocks;
        cast_1x128_kernel<F><<<(unsigned)((warps + 7) / 8), 256, 0, stream>>>(x, rows, cols, y, descales, ld);
    } else {
        const dim3 grid(col_blocks, fp8_blocks_of(rows));
        cast_128x128_kernel<F><<<grid, 256, 0, stream>>>(x, rows, cols, y, descales, ld);
    }
    cudaCheck(cudaGetLastError());
}

// x (rows, cols) to y (rows, cols) and yT (cols, rows), both in 1x128 blocks along their own rows (K), each with its
// descale grid (y's: fp8_block_descales(rows, cols, k1x128); yT's: fp8_block_descales(cols, rows, k1x128)). rows a
// multiple of 16 (yT's 16-byte stores), cols of 8. kGelu: gelu(x) is cast (fcproj's input from fc's output).
template <Fp8Format F, bool kGelu = false>
inline void fp8_block_cast_transpose(const floatX* x, int rows, int cols, uint8_t* y, float* y_descales, uint8_t* yT,
                                     float* yT_descales, cudaStream_t stream) {
    if (!kFloatXIsBF16 || rows < 16 || rows % 16 != 0 || cols < 8 || cols % 8 != 0 ||
        ((uintptr_t)y | (uintptr_t)yT) % 16 != 0) {
        fprintf(stderr, "error: fp8_block_cast_transpose: %d x %d (a BF16 build, rows a multiple of 16, cols of 8, y "
                "and yT 16-byte aligned)\n", rows, cols);
        exit(EXIT_FAILURE);
    }
    const dim3 grid(fp8_blocks_of(cols), fp8_blocks_of(rows));
    fp8_block_detail::cast_transpose_1x128_kernel<F, kGelu><<<grid, 256, 0, stream>>>(x, rows, cols, y, y_descales, yT,
                                                                                       yT_descales);
    cudaCheck(cudaGetLastError());
}

// A 128x128 grid for x (rows, cols) as the grid of its transpose (cols, rows): a weight's Wᵀ (the input gradient's
// operand) has W's blocks, so its bytes are W's transposed (fp8_transpose) and its grid is this.
__global__ void fp8_block_grid_transpose_kernel(const float* grid, int row_blocks, int col_blocks, size_t ld,
                                                float* gridT, size_t ldT) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= row_blocks * col_blocks) return;
    const int rb = i / col_blocks, cb = i % col_blocks;
    gridT[(size_t)cb * ldT + rb] = grid[(size_t)rb * ld + cb];
}
inline void fp8_block_grid_transpose(const float* grid, int rows, int cols, float* gridT, cudaStream_t stream) {
    const int rb = fp8_blocks_of(rows), cb = fp8_blocks_of(cols);
    fp8_block_grid_transpose_kernel<<<(rb * cb + 255) / 256, 256, 0, stream>>>(
        grid, rb, cb, fp8_block_ld(rows, cols, Fp8Granularity::k128x128), gridT,
        fp8_block_ld(cols, rows, Fp8Granularity::k128x128));
    cudaCheck(cudaGetLastError());
}
