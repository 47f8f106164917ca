// The ZeRO-1 bucket plan (llmc/zero_plan.h): every parameter in exactly one bucket, buckets in backward order,
// staging padded so that every rank's shard is equal and aligned, and staging indices mapping back to flat ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "llmc/zero_plan.h"

namespace {

GPT2Config d12() { return GPT2Config{1024, 50257, 50304, 12, 12, 768}; }
GPT2Config odd() { return GPT2Config{37, 101, 128, 5, 3, 48}; }

// Every flat index covered exactly once over all buckets (the ranges tile [0, P)), and the staging map agrees with
// the ranges at each range's first and last element.
void expect_partition(const GPT2Config& c, const std::vector<GradBucket>& plan) {
    std::vector<FlatRange> all;
    for (const GradBucket& b : plan) {
        size_t i = 0, sum = 0;
        for (const FlatRange& r : b.ranges) {
            ASSERT_GT(r.count, 0u);
            EXPECT_EQ(zero_staging_to_flat(b, i), r.offset);
            EXPECT_EQ(zero_staging_to_flat(b, i + r.count - 1), r.offset + r.count - 1);
            i += r.count;
            sum += r.count;
            all.push_back(r);
        }
        EXPECT_EQ(sum, b.elements);
        EXPECT_THROW(zero_staging_to_flat(b, b.elements), std::out_of_range);
    }
    std::sort(all.begin(), all.end(), [](const FlatRange& a, const FlatRange& b) { return a.offset < b.offset; });
    size_t next = 0;
    for (const FlatRange& r : all) {
        ASSERT_EQ(r.offset, next) << "a gap or an overlap";
        next += r.count;
    }
    EXPECT_EQ(next, gpt2_num_parameters(c));
}

}  // namespace

TEST(ZeroPlan, OneLayerPerBucketInBackwardOrder) {
    const GPT2Config c = odd();
    const auto plan = zero_bucket_plan(c, 0, 2);
    ASSERT_EQ(plan.size(), (size_t)c.num_layers + 1);
    for (int i = 0; i < c.num_layers; i++) {
        EXPECT_EQ(plan[i].first_layer, c.num_layers - 1 - i);
        EXPECT_EQ(plan[i].last_layer, c.num_layers - 1 - i);
        EXPECT_EQ(plan[i].ranges.size(), 12u);  // one per per-layer tensor
    }
    EXPECT_EQ(plan.back().first_layer, -1);
    EXPECT_EQ(plan.back().ranges.size(), 4u);  // wte, wpe, lnfw, lnfb
    expect_partition(c, plan);
}

TEST(ZeroPlan, BucketsReachTheTargetAndPadForEveryRank) {
    const GPT2Config c = d12();
    for (int N : {1, 2, 3, 8}) {
        const auto plan = zero_bucket_plan(c, 25u << 20, N);  // 25 MiB of bf16 gradients
        expect_partition(c, plan);
        for (size_t i = 0; i + 1 < plan.size(); i++) {
            if (plan[i].first_layer > 0) {  // all but the last
                EXPECT_GE(plan[i].elements * 2, (size_t)25 << 20);
            }
            EXPECT_EQ(plan[i].last_layer, i == 0 ? c.num_layers - 1 : plan[i - 1].first_layer - 1);
        }
        EXPECT_EQ(plan[plan.size() - 2].first_layer, 0);
        for (const GradBucket& b : plan) {
            EXPECT_GE(b.padded, b.elements);
            EXPECT_LT(b.padded - b.elements, (size_t)N * kZeroAlign);
            EXPECT_EQ(b.padded % ((size_t)N * kZeroAlign), 0u);
            EXPECT_EQ(b.shard_elements(N) * N, b.padded);
            EXPECT_EQ(b.shard_elements(N) % kZeroAlign, 0u);
        }
    }
}

TEST(ZeroPlan, BadRankCount) {
    EXPECT_THROW(zero_bucket_plan(odd(), 0, 0), std::invalid_argument);
}

// Optimizer state in flat (checkpoint) order -> N shards -> flat again, for several N: every element back where it
// was, each shard the same size, padding holding the pad value; and a state sharded for 2 ranks re-sharded for 3
// through the flat order (a checkpoint written on 2 GPUs, resumed on 3).
TEST(ZeroPlan, ShardsRoundTripThroughTheFlatOrder) {
    const GPT2Config c = odd();
    const size_t P = gpt2_num_parameters(c);
    std::vector<float> flat(P);
    for (size_t k = 0; k < P; k++) flat[k] = (float)k * 0.5f + 1.0f;  // distinct, never the pad value
    for (int N : {1, 2, 3, 8}) {
        const auto plan = zero_bucket_plan(c, 4096, N);
        std::vector<std::vector<float>> shards;
        size_t real = 0;
        for (int r = 0; r < N; r++) {
            shards.push_back(zero_shard_from_flat(plan, N, r, flat.data(), -1.0f));
            EXPECT_EQ(shards.back().size(), zero_shard_size(plan, N));
            for (float x : shards.back()) real += x != -1.0f;
        }
        EXPECT_EQ(real, P) << "N=" << N;  // every parameter owned once, the rest padding
        std::vector<float> back(P, 0.0f);
        zero_flat_from_shards(plan, N, shards, back.data());
        EXPECT_EQ(back, flat) << "N=" << N;
    }
    const auto plan2 = zero_bucket_plan(c, 4096, 2), plan3 = zero_bucket_plan(c, 4096, 3);
    std::vector<std::vector<float>> two = {zero_shard_from_flat(plan2, 2, 0, flat.data()),
                                           zero_shard_from_flat(plan2, 2, 1, flat.data())};
    std::vector<float> gathered(P);
    zero_flat_from_shards(plan2, 2, two, gathered.data());
    for (int r = 0; r < 3; r++)
        EXPECT_EQ(zero_shard_from_flat(plan3, 3, r, gathered.data()), zero_shard_from_flat(plan3, 3, r, flat.data()));
    two[1].pop_back();
    EXPECT_THROW(zero_flat_from_shards(plan2, 2, two, gathered.data()), std::invalid_argument);
}

// The segments a rank updates: within its shard, in order, never overlapping, each inside one tensor of the table.
TEST(ZeroPlan, OwnedSegmentsStayInsideOneTensor) {
    const GPT2Config c = d12();
    const auto table = gpt2_parameter_table(c);
    std::vector<size_t> begin(table.size());
    for (size_t i = 0, at = 0; i < table.size(); at += table[i].numel, i++) begin[i] = at;
    for (int N : {2, 8}) {
        const auto plan = zero_bucket_plan(c, 25u << 20, N);
        size_t owned = 0;
        for (int r = 0; r < N; r++) {
            size_t next = 0;
            for (const ZeroSegment& g : zero_owned_segments(plan, N, r)) {
                ASSERT_GE(g.shard_offset, next);
                next = g.shard_offset + g.count;
                ASSERT_GE(g.tensor, 0);
                EXPECT_GE(g.flat_offset, begin[g.tensor]);
                EXPECT_LE(g.flat_offset + g.count, begin[g.tensor] + table[g.tensor].numel);
                owned += g.count;
            }
            EXPECT_LE(next, zero_shard_size(plan, N));
        }
        EXPECT_EQ(owned, gpt2_num_parameters(c));
    }
}
