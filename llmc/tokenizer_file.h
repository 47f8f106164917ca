// GPT-2 tokenizer vocabulary file (token id -> bytes), byte-compatible with llm.c's gpt2_tokenizer.bin:
//   uint32 header[256]: [0]=20240328 (magic), [1]=version, [2]=vocab_size, [3]=eot token id (version 2);
//   version 1 has no eot field and means eot = 50256 (GPT-2's <|endoftext|>).
//   then for each token id in order: uint8 length (1..255), then that many raw bytes (not NUL-terminated).
// The reader rejects zero lengths, truncation and trailing bytes; the writer always writes version 2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "file_header.h"
#include "utils.h"

struct TokenizerFile {
    std::vector<std::string> tokens;  // tokens[id] = the token's bytes
    int eot_token = -1;
};

constexpr uint32_t kTokenizerMagic = 20240328;
constexpr uint32_t kTokenizerVersionNoEot = 1;
constexpr uint32_t kTokenizerVersion = 2;
constexpr uint32_t kTokenizerVersion1Eot = 50256;
constexpr uint32_t kTokenizerVocabLimit = 1u << 24;

inline TokenizerFile read_tokenizer_file(const std::string& path) {
    InputFile in(path);
    uint32_t h[kFileHeaderInts];
    read_file_header(in, h, "tokenizer");
    if (h[0] != kTokenizerMagic) {
        file_error(path, "not a tokenizer file (magic %u, expected %u)", h[0], kTokenizerMagic);
    }
    if (h[1] != kTokenizerVersionNoEot && h[1] != kTokenizerVersion) {
        file_error(path, "unsupported tokenizer file version %u (expected 1 or 2)", h[1]);
    }
    const uint32_t vocab_size = h[2];
    if (vocab_size < 1 || vocab_size > kTokenizerVocabLimit) {
        file_error(path, "bad tokenizer header: vocab_size = %u, must be in [1, %u]", vocab_size, kTokenizerVocabLimit);
    }
    const uint32_t eot = h[1] == kTokenizerVersionNoEot ? kTokenizerVersion1Eot : h[3];
    if (eot >= vocab_size) {
        file_error(path, "bad tokenizer header: eot token %u (version %u) is not below vocab_size %u", eot, h[1],
                   vocab_size);
    }
    // Each token takes at least 2 bytes; checking that first bounds what we allocate by the file's size.
    const int64_t body = in.size() - kFileHeaderBytes;
    if (body < 2 * (int64_t)vocab_size) {
        file_error(path, "truncated: %lld bytes after the header cannot hold %u tokens (at least 2 bytes each)",
                   (long long)body, vocab_size);
    }
    std::vector<unsigned char> buf((size_t)body);
    in.read(buf.data(), buf.size(), "tokens");
    TokenizerFile t;
    t.eot_token = (int)eot;
    t.tokens.resize(vocab_size);
    size_t at = 0;
    for (uint32_t id = 0; id < vocab_size; id++) {
        if (at >= buf.size()) {
            file_error(path, "truncated: ends before the length of token %u of %u", id, vocab_size);
        }
        const size_t len = buf[at];
        if (len == 0) {
            file_error(path, "token %u has length 0 (at byte %lld)", id, (long long)(kFileHeaderBytes + at));
        }
        at++;
        if (len > buf.size() - at) {
            file_error(path, "truncated: token %u of %u needs %zu bytes, only %zu left", id, vocab_size, len,
                       buf.size() - at);
        }
        t.tokens[id].assign((const char*)buf.data() + at, len);
        at += len;
    }
    if (at != buf.size()) {
        file_error(path, "%zu trailing bytes after the last of %u tokens", buf.size() - at, vocab_size);
    }
    return t;
}

// Writes version 2. Every token must be 1..255 bytes and eot_token a valid id.
inline void write_tokenizer_file(const std::string& path, const TokenizerFile& t) {
    if (t.tokens.empty() || t.tokens.size() > kTokenizerVocabLimit) {
        file_error(path, "cannot write tokenizer: %zu tokens, need 1..%u", t.tokens.size(), kTokenizerVocabLimit);
    }
    if (t.eot_token < 0 || (size_t)t.eot_token >= t.tokens.size()) {
        file_error(path, "cannot write tokenizer: eot_token %d is not a token id below %zu", t.eot_token,
                   t.tokens.size());
    }
    std::vector<unsigned char> body;
    for (size_t id = 0; id < t.tokens.size(); id++) {
        const std::string& s = t.tokens[id];
        if (s.empty() || s.size() > 255) {
            file_error(path, "cannot write tokenizer: token %zu is %zu bytes (the format allows 1..255)", id, s.size());
        }
        body.push_back((unsigned char)s.size());
        body.insert(body.end(), s.begin(), s.end());
    }
    uint32_t h[kFileHeaderInts] = {};
    h[0] = kTokenizerMagic;
    h[1] = kTokenizerVersion;
    h[2] = (uint32_t)t.tokens.size();
    h[3] = (uint32_t)t.eot_token;
    AtomicOutputFile out(path);
    out.write(h, sizeof(h));
    out.write(body.data(), body.size());
    out.commit();
}
