// The engine a serving scheduler (llmc/serving/scheduler.h) drives, as a small interface: sequences live in slots
// of a KV cache; a slot's prompt is prefilled (whole, or in chunks where the engine can), then every decoding slot
// advances one token per decode step, each token picked by its own request's rule and coin. A decode step is begun
// and ended apart, so that the scheduler's host work (delivering the last step's tokens, new prompts) overlaps the
// step on the GPU; a slot's input token is the one the engine picked for it last, so the next step needs nothing
// back from the host. The GPU engine (llmc/serving/gpu_engine.cuh) implements it over llmc/inference; the tests'
// fake engine (tests/serving/serve_fake_engine.h) computes a token from the slot's history, so the scheduler is tested on
// the CPU. Host-only.
#pragma once

#include <deque>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "llmc/kernels/sampling/sampling_rule.h"

// How one token is chosen: the sampling rule's parameters (llmc/kernels/sampling/sampling_rule.h), this token's coin (the
// request's g-th uniform number from Rng(seed), as generate_gpt2cu draws them; unused when greedy) and what to
// report of the distribution.
struct TokenPick {
    PickParams params{0.f, 0, 1.f};  // greedy unless set
    float coin = 0.f;
    int top_logprobs = -1;  // -1: no logprobs; 0: the chosen token's; N: also the N most likely tokens
};

// A chosen token, and when asked, its log-probability under the model (log-softmax of the raw logits: before
// temperature, top-k and top-p) and the N most likely tokens' (highest first). token -1: the engine failed on this
// sequence (non-finite logits, say); the scheduler ends it with an error, the others go on.
struct PickedToken {
    int token = -1;
    float logprob = 0.f;
    std::vector<std::pair<int, float>> top;
};

// One row of a decode step: the slot's input is the token the engine picked for it last (its prompt's first new
// token, or the previous step's), at `position` (the cache holds positions [0, position) of its sequence, and the
// step appends this one); `pick` says how to pick the next.
struct DecodeSlot {
    int slot = 0;
    int position = 0;
    TokenPick pick;
};

// A new sequence's whole prompt for prefill_whole: its slot, its tokens, how to pick its first new token.
struct PrefillPrompt {
    int slot = 0;
    const int* tokens = nullptr;
    int n = 0;
    TokenPick pick;
};

class ServeEngine {
public:
    virtual ~ServeEngine() = default;
    virtual int slots() const = 0;       // sequences held at once
    virtual int context() const = 0;     // positions per slot: prompt + generated tokens
    virtual int vocab_size() const = 0;  // token ids 0..V-1
    // Prompt tokens one prefill call takes at most, in chunks that continue a slot's sequence (a prompt up to this
    // long may also come whole through prefill_whole); 0: prompts only whole, in one call from position 0.
    virtual int prefill_chunk() const = 0;
    // Positions [start, start + n) of the slot's sequence from tokens[0..n); the slot holds [0, start) of it (start
    // 0: a new sequence, whatever the slot held before). last (the prompt's final chunk): pick the first new token
    // from the logits of position start + n - 1, else the returned token is -1 and means nothing.
    virtual PickedToken prefill(int slot, const int* tokens, int start, int n, const TokenPick* last) = 0;
    // Whole prompts one prefill_whole call takes, padded to the longest.
    virtual int prefill_rows() const { return 1; }
    // 1 .. prefill_rows() whole prompts (distinct slots) as new sequences; out[i] is prompts[i]'s first new token.
    virtual void prefill_whole(const std::vector<PrefillPrompt>& prompts, std::vector<PickedToken>* out) {
        out->clear();
        for (const PrefillPrompt& p : prompts) out->push_back(prefill(p.slot, p.tokens, 0, p.n, &p.pick));
    }
    // Whole prompts begun and ended apart, as decode steps are: prefill_whole_begin queues the prompts' forward and
    // their first picks, each written as its slot's next input, so a decode step may take the slots before the host
    // has their first tokens (a row at position n, the prompt's length); prefill_whole_end waits for the oldest begun
    // and gives its tokens as prefill_whole would. Up to prefills_in_flight() begun before the oldest is ended; other
    // calls (decode steps, chunks, releases) may come between, and are ordered after it. The default runs
    // prefill_whole at begin and keeps its tokens.
    virtual int prefills_in_flight() const { return 1; }
    virtual void prefill_whole_begin(const std::vector<PrefillPrompt>& prompts) {
        std::vector<PickedToken> out;
        prefill_whole(prompts, &out);
        begun_.push_back(std::move(out));
    }
    virtual void prefill_whole_end(std::vector<PickedToken>* out) {
        if (begun_.empty()) throw std::logic_error("prefill_whole_end: no prefill begun");
        *out = std::move(begun_.front());
        begun_.pop_front();
    }
    // Queues one step over the given slots (any subset, any order) and returns, where the engine can, before it is
    // done; decode_end waits for it: out[i] is batch[i]'s next token. Between the two the scheduler may release slots
    // and prefill new sequences into them (the engine orders that work after the step; a released slot's row of the
    // step is then computed for nothing). Up to steps_in_flight() steps may be begun before the first is ended (a
    // row's input is then the token the slot's row in the step before will pick); decode_end ends the oldest.
    virtual void decode_begin(const std::vector<DecodeSlot>& batch) = 0;
    virtual void decode_end(std::vector<PickedToken>* out) = 0;
    virtual int steps_in_flight() const { return 1; }
    // The slot's sequence has ended; it is free for a new one. Positions [0, keep) stay as they are until the slot
    // is given to a new sequence (a prefix cache holds them: llmc/serving/prefix_cache.h); the rest is free.
    virtual void release(int slot, int keep) {}
    // For a prefix cache (llmc/serving/prefix_cache.h): whether copy_prefix works, and the copy itself, queued in
    // order with the other calls: slot `to` (free, about to take a new sequence) starts as positions [0, n) of
    // `from` (a running sequence's, or what a free slot still holds; from == to: the slot keeps its own first n),
    // and prefill continues it from position n.
    virtual bool copies_prefix() const { return false; }
    virtual void copy_prefix(int from, int to, int n) {}
    // What the engine says of its decode steps when the server stops (the GPU engine: their time on the GPU and the
    // bandwidth it comes to); empty: nothing. After the last decode_end.
    virtual std::string decode_report() const { return ""; }
    // The decode steps' time on the device so far, ms (read on the engine's thread after a decode_end; 0: not
    // measured): beside the host's time in the decode calls, it says whether a slower step is the GPU's or the host's.
    virtual double decode_device_ms() const { return 0; }

private:
    std::deque<std::vector<PickedToken>> begun_;  // the default prefill_whole_begin's tokens, oldest first
};
