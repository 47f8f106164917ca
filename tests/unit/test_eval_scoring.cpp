// The multiple-choice scoring rule (llmc/evaluation/eval_scoring.h) against llm.c's evalloader_stat_losses,
// rewritten here over its (B, T) losses and mask, on random batches; sum against mean; ties; running accuracy.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/evaluation/eval_scoring.h"

namespace {

// llm.c's rule for one example, as evalloader_stat_losses writes it: 4 rows of T losses, mask 1 on the ending.
int llmc_pred_norm(const std::vector<float>& losses, const std::vector<char>& mask, int T) {
    float min_loss = 0.0f;
    int min_loss_index = -1;
    for (int b = 0; b < 4; b++) {
        float average_loss = 0.0f;
        int count = 0;
        for (int t = 0; t < T; t++) {
            if (mask[(size_t)(b * T + t)] == 1) {
                average_loss += losses[(size_t)(b * T + t)];
                count++;
            }
        }
        if (count > 0) average_loss /= count;
        if (b == 0 || average_loss < min_loss) {
            min_loss = average_loss;
            min_loss_index = b;
        }
    }
    return min_loss_index;
}

}  // namespace

TEST(EvalScoring, SameAsLlmcOnRandomBatches) {
    Rng rng(45);
    const int T = 64;
    int differ_from_sum = 0;
    for (int trial = 0; trial < 5000; trial++) {
        std::vector<float> losses(4 * T);
        std::vector<char> mask(4 * T, 0);
        std::vector<std::vector<float>> logprobs(4);
        const int ctx = 1 + (int)rng.below(20);
        // Coarse values make exact ties between endings common, so the tie rule is exercised too.
        const bool coarse = trial % 3 == 0;
        for (int b = 0; b < 4; b++) {
            const int len = 1 + (int)rng.below(T - ctx - 1);
            for (int t = 0; t < T; t++) {
                losses[(size_t)(b * T + t)] = coarse ? (float)rng.below(4) : (float)(rng.below(1u << 24)) / (1 << 20);
            }
            // The targets of positions ctx-1 .. ctx+len-2 are the ending's tokens.
            for (int i = 0; i < len; i++) {
                mask[(size_t)(b * T + ctx - 1 + i)] = 1;
                logprobs[(size_t)b].push_back(-losses[(size_t)(b * T + ctx - 1 + i)]);
            }
        }
        const EvalPrediction p = eval_predict(logprobs);
        ASSERT_EQ(p.pred_norm, llmc_pred_norm(losses, mask, T)) << "trial " << trial;
        differ_from_sum += p.pred != p.pred_norm;
    }
    EXPECT_GT(differ_from_sum, 100);  // the sum and the mean really are two rules
}

TEST(EvalScoring, MeanAgainstSum) {
    // Ending 0: two tokens at -1 (sum -2, mean -1); ending 1: one token at -1.5 (sum -1.5, mean -1.5).
    const EvalPrediction p = eval_predict({{-1.0f, -1.0f}, {-1.5f}, {-3.0f}, {-1.25f, -1.0f, -1.0f}});
    EXPECT_EQ(p.pred, 1);
    EXPECT_EQ(p.pred_norm, 0);
    ASSERT_EQ(p.endings.size(), 4u);
    EXPECT_EQ(p.endings[0].sum_logprob, -2.0f);
    EXPECT_EQ(p.endings[0].mean_logprob, -1.0f);
    EXPECT_EQ(p.endings[3].tokens, 3);
    EXPECT_EQ(p.endings[3].mean_logprob, -3.25f / 3.0f);
}

TEST(EvalScoring, TiesFloatOrderAndNaN) {
    EXPECT_EQ(eval_predict({{-1.0f}, {-1.0f}, {-2.0f, 0.0f}, {-1.0f}}).pred_norm, 0);  // the first of equal means
    EXPECT_EQ(eval_predict({{-3.0f}, {-1.0f, -1.0f}, {-2.0f}}).pred, 1);               // the first of equal sums
    // float, in order: 1e8 + 1 rounds back to 1e8, so the sum is 0 (double would give 1)
    EXPECT_EQ(eval_ending_score(std::vector<float>{1e8f, 1.0f, -1e8f}.data(), 3).sum_logprob, 0.0f);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(eval_predict({{nan}, {-1.0f}}).pred_norm, 0);  // as llm.c: a NaN first ending is kept
    EXPECT_EQ(eval_predict({{-1.0f}, {nan}}).pred_norm, 0);  // and a later NaN never wins
    EXPECT_THROW(eval_predict({}), std::invalid_argument);
    EXPECT_THROW(eval_predict({{-1.0f}, {}}), std::invalid_argument);
}

TEST(EvalScoring, RunningAccuracy) {
    EvalAccuracy a, b;
    const EvalPrediction p = eval_predict({{-1.0f, -1.0f}, {-1.5f}});  // pred 1, pred_norm 0
    a.add(p, 0);
    a.add(p, 1);
    a.add(p, 0);
    EXPECT_EQ(a.total, 3);
    EXPECT_EQ(a.correct, 1);
    EXPECT_EQ(a.correct_norm, 2);
    EXPECT_DOUBLE_EQ(a.acc_norm(), 2.0 / 3.0);
    b.add(p, 1);
    a.merge(b);
    EXPECT_EQ(a.total, 4);
    EXPECT_DOUBLE_EQ(a.acc(), 0.5);
    EXPECT_DOUBLE_EQ(a.acc_norm(), 0.5);
    EXPECT_EQ(EvalAccuracy().acc_norm(), 0.0);
}
