// Softmax + cross-entropy + its gradient in one kernel, one thread block per row of logits.
// The block walks the row once with an online softmax (running max m and sum l per thread, merged across the
// block), writes the row's loss, then overwrites the logits in place with
//   dlogits[i] = (softmax(x)[i] - [i == target]) · dloss   for i < V,   0 for the padding V <= i < Vp.
// Probabilities are never stored; only the row's statistics live in registers.
#pragma once

#include "cuda_common.h"

struct SoftmaxStats {
    float m, l;  // running max and sum of exp(x - m)
};
__device__ __forceinline__ SoftmaxStats merge_stats(SoftmaxStats a, SoftmaxStats b) {
    float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.0f};
    return {m, a.l * expf(a.m - m) + b.l * expf(b.m - m)};
}

// Vp is a multiple of 128 (gpt2_config.h), so each row is 16-byte aligned and split into x128 packs.
__global__ void fused_classifier_kernel(floatX* logits, float* losses, const int* targets, int V, int Vp,
                                        float dloss) {
    __shared__ SoftmaxStats warp_stats[32];
    const size_t row = blockIdx.x;
    floatX* x = logits + row * Vp;
    const int packs = Vp / x128::size;
    SoftmaxStats st = {-INFINITY, 0.0f};
    for (int pk = threadIdx.x; pk < packs; pk += blockDim.x) {
        const x128 v = load128(x + pk * x128::size);
        float tile_max = -INFINITY;
        for (int k = 0; k < x128::size; k++) {
            if (pk * x128::size + k < V) tile_max = fmaxf(tile_max, to_float(v[k]));
        }
        if (tile_max == -INFINITY) continue;  // a pack entirely in the padding
        float tile_sum = 0.0f;
        for (int k = 0; k < x128::size; k++) {
            if (pk * x128::size + k < V) tile_sum += expf(to_float(v[k]) - tile_max);
        }
        st = merge_stats(st, {tile_max, tile_sum});
    }
    for (int off = 16; off > 0; off >>= 1) {
        SoftmaxStats other = {__shfl_xor_sync(0xffffffff, st.m, off), __shfl_xor_sync(0xffffffff, st.l, off)};
        st = merge_stats(st, other);
    }
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    if (lane == 0) warp_stats[warp] = st;
    __syncthreads();
    st = {-INFINITY, 0.0f};
    for (int w = 0; w < (int)blockDim.x / kWarpSize; w++) st = merge_stats(st, warp_stats[w]);  // same order everywhere
    const int target = targets[row];
    if (threadIdx.x == 0) losses[row] = st.m + logf(st.l) - to_float(x[target]);
    __syncthreads();  // x[target] is read above before anyone overwrites it
    const float inv_l = 1.0f / st.l;
    for (int pk = threadIdx.x; pk < packs; pk += blockDim.x) {
        const x128 v = load128cs(x + pk * x128::size);
        x128 d;
        for (int k = 0; k < x128::size; k++) {
            const int i = pk * x128::size + k;
            float g = 0.0f;
            if (i < V) g = (expf(to_float(v[k]) - st.m) * inv_l - (i == target ? 1.0f : 0.0f)) * dloss;
            d[k] = from_float<floatX>(g);
        }
        store128(x + pk * x128::size, d);
    }
}

// logits (N, Vp) become dlogits; losses (N) get each row's loss. targets on the device, all < V.
inline void fused_classifier(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss,
                             cudaStream_t stream = 0) {
    if (Vp % x128::size != 0) {
        fprintf(stderr, "error: fused_classifier: padded vocab %d must be a multiple of %d\n", Vp, x128::size);
        exit(EXIT_FAILURE);
    }
    const int threads = 1024;
    fused_classifier_kernel<<<N, threads, 0, stream>>>(logits, losses, targets, V, Vp, dloss);
    cudaCheckLaunch();
}
