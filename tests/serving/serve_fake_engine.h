// A deterministic ServeEngine (llmc/serving/serve_engine.h) for the scheduler's and the server's tests and for
// tests/serving/serve_mock: a slot's next token is a hash of its whole sequence so far (prompt and generated tokens, as the
// engine was given them), its pick's rule and its coin. So a request's tokens do not depend on the batch around it,
// and any mistake of the scheduler's (a token at the wrong position, a chunk out of order or skipped, two sequences
// in one slot, a slot not reset) changes them. The engine also checks the protocol and records every call:
//   prefill: a slot in range; start 0 (a new sequence) or the slot's length (a continuation, only where chunks are
//   taken); 1..chunk tokens (whole prompts from 0 otherwise; prefill_whole: prompts of up to chunk tokens); ids
//   below V;
//   decode_begin: distinct occupied slots whose prompt is in, each at exactly its length, the input the slot's last
//   pick; fewer than in_flight steps in flight; decode_end: a step in flight (the oldest ends); prefill_whole_begin:
//   fewer than prefills_in_flight begun and not ended (a begun call's first picks are the slots' inputs at once, its
//   tokens come at prefill_whole_end, oldest first); release: an occupied slot.
// A violation is recorded and thrown (the scheduler ends the sequences concerned with an error), so tests see both.
// Optional delays (per decode step, per prefilled token) give the mock server a GPU's rhythm: a step's time passes
// between decode_begin and decode_end, as a GPU's would, so the host's work between them overlaps it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "llmc/serving/serve_engine.h"

struct FakeEngineOptions {
    int slots = 4;
    int context = 256;
    int vocab = 1000;
    int chunk = 0;                // prefill_chunk(): 0 = whole prompts only
    int prefill_rows = 1;         // whole prompts per prefill_whole call
    int eot = -1;                 // with eot_every: this token comes once in about eot_every picks
    int eot_every = 0;
    int step_us = 0;              // sleep per decode step
    int prefill_us_per_token = 0; // sleep per prefilled token
    int in_flight = 1;            // steps_in_flight(): decode steps begun before the first is ended
    int fail_begin_at = 0;        // the n-th decode_begin throws (as a GPU error would; 0: never)
    int fail_end_at = 0;          // the n-th decode_end throws, its step gone
    int prefills_in_flight = 2;   // prefill_whole_begin calls before the oldest is ended
};

struct FakePrefill {
    int slot, start, n;
    bool last;
};

class FakeEngine : public ServeEngine {
public:
    explicit FakeEngine(FakeEngineOptions o = {})
        : o_(o), hist_(o.slots), kept_(o.slots), last_(o.slots, 0), live_(o.slots, false) {}

    // The rule: a hash of the sequence, the rule's parameters and the coin (the coin only when sampling).
    static uint64_t mix(uint64_t h) {
        h ^= h >> 31;
        h *= 0x7fb5d329728ea185ull;
        h ^= h >> 27;
        h *= 0x81dadef4bc2dd44dull;
        return h ^ (h >> 33);
    }
    static PickedToken pick(const std::vector<int>& seq, const TokenPick& p, int V, int eot, int eot_every) {
        uint64_t h = 1469598103934665603ull;
        for (int t : seq) h = (h ^ (uint64_t)(uint32_t)t) * 1099511628211ull;
        h = mix(h);
        if (!p.params.greedy()) {
            h = mix(h ^ (uint64_t)(p.coin * 16777216.0f) * 0x9e3779b97f4a7c15ull);
            h = mix(h ^ ((uint64_t)(p.params.temperature * 1000.f) << 20) ^ ((uint64_t)p.params.top_k << 4) ^
                    ((uint64_t)(p.params.top_p * 1000.f) << 44));
        }
        PickedToken t;
        t.token = (int)(h % (uint64_t)V);
        if (eot >= 0 && eot_every > 0 && (h >> 40) % (uint64_t)eot_every == 0) t.token = eot;
        if (p.top_logprobs >= 0) {
            t.logprob = -(float)((h >> 8) % 1000) / 100.f;
            for (int i = 0; i < p.top_logprobs; i++)
                t.top.emplace_back(i == 0 ? t.token : (t.token + i) % V, t.logprob - (float)i);
        }
        return t;
    }
    // What a request alone would get: the prompt, then each token from the sequence so far (tests compare).
    std::vector<int> alone(const std::vector<int>& prompt, int max_tokens, TokenPick p, uint64_t seed, int stop = -1);

    int slots() const override { return o_.slots; }
    int context() const override { return o_.context; }
    int vocab_size() const override { return o_.vocab; }
    int prefill_chunk() const override { return o_.chunk; }
    int prefill_rows() const override { return o_.prefill_rows; }
    int steps_in_flight() const override { return o_.in_flight; }
    int prefills_in_flight() const override { return o_.prefills_in_flight; }

    void prefill_whole(const std::vector<PrefillPrompt>& prompts, std::vector<PickedToken>* out) override {
        std::set<int> seen;
        for (const PrefillPrompt& p : prompts)
            if (!seen.insert(p.slot).second) fail("prefill_whole: slot " + std::to_string(p.slot) + " twice");
        for (const PrefillPrompt& p : prompts)
            if (o_.chunk > 0 && p.n > o_.chunk) fail("prefill_whole: a prompt of " + std::to_string(p.n) + " tokens");
        if (prompts.empty() || (int)prompts.size() > o_.prefill_rows)
            fail("prefill_whole: " + std::to_string(prompts.size()) + " prompts");
        whole_calls.push_back((int)prompts.size());
        ServeEngine::prefill_whole(prompts, out);
    }

    // Begun: the prompts are in their slots and each first pick is its slot's next input at once (as the GPU's
    // stream orders it before the next step); the tokens reach the scheduler only at prefill_whole_end.
    // (ServeEngine's default keeps the tokens; this checks the protocol around it)
    void prefill_whole_begin(const std::vector<PrefillPrompt>& prompts) override {
        {
            std::lock_guard<std::mutex> lock(m_);
            if ((int)begun_at_.size() >= o_.prefills_in_flight)
                fail("prefill_whole_begin: " + std::to_string(begun_at_.size()) + " prefills in flight");
        }
        ServeEngine::prefill_whole_begin(prompts);
        std::lock_guard<std::mutex> lock(m_);
        begun_at_.push_back(begin_calls_);
        max_prefills_in_flight = std::max(max_prefills_in_flight, (int)begun_at_.size());
    }
    void prefill_whole_end(std::vector<PickedToken>* out) override {
        {
            std::lock_guard<std::mutex> lock(m_);
            if (begun_at_.empty()) fail("prefill_whole_end: no prefill begun");
            // a GPU would wait for the decode steps before the call too, with none behind it: its stream drains
            if (!flights_.empty() && begin_calls_ == begun_at_.front()) draining_prefill_ends++;
            begun_at_.pop_front();
        }
        ServeEngine::prefill_whole_end(out);
    }

    PickedToken prefill(int slot, const int* tokens, int start, int n, const TokenPick* last) override {
        std::lock_guard<std::mutex> lock(m_);
        if (slot < 0 || slot >= o_.slots) fail("prefill: slot " + std::to_string(slot));
        std::vector<int>& h = hist_[slot];
        if (start == 0) h.clear(), kept_[slot].clear(), live_[slot] = true;
        else if (!live_[slot] || start != (int)h.size() || o_.chunk == 0)
            fail("prefill: slot " + std::to_string(slot) + " from " + std::to_string(start) + ", it holds " +
                 std::to_string(h.size()));
        if (n < 1 || (o_.chunk > 0 && n > o_.chunk) || (o_.chunk == 0 && !last) || start + n > o_.context)
            fail("prefill: " + std::to_string(n) + " tokens at " + std::to_string(start));
        for (int i = 0; i < n; i++) {
            if (tokens[i] < 0 || tokens[i] >= o_.vocab) fail("prefill: token " + std::to_string(tokens[i]));
            h.push_back(tokens[i]);
        }
        prefills.push_back(FakePrefill{slot, start, n, last != nullptr});
        prefilled_tokens += n;
        sleep_us((long long)o_.prefill_us_per_token * n);
        if (!last) return PickedToken{};
        const PickedToken t = pick(h, *last, o_.vocab, o_.eot, o_.eot_every);
        last_[slot] = t.token;
        return t;
    }

    void decode_begin(const std::vector<DecodeSlot>& batch) override {
        std::lock_guard<std::mutex> lock(m_);
        if ((int)flights_.size() >= o_.in_flight) fail("decode_begin: " + std::to_string(flights_.size()) + " steps in flight");
        if (++begin_calls_ == o_.fail_begin_at) throw std::runtime_error("fake engine: an injected failure");
        std::set<int> seen;
        std::vector<int> step;
        for (const DecodeSlot& d : batch) {
            if (d.slot < 0 || d.slot >= o_.slots || !live_[d.slot] || !seen.insert(d.slot).second)
                fail("decode: slot " + std::to_string(d.slot) + " (free, repeated or out of range)");
            if (d.position != (int)hist_[d.slot].size() || d.position >= o_.context)
                fail("decode: slot " + std::to_string(d.slot) + " at " + std::to_string(d.position) + ", it holds " +
                     std::to_string(hist_[d.slot].size()));
        }
        std::vector<PickedToken> out;
        for (const DecodeSlot& d : batch) {
            std::vector<int>& h = hist_[d.slot];
            h.push_back(last_[d.slot]);
            PickedToken t = pick(h, d.pick, o_.vocab, o_.eot, o_.eot_every);
            if (d.slot == fail_slot) t = PickedToken{};
            last_[d.slot] = t.token < 0 ? 0 : t.token;  // a GPU's failed row leaves a valid id for the next step
            out.push_back(t);
            step.push_back(d.slot);
        }
        steps.push_back(step);
        // a step starts when the one before ends, as on a GPU's stream
        const auto now = std::chrono::steady_clock::now();
        const auto start = flights_.empty() ? now : std::max(now, flights_.back().ready);
        flights_.push_back(Flight{std::move(out), start + std::chrono::microseconds(o_.step_us)});
    }

    void decode_end(std::vector<PickedToken>* out) override {
        std::chrono::steady_clock::time_point ready;
        {
            std::lock_guard<std::mutex> lock(m_);
            if (flights_.empty()) fail("decode_end: no step in flight");
            in_flight_at_end.push_back((int)flights_.size());
            *out = std::move(flights_.front().out);
            ready = flights_.front().ready;
            flights_.pop_front();
            if (++end_calls_ == o_.fail_end_at) throw std::runtime_error("fake engine: an injected failure");
            device_ms_ += o_.step_us * 1e-3;  // each step's time on the fake device: step_us
        }
        std::this_thread::sleep_until(ready);
    }
    double decode_device_ms() const override {
        std::lock_guard<std::mutex> lock(m_);
        return device_ms_;
    }

    void release(int slot, int keep) override {
        std::lock_guard<std::mutex> lock(m_);
        if (slot < 0 || slot >= o_.slots || !live_[slot] || keep < 0 || keep > (int)hist_[slot].size())
            fail("release: slot " + std::to_string(slot) + ", keeping " + std::to_string(keep));
        live_[slot] = false;
        kept_[slot].assign(hist_[slot].begin(), hist_[slot].begin() + keep);  // the positions a prefix cache holds
        hist_[slot].clear();
        released.push_back(slot);
    }

    // A prefix cache's copy: `to` (free, or just given to a new sequence) starts as from's first n positions (a live
    // sequence's or what a free slot kept; from == to: the slot keeps its own first n).
    bool copies_prefix() const override { return o_.chunk > 0; }
    void copy_prefix(int from, int to, int n) override {
        std::lock_guard<std::mutex> lock(m_);
        if (from < 0 || from >= o_.slots || to < 0 || to >= o_.slots || (live_[to] && from != to))
            fail("copy_prefix: slot " + std::to_string(from) + " to " + std::to_string(to));
        const std::vector<int> src = live_[from] ? hist_[from] : kept_[from];
        if (n < 1 || n > (int)src.size())
            fail("copy_prefix: " + std::to_string(n) + " positions of slot " + std::to_string(from) + ", which holds " +
                 std::to_string(src.size()));
        hist_[to].assign(src.begin(), src.begin() + n);
        kept_[to].clear();
        live_[to] = true;
        copies.push_back({from, to, n});
    }

    // records (read them while no step runs)
    std::vector<std::vector<int>> steps;  // each decode step's slots
    std::vector<FakePrefill> prefills;
    std::vector<int> whole_calls;  // prompts per prefill_whole call
    std::vector<int> released;
    struct Copy { int from, to, n; };
    std::vector<Copy> copies;  // copy_prefix calls
    std::vector<int> in_flight_at_end;  // steps in flight at each decode_end (the one it ends included)
    int max_prefills_in_flight = 0;     // whole-prompt calls begun and not ended, at most
    int draining_prefill_ends = 0;      // calls ended with a decode step in flight and none begun since the call
    std::vector<std::string> violations;
    long long prefilled_tokens = 0;
    int fail_slot = -1;  // decode picks no token for this slot (an engine failure)

private:
    [[noreturn]] void fail(const std::string& what) {
        violations.push_back(what);
        throw std::logic_error("fake engine: " + what);
    }
    static void sleep_us(long long us) {
        if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
    }

    FakeEngineOptions o_;
    std::vector<std::vector<int>> hist_;
    std::vector<std::vector<int>> kept_;  // a free slot's positions, as a KV cache keeps them
    std::vector<int> last_;  // each slot's last pick: its next decode step's input
    std::vector<bool> live_;
    struct Flight {
        std::vector<PickedToken> out;  // the step's picks
        std::chrono::steady_clock::time_point ready;
    };
    std::deque<Flight> flights_;  // steps in flight, oldest first
    std::deque<int> begun_at_;  // whole-prompt calls begun and not ended: decode_begin calls before each, oldest first
    int begin_calls_ = 0, end_calls_ = 0;
    double device_ms_ = 0;  // decode_device_ms
    mutable std::mutex m_;
};

#include "llmc/core/rand.h"

inline std::vector<int> FakeEngine::alone(const std::vector<int>& prompt, int max_tokens, TokenPick p, uint64_t seed,
                                          int stop) {
    Rng rng(seed);
    std::vector<int> seq = prompt, out;
    for (int g = 0; g < max_tokens && (int)seq.size() < o_.context + 1; g++) {
        p.coin = rng.uniform();
        const int t = pick(seq, p, o_.vocab, o_.eot, o_.eot_every).token;
        out.push_back(t);
        seq.push_back(t);
        if (t == stop) break;
    }
    return out;
}
