// The multiple-choice eval file (llmc/formats/eval_file.h): llm.c's layout word by word, round trips, and
// every malformed case as one line naming the file, the example and the field.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/formats/eval_file.h"
#include "tests/lib/file_test_helpers.h"

namespace {

std::vector<EvalExample> some_examples() {
    EvalExample a;
    a.label = 3;
    a.context = {10, 11, 12};
    a.endings = {{1}, {2, 3}, {4, 5, 6}, {50256}};
    EvalExample b;
    b.label = 0;
    b.context = {7};
    b.endings = {{8, 9}, {9}, {10}, {11, 12, 13, 14}};
    return {a, b};
}

// The file as write_evalfile lays it out, built here word by word (not by the writer under test).
std::vector<unsigned char> llmc_layout(const std::vector<EvalExample>& examples) {
    std::vector<uint16_t> stream;
    int longest = 0;
    for (size_t i = 0; i < examples.size(); i++) {
        const EvalExample& e = examples[i];
        std::vector<uint16_t> s = {65535, 0, (uint16_t)i, (uint16_t)e.label, (uint16_t)e.endings.size(),
                                   (uint16_t)e.context.size()};
        s.insert(s.end(), e.context.begin(), e.context.end());
        for (const auto& end : e.endings) {
            s.push_back((uint16_t)end.size());
            s.insert(s.end(), end.begin(), end.end());
        }
        s[1] = (uint16_t)(s.size() * 2);
        longest = std::max(longest, (int)s[1]);
        stream.insert(stream.end(), s.begin(), s.end());
    }
    std::vector<unsigned char> bytes(1024 + stream.size() * 2, 0);
    const int32_t h[4] = {20240522, 1, (int32_t)examples.size(), longest};
    memcpy(bytes.data(), h, sizeof(h));
    memcpy(bytes.data() + 1024, stream.data(), stream.size() * 2);
    return bytes;
}

std::string write_valid(const std::string& name) {
    const std::string path = scratch_path(name);
    write_eval_file(path, some_examples());
    return path;
}

// A copy of the valid file with the uint16 at word `w` of the example stream (after the header) set to v.
std::string with_word(const std::string& name, size_t w, uint16_t v) {
    std::vector<unsigned char> b = read_bytes(write_valid("src_" + name));
    EXPECT_LT(1024 + 2 * w + 1, b.size());
    memcpy(b.data() + 1024 + 2 * w, &v, 2);
    const std::string path = scratch_path(name);
    write_bytes(path, b);
    return path;
}

void expect_same(const EvalExample& a, const EvalExample& b) {
    EXPECT_EQ(a.label, b.label);
    EXPECT_EQ(a.context, b.context);
    EXPECT_EQ(a.endings, b.endings);
}

}  // namespace

TEST(EvalFile, WriterIsLlmcLayout) {
    const std::string path = write_valid("e.bin");
    EXPECT_EQ(read_bytes(path), llmc_layout(some_examples()));
    // Example 0: 6 fields + 3 context + (1+1) + (1+2) + (1+3) + (1+1) = 20 words = 40 bytes.
    std::vector<unsigned char> b = read_bytes(path);
    int32_t h[256];
    memcpy(h, b.data(), sizeof(h));
    EXPECT_EQ(h[2], 2);
    EXPECT_EQ(h[3], 40);
    for (int i = 4; i < 256; i++) EXPECT_EQ(h[i], 0) << i;
    EXPECT_EQ(eval_example_bytes(some_examples()[0]), 40);
}

TEST(EvalFile, RoundTrip) {
    EvalFile f = read_eval_file(write_valid("e.bin"), 50257);
    ASSERT_EQ(f.examples.size(), 2u);
    for (size_t i = 0; i < 2; i++) expect_same(f.examples[i], some_examples()[i]);
    EXPECT_EQ(f.longest_example_bytes, 40);
    EXPECT_EQ(eval_longest_row_tokens(f), 6);  // example 0: 3 context tokens + 3 ending tokens

    // Random examples, any number of endings, tokens up to 65534, round trip through both directions.
    Rng rng(3);
    std::vector<EvalExample> many(300);
    for (EvalExample& e : many) {
        e.endings.resize(1 + rng.below(6));
        e.label = (int)rng.below(e.endings.size());
        e.context.resize(1 + rng.below(40));
        for (uint16_t& t : e.context) t = (uint16_t)rng.below(65535);
        for (auto& end : e.endings) {
            end.resize(1 + rng.below(20));
            for (uint16_t& t : end) t = (uint16_t)rng.below(65535);
        }
    }
    const std::string path = scratch_path("many.bin");
    write_eval_file(path, many);
    EXPECT_EQ(read_bytes(path), llmc_layout(many));
    EvalFile back = read_eval_file(path);
    ASSERT_EQ(back.examples.size(), many.size());
    for (size_t i = 0; i < many.size(); i++) expect_same(back.examples[i], many[i]);
}

TEST(EvalFile, MalformedHeader) {
    const std::string good = write_valid("good.bin");
    const std::string p = scratch_path("bad.bin");
    copy_resized(good, p, 1000 - (long)read_bytes(good).size());
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "shorter than the 1024-byte eval file header");
    copy_with_header_slot(good, p, 0, 20240520);
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "not an eval file (magic 20240520, expected 20240522)");
    copy_with_header_slot(good, p, 1, 2);
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "unsupported eval file version 2 (expected 1)");
    copy_with_header_slot(good, p, 2, 0);
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "number of examples 0, must be in [1, 65535]");
    copy_with_header_slot(good, p, 2, 70000);
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "number of examples 70000");
    copy_with_header_slot(good, p, 3, 0);
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "longest example 0 bytes, must be in [12, 65535]");
    copy_with_header_slot(good, p, 3, 38);
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "longest example 38 bytes, but the longest is 40");
}

TEST(EvalFile, CountMismatch) {
    const std::string good = write_valid("good.bin");
    const std::string p = scratch_path("bad.bin");
    copy_with_header_slot(good, p, 2, 3);
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "example 2: the file ends before it (0 bytes left; the header declares 3 examples)");
    copy_with_header_slot(good, p, 2, 1);
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "trailing bytes after the 1 examples the header declares");
    copy_resized(good, p, 4);
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "4 trailing bytes after the 2 examples");
    copy_resized(good, p, -2);
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "example 1: example bytes 38 runs past the end of the file (30 bytes left after its first three fields)");
    copy_resized(good, p, -(38 - 4));
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "example 1: the file ends inside its first three fields");
}

TEST(EvalFile, MalformedExample) {
    // Words of example 0: 0 delimiter, 1 bytes, 2 index, 3 label, 4 endings, 5 context length, 6..8 context,
    // 9 ending 0's length, 10 its token, 11 ending 1's length, 14 ending 2's, 18 ending 3's, 19 its token;
    // example 1 (38 bytes) starts at word 20.
    auto err = [&](const char* name, size_t w, uint16_t v, const std::string& problem) {
        const std::string p = with_word(name, w, v);
        EXPECT_FILE_ERROR([&] { read_eval_file(p, 50257); }, p, problem);
    };
    err("delim", 20, 65534, "example 1: delimiter is 65534, expected 65535 (<START_EXAMPLE>)");
    err("odd", 1, 39, "example 0: example bytes 39, must be even and at least 12");
    err("small", 1, 10, "example 0: example bytes 10");
    err("past", 20 + 1, 2000, "example 1: example bytes 2000 runs past the end of the file");
    err("index", 20 + 2, 0, "example 1: example index is 0, expected 1");
    err("label", 3, 4, "example 0: label 4 is not below the number of endings 4");
    err("label_big", 3, 65535, "example 0: label 65535 is not below");
    err("zero_endings", 4, 0, "example 0: number of endings is 0");
    err("fewer_endings", 24, 3, "example 1: 10 bytes left over after the last ending (example bytes 38)");
    err("more_endings", 24, 5, "example 1: ending 4 length is missing (past the example's 38 bytes)");
    err("empty_context", 5, 0, "example 0: context is empty (length 0)");
    err("long_context", 5, 50, "example 0: context length 50 runs past the example's end (14 tokens left of its 40 bytes)");
    err("empty_ending", 9, 0, "example 0: ending 0 is empty (length 0)");
    err("long_ending", 18, 3, "example 0: ending 3 length 3 runs past the example's end (1 tokens left of its 40 bytes)");
    err("vocab", 7, 50257, "example 0: context token 1 is 50257, not below the vocabulary size 50257");
    err("vocab_ending", 19, 60000, "example 0: ending 3 token 0 is 60000, not below the vocabulary size 50257");
    // Without a vocabulary, 65535 (the delimiter) is still no token.
    const std::string p = with_word("delim_token", 6, 65535);
    EXPECT_FILE_ERROR([&] { read_eval_file(p); }, p, "example 0: context token 0 is 65535, not below 65535 (the <START_EXAMPLE> delimiter)");
    EXPECT_NO_THROW(read_eval_file(with_word("big_token", 6, 65534)));
}

TEST(EvalFile, WriterRefusesWhatTheReaderWould) {
    const std::string p = scratch_path("w.bin");
    auto refuse = [&](std::vector<EvalExample> ex, const std::string& problem) {
        EXPECT_FILE_ERROR([&] { write_eval_file(p, ex); }, p, problem);
        EXPECT_FALSE(file_exists(p));
    };
    refuse({}, "cannot write an eval file of 0 examples");
    std::vector<EvalExample> ex = some_examples();
    ex[1].label = 4;
    refuse(ex, "cannot write example 1: label 4 is not in [0, 4)");
    ex = some_examples();
    ex[0].endings.clear();
    ex[0].label = 0;
    refuse(ex, "cannot write example 0: it has no endings");
    ex = some_examples();
    ex[0].context.clear();
    refuse(ex, "cannot write example 0: its context is empty");
    ex = some_examples();
    ex[1].endings[2].clear();
    refuse(ex, "cannot write example 1: ending 2 is empty");
    ex = some_examples();
    ex[0].context[1] = 65535;
    refuse(ex, "cannot write example 0: the context has token 65535");
    ex = some_examples();
    ex[0].context.assign(40000, 1);
    refuse(ex, "cannot write example 0: it takes 80034 bytes (the format holds up to 65535)");
}
