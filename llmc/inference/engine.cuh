// Generation's engine: the memory plan (llmc/inference/inference_plan.h) as one device allocation, the parameters
// (uploaded as floatX, or a view of the trainer's), the KV cache, the prefill's one-layer scratch, the decode
// step's scratch and the on-GPU loop's buffers, a stream of its own, and set-up's one-time work. One engine serves
// one shape: B sequences, prompts of up to prefill_T tokens, max_new new tokens each, one sampling rule.
//   InferenceEngine e;
//   inference_engine_upload(&e, config, std::move(host_params), shape, options);  // generate_gpt2cu
//   inference_engine_borrow(&e, config, model.params, shape, options);  // the trainer's samples: no copy
//   generate(&e, request) (llmc/inference/generate.cuh), or step by step (tests):
//   inference_prefill(&e, prompts, pad);  inference_decode_step(&e, tokens);  inference_logits_to_host(&e, b, out);
//   inference_engine_free(&e);
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "llmc/core/cuda_common.h"
#include "llmc/core/options.h"
#include "llmc/inference/decode_loop.cuh"
#include "llmc/inference/inference_plan.h"
#include "llmc/inference/kv_cache.cuh"
#include "llmc/inference/prefill.cuh"
#include "llmc/kernels/attention/attention.cuh"
#include "llmc/kernels/layernorm.cuh"

struct InferenceOptions {
    PickParams pick;                   // the loop's token picker (its step graph is captured with it)
    DecodeSettings decode;             // the decode step's products and attention kernel (Auto: by batch)
    std::string attention = "auto";    // the prefill's attention backend, as -ab takes it
    bool fuse_gelu = kFloatXIsBF16;    // GELU in the fc GEMM's epilogue, as the trainer runs it
    bool graph = true;                 // decode steps replayed as a CUDA Graph
    bool warm_up = true;               // set-up does the one-time work (inference_engine_warm_up)
    FILE* report = nullptr;            // where set-up prints the plan (LLMC_PRINT_MEMORY_MAP=1: every buffer), its
                                       // time and the memory in use; nowhere when null
};

struct InferenceEngine {
    GPT2Config config;
    InferenceShape shape;
    InferenceOptions options;
    AttentionBackend backend = AttentionBackend::Materialized;
    std::string backend_note;  // why "auto" is not flash, when it is not
    std::vector<InferenceBuffer> table;
    std::vector<void*> buffers;  // per infer::Id: device, or mapped host memory (group HostMapped); null when empty
    void* block = nullptr;       // the device rows
    void* host_block = nullptr;  // the host rows (mapped, pinned)
    cudaStream_t stream = nullptr;
    KVCache cache;
    ForwardActivations prefill;  // one layer's buffers, every layer's (stride 0)
    DecodeStep step;             // points at `cache`: the engine stays where it was created
    DecodeLoop loop;
    CapturedGraph host_step_graph;  // inference_decode_step's
    DecodeProducts decode_asked = DecodeProducts::Auto;  // the products setting before it was resolved for B
    bool persistent_lone = false;  // a server's steps of one busy slot run the persistent step (asked, or Auto's)
    std::vector<int> row_buckets;             // shape.row_buckets: the step's row counts, 1, 2, 4, ..., B
    std::vector<CapturedGraph> bucket_graphs;   // inference_decode_slots' graph per row count
    std::map<std::pair<int, int>, CapturedGraph> prefill_graphs;  // inference_prefill_slots' per (rows, T) bucket
    double setup_ms = 0;

    InferenceEngine() = default;
    InferenceEngine(const InferenceEngine&) = delete;
    InferenceEngine& operator=(const InferenceEngine&) = delete;
    template <typename T> T* at(infer::Id id) const { return (T*)buffers[id]; }
};

namespace inference_detail {

inline InferenceKernelSizes kernel_sizes(const GPT2Config& c, const InferenceShape& s, AttentionBackend backend,
                                         const DecodeSettings& decode, DecodeProducts asked, bool persistent_lone,
                                         const PickParams& pick) {
    const int B = s.B, Bp = s.prefill_rows(), T = s.prefill_T, C = c.channels, NH = c.num_heads;
    InferenceKernelSizes k;
    k.elem_bytes = sizeof(floatX);
    k.precision = PRECISION_NAME;
    k.attention_saved = attention_saved_bytes(backend, Bp, T, NH);
    k.attention_workspace = attention_forward_workspace_bytes(backend, Bp, T, C, NH);
    k.cublaslt_workspace = matmul_workspace_bytes();
    if (!s.cached) return k;
    k.decode_attention_workspace = attention_decode_workspace_bytes(B, NH, s.max_T, C / NH);
    // decode_mma's workspaces, for the largest row count that runs it (with row buckets: any up to its limit)
    int mma_B = decode.products == DecodeProducts::Mma ? B : 0;
    for (int r : decode_row_buckets(s))
        if (decode_products_for(r, asked) == DecodeProducts::Mma) mma_B = std::max(mma_B, r);
    if (mma_B > 0) {  // the largest of the layers' four products
        const bool ln = decode_mma_fuses_layernorm(mma_B, C);
        k.mma_partial_floats =
            std::max({decode_mma_partials(mma_B, 3 * C, C, ln), decode_mma_partials(mma_B, C, C, false),
                      decode_mma_partials(mma_B, 4 * C, C, ln), decode_mma_partials(mma_B, C, 4 * C, false)});
        k.mma_counters = decode_mma_counters(mma_B, 4 * C);
    }
    const bool persistent = decode.products == DecodeProducts::Persistent || persistent_lone;
    if (pick.greedy() && (decode.products == DecodeProducts::Matvec || persistent))  // persistent: marks the fold
        k.pick_partials = decode_greedy_pick_partials(B);
    if (persistent) {
        k.persistent_phase_bytes = persistent_phase_count(c) * sizeof(decode_persistent::Phase);
        k.persistent_counters = persistent_phase_count(c), k.persistent_picks = device_sm_count();
        k.persistent_activations = persistent_activation_elems(c);
    }
    return k;
}

inline void check_shape(const GPT2Config& c, const InferenceShape& s) {
    const bool ok = s.B >= 1 && s.prefill_B >= 0 && s.prefill_B <= s.B && s.prefill_T >= 1 && s.prefill_T <= c.max_seq_len && c.channels % 8 == 0 &&
                    c.channels <= kLayerNormMaxChannels &&
                    (!s.cached || (kv_cache_supported(c) && s.max_new >= 1 && s.max_T >= s.prefill_T + s.max_new - 1 &&
                                   s.max_T <= c.max_seq_len));
    if (!ok) {
        fprintf(stderr, "error: generation: B %d (prefill %d), prefill T %d, context %d of %d, %d new tokens, C %d (a "
                "multiple of 8, at most %d), cached %d (head size 64 or 128)\n", s.B, s.prefill_B, s.prefill_T, s.max_T,
                c.max_seq_len,
                s.max_new, c.channels, kLayerNormMaxChannels, (int)s.cached);
        exit(EXIT_FAILURE);
    }
}

// The block, carved in table order; the mapped host rows; the views over them.
inline void allocate(InferenceEngine* e) {
    const InferencePlan plan = inference_plan_of(e->table);
    size_t free_bytes = 0, total_bytes = 0;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (plan.block > free_bytes || cudaMalloc(&e->block, plan.block) != cudaSuccess) {
        cudaGetLastError();  // clear a failed allocation's error state
        fprintf(stderr, "error: out of device memory: generation's plan (B %d, context %d) needs %.2f GiB, %.2f GiB "
                "free\n", e->shape.B, e->shape.max_T, plan.block / 1073741824.0, free_bytes / 1073741824.0);
        exit(EXIT_FAILURE);
    }
    e->buffers = memory_table_carve(e->table, e->block, inference_in_block);
    // the host rows (the loop's new tokens, a server's uploads and results) in one mapped, pinned allocation
    auto on_host = [](const InferenceBuffer& b) { return b.group == InferenceGroup::HostMapped; };
    if (const size_t bytes = memory_table_bytes(e->table, on_host)) {
        cudaCheck(cudaHostAlloc(&e->host_block, bytes, cudaHostAllocMapped));
        const std::vector<void*> host = memory_table_carve(e->table, e->host_block, on_host);
        for (size_t i = 0; i < host.size(); i++)
            if (host[i]) e->buffers[i] = host[i];
    }
}

inline void set_up_views(InferenceEngine* e) {
    using namespace infer;
    const GPT2Config& c = e->config;
    const InferenceShape& s = e->shape;
    const cudaStream_t st = e->stream;
    e->cache = KVCache{};
    e->cache.B = s.B, e->cache.max_T = s.max_T, e->cache.L = c.num_layers, e->cache.NH = c.num_heads;
    e->cache.HS = c.channels / c.num_heads;
    e->cache.k = e->at<floatX>(KCache), e->cache.v = e->at<floatX>(VCache), e->cache.len = e->at<int>(Lengths);
    e->cache.host_len.assign(s.B, 0);
    ForwardActivations& a = e->prefill;  // stride 0 everywhere: each layer overwrites the one before
    a.encoded = e->at<floatX>(Encoded);
    a.ln1 = a.ln2 = {e->at<floatX>(Ln), 0};
    a.ln1_mean = a.ln2_mean = {e->at<float>(LnMean), 0};
    a.ln1_rstd = a.ln2_rstd = {e->at<float>(LnRstd), 0};
    a.qkv = {e->at<floatX>(Qkv), 0};
    a.atty = {e->at<floatX>(Atty), 0};
    a.attention_saved = {e->at<char>(AttSaved), 0};
    a.residual2 = {e->at<floatX>(Residual2), 0};
    a.residual3 = {e->at<floatX>(Residual3), 0};
    a.fch = {e->at<floatX>(Fch), 0};
    a.fch_gelu = {e->at<floatX>(FchGelu), 0};
    a.lnf = e->at<floatX>(Ln), a.lnf_mean = e->at<float>(LnMean), a.lnf_rstd = e->at<float>(LnRstd);
    a.scratch = e->at<floatX>(Projection);
    a.attention_workspace = e->buffers[AttWorkspace];
    DecodeStep& d = e->step;
    d.config = c, d.cache = &e->cache, d.fuse_gelu = e->options.fuse_gelu, d.stream = st;
    d.s = DecodeScratch{e->at<floatX>(DecodeX), e->at<floatX>(DecodeLn), e->at<floatX>(DecodeQkv),
                        e->at<floatX>(DecodeAtty), e->at<floatX>(DecodeResidual2), e->at<floatX>(DecodeResidual3),
                        e->at<floatX>(DecodeFch), e->at<floatX>(DecodeFchGelu), e->at<floatX>(DecodeProjection),
                        e->at<floatX>(Lnf), e->at<floatX>(Logits), e->at<float>(DecodeMean), e->at<float>(DecodeRstd),
                        e->at<int>(Tokens), e->buffers[DecodeAttWorkspace], e->at<float>(MmaPartials),
                        e->at<unsigned>(MmaCounters)};
    DecodeLoop& loop = e->loop;
    loop.B = s.B, loop.max_new = s.max_new, loop.graph = e->options.graph, loop.pick = e->options.pick;
    loop.coins = e->at<float>(Coins), loop.prompt_len = e->at<int>(PromptLen), loop.tokens = e->at<int>(NewTokens);
    loop.tokens_device = nullptr;
    if (loop.tokens) cudaCheck(cudaHostGetDevicePointer(&loop.tokens_device, loop.tokens, 0));
    loop.pick_partials = e->at<unsigned long long>(PickPartials), loop.pick_count = e->at<unsigned>(PickCount);
    if (!s.cached) return;
    // zeros where kernels count (each call leaves them zero again), and in the cache and coins, so that the
    // warm-up's steps, which read positions no prefill wrote, compute with finite numbers
    for (Id id : {KCache, VCache, MmaCounters, PickCount, Coins})
        if (e->buffers[id]) cudaCheck(cudaMemsetAsync(e->buffers[id], 0, e->table[id].bytes(), st));
    d.persistent = PersistentStep{};
    if (e->options.decode.products == DecodeProducts::Persistent || e->persistent_lone)
        d.persistent = persistent_step_set_up(c, d.params, e->cache, e->at<floatX>(PersistentActivations),
                                              d.s.logits, e->buffers[PersistentPhases],
                                              e->at<unsigned>(PersistentCounters),
                                              e->at<unsigned long long>(PersistentPicks), st,
                                              e->options.decode.persistent_tiles);
    cudaCheck(attention_decode_workspace_init(d.s.attention_workspace, s.B, c.num_heads, s.max_T, e->cache.HS, st));
    for (int i = 0; i < s.max_new * s.B; i++) loop.tokens[i] = -1;
}

}  // namespace inference_detail

// Host token rows (B sequences of 1..T tokens, each id below V) padded with `pad` to T positions (0: the longest),
// uploaded with their lengths, then the prefill: the logits (B, Vp) of each sequence's last token; on the cached path
// every layer's K and V of positions 0..T-1 into the cache, whose lengths become the sequences'.
inline void inference_prefill(InferenceEngine* e, const std::vector<std::vector<int>>& seqs, int pad, int T = 0) {
    const int B = e->shape.B, V = e->config.vocab_size;
    int longest = 0;
    for (const auto& s : seqs) longest = std::max(longest, (int)s.size());
    if (T == 0) T = longest;
    bool ok = (int)seqs.size() == B && e->shape.prefill_rows() == B && longest <= T && T <= e->shape.prefill_T && pad >= 0 && pad < V;
    std::vector<int> batch((size_t)B * T, pad), lengths(B);
    for (int b = 0; ok && b < B; b++) {
        lengths[b] = (int)seqs[b].size();
        ok = lengths[b] >= 1;
        for (int t = 0; ok && t < lengths[b]; t++) ok = seqs[b][t] >= 0 && seqs[b][t] < V;
        if (ok) std::copy(seqs[b].begin(), seqs[b].end(), batch.begin() + (size_t)b * T);
    }
    if (!ok) {
        fprintf(stderr, "error: inference_prefill: %d sequences of 1..%d tokens below %d (the engine's B %d, prefill T "
                "%d, all B prefilled at once), pad %d\n", (int)seqs.size(), T, V, B, e->shape.prefill_T, pad);
        exit(EXIT_FAILURE);
    }
    // from pageable memory: each copy is staged before the call returns
    cudaCheck(cudaMemcpyAsync(e->at<int>(infer::PrefillInputs), batch.data(), batch.size() * sizeof(int),
                              cudaMemcpyHostToDevice, e->stream));
    cudaCheck(cudaMemcpyAsync(e->cache.len, lengths.data(), B * sizeof(int), cudaMemcpyHostToDevice, e->stream));
    e->cache.host_len = lengths;
    KVCacheWriter writer(&e->cache, T, e->stream);
    prefill_forward(e->config, e->step.params, e->prefill, e->at<int>(infer::PrefillInputs), e->cache.len,
                    ForwardShape{B, T, e->backend, e->options.fuse_gelu}, e->step.s.lnf, e->step.s.logits, e->stream,
                    e->shape.cached ? &writer : nullptr);
}

// One new token per sequence (host ids) at position len[b], after the prefill: the logits of that position.
inline void inference_decode_step(InferenceEngine* e, const std::vector<int>& tokens) {
    KVCache& cache = e->cache;
    for (int b = 0; b < cache.B; b++) {
        if (!e->shape.cached || (int)tokens.size() != cache.B || tokens[b] < 0 || tokens[b] >= e->config.vocab_size ||
            cache.host_len[b] >= cache.max_T) {
            fprintf(stderr, "error: inference_decode_step: B %d tokens below %d (a cached engine), and room in the "
                    "cache (sequence %d holds %d of %d)\n", cache.B, e->config.vocab_size, b, cache.host_len[b],
                    cache.max_T);
            exit(EXIT_FAILURE);
        }
        cache.host_len[b]++;
    }
    cudaCheck(cudaMemcpyAsync(e->step.s.tokens, tokens.data(), cache.B * sizeof(int), cudaMemcpyHostToDevice,
                              e->stream));
    cudaCheck(cudaMemcpyAsync(cache.len, cache.host_len.data(), cache.B * sizeof(int), cudaMemcpyHostToDevice,
                              e->stream));
    if (e->options.graph) run_as_graph(e->stream, &e->host_step_graph, [&] { decode_forward(e->step); });
    else decode_forward(e->step);
}

// Row b of the last prefill's or decode step's logits (Vp values; waits for the engine's stream).
inline void inference_logits_to_host(InferenceEngine* e, int b, float* out) {
    const int Vp = e->config.padded_vocab_size;
    cudaCheck(cudaStreamSynchronize(e->stream));
    device_to_host_floats(out, e->step.s.logits + (size_t)b * Vp, Vp);
}

// The one-time work timed generation must not pay: kernels that load on their first launch, cuBLASLt's plan for
// each GEMM shape, the decode step's graph capture. The prefill's shapes are warmed by ONE layer on dummy tokens
// (every layer runs the same kernels at the same shapes, so one stands for all; the prompts' prefill then runs
// once, in the timed part); the decode loop's begin and two steps (plain, then captured) run on the engine's own
// scratch with every sequence one token long. The real prefill overwrites the lengths and what the cache holds.
// The logits are cleared first: the prefill fills Bp rows and the loop's begin picks from all B.
inline void inference_engine_warm_up(InferenceEngine* e) {
    const int B = e->shape.B, Bp = e->shape.prefill_rows(), T = e->shape.prefill_T;
    cudaCheck(cudaMemsetAsync(e->at<int>(infer::PrefillInputs), 0, (size_t)Bp * T * sizeof(int), e->stream));
    cudaCheck(cudaMemsetAsync(e->step.s.logits, 0, (size_t)B * e->config.padded_vocab_size * sizeof(*e->step.s.logits),
                              e->stream));
    e->cache.host_len.assign(B, 1);
    cudaCheck(cudaMemcpyAsync(e->cache.len, e->cache.host_len.data(), B * sizeof(int), cudaMemcpyHostToDevice,
                              e->stream));
    GPT2Config one_layer = e->config;
    one_layer.num_layers = 1;
    KVCacheWriter writer(&e->cache, T, e->stream, 0, Bp);
    prefill_forward(one_layer, e->step.params, e->prefill, e->at<int>(infer::PrefillInputs), e->cache.len,
                    ForwardShape{Bp, T, e->backend, e->options.fuse_gelu}, e->step.s.lnf, e->step.s.logits, e->stream,
                    e->shape.cached ? &writer : nullptr);
    if (e->shape.cached) {
        decode_loop_begin(e->step, &e->loop);
        // two steps whatever the run's length (their picks past max_new are not stored): a run of 2 tokens must
        // not capture the graph in its timed part either
        for (int w = 0; w < std::min(2, e->shape.max_T - 1); w++) decode_loop_step(e->step, &e->loop);
    }
    cudaCheck(cudaStreamSynchronize(e->stream));
    for (int i = 0; e->loop.tokens && i < e->shape.max_new * B; i++) e->loop.tokens[i] = -1;
}

namespace inference_detail {

// The plan, the backend note, set-up's time and the device memory in use (CUDA context included).
inline void report(const InferenceEngine* e) {
    FILE* out = e->options.report;
    if (!out) return;
    const InferenceShape& s = e->shape;
    if (!e->backend_note.empty()) fprintf(out, "note: %s\n", e->backend_note.c_str());
    if (e->options.decode.products == DecodeProducts::Persistent || e->persistent_lone)
        fprintf(out, "note: %s as one persistent kernel (%s)\n",
                e->persistent_lone ? "the steps of one busy slot" : "decode steps",
                e->decode_asked == DecodeProducts::Persistent ? "LLMC_DECODE_PERSISTENT=1"
                                                              : "batch 1 and C >= 1024; LLMC_DECODE_PERSISTENT=0: never");
    fprintf(out, "generation memory plan (%s; B %d, prefill %d positions, %s):\n", PRECISION_NAME, s.B, s.prefill_T,
            s.cached ? ("KV cache of " + std::to_string(s.max_T) + " positions").c_str()
                     : "no KV cache: recompute per token");
    for (const std::string& line : inference_plan_lines(e->table, engine_options().print_memory_map))
        fprintf(out, "%s\n", line.c_str());
    size_t free_bytes = 0, total_bytes = 0;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total_bytes));
    fprintf(out, "device memory in use after set-up: %s (CUDA context and other processes included)\n",
            format_bytes((double)(total_bytes - free_bytes)).c_str());
    fprintf(out, "set-up %.1f ms (%s)\n", e->setup_ms,
            e->options.warm_up ? "parameters, plan, and the warm-up: one prefill layer and the decode step on dummy "
                                 "tokens, the step's graph captured"
                               : "parameters and plan; no warm-up");
}

inline void create(InferenceEngine* e, const GPT2Config& c, const InferenceShape& shape, const InferenceOptions& o,
                   const GPT2Params* borrowed, std::vector<float>* host_params) {
    const auto t0 = std::chrono::steady_clock::now();
    check_shape(c, shape);
    matmul_init();
    e->config = c, e->shape = shape, e->options = o;
    e->shape.owns_params = borrowed == nullptr;
    e->backend = resolve_attention_backend(o.attention, c.channels, c.num_heads, &e->backend_note);
    e->decode_asked = o.decode.products;
    e->options.decode.products = decode_products_for(shape.B, o.decode.products);
    // Auto's choice (unless LLMC_DECODE_PERSISTENT=0, or decode attention's kernel is forced: the persistent step has
    // its own): batch-1 generation, or a server's lone slot's steps (its steps over more busy slots keep theirs)
    const bool server = shape.server_steps > 0 || shape.slot_prefill;
    const bool auto_takes = o.decode.products == DecodeProducts::Auto && o.decode.persistent_auto &&
                            o.decode.attention == DecodeAttentionKernel::Auto &&
                            persistent_auto_takes(c, server ? 1 : shape.B, shape.cached);
    if (auto_takes && !server) e->options.decode.products = DecodeProducts::Persistent;
    e->persistent_lone = server && (e->decode_asked == DecodeProducts::Persistent || auto_takes);
    std::string why;
    const int persistent_B = e->persistent_lone ? 1 : shape.B;
    if (e->decode_asked == DecodeProducts::Persistent &&
        (!shape.cached || !persistent_step_supported(c, persistent_B, &why))) {
        fprintf(stderr, "error: LLMC_DECODE_PERSISTENT=1: the persistent decode step does not take this run: %s\n",
                shape.cached ? why.c_str() : "it needs the KV cache (heads of 64)");
        exit(EXIT_FAILURE);
    }
    e->table = inference_memory_table(c, e->shape, kernel_sizes(c, e->shape, e->backend, e->options.decode,
                                                                e->decode_asked, e->persistent_lone, o.pick));
    e->row_buckets = decode_row_buckets(shape);
    e->bucket_graphs.assign(e->row_buckets.size(), CapturedGraph{});
    allocate(e);
    cudaCheck(cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking));
    e->step.settings = e->options.decode;
    e->step.params = borrowed ? *borrowed : GPT2Params(c, e->at<floatX>(infer::Params));
    if (!borrowed) {  // on the legacy stream, which the engine's does not wait for: done before anything reads it
        host_floats_to_device(e->at<floatX>(infer::Params), host_params->data(), gpt2_num_parameters(c));
        cudaCheck(cudaDeviceSynchronize());
        // freed now, not after the warm-up: unmapping gigabytes takes the host long enough for the GPU to idle
        // down between the warm-up and the timed run
        *host_params = std::vector<float>();
    }
    set_up_views(e);
    if (o.warm_up) inference_engine_warm_up(e);
    cudaCheck(cudaStreamSynchronize(e->stream));
    e->setup_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    report(e);
}

}  // namespace inference_detail

// host_params: gpt2_parameter_table order, fp32 (as read_model_any returns them), rounded to floatX on upload and
// then freed (move them in; a copy is freed otherwise).
inline void inference_engine_upload(InferenceEngine* e, const GPT2Config& c, std::vector<float> host_params,
                                    const InferenceShape& shape, const InferenceOptions& options) {
    if (host_params.size() != gpt2_num_parameters(c)) {
        fprintf(stderr, "error: inference_engine_upload: %zu parameters for a model of %zu\n", host_params.size(),
                gpt2_num_parameters(c));
        exit(EXIT_FAILURE);
    }
    inference_detail::create(e, c, shape, options, nullptr, &host_params);
}
// params: another model's parameters on this device (the trainer's), read in place; they must not change while
// the engine runs (the caller synchronises its own stream first).
inline void inference_engine_borrow(InferenceEngine* e, const GPT2Config& c, const GPT2Params& params,
                                    const InferenceShape& shape, const InferenceOptions& options) {
    inference_detail::create(e, c, shape, options, &params, nullptr);
}

inline void inference_engine_free(InferenceEngine* e) {
    if (e->stream) cudaCheck(cudaStreamSynchronize(e->stream));
    captured_graph_free(&e->loop.step_graph);
    captured_graph_free(&e->host_step_graph);
    for (CapturedGraph& g : e->bucket_graphs) captured_graph_free(&g);
    for (auto& g : e->prefill_graphs) captured_graph_free(&g.second);
    e->prefill_graphs.clear();
    if (e->host_block) cudaCheck(cudaFreeHost(e->host_block));
    if (e->block) cudaCheck(cudaFree(e->block));
    if (e->stream) cudaCheck(cudaStreamDestroy(e->stream));
    e->buffers.clear();
    e->block = nullptr;
    e->host_block = nullptr;
    e->stream = nullptr;
}
