// A serving request's token from one row of logits on the host: the shared sampling rule (sample_token,
// llmc/inference/sampler.h, built from llmc/kernels/sampling/sampling_rule.h) with the request's own parameters and coin,
// and, when asked, log-probabilities under the model: log-softmax of the raw logits (before temperature, top-k
// and top-p, as OpenAI and vLLM report them), the chosen token's and the N most likely tokens' (highest logit
// first, ties to the lower id: the rule's order). Host-only; the GPU engine (llmc/serving/gpu_engine.cuh) picks on
// the GPU by the same rule and fills logprobs here for the requests that ask; the mock engine (tests/serving/serve_mock)
// picks here; tests/serving/test_serve_host_pick.cpp checks it against direct sums.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "llmc/inference/sampler.h"
#include "llmc/serving/serve_engine.h"

// log(sum(exp(logits[0..V)))), in double, shifted by the max.
inline double log_sum_exp(const float* logits, int V) {
    double m = -INFINITY;
    for (int i = 0; i < V; i++) m = std::max(m, (double)logits[i]);
    double s = 0.0;
    for (int i = 0; i < V; i++) s += std::exp((double)logits[i] - m);
    return m + std::log(s);
}

// The log-probabilities a pick asks for (pick.top_logprobs >= 0) into t, whose token is chosen: the token's, and the
// top_logprobs most likely tokens' (highest logit first, ties to the lower id).
inline void fill_logprobs(const float* logits, int V, int top_logprobs, PickedToken* t) {
    if (top_logprobs < 0 || t->token < 0) return;
    const double lse = log_sum_exp(logits, V);
    t->logprob = (float)((double)logits[t->token] - lse);
    const int n = std::min(top_logprobs, V);
    if (n > 0) {
        std::vector<int> ids(V);
        for (int i = 0; i < V; i++) ids[i] = i;
        using sampling_rule::key_of;
        using sampling_rule::rank;
        std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                          [&](int a, int b) { return rank(key_of(logits[a]), a) > rank(key_of(logits[b]), b); });
        for (int j = 0; j < n; j++) t->top.emplace_back(ids[j], (float)((double)logits[ids[j]] - lse));
    }
}

// token -1 when a logit is not finite (the scheduler ends that sequence with an error).
inline PickedToken pick_from_logits(const float* logits, int V, const TokenPick& pick) {
    PickedToken t;
    for (int i = 0; i < V; i++)
        if (!std::isfinite(logits[i])) return t;
    const PickParams& p = pick.params;
    t.token = sample_token(logits, V, p.temperature, p.top_k, p.top_p, pick.coin);
    fill_logprobs(logits, V, pick.top_logprobs, &t);
    return t;
}
