// The serving engine on the GPU: the scheduler's interface (llmc/serving/serve_engine.h) over the inference engine
// by slots (llmc/inference/slots.cuh). A prompt is prefilled whole, one slot at a time (prefill_chunk() 0: the shared
// forward attends over its own positions only, so a chunk cannot continue a cached prefix yet); a decode step runs
// the engine's B-row step with each slot's token and position. Each row's token is picked on the host by the
// shared rule with its request's parameters and coin (llmc/serving/host_pick.h), from the logits copied back, rows
// in parallel (OpenMP): requests differ in temperature, top-k, top-p and seed, which the GPU picker (one rule per
// step) does not take yet, and logprobs need the logits anyway. What this costs per step, and the GPU picker that
// would remove it, are to be measured on a GPU (docs/SERVING.md).
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/inference/slots.cuh"
#include "llmc/serving/host_pick.h"
#include "llmc/serving/serve_engine.h"

class GpuServeEngine : public ServeEngine {
public:
    // host_params: gpt2_parameter_table order, fp32 (read_model_any's), uploaded as floatX and freed.
    GpuServeEngine(const GPT2Config& c, std::vector<float> host_params, int slots, int context,
                   const InferenceOptions& options)
        : known_(slots, 0), logits_((size_t)slots * c.padded_vocab_size) {
        inference_engine_upload(&e_, c, std::move(host_params), slots_shape(slots, context), options);
        // the step's graph is captured on its second call: both now, not in the first requests' time
        const std::vector<int> zeros(slots, 0);
        for (int i = 0; i < 2; i++) inference_decode_slots(&e_, zeros, zeros);
        cudaCheck(cudaStreamSynchronize(e_.stream));
    }
    ~GpuServeEngine() override { inference_engine_free(&e_); }

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
        int rows = 0;
        for (const DecodeSlot& d : batch) {
            if (d.slot < 0 || d.slot >= B || d.position != known_[d.slot] || d.position >= ctx)
                throw std::logic_error("decode: slot " + std::to_string(d.slot) + " at position " +
                                       std::to_string(d.position) + " (it holds " +
                                       std::to_string(d.slot >= 0 && d.slot < B ? known_[d.slot] : -1) + ")");
            tokens[d.slot] = d.token, positions[d.slot] = d.position;
            rows = std::max(rows, d.slot + 1);
        }
        inference_decode_slots(&e_, tokens, positions);
        for (const DecodeSlot& d : batch) known_[d.slot] = d.position + 1;
        inference_logit_rows_to_host(&e_, 0, rows, logits_.data());
        out->assign(batch.size(), PickedToken{});
        const size_t Vp = e_.config.padded_vocab_size;
        const int V = e_.config.vocab_size, n = (int)batch.size();
#pragma omp parallel for schedule(dynamic)
        for (int i = 0; i < n; i++) (*out)[i] = pick_from_logits(logits_.data() + batch[i].slot * Vp, V, batch[i].pick);
    }

    void release(int slot) override { known_[slot] = 0; }

    const InferenceEngine& engine() const { return e_; }

private:
    InferenceEngine e_;
    std::vector<int> known_;  // positions each slot's sequence holds in the cache (0: free)
    std::vector<float> logits_;
};
