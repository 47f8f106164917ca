// data/prepro's input side: which files an INPUT names, and one file's bytes -> its documents.
// parse_documents does no I/O, so it can be tested (tests/test_prepro_input.cpp) and fuzzed on bytes
// alone; every problem is a FileError naming the file (and the line, for JSONL).
//
//   std::vector<std::string> files = list_input_files("corpus/");          // sorted, regular files only
//   FileDocuments d = parse_documents(read_file_bytes(files[0]), files[0], is_jsonl_path(files[0]), false, 0);
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

#include "data/read_file.h"
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

inline bool is_jsonl_path(const std::string& path) {
    return path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
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

// One JSONL line -> its "text" string (appended to d). Every top-level key may appear once.
inline void parse_jsonl_line(std::string_view line, bool first_line, std::unordered_set<std::string>& keys, FileDocuments& d,
                             const std::string& path, size_t line_no, int64_t line_offset) {
    keys.clear();
    size_t text_at = std::string::npos, text_len = 0;
    try {
        JsonCursor cur(line);
        if (first_line) cur.skip_byte_order_mark();
        cur.for_each_member([&](std::string& key) {
            if (keys.count(key)) {
                file_error(path, "line %zu: key \"%s\" appears twice", line_no, printable_bytes(key).c_str());
            }
            if (key == "text") {
                if (cur.peek() != '"') file_error(path, "line %zu: \"text\" is not a string", line_no);
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
    if (text_at == std::string::npos) file_error(path, "line %zu has no \"text\" string field", line_no);
    d.docs.push_back(Document{text_at, text_len, line_offset});
}

}  // namespace prepro_input_detail

// Every regular file INPUT names: itself, or every regular file below it if it is a directory, sorted
// by path. A missing path, something that is neither, and a directory with no file below it are errors.
inline std::vector<std::string> list_input_files(const std::string& input) {
    std::vector<std::string> files;
    prepro_input_detail::list_files_below(input, files);
    if (files.empty()) file_error(input, "empty directory (no files below it)");
    return files;
}

// The documents in one file's bytes. `path` names the file in errors; `base_offset` is where the file
// starts in the input stream (Document::input_offset counts from there).
//   jsonl: one JSON object per line, its "text" string is a document; blank lines are skipped; a UTF-8
//          byte order mark before the first line is skipped; a line that is not an object, has no
//          "text" string, or repeats a top-level key is an error.
//   text:  the whole file is one document, or with split_blank_lines one per "\n\n" (which stays
//          with the document before it). Bytes are kept as they are.
inline FileDocuments parse_documents(std::string bytes, const std::string& path, bool jsonl, bool split_blank_lines,
                                     int64_t base_offset = 0) {
    FileDocuments d;
    if (jsonl) {
        std::unordered_set<std::string> keys;  // one line's top-level keys
        size_t pos = 0, line_no = 0;
        while (pos < bytes.size()) {
            size_t end = bytes.find('\n', pos);
            if (end == std::string::npos) end = bytes.size();
            std::string_view line(bytes.data() + pos, end - pos);
            line_no++;
            const int64_t line_offset = base_offset + (int64_t)pos;
            pos = end + 1;
            if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank line
            prepro_input_detail::parse_jsonl_line(line, line_no == 1, keys, d, path, line_no, line_offset);
        }
        return d;
    }
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

