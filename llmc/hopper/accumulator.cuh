// A wgmma accumulator as a type: the m64 x N fp32 tile a warpgroup computes, as one thread holds it, with the register
// math the kernels do on it written once: per-row reductions (the quad shuffles inside), row scaling, the causal mask,
// the softmax's exponentials, conversion to the A fragments of the next product, and the store into a tile.
// Layout (wgmma.cuh): warp w of the warpgroup owns rows 16w..16w+15; this thread (lane l) holds rows row_in = 16w + l/4
// and row_in + 8 ("row half" r = 0, 1) at columns 8j + 2(l % 4) + e of every 8-column block j (e = 0, 1), as
// d[4j + 2r + e]. A row lives on the 4 threads of a quad (l / 4 equal).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "llmc/hopper/smem.cuh"
#include "llmc/hopper/wgmma.cuh"

namespace hopper {

// Where this thread sits in its warpgroup's accumulators: its two rows and the first of its column pairs.
struct AccumulatorLane {
    int lane, row_in;
    __device__ __forceinline__ explicit AccumulatorLane(int thread_in_warpgroup)
        : lane(thread_in_warpgroup % 32), row_in((thread_in_warpgroup / 32) * 16 + (thread_in_warpgroup % 32) / 4) {}
    __device__ __forceinline__ int row(int r) const { return row_in + 8 * r; }
    __device__ __forceinline__ int col(int j, int e) const { return 8 * j + 2 * (lane % 4) + e; }
};

// The reduction over a row's quad (the 4 threads that hold it), every thread getting the result.
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffff, x, 1);
    return x + __shfl_xor_sync(0xffffffff, x, 2);
}

template <int kN>
struct Accumulator {
    static_assert(kN % 16 == 0, "whole k16 slices");
    static constexpr int kCols = kN, kBlocks = kN / 8, kRegs = kN / 2;
    float d[kRegs];  // what the wgmma wrappers take: wgmma_ss(acc.d, ...)

    __device__ __forceinline__ float& at(int r, int j, int e) { return d[4 * j + 2 * r + e]; }
    __device__ __forceinline__ float at(int r, int j, int e) const { return d[4 * j + 2 * r + e]; }

    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < kRegs; i++) d[i] = 0.f;
    }
    // After the wgmma_wait that makes the values valid (fence_accumulator's reason).
    __device__ __forceinline__ void fence() { fence_accumulator(d); }

    // Every element in register order as f(value, r, j, e), value = at(r, j, e): the elementwise math the methods
    // below do not cover (the attention backward's transposed tiles, whose statistics run along the columns, and
    // stores in layouts of their own). with: a second accumulator of the same shape, visited alongside.
    // (One loop over a block's 4 registers, r and e taken from its index, as the kernels wrote it by hand: the same
    // code to the last instruction.)
    template <typename F>
    __device__ __forceinline__ void for_each(F&& f) {
#pragma unroll
        for (int j = 0; j < kBlocks; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) f(d[4 * j + i], i >> 1, j, i & 1);
    }
    template <typename F>
    __device__ __forceinline__ void for_each(F&& f) const {
#pragma unroll
        for (int j = 0; j < kBlocks; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) f(d[4 * j + i], i >> 1, j, i & 1);
    }
    template <typename F>
    __device__ __forceinline__ void for_each_with(Accumulator& with, F&& f) {
#pragma unroll
        for (int j = 0; j < kBlocks; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) f(d[4 * j + i], with.d[4 * j + i], i >> 1, j, i & 1);
    }

    // Elements left of the causal diagonal stay; those with column + delta > row become −inf (delta = the tile's first
    // key − its first query).
    __device__ __forceinline__ void mask_above_diagonal(int delta, const AccumulatorLane& at_lane) {
#pragma unroll
        for (int j = 0; j < kBlocks; j++)
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    if (at_lane.col(j, e) + delta > at_lane.row(r)) at(r, j, e) = -INFINITY;
    }

    // The maximum of row half r over the whole row (this thread's columns, then its quad's).
    __device__ __forceinline__ float row_max(int r) const {
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < kBlocks; j++) m = fmaxf(m, fmaxf(at(r, j, 0), at(r, j, 1)));
        return quad_max(m);
    }

    // Row half r's elements x become exp2(x·scale − shift) in place; returns this thread's part of their sum (the
    // quad's sum is quad_sum of it: the softmax keeps the parts and adds them once, at the end).
    __device__ __forceinline__ float exp2_row(int r, float scale, float shift) {
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kBlocks; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float p = exp2f(at(r, j, e) * scale - shift);
                at(r, j, e) = p;
                sum += p;
            }
        return sum;
    }

    // Every element of row half r times s[r].
    __device__ __forceinline__ void scale_rows(const float (&s)[2]) {
#pragma unroll
        for (int j = 0; j < kBlocks; j++) {
            at(0, j, 0) *= s[0], at(0, j, 1) *= s[0];
            at(1, j, 0) *= s[1], at(1, j, 1) *= s[1];
        }
    }

    // The values as bf16 A fragments of the next product (the accumulator layout is the register-A layout).
    __device__ __forceinline__ void to_a_fragments(uint32_t (&frag)[kN / 16][4]) const {
        pack_a_fragments<kN>(d, frag);
    }

    // Into rows first_row.. of a tile of kN columns (bf16, 128-byte swizzle), row half r times scale[r], for a TMA
    // store or the next product.
    template <typename Tile>
    __device__ __forceinline__ void store(Tile& t, int first_row, const float (&scale)[2],
                                          const AccumulatorLane& at_lane) const {
        static_assert(Tile::kCols == kN, "the tile's width");
        store_accumulator(t, first_row, d, scale, at_lane.row_in, at_lane.lane);
    }
};

}  // namespace hopper
