// DataLoader (llmc/data/dataloader.h): windows, rank partitioning, shuffling, epochs, state, vocab check.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>

#include "llmc/data/dataloader.h"
#include "tests/lib/file_test_helpers.h"

namespace {

// Token value encodes where it sits: shard s, position i -> s * 5000 + i (shards < 5000 tokens).
int token_value(int shard, int64_t i) { return shard * 5000 + (int)i; }

// Writes shards <prefix>_<name>.bin with the given sizes; returns the glob pattern matching them.
std::string make_shards(const std::string& prefix, const std::vector<int>& sizes,
                        const std::vector<std::string>& names = {}) {
    for (size_t s = 0; s < sizes.size(); s++) {
        std::vector<uint16_t> t(sizes[s]);
        for (int i = 0; i < sizes[s]; i++) t[i] = (uint16_t)token_value((int)s, i);
        std::string name = names.empty() ? "s" + std::to_string(s) : names[s];
        write_shard(scratch_path(prefix + "_" + name + ".bin"), t.data(), sizes[s]);
    }
    return scratch_path(prefix + "_*.bin");
}

// What one batch was: shard path + offset (the loader's own report) and the data.
struct Batch {
    std::string shard;
    int64_t offset;
    std::vector<int> inputs, targets;
    bool operator==(const Batch& o) const {
        return shard == o.shard && offset == o.offset && inputs == o.inputs && targets == o.targets;
    }
};

Batch take(DataLoader& dl, int B, int T, bool* wrapped = nullptr) {
    bool w = dl.next_batch();
    if (wrapped) *wrapped = w;
    Batch b{dl.current_shard_path(), dl.current_token_offset(), std::vector<int>(dl.inputs(), dl.inputs() + B * T),
            std::vector<int>(dl.targets(), dl.targets() + B * T)};
    return b;
}

}  // namespace

TEST(DataLoader, BatchesAreConsecutiveBTWindows) {
    const int B = 2, T = 4;
    std::string pattern = make_shards("one", {100});
    DataLoader dl(pattern, B, T, 0, 1, false, 0, -1);
    // (100 - 1) / 8 = 12 full windows; tokens 97..99 are the skipped remainder.
    EXPECT_EQ(dl.num_batches_per_epoch(), 12u);
    for (int k = 0; k < 12; k++) {
        bool wrapped = true;
        Batch b = take(dl, B, T, &wrapped);
        EXPECT_FALSE(wrapped);
        EXPECT_EQ(dl.epoch(), 0);
        for (int i = 0; i < B * T; i++) {
            ASSERT_EQ(b.inputs[i], token_value(0, 8 * k + i)) << "batch " << k << " i " << i;
            ASSERT_EQ(b.targets[i], token_value(0, 8 * k + i + 1)) << "batch " << k << " i " << i;
        }
    }
    bool wrapped = false;
    Batch b = take(dl, B, T, &wrapped);  // epoch 1 starts over; the remainder was never used
    EXPECT_TRUE(wrapped);
    EXPECT_EQ(dl.epoch(), 1);
    EXPECT_EQ(b.inputs[0], token_value(0, 0));
}

TEST(DataLoader, LastPartialWindowSkippedAndTooSmallShardRejected) {
    const int B = 1, T = 8;
    // 17 tokens = two windows of 8 (+1 shared target); 16 tokens only one (the second lacks its last target).
    EXPECT_EQ(DataLoader(make_shards("seventeen", {17}), B, T, 0, 1, false, 0, -1).num_batches_per_epoch(), 2u);
    EXPECT_EQ(DataLoader(make_shards("sixteen", {16}), B, T, 0, 1, false, 0, -1).num_batches_per_epoch(), 1u);
    EXPECT_EQ(DataLoader(make_shards("nine", {9}), B, T, 0, 1, false, 0, -1).num_batches_per_epoch(), 1u);
    std::string pattern = make_shards("eight", {8});
    std::string shard = scratch_path("eight_s0.bin");
    EXPECT_FILE_ERROR([&] { DataLoader(pattern, B, T, 0, 1, false, 0, -1); }, shard,
                      "has 8 tokens, fewer than one global window of 9");
    // With 4 processes a window needs 4*B*T+1 tokens.
    std::string p2 = make_shards("thirty", {30});
    EXPECT_FILE_ERROR([&] { DataLoader(p2, B, T, 1, 4, false, 0, -1); }, scratch_path("thirty_s0.bin"),
                      "fewer than one global window of 33 (processes 4 x micro-steps 1 x B 1 x T 8 + 1: one optimizer step");
    // With 2 micro-steps a window holds a whole optimizer step.
    EXPECT_FILE_ERROR([&] { DataLoader(p2, B, T, 0, 2, false, 0, -1, 2); }, scratch_path("thirty_s0.bin"),
                      "fewer than one global window of 33 (processes 2 x micro-steps 2 x B 1 x T 8 + 1: one optimizer step");
    EXPECT_THROW(DataLoader(p2, B, T, 0, 1, false, 0, -1, 0), std::invalid_argument);
}

TEST(DataLoader, ShardsInNameOrderAcrossAnEpoch) {
    const int B = 1, T = 4;
    // Written out of order: the name decides ("a" < "b" < "c"), not creation order.
    std::string pattern = make_shards("order", {21, 13, 9}, {"c", "a", "b"});
    DataLoader dl(pattern, B, T, 0, 1, false, 0, -1);
    ASSERT_EQ(dl.num_shards(), 3u);
    EXPECT_EQ(dl.shard_paths()[0], scratch_path("order_a.bin"));
    EXPECT_EQ(dl.shard_paths()[2], scratch_path("order_c.bin"));
    EXPECT_EQ(dl.num_batches_per_epoch(), 3u + 2u + 5u);
    std::vector<std::pair<std::string, int64_t>> seen;
    for (int k = 0; k < 10; k++) {
        take(dl, B, T);
        seen.emplace_back(dl.current_shard_path(), dl.current_token_offset());
    }
    std::vector<std::pair<std::string, int64_t>> want = {
        {scratch_path("order_a.bin"), 0}, {scratch_path("order_a.bin"), 4}, {scratch_path("order_a.bin"), 8},
        {scratch_path("order_b.bin"), 0}, {scratch_path("order_b.bin"), 4},
        {scratch_path("order_c.bin"), 0}, {scratch_path("order_c.bin"), 4}, {scratch_path("order_c.bin"), 8},
        {scratch_path("order_c.bin"), 12}, {scratch_path("order_c.bin"), 16}};
    EXPECT_EQ(seen, want);
    bool wrapped = false;
    take(dl, B, T, &wrapped);
    EXPECT_TRUE(wrapped);
    EXPECT_EQ(dl.current_shard_path(), scratch_path("order_a.bin"));
    EXPECT_EQ(dl.current_token_offset(), 0);
}

// Over one epoch the ranks' inputs are disjoint and together cover every full window exactly once.
void check_rank_partition(bool shuffle) {
    const int B = 2, T = 3, P = 3;
    std::string pattern = make_shards(shuffle ? "ranks_shuf" : "ranks", {100, 55, 200});
    std::vector<std::unique_ptr<DataLoader>> loaders;
    for (int r = 0; r < P; r++) loaders.push_back(std::make_unique<DataLoader>(pattern, B, T, r, P, shuffle, 5, -1));
    const size_t batches = loaders[0]->num_batches_per_epoch();
    EXPECT_EQ(batches, 99u / 18 + 54u / 18 + 199u / 18);  // 5 + 3 + 11
    std::multiset<int> seen;
    for (size_t k = 0; k < batches; k++) {
        for (int r = 0; r < P; r++) {
            DataLoader& dl = *loaders[r];
            EXPECT_FALSE(dl.next_batch());
            EXPECT_EQ(dl.current_shard_path(), loaders[0]->current_shard_path()) << "ranks must walk the same windows";
            EXPECT_EQ(dl.current_token_offset(), loaders[0]->current_token_offset() + r * B * T);
            for (int i = 0; i < B * T; i++) {
                seen.insert(dl.inputs()[i]);
                ASSERT_EQ(dl.targets()[i], dl.inputs()[i] + 1);
            }
        }
    }
    std::multiset<int> want;
    const int sizes[] = {100, 55, 200};
    for (int s = 0; s < 3; s++) {
        const int used = (sizes[s] - 1) / (P * B * T) * (P * B * T);
        for (int i = 0; i < used; i++) want.insert(token_value(s, i));
    }
    EXPECT_EQ(seen, want);
    for (int r = 0; r < P; r++) EXPECT_TRUE(loaders[r]->next_batch()) << "all ranks wrap together";
}

TEST(DataLoader, RanksPartitionTheData) { check_rank_partition(false); }
TEST(DataLoader, RanksPartitionTheDataWhenShuffled) { check_rank_partition(true); }

namespace {

std::vector<std::pair<std::string, int64_t>> epoch_order(DataLoader& dl, int B, int T) {
    std::vector<std::pair<std::string, int64_t>> order;
    for (size_t k = 0; k < dl.num_batches_per_epoch(); k++) {
        take(dl, B, T);
        order.emplace_back(dl.current_shard_path(), dl.current_token_offset());
    }
    return order;
}

}  // namespace

TEST(DataLoader, ShuffleIsAPermutationAndDeterministicPerSeed) {
    const int B = 1, T = 4;
    std::string pattern = make_shards("shuf", {41, 33, 61, 29});
    DataLoader plain(pattern, B, T, 0, 1, false, 0, -1);
    DataLoader a(pattern, B, T, 0, 1, true, 1234, -1), b(pattern, B, T, 0, 1, true, 1234, -1);
    DataLoader c(pattern, B, T, 0, 1, true, 99, -1);
    auto p0 = epoch_order(plain, B, T);
    auto a0 = epoch_order(a, B, T), a1 = epoch_order(a, B, T), a2 = epoch_order(a, B, T);
    auto b0 = epoch_order(b, B, T), b1 = epoch_order(b, B, T), b2 = epoch_order(b, B, T);
    auto c0 = epoch_order(c, B, T);
    ASSERT_EQ(p0.size(), 10u + 8u + 15u + 7u);
    // A permutation of the unshuffled windows, every epoch.
    for (auto order : {a0, a1, a2, c0}) {
        std::sort(order.begin(), order.end());
        auto sorted_plain = p0;
        std::sort(sorted_plain.begin(), sorted_plain.end());
        EXPECT_EQ(order, sorted_plain);
    }
    // Same seed: same sequence; another seed, another epoch, or no shuffle: different order.
    EXPECT_EQ(a0, b0);
    EXPECT_EQ(a1, b1);
    EXPECT_EQ(a2, b2);
    EXPECT_NE(a0, p0);
    EXPECT_NE(a0, a1);
    EXPECT_NE(a1, a2);
    EXPECT_NE(a0, c0);
    // Shard order changes between epochs too (first shard of each epoch for several epochs).
    std::set<std::string> first_shards;
    DataLoader d(pattern, B, T, 0, 1, true, 1234, -1);
    for (int e = 0; e < 8; e++) {
        auto order = epoch_order(d, B, T);
        first_shards.insert(order[0].first);
    }
    EXPECT_GT(first_shards.size(), 1u);
    // With a single shard only the window order can change: it must, from epoch to epoch.
    std::string single = make_shards("shuf_single", {81});
    DataLoader e(single, B, T, 0, 1, true, 1234, -1);
    auto e0 = epoch_order(e, B, T), e1 = epoch_order(e, B, T);
    EXPECT_NE(e0, e1);
    auto e0_sorted = e0, e1_sorted = e1;
    std::sort(e0_sorted.begin(), e0_sorted.end());
    std::sort(e1_sorted.begin(), e1_sorted.end());
    EXPECT_EQ(e0_sorted, e1_sorted);
}

TEST(DataLoader, StateSaveRestoreContinuesIdentically) {
    const int B = 2, T = 3;
    std::string pattern = make_shards("state", {50, 70, 31});
    for (bool shuffle : {false, true}) {
        SCOPED_TRACE(shuffle ? "shuffled" : "in order");
        DataLoader a(pattern, B, T, 1, 2, shuffle, 77, -1);
        const size_t per_epoch = a.num_batches_per_epoch();
        for (int k = 0; k < 7; k++) a.next_batch();
        DataLoaderState s = a.get_state();
        Batch at_save{a.current_shard_path(), a.current_token_offset(),
                      std::vector<int>(a.inputs(), a.inputs() + B * T), std::vector<int>(a.targets(), a.targets() + B * T)};
        std::vector<Batch> rest;
        std::vector<bool> wraps;
        for (size_t k = 0; k < 3 * per_epoch; k++) {  // crosses several epoch boundaries
            bool w;
            rest.push_back(take(a, B, T, &w));
            wraps.push_back(w);
        }
        // A fresh loader built with another seed: the state carries the seed, so it continues identically.
        DataLoader b(pattern, B, T, 1, 2, shuffle, 12345, -1);
        b.next_batch();
        b.set_state(s);
        EXPECT_EQ(b.epoch(), 0);
        Batch restored{b.current_shard_path(), b.current_token_offset(),
                       std::vector<int>(b.inputs(), b.inputs() + B * T), std::vector<int>(b.targets(), b.targets() + B * T)};
        EXPECT_TRUE(restored == at_save);
        for (size_t k = 0; k < rest.size(); k++) {
            bool w;
            Batch got = take(b, B, T, &w);
            ASSERT_TRUE(got == rest[k]) << "batch " << k << " after restore";
            ASSERT_EQ(w, wraps[k]) << "batch " << k;
        }
        EXPECT_EQ(b.epoch(), a.epoch());
    }
}

TEST(DataLoader, StateFromBeforeTheFirstBatchAndReset) {
    const int B = 1, T = 4;
    std::string pattern = make_shards("fresh", {40});
    DataLoader a(pattern, B, T, 0, 1, true, 3, -1);
    DataLoaderState fresh = a.get_state();
    Batch first = take(a, B, T);
    take(a, B, T);
    a.reset();
    EXPECT_TRUE(take(a, B, T) == first);
    take(a, B, T);
    a.set_state(fresh);
    EXPECT_THROW(a.inputs(), std::logic_error);
    EXPECT_TRUE(take(a, B, T) == first);
}

namespace {

// The tokens each optimizer step trains on (every rank's micro-batches, in slot order), for `steps` steps.
std::vector<std::vector<int>> step_tokens(const std::string& pattern, int B, int T, int ranks, int micro, bool shuffle,
                                          int steps, const DataLoaderState* resume = nullptr) {
    std::vector<std::unique_ptr<DataLoader>> dl;
    for (int r = 0; r < ranks; r++) {
        dl.push_back(std::make_unique<DataLoader>(pattern, B, T, r, ranks, shuffle, 9, -1, micro));
        if (resume) {
            DataLoaderState s = *resume;
            s.process_rank = r;  // as the trainer restores rank 0's state on every rank
            dl.back()->set_state(s);
        }
    }
    std::vector<std::vector<int>> out;
    for (int k = 0; k < steps; k++) {
        std::vector<std::vector<int>> slots((size_t)ranks * micro);
        for (int m = 0; m < micro; m++)
            for (int r = 0; r < ranks; r++) {
                dl[(size_t)r]->next_batch();
                slots[(size_t)m * ranks + r].assign(dl[(size_t)r]->inputs(), dl[(size_t)r]->inputs() + B * T);
            }
        std::vector<int> all;
        for (const auto& v : slots) all.insert(all.end(), v.begin(), v.end());
        out.push_back(all);
    }
    return out;
}

}  // namespace

// What a step trains on depends only on the tokens per step: 2 ranks x 1 micro-step, 1 rank x 2 micro-steps, 1 rank
// x B 2x, 2 ranks x 2 micro-steps x B/2 all read the same windows in the same order, shuffled or not.
TEST(DataLoader, StepWindowsDoNotDependOnRanksOrMicroSteps) {
    const int T = 3;
    std::string pattern = make_shards("steps", {100, 55, 200});
    for (bool shuffle : {false, true}) {
        SCOPED_TRACE(shuffle ? "shuffled" : "in order");
        const int steps = 25;  // past an epoch: (99 + 54 + 199) / 24 = 4 + 2 + 8 windows
        const auto want = step_tokens(pattern, 4, T, 2, 1, shuffle, steps);
        EXPECT_EQ(step_tokens(pattern, 4, T, 1, 2, shuffle, steps), want);
        EXPECT_EQ(step_tokens(pattern, 8, T, 1, 1, shuffle, steps), want);
        EXPECT_EQ(step_tokens(pattern, 2, T, 2, 2, shuffle, steps), want);
        EXPECT_EQ(step_tokens(pattern, 1, T, 4, 2, shuffle, steps), want);
        EXPECT_NE(step_tokens(pattern, 4, T, 1, 1, shuffle, steps), want);  // half the tokens per step: other windows
    }
}

// A state saved between steps by one shape continues in another with the same tokens per step.
TEST(DataLoader, StateResumesWithAnotherShape) {
    const int T = 3;
    std::string pattern = make_shards("reshape", {100, 55, 200});
    for (bool shuffle : {false, true}) {
        SCOPED_TRACE(shuffle ? "shuffled" : "in order");
        const auto whole = step_tokens(pattern, 4, T, 2, 1, shuffle, 20);
        DataLoader a(pattern, 4, T, 0, 2, shuffle, 9, -1, 1);  // rank 0 of 2, 7 steps in
        for (int k = 0; k < 7; k++) a.next_batch();
        const DataLoaderState s = a.get_state();
        const std::vector<std::vector<int>> rest(whole.begin() + 7, whole.end());
        EXPECT_EQ(step_tokens(pattern, 4, T, 1, 2, shuffle, 13, &s), rest);
        EXPECT_EQ(step_tokens(pattern, 8, T, 1, 1, shuffle, 13, &s), rest);
        EXPECT_EQ(step_tokens(pattern, 2, T, 2, 2, shuffle, 13, &s), rest);
        DataLoader other_tokens(pattern, 4, T, 0, 1, shuffle, 9, -1, 1);  // half the tokens per step
        EXPECT_THROW(other_tokens.set_state(s), std::invalid_argument);
    }
}

TEST(DataLoader, StateOnlyBetweenSteps) {
    std::string pattern = make_shards("between", {100});
    DataLoader a(pattern, 2, 4, 0, 1, false, 0, -1, 3);
    EXPECT_NO_THROW(a.get_state());  // before the first batch
    a.next_batch();
    EXPECT_THROW(a.get_state(), std::logic_error);
    a.next_batch();
    EXPECT_THROW(a.get_state(), std::logic_error);
    a.next_batch();
    EXPECT_EQ(a.get_state().micro_steps, 3);
}

TEST(DataLoader, StateMismatchIsRejected) {
    std::string pattern = make_shards("mismatch", {100});
    DataLoader a(pattern, 2, 4, 0, 1, false, 0, -1);
    a.next_batch();
    DataLoaderState s = a.get_state();
    DataLoader other_shape(pattern, 4, 2, 0, 1, false, 0, -1);  // another T
    EXPECT_THROW(other_shape.set_state(s), std::invalid_argument);
    DataLoaderState bad_shape = s;
    bad_shape.micro_steps = 0;
    EXPECT_THROW(a.set_state(bad_shape), std::invalid_argument);
    bad_shape.micro_steps = INT64_MAX;  // no overflow in the window check
    EXPECT_THROW(a.set_state(bad_shape), std::invalid_argument);
    DataLoaderState bad = s;
    bad.window_pos = 1000;
    EXPECT_THROW(a.set_state(bad), std::invalid_argument);
    bad = s;
    bad.shard_pos = -1;
    EXPECT_THROW(a.set_state(bad), std::invalid_argument);
}

TEST(DataLoader, TokensOutsideVocabulary) {
    const int B = 2, T = 4;
    std::vector<uint16_t> t(100, 7);
    t[13] = 60000;
    std::string shard = scratch_path("vocab_s0.bin");
    write_shard(shard, t.data(), 100);
    DataLoader dl(scratch_path("vocab_*.bin"), B, T, 0, 1, false, 0, 50257);
    EXPECT_FALSE(dl.next_batch());  // tokens 0..8 are fine
    EXPECT_EQ(dl.inputs()[0], 7);
    EXPECT_FILE_ERROR([&] { dl.next_batch(); }, shard, "token 60000 at token offset 13 is >= vocab_size 50257");
    // A target-only position is checked too: the window's last token (offset 8) with B*T = 8.
    t[13] = 7;
    t[8] = 50257;
    write_shard(shard, t.data(), 100);
    DataLoader dl2(scratch_path("vocab_*.bin"), B, T, 0, 1, false, 0, 50257);
    EXPECT_FILE_ERROR([&] { dl2.next_batch(); }, shard, "token 50257 at token offset 8");
    // -1 turns the check off.
    DataLoader dl3(scratch_path("vocab_*.bin"), B, T, 0, 1, false, 0, -1);
    dl3.next_batch();
    EXPECT_EQ(dl3.targets()[7], 50257);
}

TEST(DataLoader, ClearErrors) {
    std::string pattern = scratch_path("nothing_here_*.bin");
    EXPECT_FILE_ERROR([&] { DataLoader(pattern, 1, 4, 0, 1, false, 0, -1); }, pattern,
                      "no data shard matches this pattern");
    // A corrupt shard among good ones is named at construction.
    make_shards("corrupt", {50, 50});
    std::string bad = scratch_path("corrupt_s1.bin");
    copy_resized(scratch_path("corrupt_s0.bin"), bad, -1);
    EXPECT_FILE_ERROR([&] { DataLoader(scratch_path("corrupt_*.bin"), 1, 4, 0, 1, false, 0, -1); }, bad, "truncated");
    std::string good = make_shards("args", {50});
    EXPECT_THROW(DataLoader(good, 0, 4, 0, 1, false, 0, -1), std::invalid_argument);
    EXPECT_THROW(DataLoader(good, 1, 4, 2, 2, false, 0, -1), std::invalid_argument);
    EXPECT_THROW(DataLoader(good, 1, 4, 0, 1, false, 0, 0), std::invalid_argument);
    DataLoader dl(good, 1, 4, 0, 1, false, 0, -1);
    EXPECT_THROW(dl.inputs(), std::logic_error);
}
