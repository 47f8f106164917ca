// max |x| of a block's (or a warp's) values folded into a tensor's amax, for the FP8 casts' scales (llmc/kernels/fp8/):
// the threads' maxima as float bits (non-negative floats order as integers, a NaN above all), a warp's by shuffles, a
// block's through shared memory, then one atomicMax at most, none where the running max already covers it (atomics
// on one address serialize: one per warp was most of a cast's time, so kernels with a block-wide barrier fold per
// block; kernels whose warps may leave early fold per warp). The max does not depend on the order it is taken in, so
// the amax is deterministic.
#pragma once

#include "llmc/core/cuda_common.h"

constexpr int kAmaxBlockThreads = 256;  // the blocks fold_block_amax takes

namespace amax_detail {
__device__ __forceinline__ unsigned int warp_max(unsigned int m) {
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
}
__device__ __forceinline__ void raise_to(float* amax, unsigned int m) {
    unsigned int* bits = reinterpret_cast<unsigned int*>(amax);
    if (m > *reinterpret_cast<volatile unsigned int*>(bits)) atomicMax(bits, m);
}
}  // namespace amax_detail

// Every thread of a kAmaxBlockThreads-thread block calls it (it syncs); m: the thread's max |x| as bits (0: none);
// warp_max: 8 words of the kernel's shared memory.
__device__ __forceinline__ void fold_block_amax(unsigned int m, float* amax, unsigned int* warp_max) {
    m = amax_detail::warp_max(m);
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kAmaxBlockThreads / 32; w++) m = max(m, warp_max[w]);
        amax_detail::raise_to(amax, m);
    }
}

// Every lane of a whole warp calls it (no barrier); m as above.
__device__ __forceinline__ void fold_warp_amax(unsigned int m, float* amax) {
    m = amax_detail::warp_max(m);
    if (threadIdx.x % 32 == 0) amax_detail::raise_to(amax, m);
}

// A value's contribution: |v| as bits.
__device__ __forceinline__ unsigned int amax_bits(float v) { return __float_as_uint(fabsf(v)); }
// Whether such a max stands for a value that is not finite (inf's bits and NaN's above them).
__device__ __forceinline__ bool amax_bits_nonfinite(unsigned int m) { return m >= 0x7f800000u; }

// A check of the folds (LLMC_FP8_CHECK_AMAX): *mismatch (0 before) becomes id + 1 unless *got and *want are the same
// bits, the first such id staying, and *got_seen the value it saw (a later kernel may change *got).
__global__ void amax_compare_kernel(const float* got, const float* want, int id, int* mismatch, float* got_seen) {
    if (__float_as_uint(*got) != __float_as_uint(*want) && atomicCAS(mismatch, 0, id + 1) == 0) *got_seen = *got;
}
