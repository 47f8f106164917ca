// Generation's memory plan (llmc/inference/inference_plan.h): parameters, KV cache, one layer of prefill scratch,
// the decode step's B rows and nothing of training; sizes checked by hand for d12 and d48 at batch 1 and 64 with a
// context of 1024. The kernels' own sizes are given as the GPU side computes them (flash LSE, decode attention's
// partials, cuBLASLt's 32 MiB).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "llmc/inference/inference_plan.h"

namespace {

GPT2Config d12() { return GPT2Config{1024, 50257, 50304, 12, 12, 768}; }
GPT2Config d48() { return GPT2Config{1024, 50257, 50304, 48, 25, 1600}; }

InferenceShape shape(int B, int max_T, int prefill_T, int max_new, bool cached = true) {
    InferenceShape s;
    s.B = B, s.max_T = max_T, s.prefill_T = prefill_T, s.max_new = max_new, s.cached = cached;
    return s;
}

// The sizes a BF16 build on an H100 (132 SMs) gives: flash attention (LSE), decode attention's partials over chunks
// of 64 positions, the folded greedy pick's partials at batch 1-2 (3 blocks per SM).
InferenceKernelSizes sizes(const GPT2Config& c, const InferenceShape& s) {
    const size_t B = s.B, NH = c.num_heads, HS = c.channels / c.num_heads, chunks = (s.max_T + 63) / 64;
    InferenceKernelSizes k;
    k.attention_saved = (size_t)s.prefill_rows() * NH * s.prefill_T * sizeof(float);
    k.decode_attention_workspace = B * NH * chunks * (HS + 2) * sizeof(float) + B * NH * sizeof(unsigned);
    k.pick_partials = B <= 2 ? B * 132 * 3 : 0;
    k.cublaslt_workspace = 32u << 20;
    return k;
}

InferencePlan plan(const GPT2Config& c, const InferenceShape& s) {
    return inference_plan_of(inference_memory_table(c, s, sizes(c, s)));
}
size_t group(const InferencePlan& p, InferenceGroup g) { return p.group_bytes[(int)g]; }

}  // namespace

TEST(InferencePlan, ParametersAreBf16OrBorrowed) {
    const InferencePlan owned = plan(d12(), shape(1, 1024, 64, 960));
    EXPECT_EQ(group(owned, InferenceGroup::Parameters), 124475904u * 2);  // d12 with wte padded to 50304 rows
    InferenceShape s = shape(1, 1024, 64, 960);
    s.owns_params = false;
    EXPECT_EQ(group(plan(d12(), s), InferenceGroup::Parameters), 0u);
}

TEST(InferencePlan, KVCacheIsLayersTimesBatchTimesContext) {
    // K and V: L x B x C x max_T bf16 each
    EXPECT_EQ(group(plan(d12(), shape(1, 1024, 64, 960)), InferenceGroup::KVCache), 2ull * 12 * 1 * 768 * 1024 * 2);
    EXPECT_EQ(group(plan(d12(), shape(64, 1024, 64, 960)), InferenceGroup::KVCache), 2ull * 12 * 64 * 768 * 1024 * 2);
    EXPECT_EQ(group(plan(d48(), shape(1, 1024, 64, 960)), InferenceGroup::KVCache), 2ull * 48 * 1 * 1600 * 1024 * 2);
    EXPECT_EQ(group(plan(d48(), shape(64, 1024, 64, 960)), InferenceGroup::KVCache), 2ull * 48 * 64 * 1600 * 1024 * 2);
}

TEST(InferencePlan, PrefillIsOneLayerOfActivations) {
    // per position: 17 rows of C bf16 (encoded, ln, qkv 3, atty, residual2, residual3, fch 4, fch_gelu 4,
    // projection), the token id, LayerNorm mean and rstd, and flash's LSE per head
    const size_t per_position = 17 * 768 * 2 + 4 + 2 * 4 + 12 * 4;
    EXPECT_EQ(group(plan(d12(), shape(1, 1024, 64, 960)), InferenceGroup::Prefill), 64 * per_position);
    EXPECT_EQ(group(plan(d12(), shape(64, 1024, 64, 960)), InferenceGroup::Prefill), 64 * 64 * per_position);
    GPT2Config deep = d12();
    deep.num_layers = 48;  // every layer reuses the one layer's buffers
    EXPECT_EQ(group(plan(deep, shape(64, 1024, 64, 960)), InferenceGroup::Prefill),
              group(plan(d12(), shape(64, 1024, 64, 960)), InferenceGroup::Prefill));
}

// A server's engine (llmc/inference/slots.cuh): B slots in the cache and the decode step, prompts prefilled one slot
// at a time, so the prefill's layer holds one sequence of up to context - 1 positions whatever B is.
TEST(InferencePlan, ServingPrefillsOneSlotAtATime) {
    const size_t per_position = 17 * 768 * 2 + 4 + 2 * 4 + 12 * 4;
    InferenceShape served = shape(64, 1025, 1024, 1);  // a context of 1025: rows of 1024 (no 256-byte rounding)
    served.prefill_B = 1;
    const InferencePlan p = plan(d12(), served);
    EXPECT_EQ(group(p, InferenceGroup::Prefill), 1024 * per_position);
    EXPECT_EQ(group(p, InferenceGroup::KVCache), group(plan(d12(), shape(64, 1025, 64, 960)), InferenceGroup::KVCache));
    EXPECT_EQ(group(p, InferenceGroup::Decode), group(plan(d12(), shape(64, 1025, 64, 1)), InferenceGroup::Decode));
    served.prefill_B = 0;  // 0: all B at once, as generate() prefills
    EXPECT_EQ(group(plan(d12(), served), InferenceGroup::Prefill), 64 * 1024 * per_position);
}

// A server's shape (slots_shape): P prompts per prefill forward, each prompt's slot and length, and rows of logits
// of their own beside the decode step's, so a prefill queued behind a step leaves the step's logits alone.
TEST(InferencePlan, ServingPrefillsPromptsIntoTheirOwnRows) {
    const size_t per_position = 17 * 768 * 2 + 4 + 2 * 4 + 12 * 4;
    InferenceShape one = shape(64, 1025, 1024, 1), eight = one;
    one.prefill_B = 1, eight.prefill_B = 8;
    one.row_buckets = eight.row_buckets = true;
    eight.slot_prefill = true;
    const InferencePlan a = plan(d12(), one), b = plan(d12(), eight);
    EXPECT_EQ(group(b, InferenceGroup::Prefill), 8 * 1024 * per_position + 2 * 256);  // + slots, lengths (8 ints)
    EXPECT_EQ(group(b, InferenceGroup::Classifier), group(a, InferenceGroup::Classifier) + 8 * 768 * 2 + 8 * 50304 * 2);
    EXPECT_EQ(group(b, InferenceGroup::Decode), group(a, InferenceGroup::Decode));
}

// A server's own buffers (llmc/serving/gpu_engine.cuh) are rows of the plan too: on the device the prompts' pick
// settings, coins and picks (P rows), the pickers' scratch and each step's upload; in mapped host memory the same
// prompts' rows (a set per prefill in flight) and, per step in flight, its upload, its picks and its logits rows.
// Nothing of them without a server.
TEST(InferencePlan, ServingBuffersAreInThePlan) {
    InferenceShape served = shape(64, 1025, 1024, 1);
    served.prefill_B = 8, served.row_buckets = true, served.slot_prefill = true;
    const InferencePlan without = plan(d12(), served);
    EXPECT_EQ(group(without, InferenceGroup::Server), 0u);
    served.server_steps = 2;
    const InferencePlan with = plan(d12(), served);
    // lengths, pick settings, coins of 64 rows and the lone slot, each step's part 256-byte aligned
    const size_t upload = (64 * (4 + sizeof(PickParams) + 4) + 4 + 255) / 256 * 256;
    const size_t device = 256 + 256 + 256 + 256 + 2 * upload;  // 8 settings, 8 coins, 16 picks, 64 ints of scratch
    EXPECT_EQ(group(with, InferenceGroup::Server), device);
    EXPECT_EQ(with.block, without.block + device);
    // the prompts' rows in three sets (two whole prefills in flight, one call that waits), then per step its upload,
    // picks (2 x 64 ints) and logits
    const size_t host = 3 * (256 + 256 + 256) + 2 * upload + 2 * 512 + 2 * 64 * 50304 * 2;
    EXPECT_EQ(group(with, InferenceGroup::HostMapped), group(without, InferenceGroup::HostMapped) + host);
    EXPECT_EQ(with.device_total(), without.device_total() + device);  // the host rows are not device memory
}

TEST(InferencePlan, DecodeScratchIsBatchRows) {
    const InferencePlan b1 = plan(d12(), shape(1, 1024, 64, 960)), b1_long = plan(d12(), shape(1, 1024, 512, 512));
    EXPECT_EQ(group(b1, InferenceGroup::Decode), group(b1_long, InferenceGroup::Decode) + 448 * 4);  // fewer coins
    // B rows of 15 C-wide bf16 rows (x, ln, qkv 3, atty, residual2, residual3, fch 4, fch_gelu 4, projection) at
    // most, the rest is counts, coins and partials
    EXPECT_LT(group(b1, InferenceGroup::Decode), 1u << 20);
    EXPECT_EQ(group(b1, InferenceGroup::Classifier), 256 + 768 * 2 + 50304 * 2);  // lengths, lnf, logits (B, Vp)
}

TEST(InferencePlan, NoGradientsOrOptimizerState) {
    for (const GPT2Config& c : {d12(), d48()}) {
        for (int B : {1, 64}) {
            const InferenceShape s = shape(B, 1024, 64, 960);
            const std::vector<InferenceBuffer> table = inference_memory_table(c, s, sizes(c, s));
            for (const InferenceBuffer& b : table) {
                EXPECT_EQ(b.name.find("grad"), std::string::npos) << b.name;
                EXPECT_EQ(b.name.find("AdamW"), std::string::npos) << b.name;
                EXPECT_EQ(b.name.find("master"), std::string::npos) << b.name;
            }
            const InferencePlan p = inference_plan_of(table);
            size_t sum = 0;
            for (InferenceGroup g : {InferenceGroup::Parameters, InferenceGroup::KVCache, InferenceGroup::Prefill,
                                     InferenceGroup::Decode, InferenceGroup::Classifier, InferenceGroup::Workspace})
                sum += group(p, g);
            EXPECT_EQ(p.device_total(), sum);
        }
    }
}

TEST(InferencePlan, D48AtBatchOneFitsWellUnderSixGiB) {
    // 1.56 G parameters x 2 bytes + 48 layers x 2 x 1024 x 1600 x 2 bytes of cache + scratch
    const InferencePlan p = plan(d48(), shape(1, 1024, 64, 960));
    EXPECT_EQ(group(p, InferenceGroup::Parameters), 1557686400ull * 2);
    EXPECT_LT(p.device_total(), 3.6 * 1024 * 1024 * 1024);
    EXPECT_LT(group(p, InferenceGroup::Prefill) + group(p, InferenceGroup::Decode), 8u << 20);
}

TEST(InferencePlan, RecomputeHasNoCacheAndNoDecodeStep) {
    GPT2Config c = d12();
    c.num_heads = 24;  // head size 32: no KV cache
    const InferencePlan p = plan(c, shape(2, 100, 128, 36, /*cached=*/false));
    EXPECT_EQ(group(p, InferenceGroup::KVCache), 0u);
    EXPECT_EQ(group(p, InferenceGroup::Decode), 0u);
    EXPECT_EQ(group(p, InferenceGroup::HostMapped), 0u);
    EXPECT_GT(group(p, InferenceGroup::Prefill), 0u);
}

TEST(InferencePlan, PrintoutHasAGroupRowAndTheTotal) {
    const InferenceShape s = shape(1, 1024, 64, 960);
    const std::vector<InferenceBuffer> table = inference_memory_table(d12(), s, sizes(d12(), s));
    auto text = [&](bool buffers) {
        std::string all;
        for (const std::string& l : inference_plan_lines(table, buffers)) all += l + "\n";
        return all;
    };
    const std::string groups = text(false), all = text(true);
    for (const char* want : {"| parameters ", "| KV cache ", "| prefill (one layer) ", "| decode step ",
                             "| classifier ", "| workspace ", "| total on the device "}) {
        EXPECT_NE(groups.find(want), std::string::npos) << want << "\n" << groups;
        EXPECT_NE(all.find(want), std::string::npos) << want << "\n" << all;
    }
    EXPECT_EQ(groups.find("|   K (L,B,NH,max_T,HS) "), std::string::npos);
    EXPECT_NE(all.find("|   K (L,B,NH,max_T,HS) "), std::string::npos);
    EXPECT_EQ(all.find("attention workspace"), std::string::npos);  // flash: none, and empty rows are left out
}

TEST(InferencePlan, PersistentStepRowsOnlyWhenItRuns) {
    // d12 at batch 1: 61 phases (their list, 96 bytes each as the GPU side has them), a counter each, a greedy rank
    // per SM (132), and L x 10 C bf16 of activations then 12 heads x 8 chunks x 68 floats of attention partials;
    // each buffer 256-byte aligned, all in the decode group
    const InferenceShape s = shape(1, 1024, 64, 960);
    InferenceKernelSizes k = sizes(d12(), s);
    const size_t without = group(inference_plan_of(inference_memory_table(d12(), s, k)), InferenceGroup::Decode);
    k.persistent_phase_bytes = 61 * 96, k.persistent_counters = 61, k.persistent_picks = 132;
    k.persistent_activations = 12 * 10 * 768 + 2 * 12 * 8 * 68;
    const size_t with = group(inference_plan_of(inference_memory_table(d12(), s, k)), InferenceGroup::Decode);
    EXPECT_EQ(with - without, round_up(61 * 96, 256) + round_up(61 * 4, 256) + round_up(132 * 8, 256) +
                                  round_up((12 * 10 * 768 + 2 * 12 * 8 * 68) * 2, 256));
    InferenceShape uncached = s;
    uncached.cached = false;
    EXPECT_EQ(group(inference_plan_of(inference_memory_table(d12(), uncached, k)), InferenceGroup::Decode), 0u);
}
