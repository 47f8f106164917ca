// Fuzzes what data/prepro does with a file before tokenizing it (data/prepro_input.h, data/compressed_input.h):
// check_input_file, then a JsonlReader over the file as plain, gzip or zstd JSONL, whatever the bytes are.
// Input (fuzz_inputs.h): u8 name (0 .jsonl, 1 .jsonl.gz, 2 .jsonl.zst, 3 .txt), u16 batch bytes, then the file.
// Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, a hang, check_input_file accepting a name its
// content contradicts, or the reader giving other documents (or another outcome) in small batches than in one.
#include "data/prepro_input.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_inputs.h"

namespace {

// Every document and its offset, or empty with ok = false on a FileError.
std::vector<std::pair<std::string, int64_t>> read_all(const std::string& path, size_t batch, bool& ok) {
    std::vector<std::pair<std::string, int64_t>> docs;
    ok = fuzz::accepts([&] {
        JsonlReader r(path, "text", 0);
        FileDocuments d;
        while (r.next(d, batch)) {
            for (const Document& doc : d.docs) docs.emplace_back(std::string(d.text(doc)), doc.input_offset);
        }
    });
    if (!ok) docs.clear();
    return docs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::ByteReader r{data, size};
    static const char* kNames[] = {"in.jsonl", "in.jsonl.gz", "in.jsonl.zst", "in.txt"};
    const uint8_t name = r.get<uint8_t>() % 4;
    const size_t batch = 1 + r.get<uint16_t>();
    const std::string path = fuzz::write_scratch_file(kNames[name], r.rest());
    InputFileKind kind;
    if (fuzz::accepts([&] { kind = check_input_file(path, false, "text"); })) {
        const Compression named = compression_by_name(path);
        FUZZ_REQUIRE(named == Compression::None || kind.compression == named, "a .gz/.zst name over other data was accepted");
        FUZZ_REQUIRE(named != Compression::None || kind.compression == Compression::None,
                     "compressed data under a plain name was accepted");
        FUZZ_REQUIRE(kind.jsonl == (name != 3), "the file was taken for %s", kind.jsonl ? "JSONL" : "text");
    }
    bool ok_small = false, ok_big = false;
    const auto small = read_all(path, batch, ok_small);
    const auto big = read_all(path, 1 << 20, ok_big);
    FUZZ_REQUIRE(ok_small == ok_big, "batches of %zu %s the file, one batch %s it", batch, ok_small ? "accept" : "reject",
                 ok_big ? "accepts" : "rejects");
    FUZZ_REQUIRE(small == big, "batches of %zu give other documents than one batch", batch);
    return 0;
}
