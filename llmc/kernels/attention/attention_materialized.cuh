// Attention backend "materialized", the direct one: the T×T score and probability matrices exist in device
// memory, made and consumed by cuBLASLt GEMMs and a row-wise softmax.
// Forward:  permute qkv (B,T,3,NH,HS) -> Q,K,V (B,NH,T,HS); S = Q·Kᵀ (one strided-batched GEMM over B·NH heads);
//           P = softmax(scale·S) with the causal mask (saved for backward as `att`); Y = P·V (second GEMM);
//           unpermute Y -> out (B,T,NH·HS).
// Backward: dY from dout; dP = dY·Vᵀ; dV = Pᵀ·dY; dS = scale · P∘(dP − rowsum(P∘dP)) (causal, in place);
//           dQ = dS·K; dK = dSᵀ·Q; permute dQ,dK,dV back into dqkv (B,T,3,NH,HS).
#pragma once

#include "llmc/core/cuda_common.h"
#include "llmc/kernels/matmul/matmul.cuh"

// The three layout changes move 128-bit packs along the head dimension (HS is a multiple of x128::size):
// one thread per pack of the (B,NH,T,HS) side; `pack_index` gives its (b, h, t, d).
struct HeadIndex {
    int b, h, t, d;
};
__device__ __forceinline__ HeadIndex pack_index(size_t pack, int T, int NH, int HS) {
    const int packs_per_row = HS / x128::size;
    HeadIndex i;
    i.d = (pack % packs_per_row) * x128::size;
    size_t r = pack / packs_per_row;
    i.t = r % T;
    r /= T;
    i.h = r % NH;
    i.b = r / NH;
    return i;
}

// qkv (B,T,3,NH,HS) -> q,k,v (B,NH,T,HS).
__global__ void attention_permute_kernel(floatX* q, floatX* k, floatX* v, const floatX* qkv, int B, int T, int NH,
                                         int HS) {
    const size_t pack = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (pack >= (size_t)B * NH * T * HS / x128::size) return;
    const HeadIndex i = pack_index(pack, T, NH, HS);
    const int C = NH * HS;
    const size_t src = ((size_t)i.b * T + i.t) * 3 * C + (size_t)i.h * HS + i.d, dst = pack * x128::size;
    store128(q + dst, load128cs(qkv + src));
    store128(k + dst, load128cs(qkv + src + C));
    store128(v + dst, load128cs(qkv + src + 2 * C));
}

// The inverse: dq,dk,dv (B,NH,T,HS) -> dqkv (B,T,3,NH,HS).
__global__ void attention_permute_backward_kernel(floatX* dqkv, const floatX* dq, const floatX* dk, const floatX* dv,
                                                  int B, int T, int NH, int HS) {
    const size_t pack = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (pack >= (size_t)B * NH * T * HS / x128::size) return;
    const HeadIndex i = pack_index(pack, T, NH, HS);
    const int C = NH * HS;
    const size_t dst = ((size_t)i.b * T + i.t) * 3 * C + (size_t)i.h * HS + i.d, src = pack * x128::size;
    store128(dqkv + dst, load128cs(dq + src));
    store128(dqkv + dst + C, load128cs(dk + src));
    store128(dqkv + dst + 2 * C, load128cs(dv + src));
}

// y (B,NH,T,HS) <-> out (B,T,NH,HS). forward: out = y; backward (to_heads): y = out.
__global__ void attention_unpermute_kernel(floatX* out, floatX* y, int B, int T, int NH, int HS, bool to_heads) {
    const size_t pack = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (pack >= (size_t)B * NH * T * HS / x128::size) return;
    const HeadIndex i = pack_index(pack, T, NH, HS);
    const size_t o = (((size_t)i.b * T + i.t) * NH + i.h) * HS + i.d, yi = pack * x128::size;
    if (to_heads) store128(y + yi, load128cs(out + o));
    else store128(out + o, load128cs(y + yi));
}

// One warp per row of S (row r is query t = r % T): P[t][j] = exp(scale·S[t][j] − max) / sum for j <= t, else 0.
// Each lane handles kVec contiguous elements per step (one 128-bit access when rows are 16-byte aligned, i.e.
// T·sizeof(floatX) % 16 == 0; kVec = 1 otherwise). One online pass (running max and sum), one writing pass.
template <int kVec>
__global__ void attention_softmax_forward_kernel(floatX* P, const floatX* S, float scale, int rows, int T) {
    const int lane = threadIdx.x % kWarpSize;
    const int r = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (r >= rows) return;
    const int t = r % T;
    const floatX* s = S + (size_t)r * T;
    floatX* p = P + (size_t)r * T;
    float m = -INFINITY, l = 0.0f;
    for (int j0 = lane * kVec; j0 <= t; j0 += kWarpSize * kVec) {
        floatX x[kVec];
        if constexpr (kVec == x128::size) *reinterpret_cast<x128*>(x) = load128cs(s + j0);
        else x[0] = s[j0];
        float tile_max = -INFINITY;
        for (int k = 0; k < kVec; k++) if (j0 + k <= t) tile_max = fmaxf(tile_max, to_float(x[k]) * scale);
        const float m_new = fmaxf(m, tile_max);
        l *= expf(m - m_new);
        for (int k = 0; k < kVec; k++) if (j0 + k <= t) l += expf(to_float(x[k]) * scale - m_new);
        m = m_new;
    }
    const float m_row = warp_reduce_max(m);
    l = m == -INFINITY ? 0.0f : l * expf(m - m_row);
    const float inv_l = 1.0f / warp_reduce_sum(l);
    for (int j0 = lane * kVec; j0 < T; j0 += kWarpSize * kVec) {
        floatX x[kVec], y[kVec];
        if (j0 <= t) {
            if constexpr (kVec == x128::size) *reinterpret_cast<x128*>(x) = load128cs(s + j0);
            else x[0] = s[j0];
        }
        for (int k = 0; k < kVec; k++) {
            y[k] = from_float<floatX>(j0 + k <= t ? expf(to_float(x[k]) * scale - m_row) * inv_l : 0.0f);
        }
        if constexpr (kVec == x128::size) store128(p + j0, *reinterpret_cast<x128*>(y));
        else p[j0] = y[0];
    }
}

// In place: dP (rows of T) becomes dS = scale · P∘(dP − Σ_j P∘dP), zero above the diagonal. Same access
// pattern as the forward.
template <int kVec>
__global__ void attention_softmax_backward_kernel(floatX* dP, const floatX* P, float scale, int rows, int T) {
    const int lane = threadIdx.x % kWarpSize;
    const int r = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (r >= rows) return;
    const int t = r % T;
    floatX* dp = dP + (size_t)r * T;
    const floatX* p = P + (size_t)r * T;
    float dot = 0.0f;
    for (int j0 = lane * kVec; j0 <= t; j0 += kWarpSize * kVec) {
        floatX a[kVec], d[kVec];
        if constexpr (kVec == x128::size) {
            *reinterpret_cast<x128*>(a) = load128(p + j0);
            *reinterpret_cast<x128*>(d) = load128(dp + j0);
        } else {
            a[0] = p[j0];
            d[0] = dp[j0];
        }
        for (int k = 0; k < kVec; k++) if (j0 + k <= t) dot += to_float(a[k]) * to_float(d[k]);
    }
    dot = warp_reduce_sum(dot);
    for (int j0 = lane * kVec; j0 < T; j0 += kWarpSize * kVec) {
        floatX a[kVec], d[kVec], y[kVec];
        if (j0 <= t) {
            if constexpr (kVec == x128::size) {
                *reinterpret_cast<x128*>(a) = load128cs(p + j0);
                *reinterpret_cast<x128*>(d) = load128cs(dp + j0);
            } else {
                a[0] = p[j0];
                d[0] = dp[j0];
            }
        }
        for (int k = 0; k < kVec; k++) {
            y[k] = from_float<floatX>(j0 + k <= t ? scale * to_float(a[k]) * (to_float(d[k]) - dot) : 0.0f);
        }
        if constexpr (kVec == x128::size) store128(dp + j0, *reinterpret_cast<x128*>(y));
        else dp[j0] = y[0];
    }
}

// Threads per block of the layout and softmax kernels. The engine always uses the default; dev/cuda sweeps it.
constexpr int kAttentionDefaultBlockSize = 256;

inline void check_block_size(int threads) {
    if (threads < kWarpSize || threads > 1024 || threads % kWarpSize != 0) {
        fprintf(stderr, "error: materialized attention: block size %d must be a multiple of %d in [%d, 1024]\n",
                threads, kWarpSize, kWarpSize);
        exit(EXIT_FAILURE);
    }
}

// Launches the 128-bit variant when every row starts 16-byte aligned. One warp per row, threads / 32 rows a block.
inline void attention_softmax(bool backward, floatX* out, const floatX* in, float scale, int rows, int T,
                              cudaStream_t stream, int threads = kAttentionDefaultBlockSize) {
    check_block_size(threads);
    const int rows_per_block = threads / kWarpSize, blocks = ceil_div(rows, rows_per_block);
    const bool vec = (T * sizeof(floatX)) % 16 == 0;
    if (backward) {
        if (vec) attention_softmax_backward_kernel<x128::size><<<blocks, threads, 0, stream>>>(out, in, scale, rows, T);
        else attention_softmax_backward_kernel<1><<<blocks, threads, 0, stream>>>(out, in, scale, rows, T);
    } else {
        if (vec) attention_softmax_forward_kernel<x128::size><<<blocks, threads, 0, stream>>>(out, in, scale, rows, T);
        else attention_softmax_forward_kernel<1><<<blocks, threads, 0, stream>>>(out, in, scale, rows, T);
    }
    cudaCheckLaunch();
}

// Per layer, what backward needs beyond qkv: P (B,NH,T,T).
inline size_t attention_materialized_saved_bytes(int B, int T, int NH) {
    return (size_t)B * NH * T * T * sizeof(floatX);
}
// Scratch for either pass: Q,K,V + dY (or Y) + dQ,dK,dV, and S (or dP), all floatX.
inline size_t attention_materialized_workspace_bytes(int B, int T, int C, int NH) {
    return ((size_t)7 * B * T * C + (size_t)B * NH * T * T) * sizeof(floatX);
}

inline void check_head_size(int HS) {
    if (HS % x128::size != 0) {
        fprintf(stderr, "error: materialized attention: head size %d must be a multiple of %d\n", HS, x128::size);
        exit(EXIT_FAILURE);
    }
}

// `threads`: block size of the permute, softmax and unpermute kernels (a multiple of 32, at most 1024).
inline void attention_materialized_forward(floatX* out, floatX* att, const floatX* qkv, void* workspace, int B, int T,
                                           int C, int NH, cudaStream_t stream = 0,
                                           int threads = kAttentionDefaultBlockSize) {
    const int HS = C / NH;
    check_head_size(HS);
    const size_t btc = (size_t)B * T * C;
    floatX* q = (floatX*)workspace;
    floatX* k = q + btc;
    floatX* v = k + btc;
    floatX* y = v + btc;
    floatX* S = y + 4 * btc;  // leaves room for the backward's dQ,dK,dV, so both passes share one layout
    attention_permute_kernel<<<ceil_div(btc / x128::size, threads), threads, 0, stream>>>(q, k, v, qkv, B, T, NH, HS);
    cudaCheckLaunch();
    const int heads = B * NH;
    matmul(S, q, k, T, T, HS, false, true, 1.0f, 0.0f, MatmulEpilogue::None, nullptr, nullptr, heads,
           (long long)T * HS, (long long)T * HS, (long long)T * T, stream);
    const float scale = 1.0f / sqrtf((float)HS);
    attention_softmax(false, att, S, scale, heads * T, T, stream, threads);
    matmul(y, att, v, T, HS, T, false, false, 1.0f, 0.0f, MatmulEpilogue::None, nullptr, nullptr, heads,
           (long long)T * T, (long long)T * HS, (long long)T * HS, stream);
    attention_unpermute_kernel<<<ceil_div(btc / x128::size, threads), threads, 0, stream>>>(out, y, B, T, NH, HS, false);
    cudaCheckLaunch();
}

// dqkv is overwritten. att is the forward's P for this qkv. `threads` as in the forward.
inline void attention_materialized_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* att,
                                            void* workspace, int B, int T, int C, int NH, cudaStream_t stream = 0,
                                            int threads = kAttentionDefaultBlockSize) {
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
    attention_permute_kernel<<<ceil_div(btc / x128::size, threads), threads, 0, stream>>>(q, k, v, qkv, B, T, NH, HS);
    cudaCheckLaunch();
    attention_unpermute_kernel<<<ceil_div(btc / x128::size, threads), threads, 0, stream>>>(const_cast<floatX*>(dout), dy, B, T,
                                                                               NH, HS, true);
    cudaCheckLaunch();
    const int heads = B * NH;
    const long long sTT = (long long)T * T, sTH = (long long)T * HS;
    matmul(dP, dy, v, T, T, HS, false, true, 1.0f, 0.0f, MatmulEpilogue::None, nullptr, nullptr, heads, sTH, sTH, sTT,
           stream);
    matmul(dv, att, dy, T, HS, T, true, false, 1.0f, 0.0f, MatmulEpilogue::None, nullptr, nullptr, heads, sTT, sTH,
           sTH, stream);
    const float scale = 1.0f / sqrtf((float)HS);
    attention_softmax(true, dP, att, scale, heads * T, T, stream, threads);
    matmul(dq, dP, k, T, HS, T, false, false, 1.0f, 0.0f, MatmulEpilogue::None, nullptr, nullptr, heads, sTT, sTH, sTH,
           stream);
    matmul(dk, dP, q, T, HS, T, true, false, 1.0f, 0.0f, MatmulEpilogue::None, nullptr, nullptr, heads, sTT, sTH, sTH,
           stream);
    attention_permute_backward_kernel<<<ceil_div(btc / x128::size, threads), threads, 0, stream>>>(dqkv, dq, dk, dv, B, T, NH, HS);
    cudaCheckLaunch();
}
