// One pass over a (rows, cols) row-major floatX tensor x, for FP8 GEMMs (which on Hopper take both operands K-major,
// cuBLASLt's TN): y = fp8(x * scale) in x's layout, yT = the same bytes transposed (cols, rows), either one optional,
// and amax = max |x| folded into *amax, the statistic the next scale comes from (llmc/core/fp8.h). x * scale is exact
// (scale is a power of two) and the conversion rounds to nearest even, saturating (cvt.rn.satfinite), so the bytes
// equal llmc/core/fp8.h's fp8_encode. The amax: llmc/kernels/fp8/amax.cuh (deterministic).
// The same of gelu(x) (kGelu: x is a GELU's input, each value taken through gelu_forward's GELU and rounded to floatX
// as it stores them), so a GELU's output is cast (and its amax taken) without being written in bf16. And of the GELU's
// backward (kDGelu: x is dL/d(GELU output), aux the GELU's input, each value x·gelu'(aux) rounded to floatX as
// gelu_backward_inplace stores it), so the input gradient of the GELU is cast without being written in bf16.
// Optionally the column sums of x too (a linear layer's bias gradient, from the output gradient the cast reads
// anyway): each tile's, fp32, into colsum[tile row][col], for column_sum_finish to add in order (deterministic).
// Tiles of 64 rows x 16·kVec columns (256 threads, kVec consecutive values each in 4 rows), staged in shared memory
// for the transpose. kVec 8 (one 16-byte load of bf16: tiles of 64 x 128, every load issued before any is used)
// where cols is a multiple of 8 and x and y are aligned to it, else 4: the wide tiles ran at 0.87-0.89 of a copy
// where 64 x 64 ran at 0.73-0.74 (dev/cuda/fp8_cast, PERFORMANCE.md). The dGELU cast (two inputs, up to three
// outputs) keeps 64 x 64 tiles with its loads where they are used until the wide form is measured for it: at 64 x
// 128 it takes 108 registers a thread. With neither y nor yT asked for, a reduction kernel of its own (amax_kernel).
// rows and cols multiples of 4 (every GPT-2 GEMM operand: B*T and multiples of 64).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "llmc/core/cuda_common.h"
#include "llmc/core/fp8.h"
#include "llmc/kernels/fp8/amax.cuh"
#include "llmc/kernels/fp8/pack.cuh"
#include "llmc/kernels/gelu.cuh"

namespace fp8_cast_detail {

constexpr int kTile = 64;            // a tile's rows (and the column sums' chunk); its columns: 16·kVec
constexpr int kTileRowsPerPass = 16;  // 256 threads: 16 rows of 16 groups of kVec columns at a time
static_assert(kAmaxBlockThreads == 256, "the cast kernels run 256-thread blocks and fold their amax as such");

// Where a cast's scale comes from: *scale (delayed scaling; null: 1), or, when from_amax is set, the tensor's own
// amax taken by an earlier pass (current scaling), in which case block (0, 0) also writes it and its inverse to
// scale_out and descale_out (every block computes the same power of two). overflow_descale (delayed scaling): the
// descale the tensor's GEMMs read, set to NaN by any block that meets a value that is not finite (the cast saturates
// it), so this step's GEMMs, loss or norm say so, as with current scaling, not the next step's.
struct ScaleSource {
    const float* scale = nullptr;
    const float* from_amax = nullptr;
    int margin = 0;
    float* scale_out = nullptr;
    float* descale_out = nullptr;
    float* overflow_descale = nullptr;
};

// The value a cast reads at one element x (with aux, the GELU's input, under kDGelu): x; gelu(x) as gelu_forward
// stores it (kGelu); x·gelu'(aux) as gelu_backward_inplace stores it (kDGelu). Both kernels below read through it.
template <bool kGelu, bool kDGelu, typename T>
__device__ __forceinline__ float operand_value(T x, T aux) {
    float v = (float)x;
    if constexpr (kGelu) v = to_float(from_float<T>(gelu_value(v)));
    if constexpr (kDGelu) v = to_float(from_float<T>(v * gelu_derivative((float)aux)));
    return v;
}

// A tile of 64 rows x kCols columns of bytes (tile[row][4 columns' bytes], as the kernels below stage it) into yT:
// thread (tx, ty) writes yT's rows ty + 16 k (x's columns col0 + ...), the 4 bytes of x's rows row0 + 4 tx .. + 3.
template <int kCols>
__device__ __forceinline__ void store_transposed_tile(const uint32_t (*tile)[kCols / 4 + 1], int rows, int cols,
                                                      int row0, int col0, uint8_t* __restrict__ yT) {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
    for (int k = 0; k < kCols / 16; k++) {
        const int c = ty + 16 * k, r = 4 * tx;
        if (col0 + c >= cols || row0 + r >= rows) continue;
        uint32_t out = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) out |= ((tile[r + j][c / 4] >> (8 * (c % 4))) & 0xFFu) << (8 * j);
        *reinterpret_cast<uint32_t*>(yT + (size_t)(col0 + c) * rows + row0 + r) = out;
    }
}

// kVec values' FP8 bytes as one store: 4 bytes, or 8.
template <int kVec> using Fp8Pack = std::conditional_t<kVec == 8, uint2, uint32_t>;
template <Fp8Format F, int kVec>
__device__ __forceinline__ Fp8Pack<kVec> fp8_pack(const float* v, float s) {
    if constexpr (kVec == 8) {
        return make_uint2(fp8x4<F>(v[0] * s, v[1] * s, v[2] * s, v[3] * s),
                          fp8x4<F>(v[4] * s, v[5] * s, v[6] * s, v[7] * s));
    } else {
        return fp8x4<F>(v[0] * s, v[1] * s, v[2] * s, v[3] * s);
    }
}
// Its 4-byte words into a tile row (the thread's kVec / 4 words).
template <int kVec>
__device__ __forceinline__ void put_words(uint32_t* row, int tx, Fp8Pack<kVec> p) {
    if constexpr (kVec == 8) row[2 * tx] = p.x, row[2 * tx + 1] = p.y;
    else row[tx] = p;
}

// gelu_yT (kDGelu only; null: none): gelu(aux) cast to E4M3 with *gelu_scale, transposed, the bytes
// fp8_cast_transpose<E4M3, true>(aux, ...) writes as yT: the GELU output's cast again from the aux the kernel reads.
// The dGELU cast at 8 blocks an SM (32 registers): it ran 8% slower at the 38 its code would otherwise take.
// One block's tile (tile_x, tile_y) of the cast: the kernel below, and the grouped cast (cast_group.cuh) that takes
// several tensors' tiles in one launch.
template <Fp8Format F, int kVec, bool kGelu, bool kDGelu>
__device__ __forceinline__ void cast_transpose_tile(const floatX* __restrict__ x, int rows, int cols,
                                                    const ScaleSource& src, uint8_t* __restrict__ y,
                                                    uint8_t* __restrict__ yT, float* __restrict__ amax,
                                                    float* __restrict__ colsum, const floatX* __restrict__ aux,
                                                    const float* __restrict__ gelu_scale,
                                                    uint8_t* __restrict__ gelu_yT, int tile_x, int tile_y) {
    static_assert(kVec == 4 || kVec == 8, "4 or 8 values a load");
    static_assert(kVec == 4 || !kDGelu, "the dGELU cast keeps 64 x 64 tiles (above)");
    constexpr int kCols = 16 * kVec;
    constexpr bool kLoadsFirst = !kDGelu;  // the dGELU cast's 8 loads first would spill at its 32 registers
    __shared__ uint32_t tile[kTile][kCols / 4 + 1];  // [row][4 columns' bytes], padded
    __shared__ uint32_t gelu_tile[kDGelu ? kTile : 1][kCols / 4 + 1];  // gelu_yT's, the same way
    __shared__ float column_part[kTileRowsPerPass][kCols];  // each thread row's sums of its kVec columns
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // 16 groups of kVec columns x 16 rows
    const int row0 = tile_y * kTile, col0 = tile_x * kCols, c = col0 + kVec * tx;
    struct alignas(kVec * sizeof(floatX)) Pack { floatX v[kVec]; };
    Pack q[4], g[4];
    auto load = [&](int k) {  // row ty + 16 k of x (and of aux)
        const int r = row0 + ty + 16 * k;
        if (r < rows && c < cols) {
            q[k] = *reinterpret_cast<const Pack*>(x + (size_t)r * cols + c);
            if constexpr (kDGelu) g[k] = *reinterpret_cast<const Pack*>(aux + (size_t)r * cols + c);
        }
    };
    if constexpr (kLoadsFirst) {  // 4 rows in flight a thread
#pragma unroll
        for (int k = 0; k < 4; k++) load(k);
    }
    float s = src.scale ? *src.scale : 1.f;
    if (src.from_amax) {
        s = fp8_scale_from_amax(*src.from_amax, F, src.margin, 1.f);
        if (tile_x == 0 && tile_y == 0 && threadIdx.x == 0 && src.scale_out) {
            *src.scale_out = s;
            // in double: exact, and untouched by --use_fast_math. An infinite amax (the cast saturates it) gives a
            // NaN descale, so the GEMM's output, and the step's loss or norm, say so instead of a finite wrong value.
            *src.descale_out = isinf(*src.from_amax) ? NAN : (float)(1.0 / (double)s);
        }
    }
    unsigned int m = 0;  // max |x| as bits: non-negative floats order as integers, and a NaN (|NaN|) above all
    float sums[kVec] = {};  // this thread's kVec columns over its 4 rows
    const float gs = kDGelu && gelu_yT ? *gelu_scale : 1.f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int r = row0 + ty + 16 * k;
        if constexpr (!kLoadsFirst) load(k);
        Fp8Pack<kVec> packed{};
        if (r < rows && c < cols) {
            float v[kVec];
#pragma unroll
            for (int j = 0; j < kVec; j++) {
                v[j] = operand_value<kGelu, kDGelu>(q[k].v[j], kDGelu ? g[k].v[j] : q[k].v[j]);
                m = max(m, amax_bits(v[j]));
                sums[j] += v[j];
            }
            packed = fp8_pack<F, kVec>(v, s);
            if (y) *reinterpret_cast<Fp8Pack<kVec>*>(y + (size_t)r * cols + c) = packed;
            if constexpr (kDGelu) {
                if (gelu_yT) {
                    float a[kVec];
#pragma unroll
                    for (int j = 0; j < kVec; j++) a[j] = operand_value<true, false>(g[k].v[j], g[k].v[j]);
                    put_words<kVec>(gelu_tile[ty + 16 * k], tx, fp8_pack<Fp8Format::E4M3, kVec>(a, gs));
                }
            }
        } else if constexpr (kDGelu) {
            put_words<kVec>(gelu_tile[ty + 16 * k], tx, Fp8Pack<kVec>{});
        }
        put_words<kVec>(tile[ty + 16 * k], tx, packed);
    }
    if (src.overflow_descale && amax_bits_nonfinite(m)) *src.overflow_descale = NAN;
    if (colsum) {  // the same for the whole block
#pragma unroll
        for (int j = 0; j < kVec; j++) column_part[ty][kVec * tx + j] = sums[j];
        __syncthreads();
        const int cc = threadIdx.x;
        if (cc < kCols && col0 + cc < cols) {
            float total = 0.f;
            for (int t = 0; t < kTileRowsPerPass; t++) total += column_part[t][cc];  // in order: repeatable
            colsum[(size_t)tile_y * cols + col0 + cc] = total;
        }
    }
    __shared__ unsigned int warp_max[8];
    if (amax) fold_block_amax(m, amax, warp_max);  // amax is the same for the whole block: every thread calls it
    if (!yT && !(kDGelu && gelu_yT)) return;
    __syncthreads();
    if (yT) store_transposed_tile<kCols>(tile, rows, cols, row0, col0, yT);
    if constexpr (kDGelu)
        if (gelu_yT) store_transposed_tile<kCols>(gelu_tile, rows, cols, row0, col0, gelu_yT);
}
template <Fp8Format F, int kVec, bool kGelu = false, bool kDGelu = false>
__global__ void __launch_bounds__(256, kDGelu ? 8 : 1)
    cast_transpose_kernel(const floatX* __restrict__ x, int rows, int cols, ScaleSource src, uint8_t* __restrict__ y,
                          uint8_t* __restrict__ yT, float* __restrict__ amax, float* __restrict__ colsum,
                          const floatX* __restrict__ aux, const float* __restrict__ gelu_scale,
                          uint8_t* __restrict__ gelu_yT) {
    cast_transpose_tile<F, kVec, kGelu, kDGelu>(x, rows, cols, src, y, yT, amax, colsum, aux, gelu_scale, gelu_yT,
                                                blockIdx.x, blockIdx.y);
}

// yT (cols, rows) = y (rows, cols) transposed, FP8 bytes as they are: the kept transpose of an operand whose producer
// wrote it in FP8 (the LayerNorm forward under delayed scaling). The cast's tiles, without the cast.
__global__ void __launch_bounds__(256) transpose_kernel(const uint8_t* __restrict__ y, int rows, int cols,
                                                        uint8_t* __restrict__ yT) {
    __shared__ uint32_t tile[kTile][kTile / 4 + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * kTile, col0 = blockIdx.x * kTile;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int r = row0 + ty + 16 * k, c = col0 + 4 * tx;
        tile[ty + 16 * k][tx] =
            r < rows && c < cols ? *reinterpret_cast<const uint32_t*>(y + (size_t)r * cols + c) : 0u;
    }
    __syncthreads();
    store_transposed_tile<kTile>(tile, rows, cols, row0, col0, yT);
}

// max |x| alone (no cast asked for): a grid-stride read at the memory's pace, 4 values a load. Any element type T
// (the flash attention backends' outputs are bf16 in every build).
template <bool kGelu, typename T, bool kDGelu = false>
__global__ void __launch_bounds__(256) amax_kernel(const T* __restrict__ x, size_t quads, float* amax,
                                                  const T* __restrict__ aux) {
    struct alignas(4 * sizeof(T)) Quad { T v[4]; };
    __shared__ unsigned int warp_max[8];
    unsigned int m = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += (size_t)gridDim.x * blockDim.x) {
        const Quad q = reinterpret_cast<const Quad*>(x)[i];
        Quad g = q;  // unread unless kDGelu
        if constexpr (kDGelu) g = reinterpret_cast<const Quad*>(aux)[i];
#pragma unroll
        for (int j = 0; j < 4; j++) m = max(m, amax_bits(operand_value<kGelu, kDGelu>(q.v[j], g.v[j])));
    }
    fold_block_amax(m, amax, warp_max);
}

template <bool kGelu, typename T, bool kDGelu = false>
inline void launch_amax(const T* x, int rows, int cols, float* amax, cudaStream_t stream, const T* aux = nullptr) {
    const size_t count = (size_t)rows * cols;
    if (rows < 1 || cols < 1 || count % 4 != 0 || ((uintptr_t)x | (uintptr_t)aux) % (4 * sizeof(T)) != 0) {
        fprintf(stderr, "error: fp8_amax: %d x %d (rows x cols a multiple of 4, x aligned to 4 values)\n", rows, cols);
        exit(EXIT_FAILURE);
    }
    if (!amax) return;
    const size_t quads = count / 4;
    const int blocks = (int)std::min<size_t>((quads + 255) / 256, (size_t)device_sm_count() * 8);
    amax_kernel<kGelu, T, kDGelu><<<blocks, 256, 0, stream>>>(x, quads, amax, aux);
    cudaCheck(cudaGetLastError());
}

template <Fp8Format F, bool kGelu = false, bool kDGelu = false>
inline void launch_cast(const floatX* x, int rows, int cols, const ScaleSource& src, uint8_t* y, uint8_t* yT,
                        float* amax, float* colsum, cudaStream_t stream, const floatX* aux = nullptr,
                        const float* gelu_scale = nullptr, uint8_t* gelu_yT = nullptr) {
    if (gelu_yT && (!kDGelu || !gelu_scale || (!y && !yT) || (uintptr_t)gelu_yT % 4 != 0)) {
        fprintf(stderr, "error: fp8_cast_transpose_dgelu: the GELU output's yT needs its scale, a cast beside it "
                "and 4-byte alignment\n");
        exit(EXIT_FAILURE);
    }
    if (!y && !yT && !colsum) {
        if (src.overflow_descale) {
            fprintf(stderr, "error: fp8_cast_transpose: an overflow descale belongs to a cast (y or yT)\n");
            exit(EXIT_FAILURE);
        }
        return launch_amax<kGelu, floatX, kDGelu>(x, rows, cols, amax, stream, aux);
    }
    if (rows < 1 || cols < 1 || rows % 4 != 0 || cols % 4 != 0 || (rows + kTile - 1) / kTile > 65535 ||
        ((uintptr_t)x | (uintptr_t)aux) % (4 * sizeof(floatX)) != 0 || ((uintptr_t)y | (uintptr_t)yT) % 4 != 0 ||
        (colsum && !y && !yT)) {
        fprintf(stderr, "error: fp8_cast_transpose: %d x %d (rows and cols multiples of 4, rows at most 4194240, x "
                "aligned to 4 values, y and yT to 4 bytes, column sums only beside a cast)\n", rows, cols);
        exit(EXIT_FAILURE);
    }
    // 8 values a load where the rows allow it (16-byte rows of bf16, x and y aligned to them), else 4
    const bool wide = !kDGelu && cols % 8 == 0 && (uintptr_t)x % (8 * sizeof(floatX)) == 0 && (uintptr_t)y % 8 == 0;
    const int tile_cols = wide ? 16 * 8 : 16 * 4;
    const dim3 grid((cols + tile_cols - 1) / tile_cols, (rows + kTile - 1) / kTile);
    if constexpr (!kDGelu) {
        if (wide) {
            cast_transpose_kernel<F, 8, kGelu, kDGelu>
                <<<grid, 256, 0, stream>>>(x, rows, cols, src, y, yT, amax, colsum, aux, gelu_scale, gelu_yT);
            cudaCheck(cudaGetLastError());
            return;
        }
    }
    cast_transpose_kernel<F, 4, kGelu, kDGelu>
        <<<grid, 256, 0, stream>>>(x, rows, cols, src, y, yT, amax, colsum, aux, gelu_scale, gelu_yT);
    cudaCheck(cudaGetLastError());
}

}  // namespace fp8_cast_detail

// yT (cols, rows) = y (rows, cols) transposed, FP8 bytes (rows and cols multiples of 4, y and yT aligned to 4 bytes).
inline void fp8_transpose(const uint8_t* y, int rows, int cols, uint8_t* yT, cudaStream_t stream) {
    using fp8_cast_detail::kTile;
    if (rows < 1 || cols < 1 || rows % 4 != 0 || cols % 4 != 0 || (rows + kTile - 1) / kTile > 65535 ||
        ((uintptr_t)y | (uintptr_t)yT) % 4 != 0) {
        fprintf(stderr, "error: fp8_transpose: %d x %d (rows and cols multiples of 4, rows at most 4194240, y and "
                "yT aligned to 4 bytes)\n", rows, cols);
        exit(EXIT_FAILURE);
    }
    const dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
    fp8_cast_detail::transpose_kernel<<<grid, 256, 0, stream>>>(y, rows, cols, yT);
    cudaCheck(cudaGetLastError());
}

// The partial rows of the column sums a cast leaves (colsum: that many rows of cols floats), for
// column_sum_finish(out, colsum, fp8_cast_colsum_chunks(rows), cols, ...).
inline int fp8_cast_colsum_chunks(int rows) { return (rows + fp8_cast_detail::kTile - 1) / fp8_cast_detail::kTile; }

// y (rows, cols) and/or yT (cols, rows) in FP8 format F, scaled by *scale (null: 1); *amax (null: none) becomes
// max(*amax, max |x|): zero it before a tensor's first cast; colsum (null: none): x's column sums per tile of rows
// (fp8_cast_colsum_chunks). kGelu (here and below): x is a GELU's input, and what is cast (and measured) is gelu(x)
// as gelu_forward stores it, the same bytes, without the bf16 GELU output. overflow_descale (null: none): set to NaN
// if any value of x is not finite (ScaleSource). Queued on the stream.
template <Fp8Format F, bool kGelu = false>
inline void fp8_cast_transpose(const floatX* x, int rows, int cols, const float* scale, uint8_t* y, uint8_t* yT,
                               float* amax, cudaStream_t stream, float* colsum = nullptr,
                               float* overflow_descale = nullptr) {
    fp8_cast_detail::ScaleSource src;
    src.scale = scale, src.overflow_descale = overflow_descale;
    fp8_cast_detail::launch_cast<F, kGelu>(x, rows, cols, src, y, yT, amax, colsum, stream);
}

// Current scaling's two passes: fp8_amax folds max |x| into *amax (zeroed before), then fp8_cast_transpose_current
// casts with the scale that amax gives (fp8_scale_from_amax with `margin`), writing that scale and its inverse (the
// GEMM's descale) to scale_out and descale_out.
template <bool kGelu = false, typename T>
inline void fp8_amax(const T* x, int rows, int cols, float* amax, cudaStream_t stream) {
    fp8_cast_detail::launch_amax<kGelu>(x, rows, cols, amax, stream);
}
// The GELU backward's output cast as it is computed (kDGelu above), for a cast whose scale is known before its tensor
// (delayed scaling): dgelu_out holds dL/d(GELU output), gelu_in the GELU's input; the bytes, amax and column sums
// those of casting what gelu_backward_inplace(dgelu_out, gelu_in) leaves. fp8_amax_dgelu: its amax alone.
// gelu_yT (null: none): the GELU's output cast again as it reads gelu_in, E4M3 with *gelu_scale, transposed (the
// bytes of fp8_cast_transpose<E4M3, true>(gelu_in, ..., gelu_scale, nullptr, gelu_yT)): fcproj's input for its weight
// gradient under LLMC_FP8_RECAST, without a pass of its own over gelu_in.
template <Fp8Format F>
inline void fp8_cast_transpose_dgelu(const floatX* dgelu_out, const floatX* gelu_in, int rows, int cols,
                                     const float* scale, uint8_t* y, uint8_t* yT, float* amax, cudaStream_t stream,
                                     float* colsum = nullptr, float* overflow_descale = nullptr,
                                     const float* gelu_scale = nullptr, uint8_t* gelu_yT = nullptr) {
    fp8_cast_detail::ScaleSource src;
    src.scale = scale, src.overflow_descale = overflow_descale;
    fp8_cast_detail::launch_cast<F, false, true>(dgelu_out, rows, cols, src, y, yT, amax, colsum, stream, gelu_in,
                                                 gelu_scale, gelu_yT);
}
inline void fp8_amax_dgelu(const floatX* dgelu_out, const floatX* gelu_in, int rows, int cols, float* amax,
                           cudaStream_t stream) {
    fp8_cast_detail::launch_amax<false, floatX, true>(dgelu_out, rows, cols, amax, stream, gelu_in);
}
// fold_amax (null: none): x's own max |x| folded in too (delayed scaling's weights: the scale from their history's
// window given as `amax`, their amax for the history).
template <Fp8Format F, bool kGelu = false>
inline void fp8_cast_transpose_current(const floatX* x, int rows, int cols, const float* amax, int margin,
                                       float* scale_out, float* descale_out, uint8_t* y, uint8_t* yT,
                                       cudaStream_t stream, float* colsum = nullptr, float* fold_amax = nullptr) {
    fp8_cast_detail::ScaleSource src;
    src.from_amax = amax, src.margin = margin, src.scale_out = scale_out, src.descale_out = descale_out;
    fp8_cast_detail::launch_cast<F, kGelu>(x, rows, cols, src, y, yT, fold_amax, colsum, stream);
}

