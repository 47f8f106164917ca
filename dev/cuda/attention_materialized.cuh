// Step A of the attention design note in fp32, shared by attention_forward.cu (variant 2) and
// attention_backward.cu (variant 1): permute -> cuBLAS Q·Kᵀ (scale folded into alpha) -> causal softmax with
// warp-shuffle + shared-memory reductions -> cuBLAS att·V -> unpermute, and the matching backward.
// The T×T matrices `preatt` and `att` live in device memory: that traffic is what the flash variants remove.
#pragma once

#include "common.h"

namespace materialized {

// ---------------------------------------------------------------- block reductions (any blockDim multiple of 32)
template <bool kMax>
__device__ float block_reduce(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = kMax ? fmaxf(v, o) : v + o;
    }
    __syncthreads();  // `partial` may still be read by a previous reduction
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < warps ? partial[lane] : (kMax ? -INFINITY : 0.f);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = kMax ? fmaxf(v, o) : v + o;
    }
    return v;
}

// (B, T, 3, NH, HS) -> Q, K, V each (B, NH, T, HS); one thread per output element of each.
__global__ void permute_kernel(float* q, float* k, float* v, const float* inp, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t n = (size_t)B * NH * T * HS;
    if (idx >= n) return;
    int d = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH, b = idx / ((size_t)HS * T * NH);
    size_t src = ((size_t)b * T + t) * 3 * NH * HS + (size_t)h * HS + d;
    q[idx] = inp[src];
    k[idx] = inp[src + NH * HS];
    v[idx] = inp[src + 2 * NH * HS];
}

// Inverse for gradients: dQ, dK, dV (B, NH, T, HS) -> dinp (B, T, 3, NH, HS).
__global__ void unpermute_qkv_kernel(float* dinp, const float* dq, const float* dk, const float* dv, int B, int T,
                                     int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t n = (size_t)B * NH * T * HS;
    if (idx >= n) return;
    int d = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH, b = idx / ((size_t)HS * T * NH);
    size_t dst = ((size_t)b * T + t) * 3 * NH * HS + (size_t)h * HS + d;
    dinp[dst] = dq[idx];
    dinp[dst + NH * HS] = dk[idx];
    dinp[dst + 2 * NH * HS] = dv[idx];
}

// (B, NH, T, HS) -> (B, T, NH, HS)
__global__ void unpermute_kernel(float* out, const float* inp, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t n = (size_t)B * NH * T * HS;
    if (idx >= n) return;
    int d = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH, b = idx / ((size_t)HS * T * NH);
    out[((size_t)b * T + t) * NH * HS + (size_t)h * HS + d] = inp[idx];
}

// Same layout change for dout: (B, T, NH, HS) -> (B, NH, T, HS)
__global__ void permute_out_kernel(float* dst, const float* src, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t n = (size_t)B * NH * T * HS;
    if (idx >= n) return;
    int d = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH, b = idx / ((size_t)HS * T * NH);
    dst[idx] = src[((size_t)b * T + t) * NH * HS + (size_t)h * HS + d];
}

// One block per row (bh, t) of the already-scaled scores: causal softmax over t2 <= t (the masked tail is
// never read and is written as 0). Threads stride along the row; warps reduce by shuffles, then meet in smem.
__global__ void softmax_causal_kernel(float* att, const float* preatt, int T) {
    const size_t row = blockIdx.x;
    const int t = row % T;
    const float* x = preatt + row * T;
    float* y = att + row * T;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i <= t; i += blockDim.x) mx = fmaxf(mx, x[i]);
    mx = block_reduce<true>(mx);
    float sum = 0.f;
    for (int i = threadIdx.x; i <= t; i += blockDim.x) sum += expf(x[i] - mx);
    sum = block_reduce<false>(sum);
    const float inv = 1.f / sum;
    for (int i = threadIdx.x; i < T; i += blockDim.x) y[i] = i <= t ? expf(x[i] - mx) * inv : 0.f;
}

// Softmax backward per row: dpreatt = att ∘ (datt − Σ att·datt) · scale (scale: the Q·Kᵀ scaling).
__global__ void softmax_causal_backward_kernel(float* dpreatt, const float* datt, const float* att, int T,
                                               float scale) {
    const size_t row = blockIdx.x;
    const int t = row % T;
    const float* a = att + row * T;
    const float* da = datt + row * T;
    float* dp = dpreatt + row * T;
    float dot = 0.f;
    for (int i = threadIdx.x; i <= t; i += blockDim.x) dot += a[i] * da[i];
    dot = block_reduce<false>(dot);
    for (int i = threadIdx.x; i < T; i += blockDim.x) dp[i] = i <= t ? a[i] * (da[i] - dot) * scale : 0.f;
}

inline int blocks_for(size_t n, int block) { return (int)((n + block - 1) / block); }

// Scratch of the materialised pipeline; preatt and att are B·NH·T² floats each.
struct Buffers {
    DeviceBuffer<float> q, k, v, preatt, att, vaccum;
    void allocate(int B, int T, int NH, int HS) {
        size_t n = (size_t)B * NH * T * HS, nn = (size_t)B * NH * T * T;
        q.resize(n); k.resize(n); v.resize(n); vaccum.resize(n);
        preatt.resize(nn); att.resize(nn);
    }
};
inline size_t bytes_needed(int B, int T, int NH, int HS) {
    return sizeof(float) * (2 * (size_t)B * NH * T * T + 4 * (size_t)B * NH * T * HS);
}

// out (B, T, NH·HS) from inp (B, T, 3, NH, HS). `block` = threads per block of the custom kernels.
inline void forward(cublasHandle_t handle, Buffers& s, float* out, const float* inp, int B, int T, int NH, int HS,
                    int block) {
    const size_t n = (size_t)B * NH * T * HS;
    permute_kernel<<<blocks_for(n, block), block>>>(s.q.ptr, s.k.ptr, s.v.ptr, inp, B, T, NH, HS);
    cudaCheckLaunch();
    const float alpha = 1.f / sqrtf((float)HS), one = 1.f, zero = 0.f;
    // column-major view: preattᵀ (T2 × T) = Kᵀᵀ... i.e. row-major preatt[t][t2] = scale · Q[t]·K[t2]
    cublasCheck(cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, &alpha, s.k.ptr, HS,
                                          (long long)T * HS, s.q.ptr, HS, (long long)T * HS, &zero, s.preatt.ptr, T,
                                          (long long)T * T, B * NH));
    softmax_causal_kernel<<<B * NH * T, block>>>(s.att.ptr, s.preatt.ptr, T);
    cudaCheckLaunch();
    // row-major vaccum[t][d] = Σ_t2 att[t][t2] V[t2][d]
    cublasCheck(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, &one, s.v.ptr, HS,
                                          (long long)T * HS, s.att.ptr, T, (long long)T * T, &zero, s.vaccum.ptr, HS,
                                          (long long)T * HS, B * NH));
    unpermute_kernel<<<blocks_for(n, block), block>>>(out, s.vaccum.ptr, B, T, NH, HS);
    cudaCheckLaunch();
}

// Gradient scratch (the T×T buffers of the forward are reused for datt and dpreatt).
struct GradBuffers {
    DeviceBuffer<float> dout_p, dq, dk, dv, datt;
    void allocate(int B, int T, int NH, int HS) {
        size_t n = (size_t)B * NH * T * HS;
        dout_p.resize(n); dq.resize(n); dk.resize(n); dv.resize(n);
        datt.resize((size_t)B * NH * T * T);
    }
};

// dinp (overwritten) from dout; recomputes att with the forward first (nothing is saved between calls here,
// so this times forward recompute + backward, as a no-save materialised backend would run).
inline void backward(cublasHandle_t handle, Buffers& s, GradBuffers& g, float* dinp, const float* dout,
                     const float* inp, int B, int T, int NH, int HS, int block) {
    const size_t n = (size_t)B * NH * T * HS;
    forward(handle, s, g.dq.ptr /* scratch: dq is overwritten below */, inp, B, T, NH, HS, block);
    permute_out_kernel<<<blocks_for(n, block), block>>>(g.dout_p.ptr, dout, B, T, NH, HS);
    cudaCheckLaunch();
    const float one = 1.f, zero = 0.f, scale = 1.f / sqrtf((float)HS);
    const long long sTH = (long long)T * HS, sTT = (long long)T * T;
    // datt[t][t2] = dO[t]·V[t2]
    cublasCheck(cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, &one, s.v.ptr, HS, sTH,
                                          g.dout_p.ptr, HS, sTH, &zero, g.datt.ptr, T, sTT, B * NH));
    // dV[t2][d] = Σ_t att[t][t2] dO[t][d]
    cublasCheck(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, &one, g.dout_p.ptr, HS, sTH,
                                          s.att.ptr, T, sTT, &zero, g.dv.ptr, HS, sTH, B * NH));
    // dpreatt (into preatt's buffer), scale folded in
    softmax_causal_backward_kernel<<<B * NH * T, block>>>(s.preatt.ptr, g.datt.ptr, s.att.ptr, T, scale);
    cudaCheckLaunch();
    // dQ[t][d] = Σ_t2 dpre[t][t2] K[t2][d];  dK[t2][d] = Σ_t dpre[t][t2] Q[t][d]
    cublasCheck(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, &one, s.k.ptr, HS, sTH,
                                          s.preatt.ptr, T, sTT, &zero, g.dq.ptr, HS, sTH, B * NH));
    cublasCheck(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, &one, s.q.ptr, HS, sTH,
                                          s.preatt.ptr, T, sTT, &zero, g.dk.ptr, HS, sTH, B * NH));
    unpermute_qkv_kernel<<<blocks_for(n, block), block>>>(dinp, g.dq.ptr, g.dk.ptr, g.dv.ptr, B, T, NH, HS);
    cudaCheckLaunch();
}

}  // namespace materialized
