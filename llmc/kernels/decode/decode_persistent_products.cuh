// The persistent decode step's product phases: the input staged (and LayerNorm'd) in shared memory, the block's
// rows of the matrix page by page from the ring, the epilogue (bias, GELU, residual, the cache append, the greedy
// key). llmc/kernels/decode/decode_persistent.cuh has the design.
#pragma once

#include "llmc/hopper/pipeline.cuh"
#include "llmc/kernels/decode/decode_persistent_attention.cuh"
#include "llmc/kernels/decode/decode_persistent_common.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/mma/tiles.cuh"

namespace decode_persistent {

// Eight bf16 values held as floats into four bf16 pairs (one 16-byte store; exact).
__device__ __forceinline__ void pack_x8(const float* y, uint32_t* to) {
    *reinterpret_cast<uint4*>(to) = make_uint4(flash::pack_bf16x2(y[0], y[1]), flash::pack_bf16x2(y[2], y[3]),
                                               flash::pack_bf16x2(y[4], y[5]), flash::pack_bf16x2(y[6], y[7]));
}

// The next page of the ring, waited for; thread 0 adds the cycles to `waited` when the timeline is on.
template <int kRingStages>
__device__ __forceinline__ void wait_page(const Step& s, const hopper::Ring<kRingStages>& ring,
                                          unsigned long long& waited) {
    const bool timed = s.timeline && threadIdx.x == 0;
    const unsigned long long t0 = timed ? clock64() : 0;
    ring.wait_full();
    if (timed) waited += clock64() - t0;
}
// A product phase's end on both paths: the pages' wait into the timeline; the classifier's greedy key of the block.
__device__ __forceinline__ void finish_product(const Phase& ph, const Step& s, int i, unsigned long long waited,
                                               unsigned long long best, unsigned long long* red_key) {
    if (s.timeline && threadIdx.x == 0) mark_value(s, i, kMarkPagesWait, waited);
    if (ph.epilogue == Epilogue::Logits) {
        best = block_max_key(best, red_key);
        if (threadIdx.x == 0) s.pick_partials[blockIdx.x] = best;
    }
}

// Where a product phase's outputs go: the sequence's logits row for the classifier. Computed once a phase, not in
// the epilogue: ptxas 12.8 and 13.0 scheduled that 64-bit select there (CS2R zero, a predicated IMAD.WIDE) five
// cycles before the add that read it, and on an H200 the add saw the register's older value, so rows were stored
// at wild addresses (docs/DECODE.md, "The tile path's failure, found"; scripts/tools/sass_hazards.py looks for it).
__device__ __forceinline__ bf16* output_row(const Phase& ph, const Step& s) {
    return ph.out + (ph.epilogue == Epilogue::Logits ? (size_t)s.seq * ph.N : 0);
}
// Output n of a product phase (into out: output_row) from its dot product, its bias and (Residual) its residual.
__device__ __forceinline__ void epilogue(const Phase& ph, const Step& s, bf16* out, int n, float sum, float bias,
                                         float res, unsigned long long& best) {
    float y = sum + bias;
    if (ph.epilogue == Epilogue::Gelu) y = gelu_value(y);
    if (ph.epilogue == Epilogue::Residual) y = round_bf16(y) + res;
    const bf16 o = __float2bfloat16(y);
    out[n] = o;
    if (ph.epilogue == Epilogue::Qkv && n >= s.C) {  // heads of kHeadSize (the kernel checks HS): no division
        const bool v = n >= 2 * s.C;
        const int c = n - (v ? 2 * s.C : s.C), h = c / kHeadSize, d = c % kHeadSize;
        (v ? ph.v_cache : ph.k_cache)[s.cache_offset + ((size_t)h * s.max_T + s.pos) * kHeadSize + d] = o;
    }
    if (ph.epilogue == Epilogue::Logits && n < s.V) {
        const unsigned long long key = pick_rank(o, n);
        best = key > best ? key : best;
    }
}

// What a product phase's staging reads that no phase of this step writes after the one two before it: the bias and
// residual of the block's rows (thread t: row begin + t; the residual stream is written two or three phases back)
// and the LayerNorm's weights (thread t: vector t). Loaded before the wait for the phase before, so their memory
// latency, behind the weights' stream, overlaps the wait.
struct RowsIn {
    float bias = 0.f, res = 0.f;
    uint4 lw = {}, lb = {};
};
__device__ __forceinline__ RowsIn load_rows(const Phase& ph, const Step& s, int token, int begin, int end) {
    RowsIn r;
    const int t = threadIdx.x;
    if (s.diagnose & kSkipStaging) return r;
    if (ph.ln_w && t < ph.K / 8)
        r.lw = reinterpret_cast<const uint4*>(ph.ln_w)[t], r.lb = reinterpret_cast<const uint4*>(ph.ln_b)[t];
    if (t < end - begin) {
        if (ph.bias) r.bias = bf(ph.bias[begin + t]);
        if (ph.epilogue == Epilogue::Residual)
            r.res = ph.residual ? load_cg(ph.residual + begin + t) : embedding(s, token, begin + t);
    }
    return r;
}

// x (K floats in shared memory) = the phase's input (after attention: merged from its partials), LayerNorm'd and
// rounded when it has LayerNorm weights (two passes over the row, as layernorm_forward); rows_bias / rows_res = the
// bias and residual of the block's rows [begin, end) from rin (load_rows). Every global load is issued before any
// shared-memory store (a store may alias a generic load, so the compiler would otherwise wait out a memory latency
// per vector). xb (the tensor cores' products; null for FFMA): x again as bf16 pairs, exact (every staged x is a
// bf16 value). Ends with the consumers synchronised.
__device__ void stage_input(const Phase& ph, const Step& s, int token, int begin, int end, const RowsIn& rin,
                            float* x, float* rows_bias, float* rows_res, float* red, uint32_t* xb = nullptr) {
    if (s.diagnose & kSkipStaging) {
        consumers_sync();
        return;
    }
    const int KV = ph.K / 8, t = threadIdx.x;
    const float* merged = s.diagnose & kSkipAttention ? nullptr : ph.partials;  // the diagnostic skips the merge too
    const uint4* in = reinterpret_cast<const uint4*>(ph.in);
    const uint4* te = reinterpret_cast<const uint4*>(s.wte + (size_t)token * s.C);
    const uint4* pe = reinterpret_cast<const uint4*>(s.wpe + (size_t)s.pos * s.C);
    uint4 v[kInVec] = {}, e[kInVec] = {};
#pragma unroll
    for (int j = 0; j < kInVec; j++) {
        const int i = t + j * kConsumers;
        if (i < KV && in && !merged) v[j] = __ldcg(in + i);
        if (i < KV && !in) v[j] = te[i], e[j] = pe[i];
    }
    const bool rows = ph.bias || ph.epilogue == Epilogue::Residual;
    const bool norm = ph.ln_w && !(s.diagnose & kSkipLayerNorm);
    if (merged) merge_heads(ph, s, x, norm ? nullptr : xb);
#pragma unroll
    for (int j = 0; j < kInVec && !merged; j++) {
        const int i = t + j * kConsumers;
        if (i >= KV) continue;
        const bf16* a = reinterpret_cast<const bf16*>(&v[j]);
        const bf16* b = reinterpret_cast<const bf16*>(&e[j]);
        float y[8];
#pragma unroll
        for (int k = 0; k < 8; k++) y[k] = in ? bf(a[k]) : round_bf16(bf(a[k]) + bf(b[k])), x[i * 8 + k] = y[k];
        if (xb && !norm) pack_x8(y, xb + i * 4);
    }
    if (rows && t < end - begin) rows_bias[t] = rin.bias, rows_res[t] = rin.res;
    if (!norm) {
        consumers_sync();
        return;
    }
    // LayerNorm: K = C, at most one vector a thread (C <= 8 x kConsumers)
    float* xv = x + t * 8;
    float sum = 0.f;
    if (t < KV)
        for (int k = 0; k < 8; k++) sum += xv[k];
    const float m = block_sum(sum, red) / ph.K;
    float var = 0.f;
    if (t < KV)
        for (int k = 0; k < 8; k++) var += (xv[k] - m) * (xv[k] - m);
    const float rstd = rsqrtf(block_sum(var, red + kWarps) / ph.K + (float)kLayerNormEps);
    if (t < KV) {
        const bf16* w = reinterpret_cast<const bf16*>(&rin.lw);
        const bf16* b = reinterpret_cast<const bf16*>(&rin.lb);
        for (int k = 0; k < 8; k++) xv[k] = round_bf16((xv[k] - m) * rstd * bf(w[k]) + bf(b[k]));
        if (xb) pack_x8(xv, xb + t * 4);
    }
    consumers_sync();
}

// This lane's nv vectors of x's slice from v0 (vectors v0 + lane + 32 j) into registers, zeros past them.
__device__ __forceinline__ void load_x_slice(const float* x, int v0, int nv, float4 (&xr)[kRegV][2]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < kRegV; j++) {
        const float* xp = x + (size_t)(v0 + lane + j * 32) * 8;
        xr[j][0] = j < nv ? *reinterpret_cast<const float4*>(xp) : make_float4(0.f, 0.f, 0.f, 0.f);
        xr[j][1] = j < nv ? *reinterpret_cast<const float4*>(xp + 4) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}
// Rows ra and (when two) rb of a page, this lane's nv vectors of their slice each (ra, rb: the lane's first), dotted
// with its x; returns the warp's sums in every lane. All 2 nv loads are issued before any arithmetic.
__device__ __forceinline__ void row_pair_dot(const bf16* ra, const bf16* rb, bool two, int nv,
                                             const float4 (&xr)[kRegV][2], float& sa, float& sb) {
    uint4 wa[kRegV], wb[kRegV];
#pragma unroll
    for (int j = 0; j < kRegV; j++) {
        wa[j] = j < nv ? *reinterpret_cast<const uint4*>(ra + j * 256) : make_uint4(0, 0, 0, 0);
        wb[j] = j < nv && two ? *reinterpret_cast<const uint4*>(rb + j * 256) : make_uint4(0, 0, 0, 0);
    }
    sa = 0.f, sb = 0.f;
#pragma unroll
    for (int j = 0; j < kRegV; j++) sa += dot8(wa[j], xr[j]), sb += dot8(wb[j], xr[j]);
    for (int o = 16; o > 0; o >>= 1)
        sa += __shfl_xor_sync(0xffffffffu, sa, o), sb += __shfl_xor_sync(0xffffffffu, sb, o);
}

// The block's rows of one product phase, page by page from the ring. Warp (wr, wk) of Wr x Wk takes rows wr,
// wr + Wr, ... two at a time over slice wk of K; with Wk > 1 a page's slices are added in order after a barrier.
// i: the phase's index (the timeline's).
__device__ void product(const Phase& ph, const Step& s, int i, int begin, int end, const uint8_t* pages,
                        const float* x, float* partials, const float* rows_bias, const float* rows_res,
                        unsigned long long* red_key, hopper::Ring<kStages>& ring, int& sliced_pages) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, K = ph.K, V = K / 8;
    const int Wk = slices_of(V), Wr = kWarps / Wk, wk = warp % Wk, wr = warp / Wk;
    const int v0 = V * wk / Wk, v1 = V * (wk + 1) / Wk;
    const int nv = max(0, min(kRegV, (v1 - v0 - lane + 31) / 32));
    float4 xr[kRegV][2];
    load_x_slice(x, v0, nv, xr);
    const int per_page = rows_per_page(K);
    const bool rows = ph.bias || ph.epilogue == Epilogue::Residual;
    bf16* const y = output_row(ph, s);
    auto out = [&](int n, float sum, unsigned long long& best) {  // n: a row of this block
        epilogue(ph, s, y, n, sum, rows ? rows_bias[n - begin] : 0.f, rows ? rows_res[n - begin] : 0.f, best);
    };
    unsigned long long best = sampling_rule::rank_floor(), waited = 0;  // waited: the timeline's cycles
    for (int r0 = begin; r0 < end; r0 += per_page, ring.advance()) {
        const int n = min(per_page, end - r0);
        float* part = partials + (sliced_pages & 1) * kPartials;
        wait_page(s, ring, waited);
        if (s.diagnose & kSkipProducts) {
            ring.release();
            continue;
        }
        const bf16* page = reinterpret_cast<const bf16*>(pages + (size_t)ring.stage() * kPageBytes);
        for (int r = wr; r < n; r += 2 * Wr) {
            const bool two = r + Wr < n;
            const bf16* ra = page + (size_t)r * K + (size_t)(v0 + lane) * 8;
            float sa, sb;
            row_pair_dot(ra, ra + (size_t)Wr * K, two, nv, xr, sa, sb);
            if (lane == 0 && Wk == 1) {
                out(r0 + r, sa, best);
                if (two) out(r0 + r + Wr, sb, best);
            } else if (lane == 0) {
                part[r * Wk + wk] = sa;
                if (two) part[(r + Wr) * Wk + wk] = sb;
            }
        }
        ring.release();  // every thread: an arrival releases only its own thread's reads of the page
        if (Wk > 1) {
            consumers_sync();
            for (int r = threadIdx.x; r < n; r += kConsumers) {
                float t = 0.f;
                for (int k = 0; k < Wk; k++) t += part[r * Wk + k];
                out(r0 + r, t, best);
            }
            sliced_pages++;  // sliced pages alternate two buffers: the barrier of the one between orders the reuse
        }
    }
    finish_product(ph, s, i, waited, best, red_key);
}

}  // namespace decode_persistent
