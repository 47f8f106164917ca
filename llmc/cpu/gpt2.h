// GPT-2 for training on the CPU (train_gpt2): the model object (parameters, gradients, activations, all fp32 on the
// host), its forward with the loss, its backward. The same model as reference/gpt2.h computes, with the
// engine's faster kernels (llmc/cpu/matmul.h, attention.h, layers.h); tests/cpu/test_cpu_engine.cpp holds the two
// (and PyTorch) together.
//   cpu::GPT2 m;  gpt2_build(&m, config, params);   // params: read_model_any(...).params, gpt2_random_init
//   gpt2_zero_grad(&m);  float loss = gpt2_forward(&m, inputs, targets, B, T);  gpt2_backward(&m, 1.0f);
// The parameters are one flat buffer in gpt2_parameter_table order (what model files hold); so are the gradients.
// Activations are kept per layer for the backward; the backward's gradients of activations live in four buffers
// every layer reuses (the residual stream's, one (N, C), the qkv's and the MLP's).
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/cpu/attention.h"
#include "llmc/cpu/layers.h"
#include "llmc/cpu/matmul.h"
#include "llmc/formats/model_file.h"
#include "llmc/gpt2/gpt2_config.h"

namespace cpu {

// The forward's activations: one buffer, laid out in this order; per-layer tensors have a leading L.
enum Act {
    ENCODED,    // (N, C)
    LN1,        // (L, N, C)
    LN1_MEAN,   // (L, N)
    LN1_RSTD,   // (L, N)
    QKV,        // (L, N, 3C)
    ATTY,       // (L, N, C)
    ATT_LSE,    // (L, B, NH, T)  per query row, the backward recomputes P from it
    RESIDUAL2,  // (L, N, C)      after attention
    LN2,        // (L, N, C)
    LN2_MEAN,   // (L, N)
    LN2_RSTD,   // (L, N)
    FCH,        // (L, N, 4C)
    FCH_GELU,   // (L, N, 4C)
    RESIDUAL3,  // (L, N, C)      after the MLP: the next layer's input
    LNF,        // (N, C)
    LNF_MEAN,   // (N)
    LNF_RSTD,   // (N)
    LOGITS,     // (N, Vp)        after a forward with targets: the probabilities (the backward turns them into dlogits)
    LOSSES,     // (N)
    kNumActs
};

inline std::array<size_t, kNumActs> activation_sizes(const GPT2Config& c, int B, int T) {
    const size_t L = c.num_layers, C = c.channels, NH = c.num_heads, N = (size_t)B * T;
    return {N * C,     L * N * C,     L * N, L * N, L * N * 3 * C, L * N * C, L * NH * N, L * N * C, L * N * C,
            L * N,     L * N,         L * N * 4 * C, L * N * 4 * C, L * N * C, N * C, N, N, N * c.padded_vocab_size,
            N};
}

struct GPT2 {
    GPT2Config config;
    std::array<size_t, kNumParameterTensors> offsets{};
    size_t num_parameters = 0;
    std::vector<float> params, grads;  // flat, gpt2_parameter_table order

    int B = 0, T = 0;                  // the shape the activations are sized for (gpt2_allocate)
    std::array<size_t, kNumActs> act_offsets{};
    std::vector<float> acts;
    std::vector<float> d_residual, d_scratch, d_qkv, d_fch;  // the backward's activation gradients
    std::vector<int> inputs, targets;  // of the last forward
    bool have_targets = false;         // the last forward had targets (what the backward needs)

    float* param(int t) { return params.data() + offsets[t]; }
    float* grad(int t) { return grads.data() + offsets[t]; }
    float* act(int a) { return acts.data() + act_offsets[a]; }
    const float* act(int a) const { return acts.data() + act_offsets[a]; }
    size_t bytes() const {
        return (params.size() + grads.size() + acts.size() + d_residual.size() + d_scratch.size() + d_qkv.size() +
                d_fch.size()) * sizeof(float);
    }
};

// Takes the parameters (gpt2_num_parameters(c) floats, table order); gradients zero. Throws FileError on a bad shape.
inline void gpt2_build(GPT2* m, const GPT2Config& c, std::vector<float> params) {
    validate_gpt2_config("model", c, "invalid GPT-2 config");
    if (params.size() != gpt2_num_parameters(c)) {
        throw std::invalid_argument("cpu::gpt2_build: " + std::to_string(params.size()) + " parameters for a " +
                                    "shape of " + std::to_string(gpt2_num_parameters(c)));
    }
    m->config = c;
    m->offsets = gpt2_parameter_offsets(c);
    m->num_parameters = params.size();
    m->params = std::move(params);
    m->grads.assign(m->num_parameters, 0.0f);
    m->B = m->T = 0;
    m->acts.clear();
}

// Sizes the activations for batches of B x T (1 <= T <= max_seq_len); no-op when already that size.
inline void gpt2_allocate(GPT2* m, int B, int T) {
    if (B < 1 || T < 1 || T > m->config.max_seq_len) {
        throw std::invalid_argument("cpu::gpt2_allocate: need B >= 1 and 1 <= T <= " +
                                    std::to_string(m->config.max_seq_len) + " (got B=" + std::to_string(B) +
                                    " T=" + std::to_string(T) + ")");
    }
    if (m->B == B && m->T == T && !m->acts.empty()) return;
    const auto sizes = activation_sizes(m->config, B, T);
    size_t at = 0;
    for (int i = 0; i < kNumActs; i++) {
        m->act_offsets[i] = at;
        at += sizes[i];
    }
    m->acts.assign(at, 0.0f);
    const size_t N = (size_t)B * T, C = m->config.channels;
    m->d_residual.assign(N * C, 0.0f);
    m->d_scratch.assign(N * C, 0.0f);
    m->d_qkv.assign(N * 3 * C, 0.0f);
    m->d_fch.assign(N * 4 * C, 0.0f);
    m->B = B;
    m->T = T;
}

inline void gpt2_zero_grad(GPT2* m) { std::fill(m->grads.begin(), m->grads.end(), 0.0f); }

// Forward over inputs (B, T); returns the mean cross-entropy loss (NAN without targets). With targets the logits
// buffer then holds the probabilities; without, the logits (B, T, Vp).
inline float gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T) {
    const GPT2Config& c = m->config;
    const int L = c.num_layers, C = c.channels, NH = c.num_heads, V = c.vocab_size, Vp = c.padded_vocab_size;
    const int N = B * T;
    gpt2_allocate(m, B, T);
    for (int i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= V || (targets && (targets[i] < 0 || targets[i] >= V))) {
            throw std::invalid_argument("cpu::gpt2_forward: token out of range [0, " + std::to_string(V) +
                                        ") at position " + std::to_string(i));
        }
    }
    m->inputs.assign(inputs, inputs + N);
    m->have_targets = targets != nullptr;
    if (targets) m->targets.assign(targets, targets + N);

    encoder_forward(m->act(ENCODED), inputs, m->param(WTE), m->param(WPE), B, T, C);
    const float* residual = m->act(ENCODED);
    for (int l = 0; l < L; l++) {
        const size_t lC = (size_t)l * C, lNC = (size_t)l * N * C, lN = (size_t)l * N;
        float* ln1 = m->act(LN1) + lNC;
        float* qkv = m->act(QKV) + 3 * lNC;
        float* atty = m->act(ATTY) + lNC;
        float* residual2 = m->act(RESIDUAL2) + lNC;
        float* ln2 = m->act(LN2) + lNC;
        float* fch = m->act(FCH) + 4 * lNC;
        float* fch_gelu = m->act(FCH_GELU) + 4 * lNC;
        float* residual3 = m->act(RESIDUAL3) + lNC;
        layernorm_forward(ln1, m->act(LN1_MEAN) + lN, m->act(LN1_RSTD) + lN, residual, m->param(LN1W) + lC,
                          m->param(LN1B) + lC, N, C);
        matmul_forward(qkv, ln1, m->param(QKVW) + 3 * lC * C, m->param(QKVB) + 3 * lC, N, C, 3 * C);
        attention_forward(atty, m->act(ATT_LSE) + lN * NH, qkv, B, T, C, NH);
        matmul_forward(residual2, atty, m->param(ATTPROJW) + lC * C, m->param(ATTPROJB) + lC, N, C, C);
        residual_forward(residual2, residual2, residual, N, C);
        layernorm_forward(ln2, m->act(LN2_MEAN) + lN, m->act(LN2_RSTD) + lN, residual2, m->param(LN2W) + lC,
                          m->param(LN2B) + lC, N, C);
        matmul_forward(fch, ln2, m->param(FCW) + 4 * lC * C, m->param(FCB) + 4 * lC, N, C, 4 * C);
        gelu_forward(fch_gelu, fch, (size_t)N * 4 * C);
        matmul_forward(residual3, fch_gelu, m->param(FCPROJW) + 4 * lC * C, m->param(FCPROJB) + lC, N, 4 * C, C);
        residual_forward(residual3, residual3, residual2, N, C);
        residual = residual3;
    }
    layernorm_forward(m->act(LNF), m->act(LNF_MEAN), m->act(LNF_RSTD), residual, m->param(LNFW), m->param(LNFB), N,
                      C);
    matmul_forward(m->act(LOGITS), m->act(LNF), m->param(WTE), nullptr, N, C, Vp);  // tied to wte, all Vp rows
    if (!targets) return NAN;
    softmax_crossentropy_forward(m->act(LOSSES), m->act(LOGITS), targets, N, V, Vp);
    double sum = 0;  // the mean in double, in order
    const float* losses = m->act(LOSSES);
    for (int i = 0; i < N; i++) sum += losses[i];
    return (float)(sum / N);
}

// The last forward's loss at each of its B*T positions (-log p of the target there), for evals that score some
// positions only (HellaSwag's endings). Needs a forward with targets not yet consumed by a backward.
inline void gpt2_last_losses(const GPT2* m, std::vector<float>* losses) {
    if (!m->have_targets) throw std::logic_error("cpu::gpt2_last_losses needs a forward with targets first");
    const float* l = m->act(LOSSES);
    losses->assign(l, l + (size_t)m->B * (size_t)m->T);
}

// Backward of the last forward (with targets), ACCUMULATING into m->grads the gradient of loss_scale x the mean
// loss (loss_scale = 1 / gradient-accumulation steps). Consumes the forward's probabilities: one backward per
// forward.
inline void gpt2_backward(GPT2* m, float loss_scale) {
    if (!m->have_targets || m->acts.empty()) {
        throw std::logic_error("cpu::gpt2_backward needs a forward with targets first");
    }
    m->have_targets = false;
    const GPT2Config& c = m->config;
    const int L = c.num_layers, C = c.channels, NH = c.num_heads, V = c.vocab_size, Vp = c.padded_vocab_size;
    const int B = m->B, T = m->T, N = B * T;
    float* dres = m->d_residual.data();
    float* dtmp = m->d_scratch.data();
    float* dqkv = m->d_qkv.data();
    float* dfch = m->d_fch.data();

    softmax_crossentropy_backward(m->act(LOGITS), m->targets.data(), loss_scale / N, N, V, Vp);
    matmul_backward(dtmp, m->grad(WTE), nullptr, m->act(LOGITS), m->act(LNF), m->param(WTE), N, C, Vp);
    const float* last = m->act(RESIDUAL3) + (size_t)(L - 1) * N * C;
    layernorm_backward(dres, m->grad(LNFW), m->grad(LNFB), dtmp, last, m->param(LNFW), m->act(LNF_MEAN),
                       m->act(LNF_RSTD), N, C, false);
    for (int l = L - 1; l >= 0; l--) {
        const size_t lC = (size_t)l * C, lNC = (size_t)l * N * C, lN = (size_t)l * N;
        const float* layer_in = l == 0 ? m->act(ENCODED) : m->act(RESIDUAL3) + lNC - (size_t)N * C;
        // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))); dres is d residual3
        matmul_backward(dfch, m->grad(FCPROJW) + 4 * lC * C, m->grad(FCPROJB) + lC, dres, m->act(FCH_GELU) + 4 * lNC,
                        m->param(FCPROJW) + 4 * lC * C, N, 4 * C, C);
        gelu_backward(dfch, m->act(FCH) + 4 * lNC, dfch, (size_t)N * 4 * C);
        matmul_backward(dtmp, m->grad(FCW) + 4 * lC * C, m->grad(FCB) + 4 * lC, dfch, m->act(LN2) + lNC,
                        m->param(FCW) + 4 * lC * C, N, C, 4 * C);
        layernorm_backward(dres, m->grad(LN2W) + lC, m->grad(LN2B) + lC, dtmp, m->act(RESIDUAL2) + lNC,
                           m->param(LN2W) + lC, m->act(LN2_MEAN) + lN, m->act(LN2_RSTD) + lN, N, C, true);
        // attention: residual2 = layer_in + attproj(attention(qkv(ln1(layer_in)))); dres is now d residual2
        matmul_backward(dtmp, m->grad(ATTPROJW) + lC * C, m->grad(ATTPROJB) + lC, dres, m->act(ATTY) + lNC,
                        m->param(ATTPROJW) + lC * C, N, C, C);
        attention_backward(dqkv, dtmp, m->act(QKV) + 3 * lNC, m->act(ATT_LSE) + lN * NH, B, T, C, NH);
        matmul_backward(dtmp, m->grad(QKVW) + 3 * lC * C, m->grad(QKVB) + 3 * lC, dqkv, m->act(LN1) + lNC,
                        m->param(QKVW) + 3 * lC * C, N, C, 3 * C);
        layernorm_backward(dres, m->grad(LN1W) + lC, m->grad(LN1B) + lC, dtmp, layer_in, m->param(LN1W) + lC,
                           m->act(LN1_MEAN) + lN, m->act(LN1_RSTD) + lN, N, C, true);
    }
    encoder_backward(m->grad(WTE), m->grad(WPE), dres, m->inputs.data(), B, T, C);
}

}  // namespace cpu
