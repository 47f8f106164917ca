// The serving engine on the GPU: the scheduler's interface (llmc/serving/serve_engine.h) over the inference engine
// by slots (llmc/inference/slots.cuh). A prompt is prefilled whole, one slot at a time (prefill_chunk() 0: the shared
// forward attends over its own positions only, so a chunk cannot continue a cached prefix yet). A decode step runs
// over the first R slots (R: the smallest of 1, 2, 4, ..., B covering the busy ones; its own CUDA Graph) with each
// slot's token and position. Every pick, a prompt's first token's and each step's, is made on the GPU with the
// row's own rule and coin (pick_tokens_per_row, llmc/kernels/sampling.cuh: the rule the host's is built from), so
// only tokens and non-finite flags come back; a request that asks for logprobs has its logits row copied to the host
// for them (llmc/serving/host_pick.h).
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/core/cuda_common.h"
#include "llmc/inference/slots.cuh"
#include "llmc/kernels/sampling.cuh"
#include "llmc/serving/host_pick.h"
#include "llmc/serving/serve_engine.h"

class GpuServeEngine : public ServeEngine {
public:
    // host_params: gpt2_parameter_table order, fp32 (read_model_any's), uploaded as floatX and freed.
    GpuServeEngine(const GPT2Config& c, std::vector<float> host_params, int slots, int context,
                   const InferenceOptions& options)
        : known_(slots, 0), logits_((size_t)c.padded_vocab_size) {
        inference_engine_upload(&e_, c, std::move(host_params), slots_shape(slots, context), options);
        const size_t B = (size_t)slots;
        cudaCheck(cudaMalloc(&params_d_, B * sizeof(PickParams)));
        cudaCheck(cudaMalloc(&coins_d_, B * sizeof(float)));
        cudaCheck(cudaMalloc(&result_d_, 2 * B * sizeof(int)));
        cudaCheck(cudaMalloc(&scratch_d_, 2 * B * sizeof(int)));
        cudaCheck(cudaMallocHost(&params_h_, B * sizeof(PickParams)));
        cudaCheck(cudaMallocHost(&coins_h_, B * sizeof(float)));
        cudaCheck(cudaMallocHost(&result_h_, 2 * B * sizeof(int)));
        // each row count's graph is captured on its second call, and the picker's kernels load on their first: all
        // now, not in the first requests' time
        const std::vector<int> zeros(slots, 0);
        for (int rows : e_.row_buckets)
            for (int i = 0; i < 2; i++) inference_decode_slots(&e_, zeros, zeros, rows);
        for (bool sampling : {false, true}) {
            for (int b = 0; b < slots; b++)
                params_h_[b] = sampling ? PickParams{1.f, 0, 1.f} : PickParams{0.f, 0, 1.f}, coins_h_[b] = 0.5f;
            pick_rows(slots, 0);
        }
        cudaCheck(cudaStreamSynchronize(e_.stream));
    }
    ~GpuServeEngine() override {
        cudaCheck(cudaFree(params_d_));
        cudaCheck(cudaFree(coins_d_));
        cudaCheck(cudaFree(result_d_));
        cudaCheck(cudaFree(scratch_d_));
        cudaCheck(cudaFreeHost(params_h_));
        cudaCheck(cudaFreeHost(coins_h_));
        cudaCheck(cudaFreeHost(result_h_));
        inference_engine_free(&e_);
    }

    int slots() const override { return e_.shape.B; }
    int context() const override { return e_.shape.max_T; }
    int vocab_size() const override { return e_.config.vocab_size; }
    int prefill_chunk() const override { return 0; }

    PickedToken prefill(int slot, const int* tokens, int start, int n, const TokenPick* last) override {
        if (start != 0 || !last) throw std::logic_error("the GPU engine prefills whole prompts only");
        inference_prefill_slot(&e_, slot, tokens, n);
        known_[slot] = n;
        params_h_[0] = last->params, coins_h_[0] = last->coin;
        pick_rows(1, slot);
        PickedToken t;
        if (result_h_[1]) return t;  // a non-finite logit: token -1
        t.token = result_h_[0];
        if (last->top_logprobs >= 0) {
            inference_logit_rows_to_host(&e_, slot, 1, logits_.data());
            fill_logprobs(logits_.data(), e_.config.vocab_size, last->top_logprobs, &t);
        }
        return t;
    }

    void decode(const std::vector<DecodeSlot>& batch, std::vector<PickedToken>* out) override {
        const int B = e_.shape.B, ctx = e_.shape.max_T;
        int busy = 1;
        for (const DecodeSlot& d : batch) {
            if (d.slot < 0 || d.slot >= B || d.position != known_[d.slot] || d.position >= ctx)
                throw std::logic_error("decode: slot " + std::to_string(d.slot) + " at position " +
                                       std::to_string(d.position) + " (it holds " +
                                       std::to_string(d.slot >= 0 && d.slot < B ? known_[d.slot] : -1) + ")");
            busy = std::max(busy, d.slot + 1);
        }
        const int R = inference_decode_rows(&e_, busy);
        std::vector<int> tokens(R, 0), positions(R);
        for (int b = 0; b < R; b++) positions[b] = std::min(known_[b], ctx - 1);  // free slots: their own next row
        // each row's rule and coin; the rows of free slots greedy (their picks are not read)
        for (int b = 0; b < R; b++) params_h_[b] = PickParams{0.f, 0, 1.f}, coins_h_[b] = 0.f;
        for (const DecodeSlot& d : batch) {
            tokens[d.slot] = d.token, positions[d.slot] = d.position;
            params_h_[d.slot] = d.pick.params;
            coins_h_[d.slot] = d.pick.coin;
        }
        inference_decode_slots(&e_, tokens, positions, R);
        for (const DecodeSlot& d : batch) known_[d.slot] = d.position + 1;
        pick_rows(R, 0);
        const int V = e_.config.vocab_size;
        out->assign(batch.size(), PickedToken{});
        for (size_t i = 0; i < batch.size(); i++) {
            const DecodeSlot& d = batch[i];
            if (result_h_[R + d.slot]) continue;  // a non-finite logit: token -1, the scheduler ends the sequence
            (*out)[i].token = result_h_[d.slot];
            if (d.pick.top_logprobs >= 0) {
                inference_logit_rows_to_host(&e_, d.slot, 1, logits_.data());
                fill_logprobs(logits_.data(), V, d.pick.top_logprobs, &(*out)[i]);
            }
        }
    }

    void release(int slot) override { known_[slot] = 0; }

    const InferenceEngine& engine() const { return e_; }

private:
    // Picks rows [first, first + rows) of the logits with params_h_[0..rows) and coins_h_[0..rows): tokens into
    // result_h_[0..rows), non-finite flags into result_h_[rows..2 rows); waits for them.
    void pick_rows(int rows, int first) {
        const size_t Vp = e_.config.padded_vocab_size;
        bool sampling = false;  // some row samples: the kernel gets the shared memory for a row (greedy needs none)
        for (int b = 0; b < rows; b++) sampling = sampling || !params_h_[b].greedy();
        cudaCheck(cudaMemcpyAsync(params_d_, params_h_, rows * sizeof(PickParams), cudaMemcpyHostToDevice, e_.stream));
        cudaCheck(cudaMemcpyAsync(coins_d_, coins_h_, rows * sizeof(float), cudaMemcpyHostToDevice, e_.stream));
        pick_tokens_per_row(e_.step.s.logits + first * Vp, Vp, rows, e_.config.vocab_size, params_d_, sampling,
                            coins_d_, result_d_, result_d_ + rows, scratch_d_, e_.stream);
        cudaCheck(cudaMemcpyAsync(result_h_, result_d_, 2 * rows * sizeof(int), cudaMemcpyDeviceToHost, e_.stream));
        cudaCheck(cudaStreamSynchronize(e_.stream));
    }

    InferenceEngine e_;
    std::vector<int> known_;  // positions each slot's sequence holds in the cache (0: free)
    std::vector<float> logits_;  // one row, for logprobs
    PickParams* params_d_ = nullptr;  // (B) the decode step's rules, coins and results, on the device and pinned
    float* coins_d_ = nullptr;
    int* result_d_ = nullptr;   // (2B): tokens, then non-finite flags
    int* scratch_d_ = nullptr;  // (2B): the picker's length bookkeeping
    PickParams* params_h_ = nullptr;
    float* coins_h_ = nullptr;
    int* result_h_ = nullptr;
};
