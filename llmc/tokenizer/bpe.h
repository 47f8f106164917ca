// GPT-2 byte-level BPE: the vocabulary and its merges, decode here and encode (text -> token ids) in bpe_encoder.h,
// with ids identical to tiktoken's "gpt2" encoding.
//
//   BPETokenizer tok = BPETokenizer::load("data/cache/gpt2");  // encoder.json + vocab.bpe; immutable, share it
//   BPEEncoder enc(tok);                                       // one per thread: cache + scratch
//   std::vector<int> ids; enc.encode_ordinary(text, ids);      // appends
//   std::string text2 = tok.decode(ids.data(), ids.size());
//
// How tiktoken encodes, and so how we do: the text is cut into pieces by GPT-2's pattern
// (pretokenizer.h); a piece that is itself a token becomes that token; otherwise it starts as
// one token per byte and the adjacent pair whose concatenation has the lowest rank (leftmost on a
// tie) is merged until no pair is a token. A token's rank is its id (tiktoken checks that
// encoder.json's ids follow vocab.bpe's merge order; we check the same at load). Pairs are looked
// up in a table of every (left id, right id) whose concatenation is a token. Pieces that needed
// merging are cached per encoder. Long pieces (runs of thousands of spaces, say) use a heap, so
// merging is O(n log n) there instead of O(n^2).
//
// <|endoftext|> (50256) is produced only by encode(..., allow_special=true) or by callers that
// insert it; encode_ordinary treats the text "<|endoftext|>" like any other text, as tiktoken's
// encode_ordinary does.
#pragma once

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <queue>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "llmc/core/read_file.h"
#include "llmc/core/utils.h"
#include "llmc/formats/json_reader.h"
#include "llmc/formats/tokenizer_file.h"
#include "llmc/tokenizer/pretokenizer.h"

inline uint64_t bpe_hash_bytes(const unsigned char* p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    return h;
}
inline uint64_t bpe_hash_pair(uint32_t a, uint32_t b) {
    uint64_t h = (((uint64_t)a << 32) | b) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 32);
}

// GPT-2's reversible map from bytes to printable code points, used in encoder.json and vocab.bpe:
// the printable Latin-1 bytes map to themselves, the other 68 to U+0100 onwards, in byte order.
inline void gpt2_byte_to_unicode(uint32_t out[256]) {
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        out[b] = printable ? (uint32_t)b : (uint32_t)(256 + extra++);
    }
}

class BPETokenizer {
public:
    static constexpr const char* kEndOfText = "<|endoftext|>";

    // A vocabulary directory, what every program's --vocab-dir names: a file missing there says so, and which flag.
    static BPETokenizer load(const std::string& vocab_dir) {
        const std::string encoder = vocab_dir + "/encoder.json", merges = vocab_dir + "/vocab.bpe";
        try {
            return BPETokenizer(encoder, merges);
        } catch (const FileError& e) {
            if (path_exists(encoder) && path_exists(merges)) throw;
            throw FileError(std::string(e.what()) + " (--vocab-dir names the directory of encoder.json and vocab.bpe; "
                                                    "make data fills data/cache/gpt2)");
        }
    }

    BPETokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
        std::unordered_map<std::string, int> index = load_encoder_json(encoder_json_path);
        check_vocab_bpe(vocab_bpe_path, index);
        build_tables();
        UnicodeClassTable::get();  // build it now, not inside the first (timed) encode
    }

    int vocab_size() const { return (int)tokens_.size(); }
    int eot_token() const { return eot_; }
    // The bytes of every token, indexed by id (the EOT entry holds the text "<|endoftext|>").
    const std::vector<std::string>& tokens() const { return tokens_; }

    // Appends the bytes of `ids` to out; an id outside the vocabulary throws std::out_of_range.
    void decode(const int* ids, size_t n, std::string& out) const { decode_with(tokens_, ids, n, out); }
    std::string decode(const int* ids, size_t n) const {
        std::string s;
        decode(ids, n, s);
        return s;
    }
    static void decode_with(const std::vector<std::string>& tokens, const int* ids, size_t n, std::string& out) {
        for (size_t i = 0; i < n; i++) {
            if (ids[i] < 0 || (size_t)ids[i] >= tokens.size()) {
                throw std::out_of_range("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                        " is outside the vocabulary (ids 0.." + std::to_string(tokens.size() - 1) + ")");
            }
            out += tokens[(size_t)ids[i]];
        }
    }

    // The id of the mergeable token with exactly these bytes, or -1.
    int lookup(const unsigned char* p, size_t n) const {
        uint64_t h = bpe_hash_bytes(p, n);
        uint64_t prefix = 0;
        memcpy(&prefix, p, n < 8 ? n : 8);
        const uint32_t tag = (uint32_t)(h >> 32);
        for (size_t slot = h & token_mask_;; slot = (slot + 1) & token_mask_) {
            const TokenSlot& e = token_slots_[slot];
            if (e.len == 0) return -1;
            if (e.tag == tag && e.len == n && e.prefix == prefix &&
                (n <= 8 || memcmp(token_bytes_.data() + e.offset + 8, p + 8, n - 8) == 0)) {
                return (int)e.id;
            }
        }
    }
    // The token whose bytes are token a's then token b's (its rank = its id), or INT_MAX.
    int merged(int a, int b) const {
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        for (size_t slot = bpe_hash_pair((uint32_t)a, (uint32_t)b) & pair_mask_;; slot = (slot + 1) & pair_mask_) {
            const PairSlot& e = pair_slots_[slot];
            if (e.merged < 0) return INT_MAX;
            if (e.key == key) return e.merged;
        }
    }
    int byte_token(unsigned char b) const { return byte_token_[b]; }

private:
    struct PairSlot {
        uint64_t key;
        int32_t merged;  // -1: empty
    };
    std::vector<std::string> tokens_;
    int eot_ = -1;
    int byte_token_[256];
    // Token lookup by bytes: the first 8 bytes sit in the slot, so most lookups touch one cache
    // line; longer tokens compare the rest in one contiguous array of all token bytes.
    struct TokenSlot {
        uint64_t prefix;  // first min(len, 8) bytes, zero padded
        uint32_t tag;     // high half of the hash
        uint32_t offset;  // into token_bytes_
        uint32_t len;     // 0 = empty
        int32_t id;
    };
    std::vector<TokenSlot> token_slots_;
    std::string token_bytes_;
    size_t token_mask_ = 0;
    std::vector<PairSlot> pair_slots_;
    size_t pair_mask_ = 0;
    uint32_t unicode_to_byte_[512];  // inverse of gpt2_byte_to_unicode (all its code points are < 512)

    // Maps a vocabulary string (GPT-2's printable form) back to bytes; false if it has a code point
    // outside the byte map.
    bool to_bytes(const std::string& printable, std::string& out) const {
        out.clear();
        const unsigned char* p = (const unsigned char*)printable.data();
        size_t n = printable.size(), i = 0;
        while (i < n) {
            uint32_t cp;
            int len = utf8_decode(p + i, n - i, &cp);
            if (len == 0 || cp >= 512 || unicode_to_byte_[cp] > 255) return false;
            out += (char)unicode_to_byte_[cp];
            i += (size_t)len;
        }
        return true;
    }

    // Reads encoder.json into tokens_ and returns its index (token bytes -> id, without EOT).
    // A UTF-8 byte order mark at the start is skipped.
    std::unordered_map<std::string, int> load_encoder_json(const std::string& path) {
        uint32_t b2u[256];
        gpt2_byte_to_unicode(b2u);
        for (uint32_t& v : unicode_to_byte_) v = 0xFFFFFFFFu;
        for (int b = 0; b < 256; b++) unicode_to_byte_[b2u[b]] = (uint32_t)b;

        std::string text = read_file_bytes(path);
        std::vector<std::pair<std::string, int64_t>> entries;
        try {
            JsonCursor cur(text);
            cur.skip_byte_order_mark();
            cur.for_each_member([&](std::string& key) { entries.emplace_back(std::move(key), cur.parse_int()); });
            cur.expect_end();
        } catch (const JsonError& e) {
            file_error(path, "%s", e.what());
        }
        if (entries.size() < 257) file_error(path, "has %zu entries, expected at least 257 (256 bytes + <|endoftext|>)", entries.size());
        tokens_.assign(entries.size(), std::string());
        std::vector<char> seen(entries.size(), 0);
        std::unordered_map<std::string, int> index;  // bytes -> id, every token but EOT
        index.reserve(entries.size() * 2);
        std::string bytes;
        for (const auto& [key, id] : entries) {
            if (id < 0 || id >= (int64_t)entries.size()) {
                file_error(path, "token \"%s\" has id %lld, outside 0..%zu", printable_bytes(key).c_str(), (long long)id,
                           entries.size() - 1);
            }
            if (seen[(size_t)id]) file_error(path, "id %lld is used twice", (long long)id);
            seen[(size_t)id] = 1;
            if (key == kEndOfText) {
                if (eot_ >= 0) file_error(path, "\"%s\" appears twice (ids %d and %lld)", kEndOfText, eot_, (long long)id);
                eot_ = (int)id;
                tokens_[(size_t)id] = key;
                continue;
            }
            if (key.empty() || !to_bytes(key, bytes)) {
                file_error(path, "token %lld (\"%s\") is not in GPT-2's byte-to-unicode alphabet", (long long)id,
                           printable_bytes(key).c_str());
            }
            auto [it, inserted] = index.emplace(bytes, (int)id);
            if (!inserted) {
                file_error(path, "token \"%s\" appears twice (ids %d and %lld)", printable_bytes(key).c_str(), it->second,
                           (long long)id);
            }
            tokens_[(size_t)id] = bytes;
        }
        if (eot_ < 0) file_error(path, "has no <|endoftext|> entry");
        for (int b = 0; b < 256; b++) byte_token_[b] = -1;
        for (size_t id = 0; id < tokens_.size(); id++) {
            if ((int)id != eot_ && tokens_[id].size() == 1) byte_token_[(unsigned char)tokens_[id][0]] = (int)id;
        }
        for (int b = 0; b < 256; b++) {
            if (byte_token_[b] < 0) file_error(path, "has no token for the single byte 0x%02x", b);
        }
        return index;
    }

    // vocab.bpe lists the merges in rank order: merge i makes the token of rank (= id) 256 + i.
    // tiktoken refuses a vocabulary where that does not hold, and so do we. `index` maps token bytes
    // to ids (from load_encoder_json). Lines may end in LF or CRLF; a UTF-8 byte order mark at the
    // start is skipped.
    void check_vocab_bpe(const std::string& path, const std::unordered_map<std::string, int>& index) {
        std::string text = read_file_bytes(path);
        size_t pos = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0, line_no = 0;
        int merges = 0;
        std::string left, right;
        while (pos < text.size()) {
            size_t end = text.find('\n', pos);
            if (end == std::string::npos) end = text.size();
            std::string line = text.substr(pos, end - pos);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            pos = end + 1;
            line_no++;
            if (line_no == 1 && line.rfind("#version", 0) == 0) continue;
            if (line.empty() && pos >= text.size()) break;
            size_t sp = line.find(' ');
            if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size() || line.find(' ', sp + 1) != std::string::npos) {
                file_error(path, "line %zu is not two space-separated tokens", line_no);
            }
            if (!to_bytes(line.substr(0, sp), left) || !to_bytes(line.substr(sp + 1), right)) {
                file_error(path, "line %zu has a character outside GPT-2's byte-to-unicode alphabet", line_no);
            }
            auto l = index.find(left), r = index.find(right), m = index.find(left + right);
            if (l == index.end() || r == index.end()) file_error(path, "line %zu merges a part that is not a token", line_no);
            // merge i makes the i-th id from 256 on, skipping <|endoftext|>'s id wherever encoder.json puts it
            const int expected = 256 + merges + (256 + merges >= eot_ && eot_ >= 256 ? 1 : 0);
            if (m == index.end() || m->second != expected) {
                file_error(path, "line %zu: merge %d does not make token id %d of encoder.json (ranks must follow the merge order)",
                           line_no, merges, expected);
            }
            merges++;
        }
        if ((size_t)merges + 256 + 1 != tokens_.size()) {
            file_error(path, "has %d merges, but encoder.json has %zu tokens (expected 256 + merges + <|endoftext|>)", merges,
                       tokens_.size());
        }
    }

    void build_tables() {
        size_t cap = 1;
        while (cap < tokens_.size() * 2) cap <<= 1;
        token_slots_.assign(cap, TokenSlot{0, 0, 0, 0, -1});
        token_mask_ = cap - 1;
        token_bytes_.clear();
        for (size_t id = 0; id < tokens_.size(); id++) {
            if ((int)id == eot_) continue;
            const std::string& t = tokens_[id];
            uint64_t h = bpe_hash_bytes((const unsigned char*)t.data(), t.size());
            size_t slot = h & token_mask_;
            while (token_slots_[slot].len != 0) slot = (slot + 1) & token_mask_;
            TokenSlot& e = token_slots_[slot];
            memcpy(&e.prefix, t.data(), t.size() < 8 ? t.size() : 8);
            e.tag = (uint32_t)(h >> 32);
            e.offset = (uint32_t)token_bytes_.size();
            e.len = (uint32_t)t.size();
            e.id = (int32_t)id;
            token_bytes_ += t;
        }
        // Every way to write each token as (token, token).
        std::vector<std::pair<uint64_t, int>> pairs;
        for (size_t id = 0; id < tokens_.size(); id++) {
            if ((int)id == eot_) continue;
            const std::string& t = tokens_[id];
            const unsigned char* p = (const unsigned char*)t.data();
            for (size_t k = 1; k < t.size(); k++) {
                int a = lookup(p, k), b = lookup(p + k, t.size() - k);
                if (a >= 0 && b >= 0) pairs.emplace_back(((uint64_t)(uint32_t)a << 32) | (uint32_t)b, (int)id);
            }
        }
        cap = 1;
        while (cap < pairs.size() * 2) cap <<= 1;
        pair_slots_.assign(cap, PairSlot{0, -1});
        pair_mask_ = cap - 1;
        for (const auto& [key, id] : pairs) {
            size_t slot = bpe_hash_pair((uint32_t)(key >> 32), (uint32_t)key) & pair_mask_;
            while (pair_slots_[slot].merged >= 0) slot = (slot + 1) & pair_mask_;
            pair_slots_[slot] = PairSlot{key, id};
        }
    }
};
