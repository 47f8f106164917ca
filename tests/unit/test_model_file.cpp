// Model checkpoint (llmc/formats/model_file.h) and bf16 conversion (llmc/core/bf16.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "llmc/core/bf16.h"
#include "llmc/core/rand.h"
#include "llmc/formats/model_file.h"
#include "tests/lib/file_test_helpers.h"
#include "tests/lib/sparse_file.h"

namespace {

GPT2Config tiny_config() {
    GPT2Config c;
    c.max_seq_len = 8;
    c.vocab_size = 50;  // not a multiple of 128: exercises the padded rows
    c.padded_vocab_size = 128;
    c.num_layers = 2;
    c.num_heads = 2;
    c.channels = 8;
    return c;
}

std::vector<float> random_params(const GPT2Config& c, uint64_t seed) {
    std::vector<float> p(gpt2_num_parameters(c));
    Rng rng(seed);
    rng.fill_normal(p.data(), p.size(), 0.0f, 1.0f);
    return p;  // padded wte rows are deliberately non-zero: the writer must zero them
}

bool is_padding(const GPT2Config& c, size_t i) {
    return i >= (size_t)c.vocab_size * c.channels && i < (size_t)c.padded_vocab_size * c.channels;
}

// A valid fp32 checkpoint to corrupt.
std::string write_valid(const std::string& name, ParamDtype dtype = ParamDtype::FP32) {
    GPT2Config c = tiny_config();
    std::vector<float> p = random_params(c, 1);
    std::string path = scratch_path(name);
    write_model_file(path, c, p.data(), dtype);
    return path;
}

}  // namespace

// ---------------------------------------------------------------- bf16

TEST(BF16, ExactValuesRoundTrip) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_bits_to_float((uint16_t)h);
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(f)))) << h;
        } else {
            EXPECT_EQ(float_to_bf16_bits(f), (uint16_t)h) << h;
        }
    }
}

TEST(BF16, RoundsToNearestEven) {
    // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
    EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 0x1p-8f)), 1.0f);
    // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
    EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
    // Just above half rounds up, just below rounds down.
    EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
    EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 0x1p-8f - 0x1p-20f)), 1.0f);
    EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(-1.0f - 3 * 0x1p-8f)), -1.0f - 0x1p-6f);
}

// Against an independent reference: the nearer of the two bf16 neighbours, measured in double.
TEST(BF16, MatchesNearestNeighbourOnRandomFloats) {
    Rng rng(7);
    int checked = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = rng.next_u32();
        float f;
        memcpy(&f, &bits, 4);
        if (!std::isfinite(f)) continue;
        uint16_t down = (uint16_t)(bits >> 16);  // truncation: the neighbour towards zero
        uint16_t up = (uint16_t)(down + 1);      // the neighbour away from zero (may be Inf)
        double d_down = std::fabs((double)f - (double)bf16_bits_to_float(down));
        // IEEE rounds as if the exponent were unbounded: Inf stands for 2^128 when measuring distance.
        double up_value = std::isinf(bf16_bits_to_float(up)) ? std::copysign(std::ldexp(1.0, 128), (double)f)
                                                             : (double)bf16_bits_to_float(up);
        double d_up = std::fabs((double)f - up_value);
        uint16_t want = d_down < d_up ? down : d_up < d_down ? up : ((down & 1) ? up : down);
        ASSERT_EQ(float_to_bf16_bits(f), want) << "bits 0x" << std::hex << bits;
        checked++;
    }
    EXPECT_GT(checked, 190000);
}

TEST(BF16, SpecialValues) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(inf)), inf);
    EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(-inf)), -inf);
    EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000);
    EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(std::numeric_limits<float>::max())), inf);  // overflows
    EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
    // A NaN whose payload is only in the dropped low bits must not become Inf.
    uint32_t low_nan_bits = 0x7f800001u;
    float low_nan;
    memcpy(&low_nan, &low_nan_bits, 4);
    EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(low_nan))));
    // Smallest subnormals round like everything else.
    EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::denorm_min()), 0);
}

// ---------------------------------------------------------------- model file

TEST(ModelFile, RoundTripFP32) {
    GPT2Config c = tiny_config();
    std::vector<float> p = random_params(c, 3);
    std::string path = scratch_path("m.bin");
    write_model_file(path, c, p.data(), ParamDtype::FP32);
    EXPECT_EQ((int64_t)read_bytes(path).size(), model_file_bytes(c, ParamDtype::FP32));
    EXPECT_EQ((int64_t)read_bytes(path).size(), 1024 + 4 * (int64_t)gpt2_num_parameters(c));

    ModelFile m = read_model_file(path);
    EXPECT_EQ(m.dtype, ParamDtype::FP32);
    EXPECT_EQ(m.config.max_seq_len, 8);
    EXPECT_EQ(m.config.vocab_size, 50);
    EXPECT_EQ(m.config.padded_vocab_size, 128);
    EXPECT_EQ(m.config.num_layers, 2);
    EXPECT_EQ(m.config.num_heads, 2);
    EXPECT_EQ(m.config.channels, 8);
    ASSERT_EQ(m.params.size(), p.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < p.size(); i++) {
        float want = is_padding(c, i) ? 0.0f : p[i];
        if (memcmp(&m.params[i], &want, 4) != 0) mismatches++;
    }
    EXPECT_EQ(mismatches, 0u);

    ParamDtype d = ParamDtype::BF16;
    GPT2Config h = read_model_header(path, &d);
    EXPECT_EQ(d, ParamDtype::FP32);
    EXPECT_EQ(h.padded_vocab_size, 128);
}

TEST(ModelFile, RoundTripBF16) {
    GPT2Config c = tiny_config();
    std::vector<float> p = random_params(c, 4);
    std::string path = scratch_path("m_bf16.bin");
    write_model_file(path, c, p.data(), ParamDtype::BF16);
    EXPECT_EQ((int64_t)read_bytes(path).size(), 1024 + 2 * (int64_t)gpt2_num_parameters(c));
    ModelFile m = read_model_file(path);
    EXPECT_EQ(m.dtype, ParamDtype::BF16);
    ASSERT_EQ(m.params.size(), p.size());
    size_t mismatches = 0;
    double max_rel = 0;
    for (size_t i = 0; i < p.size(); i++) {
        float want = is_padding(c, i) ? 0.0f : bf16_bits_to_float(float_to_bf16_bits(p[i]));
        if (m.params[i] != want) mismatches++;
        if (!is_padding(c, i) && p[i] != 0) max_rel = std::max(max_rel, std::fabs((m.params[i] - p[i]) / (double)p[i]));
    }
    EXPECT_EQ(mismatches, 0u);
    EXPECT_LE(max_rel, 1.0 / 256);  // bf16 keeps 8 significant bits: relative error <= 2^-8
    ParamDtype d = ParamDtype::FP32;
    read_model_header(path, &d);
    EXPECT_EQ(d, ParamDtype::BF16);
}

// The header is byte-for-byte llm.c's layout.
TEST(ModelFile, HeaderLayoutMatchesLlmc) {
    std::string path = write_valid("m.bin", ParamDtype::BF16);
    std::vector<unsigned char> b = read_bytes(path);
    int32_t h[256];
    memcpy(h, b.data(), sizeof(h));
    EXPECT_EQ(h[0], 20240326);
    EXPECT_EQ(h[1], 5);
    EXPECT_EQ(h[2], 8);
    EXPECT_EQ(h[3], 50);
    EXPECT_EQ(h[4], 2);
    EXPECT_EQ(h[5], 2);
    EXPECT_EQ(h[6], 8);
    EXPECT_EQ(h[7], 128);
    for (int i = 8; i < 256; i++) EXPECT_EQ(h[i], 0) << i;
}

TEST(ModelFile, WrongMagic) {
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    copy_with_header_slot(good, bad, 0, 20240520);
    EXPECT_FILE_ERROR([&] { read_model_file(bad); }, bad, "not a GPT-2 model file (magic 20240520");
    EXPECT_FILE_ERROR([&] { read_model_header(bad, nullptr); }, bad, "magic");
}

TEST(ModelFile, WrongVersion) {
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    for (uint32_t v : {0u, 1u, 2u, 4u, 6u, 0xffffffffu}) {
        copy_with_header_slot(good, bad, 1, v);
        EXPECT_FILE_ERROR([&] { read_model_file(bad); }, bad, "unsupported model file version");
    }
    // A valid version that does not match the body size: fp32 body labelled bf16.
    copy_with_header_slot(good, bad, 1, 5);
    EXPECT_FILE_ERROR([&] { read_model_file(bad); }, bad, "trailing bytes");
}

// Every header field: out of range, and in range but inconsistent with the file length.
TEST(ModelFile, EachHeaderFieldCorrupted) {
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    struct Case { int slot; uint32_t value; const char* problem; };
    const Case cases[] = {
        {2, 0, "maxT (max_seq_len) = 0"}, {2, (uint32_t)-1, "maxT (max_seq_len) = -1"},
        {2, 0x7fffffff, "maxT (max_seq_len) = 2147483647"}, {2, 9, "truncated"}, {2, 7, "trailing bytes"},
        {3, 0, "V (vocab_size) = 0"}, {3, (uint32_t)-5, "V (vocab_size) = -5"},
        {3, 0x40000000, "V (vocab_size) = 1073741824"},
        {3, 129, "Vp (padded_vocab_size) = 128"},  // V > Vp
        {3, 49, "v"},                               // valid, same size: must still read (checked below)
        {4, 0, "L (num_layers) = 0"}, {4, (uint32_t)-1, "L (num_layers)"}, {4, 100000, "L (num_layers) = 100000"},
        {4, 3, "truncated"}, {4, 1, "trailing bytes"},
        {5, 0, "NH (num_heads) = 0"}, {5, (uint32_t)-2, "NH (num_heads)"}, {5, 3, "not divisible by NH"},
        {5, 5000, "NH (num_heads) = 5000"},
        {6, 0, "C (channels) = 0"}, {6, (uint32_t)-8, "C (channels)"}, {6, 1 << 20, "C (channels) = 1048576"},
        {6, 7, "not divisible by NH"}, {6, 16, "truncated"}, {6, 4, "trailing bytes"},
        {7, 0, "Vp (padded_vocab_size) = 0"}, {7, 49, "Vp (padded_vocab_size) = 49"},
        {7, (uint32_t)-128, "Vp (padded_vocab_size) = -128"}, {7, 1u << 30, "Vp (padded_vocab_size) = 1073741824"},
        {7, 256, "truncated"}, {7, 64, "trailing bytes"},
    };
    for (const Case& k : cases) {
        SCOPED_TRACE("slot " + std::to_string(k.slot) + " = " + std::to_string((int32_t)k.value));
        copy_with_header_slot(good, bad, k.slot, k.value);
        if (k.slot == 3 && k.value == 49) {
            // V is not part of the size (Vp is): a smaller V with the same Vp is a valid file.
            EXPECT_EQ(read_model_file(bad).config.vocab_size, 49);
            continue;
        }
        EXPECT_FILE_ERROR([&] { read_model_file(bad); }, bad, k.problem);
        EXPECT_FILE_ERROR([&] { read_model_header(bad, nullptr); }, bad, k.problem);
    }
}

TEST(ModelFile, TruncatedAndPadded) {
    for (ParamDtype d : {ParamDtype::FP32, ParamDtype::BF16}) {
        std::string good = write_valid(std::string("good_") + param_dtype_name(d), d), bad = scratch_path("bad.bin");
        for (long delta : {-1L, -2L, -4L, -1000L}) {
            copy_resized(good, bad, delta);
            EXPECT_FILE_ERROR([&] { read_model_file(bad); }, bad, "truncated");
        }
        for (long delta : {1L, 2L, 4L, 1024L}) {
            copy_resized(good, bad, delta);
            EXPECT_FILE_ERROR([&] { read_model_file(bad); }, bad, "trailing bytes");
        }
        const long size = (long)read_bytes(good).size();
        copy_resized(good, bad, 1000 - size);  // shorter than the header
        EXPECT_FILE_ERROR([&] { read_model_file(bad); }, bad, "shorter than the 1024-byte model header");
        copy_resized(good, bad, -size);  // empty
        EXPECT_FILE_ERROR([&] { read_model_header(bad, nullptr); }, bad, "file is 0 bytes");
    }
}

TEST(ModelFile, MissingFileAndDirectory) {
    std::string missing = scratch_path("does_not_exist.bin");
    EXPECT_FILE_ERROR([&] { read_model_file(missing); }, missing, "cannot open");
    EXPECT_FILE_ERROR([&] { read_model_file(scratch_dir()); }, scratch_dir(), "not a regular file");
}

TEST(ModelFile, WriterRejectsBadConfigAndLeavesOldFileIntact) {
    std::string path = write_valid("m.bin");
    std::vector<unsigned char> before = read_bytes(path);
    GPT2Config c = tiny_config();
    c.num_heads = 3;  // 8 channels are not divisible by 3 heads
    std::vector<float> p(100000, 1.0f);
    EXPECT_FILE_ERROR([&] { write_model_file(path, c, p.data(), ParamDtype::FP32); }, path, "not divisible by NH");
    EXPECT_EQ(read_bytes(path), before);
    std::string in_missing_dir = scratch_path("no_such_dir/m.bin");
    GPT2Config ok = tiny_config();
    std::vector<float> q = random_params(ok, 9);
    EXPECT_FILE_ERROR([&] { write_model_file(in_missing_dir, ok, q.data(), ParamDtype::FP32); }, in_missing_dir,
                      "cannot create temporary file");
}

// Rewriting a file goes through a temporary + rename: no temporary is left behind.
TEST(ModelFile, OverwriteIsAtomicAndLeavesNoTemporary) {
    GPT2Config c = tiny_config();
    std::string path = scratch_path("m.bin");
    std::vector<float> a = random_params(c, 10), b = random_params(c, 11);
    write_model_file(path, c, a.data(), ParamDtype::FP32);
    write_model_file(path, c, b.data(), ParamDtype::FP32);
    EXPECT_EQ(read_model_file(path).params[0], b[0]);
    EXPECT_FALSE(file_exists(path + ".tmp." + std::to_string((long)getpid())));
}

// Vp may be any value >= V (llm.c rounds to 128, but the format does not require it).
TEST(ModelFile, AcceptsUnroundedPaddedVocab) {
    GPT2Config c = tiny_config();
    c.padded_vocab_size = 60;
    std::vector<float> p = random_params(c, 12);
    std::string path = scratch_path("m.bin");
    write_model_file(path, c, p.data(), ParamDtype::FP32);
    ModelFile m = read_model_file(path);
    EXPECT_EQ(m.config.padded_vocab_size, 60);
    EXPECT_EQ(m.params.size(), p.size());
}

// A valid header in a sparse file of terabytes asks for more memory than the machine has: the reader
// says so in one line naming the file and the size (it used to throw std::bad_alloc, and test_gpt2
// aborted). The header alone still reads, without allocating.
TEST(ModelFile, MoreParametersThanMemory) {
    GPT2Config c;
    ASSERT_TRUE(gpt2_preset("d12", &c));
    c.channels = 1 << 16;  // the widest a header may be, and enough layers for 4 TiB in bf16
    c.num_heads = 1;
    for (c.num_layers = 1; model_file_bytes(c, ParamDtype::BF16) < kBeyondMemoryBytes; c.num_layers++) {}
    const size_t n = gpt2_num_parameters(c);
    for (ParamDtype d : {ParamDtype::FP32, ParamDtype::BF16}) {
        int32_t h[256] = {20240326, d == ParamDtype::BF16 ? 5 : 3, c.max_seq_len, c.vocab_size, c.num_layers,
                          c.num_heads, c.channels, c.padded_vocab_size};
        const std::string path = scratch_path(std::string("huge_") + param_dtype_name(d) + ".bin");
        if (!make_sparse_file(path, h, sizeof(h), model_file_bytes(c, d))) GTEST_SKIP() << "no sparse files of 4-9 TiB here";
        EXPECT_EQ(read_model_header(path, nullptr).num_layers, c.num_layers);
        // bf16 files are widened to fp32: 4 bytes per parameter either way.
        char want[160];
        snprintf(want, sizeof(want), "needs %zu bytes (%.1f GiB) for %zu parameters (as fp32), more than this machine's memory",
                 n * 4, (double)(n * 4) / (1ull << 30), n);
        EXPECT_FILE_ERROR([&] { read_model_file(path); }, path, want);
        remove(path.c_str());
    }
}
