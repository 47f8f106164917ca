// generate(): prompts in, new tokens out, on an engine (llmc/inference/engine.cuh) made for their shape. What
// generate_gpt2cu and the trainer's samples both run.
//
// Cached (head size 64 or 128, every GPT-2 size): the prefill fills the KV cache as each layer makes K and V and
// leaves the logits of each prompt's last token; the first token is picked from them on the GPU; then one decode
// step per token (its graph replayed, the pick feeding the next step), launched up to kAhead steps ahead of the
// host, which reads each step's tokens from mapped memory. Recompute (any other head size): every token re-runs the
// prefill over the whole sequence so far at one fixed length (the padding after a sequence cannot change its
// earlier logits: causal attention), the host sampler picks from the logits at each sequence's last position.
// Both pick by the one rule (llmc/kernels/sampling/sampling_rule.h) with the caller's coins.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "llmc/inference/engine.cuh"
#include "llmc/inference/sampler.h"

struct GenerateRequest {
    std::vector<std::vector<int>> prompts;  // the engine's B prompts, token ids, at least one token each
    int max_new = 0;                        // new tokens per sequence, 1 .. the engine's max_new
    std::vector<float> coins;               // (max_new, B): sequence b's g-th coin at [g·B + b]; unused when greedy
    int stop_token = -1;                    // a sequence ends with it (-1: none, every sequence makes max_new)
    int pad_token = 0;                      // fills the batch after shorter sequences (never read by them)
    std::function<void(int b, int token)> on_token;  // each new token of a running sequence, in order
};

struct GenerateResult {
    std::vector<std::vector<int>> tokens;  // per sequence: its new tokens, the stop token included where it came
    long long generated = 0;               // their number
    double prefill_ms = 0;                 // to the first new tokens (prefill and first pick)
    double decode_ms = 0;                  // the rest
    int decode_steps = 0;
};

// The engine's shape for B prompts of up to `longest` tokens and max_new new tokens each (longest + max_new within
// the model's context). Recompute: every forward at one length, a multiple of 64 where the context allows, so each
// GEMM shape has one plan.
inline InferenceShape generation_shape(const GPT2Config& c, int B, int longest, int max_new) {
    InferenceShape s;
    s.B = B;
    s.max_new = max_new;
    s.cached = kv_cache_supported(c);
    s.max_T = longest + max_new;
    s.prefill_T = s.cached ? longest : std::min(c.max_seq_len, (longest + max_new + 63) / 64 * 64);
    return s;
}

namespace generate_detail {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Each sequence's new tokens and whether it has ended; the caller hears of each token as it comes.
struct Progress {
    const GenerateRequest& request;
    GenerateResult* out;
    std::vector<bool> done;
    Progress(const GenerateRequest& r, GenerateResult* o) : request(r), out(o), done(r.prompts.size(), false) {
        out->tokens.assign(r.prompts.size(), {});
    }
    void emit(int b, int token) {
        if (done[b]) return;
        out->tokens[b].push_back(token);
        out->generated++;
        if (request.on_token) request.on_token(b, token);
        done[b] = token == request.stop_token || (int)out->tokens[b].size() >= request.max_new;
    }
    bool all_done() const { return std::all_of(done.begin(), done.end(), [](bool d) { return d; }); }
};

inline void run_cached(InferenceEngine* e, const GenerateRequest& r, Progress* p) {
    const int B = e->shape.B;
    DecodeLoop& loop = e->loop;
    if (!loop.pick.greedy()) decode_loop_set_coins(&loop, r.coins, e->stream);
    constexpr int kAhead = 4;  // steps on their way while the host reads an earlier one's tokens
    cudaEvent_t done_ev[kAhead];
    for (cudaEvent_t& ev : done_ev) cudaCheck(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    const auto t0 = Clock::now();
    inference_prefill(e, r.prompts, r.pad_token);
    decode_loop_begin(e->step, &loop);
    cudaCheck(cudaEventRecord(done_ev[0], e->stream));
    int launched = 1, consumed = 0;  // token rows 0..launched-1 are on their way; rows < consumed are read
    auto t_first = t0;
    while (consumed < launched && !p->all_done()) {
        while (launched < r.max_new && launched - consumed < kAhead) {
            decode_loop_step(e->step, &loop);
            cudaCheck(cudaEventRecord(done_ev[launched % kAhead], e->stream));
            launched++;
        }
        cudaCheck(cudaEventSynchronize(done_ev[consumed % kAhead]));
        for (int b = 0; b < B; b++) p->emit(b, loop.tokens[(size_t)consumed * B + b]);
        if (consumed == 0) p->out->prefill_ms = ms_since(t0), t_first = Clock::now();
        consumed++;
    }
    p->out->decode_ms = consumed > 1 ? ms_since(t_first) : 0.0;
    p->out->decode_steps = consumed - 1;
    cudaCheck(cudaStreamSynchronize(e->stream));  // steps launched past the end
    for (cudaEvent_t& ev : done_ev) cudaCheck(cudaEventDestroy(ev));
}

inline void run_recompute(InferenceEngine* e, const GenerateRequest& r, Progress* p) {
    const int B = e->shape.B, V = e->config.vocab_size, Vp = e->config.padded_vocab_size;
    const PickParams& pick = e->options.pick;
    std::vector<std::vector<int>> seqs = r.prompts;
    std::vector<float> logits((size_t)B * Vp);
    for (int g = 0; g < r.max_new && !p->all_done(); g++) {
        const auto t0 = Clock::now();
        inference_prefill(e, seqs, r.pad_token, e->shape.prefill_T);
        cudaCheck(cudaStreamSynchronize(e->stream));  // the copy below runs on the legacy stream
        device_to_host_floats(logits.data(), e->step.s.logits, logits.size());
        for (int b = 0; b < B; b++) {
            if (p->done[b]) continue;
            const float coin = pick.greedy() ? 0.f : r.coins[(size_t)g * B + b];
            const int next = sample_token(logits.data() + (size_t)b * Vp, V, pick.temperature, pick.top_k, pick.top_p,
                                          coin);
            seqs[b].push_back(next);
            p->emit(b, next);
        }
        const double ms = ms_since(t0);
        if (g == 0) p->out->prefill_ms = ms;
        else p->out->decode_ms += ms, p->out->decode_steps++;
    }
}

}  // namespace generate_detail

inline GenerateResult generate(InferenceEngine* e, const GenerateRequest& r) {
    const InferenceShape& s = e->shape;
    int longest = 0;
    bool ok = (int)r.prompts.size() == s.B && r.max_new >= 1 && r.max_new <= s.max_new &&
              (e->options.pick.greedy() || r.coins.size() == (size_t)r.max_new * s.B);
    for (const auto& prompt : r.prompts) ok = ok && !prompt.empty(), longest = std::max(longest, (int)prompt.size());
    ok = ok && (s.cached ? longest <= s.prefill_T : longest + r.max_new - 1 <= s.prefill_T);
    if (!ok) {
        fprintf(stderr, "error: generate: %zu prompts of 1..%d tokens (the engine's B %d, prompts up to %d), %d new "
                "tokens (at most %d), %zu coins (max_new x B when sampling)\n", r.prompts.size(), longest, s.B,
                s.cached ? s.prefill_T : s.prefill_T - r.max_new + 1, r.max_new, s.max_new, r.coins.size());
        exit(EXIT_FAILURE);
    }
    GenerateResult out;
    generate_detail::Progress progress(r, &out);
    if (s.cached) generate_detail::run_cached(e, r, &progress);
    else generate_detail::run_recompute(e, r, &progress);
    return out;
}
