// The CPU engine's causal multi-head attention, one (batch, head) pair per thread at a time, its products by the
// engine's GEMM (llmc/cpu/matmul.h, serial inside the thread) over blocks of kAttBlock query rows, each against the
// keys up to its last row only (the causal half). The probabilities are never kept: the forward saves each row's
// log-sum-exp, the backward recomputes P = exp(S - lse) from Q and K (O(T²) scratch per thread, not per layer).
// Layouts as in the reference (reference/gpt2.h): qkv (B, T, 3C) packed (B, T, 3, NH, HS); out (B, T, C);
// lse (B, NH, T).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "llmc/cpu/matmul.h"
#include "llmc/cpu/simd.h"

namespace cpu {

constexpr int kAttBlock = 64;

namespace attention_detail {

// S = scale Q Kᵀ and then P = exp(S - lse) with the saved lse (backward: lse_in) or the softmax (forward: lse_out
// written), for query rows [i0, i1) against keys [0, i1), row stride T of p; entries past the diagonal set to 0.
inline void probabilities(float* p, const float* lse_in, float* lse_out, const float* q, const float* k,
                          size_t ld_qkv, int T, int HS, int i0, int i1, float scale) {
    gemm(i1 - i0, i1, HS, MatView{q + (size_t)i0 * ld_qkv, ld_qkv, 1}, MatView{k, 1, ld_qkv}, p + (size_t)i0 * T,
         (size_t)T, false, false);
    for (int t = i0; t < i1; t++) {
        float* row = p + (size_t)t * T;
        const int n = t + 1;  // keys 0..t
        float m, l = 0.0f;
        if (lse_in) {
            m = lse_in[t];
        } else {
            m = -INFINITY;
            for (int j = 0; j < n; j++) m = std::max(m, row[j] * scale);
        }
        int j = 0;
        for (; j + kVec <= n; j += kVec) {
            const vfloat e = vexp(vload(row + j) * scale - m);
            vstore(row + j, e);
            l += vsum(e);
        }
        for (; j < n; j++) {
            row[j] = sexp(row[j] * scale - m);
            l += row[j];
        }
        for (j = n; j < i1; j++) row[j] = 0.0f;
        if (!lse_in) {
            const float inv = 1.0f / l;
            for (j = 0; j < n; j++) row[j] *= inv;
            lse_out[t] = m + std::log(l);
        }
    }
}

}  // namespace attention_detail

// out (B, T, C) = softmax(Q Kᵀ / sqrt(HS), causal) V per head; lse (B, NH, T) saved for the backward.
inline void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const size_t C3 = (size_t)3 * C;
    const float scale = 1.0f / std::sqrt((float)HS);
#pragma omp parallel
    {
        std::vector<float> p((size_t)T * T);
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const float* q = qkv + (size_t)b * T * C3 + (size_t)h * HS;
            const float* k = q + C;
            const float* v = q + 2 * (size_t)C;
            float* l = lse + (size_t)bh * T;
            float* o = out + (size_t)b * T * C + (size_t)h * HS;
            for (int i0 = 0; i0 < T; i0 += kAttBlock) {
                const int i1 = std::min(T, i0 + kAttBlock);
                attention_detail::probabilities(p.data(), nullptr, l, q, k, C3, T, HS, i0, i1, scale);
                gemm(i1 - i0, HS, i1, MatView{p.data() + (size_t)i0 * T, (size_t)T, 1}, MatView{v, C3, 1},
                     o + (size_t)i0 * C, (size_t)C, false, false);
            }
        }
    }
}

// dqkv (B, T, 3C) = the gradient of attention_forward's out w.r.t. qkv (overwritten), given dout (B, T, C):
// dP = dO Vᵀ, dS = P (dP - rowsum(P dP)) scale, dQ = dS K, dK = dSᵀ Q, dV = Pᵀ dO.
inline void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* lse, int B, int T,
                               int C, int NH) {
    const int HS = C / NH;
    const size_t C3 = (size_t)3 * C;
    const float scale = 1.0f / std::sqrt((float)HS);
#pragma omp parallel
    {
        std::vector<float> p((size_t)T * T), dp((size_t)T * T);
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const size_t head = (size_t)b * T * C3 + (size_t)h * HS;
            const float *q = qkv + head, *k = q + C, *v = q + 2 * (size_t)C;
            float *dq = dqkv + head, *dk = dq + C, *dv = dq + 2 * (size_t)C;
            const float* d_o = dout + (size_t)b * T * C + (size_t)h * HS;
            const float* l = lse + (size_t)bh * T;
            // P and dS for every row (the key-side products need whole columns)
            for (int i0 = 0; i0 < T; i0 += kAttBlock) {
                const int i1 = std::min(T, i0 + kAttBlock);
                attention_detail::probabilities(p.data(), l, nullptr, q, k, C3, T, HS, i0, i1, scale);
                gemm(i1 - i0, i1, HS, MatView{d_o + (size_t)i0 * C, (size_t)C, 1}, MatView{v, 1, C3},
                     dp.data() + (size_t)i0 * T, (size_t)T, false, false);
                for (int t = i0; t < i1; t++) {
                    const float* pr = p.data() + (size_t)t * T;
                    float* ds = dp.data() + (size_t)t * T;
                    float D = 0.0f;
                    for (int j = 0; j <= t; j++) D += pr[j] * ds[j];
                    for (int j = 0; j <= t; j++) ds[j] = pr[j] * (ds[j] - D) * scale;
                    for (int j = t + 1; j < i1; j++) ds[j] = 0.0f;
                }
                // dQ rows [i0, i1) = dS[i0:i1, 0:i1] K[0:i1]
                gemm(i1 - i0, HS, i1, MatView{dp.data() + (size_t)i0 * T, (size_t)T, 1}, MatView{k, C3, 1},
                     dq + (size_t)i0 * C3, C3, false, false);
            }
            // dK rows [j0, j1) = dS[j0:T, j0:j1]ᵀ Q[j0:T]; dV rows [j0, j1) = P[j0:T, j0:j1]ᵀ dO[j0:T]
            for (int j0 = 0; j0 < T; j0 += kAttBlock) {
                const int j1 = std::min(T, j0 + kAttBlock);
                gemm(j1 - j0, HS, T - j0, MatView{dp.data() + (size_t)j0 * T + j0, 1, (size_t)T},
                     MatView{q + (size_t)j0 * C3, C3, 1}, dk + (size_t)j0 * C3, C3, false, false);
                gemm(j1 - j0, HS, T - j0, MatView{p.data() + (size_t)j0 * T + j0, 1, (size_t)T},
                     MatView{d_o + (size_t)j0 * C, (size_t)C, 1}, dv + (size_t)j0 * C3, C3, false, false);
            }
        }
    }
}

}  // namespace cpu
