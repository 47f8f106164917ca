// Generation's KV cache: every layer's K and V of every position so far, in the build's precision (floatX), laid
// out (L, B, NH, max_T, HS) so one head's keys are contiguous, as decode attention (llmc/kernels/attention/attention_decode.cuh)
// reads them. The prefill writes them as each layer makes them (KVCacheWriter, a listener of the shared forward);
// each decode step appends its token's. Positions at or past a sequence's length hold stale values nothing reads
// (the prefill writes the padding too; decode overwrites it one position at a time).
#pragma once

#include <vector>

#include "llmc/gpt2/gpt2_config.h"
#include "llmc/kernels/attention/attention_decode.cuh"
#include "llmc/model/gpt2_forward.cuh"

struct KVCache {
    int B = 0, max_T = 0, L = 0, NH = 0, HS = 0;
    floatX* k = nullptr;  // (L, B, NH, max_T, HS)
    floatX* v = nullptr;
    int* len = nullptr;         // device (B): tokens in the cache per sequence
    std::vector<int> host_len;  // the host's view of len, advanced as steps are queued
    size_t layer_elements() const { return (size_t)B * NH * max_T * HS; }
    floatX* k_layer(int l) const { return k + l * layer_elements(); }
    floatX* v_layer(int l) const { return v + l * layer_elements(); }
};

// Decode attention's head sizes (64 or 128: every GPT-2 size); other models recompute instead of caching.
inline bool kv_cache_supported(const GPT2Config& c) {
    const int HS = c.channels / c.num_heads;
    return c.channels % c.num_heads == 0 && (HS == 64 || HS == 128);
}

// The prefill's listener: layer l's K and V, positions 0..T-1 of the (rows, T, 3C) QKV rows, into the cache's
// sequences first .. first + rows - 1 (default: all B), or row i into sequence slots[i] (a device array: a server's
// prompts into their slots; -1: nowhere), as soon as they are queued, before the next layer overwrites the one QKV
// buffer every layer shares.
struct KVCacheWriter : ForwardListener {
    const KVCache* cache;
    int T;  // the prefill's positions per sequence
    cudaStream_t stream;
    int first, rows;
    const int* slots;
    KVCacheWriter(const KVCache* c, int T_, cudaStream_t s, int first_ = 0, int rows_ = -1,
                  const int* slots_ = nullptr)
        : cache(c), T(T_), stream(s), first(first_), rows(rows_ < 0 ? c->B : rows_), slots(slots_) {}
    void qkv_ready(int layer, const floatX* qkv) override {
        const int C = cache->NH * cache->HS;
        const size_t at = slots ? 0 : (size_t)first * cache->NH * cache->max_T * cache->HS;  // sequence `first`'s
        cudaCheck(decode_attention::copy_kv(cache->k_layer(layer) + at, cache->v_layer(layer) + at, qkv + C,
                                            (size_t)3 * C, nullptr, rows, T, cache->NH, cache->HS, cache->max_T,
                                            stream, false, slots));
    }
};
