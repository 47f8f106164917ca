// GEMM algorithm file (llmc/formats/gemm_algos_file.h).
#include <gtest/gtest.h>

#include <string>

#include "llmc/formats/gemm_algos_file.h"
#include "tests/lib/file_test_helpers.h"

namespace {

const char* const kHeader = "llmc-gemm-algos 1 | NVIDIA H200 | cuBLASLt 130100 | bf16";

GemmAlgosFile sample() {
    GemmAlgosFile f;
    f.header = kHeader;
    GemmAlgo a;
    for (int i = 0; i < 8; i++) a.words[i] = 0x0123456789abcdefull * (uint64_t)(i + 1);
    a.note = "heuristic's #6: 3159.8 us (first: 3756.7 us)";
    f.algos["M=32768 N=50304 K=768 tA=0 tB=1 batch=1 sA=0 sB=0 sC=0 epi=none beta=0 bias=14"] = a;
    GemmAlgo b;
    b.words[7] = ~0ull;  // no note
    f.algos["M=768 N=768 K=32768 tA=1 tB=0 batch=1 sA=0 sB=0 sC=0 epi=none beta=1 bias=14"] = b;
    return f;
}

void expect_same(const GemmAlgosFile& a, const GemmAlgosFile& b) {
    EXPECT_EQ(a.header, b.header);
    ASSERT_EQ(a.algos.size(), b.algos.size());
    for (const auto& kv : a.algos) {
        auto it = b.algos.find(kv.first);
        ASSERT_NE(it, b.algos.end()) << kv.first;
        for (int i = 0; i < 8; i++) EXPECT_EQ(kv.second.words[i], it->second.words[i]) << kv.first << " word " << i;
        EXPECT_EQ(kv.second.note, it->second.note);
    }
}

std::string write_text(const std::string& name, const std::string& text) {
    const std::string path = scratch_path(name);
    write_bytes(path, std::vector<unsigned char>(text.begin(), text.end()));
    return path;
}

const std::string kWords = "0000000000000001 0000000000000002 0000000000000003 0000000000000004 "
                           "0000000000000005 0000000000000006 0000000000000007 0000000000000008";

}  // namespace

TEST(GemmAlgosFile, RoundTripKeepsEveryWordAndNote) {
    const std::string path = scratch_path("algos_roundtrip.txt");
    write_gemm_algos(path, sample());
    GemmAlgosFile back;
    ASSERT_TRUE(read_gemm_algos(path, kHeader, &back));
    expect_same(sample(), back);
    EXPECT_FALSE(file_exists(path + ".tmp." + std::to_string((long)getpid())));
}

TEST(GemmAlgosFile, MissingFileIsNotAnError) {
    GemmAlgosFile f = sample();
    EXPECT_FALSE(read_gemm_algos(scratch_path("no_such_algos.txt"), kHeader, &f));
    expect_same(sample(), f);  // untouched
}

TEST(GemmAlgosFile, OtherDeviceOrLibraryIsRefused) {
    const std::string path = scratch_path("algos_other.txt");
    write_gemm_algos(path, sample());
    GemmAlgosFile f;
    EXPECT_FILE_ERROR([&] { read_gemm_algos(path, "llmc-gemm-algos 1 | NVIDIA H100 | cuBLASLt 130100 | bf16", &f); },
                      path, "made for \"llmc-gemm-algos 1 | NVIDIA H200");
}

TEST(GemmAlgosFile, HandWrittenLinesParse) {
    // CRLF line ends, a blank line, no note, a note without the space after '#'
    const std::string path = write_text("algos_hand.txt", std::string(kHeader) + "\r\n\nshape a : " + kWords +
                                                              "\r\nshape b : " + kWords + " #note\n");
    GemmAlgosFile f;
    ASSERT_TRUE(read_gemm_algos(path, kHeader, &f));
    ASSERT_EQ(f.algos.size(), 2u);
    EXPECT_EQ(f.algos["shape a"].words[0], 1u);
    EXPECT_EQ(f.algos["shape a"].words[7], 8u);
    EXPECT_EQ(f.algos["shape a"].note, "");
    EXPECT_EQ(f.algos["shape b"].note, "note");
}

TEST(GemmAlgosFile, BadLinesNameTheirNumber) {
    GemmAlgosFile f;
    const std::string h = std::string(kHeader) + "\n";
    std::string p = write_text("algos_empty.txt", "");
    EXPECT_FILE_ERROR([&] { read_gemm_algos(p, kHeader, &f); }, p, "empty");
    p = write_text("algos_nocolon.txt", h + "shape a " + kWords + "\n");
    EXPECT_FILE_ERROR([&] { read_gemm_algos(p, kHeader, &f); }, p, "line 2: not \"<shape> : <8 hex words>\"");
    p = write_text("algos_short.txt", h + "shape a : 1 2 3 4 5 6 7\n");
    EXPECT_FILE_ERROR([&] { read_gemm_algos(p, kHeader, &f); }, p, "line 2: expected 8 hex words");
    p = write_text("algos_notx.txt", h + "shape a : 1 2 3 4 5 6 7 zz\n");
    EXPECT_FILE_ERROR([&] { read_gemm_algos(p, kHeader, &f); }, p, "line 2: expected 8 hex words");
    p = write_text("algos_trailing.txt", h + "shape a : " + kWords + " 9\n");
    EXPECT_FILE_ERROR([&] { read_gemm_algos(p, kHeader, &f); }, p, "line 2: unexpected text");
    p = write_text("algos_dup.txt", h + "shape a : " + kWords + "\n\nshape a : " + kWords + "\n");
    EXPECT_FILE_ERROR([&] { read_gemm_algos(p, kHeader, &f); }, p, "line 4: a second record for the same shape");
}

TEST(GemmAlgosFile, ShapesThatCannotBeReadBackAreNotWritten) {
    GemmAlgosFile f = sample();
    f.algos["a : b"] = GemmAlgo{};
    const std::string path = scratch_path("algos_badkey.txt");
    EXPECT_FILE_ERROR([&] { write_gemm_algos(path, f); }, path, "cannot write shape");
    EXPECT_FALSE(file_exists(path));
}
