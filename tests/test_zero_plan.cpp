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
            if (plan[i].first_layer > 0) EXPECT_GE(plan[i].elements * 2, (size_t)25 << 20);  // all but the last
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
