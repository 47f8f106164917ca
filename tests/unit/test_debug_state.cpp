// Debug state file (reference/debug_state.h).
#include <gtest/gtest.h>

#include "llmc/core/rand.h"
#include "reference/debug_state.h"
#include "tests/lib/file_test_helpers.h"
#include "tests/lib/sparse_file.h"

namespace {

GPT2Config debug_config() {
    GPT2Config c;
    c.max_seq_len = 16;
    c.vocab_size = 37;
    c.padded_vocab_size = 128;
    c.num_layers = 1;
    c.num_heads = 2;
    c.channels = 4;
    return c;
}

DebugState random_state(const GPT2Config& c, int B, int T, uint64_t seed) {
    Rng rng(seed);
    DebugState s;
    s.B = B;
    s.T = T;
    for (int i = 0; i < B * T; i++) s.inputs.push_back((int)rng.below(c.vocab_size));
    for (int i = 0; i < B * T; i++) s.targets.push_back((int)rng.below(c.vocab_size));
    s.logits.resize((size_t)B * T * c.vocab_size);
    rng.fill_normal(s.logits.data(), s.logits.size(), 0.0f, 3.0f);
    s.loss = 3.6109f;
    s.grads.resize(gpt2_num_parameters(c));
    rng.fill_normal(s.grads.data(), s.grads.size(), 0.0f, 0.01f);
    return s;
}

std::string write_valid(const std::string& name) {
    GPT2Config c = debug_config();
    std::string path = scratch_path(name);
    write_debug_state(path, c, random_state(c, 2, 8, 1));
    return path;
}

}  // namespace

TEST(DebugState, RoundTrip) {
    GPT2Config c = debug_config();
    DebugState s = random_state(c, 3, 5, 2);
    std::string path = scratch_path("state.bin");
    write_debug_state(path, c, s);
    EXPECT_EQ((int64_t)read_bytes(path).size(),
              1024 + 2 * 15 * 4 + 15 * 37 * 4 + 4 + 4 * (int64_t)gpt2_num_parameters(c));
    DebugState r = read_debug_state(path, c);
    EXPECT_EQ(r.B, 3);
    EXPECT_EQ(r.T, 5);
    EXPECT_EQ(r.inputs, s.inputs);
    EXPECT_EQ(r.targets, s.targets);
    EXPECT_EQ(r.logits, s.logits);
    EXPECT_EQ(r.loss, s.loss);
    EXPECT_EQ(r.grads, s.grads);
}

TEST(DebugState, HeaderLayoutMatchesLlmc) {
    std::string path = write_valid("state.bin");
    std::vector<unsigned char> b = read_bytes(path);
    int32_t h[256];
    memcpy(h, b.data(), sizeof(h));
    EXPECT_EQ(h[0], 20240327);
    EXPECT_EQ(h[1], 2);
    EXPECT_EQ(h[2], 2);
    EXPECT_EQ(h[3], 8);
    for (int i = 4; i < 256; i++) EXPECT_EQ(h[i], 0) << i;
}

TEST(DebugState, WrongMagicAndVersion) {
    GPT2Config c = debug_config();
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    copy_with_header_slot(good, bad, 0, 20240326);
    EXPECT_FILE_ERROR([&] { read_debug_state(bad, c); }, bad, "not a debug state file (magic 20240326");
    for (uint32_t v : {0u, 1u, 3u, 0xffffffffu}) {
        copy_with_header_slot(good, bad, 1, v);
        EXPECT_FILE_ERROR([&] { read_debug_state(bad, c); }, bad, "unsupported debug state version");
    }
}

TEST(DebugState, EachHeaderFieldCorrupted) {
    GPT2Config c = debug_config();
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    struct Case { int slot; uint32_t value; const char* problem; };
    const Case cases[] = {
        {2, 0, "B = 0"}, {2, (uint32_t)-1, "B = -1"}, {2, 0x7fffffff, "B = 2147483647"},
        {2, 3, "truncated"}, {2, 1, "trailing bytes"},
        {3, 0, "T = 0"}, {3, (uint32_t)-4, "T = -4"}, {3, 17, "T = 17, must be in [1, maxT = 16]"},
        {3, 9, "truncated"}, {3, 7, "trailing bytes"},
    };
    for (const Case& k : cases) {
        SCOPED_TRACE("slot " + std::to_string(k.slot) + " = " + std::to_string((int32_t)k.value));
        copy_with_header_slot(good, bad, k.slot, k.value);
        EXPECT_FILE_ERROR([&] { read_debug_state(bad, c); }, bad, k.problem);
    }
}

TEST(DebugState, TruncatedAndPadded) {
    GPT2Config c = debug_config();
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    for (long delta : {-1L, -4L, -100L}) {
        copy_resized(good, bad, delta);
        EXPECT_FILE_ERROR([&] { read_debug_state(bad, c); }, bad, "truncated");
    }
    for (long delta : {1L, 4L, 100L}) {
        copy_resized(good, bad, delta);
        EXPECT_FILE_ERROR([&] { read_debug_state(bad, c); }, bad, "trailing bytes");
    }
    copy_resized(good, bad, 1023 - (long)read_bytes(good).size());
    EXPECT_FILE_ERROR([&] { read_debug_state(bad, c); }, bad, "shorter than the 1024-byte debug state header");
}

// A state read against the wrong model shape fails on the length rather than misreading.
TEST(DebugState, WrongModelConfig) {
    std::string path = write_valid("state.bin");
    GPT2Config other = debug_config();
    other.vocab_size = 40;
    EXPECT_FILE_ERROR([&] { read_debug_state(path, other); }, path, "different model");
    other = debug_config();
    other.num_layers = 2;
    EXPECT_FILE_ERROR([&] { read_debug_state(path, other); }, path, "different model");
    other = debug_config();
    other.max_seq_len = 4;  // the file's T = 8 no longer fits
    EXPECT_FILE_ERROR([&] { read_debug_state(path, other); }, path, "T = 8, must be in [1, maxT = 4]");
    other = debug_config();
    other.num_heads = 3;
    EXPECT_FILE_ERROR([&] { read_debug_state(path, other); }, path, "not divisible by NH");
}

TEST(DebugState, TokensOutsideVocabulary) {
    GPT2Config c = debug_config();
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    std::vector<unsigned char> b = read_bytes(good);
    int32_t v = 37;  // inputs[3] = V
    memcpy(b.data() + 1024 + 3 * 4, &v, 4);
    write_bytes(bad, b);
    EXPECT_FILE_ERROR([&] { read_debug_state(bad, c); }, bad, "inputs[3] = 37 is outside the vocabulary [0, 37)");
    b = read_bytes(good);
    v = -1;  // targets[5]
    memcpy(b.data() + 1024 + 16 * 4 + 5 * 4, &v, 4);
    write_bytes(bad, b);
    EXPECT_FILE_ERROR([&] { read_debug_state(bad, c); }, bad, "targets[5] = -1 is outside the vocabulary");
}

TEST(DebugState, WriterValidatesSizes) {
    GPT2Config c = debug_config();
    std::string path = scratch_path("state.bin");
    DebugState s = random_state(c, 2, 4, 3);
    s.logits.pop_back();
    EXPECT_FILE_ERROR([&] { write_debug_state(path, c, s); }, path, "logits has");
    s = random_state(c, 2, 4, 3);
    s.grads.push_back(0);
    EXPECT_FILE_ERROR([&] { write_debug_state(path, c, s); }, path, "grads has");
    s = random_state(c, 2, 4, 3);
    s.inputs[0] = 99;
    EXPECT_FILE_ERROR([&] { write_debug_state(path, c, s); }, path, "inputs[0] = 99");
    s = random_state(c, 2, 4, 3);
    s.T = 17;
    EXPECT_FILE_ERROR([&] { write_debug_state(path, c, s); }, path, "cannot write debug state");
    EXPECT_FALSE(file_exists(path));
}

// A valid header in a sparse file of terabytes (B = 16384 rows of T = 1024 with GPT-2's vocabulary: 3.4 TB
// of logits): one line naming the file and the size, not std::bad_alloc.
TEST(DebugState, MoreDataThanMemory) {
    GPT2Config c = debug_config();
    c.max_seq_len = 1024;
    c.vocab_size = 50257;
    c.padded_vocab_size = 50304;
    const int B = 16384, T = 1024;
    int32_t h[256] = {20240327, 2, B, T};
    const std::string path = scratch_path("huge_debug_state.bin");
    const int64_t bytes = debug_state_bytes(c, B, T);
    if (!make_sparse_file(path, h, sizeof(h), bytes)) GTEST_SKIP() << "no sparse files of 3.4 TB here";
    char want[160];
    snprintf(want, sizeof(want), "needs %lld bytes (%.1f GiB) for inputs, targets, logits and gradients, more than",
             (long long)(bytes - 1024), (double)(bytes - 1024) / (1ull << 30));
    EXPECT_FILE_ERROR([&] { read_debug_state(path, c); }, path, want);
    remove(path.c_str());
}
