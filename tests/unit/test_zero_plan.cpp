// The ZeRO bucket plan (llmc/distributed/zero_plan.h): every parameter in exactly one bucket, buckets in backward order,
// staging padded so that every rank's shard is equal and aligned, and staging indices mapping back to flat ones; and
// ZeRO-2's gradient slots (llmc/distributed/grad_slots.h): the backward's slices in the buckets' staging layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "llmc/distributed/grad_slots.h"
#include "llmc/distributed/zero_plan.h"

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
    ASSERT_EQ(plan.size(), (size_t)c.num_layers + 2);
    for (int i = 0; i < c.num_layers; i++) {
        EXPECT_EQ(plan[i].first_layer, c.num_layers - 1 - i);
        EXPECT_EQ(plan[i].last_layer, c.num_layers - 1 - i);
        EXPECT_EQ(plan[i].ranges.size(), 12u);  // one per per-layer tensor
    }
    const GradBucket& rest = plan[plan.size() - 2];
    EXPECT_EQ(rest.first_layer, -1);
    ASSERT_EQ(rest.ranges.size(), 3u);  // wpe, lnfw, lnfb
    EXPECT_EQ(rest.ranges[0].tensor, 1);
    const GradBucket& wte = plan.back();
    EXPECT_EQ(wte.first_layer, -1);
    ASSERT_EQ(wte.ranges.size(), 1u);  // wte alone, last
    EXPECT_EQ(wte.ranges[0].tensor, 0);
    EXPECT_EQ(wte.ranges[0].offset, 0u);
    expect_partition(c, plan);
}

TEST(ZeroPlan, BucketsReachTheTargetAndPadForEveryRank) {
    const GPT2Config c = d12();
    for (int N : {1, 2, 3, 8}) {
        const auto plan = zero_bucket_plan(c, 25u << 20, N);  // 25 MiB of bf16 gradients
        expect_partition(c, plan);
        for (size_t i = 0; i + 2 < plan.size(); i++) {
            if (plan[i].first_layer > 0) {  // all but the last
                EXPECT_GE(plan[i].elements * 2, (size_t)25 << 20);
            }
            EXPECT_EQ(plan[i].last_layer, i == 0 ? c.num_layers - 1 : plan[i - 1].first_layer - 1);
        }
        EXPECT_EQ(plan[plan.size() - 3].first_layer, 0);
        // GPT-2's wte (Vp = 50304 rows) splits evenly over these ranks: exchanged in place
        EXPECT_EQ(plan.back().in_place(), 50304u * 768u % ((size_t)N * kZeroAlign) == 0) << "N=" << N;
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

// The ZeRO-1 step simulated on the host for N ranks, against the data-parallel step it replaces: each rank packs its
// own gradients into every bucket's staging buffer; the reduce-scatter leaves rank r the sum over ranks of its slice,
// times 1/N (in rank order here, so the comparison can be exact; NCCL adds in its own order, so the real -z 1 vs
// -z 0 comparison will need a stated bound); each rank runs AdamW on its owned segments with its
// shard of the moments and master weights (weight decay per segment's tensor); the all-gather puts the shards back
// in flat order. Three steps; parameters and both moments must equal the unsharded update bit for bit.
TEST(ZeroPlan, SimulatedStepEqualsTheUnshardedStep) {
    const GPT2Config c = odd();
    const size_t P = gpt2_num_parameters(c);
    const auto table = gpt2_parameter_table(c);
    std::vector<size_t> tensor_offset(table.size() + 1, 0);
    for (size_t i = 0; i < table.size(); i++) tensor_offset[i + 1] = tensor_offset[i] + table[i].numel;
    const float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    auto adamw = [&](float* p, const float* g, float* m, float* v, size_t n, bool decay, int t) {  // as the engine
        const float b1 = 1.f - std::pow(beta1, (float)t), b2 = 1.f - std::pow(beta2, (float)t);
        for (size_t i = 0; i < n; i++) {
            m[i] = beta1 * m[i] + (1.f - beta1) * g[i];
            v[i] = beta2 * v[i] + (1.f - beta2) * g[i] * g[i];
            p[i] -= lr * ((m[i] / b1) / (std::sqrt(v[i] / b2) + eps) + (decay ? wd : 0.f) * p[i]);
        }
    };
    for (int N : {1, 2, 3}) {
        const auto plan = zero_bucket_plan(c, 4096, N);
        uint32_t state = 12345u + (uint32_t)N;
        auto rnd = [&]() { state = state * 1664525u + 1013904223u; return (float)(state >> 8) / 16777216.f - 0.5f; };
        std::vector<float> params(P), m(P, 0.f), v(P, 0.f);
        for (float& x : params) x = rnd();
        // sharded state: master weights and moments of each rank's shard only
        std::vector<std::vector<float>> p_shard(N), m_shard(N), v_shard(N);
        for (int r = 0; r < N; r++) {
            p_shard[r] = zero_shard_from_flat(plan, N, r, params.data());
            m_shard[r] = zero_shard_from_flat(plan, N, r, m.data());
            v_shard[r] = zero_shard_from_flat(plan, N, r, v.data());
        }
        for (int t = 1; t <= 3; t++) {
            std::vector<std::vector<float>> grads(N, std::vector<float>(P));
            for (auto& g : grads)
                for (float& x : g) x = rnd();
            // unsharded: all-reduce (sum in rank order, then 1/N), AdamW per tensor
            std::vector<float> g_avg(P);
            for (size_t i = 0; i < P; i++) {
                float s = 0.f;
                for (int r = 0; r < N; r++) s += grads[r][i];
                g_avg[i] = s * (1.f / N);
            }
            for (size_t k = 0; k < table.size(); k++) {
                const size_t o = tensor_offset[k];
                adamw(&params[o], &g_avg[o], &m[o], &v[o], table[k].numel, table[k].weight_decay, t);
            }
            // sharded: reduce-scatter per bucket, AdamW per owned segment, then the all-gather
            std::vector<std::vector<float>> g_shard(N, std::vector<float>(zero_shard_size(plan, N), 0.f));
            size_t shard_at = 0;
            for (const GradBucket& b : plan) {
                std::vector<std::vector<float>> staging(N, std::vector<float>(b.padded, 0.f));
                for (int r = 0; r < N; r++)
                    for (size_t i = 0; i < b.elements; i++) staging[r][i] = grads[r][zero_staging_to_flat(b, i)];
                const size_t per = b.shard_elements(N);
                for (int r = 0; r < N; r++)
                    for (size_t i = 0; i < per; i++) {
                        float s = 0.f;
                        for (int q = 0; q < N; q++) s += staging[q][r * per + i];
                        g_shard[r][shard_at + i] = s * (1.f / N);
                    }
                shard_at += per;
            }
            for (int r = 0; r < N; r++)
                for (const ZeroSegment& s : zero_owned_segments(plan, N, r))
                    adamw(&p_shard[r][s.shard_offset], &g_shard[r][s.shard_offset], &m_shard[r][s.shard_offset],
                          &v_shard[r][s.shard_offset], s.count, table[s.tensor].weight_decay, t);
            std::vector<float> gathered(P), m_flat(P), v_flat(P);
            zero_flat_from_shards(plan, N, p_shard, gathered.data());
            zero_flat_from_shards(plan, N, m_shard, m_flat.data());
            zero_flat_from_shards(plan, N, v_shard, v_flat.data());
            size_t differ = 0;
            for (size_t i = 0; i < P; i++)
                differ += gathered[i] != params[i] || m_flat[i] != m[i] || v_flat[i] != v[i];
            EXPECT_EQ(differ, 0u) << "N " << N << " step " << t;
        }
    }
}

// ---------------------------------------------------------------- ZeRO-2's slots (llmc/distributed/grad_slots.h)

namespace {

std::vector<int> bucket_of_layer(const GPT2Config& c, const std::vector<GradBucket>& plan) {
    std::vector<int> out((size_t)c.num_layers, -1);
    for (size_t k = 0; k < plan.size(); k++)
        for (int l = plan[k].first_layer; l >= 0 && l <= plan[k].last_layer; l++) out[(size_t)l] = (int)k;
    return out;
}

}  // namespace

// Every (tensor, layer) slice of a layer bucket lies inside the bucket's slot, the slices tile the bucket's elements
// (disjoint, nothing left over), and each element sits where zero_pack puts it: staging index i of the slot holds the
// flat element zero_staging_to_flat(b, i). The tensors outside the layers sit in the model's buffer in their buckets'
// staging layout, each bucket at its padded offset.
TEST(GradSlots, SlicesAreTheBucketsStagingLayout) {
    for (const GPT2Config& c : {odd(), d12()}) {
        const auto table = gpt2_parameter_table(c);
        const auto offsets = gpt2_parameter_offsets(c);
        const size_t L = (size_t)c.num_layers;
        for (int N : {1, 2, 3, 8}) {
            for (size_t target : {(size_t)0, (size_t)4096, (size_t)25 << 20}) {
                const auto plan = zero_bucket_plan(c, target, N);
                const GradSlotLayout g = grad_slot_layout(plan, c);
                ASSERT_EQ(g.num_slots, kGradSlots);
                size_t largest = 0, outer = 0;
                for (size_t k = 0; k < plan.size(); k++) {
                    const GradBucket& b = plan[k];
                    if (b.first_layer < 0) {
                        EXPECT_EQ(g.slot_of_bucket[k], -1);
                        outer = round_up(outer, kGradAreaAlign);
                        EXPECT_EQ(g.outer_offset[k], outer);
                        for (const FlatRange& r : b.ranges) {
                            const size_t at = g.outer_tensor_offset[(size_t)r.tensor] - g.outer_offset[k];
                            EXPECT_EQ(zero_staging_to_flat(b, at), offsets[(size_t)r.tensor]);
                            EXPECT_EQ(zero_staging_to_flat(b, at + r.count - 1), offsets[(size_t)r.tensor] + r.count - 1);
                        }
                        outer += b.padded;
                        EXPECT_EQ(g.outer_offset[k] % kGradAreaAlign, 0u);  // 256-byte aligned in bf16
                        continue;
                    }
                    largest = std::max(largest, b.padded);
                    const int s = g.slot_of_bucket[k];
                    ASSERT_EQ(s, (int)(k % kGradSlots));
                    std::vector<std::pair<size_t, size_t>> pieces;  // [start, end) within the slot
                    for (int l = b.first_layer; l <= b.last_layer; l++) {
                        for (int t = 0; t < kNumParameterTensors; t++) {
                            if (!table[(size_t)t].per_layer) continue;
                            const size_t each = table[(size_t)t].numel / L;
                            const size_t at = g.slice[(size_t)l * kNumParameterTensors + (size_t)t];
                            ASSERT_GE(at, g.slot_start(s));
                            const size_t in_slot = at - g.slot_start(s);
                            ASSERT_LE(in_slot + each, b.elements) << "past the bucket's elements in its slot";
                            const size_t flat = offsets[(size_t)t] + (size_t)l * each;
                            EXPECT_EQ(zero_staging_to_flat(b, in_slot), flat);
                            EXPECT_EQ(zero_staging_to_flat(b, in_slot + each - 1), flat + each - 1);
                            EXPECT_EQ(in_slot % 8, 0u);  // 16-byte aligned in bf16, as the flat tensors are
                            pieces.push_back({in_slot, in_slot + each});
                        }
                    }
                    std::sort(pieces.begin(), pieces.end());
                    size_t next = 0;
                    for (const auto& [lo, hi] : pieces) {
                        ASSERT_EQ(lo, next) << "slices overlap or leave a gap";
                        next = hi;
                    }
                    EXPECT_EQ(next, b.elements);
                }
                EXPECT_EQ(g.slot_elements, round_up(largest, kGradAreaAlign));
                EXPECT_EQ(g.slot_elements % kGradAreaAlign, 0u);
                EXPECT_EQ(g.outer_elements, outer);
                EXPECT_EQ(g.slots_elements(), (size_t)kGradSlots * g.slot_elements);
            }
        }
    }
}

// The parameters' all-gather stages every bucket that is not in place: a layer bucket through its own slot, a bucket
// outside the layers through a slot it fits or the gather staging buffer, which is large enough.
TEST(GradSlots, EveryGatherHasAStagingBuffer) {
    GPT2Config long_wpe = odd();
    long_wpe.max_seq_len = 4096;  // wpe larger than a layer: its bucket does not fit a slot
    for (const GPT2Config& c : {odd(), d12(), long_wpe}) {
        for (int N : {1, 2, 3, 5}) {
            const auto plan = zero_bucket_plan(c, 0, N);
            const GradSlotLayout g = grad_slot_layout(plan, c);
            for (size_t k = 0; k < plan.size(); k++) {
                const GradBucket& b = plan[k];
                if (b.first_layer >= 0) {
                    EXPECT_EQ(g.gather_slot[k], g.slot_of_bucket[k]);
                } else if (b.in_place()) {
                    EXPECT_EQ(g.gather_slot[k], -1);
                } else if (g.gather_slot[k] >= 0) {
                    EXPECT_LE(b.padded, g.slot_elements);
                } else {
                    EXPECT_GE(g.gather_staging_elements, b.padded);
                }
            }
        }
    }
    const auto plan = zero_bucket_plan(long_wpe, 0, 2);
    EXPECT_GT(grad_slot_layout(plan, long_wpe).gather_staging_elements, 0u);
    EXPECT_EQ(grad_slot_layout(zero_bucket_plan(d12(), 25u << 20, 2), d12()).gather_staging_elements, 0u);
}

// The backward's order against the ring, simulated: layer_begins(L), then per layer l (L-1 down to 0)
// layer_begins(l), its gradients, gradients_ready(l). Every gradient the backward writes (layer l's own, and the
// fcproj bias of layer l - 1 its first LayerNorm backward writes; lnf's backward writes layer L-1's) goes to a bucket
// whose slot has been handed out; a slot is handed to bucket k only once bucket k - kGradSlots, its last user, has
// been sent (its reduce-scatter queued, so the compute stream's wait on it can be met), and never while a bucket still
// being written holds it.
TEST(GradSlots, TheBackwardNeverWaitsForASlotStillBeingWritten) {
    for (const GPT2Config& c : {odd(), d12()}) {
        for (size_t target : {(size_t)0, (size_t)4096, (size_t)25 << 20}) {
            const auto plan = zero_bucket_plan(c, target, 2);
            const GradSlotLayout g = grad_slot_layout(plan, c);
            const std::vector<int> owner = bucket_of_layer(c, plan);
            const int L = c.num_layers;
            int mapped = 0;                       // buckets [0, mapped) have their slots
            std::vector<bool> sent(plan.size(), false);
            std::vector<int> holder(kGradSlots, -1);  // the bucket a slot was last handed to
            auto begin = [&](int layer) {
                const int through = grad_slots_needed_through(owner, layer);
                for (; mapped <= through; mapped++) {
                    const int s = g.slot_of_bucket[(size_t)mapped];
                    ASSERT_GE(s, 0);
                    if (holder[s] >= 0) {
                        EXPECT_TRUE(sent[(size_t)holder[s]]) << "slot " << s << " still being written";
                    }
                    holder[s] = mapped;
                }
            };
            auto write = [&](int layer) {
                const int k = owner[(size_t)layer];
                ASSERT_LT(k, mapped) << "layer " << layer << " written before its slot";
                EXPECT_EQ(holder[g.slot_of_bucket[(size_t)k]], k);
                EXPECT_FALSE(sent[(size_t)k]) << "layer " << layer << " written after its bucket left";
            };
            begin(L);
            write(L - 1);  // lnf's backward: layer L-1's fcproj bias
            for (int l = L - 1; l >= 0; l--) {
                begin(l);
                write(l);
                if (l > 0) write(l - 1);
                const int k = owner[(size_t)l];
                if (plan[(size_t)k].first_layer == l) sent[(size_t)k] = true;
            }
            EXPECT_EQ(mapped, owner[0] + 1);
        }
    }
}

// At d12 every slice the backward's GEMMs write (and wte's gradient, the classifier's) lies 256 bytes aligned in bf16,
// as in the flat buffer, so cuBLASLt runs the same plans as with -z 0 and -z 1 (llmc/kernels/matmul/matmul.cuh keys plans
// by alignment under 256 bytes). At d48 (C = 1600) attprojw's slices are only 128-byte aligned: those GEMMs get
// plans of their own.
TEST(GradSlots, GemmOutputsStay256ByteAlignedAtD12) {
    const GPT2Config c = d12();
    for (int N : {2, 3, 4, 8}) {
        for (size_t target : {(size_t)0, (size_t)25 << 20}) {
            const GradSlotLayout g = grad_slot_layout(zero_bucket_plan(c, target, N), c);
            EXPECT_EQ(g.outer_tensor_offset[WTE] * 2 % 256, 0u);
            for (int l = 0; l < c.num_layers; l++)
                for (ParamTensor t : {QKVW, ATTPROJW, FCW, FCPROJW})
                    EXPECT_EQ(g.slice[(size_t)l * kNumParameterTensors + t] * 2 % 256, 0u)
                        << "N " << N << " layer " << l << " tensor " << t;
        }
    }
    GPT2Config d48;
    ASSERT_TRUE(gpt2_preset("d48", &d48));
    const GradSlotLayout g = grad_slot_layout(zero_bucket_plan(d48, 25u << 20, 4), d48);
    EXPECT_EQ(g.slice[ATTPROJW] * 2 % 256, 128u);
}
