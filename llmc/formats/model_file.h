// GPT-2 checkpoint file, byte-compatible with llm.c:
//   int32 header[256]: [0]=20240326 (magic), [1]=3 (fp32 params) or 5 (bf16 params),
//                      [2]=maxT, [3]=V, [4]=L, [5]=NH, [6]=C, [7]=Vp; the rest zero.
//   then every parameter tensor in gpt2_parameter_table() order, fp32 or bf16, little-endian;
//   wte is (Vp, C) with rows V..Vp-1 zero.
// The reader checks magic, version, each header field and that the file is exactly as long as
// the header says (truncated or padded files are errors), then widens bf16 to fp32.
#pragma once

#include <algorithm>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "llmc/core/bf16.h"
#include "llmc/core/utils.h"
#include "llmc/formats/file_header.h"
#include "llmc/gpt2/gpt2_config.h"

enum class ParamDtype { FP32, BF16 };

struct ModelFile {
    GPT2Config config;
    ParamDtype dtype = ParamDtype::FP32;
    std::vector<float> params;  // always fp32 (bf16 files are widened), gpt2_parameter_table order
};

constexpr int kModelMagic = 20240326;
constexpr int kModelVersionFP32 = 3;
constexpr int kModelVersionBF16 = 5;

// Upper bounds on header fields: far above any GPT-2 (maxT 1024, V 50257, L 48, NH 25, C 1600),
// low enough that a corrupt header cannot make a reader compute absurd sizes.
constexpr int kMaxSeqLenLimit = 1 << 20;
constexpr int kVocabLimit = 1 << 24;
constexpr int kLayersLimit = 1024;
constexpr int kHeadsLimit = 1024;
constexpr int kChannelsLimit = 1 << 16;

inline size_t param_dtype_bytes(ParamDtype d) { return d == ParamDtype::BF16 ? 2 : 4; }
inline const char* param_dtype_name(ParamDtype d) { return d == ParamDtype::BF16 ? "bf16" : "fp32"; }

// Checks a model shape; `path` and `where` only name the source in the error message.
inline void validate_gpt2_config(const std::string& path, const GPT2Config& c, const char* where) {
    auto check = [&](const char* name, int value, int lo, int hi) {
        if (value < lo || value > hi) {
            file_error(path, "%s: %s = %d, must be in [%d, %d]", where, name, value, lo, hi);
        }
    };
    check("maxT (max_seq_len)", c.max_seq_len, 1, kMaxSeqLenLimit);
    check("V (vocab_size)", c.vocab_size, 1, kVocabLimit);
    check("L (num_layers)", c.num_layers, 1, kLayersLimit);
    check("NH (num_heads)", c.num_heads, 1, kHeadsLimit);
    check("C (channels)", c.channels, 1, kChannelsLimit);
    check("Vp (padded_vocab_size)", c.padded_vocab_size, c.vocab_size, kVocabLimit);
    if (c.channels % c.num_heads != 0) {
        file_error(path, "%s: C (channels) = %d is not divisible by NH (num_heads) = %d", where, c.channels,
                   c.num_heads);
    }
}

inline int64_t model_file_bytes(const GPT2Config& c, ParamDtype d) {
    return kFileHeaderBytes + (int64_t)gpt2_num_parameters(c) * (int64_t)param_dtype_bytes(d);
}

namespace model_file_detail {

inline GPT2Config parse_header(const std::string& path, const int32_t* h, int64_t file_bytes, ParamDtype* dtype) {
    if (h[0] != kModelMagic) {
        file_error(path, "not a GPT-2 model file (magic %d, expected %d)", h[0], kModelMagic);
    }
    ParamDtype d;
    if (h[1] == kModelVersionFP32) d = ParamDtype::FP32;
    else if (h[1] == kModelVersionBF16) d = ParamDtype::BF16;
    else file_error(path, "unsupported model file version %d (expected 3 = fp32 or 5 = bf16)", h[1]);
    GPT2Config c;
    c.max_seq_len = h[2];
    c.vocab_size = h[3];
    c.num_layers = h[4];
    c.num_heads = h[5];
    c.channels = h[6];
    c.padded_vocab_size = h[7];
    validate_gpt2_config(path, c, "bad model header");
    int64_t expected = model_file_bytes(c, d);
    if (file_bytes != expected) {
        file_error(path, "file is %lld bytes but its header (%s, %zu parameters) implies %lld (%s)",
                   (long long)file_bytes, param_dtype_name(d), gpt2_num_parameters(c), (long long)expected,
                   file_bytes < expected ? "truncated" : "trailing bytes");
    }
    if (dtype) *dtype = d;
    return c;
}

}  // namespace model_file_detail

// Reads and validates the header only (including the exact file length).
inline GPT2Config read_model_header(const std::string& path, ParamDtype* dtype) {
    InputFile in(path);
    int32_t h[kFileHeaderInts];
    read_file_header(in, h, "model");
    return model_file_detail::parse_header(path, h, in.size(), dtype);
}

inline ModelFile read_model_file(const std::string& path) {
    InputFile in(path);
    int32_t h[kFileHeaderInts];
    read_file_header(in, h, "model");
    ModelFile m;
    m.config = model_file_detail::parse_header(path, h, in.size(), &m.dtype);
    size_t n = gpt2_num_parameters(m.config);
    const std::string what = std::to_string(n) + " parameters (as fp32)";
    allocate_for_file(path, (uint64_t)n * sizeof(float), what.c_str(), [&] { m.params.resize(n); });
    if (m.dtype == ParamDtype::FP32) {
        in.read(m.params.data(), n * sizeof(float), "fp32 parameters");
    } else {
        // Widen in chunks so a bf16 checkpoint never needs a second full-size buffer.
        std::vector<uint16_t> chunk(std::min(n, (size_t)1 << 20));
        for (size_t at = 0; at < n; at += chunk.size()) {
            size_t count = std::min(chunk.size(), n - at);
            in.read(chunk.data(), count * sizeof(uint16_t), "bf16 parameters");
            for (size_t i = 0; i < count; i++) m.params[at + i] = bf16_bits_to_float(chunk[i]);
        }
    }
    return m;
}

// Streams a model file: the header at construction, then the parameters (fp32, table order) in pieces of any
// size, written as fp32 (v3) or bf16 (v5, round to nearest even). The wte padding rows V..Vp-1 are written as
// zero whatever the input holds there, as llm.c's files have them. commit() checks that every parameter came and
// renames the file into place (AtomicOutputFile).
class ModelFileWriter {
public:
    ModelFileWriter(const std::string& path, const GPT2Config& c, ParamDtype dtype)
        : path_(path), dtype_(dtype), out_((validate_gpt2_config(path, c, "cannot write model"), path)),
          n_(gpt2_num_parameters(c)), wte_real_((size_t)c.vocab_size * c.channels),
          wte_padded_((size_t)c.padded_vocab_size * c.channels) {
        int32_t h[kFileHeaderInts] = {};
        h[0] = kModelMagic;
        h[1] = dtype == ParamDtype::BF16 ? kModelVersionBF16 : kModelVersionFP32;
        h[2] = c.max_seq_len;
        h[3] = c.vocab_size;
        h[4] = c.num_layers;
        h[5] = c.num_heads;
        h[6] = c.channels;
        h[7] = c.padded_vocab_size;
        out_.write(h, sizeof(h));
    }

    void write(const float* params, size_t count) {
        if (count > n_ - at_) file_error(path_, "writer got more than the %zu parameters of its shape", n_);
        const size_t chunk_elems = (size_t)1 << 20;
        for (size_t done = 0; done < count;) {
            const size_t n = std::min(chunk_elems, count - done);
            f32_.assign(params + done, params + done + n);
            const size_t pad_lo = std::max(at_, wte_real_), pad_hi = std::min(at_ + n, wte_padded_);
            if (pad_lo < pad_hi) std::fill(f32_.begin() + (pad_lo - at_), f32_.begin() + (pad_hi - at_), 0.0f);
            if (dtype_ == ParamDtype::FP32) {
                out_.write(f32_.data(), n * sizeof(float));
            } else {
                b16_.resize(n);
                floats_to_bf16_bits(f32_.data(), b16_.data(), n);
                out_.write(b16_.data(), n * sizeof(uint16_t));
            }
            at_ += n;
            done += n;
        }
    }
    void commit() {
        if (at_ != n_) file_error(path_, "writer got %zu of the %zu parameters of its shape", at_, n_);
        out_.commit();
    }

private:
    std::string path_;
    ParamDtype dtype_;
    AtomicOutputFile out_;
    size_t n_, wte_real_, wte_padded_, at_ = 0;  // wte is the first tensor
    std::vector<float> f32_;
    std::vector<uint16_t> b16_;
};

// Writes params (fp32, table order, gpt2_num_parameters(c) values) as one file; see ModelFileWriter.
inline void write_model_file(const std::string& path, const GPT2Config& c, const float* params, ParamDtype dtype) {
    ModelFileWriter w(path, c, dtype);
    w.write(params, gpt2_num_parameters(c));
    w.commit();
}
