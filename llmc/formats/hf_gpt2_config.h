// A Hugging Face GPT-2 model on disk: where its files are (a directory, a .safetensors file, or the sharded
// form's model.safetensors.index.json), its config.json (read strictly into our GPT2Config, written with the keys
// transformers' GPT2LMHeadModel needs) and the shard index. llmc/formats/hf_gpt2.h maps the tensors.
// Rules: a lone .safetensors file needs config.json beside it, since GPT-2's n_head cannot be inferred from the
// tensor shapes; config.json must describe the GPT-2 we compute (tanh GELU, LayerNorm epsilon 1e-5, scaled
// attention, n_inner 4 * n_embd, no cross-attention), else the import stops rather than compute another model.
#pragma once

#include <sys/stat.h>

#include <climits>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/formats/json_reader.h"
#include "llmc/formats/model_file.h"
#include "llmc/gpt2/gpt2_config.h"

constexpr int64_t kHfJsonFileLimit = 64 << 20;  // config.json and the shard index are kilobytes to megabytes

struct HfGpt2Config {
    GPT2Config model;  // Vp = V rounded up to 128
    bool tie_word_embeddings = true;
};

// The files of one HF GPT-2 model.
struct HfGpt2Source {
    std::string config;   // config.json
    std::string weights;  // model.safetensors, or the shard index model.safetensors.index.json
    bool sharded = false;
};

inline bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// True for what read_hf_gpt2 takes: a directory, *.safetensors, *.safetensors.index.json.
inline bool is_hf_gpt2_path(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return true;
    return ends_with(path, ".safetensors") || ends_with(path, ".safetensors.index.json");
}

inline HfGpt2Source locate_hf_gpt2(const std::string& path) {
    HfGpt2Source s;
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        const std::string single = path + "/model.safetensors", index = path + "/model.safetensors.index.json";
        if (path_exists(single)) s.weights = single;  // transformers looks for the single file first, too
        else if (path_exists(index)) { s.weights = index; s.sharded = true; }
        else if (path_exists(path + "/pytorch_model.bin")) {
            file_error(path, "has pytorch_model.bin but no model.safetensors: re-save it with "
                             "save_pretrained(dir, safe_serialization=True); we read safetensors only");
        } else {
            file_error(path, "no model.safetensors or model.safetensors.index.json in this directory");
        }
    } else if (ends_with(path, ".safetensors.index.json") || ends_with(path, ".safetensors")) {
        s.weights = path;
        s.sharded = ends_with(path, ".json");
        file_size_or_throw(path);  // a missing file is named as itself, before its config
    } else {
        file_error(path, "not a Hugging Face GPT-2 model: give its directory, a .safetensors or a "
                         ".safetensors.index.json file");
    }
    s.config = parent_directory(s.weights) + "/config.json";
    if (!path_exists(s.config)) {
        file_error(s.config, "no such file: the weights need the model's config.json beside them (GPT-2's n_head "
                             "cannot be inferred from the tensor shapes)");
    }
    return s;
}

inline std::string read_small_text_file(const std::string& path) {
    InputFile in(path);
    if (in.size() > kHfJsonFileLimit) file_error(path, "is %lld bytes, more than a JSON file here may be", (long long)in.size());
    std::string text((size_t)in.size(), '\0');
    if (!text.empty()) in.read(&text[0], text.size(), "the file");
    return text;
}

inline HfGpt2Config read_hf_gpt2_config(const std::string& path) {
    const std::string text = read_small_text_file(path);
    std::map<std::string, int64_t> ints;
    std::map<std::string, bool> flags;
    std::string model_type = "gpt2", activation = "gelu_new", key;
    double eps = kLayerNormEps;
    int64_t n_inner = -1;  // null: 4 * n_embd
    try {
        JsonCursor j(text);
        j.skip_byte_order_mark();
        std::map<std::string, int> seen;
        j.for_each_member([&](const std::string& k) {
            key = k;
            if (seen[key]++) file_error(path, "\"%s\" appears twice", key.c_str());
            if (key == "n_layer" || key == "n_head" || key == "n_embd" || key == "n_positions" || key == "n_ctx" ||
                key == "vocab_size") ints[key] = j.parse_int();
            else if (key == "n_inner") n_inner = j.accept_null() ? -1 : j.parse_int();
            else if (key == "model_type") model_type = j.parse_string();
            else if (key == "activation_function") activation = j.parse_string();
            else if (key == "layer_norm_epsilon") eps = j.parse_number();
            else if (key == "scale_attn_weights" || key == "scale_attn_by_inverse_layer_idx" ||
                     key == "tie_word_embeddings" || key == "add_cross_attention") flags[key] = j.parse_bool();
            else j.skip_value();  // dropout, initializer range, token ids, generation: no effect on the weights
            key.clear();
        });
        j.expect_end();
    } catch (const JsonError& e) {
        if (key.empty()) file_error(path, "%s", e.what());
        file_error(path, "\"%s\": %s", key.c_str(), e.what());
    }
    if (model_type != "gpt2") file_error(path, "model_type is \"%s\", not \"gpt2\"", model_type.c_str());
    if (!ints.count("n_positions") && ints.count("n_ctx")) ints["n_positions"] = ints["n_ctx"];  // older configs
    HfGpt2Config c;
    const struct { const char* key; int* field; int64_t limit; } shape[] = {
        {"n_layer", &c.model.num_layers, kLayersLimit}, {"n_head", &c.model.num_heads, kHeadsLimit},
        {"n_embd", &c.model.channels, kChannelsLimit}, {"n_positions", &c.model.max_seq_len, kMaxSeqLenLimit},
        {"vocab_size", &c.model.vocab_size, kVocabLimit}};
    for (const auto& f : shape) {
        if (!ints.count(f.key)) {
            file_error(path, "missing \"%s\" (GPT-2's config.json gives n_layer, n_head, n_embd, n_positions and "
                             "vocab_size)", f.key);
        }
        const int64_t v = ints[f.key];
        if (v < 1 || v > f.limit) file_error(path, "\"%s\" = %lld, must be in [1, %lld]", f.key, (long long)v, (long long)f.limit);
        *f.field = (int)v;
    }
    c.model.padded_vocab_size = padded_vocab(c.model.vocab_size);
    if (c.model.channels % c.model.num_heads != 0) {
        file_error(path, "\"n_embd\" = %d is not divisible by \"n_head\" = %d", c.model.channels, c.model.num_heads);
    }
    // What our kernels compute; anything else would load and silently be another model.
    if (activation != "gelu_new" && activation != "gelu_pytorch_tanh") {
        file_error(path, "activation_function \"%s\": ours is GPT-2's tanh GELU (gelu_new)", activation.c_str());
    }
    if (!(std::fabs(eps - kLayerNormEps) <= 1e-12)) file_error(path, "layer_norm_epsilon %g: ours is 1e-05", eps);
    if (n_inner != -1 && n_inner != 4 * (int64_t)c.model.channels) {
        file_error(path, "n_inner %lld: ours is 4 * n_embd = %d", (long long)n_inner, 4 * c.model.channels);
    }
    const struct { const char* key; bool ours; } fixed[] = {
        {"scale_attn_weights", true}, {"scale_attn_by_inverse_layer_idx", false}, {"add_cross_attention", false}};
    for (const auto& f : fixed) {
        if (flags.count(f.key) && flags[f.key] != f.ours) {
            file_error(path, "%s is %s: ours is %s", f.key, f.ours ? "false" : "true", f.ours ? "true" : "false");
        }
    }
    if (flags.count("tie_word_embeddings")) c.tie_word_embeddings = flags["tie_word_embeddings"];
    validate_gpt2_config(path, c.model, "config.json");
    return c;
}

// config.json for transformers' GPT2LMHeadModel. Dropout 0: our training has none. bos/eos are <|endoftext|>
// (50256) where the vocabulary has it, else null.
inline std::string hf_gpt2_config_json(const GPT2Config& c, ParamDtype dtype) {
    const std::string eot = c.vocab_size > 50256 ? "50256" : "null";
    auto line = [](const char* key, const std::string& value) { return std::string("  \"") + key + "\": " + value; };
    const std::vector<std::string> lines = {
        line("activation_function", "\"gelu_new\""), line("architectures", "[\"GPT2LMHeadModel\"]"),
        line("attn_pdrop", "0.0"), line("bos_token_id", eot), line("embd_pdrop", "0.0"), line("eos_token_id", eot),
        line("initializer_range", "0.02"), line("layer_norm_epsilon", "1e-05"), line("model_type", "\"gpt2\""),
        line("n_ctx", std::to_string(c.max_seq_len)), line("n_embd", std::to_string(c.channels)),
        line("n_head", std::to_string(c.num_heads)), line("n_inner", "null"),
        line("n_layer", std::to_string(c.num_layers)), line("n_positions", std::to_string(c.max_seq_len)),
        line("reorder_and_upcast_attn", "false"), line("resid_pdrop", "0.0"),
        line("scale_attn_by_inverse_layer_idx", "false"), line("scale_attn_weights", "true"),
        line("tie_word_embeddings", "true"),
        line("torch_dtype", dtype == ParamDtype::BF16 ? "\"bfloat16\"" : "\"float32\""), line("use_cache", "true"),
        line("vocab_size", std::to_string(c.vocab_size))};
    std::string s = "{\n";
    for (size_t i = 0; i < lines.size(); i++) s += lines[i] + (i + 1 < lines.size() ? ",\n" : "\n");
    return s + "}\n";
}

// model.safetensors.index.json: {"metadata": {...}, "weight_map": {"<tensor>": "<shard file>", ...}}, as
// (tensor, shard file) pairs. Shard files are plain names in the index's directory.
inline std::vector<std::pair<std::string, std::string>> read_safetensors_index(const std::string& path) {
    const std::string text = read_small_text_file(path);
    std::vector<std::pair<std::string, std::string>> map;
    bool has_map = false;
    try {
        JsonCursor j(text);
        j.skip_byte_order_mark();
        j.for_each_member([&](const std::string& key) {
            if (key != "weight_map") return j.skip_value();
            if (has_map) file_error(path, "\"weight_map\" appears twice");
            has_map = true;
            j.for_each_member([&](std::string& tensor) {
                std::string shard = j.parse_string();
                if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
                    file_error(path, "tensor '%s': shard \"%s\" is not a file name in this directory", tensor.c_str(), shard.c_str());
                }
                map.emplace_back(std::move(tensor), std::move(shard));
            });
        });
        j.expect_end();
    } catch (const JsonError& e) {
        file_error(path, "%s", e.what());
    }
    if (!has_map || map.empty()) file_error(path, "no \"weight_map\" (or an empty one): not a safetensors shard index");
    return map;
}
