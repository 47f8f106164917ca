// Which slots of the KV cache hold which prompt prefixes, so a request whose prompt begins like an earlier one's (a
// system prompt, few-shot examples) starts from that prefix's keys and values instead of computing them again.
// Blocks are the engine's prefill chunks: the cache keeps only prefixes made of whole chunks that were computed as
// whole chunks at chunk-aligned positions, and with the cache on the scheduler never cuts a chunk short, so a prefix
// taken from the cache holds exactly the keys and values that computing it would give (the same calls, the same
// rounding): a reused prefix changes no logit, no token. A slot keeps what it holds after its sequence ends, until
// the slot is given to a sequence that does not start with it (the least recently used such slot goes first).
// Lookups go by a chain hash of the blocks (block k's hash covers blocks 0..k) and every hit is checked token by
// token, so a hash collision cannot give a wrong prefix. Host-only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <vector>

class PrefixCache {
public:
    PrefixCache(int slots, int block) : block_(block), held_((size_t)slots) {}
    int block() const { return block_; }

    struct Hit {
        int slot = -1;   // -1: none
        int blocks = 0;  // whole blocks of the prompt the slot holds
    };
    // The deepest prefix of prompt[0..n) in whole blocks that a slot holds, leaving at least one token to prefill
    // (the last one's logits give the first new token); at equal depth the slot with the highest score(slot) (-1:
    // not usable).
    Hit find(const int* prompt, int n, const std::function<int(int)>& score) const {
        Hit best;
        int best_score = -1;
        uint64_t h = kSeed;
        for (int k = 0; (k + 1) * block_ <= n - 1; k++) {
            h = chain(h, prompt + (size_t)k * block_);
            auto it = index_.find(h);
            if (it == index_.end()) break;
            bool found = false;
            for (int slot : it->second) {
                const Held& s = held_[(size_t)slot];
                if ((int)s.hashes.size() <= k || s.hashes[(size_t)k] != h ||
                    memcmp(s.tokens.data(), prompt, sizeof(int) * (size_t)(k + 1) * block_) != 0)
                    continue;  // a collision, or a stale entry
                const int sc = score(slot);
                if (sc < 0) continue;
                if (!found || k + 1 > best.blocks || sc > best_score) best = Hit{slot, k + 1}, best_score = sc;
                found = true;
            }
            if (!found) break;
        }
        return best;
    }

    // The slot now holds prompt's first `blocks` blocks (computed there, or copied in) and nothing beyond them.
    void hold(int slot, const int* prompt, int blocks, uint64_t tick) {
        Held& s = held_[(size_t)slot];
        if (blocks < (int)s.hashes.size() ||
            (blocks > 0 && memcmp(s.tokens.data(), prompt, sizeof(int) * std::min(s.tokens.size(),
                                                                                    (size_t)blocks * block_)) != 0))
            drop(slot);  // another prefix, or fewer blocks: forget what it held first
        uint64_t h = s.hashes.empty() ? kSeed : s.hashes.back();
        for (int k = (int)s.hashes.size(); k < blocks; k++) {
            h = chain(h, prompt + (size_t)k * block_);
            s.hashes.push_back(h);
            index_[h].push_back(slot);
        }
        s.tokens.assign(prompt, prompt + (size_t)blocks * block_);
        s.used = tick;
    }
    // The slot holds nothing reusable any more.
    void drop(int slot) {
        Held& s = held_[(size_t)slot];
        for (uint64_t h : s.hashes) {
            auto it = index_.find(h);
            if (it == index_.end()) continue;
            std::vector<int>& v = it->second;
            for (size_t i = 0; i < v.size(); i++)
                if (v[i] == slot) {
                    v[i] = v.back(), v.pop_back();
                    break;
                }
            if (v.empty()) index_.erase(it);
        }
        s = Held{};
    }
    int blocks_held(int slot) const { return (int)held_[(size_t)slot].hashes.size(); }
    uint64_t last_used(int slot) const { return held_[(size_t)slot].used; }

private:
    static constexpr uint64_t kSeed = 0x9E3779B97F4A7C15ull;
    // FNV-1a over the block's ids, started from the previous block's hash
    uint64_t chain(uint64_t h, const int* block) const {
        for (int i = 0; i < block_; i++) {
            uint32_t x = (uint32_t)block[i];
            for (int b = 0; b < 4; b++, x >>= 8) h = (h ^ (x & 0xFFu)) * 0x100000001B3ull;
        }
        return h;
    }
    struct Held {
        std::vector<int> tokens;       // the prefix held: blocks_held() * block ids
        std::vector<uint64_t> hashes;  // chain hash of blocks 0..k, for each k
        uint64_t used = 0;             // when it was last given to a sequence or filled (the scheduler's ticks)
    };
    int block_;
    std::vector<Held> held_;
    std::unordered_map<uint64_t, std::vector<int>> index_;  // chain hash -> slots holding that prefix
};
