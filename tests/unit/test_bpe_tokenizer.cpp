// GPT-2 BPE tokenizer (llmc/tokenizer/bpe.h): ids must equal tiktoken's "gpt2" encoding.
// Expected ids below were produced by tiktoken (Rust core, via its WASM build 1.0.22, loading the
// same encoder.json/vocab.bpe with the gpt2 pattern; re-checked with Python tiktoken by
// scripts/bench/bench_tokenizer.sh). Whole files are checked by token count and the SHA-256 of the ids
// written as little-endian uint32. Reads the vocabulary and texts from $DATA_MIRROR, else data/cache.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/tokenizer/bpe_encoder.h"
#include "llmc/tokenizer/sha256.h"
#include "tests/fuzz/fuzz_inputs.h"

namespace {

// The test data, by the rule tests/cli/test_tokenizer_tools.sh uses too: $DATA_MIRROR (default
// ../shared/data) if it holds every file below, else data/cache (what `make data` downloads).
const char* const kDataFiles[] = {"gpt2/encoder.json", "gpt2/vocab.bpe", "tinyshakespeare/input.txt", "alice/pg11.txt",
                                  "alice/pg11_lf.txt"};

std::string data_mirror() {
    const char* d = getenv("DATA_MIRROR");
    return d && *d ? d : "../shared/data";
}

std::string find_data_root(const std::vector<std::string>& candidates) {
    for (const std::string& root : candidates) {
        bool all = true;
        for (const char* f : kDataFiles) all = all && std::ifstream(root + "/" + f).good();
        if (all) return root;
    }
    return "";
}

// One line: which files are missing and how to get them.
std::string missing_data_message(const std::string& mirror) {
    std::string missing;
    for (const char* f : kDataFiles) {
        if (!std::ifstream(mirror + "/" + f).good()) missing += (missing.empty() ? "" : " ") + std::string(f);
    }
    return "test data missing: " + missing + " (not in DATA_MIRROR=" + mirror +
           " nor data/cache): run 'make data' (downloads it) or set DATA_MIRROR=DIR to a copy holding gpt2/, "
           "tinyshakespeare/, alice/";
}

const std::string& data_root() {
    static const std::string root = find_data_root({data_mirror(), "data/cache"});
    return root;
}

// The first line of every test that reads the data: without the data it fails, saying so in one line.
#define REQUIRE_TEST_DATA()                                                            \
    do {                                                                               \
        if (data_root().empty()) GTEST_FAIL() << missing_data_message(data_mirror()); \
    } while (0)

const BPETokenizer& gpt2() {
    static std::unique_ptr<BPETokenizer> tok;
    if (!tok) tok = std::make_unique<BPETokenizer>(BPETokenizer::load(data_root() + "/gpt2"));
    return *tok;
}

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot open");
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string temp_path(const std::string& name) { return "/tmp/llmc_test_bpe_" + std::to_string(getpid()) + "_" + name; }

void write_file(const std::string& path, const std::string& content) {
    std::ofstream f(path, std::ios::binary);
    f << content;
}

struct IdCase {
    const char* name;
    std::string text;
    std::vector<int> ids;
};

// clang-format off
const std::vector<IdCase>& tiktoken_cases() {
    static const std::vector<IdCase> cases = {
    {"ascii_sentence", std::string("Hello world! This is a test of the GPT-2 tokenizer.", 51),
     {15496, 995, 0, 770, 318, 257, 1332, 286, 262, 402, 11571, 12, 17, 11241, 7509, 13}},
    {"contractions_all", std::string("'s 't 're 've 'm 'll 'd", 23),
     {338, 705, 83, 705, 260, 705, 303, 705, 76, 705, 297, 705, 67}},
    {"contractions_in_words", std::string("I'm sure they're here, we've seen it; he'll say she'd go. It's John's, don't.", 77),
     {40, 1101, 1654, 484, 821, 994, 11, 356, 1053, 1775, 340, 26, 339, 1183, 910, 673, 1549, 467, 13, 632, 338, 1757, 338, 11, 836, 470, 13}},
    {"contractions_uppercase", std::string("I'M SURE THEY'RE HERE WE'VE IT'S DON'T", 38),
     {40, 6, 44, 311, 11335, 33302, 6, 2200, 15698, 12887, 6, 6089, 7283, 6, 50, 23917, 6, 51}},
    {"contraction_prefix_of_word", std::string("'sup 'tis 'rest 'vet 'mm 'llama 'dd", 35),
     {338, 929, 705, 48010, 705, 2118, 705, 16809, 705, 3020, 705, 297, 1689, 705, 1860}},
    {"apostrophe_runs", std::string("'' ''s ' s 'x ?'s 'S", 20),
     {7061, 10148, 82, 705, 264, 705, 87, 5633, 6, 82, 705, 50}},
    {"numbers", std::string("1 12 123 1234 12345 3.14159 1,000,000 2024-11-21 0x1F", 53),
     {16, 1105, 17031, 1105, 2682, 17031, 2231, 513, 13, 1415, 19707, 352, 11, 830, 11, 830, 48609, 12, 1157, 12, 2481, 657, 87, 16, 37}},
    {"spaces_runs", std::string("a  b   c    d     e", 19),
     {64, 220, 275, 220, 220, 269, 220, 220, 220, 288, 220, 220, 220, 220, 304}},
    {"tabs_newlines", std::string("a\x09" "b\x09\x09" "c\x0a" "d\x0a\x0a" "e\x0a\x0a\x0a" "f\x09\x0a g", 19),
     {64, 197, 65, 197, 197, 66, 198, 67, 198, 198, 68, 628, 198, 69, 197, 198, 308}},
    {"crlf", std::string("line one\x0d\x0aline two\x0d\x0a\x0d\x0aline four\x0d\x0a", 33),
     {1370, 530, 201, 198, 1370, 734, 201, 198, 201, 198, 1370, 1440, 201, 198}},
    {"trailing_whitespace", std::string("ends with spaces   ", 19),
     {2412, 351, 9029, 220, 220, 220}},
    {"trailing_newlines", std::string("ends with newlines\x0a\x0a\x0a", 21),
     {2412, 351, 649, 6615, 628, 198}},
    {"leading_whitespace", std::string("   \x0a\x09 leading", 13),
     {220, 220, 220, 198, 197, 3756}},
    {"only_whitespace", std::string(" \x09\x0a \x0d\x0a  ", 8),
     {220, 197, 198, 220, 201, 198, 220, 220}},
    {"space_before_punct", std::string("wait ... what?! (yes) [no] {maybe} -- $100 #1 @user", 51),
     {17077, 2644, 644, 12248, 357, 8505, 8, 685, 3919, 60, 1391, 25991, 92, 1377, 720, 3064, 1303, 16, 2488, 7220}},
    {"accented", std::string("caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 \xc3\x85ngstr\xc3\xb6m fa\xc3\xa7" "ade Z\xc3\xbcrich", 48),
     {66, 1878, 2634, 41492, 40560, 16345, 2634, 6184, 227, 782, 2536, 9101, 76, 24685, 16175, 671, 1168, 9116, 7527}},
    {"non_latin_letters", std::string("\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd0\xbc\xd0\xb8\xd1\x80 \xce\x93\xce\xb5\xce\xb9\xce\xac \xcf\x83\xce\xbf\xcf\x85 \xce\xba\xcf\x8c\xcf\x83\xce\xbc\xce\xb5 \xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d \xd7\xa2\xd7\x95\xd7\x9c\xd7\x9d \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85 \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87", 109),
     {140, 253, 21169, 18849, 38857, 16843, 20375, 12466, 120, 18849, 21169, 7377, 241, 30950, 29945, 138, 105, 18074, 225, 26517, 139, 227, 7377, 118, 139, 234, 38392, 34703, 30950, 14360, 102, 40010, 27072, 147, 251, 14360, 95, 27072, 40010, 147, 251, 47048, 26897, 148, 255, 39848, 12919, 17550, 101, 23525, 44690, 23525, 25405, 28225, 101, 11976, 106, 11976, 116, 24231, 235, 11976, 97, 24231, 229}},
    {"non_ascii_digits", std::string("\xd9\xa3\xd9\xa4\xd9\xa5 \xe0\xa5\xac\xe0\xa5\xad\xe0\xa5\xae \xc2\xb2\xc2\xb3 \xc2\xbd \xe2\x85\xab \xe0\xb5\xa7\xe0\xb5\xa8 \xe3\x80\x87", 39),
     {149, 96, 149, 97, 149, 98, 220, 24231, 105, 24231, 255, 24231, 106, 1587, 110, 126, 111, 25208, 2343, 227, 104, 220, 156, 113, 100, 156, 113, 101, 220, 5099, 229}},
    {"cjk", std::string("\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88\xe3\x80\x82\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 \xed\x85\x8d\xec\x8a\xa4\xed\x8a\xb8", 64),
     {19526, 254, 25001, 121, 171, 120, 234, 10310, 244, 45911, 234, 16764, 33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302, 16764, 47991, 250, 166, 113, 255, 168, 244, 112, 220, 169, 227, 235, 168, 232, 97, 169, 232, 116}},
    {"emoji_modifiers_joiners", std::string("\xf0\x9f\x91\x8d \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7\xe2\x80\x8d\xf0\x9f\x91\xa6 \xf0\x9f\x8f\xb3\xef\xb8\x8f\xe2\x80\x8d\xf0\x9f\x8c\x88 \xf0\x9f\x87\xab\xf0\x9f\x87\xb7 \xe2\x9d\xa4\xef\xb8\x8f", 70),
     {41840, 235, 50169, 235, 8582, 237, 121, 50169, 101, 447, 235, 41840, 102, 447, 235, 41840, 100, 447, 235, 41840, 99, 12520, 237, 111, 37929, 447, 235, 8582, 234, 230, 12520, 229, 104, 8582, 229, 115, 43074, 97, 37929}},
    {"unicode_spaces", std::string("a\xc2\xa0" "b\xe2\x80\x89" "c\xe3\x80\x80" "d\xe2\x80\xa8" "e\xc2\x85" "f\xe2\x80\x8bg", 23),
     {64, 1849, 65, 447, 231, 66, 5099, 222, 67, 447, 101, 68, 126, 227, 69, 9525, 70}},
    {"combining_marks", std::string("e\xcc\x81 n\xcc\x83 a\xcc\x88" "b", 12),
     {68, 136, 223, 299, 136, 225, 257, 136, 230, 65}},
    {"looks_like_endoftext", std::string("text <|endoftext|> more<|endoftext|>", 36),
     {5239, 1279, 91, 437, 1659, 5239, 91, 29, 517, 27, 91, 437, 1659, 5239, 91, 29}},
    {"code", std::string("def f(x):\x0a    return x**2  # square\x0a\x0aif __name__ == '__main__':\x0a\x09print(f(3))\x0a", 77),
     {4299, 277, 7, 87, 2599, 198, 220, 220, 220, 1441, 2124, 1174, 17, 220, 1303, 6616, 198, 198, 361, 11593, 3672, 834, 6624, 705, 834, 12417, 834, 10354, 198, 197, 4798, 7, 69, 7, 18, 4008, 198}},
    {"long_word", std::string("pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism", 74),
     {79, 25668, 261, 25955, 859, 2500, 1416, 404, 873, 41896, 709, 349, 5171, 36221, 42960, 1885, 29207, 44390, 3699, 1042}},
    {"mixed_scripts_no_spaces", std::string("abc\xd0\xb0\xd0\xb1\xd0\xb2" "123\xd9\xa3\xd9\xa4\xce\xb1\xce\xb2\xce\xb3\xe4\xb8\xad\xe6\x96\x87", 28),
     {39305, 16142, 140, 109, 38857, 10163, 149, 96, 149, 97, 17394, 26638, 42063, 40792, 23877, 229}},
    {"control_chars", std::string("a\x00" "b\x01" "c\x1f" "d\x7f" "e\x0b" "f\x0cg", 13),
     {64, 188, 65, 189, 66, 219, 67, 221, 68, 199, 69, 200, 70}},
    {"many_spaces", std::string("                                                                                                                                                                                                                                                                                                            x", 301),
     {220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 220, 2124}},
    {"long_punct", std::string("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!????????????????????????????????????????????????????????????????????????????????????????????????????", 200),
     {34635, 34635, 34635, 34635, 34635, 34635, 34635, 34635, 34635, 34635, 34635, 34635, 13896, 35709, 35709, 35709, 35709, 35709, 35709, 35709, 35709, 35709, 35709, 35709, 35709, 9805}},
    };
    return cases;
}
// clang-format on

std::vector<int> encode(const std::string& text) {
    BPEEncoder enc(gpt2());
    return enc.encode_ordinary(text);
}

}  // namespace

TEST(BPETokenizer, LoadsGPT2Vocabulary) {
    REQUIRE_TEST_DATA();
    ASSERT_NO_THROW(gpt2()) << "vocabulary expected at " << data_root() << "/gpt2";
    EXPECT_EQ(gpt2().vocab_size(), 50257);
    EXPECT_EQ(gpt2().eot_token(), 50256);
    EXPECT_EQ(gpt2().tokens()[50256], "<|endoftext|>");
    EXPECT_EQ(gpt2().tokens()[220], " ");
    EXPECT_EQ(gpt2().byte_token(0xFF), 187);  // 'ÿ' in encoder.json
}

TEST(BPETokenizer, IdsMatchTiktoken) {
    REQUIRE_TEST_DATA();
    for (const IdCase& c : tiktoken_cases()) {
        std::vector<int> got = encode(c.text);
        EXPECT_EQ(got, c.ids) << "case " << c.name;
        EXPECT_EQ(gpt2().decode(got.data(), got.size()), c.text) << "round trip, case " << c.name;
    }
}

TEST(BPETokenizer, CacheGivesSameIdsOnRepeat) {
    REQUIRE_TEST_DATA();
    BPEEncoder enc(gpt2());
    for (int round = 0; round < 3; round++) {
        for (const IdCase& c : tiktoken_cases()) {
            std::vector<int> got;
            enc.encode_ordinary(c.text, got);
            EXPECT_EQ(got, c.ids) << "round " << round << ", case " << c.name;
        }
    }
}

TEST(BPETokenizer, EndOfTextOnlyWhenAllowed) {
    REQUIRE_TEST_DATA();
    const std::string text = "text <|endoftext|> more<|endoftext|>";
    BPEEncoder enc(gpt2());
    std::vector<int> special;
    enc.encode(text, special, /*allow_special=*/true);
    EXPECT_EQ(special, (std::vector<int>{5239, 220, 50256, 517, 50256}));  // tiktoken encode(allowed_special="all")
    std::vector<int> ordinary;
    enc.encode(text, ordinary, /*allow_special=*/false);
    EXPECT_EQ(std::count(ordinary.begin(), ordinary.end(), 50256), 0);
    EXPECT_EQ(gpt2().decode(special.data(), special.size()), text);
}

TEST(BPETokenizer, EmptyText) {
    REQUIRE_TEST_DATA();
    EXPECT_TRUE(encode("").empty());
    EXPECT_EQ(gpt2().decode(nullptr, 0), "");
}

// Invalid UTF-8: every byte that does not start a valid sequence is one character of the "other"
// class (neither letter, number nor space), so nothing is lost. tiktoken 0.14.0's
// CoreBPE._encode_bytes returns these same ids for all six inputs (scripts/bench/bench_tokenizer.py).
TEST(BPETokenizer, InvalidUtf8HasDefinedIds) {
    REQUIRE_TEST_DATA();
    const int b_ff = 187, b_fe = 186, b_c3 = 127, b_80 = gpt2().byte_token(0x80);
    EXPECT_EQ(encode(std::string("\xff", 1)), (std::vector<int>{b_ff}));
    EXPECT_EQ(encode(std::string("hello \xff\xfe", 8)), (std::vector<int>{31373, 220, b_ff, b_fe}));
    EXPECT_EQ(encode(std::string("wow!\xff", 5)), (std::vector<int>{42773, 0, b_ff}));
    // In the middle of words: the invalid byte is its own piece between the letter runs.
    EXPECT_EQ(encode(std::string("abc\xff" "def", 7)), (std::vector<int>{39305, b_ff, 4299}));
    // A truncated 2-byte sequence (C3 = first byte of 'é') and a lone continuation byte.
    EXPECT_EQ(encode(std::string("caf\xc3", 4)), (std::vector<int>{66, 1878, b_c3}));
    EXPECT_EQ(encode(std::string("\x80" "abc", 4)), (std::vector<int>{b_80, 39305}));
}

TEST(BPETokenizer, RandomBytesRoundTrip) {
    REQUIRE_TEST_DATA();
    // Binary garbage (NULs, invalid UTF-8, stray continuation bytes, mixed with text): ids in range
    // and decode(encode(x)) == x.
    Rng rng(1234);
    const std::string pieces[] = {"a", " ", "'s", "\n", "é", "中", "👍🏽", "1", "!", "\xff", "\xc3", "\x80", std::string(1, '\0')};
    for (int t = 0; t < 300; t++) {
        std::string s;
        int n = 1 + (int)(rng.next_u64() % 64);
        for (int i = 0; i < n; i++) {
            if (rng.next_u64() % 2) s += (char)(rng.next_u64() & 0xFF);
            else s += pieces[rng.next_u64() % (sizeof(pieces) / sizeof(pieces[0]))];
        }
        std::vector<int> ids = encode(s);
        for (int id : ids) ASSERT_TRUE(id >= 0 && id < 50256) << "id " << id;
        ASSERT_EQ(gpt2().decode(ids.data(), ids.size()), s) << "trial " << t;
    }
}

TEST(BPETokenizer, DecodeRejectsOutOfRangeIds) {
    REQUIRE_TEST_DATA();
    std::vector<int> bad = {15496, 50257};
    EXPECT_THROW(gpt2().decode(bad.data(), bad.size()), std::out_of_range);
    bad = {-1};
    EXPECT_THROW(gpt2().decode(bad.data(), bad.size()), std::out_of_range);
}

namespace {
struct WholeFile {
    const char* path;
    size_t tokens;
    const char* sha256_le32;
};
}  // namespace

TEST(BPETokenizer, WholeFilesMatchTiktoken) {
    REQUIRE_TEST_DATA();
    const WholeFile files[] = {
        {"tinyshakespeare/input.txt", 338025, "0c00ab83dc7f46665805762aa7688fb7852f03f28c4a5d84061871e85ea7c815"},
        {"alice/pg11.txt", 43052, "d5f1f311761a3451617dac06bc40589814fab2ca58ed12c9b55177a11abcc8bf"},  // CRLF
        {"alice/pg11_lf.txt", 39638, "9721b273f9d20a797e7b0994c84ce3a1200a8b7276686f60ba1dfb5ead8b854d"},
    };
    for (const WholeFile& f : files) {
        std::string text = read_file(data_root() + "/" + f.path);
        std::vector<int> ids = encode(text);
        EXPECT_EQ(ids.size(), f.tokens) << f.path;
        EXPECT_EQ(sha256_of_ids_le32(ids.data(), ids.size()), f.sha256_le32) << f.path;
        EXPECT_EQ(gpt2().decode(ids.data(), ids.size()), text) << f.path;
        // Cut into ~4 KB chunks at safe points and encoded on 4 threads: the same ids.
        std::vector<int> par = bpe_encode_parallel(gpt2(), text, 4, false, 4096);
        EXPECT_EQ(par, ids) << f.path << " (parallel)";
    }
}

TEST(BPETokenizer, MissingVocabularyIsAClearError) {
    try {
        BPETokenizer::load("/nonexistent/vocab");
        FAIL() << "no exception";
    } catch (const FileError& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/vocab/encoder.json: cannot open"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("(--vocab-dir names the directory"), std::string::npos) << e.what();
    }
}

TEST(BPETokenizer, CorruptVocabularyIsAClearError) {
    REQUIRE_TEST_DATA();
    const std::string good_json = read_file(data_root() + "/gpt2/encoder.json");
    const std::string good_bpe = read_file(data_root() + "/gpt2/vocab.bpe");
    const std::string json = temp_path("encoder.json"), bpe = temp_path("vocab.bpe");
    auto expect_error = [&](const std::string& json_text, const std::string& bpe_text, const std::string& path,
                            const std::string& what) {
        write_file(json, json_text);
        write_file(bpe, bpe_text);
        try {
            BPETokenizer tok(json, bpe);
            ADD_FAILURE() << "no exception for: " << what;
        } catch (const FileError& e) {
            EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    expect_error("", good_bpe, json, "invalid JSON");
    expect_error(good_json.substr(0, good_json.size() / 2), good_bpe, json, "invalid JSON");
    expect_error(good_json + "x", good_bpe, json, "trailing characters");
    expect_error("[1, 2]", good_bpe, json, "expected '{'");
    std::string bad_id = good_json;
    bad_id.replace(bad_id.find("\"!\": 0"), 6, "\"!\": 1");  // id 1 twice, id 0 missing
    expect_error(bad_id, good_bpe, json, "used twice");
    std::string no_eot = good_json;
    no_eot.replace(no_eot.find("<|endoftext|>"), 13, "<|endoftexT|>");
    expect_error(no_eot, good_bpe, json, "no <|endoftext|>");
    // Swap two merge lines: ranks no longer follow the merge order.
    std::string swapped = good_bpe;
    size_t l2 = swapped.find('\n') + 1, l3 = swapped.find('\n', l2) + 1, l4 = swapped.find('\n', l3) + 1;
    swapped = swapped.substr(0, l2) + swapped.substr(l3, l4 - l3) + swapped.substr(l2, l3 - l2) + swapped.substr(l4);
    expect_error(good_json, swapped, bpe, "merge order");
    expect_error(good_json, good_bpe.substr(0, good_bpe.size() / 2), bpe, "merges");
    expect_error(good_json, "#version: 0.2\nabc\n", bpe, "not two space-separated tokens");
    // A repeated key is encoder.json's fault (it used to be blamed on vocab.bpe).
    const std::string eot_entry = "\"<|endoftext|>\": 50256";
    std::string dup_eot = good_json;
    dup_eot.replace(dup_eot.find(eot_entry), eot_entry.size(), eot_entry + ", \"<|endoftext|>\": 50257");
    expect_error(dup_eot, good_bpe, json, "\"<|endoftext|>\" appears twice (ids 50256 and 50257)");
    std::string dup_token = good_json;
    dup_token.replace(dup_token.find(eot_entry), eot_entry.size(), eot_entry + ", \"!\": 50257");
    expect_error(dup_token, good_bpe, json, "token \"!\" appears twice (ids 0 and 50257)");
    // A key with control characters is quoted escaped, so the message cannot drive the terminal.
    std::string escape_key = good_json;
    escape_key.replace(escape_key.find(eot_entry), eot_entry.size(), eot_entry + ", \"\\u001b[2J\": 50257");
    expect_error(escape_key, good_bpe, json, "token 50257 (\"\\x1B[2J\") is not in GPT-2's byte-to-unicode alphabet");
    remove(json.c_str());
    remove(bpe.c_str());
}

// Files saved by Windows editors: CRLF line ends in vocab.bpe, a UTF-8 byte order mark at the start of
// either file. They load, and give the same tokenizer.
TEST(BPETokenizer, VocabularyWithCrlfOrByteOrderMarkLoads) {
    REQUIRE_TEST_DATA();
    const std::string good_json = read_file(data_root() + "/gpt2/encoder.json");
    const std::string good_bpe = read_file(data_root() + "/gpt2/vocab.bpe");
    std::string crlf_bpe;
    for (char c : good_bpe) {
        if (c == '\n') crlf_bpe += '\r';
        crlf_bpe += c;
    }
    const std::string bom = "\xEF\xBB\xBF";
    const std::string json = temp_path("bom_encoder.json"), bpe = temp_path("crlf_vocab.bpe");
    const std::pair<std::string, std::string> variants[] = {
        {good_json, crlf_bpe}, {bom + good_json, good_bpe}, {good_json, bom + good_bpe}, {bom + good_json, bom + crlf_bpe}};
    for (const auto& [json_text, bpe_text] : variants) {
        write_file(json, json_text);
        write_file(bpe, bpe_text);
        try {
            BPETokenizer tok(json, bpe);
            EXPECT_EQ(tok.tokens(), gpt2().tokens());
            BPEEncoder enc(tok);
            EXPECT_EQ(enc.encode_ordinary(tiktoken_cases()[0].text), tiktoken_cases()[0].ids);
        } catch (const FileError& e) {
            ADD_FAILURE() << e.what();
        }
    }
    remove(json.c_str());
    remove(bpe.c_str());
}

// Without the data (no mirror, no `make data`), the tests fail with one line that names the missing
// files and both ways to get them (they used to fail with a stream of 'cannot open' exceptions).
TEST(BPETokenizer, MissingTestDataIsOneClearLine) {
    EXPECT_EQ(find_data_root({"/nonexistent", "/nonexistent/cache"}), "");
    const std::string msg = missing_data_message("/nonexistent");
    EXPECT_EQ(msg, "test data missing: gpt2/encoder.json gpt2/vocab.bpe tinyshakespeare/input.txt alice/pg11.txt "
                   "alice/pg11_lf.txt (not in DATA_MIRROR=/nonexistent nor data/cache): run 'make data' (downloads it) "
                   "or set DATA_MIRROR=DIR to a copy holding gpt2/, tinyshakespeare/, alice/");
    REQUIRE_TEST_DATA();
    EXPECT_EQ(find_data_root({"/nonexistent", data_root()}), data_root());
}

// Regression (fuzzer finding): with <|endoftext|> between merges, the merge right after it was checked against
// the same id again, so a vocabulary with two or more merges after it was refused. Merge ranks now skip
// <|endoftext|>'s id wherever encoder.json puts it (GPT-2's own has it last).
TEST(BPETokenizer, EndOfTextAnywhereAmongTheMerges) {
    fuzz::VocabBuilder b;
    const char* merges[][2] = {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {" ", "a"}};
    for (const auto& m : merges) ASSERT_TRUE(b.merge(m[0], m[1]));
    const std::string json = temp_path("eot_encoder.json"), bpe = temp_path("eot_vocab.bpe");
    for (unsigned slot = 0; slot <= b.num_merges(); slot++) {
        const fuzz::SyntheticVocab v = b.finish(slot);
        write_file(json, v.encoder_json);
        write_file(bpe, v.vocab_bpe);
        try {
            BPETokenizer tok(json, bpe);
            EXPECT_EQ(tok.eot_token(), v.eot) << "slot " << slot;
            BPEEncoder enc(tok);
            const std::string text = " the thin a";
            const std::vector<int> ids = enc.encode_ordinary(text);
            EXPECT_EQ(tok.decode(ids.data(), ids.size()), text) << "slot " << slot;
            EXPECT_EQ(ids.size(), 5u) << "slot " << slot;  // " the" | " t" "h" "in" | " a"
        } catch (const FileError& e) {
            ADD_FAILURE() << "slot " << slot << ": " << e.what();
        }
    }
    remove(json.c_str());
    remove(bpe.c_str());
}
