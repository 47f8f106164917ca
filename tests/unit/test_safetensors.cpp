// The safetensors format (llmc/formats/safetensors.h): files built byte by byte here (not by our writer) read as the
// format says; every malformed header, offset and length is one FileError line naming the file and the tensor;
// the writer's output reads back; random corruptions never get past the reader as anything but a FileError.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/formats/safetensors.h"
#include "tests/lib/file_test_helpers.h"

namespace {

// A safetensors file from its JSON header and data section; `declared` overrides the length field.
std::vector<unsigned char> st_file(const std::string& header, const std::vector<unsigned char>& data,
                                   uint64_t declared = UINT64_MAX) {
    const uint64_t n = declared == UINT64_MAX ? header.size() : declared;
    std::vector<unsigned char> b;
    b.reserve(8 + header.size() + data.size());
    for (int i = 0; i < 8; i++) b.push_back((unsigned char)(n >> (8 * i)));
    b.insert(b.end(), header.begin(), header.end());
    b.insert(b.end(), data.begin(), data.end());
    return b;
}

std::string write_st(const std::string& name, const std::string& header, size_t data_bytes,
                     uint64_t declared = UINT64_MAX) {
    std::vector<unsigned char> data(data_bytes);
    for (size_t i = 0; i < data_bytes; i++) data[i] = (unsigned char)(i * 7 + 1);
    const std::string path = scratch_path(name);
    write_bytes(path, st_file(header, data, declared));
    return path;
}

// Two F32 tensors a (2x3, bytes 0..24) and b (4, bytes 24..40), with metadata: the base of most cases.
const char* kTwo =
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
    R"("b":{"dtype":"F32","shape":[4],"data_offsets":[24,40]}})";

}  // namespace

TEST(Safetensors, ReadsAHandBuiltFile) {
    // Tensors out of offset order in the header, a scalar, a zero-size tensor, padding spaces after the JSON.
    const std::string header =
        R"({"b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8, 16]}, "s": {"dtype": "I64", "shape": [],)"
        R"( "data_offsets": [16, 24]}, "a": {"data_offsets": [0, 8], "shape": [2], "dtype": "F32"},)"
        R"( "z": {"dtype": "F16", "shape": [0, 5], "data_offsets": [24, 24]}, "__metadata__": {"k": "v", "format": "pt"}})"
        "     ";
    const std::string path = write_st("hand.safetensors", header, 24);
    SafetensorsFile f = read_safetensors_header(path);
    EXPECT_EQ(f.data_start, 8 + header.size());
    ASSERT_EQ(f.tensors.size(), 4u);
    EXPECT_EQ(f.tensors[0].name, "b");  // header order kept
    const SafetensorsTensor* b = f.find("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->dtype, "BF16");
    EXPECT_EQ(b->shape, (std::vector<uint64_t>{2, 2}));
    EXPECT_EQ(b->numel, 4u);
    EXPECT_EQ(f.data_offset(*b), f.data_start + 8);
    EXPECT_EQ(f.find("s")->numel, 1u);
    EXPECT_TRUE(f.find("s")->shape.empty());
    EXPECT_EQ(f.find("z")->numel, 0u);
    EXPECT_EQ(f.find("nope"), nullptr);
    ASSERT_EQ(f.metadata.size(), 2u);
    EXPECT_EQ(f.metadata[1], std::make_pair(std::string("format"), std::string("pt")));
    // An empty file of tensors is valid too.
    EXPECT_TRUE(read_safetensors_header(write_st("empty.safetensors", "{}", 0)).tensors.empty());
}

TEST(Safetensors, WriterOutputReadsBackAndIsAligned) {
    const std::string path = scratch_path("w.safetensors");
    std::vector<SafetensorsEntry> entries = {{"x.weight", "F32", {3, 5}}, {"y", "BF16", {7}}, {"n\"q", "U8", {}}};
    SafetensorsWriter w(path, entries, {{"format", "pt"}, {"note", "a \"quoted\"\nline"}});
    std::vector<unsigned char> data(60 + 14 + 1);
    for (size_t i = 0; i < data.size(); i++) data[i] = (unsigned char)(255 - i);
    w.write(data.data(), 10);  // any piece sizes
    w.write(data.data() + 10, data.size() - 10);
    w.commit();
    SafetensorsFile f = read_safetensors_header(path);
    EXPECT_EQ(f.data_start % 8, 0u);
    ASSERT_EQ(f.tensors.size(), 3u);
    EXPECT_EQ(f.find("x.weight")->begin, 0u);
    EXPECT_EQ(f.find("y")->begin, 60u);
    EXPECT_EQ(f.find("n\"q")->end, 75u);
    EXPECT_EQ(f.metadata[1].second, "a \"quoted\"\nline");
    std::vector<unsigned char> bytes = read_bytes(path);
    EXPECT_EQ(std::vector<unsigned char>(bytes.begin() + f.data_start, bytes.end()), data);
}

TEST(Safetensors, WriterRefusesWhatItCannotWrite) {
    const std::string path = scratch_path("w.safetensors");
    EXPECT_FILE_ERROR([&] { SafetensorsWriter w(path, {{"a", "F31", {1}}}, {}); }, path, "tensor 'a': unknown dtype 'F31'");
    EXPECT_FILE_ERROR([&] { SafetensorsWriter w(path, {{"a", "F32", {1}}, {"a", "F32", {1}}}, {}); }, path, "repeated");
    EXPECT_FILE_ERROR([&] { SafetensorsWriter w(path, {{"__metadata__", "F32", {1}}}, {}); }, path, "reserved");
    EXPECT_FILE_ERROR([&] {
        SafetensorsWriter w(path, {{"a", "F32", {2}}}, {});
        float x = 1;
        w.write(&x, 4);
        w.commit();
    }, path, "got 4 of the 8 data bytes");
    EXPECT_FILE_ERROR([&] {
        SafetensorsWriter w(path, {{"a", "F32", {1}}}, {});
        double x = 1;
        w.write(&x, 8);
    }, path, "more than the 4 data bytes");
    EXPECT_FALSE(file_exists(path));  // nothing committed, nothing left
}

TEST(Safetensors, HeaderLengthAndFileLength) {
    const std::string shorter = scratch_path("short.safetensors");
    write_bytes(shorter, {1, 2, 3});
    EXPECT_FILE_ERROR([&] { read_safetensors_header(shorter); }, shorter, "file is 3 bytes, shorter than the 8-byte");
    const std::string big = write_st("big.safetensors", kTwo, 40, 100000001);
    EXPECT_FILE_ERROR([&] { read_safetensors_header(big); }, big, "header length 100000001 is over the 100000000-byte limit");
    const std::string huge = write_st("huge.safetensors", kTwo, 40, UINT64_MAX - 1);
    EXPECT_FILE_ERROR([&] { read_safetensors_header(huge); }, huge, "is over the");
    const std::string past = write_st("past.safetensors", kTwo, 0, 5000);
    EXPECT_FILE_ERROR([&] { read_safetensors_header(past); }, past, "header length 5000 runs past the end of the file");
    // One byte short of the declared header: the JSON is cut.
    const std::string cut = write_st("cut.safetensors", std::string(kTwo).substr(0, 50), 0, 50);
    EXPECT_FILE_ERROR([&] { read_safetensors_header(cut); }, cut, "invalid JSON");
    // Truncated data: the last tensor runs past the end; trailing data: bytes no tensor owns.
    const std::string trunc = write_st("trunc.safetensors", kTwo, 39);
    EXPECT_FILE_ERROR([&] { read_safetensors_header(trunc); }, trunc,
                      "tensor 'b': data_offsets [24, 40] run past the end of the data section (39 bytes)");
    const std::string trail = write_st("trail.safetensors", kTwo, 41);
    EXPECT_FILE_ERROR([&] { read_safetensors_header(trail); }, trail, "the tensors end at byte 40 of the data section, which is 41 bytes");
    const std::string zero = write_st("zero.safetensors", "", 0);
    EXPECT_FILE_ERROR([&] { read_safetensors_header(zero); }, zero, "safetensors header: invalid JSON at byte 0");
    EXPECT_FILE_ERROR([&] { read_safetensors_header(scratch_path("none")); }, scratch_path("none"), "cannot open");
}

// Each malformed header: the expected words of its one-line error (which names the tensor where there is one).
TEST(Safetensors, EveryMalformedHeader) {
    auto entry = [](const char* name, const char* body) { return std::string("\"") + name + "\":{" + body + "}"; };
    const std::string a = entry("a", R"("dtype":"F32","shape":[2,3],"data_offsets":[0,24])");
    struct Case { std::string header; size_t data; const char* problem; };
    const Case cases[] = {
        {"[1, 2]", 0, "invalid JSON at byte 0: expected '{'"},
        {"{" + a + "} x", 24, "trailing characters"},
        {"{" + a + "," + a + "}", 24, "tensor 'a' appears twice in the header"},
        {"{" + entry("a", R"("dtype":"F32","dtype":"F32","shape":[6],"data_offsets":[0,24])") + "}", 24, "tensor 'a': field \"dtype\" appears twice"},
        {"{" + entry("a", R"("dtype":"F32","shape":[6],"data_offsets":[0,24],"extra":1)") + "}", 24, "tensor 'a': unknown field \"extra\""},
        {"{" + entry("a", R"("shape":[6],"data_offsets":[0,24])") + "}", 24, "tensor 'a': missing \"dtype\""},
        {"{" + entry("a", R"("dtype":"F32","data_offsets":[0,24])") + "}", 24, "tensor 'a': missing \"shape\""},
        {"{" + entry("a", R"("dtype":"F32","shape":[6])") + "}", 24, "tensor 'a': missing \"data_offsets\""},
        {"{" + entry("a", R"("dtype":"F33","shape":[6],"data_offsets":[0,24])") + "}", 24, "tensor 'a': unknown dtype 'F33'"},
        {"{" + entry("a", R"("dtype":"F32","shape":[-6],"data_offsets":[0,24])") + "}", 24, "tensor 'a': negative dimension -6"},
        {"{" + entry("a", R"("dtype":"F32","shape":[6.5],"data_offsets":[0,24])") + "}", 24, "tensor 'a': safetensors header: invalid JSON"},
        {"{" + entry("a", R"("dtype":"F32","shape":"6","data_offsets":[0,24])") + "}", 24, "tensor 'a': safetensors header: invalid JSON"},
        {"{" + entry("a", R"("dtype":"F32","shape":[6],"data_offsets":[24,0])") + "}", 24, "tensor 'a': data_offsets [24, 0] are not a range"},
        {"{" + entry("a", R"("dtype":"F32","shape":[6],"data_offsets":[0,24,48])") + "}", 48, "tensor 'a': safetensors header: invalid JSON"},
        {"{" + entry("a", R"("dtype":"F32","shape":[6],"data_offsets":[0,28])") + "}", 24, "tensor 'a': data_offsets [0, 28] run past the end"},
        {"{" + entry("a", R"("dtype":"F32","shape":[5],"data_offsets":[0,24])") + "}", 24, "tensor 'a': data_offsets [0, 24] hold 24 bytes, but dtype F32 and shape [5] need 20"},
        {"{" + entry("a", R"("dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,24])") + "}", 24, "tensor 'a': shape [4294967296, 4294967296] is too large"},
        {"{" + entry("a", R"("dtype":"F32","shape":[6],"data_offsets":[0,99999999999999999999])") + "}", 24, "integer out of range"},
        // offsets: overlap, gap, not starting at 0, contiguous but out of order (valid)
        {"{" + a + "," + entry("b", R"("dtype":"F32","shape":[4],"data_offsets":[20,36])") + "}", 36, "tensor 'b': data_offsets [20, 36] overlap tensor 'a' [0, 24]"},
        {"{" + a + "," + entry("b", R"("dtype":"F32","shape":[4],"data_offsets":[28,44])") + "}", 44, "tensor 'b': data_offsets [28, 44] leave a gap after byte 24"},
        {"{" + entry("a", R"("dtype":"F32","shape":[6],"data_offsets":[4,28])") + "}", 28, "tensor 'a': data_offsets [4, 28] leave a gap after byte 0"},
        {"{" + entry("b", R"("dtype":"F32","shape":[6],"data_offsets":[0,24])") + "," + entry("c", R"("dtype":"F32","shape":[6],"data_offsets":[0,24])") + "}", 24, "tensor 'c': data_offsets [0, 24] overlap tensor 'b' [0, 24]"},
        // metadata
        {R"({"__metadata__":{"format":1}})", 0, "__metadata__ \"format\": values must be strings"},
        {R"({"__metadata__":{},"__metadata__":{}})", 0, "\"__metadata__\" appears twice"},
        {R"({"__metadata__":[]})", 0, "safetensors header: invalid JSON"},
        {R"({"":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", 0, "a tensor with an empty name"},
        {"{\"a\xff\":{}}", 0, "invalid UTF-8"},
    };
    int i = 0;
    for (const Case& k : cases) {
        SCOPED_TRACE(k.header);
        const std::string path = write_st("case" + std::to_string(i++) + ".safetensors", k.header, k.data);
        EXPECT_FILE_ERROR([&] { read_safetensors_header(path); }, path, k.problem);
    }
}

// Random damage to a valid file (byte changes in the header and the length field, cuts, insertions): the
// reader either accepts the result or throws one FileError line naming the file; nothing else (no crash, no
// other exception, no huge allocation).
TEST(Safetensors, RandomCorruptionIsAlwaysAOneLineFileError) {
    const std::vector<unsigned char> good = read_bytes(write_st("good.safetensors", kTwo, 40));
    const size_t header_end = 8 + std::string(kTwo).size();
    Rng rng(99);
    const std::string path = scratch_path("bad.safetensors");
    const char interesting[] = "{}[],:\"0123456789-e. xF";
    int rejected = 0, accepted = 0;
    for (int iter = 0; iter < 1500; iter++) {
        std::vector<unsigned char> b = good;
        const int edits = 1 + (int)rng.below(3);
        for (int e = 0; e < edits; e++) {
            const size_t at = rng.below(std::min(b.size(), header_end) + 1);
            switch (rng.below(4)) {
                case 0: if (at < b.size()) b[at] = (unsigned char)rng.below(256); break;
                case 1: if (at < b.size()) b[at] = (unsigned char)interesting[rng.below(sizeof(interesting) - 1)]; break;
                case 2: b.resize(at); break;
                default: b.insert(b.begin() + (long)at, (unsigned char)interesting[rng.below(sizeof(interesting) - 1)]);
            }
        }
        write_bytes(path, b);
        const std::string msg = file_error_message([&] { read_safetensors_header(path); });
        if (msg == "<no exception>") { accepted++; continue; }
        rejected++;
        ASSERT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
        ASSERT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    EXPECT_GT(rejected, 1000);
    EXPECT_GT(accepted, 0);  // e.g. a changed digit in the length field's high bytes is rare; spaces in JSON are fine
}
