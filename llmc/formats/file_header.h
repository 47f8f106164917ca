// The 256 x 4-byte header that opens every llm.c file (model, debug state, tokenizer, data shard).
#pragma once

#include <cstdint>
#include <string>

#include "llmc/core/utils.h"

constexpr int kFileHeaderInts = 256;
constexpr int64_t kFileHeaderBytes = kFileHeaderInts * 4;

// Reads the header into h[256] (int32 or uint32); a file shorter than a header is an error
// naming `kind` ("model", "data shard", ...).
inline void read_file_header(InputFile& in, void* h, const char* kind) {
    if (in.size() < kFileHeaderBytes) {
        file_error(in.path(), "file is %lld bytes, shorter than the %lld-byte %s header", (long long)in.size(),
                   (long long)kFileHeaderBytes, kind);
    }
    in.seek(0);
    std::string what = std::string(kind) + " header";
    in.read(h, (size_t)kFileHeaderBytes, what.c_str());
}
