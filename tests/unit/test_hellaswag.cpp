// The HellaSwag converter's rendering (data/hellaswag_convert.h): every bad field as one line naming the line, and
// the fixture (tests/fixtures/hellaswag_fixture.jsonl, made-up examples in HellaSwag's schema) against the golden
// file scripts/reference/hellaswag_golden.py made apart from this code (token ids by npm's tiktoken): the same examples, and
// the golden's words walked by hand here, field by field, decode to the fixture's texts.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "data/hellaswag_convert.h"
#include "llmc/core/read_file.h"
#include "llmc/formats/eval_file.h"
#include "tests/lib/file_test_helpers.h"

namespace {

const char* const kFixture = "tests/fixtures/hellaswag_fixture.jsonl";
const char* const kGolden = "tests/fixtures/hellaswag_fixture.bin";

// The GPT-2 vocabulary: $DATA_MIRROR/gpt2 (default ../shared/data), else data/cache/gpt2 (make data).
std::string vocab_dir() {
    const char* m = getenv("DATA_MIRROR");
    for (std::string root : {std::string(m && *m ? m : "../shared/data"), std::string("data/cache")}) {
        if (std::ifstream(root + "/gpt2/encoder.json").good() && std::ifstream(root + "/gpt2/vocab.bpe").good()) {
            return root + "/gpt2";
        }
    }
    return "";
}

const BPETokenizer& gpt2() {
    static std::unique_ptr<BPETokenizer> tok;
    if (!tok) tok = std::make_unique<BPETokenizer>(BPETokenizer::load(vocab_dir()));
    return *tok;
}

#define REQUIRE_VOCAB() \
    if (vocab_dir().empty()) GTEST_FAIL() << "test data missing: gpt2/encoder.json gpt2/vocab.bpe (not in DATA_MIRROR nor data/cache): run 'make data' or set DATA_MIRROR=DIR"

std::vector<std::string> fixture_lines() {
    std::vector<std::string> lines;
    std::ifstream f(kFixture);
    for (std::string line; std::getline(f, line);) lines.push_back(line);
    return lines;
}

HellaSwagItem parse(const std::string& line) { return parse_hellaswag_line(line, "hs.jsonl", 7); }

const std::string kEndings = R"("endings": ["a", "b", "c", "d"])";

}  // namespace

TEST(HellaSwag, ParsesTheFieldsLlmcUses) {
    const HellaSwagItem it = parse(R"({"ind": 3, "activity_label": "x", "ctx_a": "A", "ctx_b": "b", "ctx": "A b", "label": 2, )" +
                                   kEndings + R"(, "source_id": "s", "split": "val", "meta": {"k": [1, null]}})");
    EXPECT_EQ(it.ctx, "A b");
    EXPECT_EQ(it.endings, (std::vector<std::string>{"a", "b", "c", "d"}));
    EXPECT_EQ(it.label, 2);
}

TEST(HellaSwag, EveryBadFieldIsOneLineNamingTheLineAndTheField) {
    auto err = [](const std::string& line, const std::string& problem) {
        EXPECT_FILE_ERROR([&] { parse(line); }, "hs.jsonl", problem);
    };
    err(R"({"label": 0, )" + kEndings + "}", "line 7: ctx: missing");
    err(R"({"ctx": 5, "label": 0, )" + kEndings + "}", "line 7: ctx: not a string");
    err(R"({"ctx": "c", "label": 0})", "line 7: endings: missing");
    err(R"({"ctx": "c", "label": 0, "endings": "abcd"})", "line 7: endings: not an array (of 4 strings)");
    err(R"({"ctx": "c", "label": 0, "endings": ["a", "b", "c"]})", "line 7: endings: 3 endings, expected 4");
    err(R"({"ctx": "c", "label": 0, "endings": []})", "line 7: endings: 0 endings, expected 4");
    err(R"({"ctx": "c", "label": 0, "endings": ["a", 2, "c", "d"]})", "line 7: endings: ending 1 is not a string");
    err(R"({"ctx": "c", "label": 0, "endings": ["a", "b", "c", "d")", "line 7: endings: invalid JSON at byte");
    err(R"({"ctx": "c", )" + kEndings + "}", "line 7: label: missing (the test split has no labels)");
    err(R"({"ctx": "c", "label": 4, )" + kEndings + "}", "line 7: label: 4 is not in [0, 4)");
    err(R"({"ctx": "c", "label": -1, )" + kEndings + "}", "line 7: label: -1 is not in [0, 4)");
    err(R"({"ctx": "c", "label": "3", )" + kEndings + "}", "line 7: label: not an integer");
    err(R"({"ctx": "c", "label": 1.5, )" + kEndings + "}", "line 7: label: invalid JSON at byte");
    err(R"({"ctx": "c", "ctx": "d", "label": 1, )" + kEndings + "}", "line 7: ctx: the key appears twice");
    err(R"({"ctx": "c\ud800", "label": 1, )" + kEndings + "}", "line 7: ctx: invalid JSON at byte");
    err(R"(["ctx"])", "line 7: invalid JSON at byte 0: expected '{'");
    err(R"({"ctx": "c", "label": 1, )" + kEndings + "} x", "line 7: invalid JSON at byte");
}

TEST(HellaSwag, RenderRefusesWhatLlmcCannotUse) {
    REQUIRE_VOCAB();
    BPEEncoder enc(gpt2());
    HellaSwagItem it = parse(R"({"ctx": "A man<|endoftext|>", "label": 1, )" + kEndings + "}");
    EXPECT_FILE_ERROR([&] { render_hellaswag(it, enc, "hs.jsonl", 7); }, "hs.jsonl",
                      "line 7: ctx: contains <|endoftext|>, which llm.c's hellaswag.py (tiktoken's encode) refuses");
    it = parse(R"({"ctx": "A man", "label": 1, "endings": ["a", "b", "<|endoftext|>", "d"]})");
    EXPECT_FILE_ERROR([&] { render_hellaswag(it, enc, "hs.jsonl", 7); }, "hs.jsonl", "line 7: endings[2]: contains <|endoftext|>");
    it = parse(R"({"ctx": "", "label": 1, )" + kEndings + "}");
    EXPECT_FILE_ERROR([&] { render_hellaswag(it, enc, "hs.jsonl", 7); }, "hs.jsonl", "line 7: ctx: empty");
    it = parse(R"({"ctx": "x", "label": 1, )" + kEndings + "}");
    it.ctx.clear();
    for (int i = 0; i < 33000; i++) it.ctx += " a";  // a token each: 66,000+ bytes
    EXPECT_FILE_ERROR([&] { render_hellaswag(it, enc, "hs.jsonl", 7); }, "hs.jsonl", "line 7: the example takes");
}

TEST(HellaSwag, FixtureRendersToTheGolden) {
    REQUIRE_VOCAB();
    BPEEncoder enc(gpt2());
    const std::vector<std::string> lines = fixture_lines();
    ASSERT_EQ(lines.size(), 6u);
    std::vector<EvalExample> ours;
    for (size_t i = 0; i < lines.size(); i++) ours.push_back(render_hellaswag(parse_hellaswag_line(lines[i], kFixture, i + 1), enc, kFixture, i + 1));
    const std::string out = scratch_path("ours.bin");
    write_eval_file(out, ours);
    EXPECT_EQ(read_bytes(out), read_bytes(kGolden)) << "the converter's rendering differs from the golden file";
}

// The golden file's words, walked here without the reader: each field where llm.c's write_evalfile puts it, and the
// tokens decode to the fixture's ctx and " " + each ending.
TEST(HellaSwag, GoldenLayoutFieldByField) {
    REQUIRE_VOCAB();
    const std::vector<unsigned char> b = read_bytes(kGolden);
    ASSERT_GT(b.size(), 1024u);
    int32_t h[256];
    memcpy(h, b.data(), sizeof(h));
    const std::vector<std::string> lines = fixture_lines();
    EXPECT_EQ(h[0], 20240522);
    EXPECT_EQ(h[1], 1);
    EXPECT_EQ(h[2], (int)lines.size());
    for (int i = 4; i < 256; i++) EXPECT_EQ(h[i], 0);
    std::vector<uint16_t> w((b.size() - 1024) / 2);
    memcpy(w.data(), b.data() + 1024, w.size() * 2);
    auto text = [&](size_t at, size_t n) {
        std::vector<int> ids(w.begin() + (long)at, w.begin() + (long)(at + n));
        return gpt2().decode(ids.data(), ids.size());
    };
    size_t at = 0;
    int longest = 0;
    for (size_t i = 0; i < lines.size(); i++) {
        const HellaSwagItem item = parse_hellaswag_line(lines[i], kFixture, i + 1);
        const size_t start = at;
        ASSERT_EQ(w[at], 65535) << "example " << i << ": <START_EXAMPLE>";
        const size_t bytes = w[at + 1];
        EXPECT_EQ(w[at + 2], i) << "<EXAMPLE_INDEX>";
        EXPECT_EQ(w[at + 3], item.label) << "<LABEL>";
        ASSERT_EQ(w[at + 4], 4) << "<NUM_COMPLETIONS>";
        const size_t ctx_len = w[at + 5];
        EXPECT_EQ(text(at + 6, ctx_len), item.ctx) << "example " << i;
        at += 6 + ctx_len;
        for (int c = 0; c < 4; c++) {
            const size_t len = w[at];
            EXPECT_EQ(text(at + 1, len), " " + item.endings[(size_t)c]) << "example " << i << " ending " << c;
            at += 1 + len;
        }
        EXPECT_EQ(2 * (at - start), bytes) << "<EXAMPLE_BYTES> of example " << i;
        longest = std::max(longest, (int)bytes);
    }
    EXPECT_EQ(at, w.size());
    EXPECT_EQ(h[3], longest);
}
