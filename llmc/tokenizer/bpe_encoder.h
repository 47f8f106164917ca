// GPT-2 byte-level BPE, the encoding side (bpe.h holds the vocabulary, its merges and decode): per-thread encoders
// with their caches, one shared encoder behind a lock for the server's request threads, and encoding on several
// threads (many documents, or one long text cut at safe split points).
#pragma once

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <queue>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "llmc/tokenizer/bpe.h"
#include "llmc/tokenizer/pretokenizer.h"

// Per-thread encoding state: a cache of pieces that needed merging, and scratch buffers.
class BPEEncoder {
public:
    explicit BPEEncoder(const BPETokenizer& tok) : tok_(tok) { clear_cache(); }

    // Appends the ids of `text`; "<|endoftext|>" in the text is ordinary text.
    void encode_ordinary(std::string_view text, std::vector<int>& out) {
        const unsigned char* s = (const unsigned char*)text.data();
        gpt2_pretokenize(text, [&](size_t off, size_t len) { encode_piece(s + off, len, out); });
    }
    // Appends the ids of `text`; with allow_special, "<|endoftext|>" becomes the EOT token (as
    // tiktoken's encode(text, allowed_special="all")).
    void encode(std::string_view text, std::vector<int>& out, bool allow_special) {
        if (!allow_special) return encode_ordinary(text, out);
        const std::string_view eot(BPETokenizer::kEndOfText);
        size_t pos = 0;
        while (true) {
            size_t hit = text.find(eot, pos);
            if (hit == std::string_view::npos) break;
            encode_ordinary(text.substr(pos, hit - pos), out);
            out.push_back(tok_.eot_token());
            pos = hit + eot.size();
        }
        encode_ordinary(text.substr(pos), out);
    }
    std::vector<int> encode_ordinary(std::string_view text) {
        std::vector<int> out;
        encode_ordinary(text, out);
        return out;
    }

    // One piece (a match of the pre-tokenization pattern).
    void encode_piece(const unsigned char* p, size_t n, std::vector<int>& out) {
        if (n == 1) {
            out.push_back(tok_.byte_token(p[0]));
            return;
        }
        int whole = tok_.lookup(p, n);
        if (whole >= 0) {
            out.push_back(whole);
            return;
        }
        if (n > kMaxCachedPiece) {
            merge(p, n, out);
            return;
        }
        uint64_t h = bpe_hash_bytes(p, n);
        size_t slot = h & kCacheMask;
        while (true) {
            const CacheSlot& e = cache_[slot];
            if (e.ids_len == 0) break;
            if (e.hash == h && e.key_len == n && memcmp(cache_keys_.data() + e.key_off, p, n) == 0) {
                out.insert(out.end(), cache_ids_.begin() + e.ids_off, cache_ids_.begin() + e.ids_off + e.ids_len);
                return;
            }
            slot = (slot + 1) & kCacheMask;
        }
        size_t first = out.size();
        merge(p, n, out);
        if (cache_count_ >= kCacheSlots / 2) {  // full: start over (cheap, and bounds memory)
            clear_cache();
            slot = h & kCacheMask;
        }
        CacheSlot& e = cache_[slot];
        e.hash = h;
        e.key_off = (uint32_t)cache_keys_.size();
        e.key_len = (uint32_t)n;
        e.ids_off = (uint32_t)cache_ids_.size();
        e.ids_len = (uint32_t)(out.size() - first);
        cache_keys_.append((const char*)p, n);
        cache_ids_.insert(cache_ids_.end(), out.begin() + (std::ptrdiff_t)first, out.end());
        cache_count_++;
    }

private:
    static constexpr size_t kMaxCachedPiece = 256;
    static constexpr size_t kHeapMergeFrom = 128;  // pieces this long merge with a heap
    static constexpr size_t kCacheSlots = 1 << 16;
    static constexpr size_t kCacheMask = kCacheSlots - 1;
    struct CacheSlot {
        uint64_t hash;
        uint32_t key_off, key_len, ids_off, ids_len;  // ids_len == 0: empty
    };
    const BPETokenizer& tok_;
    std::vector<CacheSlot> cache_;
    std::string cache_keys_;
    std::vector<int> cache_ids_;
    size_t cache_count_ = 0;
    std::vector<int> ids_, ranks_;

    void clear_cache() {
        cache_.assign(kCacheSlots, CacheSlot{0, 0, 0, 0, 0});
        cache_keys_.clear();
        cache_ids_.clear();
        cache_count_ = 0;
    }

    // Byte-level BPE of one piece: repeatedly merge the lowest-rank adjacent pair (leftmost on ties).
    void merge(const unsigned char* p, size_t n, std::vector<int>& out) {
        if (n >= kHeapMergeFrom) return merge_long(p, n, out);
        ids_.resize(n);
        ranks_.resize(n);
        for (size_t k = 0; k < n; k++) ids_[k] = tok_.byte_token(p[k]);
        for (size_t k = 0; k + 1 < n; k++) ranks_[k] = tok_.merged(ids_[k], ids_[k + 1]);
        size_t m = n;  // current number of parts; ranks_[k] belongs to the pair (k, k+1)
        while (m > 1) {
            int best = INT_MAX;
            size_t at = 0;
            for (size_t k = 0; k + 1 < m; k++) {
                if (ranks_[k] < best) {
                    best = ranks_[k];
                    at = k;
                }
            }
            if (best == INT_MAX) break;
            ids_[at] = best;
            for (size_t k = at + 1; k + 1 < m; k++) {
                ids_[k] = ids_[k + 1];
                ranks_[k] = ranks_[k + 1];
            }
            m--;
            if (at > 0) ranks_[at - 1] = tok_.merged(ids_[at - 1], ids_[at]);
            if (at + 1 < m) ranks_[at] = tok_.merged(ids_[at], ids_[at + 1]);
        }
        out.insert(out.end(), ids_.begin(), ids_.begin() + (std::ptrdiff_t)m);
    }

    // The same merge order with a linked list and a min-heap of (rank, position) (stale entries
    // are skipped when popped), so the result is identical.
    void merge_long(const unsigned char* p, size_t n, std::vector<int>& out) {
        std::vector<int> id(n), next(n), prev(n);
        std::vector<char> alive(n, 1);
        std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> heap;
        for (size_t k = 0; k < n; k++) {
            id[k] = tok_.byte_token(p[k]);
            next[k] = k + 1 < n ? (int)(k + 1) : -1;
            prev[k] = (int)k - 1;
        }
        auto push = [&](int at) {
            int r = tok_.merged(id[(size_t)at], id[(size_t)next[(size_t)at]]);
            if (r != INT_MAX) heap.push(((uint64_t)(uint32_t)r << 32) | (uint32_t)at);
        };
        for (size_t k = 0; k + 1 < n; k++) push((int)k);
        while (!heap.empty()) {
            uint64_t top = heap.top();
            heap.pop();
            int rank = (int)(top >> 32);
            size_t at = (size_t)(uint32_t)top;
            if (!alive[at] || next[at] < 0) continue;
            size_t nx = (size_t)next[at];
            if (tok_.merged(id[at], id[nx]) != rank) continue;  // stale
            id[at] = rank;
            alive[nx] = 0;
            next[at] = next[nx];
            if (next[at] >= 0) prev[(size_t)next[at]] = (int)at;
            if (prev[at] >= 0) push(prev[at]);
            if (next[at] >= 0) push((int)at);
        }
        for (int k = 0; k >= 0; k = next[(size_t)k]) out.push_back(id[(size_t)k]);
    }
};

// One BPEEncoder for many threads (the server's request threads): one text at a time, its caches shared.
class LockedEncoder {
public:
    explicit LockedEncoder(const BPETokenizer& tok) : encoder_(tok) {}
    std::vector<int> encode_ordinary(const std::string& text) {
        std::vector<int> ids;
        std::lock_guard<std::mutex> lock(mutex_);
        encoder_.encode_ordinary(text, ids);
        return ids;
    }

private:
    BPEEncoder encoder_;
    std::mutex mutex_;
};

// Runs fn(i, encoder) for i in [0, count) on `threads` threads, each with its own BPEEncoder.
// Items are handed out in contiguous blocks (about 16 per thread) through an atomic counter, so
// many tiny documents do not make the threads fight over the counter's cache line.
template <typename Fn>
inline void bpe_parallel_for(const BPETokenizer& tok, size_t count, int threads, Fn&& fn) {
    if (threads < 1) threads = 1;
    if ((size_t)threads > count) threads = (int)std::max<size_t>(count, 1);
    const size_t block = std::max<size_t>(1, count / ((size_t)threads * 16));
    std::atomic<size_t> next_block{0};
    auto worker = [&]() {
        BPEEncoder enc(tok);
        for (size_t b = next_block.fetch_add(block); b < count; b = next_block.fetch_add(block)) {
            const size_t end = std::min(count, b + block);
            for (size_t i = b; i < end; i++) fn(i, enc);
        }
    };
    if (threads == 1) return worker();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
}

// Encodes one long text on several threads: it is cut at safe split points (a letter followed by
// a space) into chunks of about `chunk_bytes`, which are encoded independently; same ids as one
// sequential encode. (No safe point lies inside "<|endoftext|>", so special tokens are never cut.)
inline std::vector<int> bpe_encode_parallel(const BPETokenizer& tok, std::string_view text, int threads,
                                            bool allow_special, size_t chunk_bytes = 1 << 20) {
    std::vector<std::string_view> chunks;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = std::min(text.size(), pos + chunk_bytes);
        while (end < text.size() && !is_safe_split_point(text, end)) end++;
        chunks.push_back(text.substr(pos, end - pos));
        pos = end;
    }
    std::vector<std::vector<int>> parts(chunks.size());
    bpe_parallel_for(tok, chunks.size(), threads,
                     [&](size_t i, BPEEncoder& enc) { enc.encode(chunks[i], parts[i], allow_special); });
    std::vector<int> out;
    size_t total = 0;
    for (auto& p : parts) total += p.size();
    out.reserve(total);
    for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}
