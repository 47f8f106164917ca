// The persistent decode step's attention phase, split over the grid as flash-decoding does: head h's keys
// 0 .. pos are cut into `splits` chunks, and unit (h, chunk) on block h * splits + chunk (and every grid's
// width after it) writes the chunk's partial result: its largest score m, its sum of exponentials l and its
// unnormalised output o (64). The next phase's staging merges a head's chunks in order (merge_heads), so the
// result does not depend on the grid. The keys before pos were written by earlier steps, so a block loads its
// chunk's keys and values into registers before it waits for the QKV phase; only the new key is loaded after.
#pragma once

#include "llmc/kernels/decode/decode_persistent_common.cuh"

namespace decode_persistent {

// A chunk's keys in registers: rounds of 32 keys, a warp 4 of them a round, 8 lanes a key (8 of its 64 dims each).
struct ChunkKV {
    uint4 k[kRounds], v[kRounds];
};
// Unit u's head and keys [begin, end). The kernel makes its block's first unit's once a launch: its four divisions
// would otherwise sit between the QKV phase's wait and the attention (docs/DECODE.md).
struct UnitKeys {
    int h, begin, end;
};
__device__ __forceinline__ UnitKeys unit_keys(const Step& s, int u) {
    const int T = s.pos + 1, c = u % s.attn_splits;
    return {u / s.attn_splits, T * c / s.attn_splits, T * (c + 1) / s.attn_splits};
}
__device__ __forceinline__ int round_key(int begin, int r) {
    return begin + r * 32 + threadIdx.x / 32 * 4 + threadIdx.x % 32 / 8;
}

// A unit's keys and values at positions [lo, hi) into kv; the others are left as they are.
__device__ __forceinline__ void load_kv(const Phase& ph, const Step& s, const UnitKeys& uk, int lo, int hi,
                                        ChunkKV& kv) {
    const int h = uk.h, begin = uk.begin;
    lo = max(lo, begin), hi = min(hi, uk.end);
    const uint4* kc = reinterpret_cast<const uint4*>(ph.k_cache + s.cache_offset + (size_t)h * s.max_T * kHeadSize);
    const uint4* vc = reinterpret_cast<const uint4*>(ph.v_cache + s.cache_offset + (size_t)h * s.max_T * kHeadSize);
#pragma unroll
    for (int r = 0; r < kRounds; r++) {
        const int key = round_key(begin, r);
        if (key < lo || key >= hi) continue;
        const size_t at = (size_t)key * (kHeadSize / 8) + threadIdx.x % 8;
        kv.k[r] = __ldcg(kc + at), kv.v[r] = __ldcg(vc + at);
    }
}

// Unit u's partial result from its keys in kv and the head's query (the phase's QKV row); scratch: kWarps x
// kUnitFloats floats of shared memory. Each warp's (m, l, o) over its keys, then the 8 warps' merged in order.
__device__ __forceinline__ void attention_unit(const Phase& ph, const Step& s, int u, const UnitKeys& uk,
                                               const ChunkKV& kv, float* scratch) {
    const int h = uk.h, begin = uk.begin, end = uk.end;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, d8 = lane % 8;
    const uint4 qv = __ldcg(reinterpret_cast<const uint4*>(ph.in + h * kHeadSize) + d8);
    const bf16* qh = reinterpret_cast<const bf16*>(&qv);
    const float4 q[2] = {make_float4(bf(qh[0]), bf(qh[1]), bf(qh[2]), bf(qh[3])),
                         make_float4(bf(qh[4]), bf(qh[5]), bf(qh[6]), bf(qh[7]))};
    const float scale = rsqrtf((float)kHeadSize);
    float score[kRounds], m = -INFINITY;
#pragma unroll
    for (int r = 0; r < kRounds; r++) {
        float a = dot8(kv.k[r], q);
        for (int o = 1; o < 8; o <<= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
        score[r] = round_key(begin, r) < end ? a * scale : -INFINITY;
        m = fmaxf(m, score[r]);
    }
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8)), m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
    float l = 0.f, o[8] = {};
#pragma unroll
    for (int r = 0; r < kRounds; r++) {
        const float p = score[r] == -INFINITY ? 0.f : __expf(score[r] - m);
        const bf16* v8 = reinterpret_cast<const bf16*>(&kv.v[r]);
        l += p;
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] += p * bf(v8[k]);
    }
    for (int x = 8; x < 32; x <<= 1) {  // the warp's 4 keys of a round: lanes d8, d8 + 8, d8 + 16, d8 + 24
        l += __shfl_xor_sync(0xffffffffu, l, x);
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] += __shfl_xor_sync(0xffffffffu, o[k], x);
    }
    float* mine = scratch + warp * kUnitFloats;
    if (lane < 8) {
        if (lane == 0) mine[0] = m, mine[1] = l;
#pragma unroll
        for (int k = 0; k < 8; k++) mine[4 + d8 * 8 + k] = o[k];
    }
    consumers_sync();
    if (threadIdx.x < kHeadSize) {
        float M = -INFINITY;
        for (int w = 0; w < kWarps; w++) M = fmaxf(M, scratch[w * kUnitFloats]);
        float L = 0.f, O = 0.f;
        for (int w = 0; w < kWarps; w++) {
            const float* p = scratch + w * kUnitFloats;
            const float e = p[0] == -INFINITY ? 0.f : __expf(p[0] - M);
            L += e * p[1], O += e * p[4 + threadIdx.x];
        }
        float* out = ph.partials + (size_t)u * kUnitFloats;
        if (threadIdx.x == 0) out[0] = M, out[1] = L, out[2] = 0.f, out[3] = 0.f;
        out[4 + threadIdx.x] = O;
    }
    consumers_sync();  // the scratch is read before anyone writes it again
}

// The block's units after the QKV phase: its first unit's earlier keys are in kv already (load_kv before the wait),
// and its keys' range is `first` (unit_keys, once a launch).
__device__ __forceinline__ void attention(const Phase& ph, const Step& s, const UnitKeys& first, ChunkKV& kv,
                                          float* scratch) {
    for (int u = blockIdx.x; u < s.NH * s.attn_splits; u += gridDim.x) {
        const UnitKeys uk = u == (int)blockIdx.x ? first : unit_keys(s, u);
        if (u != (int)blockIdx.x) kv = ChunkKV{}, load_kv(ph, s, uk, 0, s.pos, kv);
        load_kv(ph, s, uk, s.pos, s.pos + 1, kv);  // the new key: this step's QKV phase wrote it
        attention_unit(ph, s, u, uk, kv, scratch);
    }
}

// x (the attention's output, C floats) from the partials: vector i (8 dims of head i / 8) of thread i merges its
// head's chunks in order, o / l at the largest m, rounded to bf16 as the attention's output is. Every chunk's m, l
// and outputs are loaded at once (one L2 round trip under the weights' stream; 80 registers, which the kernel has).
// xb (tiles): the same as bf16, 8 to a 16-byte vector.
__device__ __forceinline__ void merge_heads(const Phase& ph, const Step& s, float* x, uint32_t* xb) {
    const int i = threadIdx.x, h = i / (kHeadSize / 8), d0 = i % (kHeadSize / 8) * 8;
    if (i >= s.C / 8) return;
    const float* base = ph.partials + (size_t)h * s.attn_splits * kUnitFloats;
    float2 ml[kMaxSplits];
    float4 oa[kMaxSplits], ob[kMaxSplits];
#pragma unroll
    for (int c = 0; c < kMaxSplits; c++) {
        const float* unit = base + (size_t)c * kUnitFloats;
        const bool in = c < s.attn_splits;
        ml[c] = in ? __ldcg(reinterpret_cast<const float2*>(unit)) : make_float2(-INFINITY, 0.f);
        oa[c] = in ? __ldcg(reinterpret_cast<const float4*>(unit + 4 + d0)) : make_float4(0.f, 0.f, 0.f, 0.f);
        ob[c] = in ? __ldcg(reinterpret_cast<const float4*>(unit + 8 + d0)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float M = -INFINITY;
#pragma unroll
    for (int c = 0; c < kMaxSplits; c++) M = fmaxf(M, ml[c].x);
    float L = 0.f, o[8] = {};
#pragma unroll
    for (int c = 0; c < kMaxSplits; c++) {
        const float e = ml[c].x == -INFINITY ? 0.f : __expf(ml[c].x - M);
        const float4 a = oa[c], b = ob[c];
        L += e * ml[c].y;
        o[0] += e * a.x, o[1] += e * a.y, o[2] += e * a.z, o[3] += e * a.w;
        o[4] += e * b.x, o[5] += e * b.y, o[6] += e * b.z, o[7] += e * b.w;
    }
    uint4 packed;
    bf16* out = reinterpret_cast<bf16*>(&packed);
#pragma unroll
    for (int k = 0; k < 8; k++) out[k] = __float2bfloat16(o[k] / L), x[i * 8 + k] = bf(out[k]);
    if (xb) reinterpret_cast<uint4*>(xb)[i] = packed;
    // block 0 leaves the output where the attention's output lives (its checks read it); nothing reads it back
    if (blockIdx.x == 0) reinterpret_cast<uint4*>(const_cast<bf16*>(ph.in))[i] = packed;
}

}  // namespace decode_persistent
