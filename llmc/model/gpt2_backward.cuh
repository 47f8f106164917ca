// GPT-2's backward on the training model's buffers: the classifier, then the layers from the last to the first
// (the same modules as the forward, in reverse), then the encoder. Each layer's parameter gradients are final when
// its iteration ends, and the backward says so to a BackwardListener (the optimizer's gradient exchange sends them
// while the layers below are still in their backward).
#pragma once

#include "llmc/kernels/attention/attention.cuh"
#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/layernorm_backward.cuh"
#include "llmc/kernels/matmul/matmul.cuh"
#include "llmc/kernels/matmul/matmul_hopper_dgelu.cuh"
#include "llmc/model/gpt2.cuh"

// Told as the backward queues its kernels (on the model's stream; nothing has run yet).
struct BackwardListener {
    virtual ~BackwardListener() = default;
    // Layer `layer`'s parameter gradients are queued in full (L-1 down to 0), then -1: wte, wpe and lnf's.
    virtual void gradients_ready(int layer) = 0;
    // Before the backward queues anything that writes layer `layer`'s gradients (L-1 down to 0), and once with
    // layer = L before the classifier's and lnf's (the first gradients it writes). Layer l also writes layer l-1's
    // fcproj bias gradient (its first LayerNorm backward sums it), and the lnf backward layer L-1's: ZeRO-2's exchange
    // gives the buckets of layer and layer - 1 their gradient slots here.
    virtual void layer_begins(int layer) {}
    // As ForwardListener::queues_work (a listener of both passes overrides both with one function).
    virtual bool queues_work(StepHook hook, int layer) const { return true; }
};

namespace gpt2_detail {

// The backward's kernels on m->stream, after a forward with targets over the same B, T (the logits buffer holds
// dlogits of the mean loss; loss_scale enters as the classifier GEMMs' alpha). Queues only.
inline void backward_enqueue(GPT2* m, int B, int T, float loss_scale, BackwardListener* listener) {
    const GPT2Config& c = m->config;
    const int L = c.num_layers, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size;
    const int BT = B * T;
    cudaStream_t s = m->stream;
    const GPT2Params& p = m->params;
    const GPT2Params& g = m->grads;
    const ForwardActivations& a = m->acts;
    floatX* dresidual = buf<floatX>(m, mem::DResidual);
    floatX* scratch = buf<floatX>(m, mem::ScratchBTC);
    floatX* scratch4 = buf<floatX>(m, mem::ScratchBT4C);
    // the logits buffer is dead once the classifier's backward has read dlogits: dqkv, the attention's workspace
    // and the reduction partials live there (gpt2_memory.cuh)
    floatX* dqkv = buf<floatX>(m, mem::Logits);
    void* attn_ws = dqkv + (size_t)BT * 3 * C;
    float* reduce = (float*)(buf<char>(m, mem::Logits) + gpt2_backward_partials_offset(c, m->B, m->T, m->backend));
    const bool qkv_bias_in_attention = attention_backward_sums_qkv_bias(m->backend, C / NH);
    // the forward's FP8 choice: the blocks' linear layers' gradients in FP8 too
    const Fp8Layers* fp8 = gpt2_fp8_for_rows(&m->fp8_layers, BT);
    if (m->fp8 && !fp8) {  // an FP8 run keeps one ln1, ln2 and GELU output for every layer (gpt2_memory.cuh)
        fprintf(stderr, "error: backward: an FP8 run's backward over %d rows, which its FP8 state cannot take\n", BT);
        exit(EXIT_FAILURE);
    }
    // a linear layer's backward (dinp overwritten, dweight and dbias accumulated), in FP8 or in floatX
    // dout_amax_taken: dout's producer has folded its amax into the slot (the LayerNorm backwards for fcproj's and
    // attproj's, the GELU backward for fc's, the attention backward for qkv's)
    // (FP8: inp's transpose is the one its forward cast kept, so inp itself is not read, but by LLMC_FP8_RECAST's
    // attproj and fcproj; dout_gelu_in: see gpt2_fp8_backward)
    auto linear = [&](int l, Fp8Linear k, floatX* dinp, ParamTensor w, floatX* dbias, const floatX* dout,
                      const floatX* inp, int in, int out_ch, bool dout_amax_taken = false,
                      const floatX* dout_gelu_in = nullptr) {
        if (fp8) {  // fcproj's input is the GELU's: fch
            return gpt2_fp8_backward(*fp8, l, k, dinp, g(w, l), dbias, dout, BT, reduce, s, dout_amax_taken,
                                     dout_gelu_in, k == kFp8FcProj ? a.fch.at(l) : inp, k == kFp8FcProj);
        }
        matmul_backward(dinp, g(w, l), dbias, dout, inp, p(w, l), BT, in, out_ch, reduce, nullptr, false, 1.0f, s);
    };
    // where a LayerNorm backward folds the amax of the residual gradient it leaves: linear k's output gradient
    auto dout_amax = [&](int l, Fp8Linear k) { return fp8 ? gpt2_fp8_amax_slot(*fp8, l, k, kFp8Dout) : nullptr; };
    // delayed scaling on and calibrated: fc's output gradient is cast as the GELU backward computes it (no bf16 dfch)
    const bool fp8_delayed = fp8 && fp8->delayed.calibrated();

    if (listener) listener->layer_begins(L);
    // Classifier (no bias: no partials, which would overwrite dlogits).
    matmul_backward(scratch, g(WTE), nullptr, buf<floatX>(m, mem::Logits), a.lnf, p(WTE), BT, C, Vp, nullptr, nullptr,
                    false, loss_scale, s);
    cudaCheck(cudaMemsetAsync(dresidual, 0, (size_t)BT * C * sizeof(floatX), s));
    // Each LayerNorm backward also sums its dinp over rows: the bias gradient of the projection (fcproj or
    // attproj) whose output gradient that residual stream is, so those two GEMMs need no bias pass.
    layernorm_backward(dresidual, g(LNFW), g(LNFB), scratch, a.residual3.at(L - 1), p(LNFW), a.lnf_mean, a.lnf_rstd,
                       BT, C, reduce, s, g(FCPROJB, L - 1), dout_amax(L - 1, kFp8FcProj));
    for (int l = L - 1; l >= 0; l--) {
        if (listener) listener->layer_begins(l);
        const floatX* residual = a.residual_in(l);
        floatX* fch_gelu = a.fch_gelu.at(l);
        // (FP8 runs cast fcproj's input from fch, taking the GELU as they read it: nothing to recompute)
        if (m->recompute >= 1 && !m->hopper_dgelu && !fp8) gelu_forward(fch_gelu, a.fch.at(l), (size_t)BT * 4 * C, s);
        if (m->recompute >= 2 && !fp8) {  // same kernel, same inputs: bit-identical to the forward's outputs
            layernorm_forward(a.ln1.at(l), a.ln1_mean.at(l), a.ln1_rstd.at(l), residual, p(LN1W, l), p(LN1B, l), BT,
                              C, s);
            layernorm_forward(a.ln2.at(l), a.ln2_mean.at(l), a.ln2_rstd.at(l), a.residual2.at(l), p(LN2W, l),
                              p(LN2B, l), BT, C, s);
        }
        // MLP: dresidual is d(residual3) here.
        floatX* dfch = scratch4;
        floatX* fc_dbias = g(FCB, l);
        bool dfch_amax_taken = false;
        // delayed scaling with LLMC_FP8_RECAST: fcproj and fc together, fcproj's input cast again by fc's output
        // gradient's cast, which reads fch anyway (gpt2_fp8_mlp_backward)
        const bool fp8_mlp = fp8_delayed && fp8->recast && !fp8->blocks();
        if (fp8_mlp) {
            gpt2_fp8_mlp_backward(*fp8, l, dfch, g(FCPROJW, l), scratch, g(FCW, l), fc_dbias, dresidual,
                                  a.fch.at(l), BT, reduce, s);
        } else if (m->hopper_dgelu) {
            // dfch, fc's bias gradient summed in the same kernel (so none in fc's GEMM) and, under recompute, the
            // GELU output fcproj's weight gradient reads (so no pass of its own over fch)
            matmul_backward_dgelu_hopper(dfch, reduce, dresidual, p(FCPROJW, l), a.fch.at(l), BT, 4 * C, C, 1.0f, s,
                                         m->recompute >= 1 ? fch_gelu : nullptr);
            matmul_dgelu_bias_grad(fc_dbias, reduce, BT, 4 * C, 1.0f, s);
            fc_dbias = nullptr;
        } else if (fp8) {  // fcproj's two gradients, then the GELU's backward on dfch
            linear(l, kFp8FcProj, dfch, FCPROJW, nullptr, dresidual, nullptr, 4 * C, C, /*dout_amax_taken=*/true);
            if (!fp8_delayed) {
                gelu_backward_inplace(dfch, a.fch.at(l), (size_t)BT * 4 * C, s,
                                      gpt2_fp8_amax_slot(*fp8, l, kFp8Fc, kFp8Dout));
                dfch_amax_taken = true;
            }
        } else {
            matmul_backward_input(dfch, dresidual, p(FCPROJW, l), BT, 4 * C, C, a.fch.at(l), m->fuse_gelu, 1.0f, s);
        }
        // after dfch: the Hopper kernel may have written fch_gelu (dfch has a buffer of its own, scratch4)
        if (!fp8) matmul_backward_weight(g(FCPROJW, l), nullptr, dresidual, fch_gelu, BT, 4 * C, C, reduce, 1.0f, s);
        if (!fp8_mlp)
            linear(l, kFp8Fc, scratch, FCW, fc_dbias, dfch, a.ln2.at(l), C, 4 * C, dfch_amax_taken,
                   fp8_delayed ? a.fch.at(l) : nullptr);
        layernorm_backward(dresidual, g(LN2W, l), g(LN2B, l), scratch, a.residual2.at(l), p(LN2W, l),
                           a.ln2_mean.at(l), a.ln2_rstd.at(l), BT, C, reduce, s, g(ATTPROJB, l),
                           dout_amax(l, kFp8AttProj));
        // Attention: dresidual is now d(residual2).
        linear(l, kFp8AttProj, scratch, ATTPROJW, nullptr, dresidual, a.atty.at(l), C, C, /*dout_amax_taken=*/true);
        // on Hopper the attention backward also sums dqkv's columns (the qkv bias gradient), so its GEMM takes none
        attention_backward(m->backend, dqkv, scratch, a.qkv.at(l), a.atty.at(l), a.attention_saved.at(l), attn_ws, B,
                           T, C, NH, s, qkv_bias_in_attention ? reduce : nullptr, dout_amax(l, kFp8Qkv));
        if (qkv_bias_in_attention)
            column_sum_finish(g(QKVB, l), reduce, attention_qkv_bias_partial_rows(B, T), 3 * C, 1.0f, s);
        linear(l, kFp8Qkv, scratch, QKVW, qkv_bias_in_attention ? nullptr : g(QKVB, l), dqkv, a.ln1.at(l), C, 3 * C,
               /*dout_amax_taken=*/true);
        layernorm_backward(dresidual, g(LN1W, l), g(LN1B, l), scratch, residual, p(LN1W, l), a.ln1_mean.at(l),
                           a.ln1_rstd.at(l), BT, C, reduce, s, l > 0 ? g(FCPROJB, l - 1) : nullptr,
                           l > 0 ? dout_amax(l - 1, kFp8FcProj) : nullptr);
        // layer l's gradients are final (its fcproj bias was written by the LayerNorm backward above it)
        if (listener) listener->gradients_ready(l);
    }
    if (fp8 && fp8->delayed.on()) gpt2_fp8_delayed_update(*fp8, s);  // this micro-step's amaxes into the histories
    encoder_backward(g(WTE), g(WPE), dresidual, buf<int>(m, mem::Inputs), B, T, C, c.vocab_size, m->encoder_scratch,
                     s);
    if (listener) listener->gradients_ready(-1);
}

}  // namespace gpt2_detail
