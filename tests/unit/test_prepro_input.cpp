// data/prepro's input side (data/prepro_input.h, data/compressed_input.h): files an INPUT names, what each file is,
// bytes -> documents, and JSONL streamed from plain, gzip and zstd files (compressed here with zlib and libzstd).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <string>
#include <utility>
#include <vector>

#ifdef LLMC_HAVE_ZLIB
#include <zlib.h>
#endif
#ifdef LLMC_HAVE_ZSTD
#include <zstd.h>
#endif

#include "data/prepro_input.h"
#include "llmc/core/rand.h"
#include "tests/lib/file_test_helpers.h"

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

// ---- compressed JSONL, streaming, and what check_input_file refuses

namespace {

#ifdef LLMC_HAVE_ZLIB
// A gzip member of bytes, made with zlib (deflate with a gzip wrapper).
std::string gzip_bytes(const std::string& bytes) {
    z_stream z{};
    EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::string out(deflateBound(&z, (uLong)bytes.size()) + 64, '\0');
    z.next_in = (Bytef*)bytes.data();
    z.avail_in = (uInt)bytes.size();
    z.next_out = (Bytef*)&out[0];
    z.avail_out = (uInt)out.size();
    EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
    out.resize(out.size() - z.avail_out);
    deflateEnd(&z);
    return out;
}
#endif
#ifdef LLMC_HAVE_ZSTD
std::string zstd_bytes(const std::string& bytes) {
    std::string out(ZSTD_compressBound(bytes.size()), '\0');
    const size_t n = ZSTD_compress(&out[0], out.size(), bytes.data(), bytes.size(), 3);
    EXPECT_FALSE(ZSTD_isError(n));
    out.resize(n);
    return out;
}
#endif

void write_string(const std::string& path, const std::string& s) { write_bytes(path, std::vector<unsigned char>(s.begin(), s.end())); }

std::string some_jsonl(int lines) {
    std::string s;
    Rng rng(11);
    for (int i = 0; i < lines; i++) {
        if (i % 7 == 3) s += "\n";  // blank lines count as lines
        s += "{\"id\": " + std::to_string(i) + ", \"text\": \"doc " + std::to_string(i) + " " +
             std::string(rng.below(300), 'a' + (char)(i % 26)) + "\\u00e9\", \"body\": \"b" + std::to_string(i) + "\"}\n";
    }
    return s;
}

// Every document of the file through JsonlReader with batches of batch_bytes: text, input offset, and how many.
std::vector<std::pair<std::string, int64_t>> streamed(const std::string& path, size_t batch_bytes,
                                                      const std::string& field = "text") {
    std::vector<std::pair<std::string, int64_t>> out;
    JsonlReader r(path, field, 100);
    FileDocuments d;
    while (r.next(d, batch_bytes)) {
        for (const Document& doc : d.docs) out.emplace_back(std::string(d.text(doc)), doc.input_offset);
    }
    return out;
}

}  // namespace

TEST(PreproInput, JsonlReaderBatchesGiveTheWholeFilesDocuments) {
    const std::string text = some_jsonl(400);
    FileDocuments whole = parse_documents(text, "x", true, false, 100);
    std::vector<std::pair<std::string, int64_t>> expected;
    for (const Document& doc : whole.docs) expected.emplace_back(std::string(whole.text(doc)), doc.input_offset);
    ASSERT_EQ(expected.size(), 400u);
    std::vector<std::string> paths = {scratch_path("d.jsonl")};
    write_string(paths[0], text);
#ifdef LLMC_HAVE_ZLIB
    paths.push_back(scratch_path("d.jsonl.gz"));  // two gzip members, cut mid-line: one stream, as gzip -d reads it
    write_string(paths.back(), gzip_bytes(text.substr(0, 12345)) + gzip_bytes(text.substr(12345)));
#endif
#ifdef LLMC_HAVE_ZSTD
    paths.push_back(scratch_path("d.jsonl.zst"));  // two frames
    write_string(paths.back(), zstd_bytes(text.substr(0, 777)) + zstd_bytes(text.substr(777)));
#endif
    for (const std::string& p : paths) {
        for (size_t batch : {(size_t)1, (size_t)100, (size_t)4096, (size_t)64 << 20}) {
            EXPECT_EQ(streamed(p, batch), expected) << p << " batch " << batch;
        }
        EXPECT_EQ(decompressed_size(p), (int64_t)text.size()) << p;
        // --text-field
        EXPECT_EQ(streamed(p, 1000, "body")[7].first, "b7") << p;
    }
#if !defined(LLMC_HAVE_ZLIB) || !defined(LLMC_HAVE_ZSTD)
    GTEST_SKIP() << "built without zlib or libzstd: only the plain file was read";
#endif
}

TEST(PreproInput, JsonlReaderErrorsNameTheLineAcrossBatches) {
    std::string text = some_jsonl(50);
    text += "{\"text\": \"ok\"}\n{\"text\": 5}\n";  // line 50 + 7 blank lines + 1 ok = line 59 is bad
    const std::string p = scratch_path("bad.jsonl");
    write_string(p, text);
    for (size_t batch : {(size_t)1, (size_t)1000, (size_t)1 << 20}) {
        EXPECT_FILE_ERROR([&] { streamed(p, batch); }, p, "line 59: \"text\" is not a string");
    }
    EXPECT_FILE_ERROR([&] { streamed(p, 100, "body"); }, p, "line 58 has no \"body\" string field");
}

TEST(PreproInput, DamagedCompressedData) {
#if defined(LLMC_HAVE_ZLIB) && defined(LLMC_HAVE_ZSTD)
    const std::string text = some_jsonl(100);
    const std::string gz = gzip_bytes(text), zst = zstd_bytes(text);
    const std::string p = scratch_path("x.jsonl.gz"), q = scratch_path("x.jsonl.zst");
    write_string(p, gz.substr(0, gz.size() / 2));
    EXPECT_FILE_ERROR([&] { streamed(p, 1000); }, p, "truncated gzip data: the file ends inside a member");
    write_string(p, gz.substr(0, gz.size() - 4));  // the length in the trailer is missing
    EXPECT_FILE_ERROR([&] { streamed(p, 1000); }, p, "truncated gzip data");
    std::string flipped = gz;
    flipped[gz.size() / 2] ^= 0x55;
    write_string(p, flipped);
    EXPECT_FILE_ERROR([&] { streamed(p, 1000); }, p, "damaged gzip data at compressed byte");
    write_string(p, gz + "garbage");
    EXPECT_FILE_ERROR([&] { streamed(p, 1000); }, p, "damaged gzip data at compressed byte");
    write_string(q, zst.substr(0, zst.size() / 2));
    EXPECT_FILE_ERROR([&] { streamed(q, 1000); }, q, "truncated zstd data: the file ends inside a frame");
    flipped = zst;
    flipped[zst.size() / 2] ^= 0x55;
    write_string(q, flipped);
    EXPECT_FILE_ERROR([&] { streamed(q, 1000); }, q, "damaged zstd data at compressed byte");
#else
    GTEST_SKIP() << "built without zlib or libzstd";
#endif
}

TEST(PreproInput, CheckInputFileRefusesWhatItWouldMisread) {
    const std::string jsonl = "{\"id\": 1, \"text\": \"a\"}\n";
    auto put = [&](const std::string& name, const std::string& bytes) {
        const std::string p = scratch_path(name);
        write_string(p, bytes);
        return p;
    };
    auto kind = [](const std::string& p, bool force = false) { return check_input_file(p, force, "text"); };
    EXPECT_FALSE(kind(put("a.txt", "plain text\n{\"text\": \"not on line 1\"}\n")).jsonl);
    EXPECT_TRUE(kind(put("a.jsonl", jsonl)).jsonl);
    EXPECT_FALSE(kind(put("empty.txt", "")).jsonl);
    EXPECT_EQ(check_input_file(put("other.txt", jsonl), false, "body").jsonl, false);  // no "body" field: text
    std::string p = put("j.txt", "\n  \n" + jsonl);
    EXPECT_FILE_ERROR([&] { kind(p); }, p, "looks like JSONL (line 3 is a JSON object with a \"text\" string), not text: name it .jsonl or pass --jsonl");
    EXPECT_TRUE(kind(p, true).jsonl);
    p = put("bin.txt", std::string("abc\0def", 7));
    EXPECT_FILE_ERROR([&] { kind(p); }, p, "looks binary (a NUL byte at byte 3), not text");
    p = put("bin.jsonl", std::string("{\0", 2));
    EXPECT_FILE_ERROR([&] { kind(p); }, p, "looks binary (a NUL byte at byte 1), not JSONL");
    p = put("fake.jsonl.gz", jsonl);
    EXPECT_FILE_ERROR([&] { kind(p); }, p, "is named .gz but is not gzip data");
    p = put("fake.jsonl.zst", jsonl);
    EXPECT_FILE_ERROR([&] { kind(p); }, p, "is named .zst but is not zstd data");
    const std::string gz_magic = "\x1f\x8b\x08\x00rest", zst_magic = "\x28\xb5\x2f\xfdrest";
    p = put("g.txt", gz_magic);
    EXPECT_FILE_ERROR([&] { kind(p); }, p, "is gzip-compressed data, but its name does not say so: name it .jsonl.gz");
    p = put("z.jsonl", zst_magic);
    EXPECT_FILE_ERROR([&] { kind(p); }, p, "is zstd-compressed data, but its name does not say so: name it .jsonl.zst");
    EXPECT_EQ(kind(p, true).compression, Compression::Zstd);
    p = put("z.jsonl.gz", zst_magic);
    EXPECT_FILE_ERROR([&] { kind(p); }, p, "is named .gz but is zstd data");
    p = put("t.txt.gz", gz_magic);
    EXPECT_FILE_ERROR([&] { kind(p); }, p, "is compressed text: prepro reads compressed JSONL only");
    EXPECT_EQ(kind(put("ok.jsonl.gz", gz_magic)).compression, Compression::Gzip);
    EXPECT_TRUE(is_jsonl_path("a.jsonl.zst") && is_jsonl_path("a.jsonl.gz") && !is_jsonl_path("a.json.gz"));
}
