// A serving request's token from a row of logits on the host (llmc/serving/host_pick.h): the shared sampling rule
// with the request's parameters and coin, and log-probabilities of the raw distribution (the chosen token's and the
// N most likely, ties to the lower id), against direct sums in long double.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/serving/host_pick.h"

namespace {

long double log_softmax_at(const std::vector<float>& l, int i) {
    long double m = -INFINITY, s = 0;
    for (float x : l) m = std::max(m, (long double)x);
    for (float x : l) s += std::exp((long double)x - m);
    return (long double)l[i] - m - std::log(s);
}

TEST(ServeHostPick, GreedyWithLogprobs) {
    const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f, 80.0f - 80.0f};
    TokenPick p;
    p.params = PickParams{0.f, 0, 1.f};
    p.top_logprobs = 3;
    const PickedToken t = pick_from_logits(logits.data(), (int)logits.size(), p);
    EXPECT_EQ(t.token, 1);  // the tie with id 3 goes to the lower id
    EXPECT_NEAR(t.logprob, (double)log_softmax_at(logits, 1), 1e-6);
    ASSERT_EQ(t.top.size(), 3u);
    EXPECT_EQ(t.top[0].first, 1);
    EXPECT_EQ(t.top[1].first, 3);
    EXPECT_EQ(t.top[2].first, 4);
    EXPECT_NEAR(t.top[2].second, (double)log_softmax_at(logits, 4), 1e-6);
    p.top_logprobs = 0;
    EXPECT_TRUE(pick_from_logits(logits.data(), (int)logits.size(), p).top.empty());
    p.top_logprobs = -1;
    EXPECT_EQ(pick_from_logits(logits.data(), (int)logits.size(), p).logprob, 0.f);
}

TEST(ServeHostPick, SamplingIsTheSharedRuleWithTheRequestsCoin) {
    Rng rng(3);
    std::vector<float> logits(500);
    for (float& x : logits) x = 4.f * rng.uniform() - 2.f;
    int differs = 0;
    for (int i = 0; i < 200; i++) {
        TokenPick p;
        p.params = PickParams{0.3f + rng.uniform(), (int)(rng.next_u32() % 60), 0.3f + 0.7f * rng.uniform()};
        p.coin = rng.uniform();
        p.top_logprobs = 0;
        const PickedToken t = pick_from_logits(logits.data(), 500, p);
        EXPECT_EQ(t.token, sample_token(logits.data(), 500, p.params.temperature, p.params.top_k, p.params.top_p, p.coin));
        EXPECT_NEAR(t.logprob, (double)log_softmax_at(logits, t.token), 1e-5);  // the raw distribution's
        differs += t.token != pick_from_logits(logits.data(), 500, TokenPick{p.params, 1.f - p.coin, -1}).token;
    }
    EXPECT_GT(differs, 50);  // the coin decides
}

TEST(ServeHostPick, NonFiniteLogitsPickNothing) {
    std::vector<float> logits = {1.f, NAN, 2.f};
    EXPECT_EQ(pick_from_logits(logits.data(), 3, TokenPick{}).token, -1);
    logits[1] = INFINITY;
    EXPECT_EQ(pick_from_logits(logits.data(), 3, TokenPick{}).token, -1);
    logits[1] = 0.f;
    EXPECT_EQ(pick_from_logits(logits.data(), 3, TokenPick{}).token, 2);
}

}  // namespace
