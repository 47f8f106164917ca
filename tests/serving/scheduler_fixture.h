// The scheduler tests' helpers (tests/serving/test_serve_scheduler.cpp, test_serve_prefix_cache.cpp): a request
// whose tokens and end are recorded, prompts made from a salt, stepping until idle. Test code.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "llmc/serving/scheduler.h"
#include "tests/serving/serve_fake_engine.h"

namespace scheduler_test {

struct Outcome {
    std::vector<int> tokens;
    int ends = 0;
    SequenceEnd end;
    int stop_after = -1;  // on_token says stop after this many tokens
};

// A request of a random mix: its prompt, length, arrival step, rule, seed and what it got.
struct Job {
    std::vector<int> prompt;
    int max_tokens, arrive;
    TokenPick pick;
    uint64_t seed;
    std::shared_ptr<Outcome> out;
};

inline SequenceRequest make_request(const std::vector<int>& prompt, int max_tokens, std::shared_ptr<Outcome> out,
                             TokenPick pick = {}, uint64_t seed = 0, int stop_token = -1) {
    SequenceRequest r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.pick = pick;
    r.seed = seed;
    r.stop_token = stop_token;
    r.on_token = [out](const PickedToken& t) {
        out->tokens.push_back(t.token);
        return out->stop_after < 0 || (int)out->tokens.size() < out->stop_after;
    };
    r.on_end = [out](const SequenceEnd& e) {
        out->ends++;
        out->end = e;
    };
    r.cancel = std::make_shared<std::atomic<bool>>(false);
    return r;
}

inline std::vector<int> prompt_of(int n, int salt, int V = 1000) {
    std::vector<int> p(n);
    for (int i = 0; i < n; i++) p[i] = (i * 37 + salt * 101 + 7) % V;
    return p;
}

// Steps until nothing is queued or running (bounded).
inline int run_to_idle(Scheduler& s, int limit = 100000) {
    int n = 0;
    while (n < limit) {
        const SchedulerStats st = s.stats();
        if (st.running == 0 && st.queued == 0) break;
        s.step();
        n++;
    }
    return n;
}

}  // namespace scheduler_test
