// Hugging Face GPT-2 <-> our model, tensor by tensor, and read_model_any: the one way every program loads weights
// (our model file, an HF GPT-2 directory, or a .safetensors / .safetensors.index.json file).
// The mapping: HF names a parameter "[transformer.]wte.weight", "[transformer.]h.<l>.attn.c_attn.weight", ...,
// one tensor per layer where our table stacks the layers; its four matrices are Conv1D weights stored
// (in, out), transposed relative to our (out, in); wte has V rows where ours has Vp (rows V..Vp-1 zero).
// Import rules: F32, F16 and BF16 tensors (widened to fp32 exactly); names with or without "transformer.";
// attention mask buffers (attn.bias, attn.masked_bias) ignored; lm_head.weight, if present, must equal wte
// bit for bit after widening (our model ties them); any other tensor, a missing one, or a dtype or shape that is
// not what config.json implies is an error naming the file and the tensor.
// Export streams our file to model.safetensors (F32 stays F32, bf16 stays BF16; names with "transformer.", as
// save_pretrained writes them, lm_head left to the tie) plus config.json.
#pragma once

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "llmc/core/bf16.h"
#include "llmc/core/utils.h"
#include "llmc/formats/file_header.h"
#include "llmc/formats/hf_gpt2_config.h"
#include "llmc/formats/model_file.h"
#include "llmc/formats/safetensors.h"
#include "llmc/gpt2/gpt2_config.h"

struct HfTensorName {
    const char* name;  // after "h.<l>." for per-layer tensors
    bool transposed;   // Conv1D: HF stores (in, out)
};

// HF's name for each row of gpt2_parameter_table, in the same order.
inline const std::array<HfTensorName, kNumParameterTensors>& hf_gpt2_names() {
    static const std::array<HfTensorName, kNumParameterTensors> names = {{
        {"wte.weight", false}, {"wpe.weight", false}, {"ln_1.weight", false}, {"ln_1.bias", false},
        {"attn.c_attn.weight", true}, {"attn.c_attn.bias", false}, {"attn.c_proj.weight", true},
        {"attn.c_proj.bias", false}, {"ln_2.weight", false}, {"ln_2.bias", false}, {"mlp.c_fc.weight", true},
        {"mlp.c_fc.bias", false}, {"mlp.c_proj.weight", true}, {"mlp.c_proj.bias", false}, {"ln_f.weight", false},
        {"ln_f.bias", false},
    }};
    return names;
}

// HF's name (without "transformer.") of table tensor t, layer l for per-layer tensors.
inline std::string hf_gpt2_name(const GPT2Config& c, int t, int l) {
    const bool per_layer = gpt2_parameter_table(c)[t].per_layer;
    return (per_layer ? "h." + std::to_string(l) + "." : std::string()) + hf_gpt2_names()[t].name;
}

// HF's shape of table tensor t (one layer's): ours without the layer dimension, wte with V rows, Conv1D transposed.
inline std::vector<uint64_t> hf_gpt2_shape(const GPT2Config& c, int t) {
    const TensorSpec s = gpt2_parameter_table(c)[t];
    std::vector<uint64_t> shape(s.shape + (s.per_layer ? 1 : 0), s.shape + s.ndim);
    if (t == WTE) shape[0] = (uint64_t)c.vocab_size;
    if (hf_gpt2_names()[t].transposed) std::swap(shape[0], shape[1]);
    return shape;
}

// fn(t, l, offset, count) for every tensor HF stores on its own, in our file's order: table tensor t, layer l (0
// for whole-model tensors), its `count` elements at `offset` in the flat table-order buffer (wte: Vp rows).
template <typename Fn>
inline void for_each_hf_slice(const GPT2Config& c, Fn&& fn) {
    const auto table = gpt2_parameter_table(c);
    const auto offsets = gpt2_parameter_offsets(c);
    for (int t = 0; t < kNumParameterTensors; t++) {
        const int layers = table[t].per_layer ? c.num_layers : 1;
        const size_t count = table[t].numel / layers;
        for (int l = 0; l < layers; l++) fn(t, l, offsets[t] + (size_t)l * count, count);
    }
}

// dst (cols, rows) = src (rows, cols) transposed, in cache-sized tiles.
template <typename T>
inline void transpose_matrix(const T* src, T* dst, size_t rows, size_t cols) {
    constexpr size_t kTile = 32;
    // bands of rows in parallel (disjoint columns of dst): one thread transposes at ~1 GB/s, less than a disk
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (rows * cols >= ((size_t)1 << 18))
#endif
    for (size_t r0 = 0; r0 < rows; r0 += kTile) {
        for (size_t c0 = 0; c0 < cols; c0 += kTile) {
            const size_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
            for (size_t r = r0; r < r1; r++)
                for (size_t k = c0; k < c1; k++) dst[k * rows + r] = src[r * cols + k];
        }
    }
}

namespace hf_gpt2_detail {

struct Found {
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensor* tensor = nullptr;
};

// Tensor t of file f as fp32 into dst (t.numel values); F16 and BF16 widen in chunks, F32 reads in place.
inline void read_as_fp32(InputFile& in, const SafetensorsFile& f, const SafetensorsTensor& t, float* dst) {
    constexpr size_t kChunk = (size_t)1 << 22;
    std::vector<uint16_t> raw;
    in.seek((int64_t)f.data_offset(t));
    for (size_t at = 0; at < t.numel; at += kChunk) {
        const size_t n = std::min(kChunk, (size_t)t.numel - at);
        if (t.dtype == "F32") {
            in.read(dst + at, n * sizeof(float), t.name.c_str());
            continue;
        }
        raw.resize(n);
        in.read(raw.data(), n * sizeof(uint16_t), t.name.c_str());
        if (t.dtype == "BF16") bf16_bits_to_floats(raw.data(), dst + at, n);
        else for (size_t i = 0; i < n; i++) dst[at + i] = fp16_bits_to_float(raw[i]);
    }
}

// The headers: one file, or every shard of the index with the index and the shards checked against each other.
inline std::vector<SafetensorsFile> read_headers(const HfGpt2Source& src) {
    std::vector<SafetensorsFile> files;
    if (!src.sharded) {
        files.push_back(read_safetensors_header(src.weights));
        return files;
    }
    const auto map = read_safetensors_index(src.weights);
    const std::string dir = parent_directory(src.weights);
    std::map<std::string, size_t> shard_of;  // shard file -> position in files
    for (const auto& [tensor, shard] : map) {
        if (shard_of.count(shard)) continue;
        const std::string path = dir + "/" + shard;
        if (!path_exists(path)) {
            file_error(src.weights, "tensor '%s' is in shard %s, which does not exist", tensor.c_str(), path.c_str());
        }
        shard_of[shard] = files.size();
        files.push_back(read_safetensors_header(path));
    }
    std::map<std::string, std::string> listed;
    for (const auto& [tensor, shard] : map) {
        const SafetensorsFile& f = files[shard_of[shard]];
        if (!listed.emplace(tensor, shard).second) file_error(src.weights, "tensor '%s' is listed twice in the weight_map", tensor.c_str());
        if (!f.find(tensor)) file_error(f.path, "has no tensor '%s', which %s places in it", tensor.c_str(), src.weights.c_str());
    }
    for (const SafetensorsFile& f : files) {
        for (const SafetensorsTensor& t : f.tensors) {
            auto it = listed.find(t.name);
            if (it == listed.end() || dir + "/" + it->second != f.path) {
                file_error(f.path, "tensor '%s' is not placed in this shard by %s", t.name.c_str(), src.weights.c_str());
            }
        }
    }
    return files;
}

inline bool is_attention_buffer(const std::string& name) {
    if (name.compare(0, 2, "h.") != 0) return false;
    size_t i = 2;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') i++;
    const std::string rest = name.substr(i);
    return i > 2 && (rest == ".attn.bias" || rest == ".attn.masked_bias");
}

// Every tensor of the files by name without "transformer.": the parameters and lm_head.weight. Buffers are
// skipped; anything else, or one name twice, is an error.
inline std::map<std::string, Found> index_tensors(const std::vector<SafetensorsFile>& files, const GPT2Config& c,
                                                  const std::string& config_path) {
    std::set<std::string> wanted = {"lm_head.weight"};
    for_each_hf_slice(c, [&](int t, int l, size_t, size_t) { wanted.insert(hf_gpt2_name(c, t, l)); });
    std::map<std::string, Found> found;
    for (const SafetensorsFile& f : files) {
        for (const SafetensorsTensor& t : f.tensors) {
            const std::string prefix = "transformer.";
            const std::string name = t.name.compare(0, prefix.size(), prefix) == 0 ? t.name.substr(prefix.size()) : t.name;
            if (is_attention_buffer(name)) continue;
            if (!wanted.count(name)) {
                file_error(f.path, "unexpected tensor '%s': not a parameter of the GPT-2 that %s describes (n_layer %d)",
                           t.name.c_str(), config_path.c_str(), c.num_layers);
            }
            if (found.count(name)) file_error(f.path, "tensor '%s' appears twice (with and without \"transformer.\")", name.c_str());
            found[name] = Found{&f, &t};
        }
    }
    return found;
}

inline void check_tensor(const Found& at, const std::vector<uint64_t>& shape, const std::string& config_path) {
    const SafetensorsTensor& t = *at.tensor;
    if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
        file_error(at.file->path, "tensor '%s': dtype %s, expected F32, F16 or BF16", t.name.c_str(), t.dtype.c_str());
    }
    if (t.shape != shape) {
        file_error(at.file->path, "tensor '%s' has shape %s, but %s implies %s", t.name.c_str(),
                   shape_string(t.shape).c_str(), config_path.c_str(), shape_string(shape).c_str());
    }
}

}  // namespace hf_gpt2_detail

// An HF GPT-2 model, opened and checked before any parameter is read (its files, config.json, every tensor's name,
// dtype and shape, a saved lm_head against wte); read(t, l, dst) then gives table tensor t, layer l as fp32 in our
// layout (wte: its V real rows). read_hf_gpt2 (a whole model) and convert_hf_gpt2 (streamed) both use it.
class HfGpt2Reader {
public:
    explicit HfGpt2Reader(const std::string& path)
        : src_(locate_hf_gpt2(path)), hc_(read_hf_gpt2_config(src_.config)), files_(hf_gpt2_detail::read_headers(src_)),
          found_(hf_gpt2_detail::index_tensors(files_, hc_.model, src_.config)) {
        using namespace hf_gpt2_detail;
        const GPT2Config& c = hc_.model;
        for_each_hf_slice(c, [&](int t, int l, size_t, size_t) {
            const std::string name = hf_gpt2_name(c, t, l);
            auto it = found_.find(name);
            if (it == found_.end()) file_error(src_.weights, "missing tensor '%s'", name.c_str());
            check_tensor(it->second, hf_gpt2_shape(c, t), src_.config);
            all_bf16_ = all_bf16_ && it->second.tensor->dtype == "BF16";
        });
        auto lm_head = found_.find("lm_head.weight");
        if (lm_head == found_.end() && !hc_.tie_word_embeddings) {
            file_error(src_.config, "tie_word_embeddings is false but the weights have no lm_head.weight");
        }
        if (lm_head != found_.end()) {  // a tied model saved with its copy: it must be that copy
            const Found& at = lm_head->second;
            check_tensor(at, hf_gpt2_shape(c, WTE), src_.config);
            std::vector<float> wte(at.tensor->numel), head(at.tensor->numel);
            read(WTE, 0, wte.data());
            read_as_fp32(input(*at.file), *at.file, *at.tensor, head.data());
            if (memcmp(wte.data(), head.data(), wte.size() * sizeof(float)) != 0) {
                file_error(at.file->path, "tensor '%s' differs from wte.weight: an untied output layer, which our "
                                          "GPT-2 cannot hold (it ties lm_head to wte)", at.tensor->name.c_str());
            }
        }
    }
    HfGpt2Reader(const HfGpt2Reader&) = delete;  // found_ points into files_
    HfGpt2Reader& operator=(const HfGpt2Reader&) = delete;

    const GPT2Config& config() const { return hc_.model; }
    const std::string& weights_path() const { return src_.weights; }
    bool all_bf16() const { return all_bf16_; }

    void read(int t, int l, float* dst) {
        const hf_gpt2_detail::Found& at = found_.at(hf_gpt2_name(hc_.model, t, l));
        if (!hf_gpt2_names()[t].transposed) return hf_gpt2_detail::read_as_fp32(input(*at.file), *at.file, *at.tensor, dst);
        scratch_.resize(at.tensor->numel);
        hf_gpt2_detail::read_as_fp32(input(*at.file), *at.file, *at.tensor, scratch_.data());
        transpose_matrix(scratch_.data(), dst, at.tensor->shape[0], at.tensor->shape[1]);
    }

private:
    InputFile& input(const SafetensorsFile& f) { return open_.try_emplace(f.path, f.path).first->second; }

    HfGpt2Source src_;
    HfGpt2Config hc_;
    std::vector<SafetensorsFile> files_;
    std::map<std::string, hf_gpt2_detail::Found> found_;
    std::map<std::string, InputFile> open_;  // by path, each opened once
    std::vector<float> scratch_;
    bool all_bf16_ = true;
};

// An HF GPT-2 model as our ModelFile: fp32 parameters in table order, wte padded to Vp with zero rows. dtype is
// BF16 when every parameter was BF16 (the weights are those values exactly), else FP32.
inline ModelFile read_hf_gpt2(const std::string& path) {
    HfGpt2Reader r(path);
    ModelFile m;
    m.config = r.config();
    const size_t n = gpt2_num_parameters(m.config);
    const std::string what = std::to_string(n) + " parameters (as fp32)";
    allocate_for_file(r.weights_path(), (uint64_t)n * sizeof(float), what.c_str(), [&] { m.params.assign(n, 0.0f); });
    for_each_hf_slice(m.config, [&](int t, int l, size_t offset, size_t) { r.read(t, l, m.params.data() + offset); });
    m.dtype = r.all_bf16() ? ParamDtype::BF16 : ParamDtype::FP32;
    return m;
}

// An HF GPT-2 model -> our model file (fp32, or bf16 rounded to nearest even), one tensor at a time: memory is a
// few tensors, not the model; reading the next tensor overlaps writing the last (run_pipeline, llmc/core/utils.h).
inline void convert_hf_gpt2(const std::string& path, const std::string& out_path, ParamDtype dtype) {
    HfGpt2Reader r(path);
    ModelFileWriter out(out_path, r.config(), dtype);
    struct Slice { int t, l; size_t count; };
    std::vector<Slice> slices;
    for_each_hf_slice(r.config(), [&](int t, int l, size_t, size_t count) { slices.push_back({t, l, count}); });
    run_pipeline<std::vector<float>>(
        slices.size(),
        [&](size_t i, std::vector<float>& buf) {
            buf.resize(slices[i].count);  // wte's padding rows: whatever is there, the writer writes zeros
            r.read(slices[i].t, slices[i].l, buf.data());
        },
        [&](size_t i, std::vector<float>& buf) { out.write(buf.data(), slices[i].count); });
    out.commit();
}

// Our model file (fp32 or bf16) -> <dir>/model.safetensors + <dir>/config.json, streamed: the input read front to
// back in pieces (a matrix of one layer, or 64 MiB), each transposed where HF's Conv1D wants it while the piece
// before is written. dir is created if missing.
inline void export_hf_gpt2(const std::string& model_path, const std::string& dir) {
    ParamDtype dtype;
    const GPT2Config c = read_model_header(model_path, &dtype);
    const size_t elem = param_dtype_bytes(dtype);
    const auto table = gpt2_parameter_table(c);
    std::vector<SafetensorsEntry> entries;
    struct Piece { int64_t at; size_t bytes; int t; };  // t >= 0: transpose table tensor t's one-layer matrix
    std::vector<Piece> pieces;
    for_each_hf_slice(c, [&](int t, int l, size_t offset, size_t count) {
        entries.push_back({"transformer." + hf_gpt2_name(c, t, l), dtype == ParamDtype::BF16 ? "BF16" : "F32",
                           hf_gpt2_shape(c, t)});
        const int64_t at = kFileHeaderBytes + (int64_t)(offset * elem);
        if (hf_gpt2_names()[t].transposed) return pieces.push_back({at, count * elem, t});
        const size_t bytes = (t == WTE ? (size_t)c.vocab_size * c.channels : count) * elem;  // wte: not the padding
        for (size_t done = 0; done < bytes; done += (size_t)1 << 26)
            pieces.push_back({at + (int64_t)done, std::min(bytes - done, (size_t)1 << 26), -1});
    });
    ensure_directory(dir);
    SafetensorsWriter out(dir + "/model.safetensors", entries, {{"format", "pt"}});
    InputFile in(model_path);
    std::vector<char> scratch;
    run_pipeline<std::vector<char>>(
        pieces.size(),
        [&](size_t i, std::vector<char>& buf) {
            const Piece& p = pieces[i];
            buf.resize(p.bytes);
            in.seek(p.at);
            if (p.t < 0) return in.read(buf.data(), p.bytes, "parameters");
            scratch.resize(p.bytes);  // ours (out, in) -> HF (in, out)
            in.read(scratch.data(), p.bytes, "parameters");
            const size_t rows = table[p.t].shape[1], cols = table[p.t].shape[2];
            if (elem == 2) transpose_matrix((const uint16_t*)scratch.data(), (uint16_t*)buf.data(), rows, cols);
            else transpose_matrix((const uint32_t*)scratch.data(), (uint32_t*)buf.data(), rows, cols);
        },
        [&](size_t, std::vector<char>& buf) { out.write(buf.data(), buf.size()); });
    out.commit();
    const std::string config = hf_gpt2_config_json(c, dtype);
    AtomicOutputFile cfg(dir + "/config.json");
    cfg.write(config.data(), config.size());
    cfg.commit();
}

// The one loader behind -e and the references: an HF GPT-2 model (a directory, *.safetensors,
// *.safetensors.index.json; see is_hf_gpt2_path) or our model file (anything else).
inline ModelFile read_model_any(const std::string& path) {
    return is_hf_gpt2_path(path) ? read_hf_gpt2(path) : read_model_file(path);
}

// The shape behind -e without reading the parameters: our file's header (and its exact length), or an HF model's
// files, config.json and every tensor's name, dtype and shape. What the trainers check before any heavy work.
inline GPT2Config read_model_config_any(const std::string& path) {
    return is_hf_gpt2_path(path) ? HfGpt2Reader(path).config() : read_model_header(path, nullptr);
}
