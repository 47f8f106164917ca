// Debug state: one batch and PyTorch's outputs for it, to check an implementation against
// (llm.c's gpt2_124M_debug_state.bin layout, version 2):
//   int32 header[256]: [0]=20240327 (magic), [1]=2 (version), [2]=B, [3]=T; the rest zero.
//   int32 x[B*T] (inputs), int32 y[B*T] (targets), float logits[B*T*V] (unpadded V), float loss,
//   float grads[num_parameters] (gpt2_parameter_table order, wte grad padded to Vp).
// The model shape is not stored: it comes from the matching model file, so the reader takes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/formats/file_header.h"
#include "llmc/formats/model_file.h"
#include "llmc/gpt2/gpt2_config.h"

struct DebugState {
    int B = 0, T = 0;
    std::vector<int> inputs, targets;  // B*T each
    std::vector<float> logits;         // B*T*V
    float loss = 0;
    std::vector<float> grads;          // gpt2_num_parameters(config)
};

constexpr int kDebugStateMagic = 20240327;
constexpr int kDebugStateVersion = 2;
constexpr int kDebugStateBatchLimit = 1 << 16;  // B; far above any test batch, bounds a corrupt header

inline int64_t debug_state_bytes(const GPT2Config& c, int B, int T) {
    const int64_t BT = (int64_t)B * T;
    return kFileHeaderBytes + 2 * BT * 4 + BT * c.vocab_size * 4 + 4 + (int64_t)gpt2_num_parameters(c) * 4;
}

namespace debug_state_detail {

inline void check_tokens(const std::string& path, const std::vector<int>& tokens, int V, const char* what) {
    for (size_t i = 0; i < tokens.size(); i++) {
        if (tokens[i] < 0 || tokens[i] >= V) {
            file_error(path, "%s[%zu] = %d is outside the vocabulary [0, %d)", what, i, tokens[i], V);
        }
    }
}

}  // namespace debug_state_detail

// `c` is the shape of the model this state belongs to (from its model file).
inline DebugState read_debug_state(const std::string& path, const GPT2Config& c) {
    validate_gpt2_config(path, c, "model config given for this debug state");
    InputFile in(path);
    int32_t h[kFileHeaderInts];
    read_file_header(in, h, "debug state");
    if (h[0] != kDebugStateMagic) {
        file_error(path, "not a debug state file (magic %d, expected %d)", h[0], kDebugStateMagic);
    }
    if (h[1] != kDebugStateVersion) {
        file_error(path, "unsupported debug state version %d (expected %d)", h[1], kDebugStateVersion);
    }
    DebugState s;
    s.B = h[2];
    s.T = h[3];
    if (s.B < 1 || s.B > kDebugStateBatchLimit) {
        file_error(path, "bad debug state header: B = %d, must be in [1, %d]", s.B, kDebugStateBatchLimit);
    }
    if (s.T < 1 || s.T > c.max_seq_len) {
        file_error(path, "bad debug state header: T = %d, must be in [1, maxT = %d]", s.T, c.max_seq_len);
    }
    const int64_t expected = debug_state_bytes(c, s.B, s.T);
    if (in.size() != expected) {
        file_error(path, "file is %lld bytes but B=%d T=%d with V=%d and %zu parameters implies %lld (%s)",
                   (long long)in.size(), s.B, s.T, c.vocab_size, gpt2_num_parameters(c), (long long)expected,
                   in.size() < expected ? "truncated, or a different model" : "trailing bytes, or a different model");
    }
    const size_t BT = (size_t)s.B * s.T;
    allocate_for_file(path, (uint64_t)(expected - kFileHeaderBytes), "inputs, targets, logits and gradients", [&] {
        s.inputs.resize(BT);
        s.targets.resize(BT);
        s.logits.resize(BT * c.vocab_size);
        s.grads.resize(gpt2_num_parameters(c));
    });
    in.read(s.inputs.data(), BT * sizeof(int), "inputs");
    in.read(s.targets.data(), BT * sizeof(int), "targets");
    in.read(s.logits.data(), s.logits.size() * sizeof(float), "logits");
    in.read(&s.loss, sizeof(float), "loss");
    in.read(s.grads.data(), s.grads.size() * sizeof(float), "grads");
    debug_state_detail::check_tokens(path, s.inputs, c.vocab_size, "inputs");
    debug_state_detail::check_tokens(path, s.targets, c.vocab_size, "targets");
    return s;
}

inline void write_debug_state(const std::string& path, const GPT2Config& c, const DebugState& s) {
    validate_gpt2_config(path, c, "cannot write debug state");
    if (s.B < 1 || s.B > kDebugStateBatchLimit || s.T < 1 || s.T > c.max_seq_len) {
        file_error(path, "cannot write debug state: B = %d, T = %d (need 1 <= B <= %d, 1 <= T <= maxT = %d)", s.B, s.T,
                   kDebugStateBatchLimit, c.max_seq_len);
    }
    const size_t BT = (size_t)s.B * s.T;
    auto check_size = [&](const char* what, size_t got, size_t want) {
        if (got != want) file_error(path, "cannot write debug state: %s has %zu values, expected %zu", what, got, want);
    };
    check_size("inputs", s.inputs.size(), BT);
    check_size("targets", s.targets.size(), BT);
    check_size("logits", s.logits.size(), BT * c.vocab_size);
    check_size("grads", s.grads.size(), gpt2_num_parameters(c));
    debug_state_detail::check_tokens(path, s.inputs, c.vocab_size, "inputs");
    debug_state_detail::check_tokens(path, s.targets, c.vocab_size, "targets");
    int32_t h[kFileHeaderInts] = {};
    h[0] = kDebugStateMagic;
    h[1] = kDebugStateVersion;
    h[2] = s.B;
    h[3] = s.T;
    AtomicOutputFile out(path);
    out.write(h, sizeof(h));
    out.write(s.inputs.data(), BT * sizeof(int));
    out.write(s.targets.data(), BT * sizeof(int));
    out.write(s.logits.data(), s.logits.size() * sizeof(float));
    out.write(&s.loss, sizeof(float));
    out.write(s.grads.data(), s.grads.size() * sizeof(float));
    out.commit();
}
