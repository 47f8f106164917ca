// The GPT-2 model shape and its one table of parameter tensors.
// Every offset, size, printout and checkpoint order is derived from gpt2_parameter_table();
// nothing else counts parameters by hand.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "llmc/core/utils.h"

struct GPT2Config {
    int max_seq_len = 0;        // maxT
    int vocab_size = 0;         // V, e.g. 50257
    int padded_vocab_size = 0;  // Vp, V rounded up to a multiple of 128 (rows V..Vp-1 are zero)
    int num_layers = 0;         // L
    int num_heads = 0;          // NH
    int channels = 0;           // C
};

constexpr int kVocabPadMultiple = 128;
inline int padded_vocab(int vocab_size) { return (int)round_up((size_t)vocab_size, kVocabPadMultiple); }

// Random-init presets named like llm.c's -e d12 etc.: depth -> (channels, heads).
// Returns false for an unknown name.
inline bool gpt2_preset(const std::string& name, GPT2Config* out, int max_seq_len = 1024, int vocab_size = 50257) {
    int L = 0, C = 0, NH = 0;
    if (name == "d6") { L = 6; C = 384; NH = 6; }
    else if (name == "d12") { L = 12; C = 768; NH = 12; }
    else if (name == "d24") { L = 24; C = 1024; NH = 16; }
    else if (name == "d36") { L = 36; C = 1280; NH = 20; }
    else if (name == "d48") { L = 48; C = 1600; NH = 25; }
    else return false;
    out->max_seq_len = max_seq_len;
    out->vocab_size = vocab_size;
    out->padded_vocab_size = padded_vocab(vocab_size);
    out->num_layers = L;
    out->num_heads = NH;
    out->channels = C;
    return true;
}

// nn.LayerNorm's default epsilon, as GPT-2 uses it (the GPU kernels and the CPU reference both read this one).
constexpr double kLayerNormEps = 1e-5;

// The parameter tensors, in checkpoint order: the row index of gpt2_parameter_table().
enum ParamTensor {
    WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB,
    kNumParameterTensors
};

struct TensorSpec {
    const char* name;
    int ndim;
    size_t shape[3];      // unused trailing dims are 1
    size_t numel;
    bool weight_decay;    // AdamW decays matrices (2-D per layer), not biases or LayerNorm
    bool per_layer;       // the leading dimension is the layer (L): layer l's slice is numel / L elements at l
};

// The parameters in checkpoint order: wte (Vp,C), wpe (maxT,C), ln1w (L,C), ln1b (L,C), qkvw (L,3C,C),
// qkvb (L,3C), attprojw (L,C,C), attprojb (L,C), ln2w, ln2b, fcw (L,4C,C), fcb (L,4C),
// fcprojw (L,C,4C), fcprojb (L,C), lnfw (C), lnfb (C).
inline std::array<TensorSpec, kNumParameterTensors> gpt2_parameter_table(const GPT2Config& c) {
    const size_t Vp = c.padded_vocab_size, C = c.channels, L = c.num_layers, T = c.max_seq_len;
    auto t1 = [](const char* n, size_t a, bool wd) { return TensorSpec{n, 1, {a, 1, 1}, a, wd, false}; };
    auto t2 = [](const char* n, size_t a, size_t b, bool wd) { return TensorSpec{n, 2, {a, b, 1}, a * b, wd, false}; };
    // per layer: the leading dimension is L
    auto l2 = [&](const char* n, size_t b, bool wd) { return TensorSpec{n, 2, {L, b, 1}, L * b, wd, true}; };
    auto l3 = [&](const char* n, size_t b, size_t d, bool wd) { return TensorSpec{n, 3, {L, b, d}, L * b * d, wd, true}; };
    return {{
        t2("wte", Vp, C, true),
        t2("wpe", T, C, true),
        l2("ln1w", C, false),
        l2("ln1b", C, false),
        l3("qkvw", 3 * C, C, true),
        l2("qkvb", 3 * C, false),
        l3("attprojw", C, C, true),
        l2("attprojb", C, false),
        l2("ln2w", C, false),
        l2("ln2b", C, false),
        l3("fcw", 4 * C, C, true),
        l2("fcb", 4 * C, false),
        l3("fcprojw", C, 4 * C, true),
        l2("fcprojb", C, false),
        t1("lnfw", C, false),
        t1("lnfb", C, false),
    }};
}

inline size_t gpt2_num_parameters(const GPT2Config& c) {
    size_t n = 0;
    for (const TensorSpec& t : gpt2_parameter_table(c)) n += t.numel;
    return n;
}

// Element offset of each tensor inside one flat buffer laid out in table order.
inline std::array<size_t, kNumParameterTensors> gpt2_parameter_offsets(const GPT2Config& c) {
    std::array<size_t, kNumParameterTensors> offsets{};
    size_t at = 0;
    auto table = gpt2_parameter_table(c);
    for (int i = 0; i < kNumParameterTensors; i++) {
        offsets[i] = at;
        at += table[i].numel;
    }
    return offsets;
}
