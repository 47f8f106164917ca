// data/prepro's input parsing (data/prepro_input.h): files an INPUT names, and bytes -> documents.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <string>
#include <vector>

#include "data/prepro_input.h"
#include "llmc/core/rand.h"
#include "tests/file_test_helpers.h"

namespace {

std::vector<std::string> texts(const FileDocuments& d) {
    std::vector<std::string> out;
    for (const Document& doc : d.docs) out.emplace_back(d.text(doc));
    return out;
}

std::vector<int64_t> offsets(const FileDocuments& d) {
    std::vector<int64_t> out;
    for (const Document& doc : d.docs) out.push_back(doc.input_offset);
    return out;
}

FileDocuments jsonl(const std::string& bytes, int64_t base = 0) { return parse_documents(bytes, "in.jsonl", true, false, base); }

}  // namespace

// A repeated key used to give two texts but one offset, and prepro read past the offsets (ASan:
// heap-buffer-overflow). Now it is an error naming the file and the line.
TEST(PreproInput, RepeatedKeyIsAnError) {
    EXPECT_FILE_ERROR([] { jsonl("{\"text\": \"a\", \"text\": \"b\"}\n{\"text\": \"c\"}\n"); }, "in.jsonl",
                      "line 1: key \"text\" appears twice");
    EXPECT_FILE_ERROR([] { jsonl("{\"text\": \"c\"}\n\n{\"id\": 1, \"text\": \"a\", \"id\": 2}\n"); }, "in.jsonl",
                      "line 3: key \"id\" appears twice");
    // Keys of nested objects are not checked (only the line's own keys name its fields).
    EXPECT_EQ(texts(jsonl("{\"meta\": {\"a\": 1, \"a\": 2}, \"text\": \"x\"}\n")), std::vector<std::string>{"x"});
}

TEST(PreproInput, JsonlDocumentsAndOffsets) {
    const std::string bytes = "\xEF\xBB\xBF{\"id\": 1, \"text\": \"Hello\"}\n\n  \r\n{\"text\": \"caf\\u00e9\\n\", \"n\": null}\r\n{\"text\": \"\"}";
    FileDocuments d = jsonl(bytes, 1000);
    EXPECT_EQ(texts(d), (std::vector<std::string>{"Hello", "caf\xc3\xa9\n", ""}));
    EXPECT_EQ(offsets(d), (std::vector<int64_t>{1000, 1000 + 35, 1000 + 71}));  // where each line starts
    for (const Document& doc : d.docs) EXPECT_LE(doc.offset + doc.length, d.storage.size());
}

TEST(PreproInput, JsonlErrorsNameTheLine) {
    EXPECT_FILE_ERROR([] { jsonl("{\"text\": \"ok\"}\n{\"text\": \"bad\n"); }, "in.jsonl", "line 2: invalid JSON");
    EXPECT_FILE_ERROR([] { jsonl("{\"title\": \"t\"}\n"); }, "in.jsonl", "line 1 has no \"text\" string field");
    EXPECT_FILE_ERROR([] { jsonl("{\"text\": 5}\n"); }, "in.jsonl", "line 1: \"text\" is not a string");
    EXPECT_FILE_ERROR([] { jsonl("[\"text\"]\n"); }, "in.jsonl", "line 1: invalid JSON at byte 0: expected '{'");
    EXPECT_FILE_ERROR([] { jsonl("{\"text\": \"a\"} x\n"); }, "in.jsonl", "line 1: invalid JSON at byte 14: trailing");
    // A byte order mark is skipped before the first line only.
    EXPECT_FILE_ERROR([] { jsonl("{\"text\": \"a\"}\n\xEF\xBB\xBF{\"text\": \"b\"}\n"); }, "in.jsonl", "line 2: invalid JSON");
    // Quoted keys are escaped: a control character in a key cannot reach the terminal.
    EXPECT_FILE_ERROR([] { jsonl("{\"\\u001b[2J\": 1, \"\\u001b[2J\": 2}\n"); }, "in.jsonl", "key \"\\x1B[2J\" appears twice");
}

TEST(PreproInput, TextFiles) {
    const std::string t = "a\n\nb\nc\n\n\n\nd";
    FileDocuments whole = parse_documents(t, "t.txt", false, false, 7);
    EXPECT_EQ(texts(whole), std::vector<std::string>{t});
    EXPECT_EQ(offsets(whole), std::vector<int64_t>{7});
    FileDocuments split = parse_documents(t, "t.txt", false, true, 7);
    EXPECT_EQ(texts(split), (std::vector<std::string>{"a\n\n", "b\nc\n\n", "\n\n", "d"}));
    EXPECT_EQ(offsets(split), (std::vector<int64_t>{7, 10, 15, 17}));
    EXPECT_TRUE(parse_documents("", "t.txt", false, true).docs.empty());
    // Text files keep every byte, a byte order mark included.
    EXPECT_EQ(texts(parse_documents("\xEF\xBB\xBFx", "t.txt", false, false)), std::vector<std::string>{"\xEF\xBB\xBFx"});
}

// Random files of valid and broken lines: parse_documents either throws a one-line FileError naming
// the file and line, or returns documents that lie inside the storage, one offset each, in order (what
// prepro relies on).
TEST(PreproInput, RandomJsonlNeverGivesInconsistentDocuments) {
    const std::string junk[] = {"{", "}", "\"text\"", ":", ",", " ", "\"a\\u00e9\"", "1", "[", "]", "null", "\r", "\"",
                                "\\", "\xff", "\xEF\xBB\xBF"};
    const std::string keys[] = {"\"text\"", "\"id\"", "\"meta\"", "\"\\u0074ext\""};  // the last is "text" escaped
    const std::string values[] = {"\"x\"", "\"caf\\u00e9 \\ud83d\\udc4d\"", "\"\"", "3", "{\"a\": [1, null]}"};
    Rng rng(7);
    auto pick = [&](const auto& arr) { return arr[rng.next_u64() % (sizeof(arr) / sizeof(arr[0]))]; };
    int parsed = 0, failed = 0;
    for (int trial = 0; trial < 2000; trial++) {
        std::string s;
        const int lines = 1 + (int)(rng.next_u64() % 4);
        for (int l = 0; l < lines; l++) {
            if (rng.next_u64() % 8 == 0) {  // a broken line
                for (int i = 0, n = 1 + (int)(rng.next_u64() % 8); i < n; i++) s += pick(junk);
            } else {  // an object with 1..3 fields, keys and values drawn at random (repeats happen)
                s += "{";
                for (int i = 0, n = 1 + (int)(rng.next_u64() % 3); i < n; i++) s += (i ? ", " : "") + pick(keys) + ": " + pick(values);
                s += "}";
            }
            s += rng.next_u64() % 4 ? "\n" : "\n\n";
        }
        try {
            FileDocuments d = jsonl(s);
            parsed++;
            int64_t last = -1;
            for (const Document& doc : d.docs) {
                ASSERT_LE(doc.offset + doc.length, d.storage.size()) << s;
                ASSERT_GT(doc.input_offset, last) << s;
                ASSERT_LT(doc.input_offset, (int64_t)s.size()) << s;
                last = doc.input_offset;
            }
        } catch (const FileError& e) {
            failed++;
            ASSERT_EQ(std::string(e.what()).rfind("in.jsonl: line ", 0), 0u) << e.what();
            ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        }
    }
    EXPECT_GT(parsed, 100);  // both outcomes are exercised
    EXPECT_GT(failed, 100);
}

TEST(PreproInput, ListInputFiles) {
    const std::string root = scratch_path("corpus");
    ASSERT_EQ(mkdir(root.c_str(), 0755), 0);
    EXPECT_FILE_ERROR([&] { list_input_files(root); }, root, "empty directory (no files below it)");
    ASSERT_EQ(mkdir((root + "/sub").c_str(), 0755), 0);
    EXPECT_FILE_ERROR([&] { list_input_files(root); }, root, "empty directory (no files below it)");
    write_bytes(root + "/sub/b.txt", {'b'});
    write_bytes(root + "/a.txt", {'a'});
    write_bytes(root + "/c.jsonl", {'{', '}'});
    EXPECT_EQ(list_input_files(root), (std::vector<std::string>{root + "/a.txt", root + "/c.jsonl", root + "/sub/b.txt"}));
    EXPECT_EQ(list_input_files(root + "/"), (std::vector<std::string>{root + "/a.txt", root + "/c.jsonl", root + "/sub/b.txt"}));
    EXPECT_EQ(list_input_files(root + "/a.txt"), std::vector<std::string>{root + "/a.txt"});
    EXPECT_FILE_ERROR([&] { list_input_files(root + "/nope"); }, root + "/nope", "cannot open");
    EXPECT_FILE_ERROR([&] { list_input_files("/dev/null"); }, "/dev/null", "neither a file nor a directory");
    EXPECT_TRUE(is_jsonl_path(root + "/c.jsonl"));
    EXPECT_FALSE(is_jsonl_path("jsonl"));
}
