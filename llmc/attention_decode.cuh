// Attention for one new token per sequence against a KV cache (generation's decode step, issue 16), FlashDecoding's
// split: the cache length is cut into chunks, a block per (chunk, b, h) computes that chunk's softmax partials, and
// the last block of each (b, h) to finish (an atomic count per (b, h)) merges them through their log-sum-exp, in
// chunk order whatever the order of finishing, so the result is deterministic. One kernel: at batch 1 a second
// kernel for the merge cost as much as the partials (3.7 vs 4.9 µs per layer at d12).
//
// Validated against fp64 by dev/cuda/attention_decode -c (in make test on GPU machines) and, inside the decode
// step, by tests/test_decode.
//
// Layouts: q (B, NH, HS) with batches q_stride elements apart (NH·HS packed; 3·NH·HS read straight from the
// QKV projection's rows), the new token's queries; k_cache, v_cache (B, NH, max_T, HS), positions
// 0 .. len[b]-1 valid (the new token's K and V already written at len[b]-1); out (B, NH·HS), as the attention
// projection reads it. All bf16 (BF16 builds) or all fp32 (FP32 builds: T = float). Scale 1/sqrt(HS). Decode is bound by reading the cache, so each warp reads whole
// 64- or 128-element K and V rows (each lane 2 or 4 consecutive bf16 in one load: 128 or 256 contiguous bytes per
// row), 8 keys' rows at once, and keeps its own online softmax; the warps of a block merge in shared memory.
// Precondition: every len[b] >= 1 (the new token is in the cache).
#pragma once

#include <cuda_bf16.h>

#include <cmath>

#include "cuda_common.h"

namespace decode_attention {

constexpr int kChunk = 64;  // keys per block: many blocks even at batch 1 (d12, T 512: 12 heads x 8 chunks)
// keys a warp loads at once (K and V rows together), so their memory latencies overlap: 8 at HS 64, 4 at HS 128
// (the same bytes in flight; 8 rows of 128 spill)
template <int HS>
constexpr int kGroup = HS == 64 ? 8 : 4;

// This lane's kPer consecutive elements of a row as floats, in one load (4 or 8 bytes of bf16, 8 or 16 of fp32).
template <int kPer>
__device__ __forceinline__ void load_elements(const float* p, float (&out)[kPer]) {
    static_assert(kPer == 2 || kPer == 4, "HS 64 or 128");
    if constexpr (kPer == 2) {
        const float2 f = *reinterpret_cast<const float2*>(p);
        out[0] = f.x, out[1] = f.y;
    } else {
        const float4 f = *reinterpret_cast<const float4*>(p);
        out[0] = f.x, out[1] = f.y, out[2] = f.z, out[3] = f.w;
    }
}
template <int kPer>
__device__ __forceinline__ void load_elements(const __nv_bfloat16* p, float (&out)[kPer]) {
    static_assert(kPer == 2 || kPer == 4, "HS 64 or 128");
    if constexpr (kPer == 2) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
        out[0] = f.x, out[1] = f.y;
    } else {  // bf16 -> fp32 is the 16 bits moved to the top: exact, and no address of a register is taken
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        out[0] = __uint_as_float(u.x << 16), out[1] = __uint_as_float(u.x & 0xFFFF0000u);
        out[2] = __uint_as_float(u.y << 16), out[3] = __uint_as_float(u.y & 0xFFFF0000u);
    }
}

// One chunk of (b, h): its partials, m (max of the scaled scores, log2 domain), l (sum of exp2), o (unnormalised
// output); the last chunk of (b, h) to finish writes out (b, h).
// kWarps: 8 when the grid is small (a 64-key chunk is one round of 8-key loads per warp at HS 64: the latency of
// one round, what a batch-1 step waits for), 4 when it fills the GPU many times over (fewer partials to merge per
// block: batch 64 was 5% slower per step with 8).
// The work of one block, as a device function (a block calling it again must __syncthreads() first: it reuses its
// shared memory).
template <int HS, typename T, int kWarps>
__device__ __forceinline__ void split_block(T* __restrict__ out, float* __restrict__ part_o,
                                            float* __restrict__ part_ml, unsigned* __restrict__ finished,
                                            const T* __restrict__ q, const T* __restrict__ k_cache,
                                            const T* __restrict__ v_cache, const int* __restrict__ len, int NH,
                                            int max_T, int num_chunks, size_t q_stride, int chunk, int bh) {
    constexpr int kPer = HS / 32;  // elements per lane: 2 (HS 64) or 4 (HS 128), consecutive
    const int b = bh / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n = len[b];
    const int k_begin = chunk * kChunk, k_end = min(n, k_begin + kChunk);
    if (k_begin >= n) return;  // past this sequence's length: the merge reads only the chunks that hold keys
    const float scale_log2 = rsqrtf((float)HS) * 1.4426950408889634f;

    float qv[kPer], o[kPer];
#pragma unroll
    for (int i = 0; i < kPer; i++) {
        qv[i] = to_float(q[b * q_stride + (size_t)(bh % NH) * HS + lane * kPer + i]) * scale_log2;
        o[i] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const T* k_base = k_cache + (size_t)bh * max_T * HS + lane * kPer;
    const T* v_base = v_cache + (size_t)bh * max_T * HS + lane * kPer;
    for (int k0 = k_begin + warp * kGroup<HS>; k0 < k_end; k0 += kWarps * kGroup<HS>) {
        float s[kGroup<HS>], kv[kGroup<HS>][kPer], vv[kGroup<HS>][kPer];
#pragma unroll
        for (int j = 0; j < kGroup<HS>; j++) {  // the group's K and V rows, every load issued before any is used
#pragma unroll
            for (int i = 0; i < kPer; i++) kv[j][i] = vv[j][i] = 0.f;
            if (k0 + j < k_end) {
                load_elements<kPer>(k_base + (size_t)(k0 + j) * HS, kv[j]);
                load_elements<kPer>(v_base + (size_t)(k0 + j) * HS, vv[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < kGroup<HS>; j++) {
            s[j] = 0.f;
#pragma unroll
            for (int i = 0; i < kPer; i++) s[j] += qv[i] * kv[j][i];
        }
#pragma unroll
        for (int j = 0; j < kGroup<HS>; j++) {
#pragma unroll
            for (int off = 16; off > 0; off /= 2) s[j] += __shfl_xor_sync(0xffffffff, s[j], off);
            if (k0 + j >= k_end) s[j] = -INFINITY;
        }
        float m_new = m;
#pragma unroll
        for (int j = 0; j < kGroup<HS>; j++) m_new = fmaxf(m_new, s[j]);
        const float alpha = exp2f(m - m_new);  // m_new is finite: key k0 < k_end is in the group
        l *= alpha;
#pragma unroll
        for (int i = 0; i < kPer; i++) o[i] *= alpha;
#pragma unroll
        for (int j = 0; j < kGroup<HS>; j++) {
            if (k0 + j < k_end) {
                const float p = exp2f(s[j] - m_new);
                l += p;
#pragma unroll
                for (int i = 0; i < kPer; i++) o[i] += p * vv[j][i];
            }
        }
        m = m_new;
    }

    // merge the warps: each warp's (m, l, o) into shared memory, then warp 0 combines
    __shared__ float sm[kWarps], sl[kWarps], so[kWarps][HS];
    if (lane == 0) sm[warp] = m, sl[warp] = l;
#pragma unroll
    for (int i = 0; i < kPer; i++) so[warp][lane * kPer + i] = o[i];
    __syncthreads();
    if (warp != 0) return;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; w++) M = fmaxf(M, sm[w]);
    float L = 0.f, O[kPer] = {};
#pragma unroll
    for (int w = 0; w < kWarps; w++) {
        const float f = sm[w] == -INFINITY ? 0.f : exp2f(sm[w] - M);  // a warp that saw no key adds nothing
        L += sl[w] * f;
#pragma unroll
        for (int i = 0; i < kPer; i++) O[i] += so[w][lane * kPer + i] * f;
    }
    const size_t at = (size_t)bh * num_chunks + chunk;
#pragma unroll
    for (int i = 0; i < kPer; i++) part_o[at * HS + lane * kPer + i] = O[i];
    if (lane == 0) part_ml[2 * at] = M, part_ml[2 * at + 1] = L;

    // The last of this (b, h)'s chunks to finish merges: the partials are made visible device-wide before the
    // count, and read back from L2 (__ldcg), not from this SM's L1.
    const int used = (n + kChunk - 1) / kChunk;
    __threadfence();
    __syncwarp();
    unsigned before = 0;
    if (lane == 0) {
        before = atomicAdd(finished + bh, 1u);
        __threadfence();
    }
    __syncwarp();
    if (__shfl_sync(0xffffffff, before, 0) != (unsigned)used - 1) return;
    __threadfence();
    if (lane == 0) finished[bh] = 0;  // every chunk has counted: ready for the next call
    // out (b, h) = Σ_chunks o·2^(m − M) / Σ_chunks l·2^(m − M)
    const size_t first = (size_t)bh * num_chunks;
    M = -INFINITY;
    for (int c = 0; c < used; c++) M = fmaxf(M, __ldcg(part_ml + 2 * (first + c)));
    L = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; i++) O[i] = 0.f;
    for (int c = 0; c < used; c++) {
        const float f = exp2f(__ldcg(part_ml + 2 * (first + c)) - M);
        L += __ldcg(part_ml + 2 * (first + c) + 1) * f;
#pragma unroll
        for (int i = 0; i < kPer; i++) O[i] += __ldcg(part_o + (first + c) * HS + lane * kPer + i) * f;
    }
    const float inv = 1.f / L;
#pragma unroll
    for (int i = 0; i < kPer; i++) out[(size_t)bh * HS + lane * kPer + i] = from_float<T>(O[i] * inv);
}

// The standalone kernel: a block per (chunk, b·NH + h).
template <int HS, typename T, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    split_kernel(T* __restrict__ out, float* __restrict__ part_o, float* __restrict__ part_ml,
                 unsigned* __restrict__ finished, const T* __restrict__ q, const T* __restrict__ k_cache,
                 const T* __restrict__ v_cache, const int* __restrict__ len, int NH, int max_T, int num_chunks,
                 size_t q_stride) {
    pdl_trigger_and_wait();  // launched as a programmatic dependent (pdl): all below reads the kernel before's output
    split_block<HS, T, kWarps>(out, part_o, part_ml, finished, q, k_cache, v_cache, len, NH, max_T, num_chunks,
                               q_stride, blockIdx.x, blockIdx.y);
}

}  // namespace decode_attention

// Scratch: the partials, (B·NH·chunks) x (HS + 2) floats, chunks = ceil(max_T / 64), then B·NH counts of finished
// chunks, which must be zero before the first call (attention_decode_workspace_init); each call leaves them zero.
inline size_t attention_decode_workspace_bytes(int B, int NH, int max_T, int HS) {
    const size_t chunks = (size_t)(max_T + decode_attention::kChunk - 1) / decode_attention::kChunk;
    return (size_t)B * NH * chunks * (HS + 2) * sizeof(float) + (size_t)B * NH * sizeof(unsigned);
}
inline unsigned* attention_decode_counts(void* workspace, int B, int NH, int max_T, int HS) {
    return (unsigned*)((char*)workspace + attention_decode_workspace_bytes(B, NH, max_T, HS) -
                       (size_t)B * NH * sizeof(unsigned));
}
// The workspace's parts: partial outputs (B·NH·chunks, HS), their (m, l) pairs, the counts.
struct DecodeAttentionParts {
    float* o;
    float* ml;
    unsigned* finished;
    int chunks;
};
inline DecodeAttentionParts attention_decode_parts(void* workspace, int B, int NH, int max_T, int HS) {
    const int chunks = (max_T + decode_attention::kChunk - 1) / decode_attention::kChunk;
    float* o = (float*)workspace;
    return {o, o + (size_t)B * NH * chunks * HS, attention_decode_counts(workspace, B, NH, max_T, HS), chunks};
}
inline cudaError_t attention_decode_workspace_init(void* workspace, int B, int NH, int max_T, int HS,
                                                   cudaStream_t stream = 0) {
    return cudaMemsetAsync(attention_decode_counts(workspace, B, NH, max_T, HS), 0, (size_t)B * NH * sizeof(unsigned),
                           stream);
}

// len: device array of B lengths (>= 1, <= max_T). workspace: attention_decode_workspace_bytes, initialised once by
// attention_decode_workspace_init. HS 64 or 128. q_stride: elements between consecutive sequences' queries (0: NH·HS,
// packed).
template <typename T>  // __nv_bfloat16 or float
inline cudaError_t attention_decode(T* out, const T* q, const T* k_cache, const T* v_cache, const int* len, int B, int NH, int max_T, int HS,
                                    void* workspace, cudaStream_t stream = 0, size_t q_stride = 0, bool pdl = false) {
    if (q_stride == 0) q_stride = (size_t)NH * HS;
    using namespace decode_attention;
    const DecodeAttentionParts parts = attention_decode_parts(workspace, B, NH, max_T, HS);
    const int chunks = parts.chunks;  // blocks past a sequence's length exit at once
    const bool small = (long long)chunks * B * NH <= 2LL * device_sm_count();
    PdlLaunch launch(dim3(chunks, B * NH), dim3((small ? 8 : 4) * 32), 0, stream, pdl);
    auto kernel = HS == 64    ? (small ? split_kernel<64, T, 8> : split_kernel<64, T, 4>)
                  : HS == 128 ? (small ? split_kernel<128, T, 8> : split_kernel<128, T, 4>)
                              : nullptr;
    if (!kernel) return cudaErrorInvalidValue;
    const cudaError_t e = cudaLaunchKernelEx(&launch.config, kernel, out, parts.o, parts.ml, parts.finished, q, k_cache,
                                             v_cache, len, NH, max_T, chunks, q_stride);
    if (e != cudaSuccess) return e;
    return cudaGetLastError();
}
