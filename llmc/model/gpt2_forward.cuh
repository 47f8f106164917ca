// GPT-2's forward up to the final LayerNorm, on buffers the caller owns: the trainer's (every layer's activations
// kept for the backward) and generation's prefill (one layer's buffers reused by every layer, K and V sent to the
// cache as each layer makes them) run this same code.
//
// One layer (llm.c's layout): ln1 -> qkv -> attention -> attproj -> (+residual, ln2 fused) -> fc + GELU ->
// fcproj -> (+residual, next ln1 or lnf fused).
#pragma once

#include "llmc/kernels/attention/attention.cuh"
#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/matmul/matmul.cuh"
#include "llmc/model/gpt2_fp8.cuh"
#include "llmc/model/gpt2_params.cuh"
#include "llmc/model/step_graph.h"

// A per-layer activation: layer l's slice starts at base + l * stride (stride 0: one buffer every layer overwrites).
template <typename T>
struct LayerSlices {
    T* base = nullptr;
    size_t stride = 0;
    T* at(int layer) const { return base + (size_t)layer * stride; }
};

// Where the forward writes. Layer l's input residual is `encoded` for l = 0, else residual3.at(l - 1).
struct ForwardActivations {
    floatX* encoded = nullptr;  // (B, T, C)
    LayerSlices<floatX> ln1, qkv, atty, residual2, ln2, fch, fch_gelu, residual3;  // (B, T, C), qkv 3C, fch 4C
    LayerSlices<float> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;                      // (B, T)
    LayerSlices<char> attention_saved;                                             // the backend's (LSE, or P)
    floatX* lnf = nullptr;
    float* lnf_mean = nullptr;
    float* lnf_rstd = nullptr;
    floatX* scratch = nullptr;               // (B, T, C): a projection's output before the residual add
    void* attention_workspace = nullptr;     // attention_workspace_bytes
    const floatX* residual_in(int layer) const { return layer == 0 ? encoded : residual3.at(layer - 1); }
};

// What the forward tells the code around it as it queues its kernels (on its stream; nothing has run yet).
struct ForwardListener {
    virtual ~ForwardListener() = default;
    // Before the first kernel that reads layer `layer`'s parameters (-1: wte and wpe, and lnf at the end).
    virtual void parameters_needed(int layer) {}
    // Layer `layer`'s Q, K, V (B, T, 3C) are queued: generation's prefill copies K and V into its cache.
    virtual void qkv_ready(int layer, const floatX* qkv) {}
    // Whether the call `hook` at `layer` may queue work. A step replayed from CUDA Graphs (llmc/model/step_graph.h)
    // ends a graph before each such call and makes it eagerly; it makes the others inside the capture, so they must
    // queue nothing (they are made again at each replay, for their host state).
    virtual bool queues_work(StepHook hook, int layer) const { return true; }
};

struct ForwardShape {
    int B = 0, T = 0;
    AttentionBackend backend = AttentionBackend::Materialized;
    bool fuse_gelu = kFloatXIsBF16;  // GELU in the fc GEMM's epilogue (FP32 builds use the exact kernel)
    const Fp8Layers* fp8 = nullptr;  // the blocks' linear layers in FP8 (llmc/model/gpt2_fp8.cuh); null: floatX
    bool cast_fp8_weights = true;    // cast the weights' FP8 copies (else they are the parameters' already)
};

// inputs: B·T token ids on the device. Leaves lnf (and residual3 of the last layer) for the classifier.
inline void gpt2_forward_layers(const GPT2Config& c, const GPT2Params& p, const ForwardActivations& a,
                                const int* inputs, const ForwardShape& shape, cudaStream_t s,
                                ForwardListener* listener = nullptr) {
    const int L = c.num_layers, C = c.channels, NH = c.num_heads, B = shape.B, T = shape.T, BT = B * T;
    const Fp8Layers* fp8 = gpt2_fp8_for_rows(shape.fp8, BT);
    if (fp8) gpt2_fp8_begin_forward(*fp8, s);
    // where the kernel writing linear k's input of layer l folds that input's amax (null: floatX runs)
    auto inp_amax = [&](int l, Fp8Linear k) { return fp8 ? gpt2_fp8_amax_slot(*fp8, l, k, kFp8Inp) : nullptr; };
    // delayed scaling with its histories: the LayerNorms write qkv's and fc's inputs in E4M3 (not ln1, ln2)
    const bool delayed = fp8 && fp8->delayed.calibrated();
    auto ln_fp8 = [&](int l, Fp8Linear k) { return delayed ? gpt2_fp8_layernorm_out(*fp8, l, k) : LayerNormFp8Out{}; };
    // a linear layer's forward, in FP8 or in floatX (fc's with its GELU: fch the input, fch_gelu the output)
    auto linear = [&](int l, Fp8Linear k, floatX* out, const floatX* inp, ParamTensor w, ParamTensor b, int in,
                      int out_ch, floatX* pre_gelu) {
        if (!fp8) return matmul_forward(out, inp, p(w, l), p(b, l), BT, in, out_ch, pre_gelu, shape.fuse_gelu, s);
        // every input's amax is taken by the kernel that writes it (the LayerNorms' for qkv and fc, the attention
        // forward's for attproj) but fcproj's: gelu(fch), never written in bf16, whose amax pass and cast take the
        // GELU as they read fch
        const bool fcproj = k == kFp8FcProj, from_layernorm = k == kFp8Qkv || k == kFp8Fc;
        gpt2_fp8_forward(*fp8, l, k, pre_gelu ? pre_gelu : out, fcproj ? a.fch.at(l) : inp, p(b, l), BT, s,
                         /*inp_amax_taken=*/!fcproj, /*inp_is_pre_gelu=*/fcproj, /*delayed=*/fcproj && delayed,
                         /*inp_y_written=*/from_layernorm && delayed);
    };
    if (listener) listener->parameters_needed(-1);
    encoder_forward(a.encoded, inputs, p(WTE), p(WPE), B, T, C, s);
    if (listener) listener->parameters_needed(0);  // layer 0's ln1 weights: the LayerNorm ahead of the layer
    layernorm_forward(a.ln1.at(0), a.ln1_mean.at(0), a.ln1_rstd.at(0), a.encoded, p(LN1W), p(LN1B), BT, C, s, false,
                      inp_amax(0, kFp8Qkv), ln_fp8(0, kFp8Qkv));
    for (int l = 0; l < L; l++) {
        if (fp8 && shape.cast_fp8_weights) gpt2_fp8_cast_weights(*fp8, p, l, s, delayed);  // after parameters_needed(l)
        floatX* qkv = a.qkv.at(l);
        linear(l, kFp8Qkv, qkv, a.ln1.at(l), QKVW, QKVB, C, 3 * C, nullptr);
        if (listener) listener->qkv_ready(l, qkv);
        attention_forward(shape.backend, a.atty.at(l), a.attention_saved.at(l), qkv, a.attention_workspace, B, T, C,
                          NH, s, inp_amax(l, kFp8AttProj));
        linear(l, kFp8AttProj, a.scratch, a.atty.at(l), ATTPROJW, ATTPROJB, C, C, nullptr);
        fused_residual_layernorm_forward(a.residual2.at(l), a.ln2.at(l), a.ln2_mean.at(l), a.ln2_rstd.at(l),
                                         a.residual_in(l), a.scratch, p(LN2W, l), p(LN2B, l), BT, C, s, false,
                                         inp_amax(l, kFp8Fc), ln_fp8(l, kFp8Fc));
        linear(l, kFp8Fc, a.fch_gelu.at(l), a.ln2.at(l), FCW, FCB, C, 4 * C, a.fch.at(l));
        linear(l, kFp8FcProj, a.scratch, a.fch_gelu.at(l), FCPROJW, FCPROJB, 4 * C, C, nullptr);
        if (l + 1 < L) {  // the residual add and the next layer's ln1 in one kernel
            if (listener) listener->parameters_needed(l + 1);
            fused_residual_layernorm_forward(a.residual3.at(l), a.ln1.at(l + 1), a.ln1_mean.at(l + 1),
                                             a.ln1_rstd.at(l + 1), a.residual2.at(l), a.scratch, p(LN1W, l + 1),
                                             p(LN1B, l + 1), BT, C, s, false, inp_amax(l + 1, kFp8Qkv),
                                             ln_fp8(l + 1, kFp8Qkv));
        } else {
            fused_residual_layernorm_forward(a.residual3.at(l), a.lnf, a.lnf_mean, a.lnf_rstd, a.residual2.at(l),
                                             a.scratch, p(LNFW), p(LNFB), BT, C, s, false,
                                             fp8 ? gpt2_fp8_lm_head_amax(*fp8) : nullptr);
        }
    }
}
