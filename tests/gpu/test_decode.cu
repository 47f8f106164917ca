// GPU test of generation (llmc/inference/: the engine, its prefill, decode step, loop and generate()) against the
// training model's full forward (gpt2_forward) built from the same random weights; the engine borrows the training
// model's parameters or uploads the same host weights (alternating, so both are checked).
//  1. Prefill and decode steps: prompts of different lengths, then decode steps on random tokens; the prefill's logits
//     (each prompt's last position) and every step's must match the full forward over the same prefix at its last
//     position. They round in different orders (products of B rows against B·T rows, decode attention against the
//     forward's), so the bound is on rel-L2: 2e-2 in BF16 builds (the order of test_gpt2cu's BF16 reference
//     bounds), 1e-5 in FP32 builds; plus the same argmax wherever the top two logits are more than 0.1 apart. Every
//     product path and decode attention kernel is forced once; the steps run as a CUDA Graph after the first.
//  2. The loop on the GPU (decode_loop_*: the token picker feeds the next step), greedy and sampling (temperature,
//     top-k, top-p), with and without the graph: every token must be the host sampler's (llmc/inference/sampler.h)
//     on the logits the GPU left (the prefill's for the first), for the same coin — or, for a coin within 1e-5 of a
//     CDF boundary, a token between the host's for coin ± 1e-5 (fp32 sums against double) — the graph and plain
//     runs must agree, and generate() on the same engine must return the same tokens. The loop's graph is the one
//     the engine captured at set-up.
//  3. A server's slots (llmc/inference/slots.cuh): prompts prefilled in groups of up to 8 into scattered slots
//     (three rounds, so some (rows, T) buckets replay their graphs), each prompt's logits against the full forward;
//     then decode steps over the first R slots only (R the smallest of 1, 2, 4, ..., B covering the busy ones:
//     products and graph chosen per R), the busy count changing from step to step, every other step on input tokens
//     committed on the device (inference_commit_picks, failed picks as 0); every busy slot's logits against the full
//     forward (bounds of 1), so a step over fewer rows neither reads nor disturbs another slot's cache or the
//     workspaces' counts.
//  4. Long prompts in chunks (inference_prefill_chunk: a chunk's positions as rows of one step over the cache): six
//     slots' prompts in chunks of 1..84 positions, one slot's after another's, whole prompts into a seventh slot
//     between them; each prompt's last logits against the full forward (bounds of 1), then decode steps over all
//     slots, which read every position the chunks wrote.
//  5. The recompute fallback (head size 32: no KV cache): each forward's logits at the sequences' last positions
//     against the full forward's, and generate()'s greedy tokens against the full forward's argmax where it is clear.
//  6. The persistent step (batch 1, Hopper, BF16; skipped elsewhere, saying why): the prefill's and decode steps'
//     logits against the full forward as in 1, then generation through the loop, greedy (graph and plain) and
//     sampled, each token the host's pick on the step's logits, and generate() the loop's tokens; with its products
//     on FFMA and on the tensor cores (LLMC_DECODE_TILES; C 128, 768, 1600: rows of K in one to five chunks). And
//     Auto's choice, in every build: taken from C 1024 on where the kernel runs (on a server, for its lone busy
//     slot's steps), never when not allowed, with decode attention's kernel forced, or where the kernel does not run.
// Random-init models (L 2, C 128, 2 heads of 64; L 1, C 768, 12 heads of 64; L 1, C 256, 2 heads of 128; L 2, C 128,
// 4 heads of 32; L 1, C 1280, 20 heads of 64; V 1000, max T 256), fresh random prompts and tokens. The cache is
// floatX: both builds.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/inference/generate.cuh"
#include "llmc/inference/sampler.h"
#include "llmc/inference/slots.cuh"
#include "llmc/model/gpt2_step.cuh"
#include "reference/compare.h"

namespace {

const double kTol = kFloatXIsBF16 ? 2e-2 : 1e-5;
int failures = 0;

void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char* fmt, ...) {
    if (failures++ >= 10) return;
    va_list args;
    va_start(args, fmt);
    printf("FAIL ");
    vprintf(fmt, args);
    printf("\n");
    va_end(args);
}

// The training model built from seed 1234 and allocated for B x T, the weights it was built from, and its full
// forward's logits at each sequence's last position.
struct Reference {
    GPT2 m;
    std::vector<float> host_params;
    Reference(const GPT2Config& c, int B, int T) {
        gpt2_build_random(&m, c, 1234);
        host_params = m.host_params;  // gpt2_allocate uploads and drops them
        const int HS = c.channels / c.num_heads;
        const bool flash = kFloatXIsBF16 && (HS == 64 || HS == 128);
        gpt2_allocate(&m, B, T, 0, flash ? AttentionBackend::Flash : AttentionBackend::Materialized);
        cudaCheck(cudaDeviceSynchronize());  // the upload has landed before an engine's stream reads it
    }
    ~Reference() { gpt2_free(&m); }
    std::vector<std::vector<float>> last_logits(const std::vector<std::vector<int>>& seq) {
        const int B = (int)seq.size();
        int longest = 0;
        for (const auto& s : seq) longest = std::max(longest, (int)s.size());
        std::vector<int> batch((size_t)B * longest, 0);
        for (int b = 0; b < B; b++) std::copy(seq[b].begin(), seq[b].end(), batch.begin() + (size_t)b * longest);
        gpt2_forward(&m, batch.data(), nullptr, B, longest);
        std::vector<std::vector<float>> out(B, std::vector<float>(m.config.padded_vocab_size));
        for (int b = 0; b < B; b++) gpt2_logits_to_host(&m, b, (int)seq[b].size() - 1, out[b].data());
        return out;
    }
};

std::vector<std::vector<float>> engine_logits(InferenceEngine* e) {
    std::vector<std::vector<float>> out(e->shape.B, std::vector<float>(e->config.padded_vocab_size));
    for (int b = 0; b < e->shape.B; b++) inference_logits_to_host(e, b, out[b].data());
    return out;
}

int argmax(const std::vector<float>& l, int V) { return argmax_token(l.data(), V); }

// Whether the reference's top two logits are more than 0.1 apart (so rounding cannot swap them); *top the first.
bool clear_top(const std::vector<float>& ref, int V, int* top) {
    *top = argmax(ref, V);
    float second = -INFINITY;
    for (int i = 0; i < V; i++)
        if (i != *top) second = std::max(second, ref[i]);
    return ref[*top] - second > 0.1f;
}

// rel-L2 within the bound, and the same argmax where the reference's is clear; returns the rel-L2.
double check_logits(const std::vector<float>& got, const std::vector<float>& ref, int V, const char* what, int step,
                    int b) {
    const ErrorStats e = compare(got.data(), ref.data(), V);
    int top = 0;
    if (!(e.rel_l2 <= kTol) || (clear_top(ref, V, &top) && argmax(got, V) != top))
        fail("%s step %d sequence %d: logits rel-L2 %.3e, argmax %d vs %d", what, step, b, e.rel_l2, argmax(got, V),
             top);
    return e.rel_l2;
}

InferenceShape shape_of(int B, int max_T, int prefill_T, int max_new) {
    InferenceShape s;
    s.B = B, s.max_T = max_T, s.prefill_T = prefill_T, s.max_new = max_new;
    return s;
}

void make_engine(InferenceEngine* e, Reference& ref, const InferenceShape& shape, const InferenceOptions& o,
                 bool borrow) {
    if (borrow) inference_engine_borrow(e, ref.m.config, ref.m.params, shape, o);
    else inference_engine_upload(e, ref.m.config, ref.host_params, shape, o);
}

// Generation through the loop on the GPU (engine e, B sequences, `coins` one per token and sequence): the prompts
// prefilled, then every token the host sampler's pick on the step's logits (a sampled pick within 1e-5 of a CDF
// boundary counts, in *boundary), then generate()'s tokens the loop's. Returns the loop's tokens, token g of
// sequence b at [g * B + b]; failures are named by `what`.
std::vector<int> check_loop(InferenceEngine* e, const std::vector<std::vector<int>>& prompts,
                            const std::vector<float>& coins, const PickParams& p, int new_tokens, const char* what,
                            int* boundary) {
    const int B = (int)prompts.size(), V = e->config.vocab_size;
    decode_loop_set_coins(&e->loop, coins, e->stream);
    inference_prefill(e, prompts, 0);
    std::vector<std::vector<float>> logits = engine_logits(e);  // the ones the first pick reads
    decode_loop_begin(e->step, &e->loop);
    std::vector<int> got;
    for (int g = 0; g < new_tokens; g++) {
        if (g > 0) {
            decode_loop_step(e->step, &e->loop);
            logits = engine_logits(e);
        }
        cudaCheck(cudaStreamSynchronize(e->stream));
        for (int b = 0; b < B; b++) {
            auto host = [&](float coin) {
                return sample_token(logits[b].data(), V, p.temperature, p.top_k, p.top_p, coin);
            };
            const float coin = coins[(size_t)g * B + b];
            const int tok = e->loop.tokens[(size_t)g * B + b];
            got.push_back(tok);
            bool ok = tok == host(coin);
            if (!ok && !p.greedy() && host(std::max(0.f, coin - 1e-5f)) <= tok &&
                tok <= host(std::min(0.99999994f, coin + 1e-5f)))
                ok = true, (*boundary)++;  // the CDF runs in id order
            if (!ok) fail("%s: token %d of sequence %d: GPU %d, host sampler %d", what, g, b, tok, host(coin));
        }
    }
    GenerateRequest request;
    request.prompts = prompts;
    request.max_new = new_tokens;
    request.coins = coins;
    const GenerateResult r = generate(e, request);
    bool same = (int)r.tokens.size() == B;
    for (int b = 0; same && b < B; b++)
        for (int g = 0; same && g < new_tokens; g++)
            same = (int)r.tokens[b].size() == new_tokens && r.tokens[b][g] == got[(size_t)g * B + b];
    if (!same) fail("%s: generate() differs from the loop's tokens", what);
    return got;
}

// Checks 1 and 2 on a model with a KV cache.
// --small: the small shapes only, with fewer steps (what tests/gpu/check_sanitizers.sh runs under the tools)
bool g_small = false;

void test_cached(const GPT2Config& c, const char* label) {
    const int f0 = failures;
    const std::vector<int> prompt_len = {5, 64, 17};
    const int B = (int)prompt_len.size(), steps = g_small ? 6 : 40, T = 128, longest = 64, V = c.vocab_size;
    Reference ref(c, B, T);
    Rng rng(42);
    std::vector<std::vector<int>> prompts(B);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < prompt_len[b]; t++) prompts[b].push_back((int)(rng.uniform() * V) % V);

    double worst_prefill = 0, worst_by_path[7] = {-1, -1, -1, -1, -1, -1, -1};  // -1: not run in this build
    for (int path = 0; path < 7; path++) {  // decode_matvec (LayerNorm, cache append fused; BF16 builds): 0 one
        // group of rows, 1 groups of 2 rows, 2 of 1 row (the register path; the classifier of 1 and 2 by cuBLASLt);
        // 3 decode_mma (BF16 builds); 4 cuBLASLt, decode attention's split kernel after its append kernel; 5
        // cuBLASLt, the per-head kernel appending (batch 64's path); 6 decode_mma, the per-head kernel reading the
        // K and V the product appended (batches 6-16 at d12; BF16 builds). The attention kernel is forced.
        if ((path < 3 && !kDecodeMatvecAvailable) || ((path == 3 || path == 6) && !kDecodeMmaAvailable)) continue;
        InferenceOptions o;
        o.pick = PickParams{0.f, 0, 1.f};
        o.decode.products = path < 3 ? DecodeProducts::Matvec : path == 3 || path == 6 ? DecodeProducts::Mma
                                                                                       : DecodeProducts::Cublas;
        o.decode.attention = path >= 5 ? DecodeAttentionKernel::PerHead : DecodeAttentionKernel::Split;
        o.decode.matvec_rows = path == 1 ? 2 : path == 2 ? 1 : kDecodeMaxRows;
        InferenceEngine e;
        make_engine(&e, ref, shape_of(B, T, longest, steps), o, path % 2 == 0);
        std::vector<std::vector<int>> seq = prompts;
        inference_prefill(&e, seq, 0);
        std::vector<std::vector<float>> got = engine_logits(&e), want = ref.last_logits(seq);
        for (int b = 0; b < B; b++)
            worst_prefill = std::max(worst_prefill, check_logits(got[b], want[b], V, "prefill", 0, b));
        worst_by_path[path] = 0;
        for (int step = 0; step < steps; step++) {
            std::vector<int> next(B);
            for (int b = 0; b < B; b++) seq[b].push_back(next[b] = (int)(rng.uniform() * V) % V);
            inference_decode_step(&e, next);
            got = engine_logits(&e), want = ref.last_logits(seq);
            for (int b = 0; b < B; b++) {
                const double rel_l2 = check_logits(got[b], want[b], V, "decode", step, b);
                worst_by_path[path] = std::max(worst_by_path[path], rel_l2);
            }
        }
        inference_engine_free(&e);
    }

    // ---- the loop on the GPU, and generate()
    const int new_tokens = g_small ? 6 : 24;
    int boundary = 0, picks = 0, modes_run = 0;
    // matvec_rows 0: the path the engine picks (decode_mma at B = 3 in BF16 builds, else cuBLASLt); else
    // decode_matvec forced with that many rows per group, the classifier too (greedy: the pick folded into it;
    // rows 1 and 2: several groups)
    struct Mode { PickParams pick; bool graph; int matvec_rows; };
    const std::vector<Mode> modes = {{{0.f, 0, 1.f}, true, 0},     {{0.f, 0, 1.f}, false, 0},
                                     {{1.f, 0, 1.f}, true, 0},     {{0.9f, 20, 0.9f}, true, 0},
                                     {{0.9f, 20, 0.9f}, false, 0}, {{0.f, 0, 1.f}, true, 1},
                                     {{0.f, 0, 1.f}, false, 2},    {{0.f, 0, 1.f}, true, kDecodeMaxRows},
                                     {{0.9f, 20, 0.9f}, true, 1}};
    std::vector<std::vector<int>> tokens_of_mode;
    for (const Mode& mode : modes) {
        if (mode.matvec_rows > 0 && !kDecodeMatvecAvailable) {
            tokens_of_mode.push_back({});
            continue;
        }
        modes_run++;
        InferenceOptions o;
        o.pick = mode.pick;
        o.graph = mode.graph;
        if (mode.matvec_rows > 0) {
            o.decode.products = DecodeProducts::Matvec;
            o.decode.matvec_rows = mode.matvec_rows, o.decode.matvec_classifier_groups = B;
        }
        InferenceEngine e;
        make_engine(&e, ref, shape_of(B, T, longest, new_tokens), o, modes_run % 2 == 0);
        Rng coin_rng(7);
        std::vector<float> coins((size_t)new_tokens * B);
        for (float& x : coins) x = coin_rng.uniform();
        char what[96];
        snprintf(what, sizeof(what), "loop (T %.1f k %d p %.2f graph %d matvec rows %d)", mode.pick.temperature,
                 mode.pick.top_k, mode.pick.top_p, mode.graph, mode.matvec_rows);
        const std::vector<int> got = check_loop(&e, prompts, coins, mode.pick, new_tokens, what, &boundary);
        picks += (int)got.size();
        tokens_of_mode.push_back(got);
        inference_engine_free(&e);
    }
    if (tokens_of_mode[0] != tokens_of_mode[1] || tokens_of_mode[3] != tokens_of_mode[4])
        fail("loop: the CUDA Graph and plain runs chose different tokens");
    if (boundary * 50 > picks) fail("loop: %d of %d picks on a CDF boundary", boundary, picks);
    char by_path[7][16];
    for (int p = 0; p < 7; p++) {
        if (worst_by_path[p] < 0) snprintf(by_path[p], sizeof(by_path[p]), "not run");
        else snprintf(by_path[p], sizeof(by_path[p]), "%.3e", worst_by_path[p]);
    }
    printf("test_decode (%s, %s): prefill worst logits rel-L2 %.3e; %d decode steps x %d sequences (CUDA Graph after "
           "the first), worst logits rel-L2 (<= %.0e): decode_matvec %s, in groups of 2 rows %s, of 1 row %s, "
           "decode_mma %s, cuBLASLt %s, with per-head attention %s, decode_mma with per-head attention %s; the loop on "
           "the GPU, %d modes x %d tokens x %d sequences = the host sampler on the step's logits (%d on a CDF "
           "boundary), graph = plain, generate() = the loop: %s\n", PRECISION_NAME, label, worst_prefill, steps, B,
           kTol, by_path[0], by_path[1], by_path[2], by_path[3], by_path[4], by_path[5], by_path[6], modes_run,
           new_tokens, B, boundary, failures == f0 ? "PASS" : "FAIL");
}

// Check 6's choice: Auto takes the persistent step at batch 1 from kPersistentAutoMinChannels on where the kernel
// runs, for a server's engine (4 slots, and 1) on its lone busy slot's steps only; never when not allowed
// (LLMC_DECODE_PERSISTENT=0) or with decode attention's kernel forced, nor where the kernel does not run (FP32
// builds, other GPUs: there it checks that Auto stays away).
void test_persistent_auto(const GPT2Config& c, const char* label) {
    const int f0 = failures, T = 128;
    const bool takes = persistent_step_supported(c, 1, nullptr) && c.channels >= kPersistentAutoMinChannels;
    Reference ref(c, 1, T);
    for (int way = 0; way < 3; way++) {  // allowed, not allowed, attention forced
        InferenceOptions a;
        a.decode.persistent_auto = way != 1;
        if (way == 2) a.decode.attention = DecodeAttentionKernel::Split;
        const bool want = way == 0 && takes;
        InferenceEngine e;
        make_engine(&e, ref, shape_of(1, T, 17, 8), a, false);
        if ((e.options.decode.products == DecodeProducts::Persistent) != want)
            fail("persistent: Auto at batch 1, C %d, way %d: the persistent step %s", c.channels, way,
                 want ? "not taken" : "taken");
        inference_engine_free(&e);
        for (int slots : {4, 1}) {
            InferenceEngine s;
            make_engine(&s, ref, slots_shape(slots, T, 1), a, false);
            if (s.persistent_lone != want || (slots > 1 && s.options.decode.products == DecodeProducts::Persistent))
                fail("persistent: Auto on a server's %d slots, C %d, way %d: lone steps %d, all steps %d", slots,
                     c.channels, way, (int)s.persistent_lone,
                     (int)(s.options.decode.products == DecodeProducts::Persistent));
            inference_engine_free(&s);
        }
    }
    printf("test_decode (%s, %s): Auto's persistent choice (%s here), for generation at batch 1 and a server's lone "
           "slot, not when LLMC_DECODE_PERSISTENT=0 or decode attention is forced: %s\n", PRECISION_NAME, label,
           takes ? "taken" : "not taken", failures == f0 ? "PASS" : "FAIL");
}

// Check 6: the persistent step (llmc/inference/persistent_step.cuh; batch 1, Hopper, BF16), where it runs: decode
// steps' logits against the full forward (the bounds of check 1), then generation through the loop, greedy with and
// without the graph (the pick folded into the kernel) and sampled in the graph (the picker after it), every token
// the host's pick on the step's logits, and generate() the loop's. tiles: its products on the tensor cores.
void test_persistent(const GPT2Config& c, const char* label, bool tiles = false) {
    std::string why;
    if (!persistent_step_supported(c, 1, &why)) {
        printf("test_decode (%s, %s): the persistent step skipped: %s\n", PRECISION_NAME, label, why.c_str());
        return;
    }
    const int f0 = failures, steps = g_small ? 6 : 24, T = 128, V = c.vocab_size;
    Reference ref(c, 1, T);
    Rng rng(11);
    std::vector<std::vector<int>> prompt(1);
    for (int t = 0; t < 17; t++) prompt[0].push_back((int)(rng.uniform() * V) % V);
    InferenceOptions o;
    o.pick = PickParams{0.f, 0, 1.f};
    o.decode.products = DecodeProducts::Persistent;
    o.decode.persistent_tiles = tiles;
    double worst = 0, worst_prefill = 0;
    {
        InferenceEngine e;
        make_engine(&e, ref, shape_of(1, T, 17, steps), o, true);
        std::vector<std::vector<int>> seq = prompt;
        // the engine's logits are read (its stream waited for) before the reference's forward starts: the two share
        // cuBLASLt's one workspace, so their GEMMs must not overlap (as arguments of one call, they could)
        inference_prefill(&e, seq, 0);
        std::vector<std::vector<float>> got = engine_logits(&e);
        worst_prefill = check_logits(got[0], ref.last_logits(seq)[0], V, "persistent's prefill", 0, 0);
        for (int step = 0; step < steps; step++) {
            const int next = (int)(rng.uniform() * V) % V;
            seq[0].push_back(next);
            inference_decode_step(&e, {next});
            got = engine_logits(&e);
            worst = std::max(worst, check_logits(got[0], ref.last_logits(seq)[0], V, "persistent", step, 0));
        }
        inference_engine_free(&e);
    }
    // greedy plain, greedy in the graph, and sampled in the graph (the picker after the kernel, not folded)
    std::vector<int> by_run[3];
    int boundary = 0;
    for (int run = 0; run < 3; run++) {
        o.graph = run > 0;
        o.pick = run == 2 ? PickParams{1.f, 0, 1.f} : PickParams{0.f, 0, 1.f};
        InferenceEngine e;
        make_engine(&e, ref, shape_of(1, T, 17, steps), o, run != 1);
        Rng coin_rng(13);
        std::vector<float> coins(steps);
        for (float& x : coins) x = coin_rng.uniform();
        char what[48];
        snprintf(what, sizeof(what), "persistent loop (run %d)", run);
        by_run[run] = check_loop(&e, prompt, coins, o.pick, steps, what, &boundary);
        inference_engine_free(&e);
    }
    if (boundary * 5 > steps) fail("persistent loop: %d of %d sampled picks on a CDF boundary", boundary, steps);
    if (by_run[0] != by_run[1]) fail("persistent loop: the CUDA Graph and plain runs chose different tokens");
    printf("test_decode (%s, %s): the persistent step%s, prefill logits rel-L2 %.3e, %d decode steps, worst logits "
           "rel-L2 %.3e (<= %.0e); the loop greedy with and without the graph and sampled (%d on a CDF boundary) = the "
           "host's pick, generate() = the loop: %s\n", PRECISION_NAME, label, tiles ? " on the tensor cores" : "",
           worst_prefill, steps, worst, kTol, boundary, failures == f0 ? "PASS" : "FAIL");
}

// Check 3: B slots; prompts prefilled in groups of up to 8 into scattered slots; steps over the first R, every other
// one with its input tokens committed on the device (as a server's picks are) instead of uploaded.
void test_slots(const GPT2Config& c, const char* label) {
    const int f0 = failures, B = 24, T = 128, V = c.vocab_size, P = 8;
    Reference ref(c, B, T);
    Rng rng(5);
    InferenceEngine e;
    make_engine(&e, ref, slots_shape(B, T, P), InferenceOptions{}, false);
    std::vector<std::vector<int>> seq(B);
    std::vector<float> row(c.padded_vocab_size);
    double worst_prefill = 0, worst = 0;
    std::vector<int> order(B);  // slots in a scattered order, prefilled in groups of these sizes
    for (int b = 0; b < B; b++) order[b] = (b * 7) % B;
    const std::vector<int> groups = {1, 3, 8, 5, 7};
    // three rounds, each a new sequence in every slot (whatever it held): the second and third use of a (rows, T)
    // bucket capture and replay its graph
    for (int g = 0, at = 0; g < 3 * (int)groups.size(); at += groups[g++ % groups.size()]) {
        std::vector<SlotPrompt> prompts;
        for (int i = 0; i < groups[g % groups.size()]; i++) {
            const int b = order[(at + i) % B], n = 1 + (int)(rng.uniform() * (g < 10 ? 30 : 100));
            seq[b].clear();
            for (int t = 0; t < n; t++) seq[b].push_back((int)(rng.uniform() * V) % V);
            prompts.push_back(SlotPrompt{b, seq[b].data(), n});
        }
        inference_prefill_slots(&e, prompts);
        std::vector<std::vector<float>> got(prompts.size(), std::vector<float>(c.padded_vocab_size));
        for (size_t i = 0; i < prompts.size(); i++) inference_prefill_logits_to_host(&e, (int)i, got[i].data());
        for (size_t i = 0; i < prompts.size(); i++)
            worst_prefill = std::max(worst_prefill, check_logits(got[i], ref.last_logits({seq[prompts[i].slot]})[0], V,
                                                                 "slot prefill", g, prompts[i].slot));
    }
    int* picks_d = nullptr;  // (2B): tokens, then non-finite flags, as pick_tokens_per_row leaves them
    cudaCheck(cudaMalloc(&picks_d, 2 * B * sizeof(int)));
    const std::vector<int> busy_of_step = {1, 1, 3, 3, 24, 24, 9, 2, 17, 17, 5, 24, 1, 12};
    std::vector<int> rows_run;
    int committed_wrong = 0;
    for (int step = 0; step < (int)busy_of_step.size(); step++) {
        const int busy = busy_of_step[step];
        const bool resident = step % 2 == 1;
        std::vector<int> tokens(B, 0), positions(B);
        for (int b = 0; b < B; b++) {
            positions[b] = (int)seq[b].size();  // idle rows below R: their own next position, not kept
            if (b < busy) seq[b].push_back(tokens[b] = (int)(rng.uniform() * V) % V);
        }
        int R = 0;
        if (resident) {  // the idle rows' picks "failed" (flag 1, token -1): committed as 0
            std::vector<int> picks(2 * B, 0);
            for (int b = 0; b < B; b++) picks[b] = b < busy ? tokens[b] : -1, picks[B + b] = b >= busy;
            cudaCheck(cudaMemcpy(picks_d, picks.data(), picks.size() * sizeof(int), cudaMemcpyHostToDevice));
            inference_commit_picks(&e, picks_d, picks_d + B, nullptr, B);
            std::vector<int> committed(B);
            cudaCheck(cudaStreamSynchronize(e.stream));
            cudaCheck(cudaMemcpy(committed.data(), e.step.s.tokens, B * sizeof(int), cudaMemcpyDeviceToHost));
            for (int b = 0; b < B; b++) committed_wrong += committed[b] != (b < busy ? tokens[b] : 0);
            R = inference_decode_resident(&e, positions, busy);
        } else {
            R = inference_decode_slots(&e, tokens, positions, busy);
        }
        rows_run.push_back(R);
        if (R < busy || (R > 1 && R / 2 >= busy && R != B) || R > B) fail("slots: %d busy slots ran as %d rows", busy, R);
        // the engine's rows first: its stream done before the reference's forward (one cuBLASLt workspace per process)
        std::vector<std::vector<float>> got(busy, std::vector<float>(c.padded_vocab_size));
        for (int b = 0; b < busy; b++) inference_logit_rows_to_host(&e, b, 1, got[b].data());
        std::vector<std::vector<int>> busy_seq(seq.begin(), seq.begin() + busy);
        const std::vector<std::vector<float>> want = ref.last_logits(busy_seq);
        for (int b = 0; b < busy; b++) worst = std::max(worst, check_logits(got[b], want[b], V, "slots decode", step, b));
    }
    if (committed_wrong) fail("slots: %d committed input tokens differ from the picks (failed picks: 0)", committed_wrong);
    cudaCheck(cudaFree(picks_d));
    int prefill_graphs = 0;
    for (const auto& g : e.prefill_graphs) prefill_graphs += g.second.exec != nullptr;
    if (prefill_graphs == 0) fail("slots: no prefill bucket was replayed from its graph");
    inference_engine_free(&e);
    std::string rows;
    for (int r : rows_run) rows += (rows.empty() ? "" : ",") + std::to_string(r);
    printf("test_decode (%s, %s): %d slots, prompts prefilled %d at most per forward into scattered slots, three "
           "rounds (%d prefill graphs; worst rel-L2 %.3e), %d steps over the first R slots (R = %s; every other one on tokens committed on the "
           "device), busy slots' logits worst rel-L2 %.3e (<= %.0e): %s\n", PRECISION_NAME, label, B, P,
           prefill_graphs, worst_prefill, (int)busy_of_step.size(), rows.c_str(), worst, kTol, failures == f0 ? "PASS" : "FAIL");
}

// Check 5 on a model whose head size decode attention does not take.
void test_recompute(const GPT2Config& c, const char* label) {
    const int f0 = failures;
    const std::vector<int> prompt_len = {5, 30, 17};
    const int B = (int)prompt_len.size(), longest = 30, new_tokens = 12, V = c.vocab_size;
    const InferenceShape shape = generation_shape(c, B, longest, new_tokens);
    Reference ref(c, B, shape.prefill_T);
    Rng rng(43);
    std::vector<std::vector<int>> prompts(B);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < prompt_len[b]; t++) prompts[b].push_back((int)(rng.uniform() * V) % V);
    InferenceOptions o;
    o.pick = PickParams{0.f, 0, 1.f};
    InferenceEngine e;
    make_engine(&e, ref, shape, o, false);
    double worst = 0;
    std::vector<std::vector<int>> seq = prompts;
    for (int step = 0; step < new_tokens; step++) {  // random continuations, one forward each
        inference_prefill(&e, seq, 0, shape.prefill_T);
        const std::vector<std::vector<float>> got = engine_logits(&e), want = ref.last_logits(seq);
        for (int b = 0; b < B; b++) worst = std::max(worst, check_logits(got[b], want[b], V, "recompute", step, b));
        for (int b = 0; b < B; b++) seq[b].push_back((int)(rng.uniform() * V) % V);
    }
    GenerateRequest request;
    request.prompts = prompts;
    request.max_new = new_tokens;
    const GenerateResult r = generate(&e, request);
    int clear = 0;
    seq = prompts;
    for (int g = 0; g < new_tokens; g++) {
        const std::vector<std::vector<float>> want = ref.last_logits(seq);
        for (int b = 0; b < B; b++) {
            int top = 0;
            if (clear_top(want[b], V, &top)) {
                clear++;
                if (r.tokens[b][g] != top)
                    fail("recompute generate() token %d of sequence %d: %d, the forward's argmax %d", g, b,
                         r.tokens[b][g], top);
            }
            seq[b].push_back(r.tokens[b][g]);
        }
    }
    inference_engine_free(&e);
    printf("test_decode (%s, %s): recompute, %d forwards x %d sequences, worst logits rel-L2 %.3e (<= %.0e); "
           "generate() greedy = the forward's argmax at %d clear positions: %s\n", PRECISION_NAME, label, new_tokens,
           B, worst, kTol, clear, failures == f0 ? "PASS" : "FAIL");
}

// Check 4: long prompts in chunks (inference_prefill_chunk): six slots' prompts of 5..123 tokens, one chunk per slot
// in turn, chunks of 1..84 positions (the most the prefill buffers of 2 x 127 take), a whole prompt prefilled into
// a seventh slot between the rounds; each prompt's last chunk's logits against the reference forward and at once a
// decode step of that slot, then decode steps over every slot (reading all that the chunks wrote into the cache).
void test_chunks(const GPT2Config& c, const char* label) {
    const int f0 = failures, B = 7, T = 128, V = c.vocab_size, P = 2;
    Reference ref(c, B, T);
    Rng rng(11);
    InferenceEngine e;
    make_engine(&e, ref, slots_shape(B, T, P), InferenceOptions{}, false);
    const int most = inference_chunk_rows(&e);
    if (most != 84) fail("chunks: %d positions a chunk, expected 84 (2 x 127 / 3)", most);
    const std::vector<int> lengths = {100, 37, 5, 84, 123, 60};  // slots 0..5; slot 6 gets whole prompts
    const std::vector<int> sizes = {1, 7, 16, 33, 84, 2, 50};
    std::vector<std::vector<int>> seq(B);
    for (int b = 0; b < 6; b++)
        for (int t = 0; t < lengths[b]; t++) seq[b].push_back((int)(rng.uniform() * V) % V);
    std::vector<int> done(6, 0);  // positions of each slot's sequence in the cache
    std::vector<float> got(c.padded_vocab_size);
    double worst_prefill = 0, worst = 0;
    int chunks = 0;
    auto all_in = [&] {
        for (int b = 0; b < 6; b++)
            if (done[b] < lengths[b]) return false;
        return true;
    };
    for (int round = 0, k = 0; !all_in(); round++) {
        for (int b = 0; b < 6; b++) {
            if (done[b] >= lengths[b]) continue;
            const int n = std::min({sizes[k++ % sizes.size()], lengths[b] - done[b], most});
            inference_prefill_chunk(&e, b, seq[b].data() + done[b], done[b], n);
            chunks++;
            done[b] += n;
            if (done[b] == lengths[b]) {
                inference_prefill_logits_to_host(&e, 0, got.data());
                worst_prefill = std::max(worst_prefill, check_logits(got, ref.last_logits({seq[b]})[0], V,
                                                                     "chunked prefill", round, b));
                // at once a decode step of this slot (the rows below it: throwaway rows at each one's next
                // position, which its next chunk or step writes again), reading every position its chunks wrote
                std::vector<int> tokens(B, 0), positions(B);
                for (int j = 0; j < B; j++) positions[j] = j < 6 ? done[j] : (int)seq[j].size();
                seq[b].push_back(tokens[b] = (int)(rng.uniform() * V) % V);
                inference_decode_slots(&e, tokens, positions, b + 1);
                inference_logit_rows_to_host(&e, b, 1, got.data());
                worst = std::max(worst, check_logits(got, ref.last_logits({seq[b]})[0], V, "step after chunks", round, b));
                done[b]++;  // (positions: the decode step's token is in the slot now)
            }
        }
        seq[6].clear();  // a whole prompt between the chunks, into a slot of its own
        for (int t = 0, n = 3 + round * 5; t < n; t++) seq[6].push_back((int)(rng.uniform() * V) % V);
        inference_prefill_slots(&e, {SlotPrompt{6, seq[6].data(), (int)seq[6].size()}});
    }
    for (int step = 0; step < 3; step++) {
        std::vector<int> tokens(B), positions(B);
        for (int b = 0; b < B; b++) {
            positions[b] = (int)seq[b].size();
            seq[b].push_back(tokens[b] = (int)(rng.uniform() * V) % V);
        }
        inference_decode_slots(&e, tokens, positions, B);
        std::vector<std::vector<float>> rows(B, std::vector<float>(c.padded_vocab_size));
        for (int b = 0; b < B; b++) inference_logit_rows_to_host(&e, b, 1, rows[b].data());
        const std::vector<std::vector<float>> want = ref.last_logits(seq);
        for (int b = 0; b < B; b++) {
            const std::string what = "after chunks (input " + std::to_string(seq[b].back()) + " at " +
                                     std::to_string(seq[b].size() - 1) + ")";
            worst = std::max(worst, check_logits(rows[b], want[b], V, what.c_str(), step, b));
        }
    }
    inference_engine_free(&e);
    printf("test_decode (%s, %s): 6 prompts of 5..123 tokens prefilled in %d chunks of 1..%d positions, one slot's "
           "chunk after another's, whole prompts between (last chunks' logits worst rel-L2 %.3e), a step of each slot "
           "at once and 3 over all %d slots after (worst rel-L2 %.3e, <= %.0e): %s\n", PRECISION_NAME, label, chunks, most, worst_prefill,
           B, worst, kTol, failures == f0 ? "PASS" : "FAIL");
}

}  // namespace

int main(int argc, char** argv) {
    require_cuda_device("test_decode");
    setvbuf(stdout, nullptr, _IOLBF, 0);  // each check's line as it ends: a sanitizer's log of a run cut short shows it
    // --small: every test on the small shapes only, fewer steps (the tools slow the whole run past their limit)
    // --only NAME[,NAME...]: some of the five tests, in the usual order (racecheck runs them side by side; a pair
    // shows whether one test's leftovers in reused device memory disturb another)
    const std::vector<std::string> names = {"cached", "slots", "chunks", "recompute", "persistent"};
    std::vector<std::string> only;
    bool usage = false;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--small") g_small = true;
        else if (a == "--only" && i + 1 < argc) {
            std::string list = argv[++i];
            for (size_t at = 0; at <= list.size();) {
                const size_t comma = std::min(list.find(',', at), list.size());
                only.push_back(list.substr(at, comma - at));
                usage |= std::find(names.begin(), names.end(), only.back()) == names.end();
                at = comma + 1;
            }
        } else usage = true;
    }
    if (usage) {
        fprintf(stderr, "usage: %s [--small] [--only NAME[,NAME...]], NAME one of cached slots chunks recompute "
                "persistent\n", argv[0]);
        return 2;
    }
    auto want = [&](const char* name) {
        return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
    };
    if (g_small) {
        if (want("cached")) test_cached(GPT2Config{256, 1000, 1024, 2, 2, 128}, "L2 C128");
        if (want("cached")) test_cached(GPT2Config{256, 1000, 1024, 1, 2, 256}, "L1 C256 HS128");
        if (want("slots")) test_slots(GPT2Config{256, 1000, 1024, 2, 2, 128}, "L2 C128");
        if (want("chunks")) test_chunks(GPT2Config{256, 1000, 1024, 1, 2, 256}, "L1 C256 HS128");
        if (want("recompute")) test_recompute(GPT2Config{256, 1000, 1024, 2, 4, 128}, "L2 C128 HS32");
        if (want("persistent")) test_persistent(GPT2Config{256, 1000, 1024, 2, 2, 128}, "L2 C128");
        if (want("persistent")) test_persistent(GPT2Config{256, 1000, 1024, 2, 2, 128}, "L2 C128", true);
        return failures ? 1 : 0;
    }
    // max_T, V, Vp, L, NH, C: a small model, and one layer at d12's widths (products of 768 and 3072 rows:
    // decode_matvec's wide preload for the fc projection, QKV columns in one pass)
    if (want("cached")) test_cached(GPT2Config{256, 1000, 1024, 2, 2, 128}, "L2 C128");
    if (want("cached")) test_cached(GPT2Config{256, 1000, 1024, 1, 12, 768}, "L1 C768");
    if (want("cached")) test_cached(GPT2Config{256, 1000, 1024, 1, 2, 256}, "L1 C256 HS128");  // decode attention at HS 128
    if (want("slots")) test_slots(GPT2Config{256, 1000, 1024, 2, 12, 768}, "L2 C768");
    if (want("chunks")) test_chunks(GPT2Config{256, 1000, 1024, 2, 12, 768}, "L2 C768");
    if (want("chunks")) test_chunks(GPT2Config{256, 1000, 1024, 1, 2, 256}, "L1 C256 HS128");
    if (want("recompute")) test_recompute(GPT2Config{256, 1000, 1024, 2, 4, 128}, "L2 C128 HS32");
    if (want("persistent")) test_persistent(GPT2Config{256, 1000, 1024, 2, 2, 128}, "L2 C128");
    if (want("persistent")) test_persistent(GPT2Config{256, 1000, 1024, 2, 12, 768}, "L2 C768");
    if (want("persistent")) test_persistent_auto(GPT2Config{256, 1000, 1024, 2, 12, 768}, "L2 C768");
    if (want("persistent")) test_persistent_auto(GPT2Config{256, 1000, 1024, 1, 20, 1280}, "L1 C1280");
    if (want("persistent")) test_persistent(GPT2Config{256, 1000, 1024, 1, 20, 1280}, "L1 C1280");  // Auto takes it
    if (want("persistent")) test_persistent(GPT2Config{256, 1000, 1024, 2, 12, 768}, "L2 C768", true);
    if (want("persistent")) test_persistent(GPT2Config{256, 1000, 1024, 1, 25, 1600}, "L1 C1600", true);  // 2 chunks
    return failures ? 1 : 0;
}
