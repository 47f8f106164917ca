// Tokenizer vocabulary file (llmc/formats/tokenizer_file.h).
#include <gtest/gtest.h>

#include "llmc/formats/tokenizer_file.h"
#include "tests/lib/file_test_helpers.h"
#include "tests/lib/sparse_file.h"

namespace {

TokenizerFile sample_tokenizer() {
    TokenizerFile t;
    t.tokens = {"!", "hello", " world", std::string("\0\xff\xfe", 3), std::string(255, 'x'), "\xe2\x82\xac",
                "<|endoftext|>"};
    t.eot_token = 6;
    return t;
}

std::string write_valid(const std::string& name) {
    std::string path = scratch_path(name);
    write_tokenizer_file(path, sample_tokenizer());
    return path;
}

// Builds a raw tokenizer file: header slots and then each token as (length byte, bytes).
std::vector<unsigned char> raw_tokenizer(uint32_t version, uint32_t vocab, uint32_t eot,
                                         const std::vector<std::string>& tokens) {
    std::vector<unsigned char> b(1024, 0);
    uint32_t h[4] = {20240328, version, vocab, eot};
    memcpy(b.data(), h, sizeof(h));
    for (const std::string& s : tokens) {
        b.push_back((unsigned char)s.size());
        b.insert(b.end(), s.begin(), s.end());
    }
    return b;
}

}  // namespace

TEST(TokenizerFile, RoundTrip) {
    std::string path = write_valid("tok.bin");
    TokenizerFile r = read_tokenizer_file(path);
    TokenizerFile t = sample_tokenizer();
    EXPECT_EQ(r.tokens, t.tokens);  // arbitrary bytes, NULs included, survive
    EXPECT_EQ(r.eot_token, 6);
    std::vector<unsigned char> b = read_bytes(path);
    uint32_t h[256];
    memcpy(h, b.data(), sizeof(h));
    EXPECT_EQ(h[0], 20240328u);
    EXPECT_EQ(h[1], 2u);
    EXPECT_EQ(h[2], 7u);
    EXPECT_EQ(h[3], 6u);
    for (int i = 4; i < 256; i++) EXPECT_EQ(h[i], 0u) << i;
    size_t body = 0;
    for (const std::string& s : t.tokens) body += 1 + s.size();
    EXPECT_EQ(b.size(), 1024 + body);
}

// Version 1 files (llm.c's first format) have no eot slot: eot is GPT-2's 50256.
TEST(TokenizerFile, Version1MeansEot50256) {
    std::vector<std::string> tokens(50257, "a");
    std::string path = scratch_path("v1.bin");
    write_bytes(path, raw_tokenizer(1, 50257, /*ignored*/ 7, tokens));
    TokenizerFile t = read_tokenizer_file(path);
    EXPECT_EQ(t.eot_token, 50256);
    EXPECT_EQ(t.tokens.size(), 50257u);
    // A version 1 file too small to contain token 50256 is inconsistent.
    write_bytes(path, raw_tokenizer(1, 3, 0, {"a", "b", "c"}));
    EXPECT_FILE_ERROR([&] { read_tokenizer_file(path); }, path, "eot token 50256 (version 1) is not below vocab_size 3");
}

TEST(TokenizerFile, WrongMagicAndVersion) {
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    copy_with_header_slot(good, bad, 0, 20240327);
    EXPECT_FILE_ERROR([&] { read_tokenizer_file(bad); }, bad, "not a tokenizer file (magic 20240327");
    for (uint32_t v : {0u, 3u, 0xffffffffu}) {
        copy_with_header_slot(good, bad, 1, v);
        EXPECT_FILE_ERROR([&] { read_tokenizer_file(bad); }, bad, "unsupported tokenizer file version");
    }
}

TEST(TokenizerFile, EachHeaderFieldCorrupted) {
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    struct Case { int slot; uint32_t value; const char* problem; };
    const Case cases[] = {
        {2, 0, "vocab_size = 0"},
        {2, 0xffffffffu, "vocab_size = 4294967295"},
        {2, 1u << 25, "vocab_size = 33554432"},
        {2, 8, "truncated: ends before the length of token 7 of 8"},
        {2, 6000, "cannot hold 6000 tokens"},          // cheap rejection before reading
        {2, 6, "eot token 6 (version 2) is not below vocab_size 6"},
        {3, 7, "eot token 7 (version 2) is not below vocab_size 7"},
        {3, 0xffffffffu, "eot token 4294967295"},
    };
    for (const Case& k : cases) {
        SCOPED_TRACE("slot " + std::to_string(k.slot) + " = " + std::to_string(k.value));
        copy_with_header_slot(good, bad, k.slot, k.value);
        EXPECT_FILE_ERROR([&] { read_tokenizer_file(bad); }, bad, k.problem);
    }
}

TEST(TokenizerFile, TruncatedAndPadded) {
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    copy_resized(good, bad, -1);  // inside the last token's bytes
    EXPECT_FILE_ERROR([&] { read_tokenizer_file(bad); }, bad, "truncated: token 6 of 7 needs 13 bytes, only 12 left");
    copy_resized(good, bad, -14);  // exactly before the last token's length byte
    EXPECT_FILE_ERROR([&] { read_tokenizer_file(bad); }, bad, "truncated");
    copy_resized(good, bad, 1);
    EXPECT_FILE_ERROR([&] { read_tokenizer_file(bad); }, bad, "1 trailing bytes");
    copy_resized(good, bad, 300);
    EXPECT_FILE_ERROR([&] { read_tokenizer_file(bad); }, bad, "300 trailing bytes");
    copy_resized(good, bad, 100 - (long)read_bytes(good).size());
    EXPECT_FILE_ERROR([&] { read_tokenizer_file(bad); }, bad, "shorter than the 1024-byte tokenizer header");
}

TEST(TokenizerFile, ZeroLengthToken) {
    std::string path = scratch_path("zero.bin");
    write_bytes(path, raw_tokenizer(2, 3, 0, {"a", "", "cc"}));
    EXPECT_FILE_ERROR([&] { read_tokenizer_file(path); }, path, "token 1 has length 0 (at byte 1026)");
}

// A vocab_size smaller than the tokens present: the rest are trailing bytes, not silently ignored.
TEST(TokenizerFile, VocabSizeSmallerThanContents) {
    std::string path = scratch_path("small.bin");
    write_bytes(path, raw_tokenizer(2, 2, 0, {"a", "b", "c"}));
    EXPECT_FILE_ERROR([&] { read_tokenizer_file(path); }, path, "2 trailing bytes after the last of 2 tokens");
}

TEST(TokenizerFile, WriterRejectsWhatTheFormatCannotHold) {
    std::string path = scratch_path("w.bin");
    TokenizerFile t = sample_tokenizer();
    t.tokens[2] = "";
    EXPECT_FILE_ERROR([&] { write_tokenizer_file(path, t); }, path, "token 2 is 0 bytes");
    t = sample_tokenizer();
    t.tokens[1] = std::string(256, 'y');
    EXPECT_FILE_ERROR([&] { write_tokenizer_file(path, t); }, path, "token 1 is 256 bytes");
    t = sample_tokenizer();
    t.eot_token = 7;
    EXPECT_FILE_ERROR([&] { write_tokenizer_file(path, t); }, path, "eot_token 7");
    t.eot_token = -1;
    EXPECT_FILE_ERROR([&] { write_tokenizer_file(path, t); }, path, "eot_token -1");
    EXPECT_FILE_ERROR([&] { write_tokenizer_file(path, TokenizerFile{}); }, path, "0 tokens");
    EXPECT_FALSE(file_exists(path));
}

TEST(TokenizerFile, MissingFile) {
    std::string path = scratch_path("nope.bin");
    EXPECT_FILE_ERROR([&] { read_tokenizer_file(path); }, path, "cannot open");
}

// A valid header in a sparse file of terabytes: the reader stops at the first zero length (it used to
// allocate the whole body first: std::bad_alloc, and 'tokenizer decode --bin' printed only that).
TEST(TokenizerFile, SparseFileOfTerabytes) {
    uint32_t h[256] = {20240328, 2, 50257, 50256};
    const std::string path = scratch_path("huge_tokenizer.bin");
    if (!make_sparse_file(path, h, sizeof(h), kBeyondMemoryBytes)) GTEST_SKIP() << "no sparse files of 4 TiB here";
    EXPECT_FILE_ERROR([&] { read_tokenizer_file(path); }, path, "token 0 has length 0 (at byte 1024)");
    // Valid tokens followed by a hole: the same, at the first token of the hole.
    std::vector<unsigned char> b = raw_tokenizer(2, 50257, 50256, {"a", "bc"});
    write_bytes(path, b);
    ASSERT_EQ(truncate(path.c_str(), (off_t)kBeyondMemoryBytes), 0);
    EXPECT_FILE_ERROR([&] { read_tokenizer_file(path); }, path, "token 2 has length 0 (at byte 1029)");
    remove(path.c_str());
}
