// data/prepro's input side: which files an INPUT names, what each file is (text, JSONL, gzip or zstd JSONL,
// or something prepro refuses: check_input_file), and bytes -> documents. parse_documents does no I/O, so it can
// be tested (tests/unit/test_prepro_input.cpp) and fuzzed on bytes alone; JsonlReader streams a JSONL file (plain,
// .jsonl.gz or .jsonl.zst) through it a batch of lines at a time, so no JSONL file is ever whole in memory.
// Every problem is a FileError naming the file (and the line, for JSONL).
//
//   std::vector<std::string> files = list_input_files("corpus/");          // sorted, regular files only
//   InputFileKind kind = check_input_file(files[0], false, "text");        // or one clear line
//   FileDocuments d = parse_documents(read_file_bytes(files[0]), files[0], kind.jsonl, false, 0);  // text
//   JsonlReader r(files[0], "text", 0); while (r.next(d, 64 << 20)) use(d);                       // JSONL
//   for (const Document& doc : d.docs) use(d.text(doc));
#pragma once

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "data/compressed_input.h"
#include "llmc/core/read_file.h"
#include "llmc/core/utils.h"
#include "llmc/formats/json_reader.h"
#include "llmc/formats/tokenizer_file.h"

struct Document {
    size_t offset = 0, length = 0;  // into FileDocuments::storage
    int64_t input_offset = 0;       // where the document starts in the whole input stream (for JSONL: its line)
};

struct FileDocuments {
    std::string storage;  // the file text, or for JSONL the "text" strings one after another
    std::vector<Document> docs;
    std::string_view text(const Document& d) const { return std::string_view(storage).substr(d.offset, d.length); }
};

inline bool path_ends_with(const std::string& path, const char* suffix) {
    const size_t n = strlen(suffix);
    return path.size() >= n && path.compare(path.size() - n, n, suffix) == 0;
}

// JSONL by name: .jsonl, or compressed as .jsonl.gz / .jsonl.zst.
inline bool is_jsonl_path(const std::string& path) {
    return path_ends_with(path, ".jsonl") || path_ends_with(path, ".jsonl.gz") || path_ends_with(path, ".jsonl.zst");
}

// The compression a file's name promises.
inline Compression compression_by_name(const std::string& path) {
    if (path_ends_with(path, ".gz")) return Compression::Gzip;
    if (path_ends_with(path, ".zst")) return Compression::Zstd;
    return Compression::None;
}

namespace prepro_input_detail {

inline void list_files_below(const std::string& path, std::vector<std::string>& out) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) file_error(path, "cannot open (%s)", strerror(errno));
    if (S_ISREG(st.st_mode)) {
        out.push_back(path);
        return;
    }
    if (!S_ISDIR(st.st_mode)) file_error(path, "neither a file nor a directory");
    DIR* dir = opendir(path.c_str());
    if (!dir) file_error(path, "cannot open directory (%s)", strerror(errno));
    std::vector<std::string> names;
    while (struct dirent* e = readdir(dir)) {
        std::string name = e->d_name;
        if (name != "." && name != "..") names.push_back(name);
    }
    closedir(dir);
    std::sort(names.begin(), names.end());
    const std::string sep = !path.empty() && path.back() == '/' ? "" : "/";
    for (const auto& n : names) list_files_below(path + sep + n, out);
}

// One JSONL line -> its text_field string (appended to d). Every top-level key may appear once.
inline void parse_jsonl_line(std::string_view line, bool first_line, std::unordered_set<std::string>& keys, FileDocuments& d,
                             const std::string& path, size_t line_no, int64_t line_offset,
                             const std::string& text_field = "text") {
    keys.clear();
    size_t text_at = std::string::npos, text_len = 0;
    try {
        JsonCursor cur(line);
        if (first_line) cur.skip_byte_order_mark();
        cur.for_each_member([&](std::string& key) {
            if (keys.count(key)) {
                file_error(path, "line %zu: key \"%s\" appears twice", line_no, printable_bytes(key).c_str());
            }
            if (key == text_field) {
                if (cur.peek() != '"') {
                    file_error(path, "line %zu: \"%s\" is not a string", line_no, printable_bytes(text_field).c_str());
                }
                std::string text = cur.parse_string();
                text_at = d.storage.size();
                text_len = text.size();
                d.storage += text;
            } else {
                cur.skip_value();
            }
            keys.insert(std::move(key));
        });
        cur.expect_end();
    } catch (const JsonError& e) {
        file_error(path, "line %zu: %s", line_no, e.what());
    }
    if (text_at == std::string::npos) {
        file_error(path, "line %zu has no \"%s\" string field", line_no, printable_bytes(text_field).c_str());
    }
    d.docs.push_back(Document{text_at, text_len, line_offset});
}

}  // namespace prepro_input_detail

// The JSONL lines in bytes (complete lines; the last may lack its "\n") appended to d: first_line_no is the
// number of the first line, base_offset where bytes start in the input stream. Blank lines are skipped; a byte
// order mark is skipped before line 1 only. Returns the number of lines.
inline size_t parse_jsonl_lines(std::string_view bytes, const std::string& path, const std::string& text_field,
                                size_t first_line_no, int64_t base_offset, FileDocuments& d) {
    std::unordered_set<std::string> keys;  // one line's top-level keys
    size_t pos = 0, line_no = first_line_no - 1;
    while (pos < bytes.size()) {
        size_t end = bytes.find('\n', pos);
        if (end == std::string::npos) end = bytes.size();
        std::string_view line = bytes.substr(pos, end - pos);
        line_no++;
        const int64_t line_offset = base_offset + (int64_t)pos;
        pos = end + 1;
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank line
        prepro_input_detail::parse_jsonl_line(line, line_no == 1, keys, d, path, line_no, line_offset, text_field);
    }
    return line_no - (first_line_no - 1);
}

// Every regular file INPUT names: itself, or every regular file below it if it is a directory, sorted
// by path. A missing path, something that is neither, and a directory with no file below it are errors.
inline std::vector<std::string> list_input_files(const std::string& input) {
    std::vector<std::string> files;
    prepro_input_detail::list_files_below(input, files);
    if (files.empty()) file_error(input, "empty directory (no files below it)");
    return files;
}

// A NUL byte anywhere means binary data, never text to tokenize (check_input_file looks at the first 64 KiB only;
// this, at the whole text file).
inline void refuse_nul_byte(const std::string& path, std::string_view bytes, const char* kind) {
    const size_t nul = bytes.find('\0');
    if (nul != std::string_view::npos) {
        file_error(path, "looks binary (a NUL byte at byte %zu), not %s: prepro reads text and JSONL", nul, kind);
    }
}

// The documents in one file's bytes. `path` names the file in errors; `base_offset` is where the file
// starts in the input stream (Document::input_offset counts from there).
//   jsonl: one JSON object per line, its text_field ("text") string is a document; blank lines are skipped; a UTF-8
//          byte order mark before the first line is skipped; a line that is not an object, has no
//          "text" string, or repeats a top-level key is an error.
//   text:  the whole file is one document, or with split_blank_lines one per "\n\n" (which stays
//          with the document before it). Bytes are kept as they are.
inline FileDocuments parse_documents(std::string bytes, const std::string& path, bool jsonl, bool split_blank_lines,
                                     int64_t base_offset = 0, const std::string& text_field = "text") {
    FileDocuments d;
    if (jsonl) {
        parse_jsonl_lines(bytes, path, text_field, 1, base_offset, d);
        return d;
    }
    refuse_nul_byte(path, bytes, "text");
    d.storage = std::move(bytes);
    size_t pos = 0;
    while (pos < d.storage.size()) {
        size_t end = d.storage.size();
        if (split_blank_lines) {
            size_t hit = d.storage.find("\n\n", pos);
            if (hit != std::string::npos) end = hit + 2;
        }
        d.docs.push_back(Document{pos, end - pos, base_offset + (int64_t)pos});
        pos = end;
    }
    return d;
}


// What a file is, as prepro will read it.
struct InputFileKind {
    bool jsonl = false;
    Compression compression = Compression::None;
};

// Looks at a file's first 64 KiB and says how to read it, or refuses in one line what would otherwise be
// tokenized as bytes: compressed data whose name does not say so (.txt, .jsonl), compressed text (prepro reads
// compressed JSONL only), a name ending .gz / .zst over other data, a binary file (a NUL byte), and a text file
// that is JSONL (its first line a JSON object with a text_field string). force_jsonl (--jsonl): every file is
// JSONL, compressed or not by its content.
inline InputFileKind check_input_file(const std::string& path, bool force_jsonl, const std::string& text_field) {
    const std::string head = read_file_prefix(path, 64 << 10);
    InputFileKind k;
    k.jsonl = force_jsonl || is_jsonl_path(path);
    k.compression = sniff_compression(head.data(), head.size());
    const Compression named = compression_by_name(path);
    if (named != Compression::None && k.compression != named) {
        if (k.compression == Compression::None) {
            file_error(path, "is named .%s but is not %s data", named == Compression::Gzip ? "gz" : "zst",
                       compression_name(named));
        }
        file_error(path, "is named .%s but is %s data", named == Compression::Gzip ? "gz" : "zst",
                   compression_name(k.compression));
    }
    if (k.compression != Compression::None) {
        if (named == Compression::None && !force_jsonl) {
            file_error(path, "is %s-compressed data, but its name does not say so: name it .jsonl.%s (prepro reads "
                       "compressed JSONL), or pass --jsonl", compression_name(k.compression),
                       k.compression == Compression::Gzip ? "gz" : "zst");
        }
        if (!k.jsonl) {
            file_error(path, "is compressed text: prepro reads compressed JSONL only (.jsonl.gz, .jsonl.zst); "
                       "decompress it, or pass --jsonl if it is JSONL");
        }
        return k;
    }
    refuse_nul_byte(path, head, k.jsonl ? "JSONL" : "text");
    if (!k.jsonl) {  // JSON in a text file: its first non-blank line, if it is whole in the 64 KiB read
        size_t pos = 0, line_no = 0;
        while (pos < head.size()) {
            const size_t end = head.find('\n', pos);
            if (end == std::string::npos && head.size() < (size_t)file_size_or_throw(path)) break;
            const std::string_view line = std::string_view(head).substr(pos, (end == std::string::npos ? head.size() : end) - pos);
            line_no++;
            pos = end == std::string::npos ? head.size() : end + 1;
            if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
            FileDocuments probe;
            std::unordered_set<std::string> keys;
            bool json = true;
            try {
                prepro_input_detail::parse_jsonl_line(line, line_no == 1, keys, probe, path, line_no, 0, text_field);
            } catch (const FileError&) {
                json = false;
            }
            if (json) {
                file_error(path, "looks like JSONL (line %zu is a JSON object with a \"%s\" string), not text: name it "
                           ".jsonl or pass --jsonl", line_no, printable_bytes(text_field).c_str());
            }
            break;
        }
    }
    return k;
}

// A JSONL file (plain, gzip or zstd) read a batch of lines at a time: next() gives the documents of the lines in
// the next batch_bytes or so of the (decompressed) stream, always whole lines, with their line numbers and offsets
// in the input stream (base_offset + the byte where the line starts). Memory: one batch, plus one line if a line is
// longer.
class JsonlReader {
public:
    JsonlReader(const std::string& path, std::string text_field, int64_t base_offset)
        : path_(path), text_field_(std::move(text_field)), in_(path), offset_(base_offset) {}

    // The next batch's documents into d (replacing its contents); false once the file is done.
    bool next(FileDocuments& d, size_t batch_bytes) {
        d = FileDocuments();
        if (done_) return false;
        std::vector<char>& chunk = chunk_;
        while (!eof_ && !(pending_.size() >= batch_bytes && last_newline_ > 0)) {
            const size_t got = in_.read(chunk.data(), chunk.size());
            if (got == 0) {
                eof_ = true;
                break;
            }
            for (size_t i = got; i-- > 0;) {
                if (chunk[i] == '\n') {
                    last_newline_ = pending_.size() + i + 1;
                    break;
                }
            }
            pending_.append(chunk.data(), got);
        }
        const size_t cut = eof_ ? pending_.size() : last_newline_;
        line_no_ += parse_jsonl_lines(std::string_view(pending_).substr(0, cut), path_, text_field_, line_no_ + 1,
                                      offset_, d);
        offset_ += (int64_t)cut;
        pending_.erase(0, cut);
        last_newline_ = 0;  // the cut was at the last newline: none is left
        if (eof_) done_ = true;
        return true;
    }
    // Bytes of the file consumed (compressed bytes for gzip and zstd), for progress.
    int64_t file_bytes_read() const { return in_.file_bytes_read(); }
    Compression compression() const { return in_.compression(); }

private:
    std::string path_, text_field_;
    DecompressingReader in_;
    std::vector<char> chunk_ = std::vector<char>(1 << 20);  // what one read of the stream fills
    std::string pending_;      // stream bytes read but not parsed yet
    size_t last_newline_ = 0;  // one past the last '\n' in pending_, 0 if none
    size_t line_no_ = 0;       // lines parsed so far
    int64_t offset_;           // where pending_ starts in the input stream
    bool eof_ = false, done_ = false;
};
