// GPU test of generation's decode path (llmc/inference/gpt2_decode.cuh): a prefill of prompts of different lengths, then
// decode steps; after every step each sequence's logits must match the full forward (gpt2_forward) over the same
// prefix at its last position. They round in different orders (a product of B rows against one of B·T rows, decode
// attention against the forward's), so the bound is on rel-L2: 2e-2 in BF16 builds (the order of test_gpt2cu's BF16
// reference bounds), 1e-5 in FP32 builds; plus the same argmax wherever the top two logits are more than 0.1 apart.
// Random-init models (L 2, C 128, 2 heads of 64; L 1, C 768, 12 heads of 64; L 1, C 256, 2 heads of 128; V 1000,
// max T 256), fresh random prompts and tokens. The steps run as a CUDA Graph after the first.
// Then the loop on the GPU as generate_gpt2cu runs it (decode_loop_*: the token picker feeds the next step), greedy
// and sampling (temperature, top-k, top-p), with and without the graph: every token must be the host sampler's
// (llmc/inference/sampler.h) on the logits the step left (the prefill's at the prompt's end for the first), for the same
// coin — or, for a coin within 1e-5 of a CDF boundary, a token between the host's for coin ± 1e-5 (fp32 sums
// against double) — and the graph and plain runs must give the same tokens. The cache is floatX: both builds.
#include <cmath>
#include <cstdio>
#include <vector>

#include "llmc/inference/gpt2_decode.cuh"
#include "llmc/core/rand.h"
#include "llmc/inference/sampler.h"
#include "reference/compare.h"

// Every check on one random-init model; returns the failures and prints one line (label: the model's name).
static int test_model(const GPT2Config& c, const char* label) {
    const double tol = kFloatXIsBF16 ? 2e-2 : 1e-5;
    GPT2 m;
    gpt2_build_random(&m, c, 1234);
    const std::vector<int> prompt_len = {5, 64, 17};
    const int B = (int)prompt_len.size(), steps = 40, T = 128;
    gpt2_allocate(&m, B, T, 0, kFloatXIsBF16 ? AttentionBackend::Flash : AttentionBackend::Materialized);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    m.stream = stream;

    Rng rng(42);
    std::vector<std::vector<int>> seq(B);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < prompt_len[b]; t++) seq[b].push_back((int)(rng.uniform() * c.vocab_size) % c.vocab_size);

    // the full forward over every sequence's current prefix (padded with token 0); logits at each last position
    auto full_logits = [&](std::vector<std::vector<float>>* out) {
        int longest = 0;
        for (const auto& s : seq) longest = std::max(longest, (int)s.size());
        std::vector<int> batch((size_t)B * longest, 0);
        for (int b = 0; b < B; b++)
            for (size_t t = 0; t < seq[b].size(); t++) batch[(size_t)b * longest + t] = seq[b][t];
        gpt2_forward(&m, batch.data(), nullptr, B, longest);
        out->assign(B, std::vector<float>(c.padded_vocab_size));
        for (int b = 0; b < B; b++) gpt2_logits_to_host(&m, b, (int)seq[b].size() - 1, (*out)[b].data());
        return longest;
    };

    std::vector<std::vector<float>> ref;
    int failures = 0;
    double worst = 0, worst_by_path[7] = {-1, -1, -1, -1, -1, -1, -1};  // -1: the path does not run in this build
    for (int path = 0; path < 7; path++) {  // decode_matvec (LayerNorm, cache append fused; BF16 builds): 0 one
        // group of rows, 1 groups of 2 rows, 2 of 1 row (the register path; the classifier of 1 and 2 by cuBLASLt);
        // 3 decode_mma (BF16 builds); 4 cuBLASLt, decode attention's split kernel after its append kernel; 5
        // cuBLASLt, the per-head kernel appending (batch 64's path); 6 decode_mma, the per-head kernel reading the
        // K and V the product appended (batches 6-16 at d12; BF16 builds). The attention kernel is forced.
    if ((path < 3 && !kDecodeMatvecAvailable) || ((path == 3 || path == 6) && !kDecodeMmaAvailable)) continue;
    for (int b = 0; b < B; b++) seq[b].resize(prompt_len[b]);
    const int Tp = full_logits(&ref);  // the prefill
    KVCache cache = kv_cache_allocate(&m, B, T);
    // forced: B = 3 is above kDecodeMatvecMaxB, where kv_cache_allocate picks decode_mma in BF16 builds
    cache.products = path < 3                  ? DecodeProducts::Matvec
                     : path == 3 || path == 6 ? DecodeProducts::Mma
                                              : DecodeProducts::Cublas;
    cache.attention = path >= 5 ? DecodeAttentionKernel::PerHead : DecodeAttentionKernel::Split;
    cache.matvec_rows = path == 1 ? 2 : path == 2 ? 1 : kDecodeMaxRows;
    kv_cache_fill(&m, &cache, Tp, prompt_len);
    DecodeGraph graph;
    for (int step = 0; step < steps; step++) {
        std::vector<int> next(B);
        for (int b = 0; b < B; b++) {
            next[b] = (int)(rng.uniform() * c.vocab_size) % c.vocab_size;
            seq[b].push_back(next[b]);
        }
        gpt2_decode_step_graph(&m, &cache, next, &graph);
        std::vector<std::vector<float>> got(B, std::vector<float>(c.padded_vocab_size));
        for (int b = 0; b < B; b++) gpt2_logits_to_host(&m, b, 0, got[b].data());
        full_logits(&ref);
        for (int b = 0; b < B; b++) {
            const ErrorStats e = compare(got[b].data(), ref[b].data(), c.vocab_size);
            worst = std::max(worst, e.rel_l2);
            worst_by_path[path] = std::max(worst_by_path[path], e.rel_l2);
            int arg_got = 0, arg_ref = 0, second = -1;
            for (int i = 1; i < c.vocab_size; i++) {
                if (got[b][i] > got[b][arg_got]) arg_got = i;
                if (ref[b][i] > ref[b][arg_ref]) { second = arg_ref; arg_ref = i; }
                else if (second < 0 || ref[b][i] > ref[b][second]) second = i;
            }
            const bool clear_top = second < 0 || ref[b][arg_ref] - ref[b][second] > 0.1f;
            if (!(e.rel_l2 <= tol) || (clear_top && arg_got != arg_ref)) {
                if (failures < 10)
                    printf("FAIL step %d sequence %d (length %zu): logits rel-L2 %.3e, argmax %d vs %d\n", step, b,
                           seq[b].size(), e.rel_l2, arg_got, arg_ref);
                failures++;
            }
        }
    }
    decode_graph_free(&graph);
    kv_cache_free(&cache);
    }

    // ---- the loop on the GPU
    const int new_tokens = 24;
    int boundary = 0, picks = 0;
    // matvec_rows 0: the path kv_cache_allocate picks (decode_mma at B = 3 in BF16 builds, else cuBLASLt); else
    // decode_matvec forced with that many rows per group, the classifier too (greedy: the pick folded into it;
    // rows 1 and 2: several groups)
    struct Mode { PickParams pick; bool graph; int matvec_rows; };
    const std::vector<Mode> modes = {{{0.f, 0, 1.f}, true, 0},     {{0.f, 0, 1.f}, false, 0},
                                     {{1.f, 0, 1.f}, true, 0},     {{0.9f, 20, 0.9f}, true, 0},
                                     {{0.9f, 20, 0.9f}, false, 0}, {{0.f, 0, 1.f}, true, 1},
                                     {{0.f, 0, 1.f}, false, 2},    {{0.f, 0, 1.f}, true, kDecodeMaxRows},
                                     {{0.9f, 20, 0.9f}, true, 1}};
    std::vector<std::vector<int>> tokens_of_mode;
    int modes_run = 0;
    for (const Mode& mode : modes) {
        for (int b = 0; b < B; b++) seq[b].resize(prompt_len[b]);
        const int Tq = full_logits(&ref);
        if (mode.matvec_rows > 0 && !kDecodeMatvecAvailable) continue;
        modes_run++;
        KVCache lc = kv_cache_allocate(&m, B, T);
        if (mode.matvec_rows > 0) lc.products = DecodeProducts::Matvec, lc.matvec_rows = mode.matvec_rows, lc.matvec_classifier_groups = B;
        kv_cache_fill(&m, &lc, Tq, prompt_len);
        Rng coin_rng(7);
        std::vector<float> coins((size_t)new_tokens * B);
        for (float& x : coins) x = coin_rng.uniform();
        DecodeLoop loop = decode_loop_create(lc, mode.pick, coins, new_tokens, mode.graph);
        decode_loop_begin(&m, &lc, &loop);
        std::vector<int> got;
        for (int g = 0; g < new_tokens; g++) {
            if (g > 0) decode_loop_step(&m, &lc, &loop);
            cudaCheck(cudaStreamSynchronize(stream));
            for (int b = 0; b < B; b++) {
                std::vector<float> logits(c.padded_vocab_size);
                gpt2_logits_to_host(&m, b, g == 0 ? prompt_len[b] - 1 : 0, logits.data());
                const PickParams& p = mode.pick;
                auto host = [&](float coin) { return sample_token(logits.data(), c.vocab_size, p.temperature, p.top_k, p.top_p, coin); };
                const float coin = coins[(size_t)g * B + b];
                const int tok = loop.tokens[(size_t)g * B + b];
                got.push_back(tok);
                picks++;
                bool ok = tok == host(coin);
                if (!ok && !p.greedy() && host(std::max(0.f, coin - 1e-5f)) <= tok && tok <= host(std::min(0.99999994f, coin + 1e-5f)))
                    ok = true, boundary++;  // the CDF runs in id order
                if (!ok) {
                    if (failures < 10)
                        printf("FAIL loop (T %.1f k %d p %.2f graph %d matvec rows %d) token %d of sequence %d: GPU %d, "
                               "host sampler %d\n", p.temperature, p.top_k, p.top_p, mode.graph, mode.matvec_rows, g, b,
                               tok, host(coin));
                    failures++;
                }
            }
        }
        tokens_of_mode.push_back(got);
        decode_loop_free(&loop);
        kv_cache_free(&lc);
    }
    const bool same_graph_plain = tokens_of_mode[0] == tokens_of_mode[1] && tokens_of_mode[3] == tokens_of_mode[4];
    if (!same_graph_plain) {
        printf("FAIL loop: the CUDA Graph and plain runs chose different tokens\n");
        failures++;
    }
    if (boundary * 50 > picks) {
        printf("FAIL loop: %d of %d picks on a CDF boundary\n", boundary, picks);
        failures++;
    }
    m.stream = 0;
    cudaCheck(cudaStreamDestroy(stream));
    gpt2_free(&m);
    char by_path[7][16];
    for (int p = 0; p < 7; p++) {
        if (worst_by_path[p] < 0) snprintf(by_path[p], sizeof(by_path[p]), "not run");
        else snprintf(by_path[p], sizeof(by_path[p]), "%.3e", worst_by_path[p]);
    }
    printf("test_decode (%s, %s): %d decode steps x %d sequences (CUDA Graph after the first), worst logits rel-L2 "
           "%.3e (<= %.0e; decode_matvec %s, in groups of 2 rows %s, of 1 row %s, decode_mma %s, cuBLASLt %s, with "
           "per-head attention %s, decode_mma with per-head attention %s); the loop on the GPU, %d modes x %d tokens x %d sequences = the host sampler on "
           "the step's logits (%d on a CDF boundary), graph = plain: %s\n", PRECISION_NAME, label, steps, B, worst,
           tol, by_path[0], by_path[1], by_path[2], by_path[3], by_path[4], by_path[5], by_path[6], modes_run, new_tokens, B,
           boundary, failures ? "FAIL" : "PASS");
    return failures;
}

int main() {
    require_cuda_device("test_decode");
    // max_T, V, Vp, L, NH, C: a small model, and one layer at d12's widths (products of 768 and 3072 rows:
    // decode_matvec's wide preload for the fc projection, QKV columns in one pass)
    int failures = test_model(GPT2Config{256, 1000, 1024, 2, 2, 128}, "L2 C128");
    failures += test_model(GPT2Config{256, 1000, 1024, 1, 12, 768}, "L1 C768");
    failures += test_model(GPT2Config{256, 1000, 1024, 1, 2, 256}, "L1 C256 HS128");  // decode attention at HS 128
    return failures ? 1 : 0;
}
