// The CPU engine's layers besides the products (llmc/cpu/matmul.h) and attention (llmc/cpu/attention.h):
// embeddings, LayerNorm, GELU, the residual add and the classifier's softmax + cross-entropy, forward and backward,
// in fp32, vectorised (llmc/cpu/simd.h) and OpenMP over positions or channels. Each output is computed in one
// fixed order whatever the number of threads. Shapes as in the CPU reference (reference/gpt2.h): N = B*T
// positions, C channels, Vp the padded vocabulary (V real entries).
// Unlike the reference, a backward here says whether it overwrites or accumulates: the model reuses a few
// gradient buffers for every layer instead of one per activation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "llmc/cpu/simd.h"
#include "llmc/gpt2/gpt2_config.h"

namespace cpu {

// x[i] (+)= y[i] over n floats, vectorised.
inline void add_into(float* x, const float* y, size_t n) {
    size_t i = 0;
    for (; i + kVec <= n; i += kVec) vstore(x + i, vload(x + i) + vload(y + i));
    for (; i < n; i++) x[i] += y[i];
}

// Parallel over rows: out[n] (N rows of C) = a[n] + b[n]; a and out may be the same.
inline void residual_forward(float* out, const float* a, const float* b, size_t N, size_t C) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < (long)N; n++) {
        float* o = out + (size_t)n * C;
        if (o != a + (size_t)n * C) std::copy(a + (size_t)n * C, a + (size_t)n * C + C, o);
        add_into(o, b + (size_t)n * C, C);
    }
}

// ------------------------------------------------------------------------------------------------ embeddings
// out (N, C) = wte[inp[n]] + wpe[n % T].
inline void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (long n = 0; n < (long)B * T; n++) {
        const float* tok = wte + (size_t)inp[n] * C;
        const float* pos = wpe + (size_t)(n % T) * C;
        float* o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) o[i] = tok[i] + pos[i];
    }
}

// dwte[inp[n]] += dout[n], dwpe[t] += dout[n]: threads own slices of channels, positions in order within each.
inline void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
    constexpr int kSlice = 4 * kVec;
    const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
    for (int s = 0; s < slices; s++) {
        const int c0 = s * kSlice, c1 = std::min(C, c0 + kSlice);
        for (long n = 0; n < (long)B * T; n++) {
            const float* d = dout + (size_t)n * C;
            float* dtok = dwte + (size_t)inp[n] * C;
            float* dpos = dwpe + (size_t)(n % T) * C;
            for (int i = c0; i < c1; i++) {
                dtok[i] += d[i];
                dpos[i] += d[i];
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------ layernorm
// out (N, C) = (x - mean) * rstd * weight + bias per row, biased variance (nn.LayerNorm); saves mean and rstd.
inline void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        vfloat acc = vfloat{};
        int i = 0;
        for (; i + kVec <= C; i += kVec) acc += vload(x + i);
        float s = vsum(acc);
        for (; i < C; i++) s += x[i];
        const float m = s / C;
        acc = vfloat{};
        i = 0;
        for (; i + kVec <= C; i += kVec) {
            const vfloat d = vload(x + i) - m;
            acc += d * d;
        }
        float v = vsum(acc);
        for (; i < C; i++) v += (x[i] - m) * (x[i] - m);
        const float r = 1.0f / std::sqrt(v / C + (float)kLayerNormEps);
        float* o = out + (size_t)n * C;
        for (i = 0; i < C; i++) o[i] = (x[i] - m) * r * weight[i] + bias[i];
        mean[n] = m;
        rstd[n] = r;
    }
}

// dinp (N, C) += (or =, !accumulate) the input gradient; dweight, dbias (C) += their gradients.
// With xhat = (x - mean) rstd and g = dout weight: dinp = rstd (g - mean(g) - xhat mean(g xhat)).
inline void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, const float* mean, const float* rstd, int N, int C,
                               bool accumulate) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float* d = dout + (size_t)n * C;
        const float m = mean[n], r = rstd[n];
        vfloat ag = vfloat{}, agx = vfloat{};
        int i = 0;
        for (; i + kVec <= C; i += kVec) {
            const vfloat g = vload(d + i) * vload(weight + i);
            ag += g;
            agx += g * ((vload(x + i) - m) * r);
        }
        float g_sum = vsum(ag), gx_sum = vsum(agx);
        for (; i < C; i++) {
            const float g = d[i] * weight[i];
            g_sum += g;
            gx_sum += g * ((x[i] - m) * r);
        }
        const float g_mean = g_sum / C, gx_mean = gx_sum / C;
        float* dx = dinp + (size_t)n * C;
        for (i = 0; i < C; i++) {
            const float xhat = (x[i] - m) * r;
            const float v = r * (d[i] * weight[i] - g_mean - xhat * gx_mean);
            dx[i] = accumulate ? dx[i] + v : v;
        }
    }
    // dweight, dbias: sums over rows, threads own slices of channels
    constexpr int kSlice = 4 * kVec;
    const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
    for (int s = 0; s < slices; s++) {
        const int c0 = s * kSlice, c1 = std::min(C, c0 + kSlice);
        float dw[kSlice] = {}, db[kSlice] = {};
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* d = dout + (size_t)n * C;
            const float m = mean[n], r = rstd[n];
            for (int i = c0; i < c1; i++) {
                dw[i - c0] += d[i] * ((x[i] - m) * r);
                db[i - c0] += d[i];
            }
        }
        for (int i = c0; i < c1; i++) {
            dweight[i] += dw[i - c0];
            dbias[i] += db[i - c0];
        }
    }
}

// ------------------------------------------------------------------------------------------------ gelu
// GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), over n floats.
constexpr float kGeluScale = 0.79788456080286535588f;  // sqrt(2/pi)

inline void gelu_forward(float* out, const float* inp, size_t n) {
    const long vecs = (long)(n / kVec);
#pragma omp parallel for schedule(static)
    for (long v = 0; v < vecs; v++) {
        const vfloat x = vload(inp + v * kVec);
        vstore(out + v * kVec, 0.5f * x * (1.0f + vtanh(kGeluScale * (x + 0.044715f * x * x * x))));
    }
    for (size_t i = (size_t)vecs * kVec; i < n; i++) {
        const float x = inp[i];
        out[i] = 0.5f * x * (1.0f + vtanh(vset1(kGeluScale * (x + 0.044715f * x * x * x)))[0]);
    }
}

// dinp = gelu'(inp) * dout (overwrites).
inline void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
    auto grad = [](vfloat x) {
        const vfloat th = vtanh(kGeluScale * (x + 0.044715f * x * x * x));
        const vfloat du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
        return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    };
    const long vecs = (long)(n / kVec);
#pragma omp parallel for schedule(static)
    for (long v = 0; v < vecs; v++) vstore(dinp + v * kVec, grad(vload(inp + v * kVec)) * vload(dout + v * kVec));
    for (size_t i = (size_t)vecs * kVec; i < n; i++) dinp[i] = grad(vset1(inp[i]))[0] * dout[i];
}

// ------------------------------------------------------------------------------------------------ classifier
// Softmax over the V real columns of each row of logits (N, Vp) and the cross-entropy of targets (null: no loss).
// The row is overwritten with its probabilities (0 in the padding), which is all the backward needs; losses[n] =
// logsumexp - logit[target], from the logits (not the log of a rounded probability).
inline void softmax_crossentropy_forward(float* losses, float* logits, const int* targets, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* z = logits + (size_t)n * Vp;
        const float z_target = targets ? z[targets[n]] : 0.0f;
        vfloat vm = vset1(-INFINITY);
        int i = 0;
        for (; i + kVec <= V; i += kVec) vm = vmax(vm, vload(z + i));
        float m = vmax_lanes(vm);
        for (; i < V; i++) m = std::max(m, z[i]);
        vfloat vs = vfloat{};
        for (i = 0; i + kVec <= V; i += kVec) {
            const vfloat e = vexp(vload(z + i) - m);
            vstore(z + i, e);
            vs += e;
        }
        float sum = vsum(vs);
        for (; i < V; i++) {
            z[i] = sexp(z[i] - m);
            sum += z[i];
        }
        const float inv = 1.0f / sum;
        for (i = 0; i + kVec <= V; i += kVec) vstore(z + i, vload(z + i) * inv);
        for (; i < V; i++) z[i] *= inv;
        for (i = V; i < Vp; i++) z[i] = 0.0f;
        if (targets) losses[n] = m + std::log(sum) - z_target;
    }
}

// In place: probs (N, Vp) -> dlogits = dloss (probs - onehot(target)) on the V real columns, 0 in the padding.
inline void softmax_crossentropy_backward(float* probs, const int* targets, float dloss, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* p = probs + (size_t)n * Vp;
        int i = 0;
        for (; i + kVec <= V; i += kVec) vstore(p + i, vload(p + i) * dloss);
        for (; i < V; i++) p[i] *= dloss;
        p[targets[n]] -= dloss;
    }
}

}  // namespace cpu
