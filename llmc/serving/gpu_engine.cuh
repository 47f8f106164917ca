// The serving engine on the GPU: the scheduler's interface (llmc/serving/serve_engine.h) over the inference engine
// by slots (llmc/inference/slots.cuh). A prompt is prefilled whole, one slot at a time (prefill_chunk() 0: the shared
// forward attends over its own positions only, so a chunk cannot continue a cached prefix yet), its first token
// picked on the host (llmc/serving/host_pick.h) from the one row of logits. A decode step runs the engine's B-row
// step with each slot's token and position, then the GPU picker with each row's own rule and coin
// (pick_tokens_per_row, llmc/kernels/sampling.cuh: the rule the host's is built from), so only B tokens and B
// non-finite flags come back; the rows whose requests ask for logprobs copy their logits row to the host for them.
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
        // the step's graph is captured on its second call: both now, not in the first requests' time
        const std::vector<int> zeros(slots, 0);
        for (int i = 0; i < 2; i++) inference_decode_slots(&e_, zeros, zeros);
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
        inference_logit_rows_to_host(&e_, slot, 1, logits_.data());
        return pick_from_logits(logits_.data(), e_.config.vocab_size, *last);
    }

    void decode(const std::vector<DecodeSlot>& batch, std::vector<PickedToken>* out) override {
        const int B = e_.shape.B, ctx = e_.shape.max_T;
        std::vector<int> tokens(B, 0), positions(B);
        for (int b = 0; b < B; b++) positions[b] = std::min(known_[b], ctx - 1);  // free slots: their own next row
        for (const DecodeSlot& d : batch) {
            if (d.slot < 0 || d.slot >= B || d.position != known_[d.slot] || d.position >= ctx)
                throw std::logic_error("decode: slot " + std::to_string(d.slot) + " at position " +
                                       std::to_string(d.position) + " (it holds " +
                                       std::to_string(d.slot >= 0 && d.slot < B ? known_[d.slot] : -1) + ")");
            tokens[d.slot] = d.token, positions[d.slot] = d.position;
        }
        inference_decode_slots(&e_, tokens, positions);
        for (const DecodeSlot& d : batch) known_[d.slot] = d.position + 1;
        // each row's rule and coin; the rows of free slots greedy (their picks are not read)
        bool sampling = false;
        for (int b = 0; b < B; b++) params_h_[b] = PickParams{0.f, 0, 1.f}, coins_h_[b] = 0.f;
        for (const DecodeSlot& d : batch) {
            params_h_[d.slot] = d.pick.params;
            coins_h_[d.slot] = d.pick.coin;
            sampling = sampling || !d.pick.params.greedy();
        }
        const size_t Vp = e_.config.padded_vocab_size;
        const int V = e_.config.vocab_size;
        cudaCheck(cudaMemcpyAsync(params_d_, params_h_, B * sizeof(PickParams), cudaMemcpyHostToDevice, e_.stream));
        cudaCheck(cudaMemcpyAsync(coins_d_, coins_h_, B * sizeof(float), cudaMemcpyHostToDevice, e_.stream));
        pick_tokens_per_row(e_.step.s.logits, Vp, B, V, params_d_, sampling, coins_d_, result_d_, result_d_ + B,
                            scratch_d_, e_.stream);
        cudaCheck(cudaMemcpyAsync(result_h_, result_d_, 2 * B * sizeof(int), cudaMemcpyDeviceToHost, e_.stream));
        cudaCheck(cudaStreamSynchronize(e_.stream));
        out->assign(batch.size(), PickedToken{});
        for (size_t i = 0; i < batch.size(); i++) {
            const DecodeSlot& d = batch[i];
            if (result_h_[B + d.slot]) continue;  // a non-finite logit: token -1, the scheduler ends the sequence
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
    InferenceEngine e_;
    std::vector<int> known_;  // positions each slot's sequence holds in the cache (0: free)
    std::vector<float> logits_;  // one row, for a prompt's first pick and for logprobs
    PickParams* params_d_ = nullptr;  // (B) the decode step's rules, coins and results, on the device and pinned
    float* coins_d_ = nullptr;
    int* result_d_ = nullptr;   // (2B): tokens, then non-finite flags
    int* scratch_d_ = nullptr;  // (2B): the picker's length bookkeeping
    PickParams* params_h_ = nullptr;
    float* coins_h_ = nullptr;
    int* result_h_ = nullptr;
};
