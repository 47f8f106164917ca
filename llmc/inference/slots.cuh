// The inference engine by slots, for a server's continuous batching (llmc/serving/gpu_engine.cuh): the KV cache's B
// sequences are slots that come and go independently. The thinnest layer over what generate() runs:
//   - a slot's prompt is prefilled alone (batch 1: the engine is made with prefill_B 1) by the shared forward, whose
//     listener writes each layer's K and V into that slot's rows of the cache only; the logits of its last position
//     land in the slot's row;
//   - a decode step runs over the first R slots, R the smallest of 1, 2, 4, ..., B that covers every busy slot (the
//     scheduler fills the lowest free slot first), each with its own token and position, as that row count's CUDA
//     Graph (one per count, captured at set-up); slots below R without a sequence compute a throwaway row at a
//     position of their own, which touches no other slot's cache.
// Made for the shape slots_shape() gives. Needs a GPU to validate (docs/SERVING.md): tests/test_decode.cu checks
// generate()'s paths; these entry points are exercised by scripts/check_serve.py against generate_gpt2cu.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "llmc/inference/engine.cuh"

// B slots of `context` positions each; prompts of up to context - 1 tokens, prefilled one slot at a time.
inline InferenceShape slots_shape(int B, int context) {
    InferenceShape s;
    s.B = B;
    s.prefill_B = 1;
    s.max_T = context;
    s.prefill_T = context - 1;
    s.max_new = 1;  // the on-GPU loop's rows (its warm-up only: a server picks per request, pick_tokens_per_row)
    s.cached = true;
    s.row_buckets = true;
    return s;
}

// Positions [0, n) of a new sequence in `slot` (whatever it held), then its last position's logits into row `slot`.
inline void inference_prefill_slot(InferenceEngine* e, int slot, const int* tokens, int n) {
    const int V = e->config.vocab_size, C = e->config.channels, Vp = e->config.padded_vocab_size;
    bool ok = e->shape.cached && e->shape.prefill_rows() == 1 && slot >= 0 && slot < e->shape.B && n >= 1 &&
              n <= e->shape.prefill_T;
    for (int i = 0; ok && i < n; i++) ok = tokens[i] >= 0 && tokens[i] < V;
    if (!ok) {
        fprintf(stderr, "error: inference_prefill_slot: slot %d of %d, %d tokens (1..%d, ids below %d) on an engine "
                "made by slots_shape\n", slot, e->shape.B, n, e->shape.prefill_T, V);
        exit(EXIT_FAILURE);
    }
    // from pageable memory: each copy is staged before the call returns
    cudaCheck(cudaMemcpyAsync(e->at<int>(infer::PrefillInputs), tokens, (size_t)n * sizeof(int), cudaMemcpyHostToDevice,
                              e->stream));
    e->cache.host_len[slot] = n;
    cudaCheck(cudaMemcpyAsync(e->cache.len + slot, &e->cache.host_len[slot], sizeof(int), cudaMemcpyHostToDevice,
                              e->stream));
    KVCacheWriter writer(&e->cache, n, e->stream, slot, 1);
    // the one sequence's row of lnf and logits is the slot's: gather_last reads its length from len[slot]
    prefill_forward(e->config, e->step.params, e->prefill, e->at<int>(infer::PrefillInputs), e->cache.len + slot,
                    ForwardShape{1, n, e->backend, e->options.fuse_gelu}, e->step.s.lnf + (size_t)slot * C,
                    e->step.s.logits + (size_t)slot * Vp, e->stream, &writer);
}

// The row count a step over slots [0, busy) runs with: the smallest bucket that covers them.
inline int inference_decode_rows(const InferenceEngine* e, int busy) {
    for (int r : e->row_buckets)
        if (r >= busy) return r;
    return e->shape.B;
}

// One decode step over slots [0, R), R = inference_decode_rows(busy) (busy 0: all B): slot b's token tokens[b] at
// positions[b] (the cache holds [0, positions[b]) of its sequence); leaves the logits (R, Vp) and returns R. tokens
// and positions have a value for each of the R slots (at least); a slot without a sequence passes any token at a
// position it owns (its own next one, or 0).
inline int inference_decode_slots(InferenceEngine* e, const std::vector<int>& tokens, const std::vector<int>& positions,
                                  int busy = 0) {
    KVCache& cache = e->cache;
    const int R = busy > 0 ? inference_decode_rows(e, busy) : cache.B;
    bool ok = e->shape.cached && busy <= cache.B && (int)tokens.size() >= R && (int)positions.size() >= R;
    for (int b = 0; ok && b < R; b++)
        ok = tokens[b] >= 0 && tokens[b] < e->config.vocab_size && positions[b] >= 0 && positions[b] < cache.max_T;
    if (!ok) {
        fprintf(stderr, "error: inference_decode_slots: %d tokens below %d at positions below %d for %d of %d slots\n",
                (int)tokens.size(), e->config.vocab_size, cache.max_T, R, cache.B);
        exit(EXIT_FAILURE);
    }
    for (int b = 0; b < R; b++) cache.host_len[b] = positions[b] + 1;
    cudaCheck(cudaMemcpyAsync(e->step.s.tokens, tokens.data(), R * sizeof(int), cudaMemcpyHostToDevice, e->stream));
    cudaCheck(cudaMemcpyAsync(cache.len, cache.host_len.data(), R * sizeof(int), cudaMemcpyHostToDevice, e->stream));
    const size_t k = std::find(e->row_buckets.begin(), e->row_buckets.end(), R) - e->row_buckets.begin();
    const DecodeStep step = R == cache.B ? e->step : decode_step_rows(e->step, R, e->decode_asked);
    DecodeGraph* graph = k < e->bucket_graphs.size() ? &e->bucket_graphs[k] : &e->host_step_graph;
    if (e->options.graph) run_as_graph(e->stream, graph, [&] { decode_forward(step); });
    else decode_forward(step);
    return R;
}

// Rows [first, first + rows) of the last prefill's or step's logits, as floats (rows x Vp; waits for the engine's
// stream).
inline void inference_logit_rows_to_host(InferenceEngine* e, int first, int rows, float* out) {
    const size_t Vp = e->config.padded_vocab_size;
    cudaCheck(cudaStreamSynchronize(e->stream));
    device_to_host_floats(out, e->step.s.logits + first * Vp, rows * Vp);
}
