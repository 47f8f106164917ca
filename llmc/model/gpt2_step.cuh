// The training model's passes: the forward with the classifier and loss, the backward, and both as one unit whose
// kernels are replayed from CUDA Graphs (llmc/model/step_graph.h). Listeners (the optimizer's gradient exchange with
// several GPUs) are passed per call; their calls that queue work run eagerly between the graphs.
#pragma once

#include <vector>

#include "llmc/kernels/fused_classifier.cuh"
#include "llmc/model/gpt2.cuh"
#include "llmc/model/gpt2_backward.cuh"
#include "llmc/model/gpt2_forward.cuh"

namespace gpt2_detail {

inline void check_forward_shape(const GPT2* m, int B, int T, const char* what) {
    if (!m->device_block || B < 1 || T < 1 || B > m->B || T > m->T) {
        fprintf(stderr, "error: %s: B=%d T=%d must be within the allocated B=%d T=%d\n", what, B, T, m->B, m->T);
        exit(EXIT_FAILURE);
    }
}

inline void upload_tokens(GPT2* m, mem::Id id, const int* host, int B, int T, const char* what) {
    const int V = m->config.vocab_size;
    for (int i = 0; i < B * T; i++) {
        if (host[i] < 0 || host[i] >= V) {
            fprintf(stderr, "error: gpt2_forward: %s token %d at position %d is out of range [0, %d)\n", what, host[i],
                    i, V);
            exit(EXIT_FAILURE);
        }
    }
    cudaCheck(cudaMemcpyAsync(m->memory[id], host, (size_t)B * T * sizeof(int), cudaMemcpyHostToDevice, m->stream));
}

// Whether a forward over BT rows casts the FP8 weight copies: an FP8 pass, and the parameters changed since the
// last cast (the upload, the optimizer's update); every micro-step of a step but the first reuses them.
inline bool casts_fp8_weights(const GPT2* m, int BT) {
    return gpt2_fp8_for_rows(&m->fp8_layers, BT) && !m->fp8_weights_current;
}

// The forward's kernels on m->stream (tokens already on the device), through the classifier when with_targets
// (the logits become dlogits, the losses land in mem::Losses). Queues only: no host synchronisation.
inline void forward_enqueue(GPT2* m, int B, int T, bool with_targets, ForwardListener* listener) {
    const GPT2Config& c = m->config;
    const int C = c.channels, V = c.vocab_size, Vp = c.padded_vocab_size, BT = B * T;
    cudaStream_t s = m->stream;
    ForwardShape shape{B, T, m->backend, m->fuse_gelu, m->fp8_layers.on() ? &m->fp8_layers : nullptr};
    shape.cast_fp8_weights = casts_fp8_weights(m, BT);
    gpt2_forward_layers(c, m->params, m->acts, buf<int>(m, mem::Inputs), shape, s, listener);
    const Fp8Layers* fp8 = gpt2_fp8_for_rows(shape.fp8, BT);
    floatX* logits = buf<floatX>(m, mem::Logits);
    if (fp8 && fp8->lm_head())
        gpt2_fp8_lm_head_forward(*fp8, logits, m->acts.lnf, m->params(WTE), BT, s, true, shape.cast_fp8_weights);
    else
        matmul_forward(logits, m->acts.lnf, m->params(WTE), nullptr, BT, C, Vp, nullptr, false, s);
    if (fp8) m->fp8_weights_current = true;
    if (with_targets) {
        fused_classifier(logits, buf<float>(m, mem::Losses), buf<int>(m, mem::Targets), BT, V, Vp,
                         1.0f / (float)BT, s);
    }
}

// The last forward's per-position losses (waits for the stream).
inline void read_losses(GPT2* m, int BT, std::vector<float>* losses) {
    losses->resize((size_t)BT);
    cudaCheck(cudaMemcpyAsync(losses->data(), m->memory[mem::Losses], BT * sizeof(float), cudaMemcpyDeviceToHost,
                              m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
}

// The mean of the last forward's losses (waits for the stream).
inline float read_mean_loss(GPT2* m, int BT) {
    std::vector<float> losses;
    read_losses(m, BT, &losses);
    double sum = 0.0;
    for (int i = 0; i < BT; i++) sum += losses[i];
    return (float)(sum / BT);
}

}  // namespace gpt2_detail

// Forward pass on host token arrays (B*T each, B <= allocated B, T <= allocated T). Returns the mean loss,
// or NAN when targets is null (then the logits stay readable through gpt2_logits_to_host). With targets the
// logits are replaced by the gradient of the mean loss (the fused classifier), ready for gpt2_backward.
inline float gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T,
                          ForwardListener* listener = nullptr) {
    using namespace gpt2_detail;
    check_forward_shape(m, B, T, "gpt2_forward");
    upload_tokens(m, mem::Inputs, inputs, B, T, "input");
    if (targets) upload_tokens(m, mem::Targets, targets, B, T, "target");
    forward_enqueue(m, B, T, targets != nullptr, listener);
    m->last_B = B;
    m->last_T = T;
    m->logits_valid = !targets;
    m->dlogits_ready = targets != nullptr;
    m->last_loss = targets ? read_mean_loss(m, B * T) : NAN;
    return m->last_loss;
}

// The last gpt2_forward's loss at each of its B*T positions (-log p of the target there), for evals that score
// some positions only (HellaSwag's endings). Needs a forward with targets not yet consumed by a backward.
inline void gpt2_last_losses(GPT2* m, std::vector<float>* losses) {
    if (!m->dlogits_ready) {
        fprintf(stderr, "error: gpt2_last_losses: needs a preceding gpt2_forward with targets\n");
        exit(EXIT_FAILURE);
    }
    gpt2_detail::read_losses(m, m->last_B * m->last_T, losses);
}

// Zeroes the gradients the model holds (with ZeRO-2 only wte's, wpe's and lnf's: the exchange zeroes its slots as it
// hands them to the backward).
inline void gpt2_zero_grad(GPT2* m) {
    cudaCheck(cudaMemsetAsync(m->grads.base, 0, m->memory_table[mem::Grads].elems * sizeof(floatX), m->stream));
}

// Accumulates the gradient of loss_scale · (mean loss of the last forward) into the gradients.
// Must follow a gpt2_forward with targets (its inputs and targets are still on the device).
inline void gpt2_backward(GPT2* m, float loss_scale, BackwardListener* listener = nullptr) {
    if (!m->dlogits_ready) {
        fprintf(stderr, "error: gpt2_backward: needs a preceding gpt2_forward with targets\n");
        exit(EXIT_FAILURE);
    }
    if (!m->grad_layout.flat() && (!listener || m->grads.slices.empty())) {
        fprintf(stderr, "error: gpt2_backward: the layers' gradients live in the exchange's slots (ZeRO-2): the "
                        "backward needs the exchange as its listener\n");
        exit(EXIT_FAILURE);
    }
    m->dlogits_ready = false;
    gpt2_detail::backward_enqueue(m, m->last_B, m->last_T, loss_scale, listener);
    if (gpt2_fp8_for_rows(&m->fp8_layers, m->last_B * m->last_T) && m->fp8_layers.delayed.on())
        m->fp8_layers.delayed.updates++;  // the backward updated the amax histories
    cudaCheck(cudaStreamSynchronize(m->stream));
}

namespace gpt2_detail {

// One listener call, as the passes make it.
inline void make_call(const StepGraphCall& c, ForwardListener* fwd, BackwardListener* bwd) {
    switch (c.hook) {
        case StepHook::ParametersNeeded: fwd->parameters_needed(c.layer); break;
        case StepHook::QkvReady: fwd->qkv_ready(c.layer, c.qkv); break;
        case StepHook::LayerBegins: bwd->layer_begins(c.layer); break;
        case StepHook::GradientsReady: bwd->gradients_ready(c.layer); break;
    }
}

// Whether the listener of the call's pass may queue work at it (ForwardListener::queues_work).
inline bool call_queues_work(StepHook hook, int layer, const ForwardListener* fwd, const BackwardListener* bwd) {
    return hook == StepHook::ParametersNeeded || hook == StepHook::QkvReady ? fwd->queues_work(hook, layer)
                                                                             : bwd->queues_work(hook, layer);
}

// Stands between the passes and their listeners while a micro-step is captured: before a call that may queue work
// it ends the capture, instantiates and launches what was captured, makes the call eagerly and begins the next
// capture; a call that queues nothing is made inside the capture. Every call is recorded for the replays.
struct StepRecorder : ForwardListener, BackwardListener {
    cudaStream_t stream;
    StepGraph* g;
    ForwardListener* fwd;
    BackwardListener* bwd;

    void begin() { cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal)); }
    int end() {  // the segment captured since begin(), launched
        g->segments.push_back(end_capture_instantiate(stream));
        if (g->segments.back()) cudaCheck(cudaGraphLaunch(g->segments.back(), stream));
        return (int)g->segments.size() - 1;
    }
    void call(StepHook hook, int layer, const floatX* qkv) {
        const bool queues = call_queues_work(hook, layer, fwd, bwd);
        const StepGraphCall c{hook, layer, qkv, queues ? end() : -1};
        g->calls.push_back(c);
        make_call(c, fwd, bwd);
        if (queues) begin();
    }
    void parameters_needed(int layer) override { call(StepHook::ParametersNeeded, layer, nullptr); }
    void qkv_ready(int layer, const floatX* qkv) override { call(StepHook::QkvReady, layer, qkv); }
    void layer_begins(int layer) override { call(StepHook::LayerBegins, layer, nullptr); }
    void gradients_ready(int layer) override { call(StepHook::GradientsReady, layer, nullptr); }
};

// The graph for this key: found, or a new one (the oldest keys dropped when kMaxStepGraphs are kept).
inline StepGraph& step_graph_for(GPT2* m, int B, int T, float loss_scale, bool fwd, bool bwd, bool casts,
                                 bool calibrated) {
    for (StepGraph& g : m->graphs)
        if (g.same_key(B, T, loss_scale, fwd, bwd, casts, calibrated)) return g;
    if (m->graphs.size() >= kMaxStepGraphs) {
        for (StepGraph& g : m->graphs) step_graph_free(&g);
        m->graphs.clear();
    }
    StepGraph g;
    g.B = B, g.T = T, g.loss_scale = loss_scale, g.forward_listens = fwd, g.backward_listens = bwd;
    g.casts_fp8_weights = casts, g.fp8_calibrated = calibrated;
    m->graphs.push_back(g);
    return m->graphs.back();
}

}  // namespace gpt2_detail

// gpt2_forward with targets, then gpt2_backward(loss_scale), as one unit: with use_graphs, the second call with
// the same key (B, T, loss_scale, which passes have a listener) captures the kernels into CUDA Graphs and every later
// call replays them (llmc/model/step_graph.h: one launch instead of one per kernel with no listener; with listeners, one graph
// between two calls that queue work, which are made eagerly). Same kernels, same order, same bits. Returns the mean
// loss, read once at the end (no host wait between the forward and the backward).
inline float gpt2_forward_backward(GPT2* m, const int* inputs, const int* targets, int B, int T, float loss_scale,
                                   ForwardListener* forward_listener = nullptr,
                                   BackwardListener* backward_listener = nullptr) {
    using namespace gpt2_detail;
    check_forward_shape(m, B, T, "gpt2_forward_backward");
    if (!m->grad_layout.flat() && (!backward_listener || m->grads.slices.empty())) {
        fprintf(stderr, "error: gpt2_forward_backward: the layers' gradients live in the exchange's slots (ZeRO-2): "
                        "the backward needs the exchange as its listener\n");
        exit(EXIT_FAILURE);
    }
    upload_tokens(m, mem::Inputs, inputs, B, T, "input");
    upload_tokens(m, mem::Targets, targets, B, T, "target");
    StepGraph* g = nullptr;
    if (m->use_graphs && m->stream != 0)
        g = &step_graph_for(m, B, T, loss_scale, forward_listener != nullptr, backward_listener != nullptr,
                            casts_fp8_weights(m, B * T), m->fp8_layers.delayed.calibrated());
    if (g && g->captured) {
        for (const StepGraphCall& c : g->calls) {
            const bool queues = call_queues_work(c.hook, c.layer, forward_listener, backward_listener);
            if (queues != (c.segment >= 0)) {  // a call captured as queuing nothing would now queue work: stop
                fprintf(stderr, "error: gpt2_forward_backward: the listener's call %d at layer %d %s work now but "
                                "did not when the step was captured\n", (int)c.hook, c.layer,
                        queues ? "queues" : "queues no");
                exit(EXIT_FAILURE);
            }
            if (c.segment >= 0 && g->segments[(size_t)c.segment])
                cudaCheck(cudaGraphLaunch(g->segments[(size_t)c.segment], m->stream));
            make_call(c, forward_listener, backward_listener);
        }
        if (g->segments.back()) cudaCheck(cudaGraphLaunch(g->segments.back(), m->stream));
        g->replays++;
    } else if (g && g->seen) {
        StepRecorder r;
        r.stream = m->stream, r.g = g, r.fwd = forward_listener, r.bwd = backward_listener;
        r.begin();
        forward_enqueue(m, B, T, true, forward_listener ? &r : nullptr);
        backward_enqueue(m, B, T, loss_scale, backward_listener ? &r : nullptr);
        r.end();
        g->captured = true;
    } else {
        forward_enqueue(m, B, T, true, forward_listener);
        backward_enqueue(m, B, T, loss_scale, backward_listener);
        if (g) g->seen = true;
    }
    if (gpt2_fp8_for_rows(&m->fp8_layers, B * T)) {
        m->fp8_weights_current = true;  // the replayed graph cast them too
        if (m->fp8_layers.delayed.on()) m->fp8_layers.delayed.updates++;  // and updated the amax histories
    }
    m->last_B = B;
    m->last_T = T;
    m->logits_valid = false;
    m->dlogits_ready = false;
    m->last_loss = read_mean_loss(m, B * T);
    const std::string amax_check = gpt2_fp8_check_result(m->fp8_layers, m->stream);
    if (!amax_check.empty()) {
        fprintf(stderr, "error: LLMC_FP8_CHECK_AMAX: %s\n", amax_check.c_str());
        exit(EXIT_FAILURE);
    }
    return m->last_loss;
}

// How many graphs were captured and how many micro-steps replayed them (the trainer's last line).
inline void gpt2_graph_counts(const GPT2* m, int* graphs, int* replays) {
    *graphs = 0, *replays = 0;
    for (const StepGraph& g : m->graphs) *graphs += g.captured ? 1 : 0, *replays += g.replays;
}
