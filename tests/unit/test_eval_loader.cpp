// The eval batches (llmc/evaluation/eval_loader.h): rows, targets and mask where llm.c's EvalLoader puts them, the
// split over ranks, the losses back to llm.c's picks, and the sizes it refuses.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/evaluation/eval_loader.h"
#include "tests/lib/file_test_helpers.h"

namespace {

EvalFile random_file(int n, uint64_t seed, int max_ctx = 6, int max_end = 5) {
    Rng rng(seed);
    EvalFile f;
    for (int i = 0; i < n; i++) {
        EvalExample e;
        e.label = (int)rng.below(4);
        e.context.resize(1 + rng.below((uint64_t)max_ctx));
        for (uint16_t& t : e.context) t = (uint16_t)(1 + rng.below(50000));
        e.endings.resize(4);
        for (auto& end : e.endings) {
            end.resize(1 + rng.below((uint64_t)max_end));
            for (uint16_t& t : end) t = (uint16_t)(1 + rng.below(50000));
        }
        f.examples.push_back(e);
    }
    return f;
}

}  // namespace

TEST(EvalLoader, RowsTargetsAndMaskAsLlmc) {
    EvalFile f;
    f.examples.push_back(EvalExample{2, {10, 11, 12}, {{20}, {21, 22}, {23, 24, 25}, {26}}});
    EvalLoader loader(f, "e.bin", 4, 7, 0, 1);
    ASSERT_EQ(loader.num_batches(), 1);
    EvalBatch b;
    loader.next_batch(b);
    EXPECT_EQ(b.examples, 1);
    EXPECT_EQ(b.labels, std::vector<int>{2});
    // row 2: context 10 11 12, ending 23 24 25; the last context token (position 2) predicts 23
    const std::vector<int> in2(b.inputs.begin() + 14, b.inputs.begin() + 21), tg2(b.targets.begin() + 14, b.targets.begin() + 21);
    const std::vector<uint8_t> m2(b.mask.begin() + 14, b.mask.begin() + 21);
    EXPECT_EQ(in2, (std::vector<int>{10, 11, 12, 23, 24, 25, 0}));
    EXPECT_EQ(tg2, (std::vector<int>{0, 0, 23, 24, 25, 0, 0}));
    EXPECT_EQ(m2, (std::vector<uint8_t>{0, 0, 1, 1, 1, 0, 0}));
    const std::vector<uint8_t> m0(b.mask.begin(), b.mask.begin() + 7);
    EXPECT_EQ(m0, (std::vector<uint8_t>{0, 0, 1, 0, 0, 0, 0}));
    loader.next_batch(b);  // past the end: an empty batch
    EXPECT_EQ(b.examples, 0);
    EXPECT_EQ(b.labels, std::vector<int>{-1});
    for (uint8_t m : b.mask) EXPECT_EQ(m, 0);
}

TEST(EvalLoader, RanksSplitAsLlmcAndRunTheSameBatches) {
    const EvalFile f = random_file(10, 1);
    // llm.c: ceil(10 / 3) = 4 per rank: [0, 4), [4, 8), [8, 10); B 8 fits 2 examples: 2 batches on every rank
    std::set<int> seen;
    for (int rank = 0; rank < 3; rank++) {
        EvalLoader loader(f, "e.bin", 8, 16, rank, 3);
        EXPECT_EQ(loader.num_batches(), 2);
        EXPECT_EQ(loader.start_example(), 4 * rank);
        EXPECT_EQ(loader.end_example(), std::min(10, 4 * rank + 4));
        EvalBatch b;
        int total = 0;
        for (int i = 0; i < loader.num_batches(); i++) {
            loader.next_batch(b);
            for (int s = 0; s < b.examples; s++) EXPECT_EQ(b.labels[(size_t)s], f.examples[(size_t)(4 * rank + total + s)].label);
            for (int s = 0; s < b.examples; s++) seen.insert(4 * rank + total + s);
            total += b.examples;
        }
        EXPECT_EQ(total, loader.end_example() - loader.start_example());
    }
    EXPECT_EQ(seen.size(), 10u);
}

TEST(EvalLoader, ScoresAreTheRulesOnTheEndingsTokens) {
    const EvalFile f = random_file(37, 2);
    EvalLoader loader(f, "e.bin", 12, 11, 0, 1);
    Rng rng(3);
    EvalAccuracy from_batches, direct;
    EvalBatch b;
    for (int i = 0; i < loader.num_batches(); i++) {
        loader.next_batch(b);
        std::vector<float> losses(b.mask.size());
        for (float& l : losses) l = (float)rng.below(1u << 20) / (1 << 16);
        EvalLoader::score_batch(b, losses.data(), 11, from_batches);
        // the same picks from the losses at each ending's own positions
        for (int s = 0; s < b.examples; s++) {
            const EvalExample& e = f.examples[(size_t)(i * 3 + s)];
            std::vector<std::vector<float>> lp(4);
            for (int c = 0; c < 4; c++) {
                const size_t row = (size_t)(s * 4 + c) * 11;
                for (size_t j = 0; j < e.endings[(size_t)c].size(); j++) lp[(size_t)c].push_back(-losses[row + e.context.size() - 1 + j]);
            }
            direct.add(eval_predict(lp), e.label);
        }
    }
    EXPECT_EQ(from_batches.total, 37);
    EXPECT_EQ(from_batches.correct_norm, direct.correct_norm);
    EXPECT_EQ(from_batches.correct, direct.correct);
}

TEST(EvalLoader, RefusesSizesItCannotServe) {
    EvalFile f = random_file(3, 4, 6, 5);
    EXPECT_FILE_ERROR([&] { EvalLoader(f, "e.bin", 6, 16, 0, 1); }, "e.bin", "a multiple of 4 (one row per ending), not 6");
    EXPECT_FILE_ERROR([&] { EvalLoader(f, "e.bin", 4, 16, 0, 4); }, "e.bin", "3 examples cannot be split over 4 processes");
    f.examples[1].context.assign(10, 7);
    f.examples[1].endings[3].assign(7, 8);
    EXPECT_FILE_ERROR([&] { EvalLoader(f, "e.bin", 4, 16, 0, 1); }, "e.bin",
                      "example 1: context + ending 3 = 17 tokens, more than the sequence length 16");
    EXPECT_NO_THROW(EvalLoader(f, "e.bin", 4, 17, 0, 1));
    f.examples[2].endings.pop_back();
    f.examples[2].label = 0;
    EXPECT_FILE_ERROR([&] { EvalLoader(f, "e.bin", 4, 17, 0, 1); }, "e.bin", "example 2 has 3 endings; the eval needs 4");
}
