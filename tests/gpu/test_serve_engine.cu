// GPU test of the server's pipeline end to end without HTTP: the scheduler (llmc/serving/scheduler.h) over the GPU
// engine (llmc/serving/gpu_engine.cuh) on a random-init model, many requests arriving a few per step (prompts of
// 1-70 tokens, greedy and sampled, logprobs, stop callbacks, cancellations), so slots are released and prefilled
// again while a decode step is in flight, prompts share prefill forwards and graphs, and steps run over changing row
// counts. Then each request alone through the same engine: every request ends exactly once, none with an engine
// error, and its tokens equal those it got alone — up to the first token where the two runs' numbers differ, which
// only a near-tie may explain: a greedy pick whose top two log-probabilities (alone) are within the tie, or a
// sampled pick where the runs' top log-probabilities up to and at that token differ at all and by at most the tie
// (a step over fewer rows rounds differently, so a coin at a CDF boundary may fall the other way). Ties: 1e-3
// nats in FP32 builds, 5e-2 in BF16. A cancelled request's tokens are a prefix of its tokens alone. Every greedy
// token is the top-1 of the log-probabilities reported with it (they come from the very row that picked it, also
// when the next step is already queued). Run with one and with two decode steps in flight, and with prompts longer
// than 16 tokens prefilled in chunks of 16; then with the prefix cache (run_prefix); then (Hopper, BF16) with the
// persistent decode step for every step of one busy slot, and with it in slot 1 (run_lone_slot). First, whole-prompt
// calls begun and ended apart against the same calls waited for (run_begun).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/model/gpt2.cuh"
#include "llmc/serving/gpu_engine.cuh"
#include "llmc/serving/scheduler.h"

namespace {

const float kTie = kFloatXIsBF16 ? 5e-2f : 1e-3f;

struct Request {
    std::vector<int> prompt;
    int max_tokens = 1;
    TokenPick pick;
    uint64_t seed = 0;
    int stop_after = -1;  // on_token says stop after this many tokens
    int cancel_at = -1;   // the step at which the client leaves (-1: never)
    std::vector<PickedToken> got;
    int ends = 0;
    FinishReason why = FinishReason::Stop;
    std::string error;
    std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
};

SequenceRequest sequence_of(Request* r, int max_tokens) {
    SequenceRequest q;
    q.prompt = r->prompt;
    q.max_tokens = max_tokens;
    q.pick = r->pick;
    q.seed = r->seed;
    q.cancel = r->cancel;
    q.on_token = [r](const PickedToken& t) {
        r->got.push_back(t);
        return r->stop_after < 0 || (int)r->got.size() < r->stop_after;
    };
    q.on_end = [r](const SequenceEnd& e) {
        r->ends++;
        r->why = e.reason;
        r->error = e.error;
    };
    return q;
}

// The largest |difference| of the runs' top log-probabilities at tokens 0..k (a token without them: infinite).
float top_drift(const std::vector<PickedToken>& a, const std::vector<PickedToken>& b, size_t k) {
    float drift = 0.f;
    for (size_t i = 0; i <= k; i++) {
        if (a[i].top.empty() || b[i].top.empty()) return INFINITY;
        drift = std::max(drift, std::fabs(a[i].top[0].second - b[i].top[0].second));
    }
    return drift;
}

// The request alone through a fresh scheduler on the engine: as many tokens as r got.
Request alone_of(GpuServeEngine& engine, const SchedulerOptions& so, const Request& r) {
    Request alone;
    alone.prompt = r.prompt, alone.pick = r.pick, alone.seed = r.seed;
    Scheduler s(&engine, so);
    s.submit(sequence_of(&alone, (int)r.got.size()));
    for (int step = 0; step < 1000 && alone.ends == 0; step++) s.step();
    return alone;
}

// r's tokens against alone's from token `from` on: equal, or the first difference a near-tie (*ties counts it);
// false (printed) otherwise.
bool same_up_to_a_tie(const Request& r, const Request& alone, int i, size_t from, int* ties) {
    for (size_t k = from; k < r.got.size(); k++) {
        if (k >= alone.got.size()) {
            printf("FAIL: request %d: alone gave %zu tokens, in the batch %zu\n", i, alone.got.size(), r.got.size());
            return false;
        }
        if (r.got[k].token == alone.got[k].token) continue;
        const bool greedy = r.pick.params.greedy();
        const std::vector<std::pair<int, float>>& top = alone.got[k].top;
        const float gap = top.size() >= 2 ? top[0].second - top[1].second : INFINITY;
        const float drift = top_drift(r.got, alone.got, k);
        if (greedy ? gap <= kTie : drift > 0.f && drift <= kTie) {
            (*ties)++;
            return true;
        }
        printf("FAIL: request %d (%zu prompt tokens, %s) token %zu: %d in the batch, %d alone (top-2 gap %.3g, "
               "drift %.3g, tie %.0e)\n", i, r.prompt.size(), greedy ? "greedy" : "sampled", k, r.got[k].token,
               alone.got[k].token, gap, drift, kTie);
        return false;
    }
    return true;
}

// The run described at the top with `depth` decode steps in flight and chunks of `chunk` (0: whole prompts only);
// persistent: the engine asked for the persistent step, which then runs every step of one busy slot, in whatever
// slot it sits (during the batch, and every step alone). true when it passes.
bool run(const GPT2Config& c, const std::vector<float>& params, int depth, int chunk, bool persistent = false) {
    const int slots = 6, prefill_rows = 4, context = 128, N = 200;
    InferenceOptions options;
    if (persistent) options.decode.products = DecodeProducts::Persistent;
    GpuServeEngine engine(c, params, slots, context, prefill_rows, options, depth, chunk);
    Rng rng(7);
    std::vector<Request> rs(N);
    for (Request& r : rs) {
        const int n = 1 + (int)(rng.next_u32() % 70);
        for (int k = 0; k < n; k++) r.prompt.push_back((int)(rng.next_u32() % c.vocab_size));
        r.max_tokens = 1 + (int)(rng.next_u32() % 40);
        if (rng.next_u32() % 3 == 0) r.pick.params = PickParams{1.f, (int)(rng.next_u32() % 3) * 20, 1.f};
        r.pick.top_logprobs = 2;  // both runs: the near-tie rule reads them
        r.seed = rng.next_u64();
        if (rng.next_u32() % 4 == 0) r.stop_after = 1 + (int)(rng.next_u32() % 6);
        if (rng.next_u32() % 8 == 0) r.cancel_at = 0;  // set when submitted
    }
    SchedulerOptions so;
    so.max_queue = N;
    so.prefill_budget = 96;
    uint64_t decode_steps = 0, rows = 0, prefill_calls = 0;
    {
        Scheduler s(&engine, so);
        int submitted = 0;
        for (int step = 0; step < 100000; step++) {
            for (int k = (int)(rng.next_u32() % 4); k > 0 && submitted < N; k--, submitted++) {
                Request& r = rs[submitted];
                if (r.cancel_at == 0) r.cancel_at = step + (int)(rng.next_u32() % 12);
                s.submit(sequence_of(&r, r.max_tokens));
            }
            for (int i = 0; i < submitted; i++)
                if (rs[i].cancel_at == step) rs[i].cancel->store(true);
            s.step();
            const SchedulerStats st = s.stats();
            if (submitted == N && st.running == 0 && st.queued == 0) break;
        }
        s.step();  // the last step begun, collected
        const SchedulerStats st = s.stats();
        decode_steps = st.decode_steps, rows = st.decode_rows, prefill_calls = st.prefill_calls;
    }
    int replayed = 0;
    for (const auto& g : engine.engine().prefill_graphs) replayed += g.second.exec != nullptr;
    const uint64_t lone_in_batch = engine.lone_steps();

    int failures = 0, ties = 0, cancelled = 0, compared = 0;
    for (int i = 0; i < N; i++) {
        Request& r = rs[i];
        if (r.ends != 1 || r.why == FinishReason::Error) {
            printf("FAIL: request %d ended %d times (%s%s)\n", i, r.ends, finish_reason_name(r.why), r.error.c_str());
            failures++;
            continue;
        }
        cancelled += r.why == FinishReason::Cancelled;
        if (r.got.empty()) continue;
        for (size_t k = 0; k < r.got.size() && r.pick.params.greedy(); k++) {
            const PickedToken& t = r.got[k];
            if (t.top.empty() || t.top[0].first != t.token || t.top[0].second != t.logprob) {
                printf("FAIL: request %d token %zu: greedy %d (logprob %.4f), reported top-1 %d (%.4f)\n", i, k,
                       t.token, t.logprob, t.top.empty() ? -1 : t.top[0].first, t.top.empty() ? 0.f : t.top[0].second);
                failures++;
                break;
            }
        }
        const Request alone = alone_of(engine, so, r);
        compared++;
        failures += !same_up_to_a_tie(r, alone, i, 0, &ties);
    }
    // the persistent step: every step alone (and the batch's steps of one busy slot, however many there were)
    const unsigned long long alone_steps = engine.lone_steps() - lone_in_batch;
    const bool lone_ok = !persistent || alone_steps > 0;
    if (persistent)
        printf("test_serve_engine: the persistent step ran %llu of the batch's steps and %llu alone%s\n",
               (unsigned long long)lone_in_batch, alone_steps, lone_ok ? "" : ": FAIL (none alone)");
    const bool ok = failures == 0 && replayed > 0 && cancelled > 0 && rows > decode_steps && lone_ok;
    printf("test_serve_engine (%s, %d step%s in flight, %s): %d requests through the scheduler on %d slots (%llu decode "
           "steps of %.2f rows, %llu prefill calls, %d prefill graphs replayed, %d cancelled), each against itself "
           "alone: %d compared, %d differ at a near-tie (<= %.0e nats), %d failures: %s\n", PRECISION_NAME, depth,
           depth > 1 ? "s" : "", chunk ? ("prompts over " + std::to_string(chunk) + " in chunks").c_str() : "whole prompts",
           N, slots,
           (unsigned long long)decode_steps, rows / (double)std::max<uint64_t>(1, decode_steps),
           (unsigned long long)prefill_calls, replayed, cancelled, compared, ties, kTie, failures, ok ? "PASS" : "FAIL");
    return ok;
}

// The persistent step in a slot past 0: two greedy requests together (slots 0 and 1), the first ending after 2
// tokens, so the second decodes alone in slot 1; its tokens against the same request alone (slot 0, the persistent
// step too) up to a near-tie, and the engine's count of lone steps past slot 0 above zero. true when it passes.
bool run_lone_slot(const GPT2Config& c, const std::vector<float>& params) {
    InferenceOptions options;
    options.decode.products = DecodeProducts::Persistent;
    GpuServeEngine engine(c, params, 4, 128, 2, options, 2, 16);
    Rng rng(13);
    Request first, second;
    for (Request* r : {&first, &second}) {
        for (int k = 0; k < 20; k++) r->prompt.push_back((int)(rng.next_u32() % c.vocab_size));
        r->pick.top_logprobs = 2;
    }
    SchedulerOptions so;
    {
        Scheduler s(&engine, so);
        s.submit(sequence_of(&first, 2));
        s.submit(sequence_of(&second, 40));
        for (int step = 0; step < 1000 && (first.ends == 0 || second.ends == 0); step++) s.step();
    }
    const uint64_t past0 = engine.lone_steps_past_slot0();
    int ties = 0;
    const Request alone = alone_of(engine, so, second);
    const bool ok = first.ends == 1 && second.ends == 1 && second.got.size() == 40 && past0 > 0 &&
                    same_up_to_a_tie(second, alone, 1, 0, &ties);
    printf("test_serve_engine (%s): the persistent step in slot 1 for %llu steps (the first request ended), 40 tokens "
           "against the request alone (%d differ at a near-tie): %s\n", PRECISION_NAME, (unsigned long long)past0, ties,
           ok ? "PASS" : "FAIL");
    return ok;
}

// The prefix cache (--prefix-cache 1) on the GPU engine: requests whose prompts begin with 0-3 chunks of a few shared
// "system prompts", a few arriving per step, so prefixes are copied from running and from free slots and taken in
// place. Each request's first token comes from the prefill of what the cache did not hold, attending over the
// copied prefix: its log-probabilities must equal, bit for bit, those of the same request alone with the cache off
// (every chunk computed, the same chunk calls); later tokens as in run() (near-ties only: decode steps over other
// row counts round differently). One prompt per prefill call, as alone: a call over several prompts has other GEMM
// shapes, which cuBLASLt may serve with other kernels that round differently. true when it passes.
bool run_prefix(const GPT2Config& c, const std::vector<float>& params, int depth) {
    const int slots = 6, prefill_rows = 1, context = 128, N = 120, chunk = 16;
    GpuServeEngine engine(c, params, slots, context, prefill_rows, InferenceOptions{}, depth, chunk);
    Rng rng(11);
    std::vector<std::vector<int>> systems(3);
    for (auto& sys : systems)
        for (int k = 0; k < 3 * chunk; k++) sys.push_back((int)(rng.next_u32() % c.vocab_size));
    std::vector<Request> rs(N);
    for (Request& r : rs) {
        const std::vector<int>& sys = systems[rng.next_u32() % systems.size()];
        r.prompt.assign(sys.begin(), sys.begin() + (rng.next_u32() % 4) * chunk);
        for (int k = 1 + (int)(rng.next_u32() % 30); k > 0; k--) r.prompt.push_back((int)(rng.next_u32() % c.vocab_size));
        r.max_tokens = 1 + (int)(rng.next_u32() % 20);
        if (rng.next_u32() % 3 == 0) r.pick.params = PickParams{1.f, 0, 1.f};
        r.pick.top_logprobs = 2;
        r.seed = rng.next_u64();
    }
    SchedulerOptions so;
    so.max_queue = N;
    so.prefill_budget = 96;
    so.prefix_cache = true;
    uint64_t hits = 0, queried = 0;
    {
        Scheduler s(&engine, so);
        if (!s.prefix_caching()) return printf("FAIL: the GPU engine takes no prefix cache\n"), false;
        int submitted = 0;
        for (int step = 0; step < 100000; step++) {
            for (int k = (int)(rng.next_u32() % 3); k > 0 && submitted < N; k--, submitted++)
                s.submit(sequence_of(&rs[submitted], rs[submitted].max_tokens));
            s.step();
            const SchedulerStats st = s.stats();
            if (submitted == N && st.running == 0 && st.queued == 0) break;
        }
        s.step();
        hits = s.stats().prefix_hit_tokens, queried = s.stats().prefix_queried_tokens;
    }
    SchedulerOptions off = so;
    off.prefix_cache = false;
    int failures = 0, ties = 0, exact_first = 0;
    for (int i = 0; i < N; i++) {
        Request& r = rs[i];
        if (r.ends != 1 || r.why == FinishReason::Error || r.got.empty()) {
            printf("FAIL: request %d ended %d times (%s%s), %zu tokens\n", i, r.ends, finish_reason_name(r.why),
                   r.error.c_str(), r.got.size());
            failures++;
            continue;
        }
        const Request alone = alone_of(engine, off, r);
        if (alone.got.size() != r.got.size()) {
            printf("FAIL: request %d: %zu tokens alone, %zu with the cache\n", i, alone.got.size(), r.got.size());
            failures++;
            continue;
        }
        const PickedToken &a = alone.got[0], &b = r.got[0];
        if (a.token != b.token || a.logprob != b.logprob || a.top != b.top) {
            printf("FAIL: request %d (%zu prompt tokens): the first token differs from the cache off: %d (%.7f) vs %d "
                   "(%.7f)\n", i, r.prompt.size(), b.token, b.logprob, a.token, a.logprob);
            failures++;
            continue;
        }
        exact_first++;
        failures += !same_up_to_a_tie(r, alone, i, 1, &ties);
    }
    const bool ok = failures == 0 && hits > queried / 5;
    printf("test_serve_engine (%s, %d step%s in flight, prefix cache, chunks of %d): %d requests, %llu of %llu prompt "
           "tokens from the cache; the first token bit-identical to the cache off for %d, later tokens differing at a "
           "near-tie %d, %d failures: %s\n", PRECISION_NAME, depth, depth > 1 ? "s" : "", chunk, N,
           (unsigned long long)hits, (unsigned long long)queried, exact_first, ties, failures, ok ? "PASS" : "FAIL");
    return ok;
}

// Whole prompts begun and ended apart (prefill_whole_begin / _end) against the same calls waited for
// (prefill_whole), engine against engine: two calls in flight (two prompts, greedy and sampled, then one sampled with
// another rule, so two calls sharing a set of pinned rows would pick differently), a decode step over their slots
// queued before either is ended (so it reads the first picks from the device), the first ended, a third begun (with
// logprobs: read at once) on the first's set while the second is in flight, then the rest ended oldest first. The
// first tokens, the step's tokens and the third's logprobs bit-identical to the waited run's (the same calls in the
// same stream order). true when it passes.
bool run_begun(const GPT2Config& c, const std::vector<float>& params) {
    const int slots = 4, context = 128, prefill_rows = 2;
    std::vector<std::vector<int>> prompts(4);
    Rng rng(5);
    for (auto& p : prompts)
        for (int k = 3 + (int)(rng.next_u32() % 40); k > 0; k--) p.push_back((int)(rng.next_u32() % c.vocab_size));
    auto call = [&](std::initializer_list<int> which) {
        std::vector<PrefillPrompt> v;
        for (int i : which) {
            TokenPick pick;
            if (i > 0) pick.params = PickParams{0.5f + 0.25f * i, 40 * i, 1.f}, pick.coin = 0.2f * i;
            if (i == 3) pick.top_logprobs = 3;
            v.push_back(PrefillPrompt{i, prompts[i].data(), (int)prompts[i].size(), pick});
        }
        return v;
    };
    auto step_over = [&](std::initializer_list<int> which) {
        std::vector<DecodeSlot> batch;
        for (int i : which) batch.push_back(DecodeSlot{i, (int)prompts[i].size(), TokenPick{}});
        return batch;
    };
    std::vector<int> waited, begun;  // first tokens of slots 0, 1, 2, the step's three, then slot 3's first
    std::vector<float> waited_lp, begun_lp;  // slot 3's logprob and top-3 log-probabilities
    for (bool apart : {false, true}) {
        GpuServeEngine e(c, params, slots, context, prefill_rows, InferenceOptions{}, 2, 0);
        std::vector<int>& got = apart ? begun : waited;
        std::vector<float>& lp = apart ? begun_lp : waited_lp;
        std::vector<PickedToken> a, b, d, f;
        if (apart) {
            e.prefill_whole_begin(call({0, 1}));
            e.prefill_whole_begin(call({2}));
            e.decode_begin(step_over({0, 1, 2}));
            e.prefill_whole_end(&a);
            e.prefill_whole_begin(call({3}));  // the first's set, the second still in flight
            e.prefill_whole_end(&b);
            e.decode_end(&d);
            e.prefill_whole_end(&f);
        } else {
            e.prefill_whole(call({0, 1}), &a);
            e.prefill_whole(call({2}), &b);
            e.decode_begin(step_over({0, 1, 2}));
            e.prefill_whole(call({3}), &f);
            e.decode_end(&d);
        }
        for (const auto* v : {&a, &b, &d, &f})
            for (const PickedToken& t : *v) got.push_back(t.token);
        if (f.size() == 1) {
            lp.push_back(f[0].logprob);
            for (const auto& [id, l] : f[0].top) lp.push_back((float)id), lp.push_back(l);
        }
    }
    bool ok = waited.size() == 7 && waited == begun && waited_lp.size() == 7 && waited_lp == begun_lp;
    for (int t : waited) ok = ok && t >= 0 && t < c.vocab_size;
    printf("test_serve_engine (%s, prefills begun and ended apart): %zu tokens, waited", PRECISION_NAME, waited.size());
    for (int t : waited) printf(" %d", t);
    printf(", begun");
    for (int t : begun) printf(" %d", t);
    printf("; slot 3's logprob %.6f (%s): %s\n", waited_lp.empty() ? 0.f : waited_lp[0],
           waited_lp == begun_lp ? "the same" : "DIFFERENT", ok ? "PASS" : "FAIL");
    return ok;
}

}  // namespace

int main() {
    const GPT2Config c{256, 1000, 1024, 2, 12, 768};  // max T, V, padded V, L, NH, C
    GPT2 m;
    gpt2_build_random(&m, c, 1234);
    bool ok = run_begun(c, m.host_params);
    ok = run(c, m.host_params, 1, 0) && ok;
    ok = run(c, m.host_params, 2, 0) && ok;
    ok = run(c, m.host_params, 2, 16) && ok;
    ok = run_prefix(c, m.host_params, 1) && ok;
    ok = run_prefix(c, m.host_params, 2) && ok;
    std::string why;
    if (persistent_step_supported(c, 1, &why)) {
        ok = run(c, m.host_params, 2, 16, true) && ok;
        ok = run_lone_slot(c, m.host_params) && ok;
    } else {
        printf("test_serve_engine: the persistent step skipped: %s\n", why.c_str());
    }
    return ok ? 0 : 1;
}
