// Text from the CPU model (train_gpt2's samples): one position at a time with a KV cache, so each new token costs
// one pass over the weights (matrix-vector products) instead of a forward over the whole sequence. The same
// arithmetic as the training forward, one row at a time; the caller picks each token from the logits (the
// trainer: the host sampler, llmc/inference/sampler.h, with one coin per token as the GPU trainer draws them).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/cpu/gpt2.h"
#include "llmc/cpu/layers.h"
#include "llmc/cpu/simd.h"

namespace cpu {

// out (OC) = W (OC, C) · x (C) + bias (may be null); OpenMP over output rows, each a vectorised dot product.
inline void matvec(float* out, const float* x, const float* w, const float* bias, int C, int OC) {
#pragma omp parallel for schedule(static)
    for (int j = 0; j < OC; j++) {
        const float* row = w + (size_t)j * C;
        vfloat acc = vfloat{};
        int i = 0;
        for (; i + kVec <= C; i += kVec) acc += vload(row + i) * vload(x + i);
        float s = vsum(acc);
        for (; i < C; i++) s += row[i] * x[i];
        out[j] = (bias ? bias[j] : 0.0f) + s;
    }
}

// Feeds prompt then picks max_new tokens: pick(logits, g) returns the g-th new token from the V logits of the
// position before it. prompt.size() + max_new - 1 positions must fit the model's max_seq_len.
inline std::vector<int> generate(GPT2& m, const std::vector<int>& prompt, int max_new,
                                 const std::function<int(const float* logits, int g)>& pick) {
    const GPT2Config& c = m.config;
    const int L = c.num_layers, C = c.channels, NH = c.num_heads, HS = C / NH, V = c.vocab_size;
    const int positions = (int)prompt.size() + max_new - 1;
    if (prompt.empty() || max_new < 1 || positions > c.max_seq_len) {
        throw std::invalid_argument("cpu::generate: " + std::to_string(prompt.size()) + " prompt tokens + " +
                                    std::to_string(max_new) + " new ones do not fit max_seq_len " +
                                    std::to_string(c.max_seq_len));
    }
    std::vector<float> k_cache((size_t)L * positions * C), v_cache((size_t)L * positions * C);
    std::vector<float> x(C), ln(C), qkv(3 * C), att(C), proj(C), fch(4 * C), logits(V), scores(positions);
    float mean, rstd;
    const float scale = 1.0f / std::sqrt((float)HS);
    std::vector<int> out;
    int token = prompt[0];
    for (int t = 0; t < positions; t++) {
        if (token < 0 || token >= V) throw std::invalid_argument("cpu::generate: token out of range");
        for (int i = 0; i < C; i++) x[i] = m.param(WTE)[(size_t)token * C + i] + m.param(WPE)[(size_t)t * C + i];
        for (int l = 0; l < L; l++) {
            const size_t lC = (size_t)l * C;
            float* kc = k_cache.data() + (size_t)l * positions * C;
            float* vc = v_cache.data() + (size_t)l * positions * C;
            layernorm_forward(ln.data(), &mean, &rstd, x.data(), m.param(LN1W) + lC, m.param(LN1B) + lC, 1, C);
            matvec(qkv.data(), ln.data(), m.param(QKVW) + 3 * lC * C, m.param(QKVB) + 3 * lC, C, 3 * C);
            std::copy(qkv.begin() + C, qkv.begin() + 2 * C, kc + (size_t)t * C);
            std::copy(qkv.begin() + 2 * C, qkv.end(), vc + (size_t)t * C);
            for (int h = 0; h < NH; h++) {
                const float* q = qkv.data() + h * HS;
                float mx = -INFINITY, sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = kc + (size_t)t2 * C + h * HS;
                    float s = 0.0f;
                    for (int d = 0; d < HS; d++) s += q[d] * k[d];
                    scores[t2] = s * scale;
                    mx = std::max(mx, scores[t2]);
                }
                for (int t2 = 0; t2 <= t; t2++) sum += scores[t2] = sexp(scores[t2] - mx);
                float* o = att.data() + h * HS;
                std::fill(o, o + HS, 0.0f);
                for (int t2 = 0; t2 <= t; t2++) {
                    const float p = scores[t2] / sum;
                    const float* v = vc + (size_t)t2 * C + h * HS;
                    for (int d = 0; d < HS; d++) o[d] += p * v[d];
                }
            }
            matvec(proj.data(), att.data(), m.param(ATTPROJW) + lC * C, m.param(ATTPROJB) + lC, C, C);
            add_into(x.data(), proj.data(), C);
            layernorm_forward(ln.data(), &mean, &rstd, x.data(), m.param(LN2W) + lC, m.param(LN2B) + lC, 1, C);
            matvec(fch.data(), ln.data(), m.param(FCW) + 4 * lC * C, m.param(FCB) + 4 * lC, C, 4 * C);
            gelu_forward(fch.data(), fch.data(), fch.size());
            matvec(proj.data(), fch.data(), m.param(FCPROJW) + 4 * lC * C, m.param(FCPROJB) + lC, 4 * C, C);
            add_into(x.data(), proj.data(), C);
        }
        if (t + 1 < (int)prompt.size()) {  // still feeding the prompt
            token = prompt[t + 1];
            continue;
        }
        layernorm_forward(ln.data(), &mean, &rstd, x.data(), m.param(LNFW), m.param(LNFB), 1, C);
        matvec(logits.data(), ln.data(), m.param(WTE), nullptr, C, V);
        token = pick(logits.data(), (int)out.size());
        out.push_back(token);
    }
    return out;
}

}  // namespace cpu
