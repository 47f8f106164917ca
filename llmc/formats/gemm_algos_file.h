// The GEMM algorithm file: which cuBLASLt algorithm each GEMM shape runs (llmc/kernels/matmul/matmul_algos.cuh tunes and reads
// it). Text, one record per line:
//   line 1:  the header, naming what the algorithms are valid for, e.g.
//            "llmc-gemm-algos 1 | NVIDIA H200 | cuBLASLt 130100 | bf16"
//   then:    "<shape> : <w0> <w1> ... <w7>[ # <note>]"   one per shape; w = the 64-byte cublasLtMatmulAlgo_t as eight
//            16-digit hex words; the note (the timings that chose it) is for people.
// Readers throw FileError: one line naming the file (and the line number where there is one).
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "llmc/core/utils.h"

struct GemmAlgo {
    uint64_t words[8] = {};
    std::string note;
};

struct GemmAlgosFile {
    std::string header;
    std::map<std::string, GemmAlgo> algos;  // by shape
};

// Reads `path` into *out; false (and *out untouched) when there is no such file. The header must be
// `expected_header`: an algorithm is only valid for the device, library and precision that timed it.
inline bool read_gemm_algos(const std::string& path, const std::string& expected_header, GemmAlgosFile* out) {
    if (!path_exists(path)) return false;
    std::string text;
    {
        InputFile in(path);
        text.resize((size_t)in.size());
        if (!text.empty()) in.read(&text[0], text.size(), "the file");
    }
    GemmAlgosFile file;
    int number = 0;
    auto fail = [&](const char* problem) { file_error(path, "line %d: %s", number, problem); };
    for (size_t at = 0; at < text.size();) {
        size_t end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(at, end - at);
        at = end + 1;
        number++;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (number == 1) {
            if (line != expected_header) {
                file_error(path, "made for \"%s\", this run is \"%s\" (tune again)", line.c_str(),
                           expected_header.c_str());
            }
            file.header = line;
            continue;
        }
        if (line.empty()) continue;
        const size_t colon = line.find(" : ");
        if (colon == std::string::npos || colon == 0) fail("not \"<shape> : <8 hex words>\"");
        GemmAlgo algo;
        const char* p = line.c_str() + colon + 3;
        for (int i = 0; i < 8; i++) {
            int used = 0;
            if (sscanf(p, " %16" SCNx64 "%n", &algo.words[i], &used) != 1) fail("expected 8 hex words after \" : \"");
            p += used;
        }
        while (*p == ' ') p++;
        if (*p == '#') {
            p++;
            if (*p == ' ') p++;
            algo.note = p;
        } else if (*p) {
            fail("unexpected text after the 8 hex words");
        }
        if (!file.algos.emplace(line.substr(0, colon), algo).second) fail("a second record for the same shape");
    }
    if (number == 0) file_error(path, "empty (no header line)");
    *out = std::move(file);
    return true;
}

// Writes the whole file atomically (a temporary file renamed over it): a run stopped half-way leaves the old file
// or the new one.
inline void write_gemm_algos(const std::string& path, const GemmAlgosFile& file) {
    std::string text = file.header + "\n";
    char word[24];
    for (const auto& kv : file.algos) {
        if (kv.first.find(" : ") != std::string::npos || kv.first.find('\n') != std::string::npos ||
            kv.second.note.find('\n') != std::string::npos) {
            file_error(path, "cannot write shape \"%s\": \" : \" or a line break inside", kv.first.c_str());
        }
        text += kv.first + " :";
        for (uint64_t w : kv.second.words) {
            snprintf(word, sizeof(word), " %016" PRIx64, w);
            text += word;
        }
        if (!kv.second.note.empty()) text += " # " + kv.second.note;
        text += "\n";
    }
    AtomicOutputFile out(path);
    out.write(text.data(), text.size());
    out.commit();
}
