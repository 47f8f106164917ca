// GPT-2 tokenizer vocabulary file (token id -> bytes), byte-compatible with llm.c's gpt2_tokenizer.bin:
//   uint32 header[256]: [0]=20240328 (magic), [1]=version, [2]=vocab_size, [3]=eot token id (version 2);
//   version 1 has no eot field and means eot = 50256 (GPT-2's <|endoftext|>).
//   then for each token id in order: uint8 length (1..255), then that many raw bytes (not NUL-terminated).
// The reader rejects zero lengths, truncation and trailing bytes; the writer always writes version 2.
// Token bytes come from a file, so anything that prints them goes through append_printable (below).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/formats/file_header.h"

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
    // Each token takes at least 2 bytes; checking that first bounds the token count by the file's size.
    // The tokens are then read one by one (the file is buffered), so memory follows the bytes actually
    // read: a sparse or padded file of terabytes fails at its first zero length, not in an allocation.
    const int64_t body = in.size() - kFileHeaderBytes;
    if (body < 2 * (int64_t)vocab_size) {
        file_error(path, "truncated: %lld bytes after the header cannot hold %u tokens (at least 2 bytes each)",
                   (long long)body, vocab_size);
    }
    TokenizerFile t;
    t.eot_token = (int)eot;
    t.tokens.reserve(vocab_size);
    int64_t at = 0;  // bytes of the body read
    for (uint32_t id = 0; id < vocab_size; id++) {
        if (at >= body) file_error(path, "truncated: ends before the length of token %u of %u", id, vocab_size);
        unsigned char len = 0;
        in.read(&len, 1, "a token length");
        if (len == 0) file_error(path, "token %u has length 0 (at byte %lld)", id, (long long)(kFileHeaderBytes + at));
        at++;
        if (len > body - at) {
            file_error(path, "truncated: token %u of %u needs %u bytes, only %lld left", id, vocab_size, (unsigned)len,
                       (long long)(body - at));
        }
        std::string token(len, '\0');
        in.read(&token[0], len, "a token");
        t.tokens.push_back(std::move(token));
        at += len;
    }
    if (at != body) {
        file_error(path, "%lld trailing bytes after the last of %u tokens", (long long)(body - at), vocab_size);
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

// ---- printing bytes that came from a file
// A token (or a decoded text, or a quoted key in an error message) may hold any bytes, including
// terminal escape sequences. append_printable keeps valid UTF-8 text as it is, except control
// characters: C0 (U+0000..U+001F) other than newline and tab, DEL (U+007F) and C1 (U+0080..U+009F).
// Each byte of those, and each byte that is not part of a valid UTF-8 sequence, becomes "\xNN".

// Length (1..4) of the valid UTF-8 sequence at p[0..n), 0 if invalid (overlong, surrogate,
// > U+10FFFF, bad continuation), or -k if the k bytes left are a valid but unfinished prefix.
inline int utf8_valid_prefix(const unsigned char* p, size_t n) {
    const unsigned char c = p[0];
    int len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 0;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return -i;
        const unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
        if (p[i] < lo_i || p[i] > hi_i) return 0;
    }
    return len;
}

// Appends the printable form of `bytes` to out. With `held` non-null, a valid but unfinished UTF-8
// sequence at the very end is not escaped: its length goes to *held and those bytes are not
// consumed (a stream prints them once the next piece completes them; see TokenPrinter).
inline void append_printable(std::string& out, std::string_view bytes, size_t* held = nullptr) {
    const unsigned char* p = (const unsigned char*)bytes.data();
    const size_t n = bytes.size();
    if (held) *held = 0;
    auto escape = [&](unsigned char b) {
        char buf[5];
        snprintf(buf, sizeof(buf), "\\x%02X", b);
        out += buf;
    };
    for (size_t i = 0; i < n;) {
        const int len = utf8_valid_prefix(p + i, n - i);
        if (len < 0 && held) {
            *held = n - i;
            return;
        }
        if (len <= 0) {
            escape(p[i++]);
            continue;
        }
        const bool c0 = len == 1 && ((p[i] < 0x20 && p[i] != '\n' && p[i] != '\t') || p[i] == 0x7F);
        const bool c1 = len == 2 && p[i] == 0xC2 && p[i + 1] <= 0x9F;
        if (c0 || c1) {
            for (int k = 0; k < len; k++) escape(p[i + k]);
        } else {
            out.append((const char*)p + i, (size_t)len);
        }
        i += (size_t)len;
    }
}

inline std::string printable_bytes(std::string_view bytes) {
    std::string out;
    append_printable(out, bytes);
    return out;
}
