// Attention for one new token per sequence against a KV cache (generation's decode step), in two kernels
// for two regimes:
//   - split_kernel (FlashDecoding's split), for few sequences x heads: the cache length is cut into chunks, a block
//     per (chunk, b, h) computes that chunk's softmax partials, and the last block of each (b, h) to finish (an
//     atomic count per (b, h)) merges them through their log-sum-exp, in chunk order whatever the order of
//     finishing, so the result is deterministic. One kernel: at batch 1 a second kernel for the merge costs about as
//     much as the partials.
//   - head_kernel, for many (d12 at batch 64: 768): a block per (b, h) over its whole cache, 16-byte loads, no
//     partials; it can also take the new token's K and V from the QKV row and append them to the cache itself.
//
// Validated against fp64 by dev/cuda/attention_decode -c (in make test on GPU machines) and, inside the decode
// step, by tests/gpu/test_decode.
//
// Layouts: q (B, NH, HS) with batches q_stride elements apart (NH·HS packed; 3·NH·HS read straight from the
// QKV projection's rows), the new token's queries; k_cache, v_cache (B, NH, max_T, HS), positions
// 0 .. len[b]-1 valid (the new token's K and V at len[b]-1, written before or by the call); out (B, NH·HS), as the
// attention projection reads it. All bf16 (BF16 builds) or all fp32 (FP32 builds: T = float). Scale 1/sqrt(HS).
// Precondition: every len[b] >= 1 (the new token is in the cache). With a row map seq, row b reads cache sequence
// seq[b] (its own length len[b]): several rows of one sequence are the positions of a server's prompt chunk, each
// attending over the cache up to itself.
#pragma once

#include <cuda_bf16.h>

#include <cmath>

#include "llmc/core/cuda_common.h"

namespace decode_attention {

// split_kernel: each warp reads whole 64- or 128-element K and V rows (each lane 2 or 4 consecutive elements in one
// load), kGroup keys' rows at once, and keeps its own online softmax; the warps of a block merge in shared memory.
constexpr int kChunk = 64;  // keys per block: many blocks even at batch 1 (d12, T 512: 12 heads x 8 chunks)
// keys a warp loads at once (K and V rows together), so their memory latencies overlap: 8 at HS 64, 4 at HS 128
// (the same bytes in flight; 8 rows of 128 spill)
template <int HS>
constexpr int kGroup = HS == 64 ? 8 : 4;

// Two bf16 in a 32-bit word -> floats: bf16 -> fp32 is the 16 bits moved to the top (exact, and no address of a
// register is taken).
__device__ __forceinline__ void widen_bf16x2(uint32_t w, float& lo, float& hi) {
    lo = __uint_as_float(w << 16), hi = __uint_as_float(w & 0xFFFF0000u);
}

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
    } else {
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        widen_bf16x2(u.x, out[0], out[1]);
        widen_bf16x2(u.y, out[2], out[3]);
    }
}

// One chunk of (b, h): its partials, m (max of the scaled scores, log2 domain), l (sum of exp2), o (unnormalised
// output); the last chunk of (b, h) to finish writes out (b, h). A block per (chunk, b·NH + h); chunks past a
// sequence's length exit at once.
// kWarps: 8 when the grid is small (a 64-key chunk is one round of 8-key loads per warp at HS 64: the latency of
// one round, what a batch-1 step waits for), 4 when it fills the GPU many times over (fewer partials to merge per
// block: batch 64 was slower per step with 8).
template <int HS, typename T, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    split_kernel(T* __restrict__ out, float* __restrict__ part_o, float* __restrict__ part_ml,
                 unsigned* __restrict__ finished, const T* __restrict__ q, const T* __restrict__ k_cache,
                 const T* __restrict__ v_cache, const int* __restrict__ len, int NH, int max_T, int num_chunks,
                 size_t q_stride, const int* __restrict__ seq) {
    pdl_trigger_and_wait();  // launched as a programmatic dependent (pdl): all below reads the kernel before's output
    constexpr int kPer = HS / 32;  // elements per lane: 2 (HS 64) or 4 (HS 128), consecutive
    const int chunk = blockIdx.x, bh = blockIdx.y, b = bh / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n = len[b];
    const int k_begin = chunk * kChunk, k_end = min(n, k_begin + kChunk);
    if (k_begin >= n) return;  // past this sequence's length: the merge reads only the chunks that hold keys
    const float scale_log2 = rsqrtf((float)HS) * kLog2e;
    float qv[kPer], o[kPer];
#pragma unroll
    for (int i = 0; i < kPer; i++) {
        qv[i] = to_float(q[b * q_stride + (size_t)(bh % NH) * HS + lane * kPer + i]) * scale_log2;
        o[i] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const size_t head = ((size_t)(seq ? seq[b] : b) * NH + bh % NH) * max_T * HS;  // the row's sequence's
    const T* k_base = k_cache + head + lane * kPer;
    const T* v_base = v_cache + head + lane * kPer;
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

// Whole caches, one block per (b, h): for grids of many sequences x heads (d12 at batch 64: 768 blocks), where the
// GPU is full without splitting the cache, and the split's partials, counts and merge are pure cost. Bound by reading
// the cache, so each lane loads 16 bytes of a row (a K or V row is kLanes lanes, a warp loads kRows rows at once,
// kLoads of each per step: 4 KB in flight per warp) and keeps its own online softmax over the rows it loads; the
// lanes of a row add their dot products with shuffles. At the end the rows of a warp, then the warps (in order),
// merge through their log-sum-exp: deterministic.
// new_kv (optional): the new token's K and V rows (b, h) at new_kv + b·q_stride + h·HS and + C; they are written
// into the cache at position len[b] - 1 and attended from registers, so no kernel has to append them before.
template <int HS, typename T>
struct HeadTile {
    static constexpr int kVec = 16 / sizeof(T);    // elements of a row per lane per load
    static constexpr int kLanes = HS / kVec;       // lanes per row: 8 (HS 64 bf16), 16 (HS 128 bf16, HS 64 fp32), 32
    static constexpr int kRows = 32 / kLanes;      // rows per warp-wide load
    static constexpr int kLoads = 4;               // loads of K rows (and of V rows) per lane per step
    static constexpr int kKeys = kLoads * kRows;   // keys per warp per step
};
constexpr int kHeadWarps = 4;

template <typename T, int kVec>
__device__ __forceinline__ void unpack16(const uint4& raw, float (&f)[kVec]) {
    if constexpr (sizeof(T) == 2) {
        widen_bf16x2(raw.x, f[0], f[1]);
        widen_bf16x2(raw.y, f[2], f[3]);
        widen_bf16x2(raw.z, f[4], f[5]);
        widen_bf16x2(raw.w, f[6], f[7]);
    } else {
        f[0] = __uint_as_float(raw.x), f[1] = __uint_as_float(raw.y), f[2] = __uint_as_float(raw.z), f[3] = __uint_as_float(raw.w);
    }
}

// (m, l, o) of this lane merged with another's (the other from a shuffle or shared memory): the same arithmetic on
// both sides of a pair, so both end with the same bits.
template <int kVec>
__device__ __forceinline__ void merge_state(float& m, float& l, float (&o)[kVec], float m2, float l2, const float (&o2)[kVec]) {
    const float M = fmaxf(m, m2);
    const float f1 = m == -INFINITY ? 0.f : exp2f(m - M), f2 = m2 == -INFINITY ? 0.f : exp2f(m2 - M);
    l = l * f1 + l2 * f2;
#pragma unroll
    for (int i = 0; i < kVec; i++) o[i] = o[i] * f1 + o2[i] * f2;
    m = M;
}

template <int HS, typename T>
__global__ void __launch_bounds__(kHeadWarps * 32)
    head_kernel(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ new_kv, T* __restrict__ k_cache,
                T* __restrict__ v_cache, const int* __restrict__ len, int NH, int max_T, size_t q_stride,
                const int* __restrict__ seq) {
    using Tile = HeadTile<HS, T>;
    constexpr int kVec = Tile::kVec, kLanes = Tile::kLanes, kLoads = Tile::kLoads;
    pdl_trigger_and_wait();  // launched as a programmatic dependent (pdl): all below reads the kernel before's output
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * HS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int sub = lane / kLanes, d0 = (lane % kLanes) * kVec;  // this lane's row of a load and its elements
    const int n = len[b];
    const int cached = new_kv ? n - 1 : n;  // keys read from the cache
    const float scale_log2 = rsqrtf((float)HS) * kLog2e;
    float qv[kVec], o[kVec], m = -INFINITY, l = 0.f;
    unpack16<T, kVec>(*reinterpret_cast<const uint4*>(q + b * q_stride + (size_t)h * HS + d0), qv);
#pragma unroll
    for (int i = 0; i < kVec; i++) qv[i] *= scale_log2, o[i] = 0.f;
    // a lane's dot product with its slice of a row, completed across the row's lanes
    auto score = [&](const uint4& raw) {
        float k[kVec], s = 0.f;
        unpack16<T, kVec>(raw, k);
#pragma unroll
        for (int i = 0; i < kVec; i++) s += qv[i] * k[i];
#pragma unroll
        for (int off = kLanes / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffff, s, off);
        return s;
    };
    const size_t head = ((size_t)(seq ? seq[b] : b) * NH + h) * max_T * HS + d0;  // the row's sequence's
    if (new_kv) {  // the new token: warp 0's first row of lanes starts from it and writes it into the cache
        const T* src = new_kv + b * q_stride + (size_t)h * HS + d0;
        const uint4 kr = *reinterpret_cast<const uint4*>(src), vr = *reinterpret_cast<const uint4*>(src + C);
        const float s = score(kr);
        if (warp == 0 && sub == 0) {
            *reinterpret_cast<uint4*>(k_cache + head + (size_t)(n - 1) * HS) = kr;
            *reinterpret_cast<uint4*>(v_cache + head + (size_t)(n - 1) * HS) = vr;
            m = s, l = 1.f;
            unpack16<T, kVec>(vr, o);
        }
    }
    const T* k_base = k_cache + head;
    const T* v_base = v_cache + head;
    for (int k0 = warp * Tile::kKeys; k0 < cached; k0 += kHeadWarps * Tile::kKeys) {
        uint4 kr[kLoads], vr[kLoads];
#pragma unroll
        for (int j = 0; j < kLoads; j++) {  // every load of the step issued before any is used
            const int row = k0 + j * Tile::kRows + sub;
            kr[j] = vr[j] = make_uint4(0, 0, 0, 0);
            if (row < cached) {
                kr[j] = *reinterpret_cast<const uint4*>(k_base + (size_t)row * HS);
                vr[j] = *reinterpret_cast<const uint4*>(v_base + (size_t)row * HS);
            }
        }
        float s[kLoads], m_new = m;
#pragma unroll
        for (int j = 0; j < kLoads; j++) {
            s[j] = score(kr[j]);
            if (k0 + j * Tile::kRows + sub >= cached) s[j] = -INFINITY;
            m_new = fmaxf(m_new, s[j]);
        }
        // a lane whose rows are all past the end keeps m = -inf: exponents taken from 0 then give 0
        const float m_use = m_new == -INFINITY ? 0.f : m_new, alpha = exp2f(m - m_use);
        l *= alpha;
#pragma unroll
        for (int i = 0; i < kVec; i++) o[i] *= alpha;
#pragma unroll
        for (int j = 0; j < kLoads; j++) {
            const float p = exp2f(s[j] - m_use);
            float v[kVec];
            unpack16<T, kVec>(vr[j], v);
            l += p;
#pragma unroll
            for (int i = 0; i < kVec; i++) o[i] += p * v[i];
        }
        m = m_new;
    }

    // the warp's rows of lanes merged (a fixed tree), then the warps in order
#pragma unroll
    for (int off = kLanes; off < 32; off *= 2) {
        float o2[kVec];
#pragma unroll
        for (int i = 0; i < kVec; i++) o2[i] = __shfl_xor_sync(0xffffffff, o[i], off);
        merge_state<kVec>(m, l, o, __shfl_xor_sync(0xffffffff, m, off), __shfl_xor_sync(0xffffffff, l, off), o2);
    }
    __shared__ float sm[kHeadWarps], sl[kHeadWarps], so[kHeadWarps][HS];
    if (lane < kLanes) {
#pragma unroll
        for (int i = 0; i < kVec; i++) so[warp][d0 + i] = o[i];
        if (lane == 0) sm[warp] = m, sl[warp] = l;
    }
    __syncthreads();
    if (warp != 0 || lane >= kLanes) return;
    for (int w = 1; w < kHeadWarps; w++) {
        float o2[kVec];
#pragma unroll
        for (int i = 0; i < kVec; i++) o2[i] = so[w][d0 + i];
        merge_state<kVec>(m, l, o, sm[w], sl[w], o2);
    }
    const float inv = 1.f / l;  // l >= 1: the largest score contributes exp2(0)
    T y[kVec];
#pragma unroll
    for (int i = 0; i < kVec; i++) y[i] = from_float<T>(o[i] * inv);
    *reinterpret_cast<uint4*>(out + (size_t)bh * HS + d0) = *reinterpret_cast<const uint4*>(y);
}

// K and V rows into the cache, 16 bytes per thread: row (b, t) of `src` (t < T) holds K at src + (b·T + t)·stride
// and V C elements after it; cache (b, h, pos, :) takes head h's HS elements, pos = t, or len[b] - 1 when len is
// given (a decode step's new token, T = 1). The prefill (kv_cache_fill: src = the QKV rows' K part) and the
// split kernel's append (src = the new token's QKV row) both use it, through copy_kv below.
template <typename T>
__global__ void copy_kv_kernel(T* __restrict__ k_cache, T* __restrict__ v_cache, const T* __restrict__ src,
                               size_t stride, const int* __restrict__ len, int B, int T_rows, int NH, int HS,
                               int max_T, const int* __restrict__ seq) {
    pdl_trigger_and_wait();  // a no-op unless launched as a programmatic dependent
    constexpr int kVec = 16 / sizeof(T);
    const int C = NH * HS, per_row = C / kVec;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // over (b, t, vectors of C)
    if (idx >= (long long)B * T_rows * per_row) return;
    const int g = (int)(idx % per_row);
    const long long bt = idx / per_row;
    const int b = (int)(bt / T_rows), t = (int)(bt % T_rows);
    if (seq && seq[b] < 0) return;  // a row of padding: no sequence's
    const int h = g * kVec / HS, d = g * kVec % HS;
    const int pos = len ? len[b] - 1 : t;
    const T* row = src + bt * stride + (size_t)g * kVec;
    const size_t at = (((size_t)(seq ? seq[b] : b) * NH + h) * max_T + pos) * HS + d;
    *reinterpret_cast<uint4*>(k_cache + at) = *reinterpret_cast<const uint4*>(row);
    *reinterpret_cast<uint4*>(v_cache + at) = *reinterpret_cast<const uint4*>(row + C);
}

// Launches copy_kv_kernel over B·T_rows rows (pdl: as a programmatic dependent of the kernel before). seq: device
// array of B cache sequences, row b's K and V into sequence seq[b] (a server's prompts into their slots; -1: none, a
// row of padding); null: sequence b.
template <typename T>
inline cudaError_t copy_kv(T* k_cache, T* v_cache, const T* src, size_t stride, const int* len, int B, int T_rows,
                           int NH, int HS, int max_T, cudaStream_t stream, bool pdl = false,
                           const int* seq = nullptr) {
    const long long threads = (long long)B * T_rows * NH * HS / (16 / (int)sizeof(T));
    PdlLaunch launch(dim3((unsigned)((threads + 255) / 256)), dim3(256), 0, stream, pdl);
    const cudaError_t e = cudaLaunchKernelEx(&launch.config, copy_kv_kernel<T>, k_cache, v_cache, src, stride, len, B,
                                             T_rows, NH, HS, max_T, seq);
    return e != cudaSuccess ? e : cudaGetLastError();
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
inline cudaError_t attention_decode_workspace_init(void* workspace, int B, int NH, int max_T, int HS,
                                                   cudaStream_t stream = 0) {
    return cudaMemsetAsync(attention_decode_counts(workspace, B, NH, max_T, HS), 0, (size_t)B * NH * sizeof(unsigned),
                           stream);
}
// A call of B rows on a workspace made for capacity_B >= B rows (a server's step over its first B slots): the
// pointer to pass, shifted so that the call's counts are the first B·NH of the capacity's (zero, as every call leaves
// them) and its partials end where those counts begin.
inline void* attention_decode_workspace_rows(void* workspace, int capacity_B, int B, int NH, int max_T, int HS) {
    const size_t chunks = (size_t)(max_T + decode_attention::kChunk - 1) / decode_attention::kChunk;
    return (char*)workspace + (size_t)(capacity_B - B) * NH * chunks * (HS + 2) * sizeof(float);
}

// Which kernel: the cache split into chunks over blocks, merged by the last (split_kernel), or a block per (b, h)
// over its whole cache (head_kernel). Auto: per head once its blocks fill half the SMs. Timed inside generation's
// step, not alone (docs/PERFORMANCE.md): there it follows a product as a programmatic dependent, and at small
// batches the split kernel's many blocks win although dev/cuda/attention_decode alone times the per-head one faster.
enum class DecodeAttentionKernel { Auto, Split, PerHead };
inline bool attention_decode_per_head(int B, int NH, DecodeAttentionKernel kernel) {
    return kernel == DecodeAttentionKernel::PerHead ||
           (kernel == DecodeAttentionKernel::Auto && 2LL * B * NH >= device_sm_count());
}

// len: device array of B lengths (>= 1, <= max_T). workspace: attention_decode_workspace_bytes, initialised once by
// attention_decode_workspace_init. HS 64 or 128. q_stride: elements between consecutive sequences' queries (0: NH·HS,
// packed). new_kv: null when the new token's K and V are in the cache already (at len[b] - 1); else its K row at
// new_kv + b·q_stride (NH·HS elements) and its V row after it, as the QKV projection lays them out, and
// attention_decode writes them into the cache (in the per-head kernel, or a small kernel before the split one).
// seq: device array of B cache sequences, row b reading sequence seq[b] (null: sequence b); where two rows share a
// sequence, every row's K and V must be in the cache before the call (new_kv null).
template <typename T>  // __nv_bfloat16 or float
inline cudaError_t attention_decode(T* out, const T* q, T* k_cache, T* v_cache, const int* len, int B, int NH, int max_T,
                                    int HS, void* workspace, cudaStream_t stream = 0, size_t q_stride = 0,
                                    bool pdl = false, const T* new_kv = nullptr,
                                    DecodeAttentionKernel which = DecodeAttentionKernel::Auto,
                                    const int* seq = nullptr) {
    using namespace decode_attention;
    if (q_stride == 0) q_stride = (size_t)NH * HS;
    if (HS != 64 && HS != 128) return cudaErrorInvalidValue;
    if (attention_decode_per_head(B, NH, which)) {
        PdlLaunch launch(dim3(B * NH), dim3(kHeadWarps * 32), 0, stream, pdl);
        auto kernel = HS == 64 ? head_kernel<64, T> : head_kernel<128, T>;
        const cudaError_t e = cudaLaunchKernelEx(&launch.config, kernel, out, q, new_kv, k_cache, v_cache, len, NH,
                                                 max_T, q_stride, seq);
        return e != cudaSuccess ? e : cudaGetLastError();
    }
    if (new_kv) {  // into the cache first, where the split kernel reads it
        const cudaError_t e = copy_kv(k_cache, v_cache, new_kv, q_stride, len, B, 1, NH, HS, max_T, stream, pdl, seq);
        if (e != cudaSuccess) return e;
        pdl = true;  // the split kernel waits for the append inside
    }
    // the workspace: partial outputs (B·NH·chunks, HS), their (m, l) pairs, the counts
    const int chunks = (max_T + kChunk - 1) / kChunk;  // blocks past a sequence's length exit at once
    float* part_o = (float*)workspace;
    float* part_ml = part_o + (size_t)B * NH * chunks * HS;
    const bool small = (long long)chunks * B * NH <= 2LL * device_sm_count();
    PdlLaunch launch(dim3(chunks, B * NH), dim3((small ? 8 : 4) * 32), 0, stream, pdl);
    auto kernel = HS == 64 ? (small ? split_kernel<64, T, 8> : split_kernel<64, T, 4>)
                           : (small ? split_kernel<128, T, 8> : split_kernel<128, T, 4>);
    const cudaError_t e = cudaLaunchKernelEx(&launch.config, kernel, out, part_o, part_ml,
                                             attention_decode_counts(workspace, B, NH, max_T, HS), q,
                                             (const T*)k_cache, (const T*)v_cache, len, NH, max_T, chunks, q_stride,
                                             seq);
    return e != cudaSuccess ? e : cudaGetLastError();
}
