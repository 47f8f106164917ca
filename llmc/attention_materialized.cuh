// Attention backend "materialized" (Step A of ../shared/design/attention.md): the T×T score and probability
// matrices exist in device memory.
// Forward:  permute qkv (B,T,3,NH,HS) -> Q,K,V (B,NH,T,HS); S = Q·Kᵀ (one strided-batched GEMM over B·NH heads);
//           P = softmax(scale·S) with the causal mask (saved for backward as `att`); Y = P·V (second GEMM);
//           unpermute Y -> out (B,T,NH·HS).
// Backward: dY from dout; dP = dY·Vᵀ; dV = Pᵀ·dY; dS = scale · P∘(dP − rowsum(P∘dP)) (causal, in place);
//           dQ = dS·K; dK = dSᵀ·Q; permute dQ,dK,dV back into dqkv (B,T,3,NH,HS).
#pragma once

#include "cuda_common.h"
#include "matmul.cuh"

// qkv (B,T,3,NH,HS) -> q,k,v (B,NH,T,HS); one thread per element of q (it moves the matching k and v too).
__global__ void attention_permute_kernel(floatX* q, floatX* k, floatX* v, const floatX* qkv, int B, int T, int NH,
                                         int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    const int d = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH, b = idx / ((size_t)HS * T * NH);
    const int C = NH * HS;
    const size_t src = ((size_t)b * T + t) * 3 * C + (size_t)h * HS + d;
    q[idx] = qkv[src];
    k[idx] = qkv[src + C];
    v[idx] = qkv[src + 2 * C];
}

// The inverse: dq,dk,dv (B,NH,T,HS) -> dqkv (B,T,3,NH,HS).
__global__ void attention_permute_backward_kernel(floatX* dqkv, const floatX* dq, const floatX* dk, const floatX* dv,
                                                  int B, int T, int NH, int HS) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    const int d = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH, b = idx / ((size_t)HS * T * NH);
    const int C = NH * HS;
    const size_t dst = ((size_t)b * T + t) * 3 * C + (size_t)h * HS + d;
    dqkv[dst] = dq[idx];
    dqkv[dst + C] = dk[idx];
    dqkv[dst + 2 * C] = dv[idx];
}

// y (B,NH,T,HS) <-> out (B,T,NH,HS). forward: out = y; backward (to_heads): y = out.
__global__ void attention_unpermute_kernel(floatX* out, floatX* y, int B, int T, int NH, int HS, bool to_heads) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    const int d = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH, b = idx / ((size_t)HS * T * NH);
    const size_t o = (((size_t)b * T + t) * NH + h) * HS + d;
    if (to_heads) y[idx] = out[o];
    else out[o] = y[idx];
}

// One warp per row of S (row r is query t = r % T): P[t][j] = exp(scale·S[t][j] − max) / sum for j <= t, else 0.
__global__ void attention_softmax_forward_kernel(floatX* P, const floatX* S, float scale, int rows, int T) {
    const int lane = threadIdx.x % kWarpSize;
    const int r = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (r >= rows) return;
    const int t = r % T;
    const floatX* s = S + (size_t)r * T;
    floatX* p = P + (size_t)r * T;
    float m = -INFINITY;
    for (int j = lane; j <= t; j += kWarpSize) m = fmaxf(m, to_float(s[j]) * scale);
    m = warp_reduce_max(m);
    float l = 0.0f;
    for (int j = lane; j <= t; j += kWarpSize) l += expf(to_float(s[j]) * scale - m);
    const float inv_l = 1.0f / warp_reduce_sum(l);
    for (int j = lane; j < T; j += kWarpSize) {
        p[j] = from_float<floatX>(j <= t ? expf(to_float(s[j]) * scale - m) * inv_l : 0.0f);
    }
}

// In place: dP (rows of T) becomes dS = scale · P∘(dP − Σ_j P∘dP), zero above the diagonal.
__global__ void attention_softmax_backward_kernel(floatX* dP, const floatX* P, float scale, int rows, int T) {
    const int lane = threadIdx.x % kWarpSize;
    const int r = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (r >= rows) return;
    const int t = r % T;
    floatX* dp = dP + (size_t)r * T;
    const floatX* p = P + (size_t)r * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += kWarpSize) dot += to_float(p[j]) * to_float(dp[j]);
    dot = warp_reduce_sum(dot);
    for (int j = lane; j < T; j += kWarpSize) {
        float ds = j <= t ? scale * to_float(p[j]) * (to_float(dp[j]) - dot) : 0.0f;
        dp[j] = from_float<floatX>(ds);
    }
}

// Per layer, what backward needs beyond qkv: P (B,NH,T,T).
inline size_t attention_materialized_saved_bytes(int B, int T, int NH) {
    return (size_t)B * NH * T * T * sizeof(floatX);
}
// Scratch for either pass: Q,K,V + dY (or Y) + dQ,dK,dV, and S (or dP), all floatX.
inline size_t attention_materialized_workspace_bytes(int B, int T, int C, int NH) {
    return ((size_t)7 * B * T * C + (size_t)B * NH * T * T) * sizeof(floatX);
}

inline void attention_materialized_forward(floatX* out, floatX* att, const floatX* qkv, void* workspace, int B, int T,
                                           int C, int NH, cudaStream_t stream = 0) {
    const int HS = C / NH;
    const size_t btc = (size_t)B * T * C;
    floatX* q = (floatX*)workspace;
    floatX* k = q + btc;
    floatX* v = k + btc;
    floatX* y = v + btc;
    floatX* S = y + 4 * btc;  // leaves room for the backward's dQ,dK,dV, so both passes share one layout
    const int threads = 256;
    attention_permute_kernel<<<ceil_div(btc, threads), threads, 0, stream>>>(q, k, v, qkv, B, T, NH, HS);
    cudaCheckLaunch();
    const int heads = B * NH;
    matmul(S, q, k, T, T, HS, false, true, 1.0f, 0.0f, MatmulEpilogue::None, nullptr, nullptr, heads,
           (long long)T * HS, (long long)T * HS, (long long)T * T, stream);
    const float scale = 1.0f / sqrtf((float)HS);
    const int rows = heads * T, rows_per_block = threads / kWarpSize;
    attention_softmax_forward_kernel<<<ceil_div(rows, rows_per_block), threads, 0, stream>>>(att, S, scale, rows, T);
    cudaCheckLaunch();
    matmul(y, att, v, T, HS, T, false, false, 1.0f, 0.0f, MatmulEpilogue::None, nullptr, nullptr, heads,
           (long long)T * T, (long long)T * HS, (long long)T * HS, stream);
    attention_unpermute_kernel<<<ceil_div(btc, threads), threads, 0, stream>>>(out, y, B, T, NH, HS, false);
    cudaCheckLaunch();
}

// dqkv is overwritten. att is the forward's P for this qkv.
inline void attention_materialized_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* att,
                                            void* workspace, int B, int T, int C, int NH, cudaStream_t stream = 0) {
    const int HS = C / NH;
    const size_t btc = (size_t)B * T * C;
    floatX* q = (floatX*)workspace;
    floatX* k = q + btc;
    floatX* v = k + btc;
    floatX* dy = v + btc;
    floatX* dq = dy + btc;
    floatX* dk = dq + btc;
    floatX* dv = dk + btc;
    floatX* dP = dv + btc;
    const int threads = 256;
    attention_permute_kernel<<<ceil_div(btc, threads), threads, 0, stream>>>(q, k, v, qkv, B, T, NH, HS);
    cudaCheckLaunch();
    attention_unpermute_kernel<<<ceil_div(btc, threads), threads, 0, stream>>>(const_cast<floatX*>(dout), dy, B, T,
                                                                               NH, HS, true);
    cudaCheckLaunch();
    const int heads = B * NH;
    const long long sTT = (long long)T * T, sTH = (long long)T * HS;
    matmul(dP, dy, v, T, T, HS, false, true, 1.0f, 0.0f, MatmulEpilogue::None, nullptr, nullptr, heads, sTH, sTH, sTT,
           stream);
    matmul(dv, att, dy, T, HS, T, true, false, 1.0f, 0.0f, MatmulEpilogue::None, nullptr, nullptr, heads, sTT, sTH,
           sTH, stream);
    const float scale = 1.0f / sqrtf((float)HS);
    const int rows = heads * T, rows_per_block = threads / kWarpSize;
    attention_softmax_backward_kernel<<<ceil_div(rows, rows_per_block), threads, 0, stream>>>(dP, att, scale, rows, T);
    cudaCheckLaunch();
    matmul(dq, dP, k, T, HS, T, false, false, 1.0f, 0.0f, MatmulEpilogue::None, nullptr, nullptr, heads, sTT, sTH, sTH,
           stream);
    matmul(dk, dP, q, T, HS, T, true, false, 1.0f, 0.0f, MatmulEpilogue::None, nullptr, nullptr, heads, sTT, sTH, sTH,
           stream);
    attention_permute_backward_kernel<<<ceil_div(btc, threads), threads, 0, stream>>>(dqkv, dq, dk, dv, B, T, NH, HS);
    cudaCheckLaunch();
}
