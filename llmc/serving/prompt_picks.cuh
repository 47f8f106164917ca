// The prompts' first tokens for the GPU serving engine (llmc/serving/gpu_engine.cuh): after a prefill, each prompt's
// first new token is picked on the GPU from its logits row by its own rule and coin (pick_tokens_per_row) and written
// as its slot's next decode input (inference_commit_picks); the tokens and non-finite flags come back to pinned rows.
// A call of whole prompts is begun and ended apart (begin / end), so the host need not wait for it and the stream
// keeps the decode steps queued behind it; up to two are in flight, each with its own set of pinned rows and event.
// The calls that wait for their tokens (a chunk's last pick, the warm-up) take a third set, so they never touch a
// call in flight. A call with a logprobs request is read at once: its logits rows are read before a later call
// overwrites them. The device rows (settings, coins, results) are one, reused in the stream's order.
#pragma once

#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/core/cuda_common.h"
#include "llmc/inference/inference_plan.h"
#include "llmc/inference/slots.cuh"
#include "llmc/kernels/sampling/sampling.cuh"
#include "llmc/serving/host_pick.h"
#include "llmc/serving/serve_engine.h"

class PromptPicks {
public:
    static constexpr int kInFlight = 2, kWaitedSet = 2;
    static_assert(kServePickSets == kInFlight + 1, "a set per call in flight and one for the calls that wait");

    // The engine's rows for them (its plan's Serve* rows), P prompts a call at most.
    void init(InferenceEngine* e) {
        using namespace infer;
        e_ = e;
        P_ = e->shape.prefill_rows();
        params_d_ = e->at<PickParams>(ServeParams), coins_d_ = e->at<float>(ServeCoins);
        result_d_ = e->at<int>(ServePicks), scratch_d_ = e->at<int>(ServeScratch);
        params_h_ = e->at<char>(ServeParamsHost), coins_h_ = e->at<char>(ServeCoinsHost);
        result_h_ = e->at<char>(ServePicksHost);
        logits_.resize((size_t)e->config.padded_vocab_size);
        for (cudaEvent_t& ev : done_) cudaCheck(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    }
    // After the stream is done with them.
    void destroy() {
        for (cudaEvent_t& ev : done_)
            if (ev) cudaCheck(cudaEventDestroy(ev)), ev = nullptr;
    }

    int in_flight() const { return (int)flights_.size(); }

    // Picks rows [0, n) of `logits` (Vp apart; row i prompt i) into the slots' next inputs (slot_of: device array;
    // null: row i is slot i). Queued behind the work before it; its tokens are read by end().
    void begin(const floatX* logits, std::vector<TokenPick> picks, const int* slot_of) {
        if (in_flight() >= kInFlight) throw std::logic_error("prefill_whole_begin: " + std::to_string(in_flight()) +
                                                             " calls in flight");
        Flight f{std::move(picks), next_set_, false, {}};
        queue(logits, f.picks, slot_of, f.set);
        next_set_ ^= 1;  // once queued: the call in flight, if any, has the other set
        bool logprobs = false;
        for (const TokenPick& p : f.picks) logprobs = logprobs || p.top_logprobs >= 0;
        if (logprobs) {
            cudaCheck(cudaStreamSynchronize(e_->stream));
            read(logits, f.picks, f.set, &f.out);
            f.read = true;
        } else {
            cudaCheck(cudaEventRecord(done_[f.set], e_->stream));
        }
        flights_.push_back(std::move(f));
    }
    // The oldest call begun: waits for its picks (and the stream before them), its tokens.
    void end(std::vector<PickedToken>* out) {
        if (flights_.empty()) throw std::logic_error("prefill_whole_end: no call in flight");
        Flight f = std::move(flights_.front());
        flights_.pop_front();
        if (!f.read) {
            cudaCheck(cudaEventSynchronize(done_[f.set]));
            read(nullptr, f.picks, f.set, &f.out);
        }
        *out = std::move(f.out);
    }
    // Both at once, waiting for the stream.
    void waited(const floatX* logits, const std::vector<TokenPick>& picks, const int* slot_of,
                std::vector<PickedToken>* out) {
        queue(logits, picks, slot_of, kWaitedSet);
        cudaCheck(cudaStreamSynchronize(e_->stream));
        read(logits, picks, kWaitedSet, out);
    }

private:
    // Set `set` of the pinned rows: pick settings, coins, results (tokens, then non-finite flags), each set's part
    // as the plan lays it out (llmc/inference/inference_plan.h).
    PickParams* set_params(int set) const {
        return (PickParams*)(params_h_ + set * serve_step_stride((size_t)P_ * sizeof(PickParams)));
    }
    float* set_coins(int set) const { return (float*)(coins_h_ + set * serve_step_stride((size_t)P_ * sizeof(float))); }
    int* set_results(int set) const { return (int*)(result_h_ + set * serve_step_stride(2 * (size_t)P_ * sizeof(int))); }

    void queue(const floatX* logits, const std::vector<TokenPick>& picks, const int* slot_of, int set) {
        const int n = (int)picks.size();
        if (n < 1 || n > P_) throw std::logic_error("prompt picks: " + std::to_string(n) + " rows");
        PickParams* params = set_params(set);
        float* coins = set_coins(set);
        bool sampling = false;  // some row samples: the kernel gets the shared memory for a row (greedy needs none)
        for (int i = 0; i < n; i++) {
            params[i] = picks[i].params, coins[i] = picks[i].coin;
            sampling = sampling || !picks[i].params.greedy();
        }
        cudaStream_t stream = e_->stream;
        cudaCheck(cudaMemcpyAsync(params_d_, params, n * sizeof(PickParams), cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaMemcpyAsync(coins_d_, coins, n * sizeof(float), cudaMemcpyHostToDevice, stream));
        pick_tokens_per_row(logits, (size_t)e_->config.padded_vocab_size, n, e_->config.vocab_size, params_d_,
                            sampling, coins_d_, result_d_, result_d_ + n, scratch_d_, stream);
        inference_commit_picks(e_, result_d_, result_d_ + n, slot_of, n);
        cudaCheck(cudaMemcpyAsync(set_results(set), result_d_, 2 * n * sizeof(int), cudaMemcpyDeviceToHost, stream));
    }
    // Once the set's picks are on the host: the tokens, and logprobs from the rows of `logits` (still holding them).
    void read(const floatX* logits, const std::vector<TokenPick>& picks, int set, std::vector<PickedToken>* out) {
        const int n = (int)picks.size();
        const int* result = set_results(set);
        out->assign(n, PickedToken{});
        for (int i = 0; i < n; i++) {
            if (result[n + i]) continue;  // a non-finite logit: token -1
            (*out)[i].token = result[i];
            if (picks[i].top_logprobs >= 0) {
                slots_detail::logit_rows_to_host(e_, logits, i, 1, logits_.data());
                fill_logprobs(logits_.data(), e_->config.vocab_size, picks[i].top_logprobs, &(*out)[i]);
            }
        }
    }

    InferenceEngine* e_ = nullptr;
    int P_ = 0;
    PickParams* params_d_ = nullptr;
    float* coins_d_ = nullptr;
    int* result_d_ = nullptr;
    int* scratch_d_ = nullptr;  // the pickers' (max(B, P) ints), shared with the decode steps': one stream
    char* params_h_ = nullptr;  // set k at k * serve_step_stride(its bytes)
    char* coins_h_ = nullptr;
    char* result_h_ = nullptr;
    std::vector<float> logits_;  // one row, for logprobs
    struct Flight {
        std::vector<TokenPick> picks;
        int set;
        bool read;  // its tokens already in `out` (a logprobs request: read at begin)
        std::vector<PickedToken> out;
    };
    std::deque<Flight> flights_;  // calls begun and not ended, oldest first
    cudaEvent_t done_[kInFlight] = {nullptr, nullptr};  // per set: its call's picks are on the host
    int next_set_ = 0;
};
