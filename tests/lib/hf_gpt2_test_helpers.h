// Hugging Face GPT-2 files made by hand for the import tests, independently of llmc/formats/safetensors.h's writer and
// llmc/formats/hf_gpt2.h's mapping: a config.json like the hub's, and a model.safetensors (or shards + index) in HF's
// naming and layout (Conv1D matrices (in, out), wte with V rows, attention buffers, a tied lm_head), each tensor
// in the dtype a test picks. Values are small multiples of 1/64, exact in F16 and BF16, so the expected fp32
// parameters are known exactly.
#pragma once

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/gpt2/gpt2_config.h"
#include "tests/lib/file_test_helpers.h"

struct HandTensor {
    std::string name, dtype;
    std::vector<uint64_t> shape;
    std::vector<unsigned char> bytes;
};

inline GPT2Config hf_test_config(int L = 2, int NH = 2, int C = 8, int V = 50, int maxT = 8) {
    GPT2Config c;
    c.num_layers = L;
    c.num_heads = NH;
    c.channels = C;
    c.vocab_size = V;
    c.padded_vocab_size = padded_vocab(V);
    c.max_seq_len = maxT;
    return c;
}

// Element i (our layout) of table tensor t, layer l.
inline float hand_value(int t, int l, size_t i) { return (float)((int)((t * 131 + l * 17 + i * 7) % 251) - 125) / 64.0f; }

// What the import must produce: hand_value everywhere, wte's padding rows zero.
inline std::vector<float> hand_expected_params(const GPT2Config& c) {
    std::vector<float> p(gpt2_num_parameters(c), 0.0f);
    const auto table = gpt2_parameter_table(c);
    const auto offsets = gpt2_parameter_offsets(c);
    for (int t = 0; t < kNumParameterTensors; t++) {
        const int layers = table[t].per_layer ? c.num_layers : 1;
        const size_t slice = table[t].numel / layers, used = t == WTE ? (size_t)c.vocab_size * c.channels : slice;
        for (int l = 0; l < layers; l++)
            for (size_t i = 0; i < used; i++) p[offsets[t] + l * slice + i] = hand_value(t, l, i);
    }
    return p;
}

// IEEE half bits of x, which must be exactly representable as a normal half (or zero).
inline uint16_t exact_fp16_bits(float x) {
    if (x == 0) return std::signbit(x) ? 0x8000 : 0;
    int e;
    const double m = std::frexp(std::fabs((double)x), &e);  // |x| = m * 2^e, m in [0.5, 1)
    const double frac = (m * 2 - 1) * 1024;
    EXPECT_EQ(frac, std::floor(frac)) << x << " is not exact in fp16";
    EXPECT_TRUE(e - 1 + 15 >= 1 && e - 1 + 15 <= 30) << x << " is not a normal fp16";
    return (uint16_t)((x < 0 ? 0x8000 : 0) | ((e - 1 + 15) << 10) | (int)frac);
}

inline std::vector<unsigned char> encode_values(const std::vector<float>& v, const std::string& dtype) {
    std::vector<unsigned char> b;
    for (float x : v) {
        uint32_t f;
        memcpy(&f, &x, 4);
        if (dtype == "F32") b.insert(b.end(), (unsigned char*)&f, (unsigned char*)&f + 4);
        else if (dtype == "BF16" || dtype == "F16") {
            const uint16_t h = dtype == "BF16" ? (uint16_t)(f >> 16) : exact_fp16_bits(x);  // exact values: no rounding
            b.push_back((unsigned char)h);
            b.push_back((unsigned char)(h >> 8));
        } else {  // I32, for wrong-dtype cases
            const int32_t i = (int32_t)x;
            b.insert(b.end(), (const unsigned char*)&i, (const unsigned char*)&i + 4);
        }
    }
    return b;
}

// The HF tensors of GPT-2 `c`, in HF's names (after `prefix`), with dtype_of(t, l) per tensor; plus the
// attention buffers (F32 causal mask, masked_bias scalar) and lm_head.weight (a copy of wte) when asked.
inline std::vector<HandTensor> hand_tensors(const GPT2Config& c, const std::function<std::string(int, int)>& dtype_of,
                                            const std::string& prefix = "", bool buffers = true, bool lm_head = true) {
    static const char* names[] = {"wte.weight", "wpe.weight", "ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
                                  "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",
                                  "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
                                  "mlp.c_proj.bias", "ln_f.weight", "ln_f.bias"};
    const uint64_t C = c.channels, V = c.vocab_size, T = c.max_seq_len;
    std::vector<HandTensor> out;
    const auto table = gpt2_parameter_table(c);
    for (int t = 0; t < kNumParameterTensors; t++) {
        const int layers = table[t].per_layer ? c.num_layers : 1;
        for (int l = 0; l < layers; l++) {
            HandTensor h;
            h.name = prefix + (table[t].per_layer ? "h." + std::to_string(l) + "." : "") + names[t];
            h.dtype = dtype_of(t, l);
            std::vector<float> v;
            if (t == QKVW || t == ATTPROJW || t == FCW || t == FCPROJW) {  // Conv1D: HF (in, out) = ours (out, in)^T
                const uint64_t O = table[t].shape[1], I = table[t].shape[2];
                h.shape = {I, O};
                for (uint64_t r = 0; r < I; r++)
                    for (uint64_t k = 0; k < O; k++) v.push_back(hand_value(t, l, k * I + r));
            } else {
                h.shape = t == WTE ? std::vector<uint64_t>{V, C}
                        : table[t].per_layer ? std::vector<uint64_t>{table[t].shape[1]}
                        : std::vector<uint64_t>(table[t].shape, table[t].shape + table[t].ndim);
                uint64_t n = 1;
                for (uint64_t d : h.shape) n *= d;
                for (uint64_t i = 0; i < n; i++) v.push_back(hand_value(t, l, i));
            }
            h.bytes = encode_values(v, h.dtype);
            out.push_back(h);
            if (t == WTE && lm_head) {
                h.name = "lm_head.weight";  // HF's lm_head sits outside "transformer."
                out.push_back(h);
            }
        }
    }
    for (int l = 0; buffers && l < c.num_layers; l++) {
        std::vector<float> mask;
        for (uint64_t i = 0; i < T; i++)
            for (uint64_t j = 0; j < T; j++) mask.push_back(j <= i ? 1.0f : 0.0f);
        out.push_back({prefix + "h." + std::to_string(l) + ".attn.bias", "F32", {1, 1, T, T}, encode_values(mask, "F32")});
        out.push_back({prefix + "h." + std::to_string(l) + ".attn.masked_bias", "F32", {}, encode_values({-1e4f}, "F32")});
    }
    return out;
}

// A safetensors file by hand: the JSON written here, tensors laid out in the given order.
inline void write_hand_safetensors(const std::string& path, const std::vector<HandTensor>& tensors) {
    std::string h = "{\"__metadata__\": {\"format\": \"pt\"}";
    uint64_t at = 0;
    std::vector<unsigned char> data;
    for (const HandTensor& t : tensors) {
        h += ", \"" + t.name + "\": {\"dtype\": \"" + t.dtype + "\", \"shape\": [";
        for (size_t i = 0; i < t.shape.size(); i++) h += (i ? ", " : "") + std::to_string(t.shape[i]);
        h += "], \"data_offsets\": [" + std::to_string(at) + ", " + std::to_string(at + t.bytes.size()) + "]}";
        at += t.bytes.size();
        data.insert(data.end(), t.bytes.begin(), t.bytes.end());
    }
    h += "}";
    std::vector<unsigned char> b;
    b.reserve(8 + h.size() + data.size());
    for (int i = 0; i < 8; i++) b.push_back((unsigned char)((uint64_t)h.size() >> (8 * i)));
    b.insert(b.end(), h.begin(), h.end());
    b.insert(b.end(), data.begin(), data.end());
    write_bytes(path, b);
}

// config.json as the hub's GPT-2 has it (with keys that do not matter to the weights); `set` replaces or adds
// keys (raw JSON values), an empty value removes the key.
inline std::string hand_config_json(const GPT2Config& c, const std::map<std::string, std::string>& set = {}) {
    std::map<std::string, std::string> k = {
        {"activation_function", "\"gelu_new\""}, {"architectures", "[\"GPT2LMHeadModel\"]"}, {"attn_pdrop", "0.1"},
        {"bos_token_id", "50256"}, {"embd_pdrop", "0.1"}, {"eos_token_id", "50256"}, {"initializer_range", "0.02"},
        {"layer_norm_epsilon", "1e-05"}, {"model_type", "\"gpt2\""}, {"n_ctx", std::to_string(c.max_seq_len)},
        {"n_embd", std::to_string(c.channels)}, {"n_head", std::to_string(c.num_heads)},
        {"n_layer", std::to_string(c.num_layers)}, {"n_positions", std::to_string(c.max_seq_len)},
        {"resid_pdrop", "0.1"}, {"summary_activation", "null"}, {"summary_proj_to_labels", "true"},
        {"task_specific_params", "{\"text-generation\": {\"do_sample\": true, \"max_length\": 50}}"},
        {"vocab_size", std::to_string(c.vocab_size)}};
    for (const auto& [key, value] : set) {
        if (value.empty()) k.erase(key);
        else k[key] = value;
    }
    std::string s = "{\n";
    for (const auto& [key, value] : k) s += (s.size() > 2 ? ",\n  \"" : "  \"") + key + "\": " + value;
    return s + "\n}\n";
}

inline void write_text_file(const std::string& path, const std::string& text) {
    write_bytes(path, std::vector<unsigned char>(text.begin(), text.end()));
}

// A fresh directory in the scratch space holding config.json and model.safetensors.
inline std::string write_hand_dir(const std::string& name, const std::string& config,
                                  const std::vector<HandTensor>& tensors) {
    const std::string dir = scratch_path(name);
    ensure_directory(dir);
    write_text_file(dir + "/config.json", config);
    write_hand_safetensors(dir + "/model.safetensors", tensors);
    return dir;
}
