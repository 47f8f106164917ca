// Several tensors' casts in one launch: each block takes one 64 x 128 tile of one tensor, the tile
// fp8_cast_transpose_current would give it (cast_transpose_tile), so the bytes, amax and scales are those of the
// separate casts. For small tensors cast back to back (a layer's four weights after each optimizer step: 1-2 MB
// each at d12, a fraction of a wave apiece), one launch fills the GPU where four would each ramp up and drain.
// Every tensor's columns a multiple of 8 and x and y aligned to 8 values (the wide tiles); no column sums, no GELU.
#pragma once

#include "llmc/kernels/fp8/cast_transpose.cuh"

constexpr int kFp8CastGroupMax = 4;

// One tensor of a grouped cast, as fp8_cast_transpose_current takes it: the scale from *amax with margin (written
// with its inverse to scale_out and descale_out by the tensor's first tile), y and/or yT, its own max |x| folded into
// fold_amax (null: none).
struct Fp8CastJob {
    const floatX* x = nullptr;
    int rows = 0, cols = 0;
    const float* amax = nullptr;
    int margin = 0;
    float* scale_out = nullptr;
    float* descale_out = nullptr;
    uint8_t* y = nullptr;
    uint8_t* yT = nullptr;
    float* fold_amax = nullptr;
};

namespace fp8_cast_detail {

struct CastGroup {
    struct Entry {
        const floatX* x;
        int rows, cols;
        ScaleSource src;
        uint8_t *y, *yT;
        float* amax;
        int tiles_x, block_begin;  // tiles along the columns; the entry's first block
    } e[kFp8CastGroupMax];
    int count;
};

template <Fp8Format F>
__global__ void __launch_bounds__(256) cast_group_kernel(const __grid_constant__ CastGroup g) {
    int i = 0;
    while (i + 1 < g.count && (int)blockIdx.x >= g.e[i + 1].block_begin) i++;
    const CastGroup::Entry& e = g.e[i];
    const int b = (int)blockIdx.x - e.block_begin;
    cast_transpose_tile<F, 8, false, false>(e.x, e.rows, e.cols, e.src, e.y, e.yT, e.amax, nullptr, nullptr, nullptr,
                                            nullptr, b % e.tiles_x, b / e.tiles_x);
}

}  // namespace fp8_cast_detail

// jobs[0..n) cast in one launch (n at most kFp8CastGroupMax), each as fp8_cast_transpose_current<F> would; a shape or
// alignment the wide tiles do not take stops with one line naming the job.
template <Fp8Format F>
inline void fp8_cast_transpose_current_group(const Fp8CastJob* jobs, int n, cudaStream_t stream) {
    using namespace fp8_cast_detail;
    if (n < 1 || n > kFp8CastGroupMax) {
        fprintf(stderr, "error: fp8_cast_transpose_current_group: %d jobs (1 to %d)\n", n, kFp8CastGroupMax);
        exit(EXIT_FAILURE);
    }
    CastGroup g{};
    g.count = n;
    int blocks = 0;
    for (int i = 0; i < n; i++) {
        const Fp8CastJob& j = jobs[i];
        const int row_tiles = (j.rows + kTile - 1) / kTile, col_tiles = (j.cols + 16 * 8 - 1) / (16 * 8);
        if (j.rows < 1 || j.cols < 1 || j.rows % 4 != 0 || j.cols % 8 != 0 || !j.amax || (!j.y && !j.yT) ||
            (uintptr_t)j.x % (8 * sizeof(floatX)) != 0 || (uintptr_t)j.y % 8 != 0 || (uintptr_t)j.yT % 4 != 0 ||
            (long long)blocks + (long long)row_tiles * col_tiles > 0x7fffffffLL) {
            fprintf(stderr, "error: fp8_cast_transpose_current_group: job %d, %d x %d (rows a multiple of 4, cols "
                    "of 8, x and y aligned to 8 values, yT to 4 bytes, an amax and y or yT)\n", i, j.rows, j.cols);
            exit(EXIT_FAILURE);
        }
        CastGroup::Entry& e = g.e[i];
        e.x = j.x, e.rows = j.rows, e.cols = j.cols, e.y = j.y, e.yT = j.yT, e.amax = j.fold_amax;
        e.src.from_amax = j.amax, e.src.margin = j.margin, e.src.scale_out = j.scale_out;
        e.src.descale_out = j.descale_out;
        e.tiles_x = col_tiles, e.block_begin = blocks;
        blocks += row_tiles * col_tiles;
    }
    cast_group_kernel<F><<<blocks, 256, 0, stream>>>(g);
    cudaCheck(cudaGetLastError());
}
