// The persistent decode step's attention phase: one block per head over the KV cache (batch 1, HS 64).
#pragma once

#include "llmc/kernels/decode/decode_persistent_common.cuh"

namespace decode_persistent {

// Head blockIdx.x's attention for the new token over positions 0 .. pos (HS 64): scores, softmax, weighted values,
// each a pass over the cache; 256 threads, sums in a fixed order. Other blocks have nothing to do.
__device__ void attention(const Phase& ph, const Step& s, float* x, float* red) {
    const int h = blockIdx.x, HS = s.HS, T = s.pos + 1;
    if (h >= s.NH) return;
    float* q = x;
    float* p = x + HS;
    if (threadIdx.x < HS) q[threadIdx.x] = load_cg(ph.in + h * HS + threadIdx.x);
    consumers_sync();
    const bf16* kc = ph.k_cache + (size_t)h * s.max_T * HS;
    const bf16* vc = ph.v_cache + (size_t)h * s.max_T * HS;
    const float scale = rsqrtf((float)HS);
    float mx = -INFINITY;
    for (int t = threadIdx.x; t < T; t += kConsumers) {
        const uint4* row = reinterpret_cast<const uint4*>(kc + (size_t)t * HS);
        float acc = 0.f;
        for (int j = 0; j < HS / 8; j++) {
            const uint4 w = __ldcg(row + j);
            const float4 qq[2] = {*reinterpret_cast<const float4*>(q + 8 * j),
                                  *reinterpret_cast<const float4*>(q + 8 * j + 4)};
            acc += dot8(w, qq);
        }
        p[t] = acc * scale;
        mx = fmaxf(mx, acc * scale);
    }
    mx = block_max(mx, red);
    float sum = 0.f;
    for (int t = threadIdx.x; t < T; t += kConsumers) sum += (p[t] = __expf(p[t] - mx));
    sum = block_sum(sum, red);  // its barriers also publish p
    // values: thread (g, c) takes 8 dims (c) of keys g, g + kKeyGroups, ..., 8 keys' loads in flight at once
    float* vpart = p + s.max_T;  // (kKeyGroups, HS)
    const int c = threadIdx.x % (HS / 8), g = threadIdx.x / (HS / 8);
    float acc[8] = {};
    for (int t0 = g; t0 < T; t0 += 8 * kKeyGroups) {
        uint4 w[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int t = t0 + u * kKeyGroups;
            w[u] = t < T ? __ldcg(reinterpret_cast<const uint4*>(vc + (size_t)t * HS) + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int t = t0 + u * kKeyGroups;
            const float pt = t < T ? p[t] : 0.f;
            const bf16* h8 = reinterpret_cast<const bf16*>(&w[u]);
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] += pt * bf(h8[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) vpart[g * HS + c * 8 + k] = acc[k];
    consumers_sync();
    if (threadIdx.x < HS) {
        float o = 0.f;
        for (int k = 0; k < kKeyGroups; k++) o += vpart[k * HS + threadIdx.x];
        ph.out[h * HS + threadIdx.x] = __float2bfloat16(o / sum);
    }
    consumers_sync();
}

}  // namespace decode_persistent
