// Whole files (and stdin) as bytes (the tokenizer and its tools): the vocabulary, the text to encode, the
// ids to decode. The buffer is sized from the file, so a file larger than memory (a sparse file, a
// device that claims terabytes) is a one-line FileError naming the file and the size, never a bare
// std::bad_alloc (allocate_for_file, llmc/core/utils.h).
#pragma once

#include <cstdio>
#include <string>

#include "llmc/core/utils.h"

inline std::string read_file_bytes(const std::string& path) {
    InputFile in(path);
    std::string s;
    allocate_for_file(path, (uint64_t)in.size(), "its contents", [&] { s.resize((size_t)in.size()); });
    if (!s.empty()) in.read(&s[0], s.size(), "the file");
    return s;
}

// All of stdin; a stream longer than memory fails with the bytes read so far.
inline std::string read_stdin_bytes() {
    std::string data;
    char buf[1 << 16];
    size_t got;
    try {
        while ((got = fread(buf, 1, sizeof(buf), stdin)) > 0) data.append(buf, got);
    } catch (const std::bad_alloc&) {
        file_error("<stdin>", "out of memory after reading %zu bytes", data.size());
    }
    if (ferror(stdin)) file_error("<stdin>", "read failed");
    return data;
}
