// The serving engine on the GPU: the scheduler's interface (llmc/serving/serve_engine.h) over the inference engine
// by slots (llmc/inference/slots.cuh). Prompts up to prefill_chunk() tokens whole, up to prefill_rows() of them in one
// forward; longer ones in chunks (inference_prefill_chunk: the chunk's positions as rows of one step over the cache,
// so each continues the cached prefix), which the scheduler interleaves with the decode steps. A
// decode step runs over the first R slots (R: the smallest of 1, 2, 4, ..., B covering the busy ones; its own CUDA
// Graph) with each slot's position. Every pick, a prompt's first token's and each step's, is made on the GPU with the
// row's own rule and coin (pick_tokens_per_row, llmc/kernels/sampling/sampling.cuh: the rule the host's is built from) and
// written straight into the slot's next input token, so decode_begin queues a step without waiting for the last one's
// tokens to reach the host; only tokens and non-finite flags come back, and a request that asks for logprobs has its
// logits row copied to the host for them (llmc/serving/host_pick.h). A step is one CUDA Graph per row count holding
// the upload (lengths, rules and coins, packed; the step reads its lengths there), the step and its picks, which
// write the next step's inputs on the device and tokens and flags into mapped host memory: a token of a lone stream
// costs the step's graph and little around it. Two steps may be in flight (steps_in_flight 2): the next is queued
// before the host waits for the last, so the GPU does not wait for the host between steps; each of the two has its
// own upload, results, logprob rows, event and graphs (parity), so queuing one touches nothing the other still reads.
// Where the engine runs the persistent step for a lone slot (persistent_lone: asked for, or Auto's from C 1024 on), a
// step of one busy slot runs it on that slot alone (the slot in the upload, read on the device; the picks after it as
// always): a lone stream's step is generation's.
// A call of whole prompts is begun and ended apart too (prefill_whole_begin / _end, llmc/serving/prompt_picks.cuh),
// so it does not drain the stream either; a chunk's last pick still waits for its token.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/core/cuda_common.h"
#include "llmc/inference/decode_traffic.h"
#include "llmc/inference/slots.cuh"
#include "llmc/kernels/sampling/sampling.cuh"
#include "llmc/serving/host_pick.h"
#include "llmc/serving/prompt_picks.cuh"
#include "llmc/serving/serve_engine.h"

class GpuServeEngine : public ServeEngine {
public:
    // host_params: gpt2_parameter_table order, fp32 (read_model_any's), uploaded as floatX and freed. prefill_rows:
    // prompts one prefill forward takes (its buffers hold that many prompts of up to context - 1 tokens).
    // steps_in_flight: 1 or 2 (ServeEngine::steps_in_flight). prefill_chunk: prompt tokens one chunk takes at most
    // (0: prompts only whole; capped by inference_chunk_rows).
    GpuServeEngine(const GPT2Config& c, std::vector<float> host_params, int slots, int context, int prefill_rows,
                   const InferenceOptions& options, int steps_in_flight = 2, int prefill_chunk = kChunkRowsMax)
        : known_(slots, 0), logits_((size_t)c.padded_vocab_size), depth_(std::min(2, std::max(1, steps_in_flight))) {
        inference_engine_upload(&e_, c, std::move(host_params), slots_shape(slots, context, prefill_rows), options);
        B_ = slots, P_ = e_.shape.prefill_rows();
        chunk_ = std::max(0, std::min(prefill_chunk, inference_chunk_rows(&e_)));
        // the prompts' picks (prompt_picks.cuh); the decode step has its own (StepBuffers), the pickers' scratch is
        // shared: all rows of the engine's plan (llmc/inference/inference_plan.h, the server's group and host rows)
        using namespace infer;
        scratch_d_ = e_.at<int>(ServeScratch);
        cudaCheck(cudaMemset(scratch_d_, 0, std::max(B_, P_) * sizeof(int)));
        prompts_.init(&e_);
        const size_t Vp = (size_t)c.padded_vocab_size;
        const size_t upload = serve_step_stride(stage_bytes()), results = serve_step_stride(2 * (size_t)B_ * sizeof(int));
        const size_t logits = serve_step_stride((size_t)B_ * Vp * sizeof(floatX));
        for (int p = 0; p < 2; p++) {
            StepBuffers& sb = step_[p];
            cudaCheck(cudaEventCreate(&sb.begin));  // timing events: the report's GPU time per step
            cudaCheck(cudaEventCreate(&sb.done));
            sb.stage_d = e_.at<char>(ServeUploads) + p * upload;
            sb.stage_h = e_.at<char>(ServeUploadsHost) + p * upload;
            sb.result_h = (int*)(e_.at<char>(ServeResultsHost) + p * results);
            cudaCheck(cudaHostGetDevicePointer((void**)&sb.result_mapped, sb.result_h, 0));
            // the step reads its lengths from its own upload: the cache as the step sees it
            sb.cache = e_.cache;
            sb.cache.len = (int*)sb.stage_d;
            sb.logits_h = (floatX*)(e_.at<char>(ServeLogitsHost) + p * logits);
            sb.graphs.assign(e_.row_buckets.size(), CapturedGraph{});
            sb.lone_graphs.assign(e_.persistent_lone ? e_.row_buckets.size() : 0, CapturedGraph{});
        }
        // each row count's step graph is captured on its second run, and the kernels load on their first: all now,
        // not in the first requests' time (every slot at position 0; the picks leave valid tokens in every input)
        for (int p = 0; p < 2; p++) {
            for (int b = 0; b < B_; b++)
                stage_len(p)[b] = 1, stage_params(p)[b] = PickParams{1.f, 0, 1.f}, stage_coins(p)[b] = 0.5f;
            *stage_row(p) = 0;
            for (size_t k = 0; k < e_.row_buckets.size(); k++)
                for (bool lone : {false, true})
                    for (int i = 0; i < 2 && (!lone || e_.persistent_lone); i++) {
                        run_step(k, p, lone);
                        cudaCheck(cudaStreamSynchronize(e_.stream));
                    }
        }
        for (bool sampling : {false, true}) {  // the prompts' picker, greedy and sampling (any logits do)
            std::vector<TokenPick> picks(P_);
            for (TokenPick& t : picks)
                t.params = sampling ? PickParams{1.f, 0, 1.f} : PickParams{0.f, 0, 1.f}, t.coin = 0.5f;
            std::vector<PickedToken> out;
            prompts_.waited(e_.step.s.logits, picks, nullptr, &out);
        }
    }
    ~GpuServeEngine() override {
        cudaCheck(cudaStreamSynchronize(e_.stream));
        prompts_.destroy();
        for (StepBuffers& sb : step_) {
            cudaCheck(cudaEventDestroy(sb.begin));
            cudaCheck(cudaEventDestroy(sb.done));
            for (CapturedGraph& g : sb.graphs) captured_graph_free(&g);
            for (CapturedGraph& g : sb.lone_graphs) captured_graph_free(&g);
        }
        inference_engine_free(&e_);  // every buffer above is a row of its plan
    }

    int slots() const override { return B_; }
    int context() const override { return e_.shape.max_T; }
    int vocab_size() const override { return e_.config.vocab_size; }
    int prefill_chunk() const override { return chunk_; }
    int prefill_rows() const override { return P_; }
    int steps_in_flight() const override { return depth_; }
    int prefills_in_flight() const override { return PromptPicks::kInFlight; }

    // A chunk, queued behind the steps in flight; a prompt's last chunk waits for its first token.
    PickedToken prefill(int slot, const int* tokens, int start, int n, const TokenPick* last) override {
        if (chunk_ == 0) {
            if (start != 0 || !last) throw std::logic_error("this engine prefills whole prompts only");
            std::vector<PickedToken> out;
            prefill_whole({PrefillPrompt{slot, tokens, n, *last}}, &out);
            return out[0];
        }
        if (slot < 0 || slot >= B_ || n < 1 || n > chunk_ || (start != 0 && start != known_[slot]) ||
            start + n >= e_.shape.max_T)
            throw std::logic_error("prefill: slot " + std::to_string(slot) + ", " + std::to_string(n) +
                                   " tokens at " + std::to_string(start));
        const int* slot_d = inference_prefill_chunk(&e_, slot, tokens, start, n);
        known_[slot] = start + n;
        if (!last) return PickedToken{};
        std::vector<PickedToken> out;
        prompts_.waited(inference_prefill_logits(&e_), {*last}, slot_d, &out);
        return out[0];
    }

    // Queued behind the steps in flight, if any (the same stream): it waits for them too, which the next decode_end
    // then finds done.
    void prefill_whole(const std::vector<PrefillPrompt>& prompts, std::vector<PickedToken>* out) override {
        prompts_.waited(inference_prefill_logits(&e_), queue_prompts(prompts, "prefill_whole"),
                        inference_prefill_slots_device(&e_), out);
    }
    // The same not waited for: each first pick is its slot's next input on the device, so the next decode step may
    // take the slot; the tokens come at prefill_whole_end.
    void prefill_whole_begin(const std::vector<PrefillPrompt>& prompts) override {
        if (prompts_.in_flight() >= PromptPicks::kInFlight)  // before any work is queued
            throw std::logic_error("prefill_whole_begin: " + std::to_string(prompts_.in_flight()) + " calls in flight");
        prompts_.begin(inference_prefill_logits(&e_), queue_prompts(prompts, "prefill_whole_begin"),
                       inference_prefill_slots_device(&e_));
    }
    void prefill_whole_end(std::vector<PickedToken>* out) override { prompts_.end(out); }

    void decode_begin(const std::vector<DecodeSlot>& batch) override {
        if ((int)flights_.size() >= depth_)
            throw std::logic_error("decode_begin: " + std::to_string(flights_.size()) + " steps already in flight");
        const int ctx = e_.shape.max_T;
        int busy = 1;
        for (const DecodeSlot& d : batch) {
            if (d.slot < 0 || d.slot >= B_ || d.position != known_[d.slot] || d.position >= ctx)
                throw std::logic_error("decode: slot " + std::to_string(d.slot) + " at position " +
                                       std::to_string(d.position) + " (it holds " +
                                       std::to_string(d.slot >= 0 && d.slot < B_ ? known_[d.slot] : -1) + ")");
            busy = std::max(busy, d.slot + 1);
        }
        const int R = inference_decode_rows(&e_, busy);
        // one busy slot, wherever it sits: the persistent step where the engine runs it (persistent_lone: asked for,
        // or Auto's from C 1024 on), its row only; the picks below R read other rows' stale logits, and only free
        // rows' throwaway steps read those picks, as inputs
        const bool lone = e_.persistent_lone && batch.size() == 1;
        // the other parity's buffers may still be read by the step in flight; this one's last step has been waited for
        const int p = next_parity_;
        next_parity_ ^= 1;
        // each row's length after the step, rule and coin; free slots below R compute a throwaway row at their own
        // next position, greedy (their picks are not read)
        int* len = stage_len(p);
        for (int b = 0; b < R; b++) {
            len[b] = std::min(known_[b], ctx - 1) + 1;
            stage_params(p)[b] = PickParams{0.f, 0, 1.f}, stage_coins(p)[b] = 0.f;
        }
        for (const DecodeSlot& d : batch) {
            len[d.slot] = d.position + 1;
            stage_params(p)[d.slot] = d.pick.params;
            stage_coins(p)[d.slot] = d.pick.coin;
        }
        for (const DecodeSlot& d : batch) known_[d.slot] = d.position + 1;
        if (lone) *stage_row(p) = batch[0].slot;
        double positions = 0;  // what the step's attention reads: every row below R over its length (lone: its row's)
        if (lone) positions = len[batch[0].slot];
        else
            for (int b = 0; b < R; b++) positions += len[b];
        StepBuffers& sb = step_[p];
        // begin completes when the stream reaches it (after the step before, if one is in flight): begin..done is
        // this step's own GPU time
        cudaCheck(cudaEventRecord(sb.begin, e_.stream));
        run_step((size_t)(std::find(e_.row_buckets.begin(), e_.row_buckets.end(), R) - e_.row_buckets.begin()), p,
                 lone);
        // rows that report logprobs: their logits to the host now, before the next step overwrites them
        const size_t Vp = e_.config.padded_vocab_size;
        for (const DecodeSlot& d : batch)
            if (d.pick.top_logprobs >= 0)
                cudaCheck(cudaMemcpyAsync(sb.logits_h + (size_t)d.slot * Vp, e_.step.s.logits + (size_t)d.slot * Vp,
                                          Vp * sizeof(floatX), cudaMemcpyDeviceToHost, e_.stream));
        cudaCheck(cudaEventRecord(sb.done, e_.stream));
        flights_.push_back(Flight{batch, R, p, positions, lone});
    }

    void decode_end(std::vector<PickedToken>* out) override {
        if (flights_.empty()) throw std::logic_error("decode_end: no step in flight");
        const Flight f = std::move(flights_.front());
        flights_.pop_front();
        const StepBuffers& sb = step_[f.parity];
        cudaCheck(cudaEventSynchronize(sb.done));
        float step_ms = 0.f;
        cudaCheck(cudaEventElapsedTime(&step_ms, sb.begin, sb.done));
        decode_gpu_ms_ += step_ms, decode_positions_ += f.positions, decode_steps_++, lone_steps_ += f.lone;
        lone_past0_ += f.lone && f.batch[0].slot != 0;
        const int V = e_.config.vocab_size;
        const size_t Vp = e_.config.padded_vocab_size;
        out->assign(f.batch.size(), PickedToken{});
        for (size_t i = 0; i < f.batch.size(); i++) {
            const DecodeSlot& d = f.batch[i];
            if (sb.result_h[f.R + d.slot]) continue;  // a non-finite logit: token -1, the scheduler ends the sequence
            (*out)[i].token = sb.result_h[d.slot];
            if (d.pick.top_logprobs >= 0) {
                host_values_to_floats(logits_.data(), sb.logits_h + (size_t)d.slot * Vp, Vp);
                fill_logprobs(logits_.data(), V, d.pick.top_logprobs, &(*out)[i]);
            }
        }
    }

    // The decode steps' GPU time (begin..done of each) and what they read: every weight once a step and each of the
    // R rows' K and V over its length, free slots' throwaway rows included (llmc/inference/decode_traffic.h); how many
    // ran as one slot's persistent step, where the engine runs it (persistent_lone).
    std::string decode_report() const override {
        if (decode_steps_ == 0) return "";
        const DecodeTraffic t = decode_traffic(e_.config, sizeof(floatX));
        const double bytes = decode_steps_ * t.weight_bytes + decode_positions_ * t.kv_bytes_per_position;
        char head[96];
        snprintf(head, sizeof(head), "decode steps on the GPU: %.3f ms each over %llu; read ",
                 decode_gpu_ms_ / decode_steps_, (unsigned long long)decode_steps_);
        std::string lone;
        if (e_.persistent_lone)
            lone = "; " + std::to_string(lone_steps_) + " of them one slot's, as the persistent step";
        return head + bandwidth_text(bytes, decode_gpu_ms_, device_peak_memory_bandwidth()) + lone;
    }
    double decode_device_ms() const override { return decode_gpu_ms_; }

    // a free slot's throwaway decode rows (below R) write at position known_: past the prefix it keeps, and cheap
    // (attention over known_ + 1 positions) when it keeps none
    void release(int slot, int keep) override {
        if (slot < 0 || slot >= B_) throw std::logic_error("release: slot " + std::to_string(slot));
        known_[slot] = std::max(0, std::min(keep, known_[slot]));
    }

    bool copies_prefix() const override { return chunk_ > 0; }
    void copy_prefix(int from, int to, int n) override {
        if (chunk_ == 0 || from < 0 || from >= B_ || to < 0 || to >= B_ || n < 1 || n >= e_.shape.max_T ||
            n > known_[from])  // more than the slot holds (queued work included)
            throw std::logic_error("copy_prefix: slot " + std::to_string(from) + " to " + std::to_string(to) + ", " +
                                   std::to_string(n) + " positions");
        inference_copy_prefix(&e_, from, to, n);
        known_[to] = n;
    }

    const InferenceEngine& engine() const { return e_; }
    // steps ended that ran as one slot's persistent step; those whose slot was not slot 0
    uint64_t lone_steps() const { return lone_steps_; }
    uint64_t lone_steps_past_slot0() const { return lone_past0_; }

private:
    // The decode step's packed upload: lengths (B ints), rules (B), coins (B), pinned and on the device alike.
    size_t stage_bytes() const { return serve_upload_bytes(B_); }
    int* stage_len(int p) const { return (int*)step_[p].stage_h; }
    PickParams* stage_params(int p) const { return (PickParams*)((char*)step_[p].stage_h + (size_t)B_ * sizeof(int)); }
    float* stage_coins(int p) const {
        return (float*)((char*)step_[p].stage_h + (size_t)B_ * (sizeof(int) + sizeof(PickParams)));
    }
    size_t stage_row_offset() const { return (size_t)B_ * (sizeof(int) + sizeof(PickParams) + sizeof(float)); }
    int* stage_row(int p) const { return (int*)((char*)step_[p].stage_h + stage_row_offset()); }

    // Row bucket k's step with parity p's buffers: the stage up (lengths, rules, coins, read where the step runs),
    // the step over R rows reading its lengths from the stage, every row's pick (with the shared memory sampling
    // needs, whatever the rows ask: the graph is one for all rules) into the next step's inputs and, through mapped
    // memory, tokens and flags into the parity's result_h[0, 2R). lone: the persistent step of the stage's lone slot
    // instead of the R rows' step. One CUDA Graph per (k, p, lone) (captured on its second run), or plain without
    // graphs.
    void run_step(size_t k, int p, bool lone) {
        const int R = e_.row_buckets[k];
        StepBuffers& sb = step_[p];
        const char* stage = (const char*)sb.stage_d;
        const PickParams* params = (const PickParams*)(stage + (size_t)B_ * sizeof(int));
        const float* coins = (const float*)(stage + (size_t)B_ * (sizeof(int) + sizeof(PickParams)));
        DecodeStep step = R == B_ ? e_.step : decode_step_rows(e_.step, R, e_.decode_asked);
        if (lone) {
            step.settings.products = DecodeProducts::Persistent;
            step.persistent_row = (const int*)(stage + stage_row_offset());
        }
        step.cache = &sb.cache;
        auto body = [&] {
            cudaCheck(cudaMemcpyAsync(sb.stage_d, sb.stage_h, stage_bytes(), cudaMemcpyHostToDevice, e_.stream));
            decode_forward(step);
            pick_tokens_per_row(e_.step.s.logits, (size_t)e_.config.padded_vocab_size, R, e_.config.vocab_size, params,
                                true, coins, sb.result_mapped, sb.result_mapped + R, scratch_d_, e_.stream,
                                e_.step.s.tokens, /*pdl=*/true);
        };
        if (e_.options.graph) run_as_graph(e_.stream, lone ? &sb.lone_graphs[k] : &sb.graphs[k], body);
        else body();
    }

    // Whole prompts' forward queued (1 .. P of them, distinct slots); their picks, in order.
    std::vector<TokenPick> queue_prompts(const std::vector<PrefillPrompt>& prompts, const char* who) {
        const int n = (int)prompts.size();
        if (n < 1 || n > P_) throw std::logic_error(std::string(who) + ": " + std::to_string(n) + " prompts");
        std::vector<SlotPrompt> rows;
        for (const PrefillPrompt& p : prompts) rows.push_back(SlotPrompt{p.slot, p.tokens, p.n});
        inference_prefill_slots(&e_, rows);
        std::vector<TokenPick> picks;
        for (const PrefillPrompt& p : prompts) known_[p.slot] = p.n, picks.push_back(p.pick);
        return picks;
    }

    InferenceEngine e_;
    int B_ = 0, P_ = 0, chunk_ = 0;
    std::vector<int> known_;  // positions each slot's sequence holds in the cache (a free slot: its last sequence's)
    std::vector<float> logits_;  // one row, for logprobs
    PromptPicks prompts_;        // the prompts' first picks
    int* scratch_d_ = nullptr;   // the pickers' scratch (max(B, P) ints), the decode steps' and the prompts'
    // A decode step's own buffers; steps alternate between two (parity) so that two may be in flight.
    struct StepBuffers {
        void* stage_d = nullptr;  // the packed upload (stage_bytes), on the device and in mapped host memory
        void* stage_h = nullptr;
        int* result_h = nullptr;     // pinned and mapped: tokens (B), then non-finite flags (B)
        int* result_mapped = nullptr;  // its device address
        floatX* logits_h = nullptr;  // pinned (B, Vp): the rows that report logprobs
        cudaEvent_t begin = nullptr, done = nullptr;  // the step starts on the GPU; its results are on the host
        KVCache cache;  // the engine's, but for its lengths: the stage's
        std::vector<CapturedGraph> graphs;  // per row bucket: the upload, the step and its picks
        std::vector<CapturedGraph> lone_graphs;  // the same with the persistent step of the lone slot
    };
    StepBuffers step_[2];
    struct Flight {
        std::vector<DecodeSlot> batch;  // the step's rows
        int R, parity;
        double positions;  // attended by its R rows (decode_report)
        bool lone;         // the persistent step of its one slot
    };
    std::deque<Flight> flights_;  // steps in flight, oldest first
    double decode_gpu_ms_ = 0, decode_positions_ = 0;  // over the steps ended (decode_report)
    uint64_t decode_steps_ = 0, lone_steps_ = 0, lone_past0_ = 0;
    int depth_ = 2, next_parity_ = 0;
};
