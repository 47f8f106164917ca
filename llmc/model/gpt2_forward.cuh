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
};

// inputs: B·T token ids on the device. Leaves lnf (and residual3 of the last layer) for the classifier.
inline void gpt2_forward_layers(const GPT2Config& c, const GPT2Params& p, const ForwardActivations& a,
                                const int* inputs, const ForwardShape& shape, cudaStream_t s,
                                ForwardListener* listener = nullptr) {
    const int L = c.num_layers, C = c.channels, NH = c.num_heads, B = shape.B, T = shape.T, BT = B * T;
    if (listener) listener->parameters_needed(-1);
    encoder_forward(a.encoded, inputs, p(WTE), p(WPE), B, T, C, s);
    if (listener) listener->parameters_needed(0);  // layer 0's ln1 weights: the LayerNorm ahead of the layer
    layernorm_forward(a.ln1.at(0), a.ln1_mean.at(0), a.ln1_rstd.at(0), a.encoded, p(LN1W), p(LN1B), BT, C, s);
    for (int l = 0; l < L; l++) {
        floatX* qkv = a.qkv.at(l);
        matmul_forward(qkv, a.ln1.at(l), p(QKVW, l), p(QKVB, l), BT, C, 3 * C, nullptr, false, s);
        if (listener) listener->qkv_ready(l, qkv);
        attention_forward(shape.backend, a.atty.at(l), a.attention_saved.at(l), qkv, a.attention_workspace, B, T, C,
                          NH, s);
        matmul_forward(a.scratch, a.atty.at(l), p(ATTPROJW, l), p(ATTPROJB, l), BT, C, C, nullptr, false, s);
        fused_residual_layernorm_forward(a.residual2.at(l), a.ln2.at(l), a.ln2_mean.at(l), a.ln2_rstd.at(l),
                                         a.residual_in(l), a.scratch, p(LN2W, l), p(LN2B, l), BT, C, s);
        matmul_forward(a.fch_gelu.at(l), a.ln2.at(l), p(FCW, l), p(FCB, l), BT, C, 4 * C, a.fch.at(l),
                       shape.fuse_gelu, s);
        matmul_forward(a.scratch, a.fch_gelu.at(l), p(FCPROJW, l), p(FCPROJB, l), BT, 4 * C, C, nullptr, false, s);
        if (l + 1 < L) {  // the residual add and the next layer's ln1 in one kernel
            if (listener) listener->parameters_needed(l + 1);
            fused_residual_layernorm_forward(a.residual3.at(l), a.ln1.at(l + 1), a.ln1_mean.at(l + 1),
                                             a.ln1_rstd.at(l + 1), a.residual2.at(l), a.scratch, p(LN1W, l + 1),
                                             p(LN1B, l + 1), BT, C, s);
        } else {
            fused_residual_layernorm_forward(a.residual3.at(l), a.lnf, a.lnf_mean, a.lnf_rstd, a.residual2.at(l),
                                             a.scratch, p(LNFW), p(LNFB), BT, C, s);
        }
    }
}
