// The inference engine by slots, for a server's continuous batching (llmc/serving/gpu_engine.cuh): the KV cache's B
// sequences are slots that come and go independently. The thinnest layer over what generate() runs:
//   - up to P prompts (the shape's prefill_B) are prefilled together into the slots they are given, in one forward
//     of (P, T) rows padded to the longest, whose listener writes each layer's K and V of row i into slot i's rows of
//     the cache only; the logits of each prompt's last position land in row i of the prompts' own logits, so a
//     prefill queued behind a decode step leaves that step's logits alone;
//   - a decode step runs over the first R slots, R the smallest of 1, 2, 4, ..., B that covers every busy slot (the
//     scheduler fills the lowest free slot first), each with its own token and position, as that row count's CUDA
//     Graph (one per count, captured at set-up); slots below R without a sequence compute a throwaway row at a
//     position of their own, which touches no other slot's cache;
//   - a server's picks go straight into the next step's input tokens (inference_commit_picks), so a step can be
//     queued before the host has seen the last one's tokens (inference_decode_resident);
//   - a long prompt comes in chunks (inference_prefill_chunk): a chunk's positions are the rows of one step of the
//     decode path mapped to the slot (each row's K and V into the cache first, then each row attending over the
//     cache up to its own position), on the prefill's layer buffers, so each chunk continues the cached prefix.
// Made for the shape slots_shape() gives. Needs a GPU to validate (docs/SERVING.md): tests/gpu/test_decode.cu checks
// the prefill and the steps against the reference forward; tests/serving/check_serve.py the server against generate_gpt2cu.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "llmc/inference/engine.cuh"

// B slots of `context` positions each; prompts of up to context - 1 tokens, up to prefill_rows of them prefilled in
// one forward.
inline InferenceShape slots_shape(int B, int context, int prefill_rows = 1) {
    InferenceShape s;
    s.B = B;
    s.prefill_B = std::max(1, std::min(prefill_rows, B));
    s.max_T = context;
    s.prefill_T = context - 1;
    s.max_new = 1;  // the on-GPU loop's rows (its warm-up only: a server picks per request, pick_tokens_per_row)
    s.cached = true;
    s.row_buckets = true;
    s.slot_prefill = true;
    s.server_steps = 2;  // a server's two decode steps in flight (llmc/serving/gpu_engine.cuh)
    return s;
}

// A new sequence for inference_prefill_slots: its slot and its prompt (host ids).
struct SlotPrompt {
    int slot = 0;
    const int* tokens = nullptr;
    int n = 0;
};

// Small prefills are launch-bound (a forward of ~15 kernels a layer over a few hundred tokens): a call of at most this
// many tokens once padded to its bucket — rows to the next power of two (at most prefill_B), positions to the next
// power of two from 16 (at most prefill_T) — replays that bucket's CUDA Graph (captured on its second use); larger
// calls run at their own shape, where padding would cost more than launches.
constexpr int kPrefillGraphTokens = 1024;

// The prompts (1 .. prefill_B of them, distinct slots) as new sequences in their slots (whatever those held), in one
// forward over (P, T) rows, T the longest prompt; a shorter prompt's padding comes after it, where causal attention
// keeps it out of its positions, and its K and V land past the sequence's length, where nothing reads them (rows of
// padding, up to a graph's bucket, write no slot). Leaves prompt i's last position's logits in row i of
// inference_prefill_logits. Queues only (host memory is staged).
inline void inference_prefill_slots(InferenceEngine* e, const std::vector<SlotPrompt>& prompts) {
    const int V = e->config.vocab_size, P = (int)prompts.size();
    int T = 0;
    bool ok = e->shape.cached && e->shape.slot_prefill && P >= 1 && P <= e->shape.prefill_rows();
    std::vector<char> taken(e->shape.B, 0);
    for (const SlotPrompt& p : prompts) {
        ok = ok && p.slot >= 0 && p.slot < e->shape.B && !taken[p.slot] && p.n >= 1 && p.n <= e->shape.prefill_T;
        if (!ok) break;
        taken[p.slot] = 1;
        T = std::max(T, p.n);
        for (int i = 0; ok && i < p.n; i++) ok = p.tokens[i] >= 0 && p.tokens[i] < V;
    }
    if (!ok) {
        fprintf(stderr, "error: inference_prefill_slots: %d prompts (1..%d, distinct slots below %d) of 1..%d tokens "
                "(ids below %d) on an engine made by slots_shape\n", P, e->shape.prefill_rows(), e->shape.B,
                e->shape.prefill_T, V);
        exit(EXIT_FAILURE);
    }
    int rows = P, len = T;  // the forward's shape: the call's, or its graph's bucket
    CapturedGraph* graph = nullptr;
    if (e->options.graph) {
        int r = 1, t = 16;
        while (r < P) r *= 2;
        while (t < T) t *= 2;
        r = std::min(r, e->shape.prefill_rows()), t = std::min(t, e->shape.prefill_T);
        if ((long long)r * t <= kPrefillGraphTokens) rows = r, len = t, graph = &e->prefill_graphs[{r, t}];
    }
    std::vector<int> inputs((size_t)rows * len, 0), slots(rows, -1), lengths(rows, 1);
    for (int i = 0; i < P; i++) {
        const SlotPrompt& p = prompts[i];
        std::copy(p.tokens, p.tokens + p.n, inputs.begin() + (size_t)i * len);
        std::fill(inputs.begin() + (size_t)i * len + p.n, inputs.begin() + (size_t)(i + 1) * len, p.tokens[p.n - 1]);
        slots[i] = p.slot, lengths[i] = p.n;
        e->cache.host_len[p.slot] = p.n;  // the device's len is the next decode step's to write
    }
    // from pageable memory: each copy is staged before the call returns
    int* slots_d = e->at<int>(infer::PrefillSlots);
    int* lengths_d = e->at<int>(infer::PrefillLengths);
    cudaCheck(cudaMemcpyAsync(e->at<int>(infer::PrefillInputs), inputs.data(), inputs.size() * sizeof(int),
                              cudaMemcpyHostToDevice, e->stream));
    cudaCheck(cudaMemcpyAsync(slots_d, slots.data(), rows * sizeof(int), cudaMemcpyHostToDevice, e->stream));
    cudaCheck(cudaMemcpyAsync(lengths_d, lengths.data(), rows * sizeof(int), cudaMemcpyHostToDevice, e->stream));
    auto forward = [&] {
        KVCacheWriter writer(&e->cache, len, e->stream, 0, rows, slots_d);
        prefill_forward(e->config, e->step.params, e->prefill, e->at<int>(infer::PrefillInputs), lengths_d,
                        ForwardShape{rows, len, e->backend, e->options.fuse_gelu}, e->at<floatX>(infer::PrefillLnf),
                        e->at<floatX>(infer::PrefillLogits), e->stream, &writer);
    };
    if (graph) run_as_graph(e->stream, graph, forward);
    else forward();
}

// A prefix cache's copy (llmc/serving/prefix_cache.h): positions [0, n) of slot `from`, every layer's K and V, into
// slot `to` (from == to: nothing to move), queued on the engine's stream after the work before it, so it reads what
// that work wrote. Per layer and tensor one 2D copy of NH rows of n * HS values, the rows max_T * HS apart (the
// cache's (L, B, NH, max_T, HS) layout): within a layer the two slots' rows are disjoint ranges, as a copy needs.
inline void inference_copy_prefix(InferenceEngine* e, int from, int to, int n) {
    KVCache& c = e->cache;
    if (!e->shape.cached || from < 0 || from >= c.B || to < 0 || to >= c.B || n < 1 || n > c.max_T) {
        fprintf(stderr, "error: inference_copy_prefix: slot %d to %d (of %d), %d positions (at most %d)\n", from, to,
                c.B, n, c.max_T);
        exit(EXIT_FAILURE);
    }
    if (from == to) return;
    const size_t row = (size_t)c.max_T * c.HS, slot_elems = (size_t)c.NH * row;
    for (int l = 0; l < c.L; l++)
        for (floatX* layer : {c.k_layer(l), c.v_layer(l)})
            cudaCheck(cudaMemcpy2DAsync(layer + to * slot_elems, row * sizeof(floatX), layer + from * slot_elems,
                                        row * sizeof(floatX), (size_t)n * c.HS * sizeof(floatX), c.NH,
                                        cudaMemcpyDeviceToDevice, e->stream));
}

// Prompt positions one inference_prefill_chunk call takes at most: its rows live in the prefill's layer buffers
// (their token, length and slot in its input ids: 3 ints a row), up to kChunkRowsMax.
constexpr int kChunkRowsMax = 512;
inline int inference_chunk_rows(const InferenceEngine* e) {
    const long long BT = (long long)e->shape.prefill_rows() * e->shape.prefill_T;
    return e->shape.slot_prefill ? (int)std::min<long long>(kChunkRowsMax, BT / 3) : 0;
}

// Positions [start, start + n) of the slot's sequence from tokens[0..n) (the slot holds [0, start) of it), as one
// step of n rows over the cache: the cuBLASLt decode path with every row mapped to the slot at its own position
// (DecodeStep::seq), its K and V appended before any row attends. Queued on the engine's stream, not waited for;
// the last position's logits land in row 0 of the prompts' logits (inference_prefill_logits). Returns the slot on
// the device, for inference_commit_picks of the prompt's first new token. n <= inference_chunk_rows(e).
inline const int* inference_prefill_chunk(InferenceEngine* e, int slot, const int* tokens, int start, int n) {
    const int V = e->config.vocab_size;
    bool ok = e->shape.cached && n >= 1 && n <= inference_chunk_rows(e) && slot >= 0 && slot < e->shape.B &&
              start >= 0 && start + n <= e->shape.prefill_T;
    for (int i = 0; ok && i < n; i++) ok = tokens[i] >= 0 && tokens[i] < V;
    if (!ok) {
        fprintf(stderr, "error: inference_prefill_chunk: slot %d (of %d), positions %d..%d (at most %d a call, below "
                "%d), ids below %d\n", slot, e->shape.B, start, start + n - 1, inference_chunk_rows(e),
                e->shape.prefill_T, V);
        exit(EXIT_FAILURE);
    }
    // the rows' tokens, lengths (position + 1) and slot, in the prefill's input ids (from pageable memory: staged
    // before the call returns; the stream orders it after the work before that still reads them)
    std::vector<int> rows(3 * (size_t)n);
    for (int i = 0; i < n; i++) rows[i] = tokens[i], rows[n + i] = start + i + 1, rows[2 * n + i] = slot;
    int* in = e->at<int>(infer::PrefillInputs);
    cudaCheck(cudaMemcpyAsync(in, rows.data(), rows.size() * sizeof(int), cudaMemcpyHostToDevice, e->stream));
    e->cache.host_len[slot] = start + n;
    using namespace infer;
    KVCache cache = e->cache;  // the engine's, with the rows' lengths
    cache.len = in + n;
    DecodeStep d = e->step;
    d.cache = &cache;
    d.rows = n;
    d.seq = in + 2 * n;
    d.settings.products = DecodeProducts::Cublas;
    d.s = DecodeScratch{e->at<floatX>(Encoded),   e->at<floatX>(Ln),        e->at<floatX>(Qkv),
                        e->at<floatX>(Atty),      e->at<floatX>(Residual2), e->at<floatX>(Residual3),
                        e->at<floatX>(Fch),       e->at<floatX>(FchGelu),   e->at<floatX>(Projection),
                        e->at<floatX>(Ln),        e->at<floatX>(PrefillLogits), e->at<float>(LnMean),
                        e->at<float>(LnRstd),     in,                       nullptr};
    decode_forward(d);
    return d.seq + n - 1;
}

// The prompts' logits (prefill_B, Vp): row i that of the last inference_prefill_slots' prompt i.
inline const floatX* inference_prefill_logits(const InferenceEngine* e) { return e->at<floatX>(infer::PrefillLogits); }
// The prompts' slots on the device, as the last inference_prefill_slots gave them (for inference_commit_picks).
inline const int* inference_prefill_slots_device(const InferenceEngine* e) { return e->at<int>(infer::PrefillSlots); }

namespace slots_detail {

// tokens[slot_of[i]] (slot_of null: tokens[i]) = picked[i], or 0 where the pick failed (a non-finite row, whose pick
// means nothing): the next decode step reads a valid id whatever came.
__global__ void commit_picks_kernel(int* __restrict__ tokens, const int* __restrict__ picked,
                                    const int* __restrict__ nonfinite, const int* __restrict__ slot_of, int n, int V) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int t = picked[i];
    tokens[slot_of ? slot_of[i] : i] = nonfinite[i] || t < 0 || t >= V ? 0 : t;
}

}  // namespace slots_detail

// n picks (tokens and non-finite flags on the device, as pick_tokens_per_row leaves them) as the next decode step's
// input tokens of their slots: slot_of[i] (device) for pick i, or slot i when null. Queues only.
inline void inference_commit_picks(InferenceEngine* e, const int* picked, const int* nonfinite, const int* slot_of,
                                   int n) {
    slots_detail::commit_picks_kernel<<<(n + 127) / 128, 128, 0, e->stream>>>(e->step.s.tokens, picked, nonfinite,
                                                                             slot_of, n, e->config.vocab_size);
    cudaCheckLaunch();
}

// The row count a step over slots [0, busy) runs with: the smallest bucket that covers them.
inline int inference_decode_rows(const InferenceEngine* e, int busy) {
    for (int r : e->row_buckets)
        if (r >= busy) return r;
    return e->shape.B;
}

namespace slots_detail {

// inference_decode_slots' step; tokens null: the step's input tokens are already on the device.
inline int decode_slots(InferenceEngine* e, const std::vector<int>* tokens, const std::vector<int>& positions,
                        int busy) {
    KVCache& cache = e->cache;
    const int R = busy > 0 ? inference_decode_rows(e, busy) : cache.B;
    bool ok = e->shape.cached && busy <= cache.B && (!tokens || (int)tokens->size() >= R) && (int)positions.size() >= R;
    for (int b = 0; ok && b < R; b++)
        ok = (!tokens || ((*tokens)[b] >= 0 && (*tokens)[b] < e->config.vocab_size)) && positions[b] >= 0 &&
             positions[b] < cache.max_T;
    if (!ok) {
        fprintf(stderr, "error: inference_decode_slots: tokens below %d at %d positions below %d for %d of %d slots\n",
                e->config.vocab_size, (int)positions.size(), cache.max_T, R, cache.B);
        exit(EXIT_FAILURE);
    }
    for (int b = 0; b < R; b++) cache.host_len[b] = positions[b] + 1;
    if (tokens)
        cudaCheck(cudaMemcpyAsync(e->step.s.tokens, tokens->data(), R * sizeof(int), cudaMemcpyHostToDevice,
                                  e->stream));
    cudaCheck(cudaMemcpyAsync(cache.len, cache.host_len.data(), R * sizeof(int), cudaMemcpyHostToDevice, e->stream));
    const size_t k = std::find(e->row_buckets.begin(), e->row_buckets.end(), R) - e->row_buckets.begin();
    const DecodeStep step = R == cache.B ? e->step : decode_step_rows(e->step, R, e->decode_asked);
    CapturedGraph* graph = k < e->bucket_graphs.size() ? &e->bucket_graphs[k] : &e->host_step_graph;
    if (e->options.graph) run_as_graph(e->stream, graph, [&] { decode_forward(step); });
    else decode_forward(step);
    return R;
}

}  // namespace slots_detail

// One decode step over slots [0, R), R = inference_decode_rows(busy) (busy 0: all B): slot b's token tokens[b] at
// positions[b] (the cache holds [0, positions[b]) of its sequence); leaves the logits (R, Vp) and returns R. tokens
// and positions have a value for each of the R slots (at least); a slot without a sequence passes any token at a
// position it owns (its own next one, or 0).
inline int inference_decode_slots(InferenceEngine* e, const std::vector<int>& tokens, const std::vector<int>& positions,
                                  int busy = 0) {
    return slots_detail::decode_slots(e, &tokens, positions, busy);
}
// The same with the input tokens the last picks left on the device (inference_commit_picks): nothing waits for the
// host to see them.
inline int inference_decode_resident(InferenceEngine* e, const std::vector<int>& positions, int busy) {
    return slots_detail::decode_slots(e, nullptr, positions, busy);
}

namespace slots_detail {

// Rows [first, first + rows) of (·, Vp) logits as floats, once the engine's stream is done.
inline void logit_rows_to_host(InferenceEngine* e, const floatX* logits, int first, int rows, float* out) {
    const size_t Vp = e->config.padded_vocab_size;
    cudaCheck(cudaStreamSynchronize(e->stream));
    device_to_host_floats(out, logits + first * Vp, rows * Vp);
}

}  // namespace slots_detail

// Rows [first, first + rows) of the last decode step's logits, as floats (rows x Vp; waits for the engine's stream).
inline void inference_logit_rows_to_host(InferenceEngine* e, int first, int rows, float* out) {
    slots_detail::logit_rows_to_host(e, e->step.s.logits, first, rows, out);
}
// Row i of the last inference_prefill_slots' logits (Vp floats; waits for the engine's stream).
inline void inference_prefill_logits_to_host(InferenceEngine* e, int i, float* out) {
    slots_detail::logit_rows_to_host(e, inference_prefill_logits(e), i, 1, out);
}
