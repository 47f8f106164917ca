// Fuzzes prepro's input parsing (data/prepro_input.h): the input's file (fuzz_inputs.h: flags, base offset,
// bytes) is written as the only file of a directory, found with list_input_files and read with
// read_file_bytes + parse_documents as data/prepro does, as JSONL or as text (whole, or split on blank
// lines). Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, a hang, list_input_files not finding
// exactly that file, a document outside the parsed storage, text documents that do not tile the file,
// JSONL documents that are not valid UTF-8, or input offsets out of order or outside the file.
#include <sys/stat.h>

#include "data/prepro_input.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_inputs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::ByteReader r{data, size};
    const uint8_t flags = r.get<uint8_t>();
    const bool jsonl = flags & 1, split = flags & 2;
    const int64_t base = r.get<uint32_t>();
    const std::string_view bytes = r.rest();

    static const std::string dir = [] {
        const std::string d = fuzz::scratch_dir() + "/prepro_in";
        mkdir(d.c_str(), 0755);
        return d;
    }();
    static const std::string jsonl_path = dir + "/input.jsonl", text_path = dir + "/input.txt";
    const std::string& path = jsonl ? jsonl_path : text_path;
    remove((jsonl ? text_path : jsonl_path).c_str());
    fuzz::write_scratch_file(path.substr(fuzz::scratch_dir().size() + 1), bytes);

    const std::vector<std::string> files = list_input_files(dir);
    FUZZ_REQUIRE(files.size() == 1 && files[0] == path && is_jsonl_path(files[0]) == jsonl,
                 "list_input_files found %zu files", files.size());
    FileDocuments d;
    if (!fuzz::accepts([&] { d = parse_documents(read_file_bytes(files[0]), files[0], jsonl, split, base); })) return 0;

    int64_t last_offset = -1;
    size_t tiled = 0;
    for (const Document& doc : d.docs) {
        FUZZ_REQUIRE(doc.offset <= d.storage.size() && doc.length <= d.storage.size() - doc.offset,
                     "document [%zu, +%zu) outside the %zu bytes parsed", doc.offset, doc.length, d.storage.size());
        FUZZ_REQUIRE(doc.input_offset > last_offset && doc.input_offset >= base &&
                         doc.input_offset < base + (int64_t)bytes.size(),
                     "input offset %lld out of order or outside the file", (long long)doc.input_offset);
        last_offset = doc.input_offset;
        if (jsonl) {
            FUZZ_REQUIRE(fuzz::is_valid_utf8(d.text(doc), false), "a JSONL text is not valid UTF-8");
        } else {
            FUZZ_REQUIRE(doc.offset == tiled && doc.length > 0 && doc.input_offset == base + (int64_t)doc.offset,
                         "text documents do not tile the file");
            tiled += doc.length;
        }
    }
    if (!jsonl) {
        FUZZ_REQUIRE(d.storage == bytes && tiled == bytes.size(), "text documents do not cover the file");
        FUZZ_REQUIRE(split || d.docs.size() == (bytes.empty() ? 0u : 1u), "an unsplit text gave %zu documents",
                     d.docs.size());
    }
    return 0;
}
