// Multiple-choice eval file (HellaSwag, MMLU), byte-compatible with llm.c: written by its
// dev/data/data_common.py write_evalfile (from dev/data/hellaswag.py), read by its EvalLoader (llmc/dataloader.h).
//   int32 header[256]: [0] = 20240522 (magic), [1] = 1 (version), [2] = number of examples,
//                      [3] = the longest example's size in bytes; the rest zero.
//   then each example as a stream of little-endian uint16:
//     65535                 <START_EXAMPLE> delimiter
//     example bytes         this example's size in bytes, these six fields included (so a reader can skip it)
//     example index         0, 1, 2, ... in file order
//     label                 the index of the correct ending
//     number of endings     4 for HellaSwag (llm.c's loader requires 4)
//     context length, context tokens
//     per ending: its length, its tokens
// llm.c's writer allows at most 65535 examples, examples under 65536 bytes and tokens below 65535; its loader
// wants a non-empty context and non-empty endings. The reader here checks all of that, the label, every length
// against the example and the file, the tokens against the vocabulary, and the header's count and longest size;
// each problem is one FileError line naming the file, the example and the field. The writer refuses what the
// reader would, so a file we write loads in llm.c and is byte-identical to what write_evalfile makes of the same
// examples. docs/EVALUATION.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/formats/file_header.h"

constexpr int32_t kEvalMagic = 20240522;
constexpr int32_t kEvalVersion = 1;
constexpr uint16_t kEvalStartExample = 65535;
constexpr int kEvalExampleHeaderWords = 3;  // <START_EXAMPLE>, <EXAMPLE_BYTES>, <EXAMPLE_INDEX>
constexpr int kEvalMaxExamples = 65535;     // the index is a uint16 (write_evalfile: len(datas) < 2**16)
constexpr int kEvalMaxExampleBytes = 65535; // <EXAMPLE_BYTES> is a uint16
constexpr int kEvalTokenLimit = 65535;      // 65535 is the delimiter, never a token

struct EvalExample {
    int label = 0;
    std::vector<uint16_t> context;
    std::vector<std::vector<uint16_t>> endings;
};

struct EvalFile {
    std::vector<EvalExample> examples;
    int longest_example_bytes = 0;
};

// The example's size in the file: six uint16 fields, the context, and per ending its length and tokens.
inline int64_t eval_example_bytes(const EvalExample& e) {
    int64_t words = 6 + (int64_t)e.context.size();
    for (const auto& ending : e.endings) words += 1 + (int64_t)ending.size();
    return 2 * words;
}

// The longest row a batch needs for this file: context + its longest ending (llm.c's loader wants it below T).
inline int eval_longest_row_tokens(const EvalFile& f) {
    size_t longest = 0;
    for (const EvalExample& e : f.examples) {
        for (const auto& ending : e.endings) longest = std::max(longest, e.context.size() + ending.size());
    }
    return (int)longest;
}

// Reads and validates the whole file. vocab_size > 0: every token must be below it (else below 65535).
inline EvalFile read_eval_file(const std::string& path, int vocab_size = 0) {
    InputFile in(path);
    int32_t h[kFileHeaderInts];
    read_file_header(in, h, "eval file");
    if (h[0] != kEvalMagic) file_error(path, "not an eval file (magic %d, expected %d)", h[0], kEvalMagic);
    if (h[1] != kEvalVersion) file_error(path, "unsupported eval file version %d (expected %d)", h[1], kEvalVersion);
    const int num_examples = h[2];
    if (num_examples < 1 || num_examples > kEvalMaxExamples) {
        file_error(path, "bad eval header: number of examples %d, must be in [1, %d]", num_examples, kEvalMaxExamples);
    }
    if (h[3] < 12 || h[3] > kEvalMaxExampleBytes) {
        file_error(path, "bad eval header: longest example %d bytes, must be in [12, %d]", h[3], kEvalMaxExampleBytes);
    }
    const int token_limit = vocab_size > 0 ? std::min(vocab_size, kEvalTokenLimit) : kEvalTokenLimit;
    const std::string token_bound = vocab_size > 0 && vocab_size <= kEvalTokenLimit
                                        ? "the vocabulary size " + std::to_string(vocab_size)
                                        : "65535 (the <START_EXAMPLE> delimiter)";
    EvalFile f;
    f.examples.reserve((size_t)std::min<int64_t>(num_examples, (in.size() - kFileHeaderBytes) / 12 + 1));
    int64_t left = in.size() - kFileHeaderBytes;  // bytes not read yet
    std::vector<uint16_t> words;
    for (int i = 0; i < num_examples; i++) {
        if (left < 2 * kEvalExampleHeaderWords) {
            file_error(path, "example %d: the file ends %s (%lld bytes left; the header declares %d examples)", i,
                       left == 0 ? "before it" : "inside its first three fields", (long long)left, num_examples);
        }
        uint16_t head[kEvalExampleHeaderWords];
        in.read(head, sizeof(head), "an example's first three fields");
        left -= (int64_t)sizeof(head);
        if (head[0] != kEvalStartExample) {
            file_error(path, "example %d: delimiter is %u, expected %u (<START_EXAMPLE>)", i, head[0], kEvalStartExample);
        }
        const int bytes = head[1];
        if (bytes < 12 || bytes % 2 != 0) {
            file_error(path, "example %d: example bytes %d, must be even and at least 12", i, bytes);
        }
        if (bytes - 6 > left) {
            file_error(path, "example %d: example bytes %d runs past the end of the file (%lld bytes left after its first "
                       "three fields)", i, bytes, (long long)left);
        }
        if (head[2] != i) file_error(path, "example %d: example index is %u, expected %d", i, head[2], i);
        words.resize((size_t)(bytes - 6) / 2);
        in.read(words.data(), words.size() * 2, "an example");
        left -= bytes - 6;

        size_t at = 0;  // into words
        EvalExample e;
        e.label = words[0];
        const int num_endings = words[1];
        if (num_endings < 1) file_error(path, "example %d: number of endings is 0", i);
        if (e.label >= num_endings) {
            file_error(path, "example %d: label %d is not below the number of endings %d", i, e.label, num_endings);
        }
        at = 2;
        // A length field and its tokens, inside this example: `what` names the field.
        auto take_tokens = [&](std::vector<uint16_t>& out, const std::string& what) {
            if (at >= words.size()) {
                file_error(path, "example %d: %s length is missing (past the example's %d bytes)", i, what.c_str(), bytes);
            }
            const size_t n = words[at++];
            if (n == 0) file_error(path, "example %d: %s is empty (length 0)", i, what.c_str());
            if (n > words.size() - at) {
                file_error(path, "example %d: %s length %zu runs past the example's end (%zu tokens left of its %d bytes)",
                           i, what.c_str(), n, words.size() - at, bytes);
            }
            out.assign(words.begin() + (long)at, words.begin() + (long)(at + n));
            for (size_t k = 0; k < n; k++) {
                if (out[k] >= token_limit) {
                    file_error(path, "example %d: %s token %zu is %u, not below %s", i, what.c_str(), k, out[k],
                               token_bound.c_str());
                }
            }
            at += n;
        };
        take_tokens(e.context, "context");
        e.endings.resize((size_t)num_endings);
        for (int c = 0; c < num_endings; c++) take_tokens(e.endings[(size_t)c], "ending " + std::to_string(c));
        if (at != words.size()) {
            file_error(path, "example %d: %zu bytes left over after the last ending (example bytes %d)", i,
                       2 * (words.size() - at), bytes);
        }
        f.longest_example_bytes = std::max(f.longest_example_bytes, bytes);
        f.examples.push_back(std::move(e));
    }
    if (left != 0) {
        file_error(path, "%lld trailing bytes after the %d examples the header declares", (long long)left, num_examples);
    }
    if (h[3] != f.longest_example_bytes) {
        file_error(path, "bad eval header: longest example %d bytes, but the longest is %d", h[3], f.longest_example_bytes);
    }
    return f;
}

// Writes the examples as llm.c's write_evalfile does (byte for byte), after the reader's checks.
inline void write_eval_file(const std::string& path, const std::vector<EvalExample>& examples) {
    if (examples.empty() || examples.size() > (size_t)kEvalMaxExamples) {
        file_error(path, "cannot write an eval file of %zu examples (the format holds 1 to %d)", examples.size(),
                   kEvalMaxExamples);
    }
    std::vector<uint16_t> stream;
    int longest = 0;
    for (size_t i = 0; i < examples.size(); i++) {
        const EvalExample& e = examples[i];
        const int64_t bytes = eval_example_bytes(e);
        if (e.endings.empty()) file_error(path, "cannot write example %zu: it has no endings", i);
        if (e.label < 0 || (size_t)e.label >= e.endings.size()) {
            file_error(path, "cannot write example %zu: label %d is not in [0, %zu)", i, e.label, e.endings.size());
        }
        if (e.context.empty()) file_error(path, "cannot write example %zu: its context is empty", i);
        if (bytes > kEvalMaxExampleBytes) {
            file_error(path, "cannot write example %zu: it takes %lld bytes (the format holds up to %d)", i,
                       (long long)bytes, kEvalMaxExampleBytes);
        }
        auto put_tokens = [&](const std::vector<uint16_t>& t, const std::string& what) {
            if (t.empty()) file_error(path, "cannot write example %zu: %s is empty", i, what.c_str());
            stream.push_back((uint16_t)t.size());
            for (uint16_t x : t) {
                if (x >= kEvalTokenLimit) file_error(path, "cannot write example %zu: %s has token %u", i, what.c_str(), x);
                stream.push_back(x);
            }
        };
        stream.insert(stream.end(), {kEvalStartExample, (uint16_t)bytes, (uint16_t)i, (uint16_t)e.label,
                                     (uint16_t)e.endings.size()});
        put_tokens(e.context, "the context");
        for (size_t c = 0; c < e.endings.size(); c++) put_tokens(e.endings[c], "ending " + std::to_string(c));
        longest = std::max(longest, (int)bytes);
    }
    int32_t h[kFileHeaderInts] = {};
    h[0] = kEvalMagic;
    h[1] = kEvalVersion;
    h[2] = (int32_t)examples.size();
    h[3] = longest;
    AtomicOutputFile out(path);
    out.write(h, sizeof(h));
    out.write(stream.data(), stream.size() * sizeof(uint16_t));
    out.commit();
}
