// Token sampling (llmc/inference/sampler.h) and the rule it shares with the GPU (llmc/kernels/sampling/sampling_rule.h):
// greedy, temperature, top-k, top-p, padded vocabulary, determinism, and the empirical distribution against the
// exact softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/inference/sampler.h"

namespace {

// Exact softmax(logits/temperature) over the first n, in double.
std::vector<double> softmax(const std::vector<float>& logits, int n, double temperature) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) mx = std::max(mx, (double)logits[i]);
    std::vector<double> p(n);
    for (int i = 0; i < n; i++) sum += p[i] = std::exp((logits[i] - mx) / temperature);
    for (double& x : p) x /= sum;
    return p;
}

}  // namespace

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
    std::vector<float> l = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
    EXPECT_EQ(sample_token(l.data(), 5, 0.0f, 0, 0.999f), 1);
    EXPECT_EQ(sample_token(l.data(), 5, 1.0f, 1, 0.999f), 1);  // top-1 is greedy whatever the coin
    EXPECT_EQ(argmax_token(l.data(), 5), 1);
}

TEST(Sampler, CoinWalksTheCdf) {
    // probabilities 1/4, 1/4, 1/2: coin in [0, .25) -> 0, [.25, .5) -> 1, [.5, 1) -> 2
    std::vector<float> l = {0.0f, 0.0f, (float)std::log(2.0)};
    EXPECT_EQ(sample_token(l.data(), 3, 1.0f, 0, 0.0f), 0);
    EXPECT_EQ(sample_token(l.data(), 3, 1.0f, 0, 0.24f), 0);
    EXPECT_EQ(sample_token(l.data(), 3, 1.0f, 0, 0.26f), 1);
    EXPECT_EQ(sample_token(l.data(), 3, 1.0f, 0, 0.49f), 1);
    EXPECT_EQ(sample_token(l.data(), 3, 1.0f, 0, 0.51f), 2);
    EXPECT_EQ(sample_token(l.data(), 3, 1.0f, 0, 0.99999994f), 2);
}

TEST(Sampler, PaddedVocabularyIsNeverChosen) {
    // V = 5 real tokens, Vp = 8: the padded entries hold huge logits that must be ignored.
    std::vector<float> l = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 100.0f, 100.0f, 100.0f};
    Rng rng(3);
    for (int i = 0; i < 2000; i++) {
        int t = sample_token(l.data(), 5, 1.0f, 0, rng.uniform());
        ASSERT_GE(t, 0);
        ASSERT_LT(t, 5);
    }
    EXPECT_EQ(sample_token(l.data(), 5, 0.0f, 0, 0.5f), 4);
}

TEST(Sampler, TopKOnlyPicksTheKLargest) {
    std::vector<float> l = {1.0f, 5.0f, 2.0f, 4.0f, 3.0f, 0.0f};
    Rng rng(11);
    std::vector<int> count(6, 0);
    for (int i = 0; i < 20000; i++) count[sample_token(l.data(), 6, 1.0f, 3, rng.uniform())]++;
    EXPECT_EQ(count[0], 0);
    EXPECT_EQ(count[2], 0);
    EXPECT_EQ(count[5], 0);
    EXPECT_GT(count[1], 0);
    EXPECT_GT(count[3], 0);
    EXPECT_GT(count[4], 0);
    // within the top 3, the renormalised softmax e^5 : e^4 : e^3
    const double z = std::exp(5.0) + std::exp(4.0) + std::exp(3.0);
    const double want1 = std::exp(5.0) / z, got1 = count[1] / 20000.0;
    printf("top-k=3: p(token 1) measured %.4f, exact %.4f\n", got1, want1);
    EXPECT_NEAR(got1, want1, 0.02);
}

TEST(Sampler, EmpiricalDistributionMatchesSoftmax) {
    const int V = 50;
    std::vector<float> l(V);
    Rng init(5);
    init.fill_normal(l.data(), V, 0.0f, 1.5f);
    for (float temperature : {0.5f, 1.0f, 2.0f}) {
        std::vector<double> p = softmax(l, V, temperature);
        std::vector<double> freq(V, 0.0);
        Rng rng(99);
        const int N = 200000;
        for (int i = 0; i < N; i++) freq[sample_token(l.data(), V, temperature, 0, rng.uniform())] += 1.0 / N;
        double worst = 0, tv = 0;
        for (int i = 0; i < V; i++) {
            // 5 standard deviations of a binomial frequency, plus a floor
            const double tol = 5.0 * std::sqrt(p[i] * (1 - p[i]) / N) + 1e-4;
            worst = std::max(worst, std::fabs(freq[i] - p[i]) / tol);
            tv += 0.5 * std::fabs(freq[i] - p[i]);
        }
        printf("temperature %.1f: total variation %.5f, worst |freq-p|/tol %.3f (must be <= 1)\n", temperature, tv,
               worst);
        EXPECT_LE(worst, 1.0);
    }
}

TEST(Sampler, SameSeedSameSequence) {
    std::vector<float> l = {0.3f, 1.2f, -0.4f, 0.9f, 0.0f, 2.0f};
    Rng a(1234), b(1234), c(4321);
    std::vector<int> sa, sb, sc;
    for (int i = 0; i < 100; i++) {
        sa.push_back(sample_token(l.data(), 6, 1.0f, 0, a.uniform()));
        sb.push_back(sample_token(l.data(), 6, 1.0f, 0, b.uniform()));
        sc.push_back(sample_token(l.data(), 6, 1.0f, 0, c.uniform()));
    }
    EXPECT_EQ(sa, sb);
    EXPECT_NE(sa, sc);
}

TEST(Sampler, NonFiniteLogitsAreAnError) {
    std::vector<float> l = {0.0f, NAN, 1.0f};
    EXPECT_THROW(sample_token(l.data(), 3, 1.0f, 0, 0.5f), std::runtime_error);
    l[1] = INFINITY;
    EXPECT_THROW(sample_token(l.data(), 3, 0.0f, 0, 0.5f), std::runtime_error);
    l[1] = 0.0f;
    EXPECT_THROW(sample_token(l.data(), 0, 1.0f, 0, 0.5f), std::invalid_argument);
    EXPECT_THROW(sample_token(l.data(), 3, -1.0f, 0, 0.5f), std::invalid_argument);
}

TEST(Sampler, PrintableToken) {
    TokenizerFile t;
    t.tokens = {"Hello", " world", "\n", std::string(1, '\x01'), "<|endoftext|>", "\t\xc3\xa9\xe4\xb8\xad\xf0\x9f\x91\x8d",
                "\x1b[2J", "\xc2\x9b" "1m", "\x9b", "\xe2\x80", "\x7f\xff"};
    t.eot_token = 4;
    EXPECT_EQ(printable_token(t, 0), "Hello");
    EXPECT_EQ(printable_token(t, 1), " world");
    EXPECT_EQ(printable_token(t, 2), "\n");
    EXPECT_EQ(printable_token(t, 3), "\\x01");
    EXPECT_EQ(printable_token(t, 4), "<|endoftext|>");
    EXPECT_EQ(printable_token(t, 5), t.tokens[5]);           // tab and valid UTF-8 (2, 3, 4 bytes) stay
    EXPECT_EQ(printable_token(t, 6), "\\x1B[2J");            // ESC: no terminal escape sequence gets out
    EXPECT_EQ(printable_token(t, 7), "\\xC2\\x9B" "1m");    // C1 CSI written as UTF-8
    EXPECT_EQ(printable_token(t, 8), "\\x9B");               // C1 CSI as a raw byte (invalid UTF-8)
    EXPECT_EQ(printable_token(t, 9), "\\xE2\\x80");         // an unfinished character, alone
    EXPECT_EQ(printable_token(t, 10), "\\x7F\\xFF");        // DEL, a byte never valid in UTF-8
    EXPECT_EQ(printable_token(t, 11), "<id 11>");
    EXPECT_EQ(printable_token(t, -1), "<id -1>");
}

// Bytes from a file, printed: only complete, valid, non-control characters pass unescaped.
TEST(Sampler, PrintableBytes) {
    EXPECT_EQ(printable_bytes(""), "");
    EXPECT_EQ(printable_bytes(std::string("a\0b", 3)), "a\\x00b");
    EXPECT_EQ(printable_bytes("\r\n\t"), "\\x0D\n\t");
    EXPECT_EQ(printable_bytes("\xc2\xa0\xc2\x85\xc2\x9f"), "\xc2\xa0\\xC2\\x85\\xC2\\x9F");  // NBSP kept, C1 escaped
    EXPECT_EQ(printable_bytes("\xc0\xaf"), "\\xC0\\xAF");          // overlong '/'
    EXPECT_EQ(printable_bytes("\xed\xa0\x80"), "\\xED\\xA0\\x80");  // a surrogate
    EXPECT_EQ(printable_bytes("\xf4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");  // above U+10FFFF
    EXPECT_EQ(printable_bytes("\xe2\x28\xa1"), "\\xE2(\\xA1");      // bad continuation
}

// A character split across tokens prints whole; a control character split across tokens is still
// escaped; bytes left unfinished are escaped at the end.
TEST(Sampler, TokenPrinterJoinsSplitCharacters) {
    TokenizerFile t;
    t.tokens = {"\xe2\x80", "\x99", " it", "\xc2", "\x9b", "<|endoftext|>", "\xf0\x9f", "\x91"};
    t.eot_token = 5;
    TokenPrinter p(t);
    std::string out;
    for (int id : {2, 0, 1, 2}) out += p.next(id);
    EXPECT_EQ(out, " it\xe2\x80\x99 it");  // the right single quote, whole
    EXPECT_EQ(p.next(3), "");
    EXPECT_EQ(p.next(4), "\\xC2\\x9B");
    EXPECT_EQ(p.next(6), "");
    EXPECT_EQ(p.next(7), "");
    EXPECT_EQ(p.next(5), "\\xF0\\x9F\\x91<|endoftext|>");  // EOT ends the unfinished character
    EXPECT_EQ(p.next(0), "");
    EXPECT_EQ(p.next(9), "\\xE2\\x80<id 9>");
    EXPECT_EQ(p.next(0), "");
    EXPECT_EQ(p.finish(), "\\xE2\\x80");
    EXPECT_EQ(p.finish(), "");
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
    // probabilities 0.5, 0.25, 0.125, 0.125 (ids 2, 0, 1, 3): top_p 0.5 keeps {2}; 0.7 keeps {2, 0}; 0.8 keeps
    // {2, 0, 1 or 3}: the tie at 0.125 goes to the lower id, 1
    std::vector<float> l = {(float)std::log(2.0), 0.0f, (float)std::log(4.0), 0.0f};
    Rng rng(5);
    std::vector<int> count(4, 0);
    for (int i = 0; i < 4000; i++) count[sample_token(l.data(), 4, 1.0f, 0, 0.5f, rng.uniform())]++;
    EXPECT_EQ(count[2], 4000);
    std::fill(count.begin(), count.end(), 0);
    for (int i = 0; i < 30000; i++) count[sample_token(l.data(), 4, 1.0f, 0, 0.7f, rng.uniform())]++;
    EXPECT_EQ(count[1] + count[3], 0);
    EXPECT_NEAR(count[2] / 30000.0, 2.0 / 3.0, 0.015);  // renormalised over the nucleus: 0.5 / 0.75
    std::fill(count.begin(), count.end(), 0);
    for (int i = 0; i < 30000; i++) count[sample_token(l.data(), 4, 1.0f, 0, 0.8f, rng.uniform())]++;
    EXPECT_GT(count[1], 0);
    EXPECT_EQ(count[3], 0);
    EXPECT_NEAR(count[1] / 30000.0, 0.125 / 0.875, 0.012);
    // top_p 1 is no restriction: the same draw as without it, coin for coin
    for (float coin : {0.0f, 0.3f, 0.6f, 0.9f, 0.99f}) {
        EXPECT_EQ(sample_token(l.data(), 4, 0.7f, 0, 1.0f, coin), sample_token(l.data(), 4, 0.7f, 0, coin));
    }
    // after top-k: top_k 2 then top_p 0.6 of {2: 2/3, 0: 1/3} keeps {2}
    for (int i = 0; i < 200; i++) EXPECT_EQ(sample_token(l.data(), 4, 1.0f, 2, 0.6f, rng.uniform()), 2);
    // a nucleus larger than the first sorted 1024: 3000 equal logits, top_p 0.5 keeps ids 0..1499 (ties: lower id)
    std::vector<float> flat(3000, 0.25f);
    int highest = 0;
    for (int i = 0; i < 3000; i++) highest = std::max(highest, sample_token(flat.data(), 3000, 1.0f, 0, 0.5f, rng.uniform()));
    EXPECT_LT(highest, 1500);
    EXPECT_GE(highest, 1400);  // the kept 1500 are all drawn from, up to near the end
    EXPECT_THROW(sample_token(l.data(), 4, 1.0f, 0, 0.0f, 0.5f), std::invalid_argument);
    EXPECT_THROW(sample_token(l.data(), 4, 1.0f, 0, 1.5f, 0.5f), std::invalid_argument);
}

// The rule's pieces the host sampler and the GPU picker share (llmc/kernels/sampling/sampling_rule.h).
TEST(SamplingRule, KeysRankLikeTheValuesWithTiesToTheLowerId) {
    const std::vector<float> ascending = {-INFINITY, -3.5f, -1.0f, -1e-30f, -0.0f, 0.0f, 1e-30f, 0.25f, 7.0f, INFINITY};
    for (size_t i = 1; i < ascending.size(); i++)
        EXPECT_LT(sampling_rule::key_of(ascending[i - 1]), sampling_rule::key_of(ascending[i])) << ascending[i];
    // bf16 bit patterns rank as their widened floats do (the GPU ranks bf16 keys, the host the widened floats)
    for (uint32_t a : {0x3f80u, 0xbf80u, 0x0000u, 0x8000u, 0x4040u, 0xc040u, 0x7f7fu, 0xff7fu}) {
        for (uint32_t b : {0x3f80u, 0xbf80u, 0x0000u, 0x8000u, 0x4040u, 0xc040u, 0x7f7fu, 0xff7fu}) {
            float fa, fb;
            const uint32_t wa = a << 16, wb = b << 16;
            memcpy(&fa, &wa, 4), memcpy(&fb, &wb, 4);
            EXPECT_EQ(sampling_rule::key_of_bits16(a) < sampling_rule::key_of_bits16(b),
                      sampling_rule::key_of(fa) < sampling_rule::key_of(fb)) << a << " " << b;
        }
        EXPECT_EQ(sampling_rule::bits16_of_key(sampling_rule::key_of_bits16(a)), a);
    }
    using sampling_rule::rank;
    EXPECT_GT(rank(sampling_rule::key_of(2.0f), 7), rank(sampling_rule::key_of(1.0f), 3));
    EXPECT_GT(rank(sampling_rule::key_of(1.0f), 3), rank(sampling_rule::key_of(1.0f), 4));  // a tie: the lower id
    EXPECT_EQ(sampling_rule::rank_id(rank(sampling_rule::key_of(1.0f), 50256)), 50256);
    EXPECT_GT(rank(0u, 0), sampling_rule::rank_floor());
    // so greedy on the host takes +0 over -0 (the GPU's order), and the lower id on an exact tie
    const std::vector<float> zeros = {-0.0f, 0.0f, 0.0f};
    EXPECT_EQ(argmax_token(zeros.data(), 3), 1);
}

TEST(SamplingRule, CdfWalkStopsAtTheCoinAndFallsBackToTheLastWeight) {
    sampling_rule::CdfWalk<double> walk(0.5, 0.0);
    walk.step(4, 0.25), walk.step(9, 0.5), walk.step(11, 0.25);
    EXPECT_EQ(walk.result(), 9);
    sampling_rule::CdfWalk<double> top(1.0, 0.0);  // the target at the very top by rounding
    top.step(4, 0.5), top.step(9, 0.5), top.step(11, 0.0);
    EXPECT_EQ(top.result(), 9);  // the last candidate with weight, not the zero-weight one after it
    sampling_rule::CdfWalk<float> after(0.6f, 0.5f);  // a walk starting where an earlier chunk's mass ends
    after.step(20, 0.05f), after.step(21, 0.2f);
    EXPECT_EQ(after.result(), 21);
}
