// CPU reference GPT-2: one function per layer (forward + backward), templated on the scalar type
// (`float` for the reference model, `double` when tests and dev/cuda programs validate GPU kernels), and the
// fp32 model reference::GPT2 built from them (forward, backward, AdamW).
// Everything lives in namespace reference: the layer functions have the GPU launchers' names (matmul_forward,
// attention_forward, ...), and a call must never resolve to the other one (in an FP32 build both take float*).
//
// Conventions shared by every function below:
// - Shapes are row-major; N = B*T positions; C channels; OC output channels; Vp padded vocab.
// - Forward functions OVERWRITE their outputs.
// - Backward functions ACCUMULATE (+=) into every gradient they produce (dinp, dweight, dbias ...), so the
//   caller zeroes gradients once and several consumers of one tensor add up naturally.
// - Loops run in a fixed order per output element, so results are deterministic for any thread count.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/formats/hf_gpt2.h"
#include "llmc/formats/model_file.h"
#include "llmc/gpt2/gpt2_config.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace reference {

// ------------------------------------------------------------------------------------------------ encoder
// out (B,T,C) = wte[inp[b,t]] + wpe[t].  inp (B,T) token ids < V.
template <typename Real>
void encoder_forward(Real* out, const int* inp, const Real* wte, const Real* wpe, int B, int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            Real* o = out + ((size_t)b * T + t) * C;
            const Real* tok = wte + (size_t)inp[b * T + t] * C;
            const Real* pos = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) o[i] = tok[i] + pos[i];
        }
    }
}

// dwte (Vp,C) and dwpe (maxT,C) += scatter of dout (B,T,C). Sequential: several positions share a token row.
template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int* inp, int B, int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const Real* d = dout + ((size_t)b * T + t) * C;
            Real* dtok = dwte + (size_t)inp[b * T + t] * C;
            Real* dpos = dwpe + (size_t)t * C;
            for (int i = 0; i < C; i++) {
                dtok[i] += d[i];
                dpos[i] += d[i];
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------ layernorm
// out (B,T,C) = (inp - mean) * rstd * weight + bias per position; saves mean (B,T) and rstd (B,T) for the
// backward pass (either may be null when not needed). Biased variance, like nn.LayerNorm.
template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight, const Real* bias,
                       int B, int T, int C) {
    const long N = (long)B * T;
#pragma omp parallel for
    for (long n = 0; n < N; n++) {
        const Real* x = inp + (size_t)n * C;
        Real m = 0;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        Real var = 0;
        for (int i = 0; i < C; i++) var += (x[i] - m) * (x[i] - m);
        var /= C;
        Real s = Real(1) / std::sqrt(var + Real(kLayerNormEps));
        Real* o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * weight[i] + bias[i];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

// dinp (B,T,C), dweight (C), dbias (C) += from dout (B,T,C); needs the mean and rstd saved by the forward.
// With xhat = (x - mean) * rstd and g = dout * weight:
//   dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)).
template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                        const Real* mean, const Real* rstd, int B, int T, int C) {
    const long N = (long)B * T;
    // dinp: independent per position.
#pragma omp parallel for
    for (long n = 0; n < N; n++) {
        const Real* x = inp + (size_t)n * C;
        const Real* d = dout + (size_t)n * C;
        const Real m = mean[n], s = rstd[n];
        Real g_mean = 0, gx_mean = 0;
        for (int i = 0; i < C; i++) {
            Real g = d[i] * weight[i];
            g_mean += g;
            gx_mean += g * (x[i] - m) * s;
        }
        g_mean /= C;
        gx_mean /= C;
        Real* dx = dinp + (size_t)n * C;
        for (int i = 0; i < C; i++) {
            Real xhat = (x[i] - m) * s;
            dx[i] += s * (d[i] * weight[i] - g_mean - xhat * gx_mean);
        }
    }
    // dweight, dbias: a sum over positions; parallel over channels so every sum keeps one order.
#pragma omp parallel for
    for (int i = 0; i < C; i++) {
        Real dw = 0, db = 0;
        for (long n = 0; n < N; n++) {
            Real d = dout[(size_t)n * C + i];
            dw += d * (inp[(size_t)n * C + i] - mean[n]) * rstd[n];
            db += d;
        }
        dweight[i] += dw;
        dbias[i] += db;
    }
}

// ------------------------------------------------------------------------------------------------ matmul
// out (B,T,OC) = inp (B,T,C) · weightᵀ + bias, weight (OC,C) as nn.Linear stores it; bias (OC) may be null.
// Each output is bias + sum over i in increasing order (the same rounding whatever the tiling); tiles of
// kTile rows x kTile outputs keep kTile² independent sums in flight, which is what makes it fast enough
// for dev/cuda programs that check GPU matmuls against it in double.
template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int B, int T, int C, int OC) {
    constexpr int kTile = 4;
    const long N = (long)B * T;
    const long row_tiles = (N + kTile - 1) / kTile;
#pragma omp parallel for
    for (long rt = 0; rt < row_tiles; rt++) {
        const long n0 = rt * kTile;
        const int rows = (int)(N - n0 < kTile ? N - n0 : kTile);
        int j = 0;
        if (rows == kTile) {
            for (; j + kTile <= OC; j += kTile) {
                Real sum[kTile][kTile];
                for (int r = 0; r < kTile; r++)
                    for (int k = 0; k < kTile; k++) sum[r][k] = bias ? bias[j + k] : Real(0);
                const Real* x[kTile];
                const Real* w[kTile];
                for (int r = 0; r < kTile; r++) x[r] = inp + (size_t)(n0 + r) * C;
                for (int k = 0; k < kTile; k++) w[k] = weight + (size_t)(j + k) * C;
                for (int i = 0; i < C; i++) {
                    for (int r = 0; r < kTile; r++)
                        for (int k = 0; k < kTile; k++) sum[r][k] += x[r][i] * w[k][i];
                }
                for (int r = 0; r < kTile; r++)
                    for (int k = 0; k < kTile; k++) out[(size_t)(n0 + r) * OC + j + k] = sum[r][k];
            }
        }
        // edges: the last partial row tile, and outputs past the last full column tile
        for (int r = 0; r < rows; r++) {
            const Real* x = inp + (size_t)(n0 + r) * C;
            for (int jj = j; jj < OC; jj++) {
                const Real* w = weight + (size_t)jj * C;
                Real sum = bias ? bias[jj] : Real(0);
                for (int i = 0; i < C; i++) sum += x[i] * w[i];
                out[(size_t)(n0 + r) * OC + jj] = sum;
            }
        }
    }
}

// dinp (B,T,C) += dout · weight; dweight (OC,C) += doutᵀ · inp; dbias (OC) += column sums of dout
// (dbias may be null when the layer has no bias).
template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                     int B, int T, int C, int OC) {
    const long N = (long)B * T;
#pragma omp parallel for
    for (long n = 0; n < N; n++) {
        const Real* d = dout + (size_t)n * OC;
        Real* dx = dinp + (size_t)n * C;
        for (int j = 0; j < OC; j++) {
            const Real* w = weight + (size_t)j * C;
            const Real dj = d[j];
            for (int i = 0; i < C; i++) dx[i] += dj * w[i];
        }
    }
#pragma omp parallel for
    for (int j = 0; j < OC; j++) {
        Real* dw = dweight + (size_t)j * C;
        Real db = 0;
        for (long n = 0; n < N; n++) {
            const Real dj = dout[(size_t)n * OC + j];
            const Real* x = inp + (size_t)n * C;
            for (int i = 0; i < C; i++) dw[i] += dj * x[i];
            db += dj;
        }
        if (dbias) dbias[j] += db;
    }
}

// ------------------------------------------------------------------------------------------------ attention
// Causal multi-head self-attention, computed row by row with O(T) scratch per thread (never a T×T buffer),
// so it runs at any T (dev/cuda programs call it in double at T = 16384).
//   inp (B,T,3C): the QKV projection's output, laid out (B,T,3,NH,HS) with C = NH*HS: for position (b,t),
//                 Q of head h is inp[(b*T+t)*3C + 0*C + h*HS .. +HS), K at +1*C, V at +2*C.
//   out (B,T,C):  heads concatenated, out[(b*T+t)*C + h*HS + d].
//   lse (B,NH,T): optional (may be null): per query row, the log-sum-exp of the scaled scores,
//                 lse = max_t2(S) + log(sum_t2 exp(S - max)), S[t2] = Q[t]·K[t2] / sqrt(HS) for t2 <= t;
//                 so P[t2] = exp(S[t2] - lse) (what a flash-attention forward saves for its backward).
// One query row (b, t, h) of causal attention: p[t2] = exp(S[t2] - m) for t2 <= t, unnormalised, where
// S[t2] = Q[t]·K[t2]·scale; *m = max S, *l = sum p. Shared by the forward and the backward (which recomputes P).
template <typename Real>
void attention_row_exp_scores(Real* p, Real* m_out, Real* l_out, const Real* inp, int b, int t, int h, int T, int C,
                              int HS, Real scale) {
    const size_t C3 = (size_t)C * 3;
    const Real* q = inp + ((size_t)b * T + t) * C3 + (size_t)h * HS;
    Real m = -INFINITY;
    for (int t2 = 0; t2 <= t; t2++) {
        const Real* k = inp + ((size_t)b * T + t2) * C3 + C + (size_t)h * HS;
        Real s = 0;
        for (int d = 0; d < HS; d++) s += q[d] * k[d];
        s *= scale;
        p[t2] = s;
        if (s > m) m = s;
    }
    Real l = 0;
    for (int t2 = 0; t2 <= t; t2++) {
        p[t2] = std::exp(p[t2] - m);
        l += p[t2];
    }
    *m_out = m;
    *l_out = l;
}

template <typename Real>
void attention_forward(Real* out, Real* lse, const Real* inp, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const size_t C3 = (size_t)C * 3;
    const Real scale = Real(1) / std::sqrt(Real(HS));
#pragma omp parallel
    {
        std::vector<Real> p(T);  // this thread's scores/probabilities for one query row
#pragma omp for collapse(3)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                for (int t = 0; t < T; t++) {
                    Real m, l;
                    attention_row_exp_scores(p.data(), &m, &l, inp, b, t, h, T, C, HS, scale);
                    const Real inv_l = Real(1) / l;
                    Real* o = out + ((size_t)b * T + t) * C + (size_t)h * HS;
                    for (int d = 0; d < HS; d++) o[d] = 0;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const Real* v = inp + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * HS;
                        const Real pt = p[t2] * inv_l;
                        for (int d = 0; d < HS; d++) o[d] += pt * v[d];
                    }
                    if (lse) lse[((size_t)b * NH + h) * T + t] = m + std::log(l);
                }
            }
        }
    }
}

// dinp (B,T,3C) += gradient of attention_forward's out w.r.t. its packed QKV input, given dout (B,T,C).
// P is recomputed from Q and K row by row (nothing saved from the forward). Per query row t of head h:
//   dP[t2] = dO[t]·V[t2];  D = sum_t2 P[t2] dP[t2] (= dO[t]·O[t]);  dS[t2] = P[t2] (dP[t2] - D);
//   dQ[t] += scale sum_t2 dS[t2] K[t2];  dK[t2] += scale dS[t2] Q[t];  dV[t2] += P[t2] dO[t].
// Threads own whole (b, h) heads, so the dK/dV scatter has no races and a fixed order.
template <typename Real>
void attention_backward(Real* dinp, const Real* dout, const Real* inp, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const size_t C3 = (size_t)C * 3;
    const Real scale = Real(1) / std::sqrt(Real(HS));
#pragma omp parallel
    {
        std::vector<Real> p(T), dp(T);
#pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                for (int t = 0; t < T; t++) {
                    const size_t row = ((size_t)b * T + t) * C3 + (size_t)h * HS;
                    const Real* q = inp + row;
                    Real* dq = dinp + row;
                    const Real* dO = dout + ((size_t)b * T + t) * C + (size_t)h * HS;
                    Real m, l;  // recompute this row of P
                    attention_row_exp_scores(p.data(), &m, &l, inp, b, t, h, T, C, HS, scale);
                    const Real inv_l = Real(1) / l;
                    Real D = 0;
                    for (int t2 = 0; t2 <= t; t2++) {
                        p[t2] *= inv_l;
                        const Real* v = inp + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * HS;
                        Real s = 0;
                        for (int d = 0; d < HS; d++) s += dO[d] * v[d];
                        dp[t2] = s;
                        D += p[t2] * s;
                    }
                    for (int t2 = 0; t2 <= t; t2++) {
                        const size_t krow = ((size_t)b * T + t2) * C3 + C + (size_t)h * HS;
                        const Real* k = inp + krow;
                        Real* dk = dinp + krow;
                        Real* dv = dinp + krow + C;
                        const Real ds = p[t2] * (dp[t2] - D) * scale;
                        for (int d = 0; d < HS; d++) {
                            dq[d] += ds * k[d];
                            dk[d] += ds * q[d];
                            dv[d] += p[t2] * dO[d];
                        }
                    }
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------ gelu
// GELU, tanh approximation (GPT-2's; nn.functional.gelu(approximate="tanh")):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).  N elements.
template <typename Real>
void gelu_forward(Real* out, const Real* inp, size_t N) {
    const Real k = Real(0.79788456080286535588);  // sqrt(2/pi)
#pragma omp parallel for
    for (long i = 0; i < (long)N; i++) {
        const Real x = inp[i];
        out[i] = Real(0.5) * x * (Real(1) + std::tanh(k * (x + Real(0.044715) * x * x * x)));
    }
}

// dinp += dout * gelu'(inp).
template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, size_t N) {
    const Real k = Real(0.79788456080286535588);  // sqrt(2/pi)
#pragma omp parallel for
    for (long i = 0; i < (long)N; i++) {
        const Real x = inp[i];
        const Real th = std::tanh(k * (x + Real(0.044715) * x * x * x));
        const Real du = k * (Real(1) + Real(3 * 0.044715) * x * x);
        const Real grad = Real(0.5) * (Real(1) + th) + Real(0.5) * x * (Real(1) - th * th) * du;
        dinp[i] += grad * dout[i];
    }
}

// ------------------------------------------------------------------------------------------------ residual
// out = inp1 + inp2 (N elements).
template <typename Real>
void residual_forward(Real* out, const Real* inp1, const Real* inp2, size_t N) {
#pragma omp parallel for
    for (long i = 0; i < (long)N; i++) out[i] = inp1[i] + inp2[i];
}

// dinp1 += dout; dinp2 += dout.
template <typename Real>
void residual_backward(Real* dinp1, Real* dinp2, const Real* dout, size_t N) {
#pragma omp parallel for
    for (long i = 0; i < (long)N; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}

// ------------------------------------------------------------------------------------------------ softmax + CE
// logits (B,T,Vp) over the padded vocabulary; only the first V columns are real, the padding is ignored.
// probs (B,T,Vp) = softmax over the V real columns, 0 in the padding.
// losses (B,T) = -log probs[target] per position; targets (B,T) < V, or null to skip the loss (inference).
template <typename Real>
void crossentropy_softmax_forward(Real* losses, Real* probs, const Real* logits, const int* targets, int B, int T,
                                  int V, int Vp) {
    const long N = (long)B * T;
#pragma omp parallel for
    for (long n = 0; n < N; n++) {
        const Real* z = logits + (size_t)n * Vp;
        Real* p = probs + (size_t)n * Vp;
        Real m = -INFINITY;
        for (int i = 0; i < V; i++) m = z[i] > m ? z[i] : m;
        Real sum = 0;
        for (int i = 0; i < V; i++) {
            p[i] = std::exp(z[i] - m);
            sum += p[i];
        }
        const Real inv = Real(1) / sum;
        for (int i = 0; i < V; i++) p[i] *= inv;
        for (int i = V; i < Vp; i++) p[i] = 0;
        // -log p[target], computed from the logits (not log of a rounded probability)
        if (targets) losses[n] = m + std::log(sum) - z[targets[n]];
    }
}

// dlogits (B,T,Vp) += dlosses[n] * (probs - onehot(target)) on the V real columns; padding untouched.
// dlosses (B,T): d(total loss)/d(losses[n]), e.g. 1/(B*T) for the mean.
template <typename Real>
void crossentropy_softmax_backward(Real* dlogits, const Real* dlosses, const Real* probs, const int* targets, int B,
                                   int T, int V, int Vp) {
    const long N = (long)B * T;
#pragma omp parallel for
    for (long n = 0; n < N; n++) {
        Real* dz = dlogits + (size_t)n * Vp;
        const Real* p = probs + (size_t)n * Vp;
        const Real dl = dlosses[n];
        for (int i = 0; i < V; i++) dz[i] += dl * p[i];
        dz[targets[n]] -= dl;
    }
}

// ------------------------------------------------------------------------------------------------ AdamW
// One AdamW step on one tensor of n elements; step t >= 1 (bias correction). Decoupled weight decay as in
// torch.optim.AdamW: param -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * param).
// Pass weight_decay = 0 for tensors the parameter table does not decay.
template <typename Real>
void adamw_update(Real* params, const Real* grads, Real* m, Real* v, size_t n, Real lr, Real beta1, Real beta2,
                  Real eps, Real weight_decay, int t) {
    const Real bias1 = Real(1) - std::pow(beta1, Real(t));
    const Real bias2 = Real(1) - std::pow(beta2, Real(t));
#pragma omp parallel for
    for (long i = 0; i < (long)n; i++) {
        const Real g = grads[i];
        m[i] = beta1 * m[i] + (Real(1) - beta1) * g;
        v[i] = beta2 * v[i] + (Real(1) - beta2) * g * g;
        const Real m_hat = m[i] / bias1;
        const Real v_hat = v[i] / bias2;
        params[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * params[i]);
    }
}

// ================================================================================================ the model
// Activations of one forward pass, described by one table (name, element count) and laid out in one
// buffer in table order; the gradient buffer uses the same table. Per-layer tensors have a leading L.
enum Activation {
    ACT_ENCODED,     // (B,T,C)      wte + wpe
    ACT_LN1,         // (L,B,T,C)
    ACT_LN1_MEAN,    // (L,B,T)
    ACT_LN1_RSTD,    // (L,B,T)
    ACT_QKV,         // (L,B,T,3C)   packed (B,T,3,NH,HS)
    ACT_ATTY,        // (L,B,T,C)    attention output, heads concatenated
    ACT_ATT_LSE,     // (L,B,NH,T)   per-row log-sum-exp (kept for inspection; the backward recomputes P)
    ACT_ATTPROJ,     // (L,B,T,C)
    ACT_RESIDUAL2,   // (L,B,T,C)    residual stream after attention
    ACT_LN2,         // (L,B,T,C)
    ACT_LN2_MEAN,    // (L,B,T)
    ACT_LN2_RSTD,    // (L,B,T)
    ACT_FCH,         // (L,B,T,4C)
    ACT_FCH_GELU,    // (L,B,T,4C)
    ACT_FCPROJ,      // (L,B,T,C)
    ACT_RESIDUAL3,   // (L,B,T,C)    residual stream after the MLP (input of the next layer)
    ACT_LNF,         // (B,T,C)
    ACT_LNF_MEAN,    // (B,T)
    ACT_LNF_RSTD,    // (B,T)
    ACT_LOGITS,      // (B,T,Vp)
    ACT_PROBS,       // (B,T,Vp)
    ACT_LOSSES,      // (B,T)
    kNumActivations
};

struct ActivationSpec {
    const char* name;
    size_t numel;
};

inline std::array<ActivationSpec, kNumActivations> activation_table(const GPT2Config& c, int B, int T) {
    const size_t L = c.num_layers, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size;
    const size_t N = (size_t)B * T;
    return {{
        {"encoded", N * C},
        {"ln1", L * N * C},
        {"ln1_mean", L * N},
        {"ln1_rstd", L * N},
        {"qkv", L * N * 3 * C},
        {"atty", L * N * C},
        {"att_lse", L * NH * N},
        {"attproj", L * N * C},
        {"residual2", L * N * C},
        {"ln2", L * N * C},
        {"ln2_mean", L * N},
        {"ln2_rstd", L * N},
        {"fch", L * N * 4 * C},
        {"fch_gelu", L * N * 4 * C},
        {"fcproj", L * N * C},
        {"residual3", L * N * C},
        {"lnf", N * C},
        {"lnf_mean", N},
        {"lnf_rstd", N},
        {"logits", N * Vp},
        {"probs", N * Vp},
        {"losses", N},
    }};
}

struct GPT2 {
    GPT2Config config;
    std::array<size_t, kNumParameterTensors> param_offsets{};
    std::vector<float> params, grads, m, v;  // flat, table order; m/v are AdamW moments

    int B = 0, T = 0;                         // shape the activations are sized for
    std::array<size_t, kNumActivations> act_offsets{};
    std::vector<float> acts, grad_acts;        // grad_acts: d(loss)/d(activation), same table
    std::vector<int> inputs, targets;          // of the last forward
    bool has_targets = false;
    float mean_loss = NAN;                     // of the last forward (NAN without targets)

    float* param(int i) { return params.data() + param_offsets[i]; }
    float* grad(int i) { return grads.data() + param_offsets[i]; }
    float* act(int i) { return acts.data() + act_offsets[i]; }
    float* grad_act(int i) { return grad_acts.data() + act_offsets[i]; }
};

// Builds the model from a flat parameter buffer in table order (gpt2_num_parameters(c) floats).
inline void gpt2_build(GPT2* model, const GPT2Config& c, const float* params) {
    model->config = c;
    model->param_offsets = gpt2_parameter_offsets(c);
    const size_t n = gpt2_num_parameters(c);
    model->params.assign(params, params + n);
    model->grads.assign(n, 0.0f);
    model->m.assign(n, 0.0f);
    model->v.assign(n, 0.0f);
    model->B = model->T = 0;
    model->acts.clear();
    model->grad_acts.clear();
}

// Loads a checkpoint (fp32 v3 or bf16 v5, see model_file.h) or a Hugging Face GPT-2 model (llmc/formats/hf_gpt2.h,
// read_model_any); throws FileError on a bad file.
inline void gpt2_build_from_checkpoint(GPT2* model, const std::string& path) {
    ModelFile file = read_model_any(path);
    gpt2_build(model, file.config, file.params.data());
}

// Sizes the activation buffers for (B, T) when the shape changes.
inline void gpt2_allocate(GPT2* model, int B, int T) {
    if (model->B == B && model->T == T && !model->acts.empty()) return;
    auto table = activation_table(model->config, B, T);
    size_t at = 0;
    for (int i = 0; i < kNumActivations; i++) {
        model->act_offsets[i] = at;
        at += table[i].numel;
    }
    model->acts.assign(at, 0.0f);
    model->grad_acts.assign(at, 0.0f);
    model->B = B;
    model->T = T;
}

// Forward pass over inputs (B,T); returns the mean cross-entropy loss, or NAN when targets is null.
// Logits (B,T,Vp) stay in model->act(ACT_LOGITS); probabilities in ACT_PROBS.
inline float gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    const GPT2Config& c = model->config;
    const int L = c.num_layers, C = c.channels, NH = c.num_heads, V = c.vocab_size, Vp = c.padded_vocab_size;
    if (T < 1 || T > c.max_seq_len || B < 1) {
        fprintf(stderr, "error: reference::gpt2_forward: need 1 <= T <= %d and B >= 1 (got B=%d T=%d)\n", c.max_seq_len, B, T);
        exit(EXIT_FAILURE);
    }
    const size_t N = (size_t)B * T;
    for (size_t i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= V || (targets && (targets[i] < 0 || targets[i] >= V))) {
            fprintf(stderr, "error: reference::gpt2_forward: token out of range [0, %d) at position %zu\n", V, i);
            exit(EXIT_FAILURE);
        }
    }
    gpt2_allocate(model, B, T);
    model->inputs.assign(inputs, inputs + N);
    model->has_targets = targets != nullptr;
    if (targets) model->targets.assign(targets, targets + N);

    encoder_forward(model->act(ACT_ENCODED), inputs, model->param(WTE), model->param(WPE), B, T, C);
    const float* residual = model->act(ACT_ENCODED);
    for (int l = 0; l < L; l++) {
        const size_t lC = (size_t)l * C, lNC = (size_t)l * N * C, lN = (size_t)l * N;
        float* ln1 = model->act(ACT_LN1) + lNC;
        float* qkv = model->act(ACT_QKV) + lNC * 3;
        float* atty = model->act(ACT_ATTY) + lNC;
        float* attproj = model->act(ACT_ATTPROJ) + lNC;
        float* residual2 = model->act(ACT_RESIDUAL2) + lNC;
        float* ln2 = model->act(ACT_LN2) + lNC;
        float* fch = model->act(ACT_FCH) + lNC * 4;
        float* fch_gelu = model->act(ACT_FCH_GELU) + lNC * 4;
        float* fcproj = model->act(ACT_FCPROJ) + lNC;
        float* residual3 = model->act(ACT_RESIDUAL3) + lNC;

        layernorm_forward(ln1, model->act(ACT_LN1_MEAN) + lN, model->act(ACT_LN1_RSTD) + lN, residual,
                          model->param(LN1W) + lC, model->param(LN1B) + lC, B, T, C);
        matmul_forward(qkv, ln1, model->param(QKVW) + lC * 3 * C, model->param(QKVB) + lC * 3, B, T, C, 3 * C);
        attention_forward(atty, model->act(ACT_ATT_LSE) + (size_t)l * NH * N, qkv, B, T, C, NH);
        matmul_forward(attproj, atty, model->param(ATTPROJW) + lC * C, model->param(ATTPROJB) + lC, B, T, C, C);
        residual_forward(residual2, residual, attproj, N * C);
        layernorm_forward(ln2, model->act(ACT_LN2_MEAN) + lN, model->act(ACT_LN2_RSTD) + lN, residual2,
                          model->param(LN2W) + lC, model->param(LN2B) + lC, B, T, C);
        matmul_forward(fch, ln2, model->param(FCW) + lC * 4 * C, model->param(FCB) + lC * 4, B, T, C, 4 * C);
        gelu_forward(fch_gelu, fch, N * 4 * C);
        matmul_forward(fcproj, fch_gelu, model->param(FCPROJW) + lC * 4 * C, model->param(FCPROJB) + lC, B, T,
                       4 * C, C);
        residual_forward(residual3, residual2, fcproj, N * C);
        residual = residual3;
    }
    layernorm_forward(model->act(ACT_LNF), model->act(ACT_LNF_MEAN), model->act(ACT_LNF_RSTD), residual,
                      model->param(LNFW), model->param(LNFB), B, T, C);
    // classifier tied to wte: logits over all Vp rows (the padded rows are zero and ignored by the loss)
    matmul_forward(model->act(ACT_LOGITS), model->act(ACT_LNF), model->param(WTE), (const float*)nullptr, B, T, C,
                   Vp);
    crossentropy_softmax_forward(model->act(ACT_LOSSES), model->act(ACT_PROBS), model->act(ACT_LOGITS), targets, B, T,
                                 V, Vp);
    if (!targets) {
        model->mean_loss = NAN;
        return NAN;
    }
    double sum = 0;  // the mean over positions in double: one fixed-order sum
    const float* losses = model->act(ACT_LOSSES);
    for (size_t i = 0; i < N; i++) sum += losses[i];
    model->mean_loss = (float)(sum / (double)N);
    return model->mean_loss;
}

inline void gpt2_zero_grad(GPT2* model) { std::fill(model->grads.begin(), model->grads.end(), 0.0f); }

// Backward pass of the last forward (which must have had targets): ACCUMULATES d(mean loss)/d(param) into
// model->grads (call gpt2_zero_grad first for a fresh gradient).
inline void gpt2_backward(GPT2* model) {
    if (!model->has_targets || model->acts.empty()) {
        fprintf(stderr, "error: reference::gpt2_backward needs a forward pass with targets first\n");
        exit(EXIT_FAILURE);
    }
    const GPT2Config& c = model->config;
    const int L = c.num_layers, C = c.channels, NH = c.num_heads, V = c.vocab_size, Vp = c.padded_vocab_size;
    const int B = model->B, T = model->T;
    const size_t N = (size_t)B * T;
    const int* inputs = model->inputs.data();
    std::fill(model->grad_acts.begin(), model->grad_acts.end(), 0.0f);

    float* dlosses = model->grad_act(ACT_LOSSES);
    for (size_t i = 0; i < N; i++) dlosses[i] = 1.0f / (float)N;
    crossentropy_softmax_backward(model->grad_act(ACT_LOGITS), dlosses, model->act(ACT_PROBS), model->targets.data(),
                                  B, T, V, Vp);
    matmul_backward(model->grad_act(ACT_LNF), model->grad(WTE), (float*)nullptr, model->grad_act(ACT_LOGITS),
                    model->act(ACT_LNF), model->param(WTE), B, T, C, Vp);
    const float* residual = L > 0 ? model->act(ACT_RESIDUAL3) + (size_t)(L - 1) * N * C : model->act(ACT_ENCODED);
    float* dresidual = L > 0 ? model->grad_act(ACT_RESIDUAL3) + (size_t)(L - 1) * N * C : model->grad_act(ACT_ENCODED);
    layernorm_backward(dresidual, model->grad(LNFW), model->grad(LNFB), model->grad_act(ACT_LNF), residual,
                       model->param(LNFW), model->act(ACT_LNF_MEAN), model->act(ACT_LNF_RSTD), B, T, C);

    for (int l = L - 1; l >= 0; l--) {
        const size_t lC = (size_t)l * C, lNC = (size_t)l * N * C, lN = (size_t)l * N;
        // the layer's input and its gradient
        const float* layer_in = l == 0 ? model->act(ACT_ENCODED) : model->act(ACT_RESIDUAL3) + lNC - N * C;
        float* dlayer_in = l == 0 ? model->grad_act(ACT_ENCODED) : model->grad_act(ACT_RESIDUAL3) + lNC - N * C;
        float* dresidual3 = model->grad_act(ACT_RESIDUAL3) + lNC;

        // MLP block: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        float* dresidual2 = model->grad_act(ACT_RESIDUAL2) + lNC;
        float* dfcproj = model->grad_act(ACT_FCPROJ) + lNC;
        residual_backward(dresidual2, dfcproj, dresidual3, N * C);
        matmul_backward(model->grad_act(ACT_FCH_GELU) + lNC * 4, model->grad(FCPROJW) + lC * 4 * C,
                        model->grad(FCPROJB) + lC, dfcproj, model->act(ACT_FCH_GELU) + lNC * 4,
                        model->param(FCPROJW) + lC * 4 * C, B, T, 4 * C, C);
        gelu_backward(model->grad_act(ACT_FCH) + lNC * 4, model->act(ACT_FCH) + lNC * 4,
                      model->grad_act(ACT_FCH_GELU) + lNC * 4, N * 4 * C);
        matmul_backward(model->grad_act(ACT_LN2) + lNC, model->grad(FCW) + lC * 4 * C, model->grad(FCB) + lC * 4,
                        model->grad_act(ACT_FCH) + lNC * 4, model->act(ACT_LN2) + lNC,
                        model->param(FCW) + lC * 4 * C, B, T, C, 4 * C);
        layernorm_backward(dresidual2, model->grad(LN2W) + lC, model->grad(LN2B) + lC,
                           model->grad_act(ACT_LN2) + lNC, model->act(ACT_RESIDUAL2) + lNC, model->param(LN2W) + lC,
                           model->act(ACT_LN2_MEAN) + lN, model->act(ACT_LN2_RSTD) + lN, B, T, C);

        // attention block: residual2 = layer_in + attproj(attention(qkv(ln1(layer_in))))
        float* dattproj = model->grad_act(ACT_ATTPROJ) + lNC;
        residual_backward(dlayer_in, dattproj, dresidual2, N * C);
        matmul_backward(model->grad_act(ACT_ATTY) + lNC, model->grad(ATTPROJW) + lC * C, model->grad(ATTPROJB) + lC,
                        dattproj, model->act(ACT_ATTY) + lNC, model->param(ATTPROJW) + lC * C, B, T, C, C);
        attention_backward(model->grad_act(ACT_QKV) + lNC * 3, model->grad_act(ACT_ATTY) + lNC,
                           model->act(ACT_QKV) + lNC * 3, B, T, C, NH);
        matmul_backward(model->grad_act(ACT_LN1) + lNC, model->grad(QKVW) + lC * 3 * C, model->grad(QKVB) + lC * 3,
                        model->grad_act(ACT_QKV) + lNC * 3, model->act(ACT_LN1) + lNC,
                        model->param(QKVW) + lC * 3 * C, B, T, C, 3 * C);
        layernorm_backward(dlayer_in, model->grad(LN1W) + lC, model->grad(LN1B) + lC,
                           model->grad_act(ACT_LN1) + lNC, layer_in, model->param(LN1W) + lC,
                           model->act(ACT_LN1_MEAN) + lN, model->act(ACT_LN1_RSTD) + lN, B, T, C);
    }
    encoder_backward(model->grad(WTE), model->grad(WPE), model->grad_act(ACT_ENCODED), inputs, B, T, C);
}

struct AdamWSettings {
    float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// One AdamW step (t >= 1) on every parameter tensor; weight decay only where the table's weight_decay flag is set.
inline void gpt2_update(GPT2* model, const AdamWSettings& opt, int t) {
    auto table = gpt2_parameter_table(model->config);
    for (int i = 0; i < kNumParameterTensors; i++) {
        const size_t off = model->param_offsets[i];
        adamw_update(model->params.data() + off, model->grads.data() + off, model->m.data() + off,
                     model->v.data() + off, table[i].numel, opt.lr, opt.beta1, opt.beta2, opt.eps,
                     table[i].weight_decay ? opt.weight_decay : 0.0f, t);
    }
}

}  // namespace reference
