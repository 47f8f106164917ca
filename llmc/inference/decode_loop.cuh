// Generation's loop on the GPU: each decode step ends with the token picker (llmc/kernels/sampling/sampling.cuh: greedy, or
// temperature / top-k / top-p with coins drawn up front), whose token is the next step's input, so the host only
// launches steps (as one CUDA Graph each) and reads the tokens from mapped memory, steps ahead. At temperature 0
// the pick folds into the classifier where that runs as decode_matvec.
//   decode_loop_begin(step, &loop);   // after the prefill: the first new token from its logits
//   decode_loop_step(step, &loop);    // each further token
#pragma once

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "llmc/inference/decode_step.cuh"
#include "llmc/kernels/sampling/sampling.cuh"

struct DecodeLoop {
    int B = 0, max_new = 0;
    bool graph = true;  // steps replayed as a CUDA Graph
    PickParams pick;
    float* coins = nullptr;       // device (max_new, B): sequence b's g-th coin at [g·B + b] (unused when greedy)
    int* prompt_len = nullptr;    // device (B)
    int* tokens = nullptr;        // host, mapped (max_new, B): tokens[g·B + b] = sequence b's g-th new token
    int* tokens_device = nullptr;
    unsigned long long* pick_partials = nullptr;  // greedy with decode_matvec's classifier (DecodeGreedyPick)
    unsigned* pick_count = nullptr;
    CapturedGraph step_graph;
};

// The coins of the next run, sequence b's g-th at [g·B + b] (the first rows of (max_new, B)), queued on `stream`
// ahead of the prefill that the picks follow.
inline void decode_loop_set_coins(DecodeLoop* loop, const std::vector<float>& coins, cudaStream_t stream) {
    if (coins.size() > (size_t)loop->max_new * loop->B || coins.size() % loop->B != 0) {
        fprintf(stderr, "error: decode_loop_set_coins: %zu coins for rows of %d, at most %d rows\n", coins.size(),
                loop->B, loop->max_new);
        exit(EXIT_FAILURE);
    }
    cudaCheck(cudaMemcpyAsync(loop->coins, coins.data(), coins.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
}

// After the prefill (its logits: row b at sequence b's last prompt position; the cache's lengths the prompts'):
// picks every sequence's first new token.
inline void decode_loop_begin(const DecodeStep& d, DecodeLoop* loop) {
    KVCache* cache = d.cache;
    const int B = cache->B;
    cudaCheck(cudaMemcpyAsync(loop->prompt_len, cache->host_len.data(), B * sizeof(int), cudaMemcpyHostToDevice,
                              d.stream));
    pick_tokens(d.s.logits, d.config.padded_vocab_size, 1, B, d.config.vocab_size, loop->pick, loop->coins,
                loop->prompt_len, cache->len, d.s.tokens, loop->tokens_device, loop->max_new, d.stream);
    for (int& n : cache->host_len) n++;
}

// One decode step for every sequence, its input the token the last pick chose; ends with the next pick.
inline void decode_loop_step(const DecodeStep& d, DecodeLoop* loop) {
    KVCache* cache = d.cache;
    for (int b = 0; b < cache->B; b++) {
        if (cache->host_len[b] > cache->max_T) {
            fprintf(stderr, "error: decode_loop_step: sequence %d would hold %d tokens, the cache %d\n", b,
                    cache->host_len[b], cache->max_T);
            exit(EXIT_FAILURE);
        }
        cache->host_len[b]++;
    }
    DecodeGreedyPick fused{loop->pick_partials, loop->pick_count, d.config.vocab_size, loop->prompt_len, cache->len,
                           d.s.tokens, loop->tokens_device, loop->max_new, cache->B};
    auto body = [&] {
        if (decode_forward(d, loop->pick_partials ? &fused : nullptr)) return;
        pick_tokens(d.s.logits, d.config.padded_vocab_size, 1, cache->B, d.config.vocab_size, loop->pick, loop->coins,
                    loop->prompt_len, cache->len, d.s.tokens, loop->tokens_device, loop->max_new, d.stream,
                    /*pdl=*/true);
    };
    if (loop->graph) run_as_graph(d.stream, &loop->step_graph, body);
    else body();
}
