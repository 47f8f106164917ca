// Hugging Face GPT-2 import (llmc/formats/hf_gpt2.h, llmc/formats/hf_gpt2_config.h) from directories made by hand in HF's
// layout (tests/lib/hf_gpt2_test_helpers.h): exact parameters from Conv1D / F16 / BF16 / buffers / tied lm_head,
// the sharded form, and one clear line naming the file and the tensor for every way the files can be wrong.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "llmc/formats/hf_gpt2.h"
#include "tests/lib/file_test_helpers.h"
#include "tests/lib/hf_gpt2_test_helpers.h"

namespace {

std::string mixed_dtype(int t, int l) {
    static const char* d[] = {"F32", "F16", "BF16"};
    return d[(t + l) % 3];
}
std::string all_bf16(int, int) { return "BF16"; }

void expect_params(const ModelFile& m, const GPT2Config& c) {
    EXPECT_EQ(m.config.num_layers, c.num_layers);
    EXPECT_EQ(m.config.num_heads, c.num_heads);
    EXPECT_EQ(m.config.channels, c.channels);
    EXPECT_EQ(m.config.vocab_size, c.vocab_size);
    EXPECT_EQ(m.config.padded_vocab_size, c.padded_vocab_size);
    EXPECT_EQ(m.config.max_seq_len, c.max_seq_len);
    const std::vector<float> want = hand_expected_params(c);
    ASSERT_EQ(m.params.size(), want.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < want.size(); i++) mismatches += memcmp(&m.params[i], &want[i], 4) != 0;
    EXPECT_EQ(mismatches, 0u);
}

std::vector<HandTensor> without(std::vector<HandTensor> v, const std::string& name) {
    for (size_t i = 0; i < v.size(); i++)
        if (v[i].name == name) { v.erase(v.begin() + (long)i); return v; }
    ADD_FAILURE() << "no tensor " << name;
    return v;
}
HandTensor* named(std::vector<HandTensor>& v, const std::string& name) {
    for (HandTensor& t : v) if (t.name == name) return &t;
    ADD_FAILURE() << "no tensor " << name;
    return &v[0];
}

}  // namespace

// The hub's layout (no "transformer." prefix, buffers, lm_head saved too), every tensor F32, F16 or BF16.
TEST(HfGpt2Import, HandMadeDirectoryGivesExactParameters) {
    const GPT2Config c = hf_test_config();
    const std::string dir = write_hand_dir("hub", hand_config_json(c), hand_tensors(c, mixed_dtype));
    const ModelFile m = read_hf_gpt2(dir);
    expect_params(m, c);
    EXPECT_EQ(m.dtype, ParamDtype::FP32);
    // the file itself (config.json beside it), and the one loader every program uses
    expect_params(read_hf_gpt2(dir + "/model.safetensors"), c);
    expect_params(read_model_any(dir), c);
    expect_params(read_model_any(dir + "/model.safetensors"), c);
}

// save_pretrained's layout: "transformer." names, no buffers, no lm_head; all BF16 stays marked BF16.
TEST(HfGpt2Import, SavePretrainedLayoutInBf16) {
    const GPT2Config c = hf_test_config(3, 4, 16, 128, 12);  // V = Vp: no padding rows
    const std::string dir = write_hand_dir("bf16", hand_config_json(c), hand_tensors(c, all_bf16, "transformer.", false, false));
    const ModelFile m = read_hf_gpt2(dir);
    expect_params(m, c);
    EXPECT_EQ(m.dtype, ParamDtype::BF16);
}

TEST(HfGpt2Import, ShardedDirectory) {
    const GPT2Config c = hf_test_config();
    const std::vector<HandTensor> all = hand_tensors(c, mixed_dtype, "transformer.");
    const std::string dir = scratch_path("sharded");
    ensure_directory(dir);
    write_text_file(dir + "/config.json", hand_config_json(c));
    const std::vector<HandTensor> first(all.begin(), all.begin() + 20), second(all.begin() + 20, all.end());
    write_hand_safetensors(dir + "/model-00001-of-00002.safetensors", first);
    write_hand_safetensors(dir + "/model-00002-of-00002.safetensors", second);
    auto index = [&](const std::string& second_name) {
        std::string s = "{\"metadata\": {\"total_size\": 12345}, \"weight_map\": {";
        for (size_t i = 0; i < all.size(); i++) {
            s += (i ? ", \"" : "\"") + all[i].name + "\": \"" +
                 (i < 20 ? std::string("model-00001-of-00002.safetensors") : second_name) + "\"";
        }
        return s + "}}";
    };
    write_text_file(dir + "/model.safetensors.index.json", index("model-00002-of-00002.safetensors"));
    expect_params(read_hf_gpt2(dir), c);
    expect_params(read_model_any(dir + "/model.safetensors.index.json"), c);

    const std::string idx = dir + "/model.safetensors.index.json";
    write_text_file(idx, index("model-00003-of-00002.safetensors"));
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, idx, "tensor '" + all[20].name + "' is in shard " + dir +
                      "/model-00003-of-00002.safetensors, which does not exist");
    write_text_file(idx, index("../model-00002-of-00002.safetensors"));
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, idx, "is not a file name in this directory");
    // the index places a tensor in the first shard, which lacks it (and the second has it unlisted)
    write_text_file(idx, index("model-00001-of-00002.safetensors"));
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, dir + "/model-00001-of-00002.safetensors",
                      "has no tensor '" + all[20].name + "', which " + idx + " places in it");
    std::string partial = index("model-00002-of-00002.safetensors");
    partial.erase(partial.find(", \"" + all.back().name), all.back().name.size() + 40);
    write_text_file(idx, partial);
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, dir + "/model-00002-of-00002.safetensors",
                      "tensor '" + all.back().name + "' is not placed in this shard by " + idx);
    write_text_file(idx, "{\"metadata\": {}}");
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, idx, "no \"weight_map\"");
    const std::string twice = "\"" + all[0].name + "\": \"model-00001-of-00002.safetensors\"";
    write_text_file(idx, "{\"weight_map\": {" + twice + ", " + twice + "}}");
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, idx, "tensor '" + all[0].name + "' is listed twice in the weight_map");
    write_text_file(idx, "{\"weight_map\": {" + twice + "}");
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, idx, "invalid JSON");
}

// Every way the tensors can disagree with each other or with config.json.
TEST(HfGpt2Import, TensorErrorsNameTheFileAndTheTensor) {
    const GPT2Config c = hf_test_config();
    const std::string config = hand_config_json(c);
    const std::vector<HandTensor> good = hand_tensors(c, mixed_dtype);
    struct Case { std::string name; std::vector<HandTensor> tensors; std::string problem; };
    std::vector<Case> cases;
    cases.push_back({"missing", without(good, "h.1.mlp.c_fc.bias"), "missing tensor 'h.1.mlp.c_fc.bias'"});
    {
        auto v = good;
        named(v, "ln_f.bias")->dtype = "I32";
        cases.push_back({"dtype", v, "tensor 'ln_f.bias': dtype I32, expected F32, F16 or BF16"});
    }
    {
        auto v = good;  // c_attn in our orientation (3C, C) instead of Conv1D's (C, 3C)
        named(v, "h.0.attn.c_attn.weight")->shape = {24, 8};
        cases.push_back({"orientation", v, "tensor 'h.0.attn.c_attn.weight' has shape [24, 8], but"});
    }
    {
        auto v = good;  // wte padded to Vp rows, as our files are
        HandTensor* w = named(v, "wte.weight");
        w->shape = {128, 8};
        w->bytes.resize(128 * 8 * (w->dtype == "F32" ? 4 : 2));
        cases.push_back({"padded_wte", v, "tensor 'wte.weight' has shape [128, 8], but"});
    }
    {
        auto v = good;
        v.push_back({"score.weight", "F32", {2, 8}, std::vector<unsigned char>(64)});
        cases.push_back({"unexpected", v, "unexpected tensor 'score.weight'"});
    }
    {
        auto v = good;
        v.push_back(*named(v, "h.0.ln_1.weight"));
        v.back().name = "transformer.h.0.ln_1.weight";
        cases.push_back({"twice", v, "tensor 'h.0.ln_1.weight' appears twice"});
    }
    {
        auto v = good;
        HandTensor* lm = named(v, "lm_head.weight");
        lm->bytes[lm->bytes.size() - 1] ^= 0x01;
        cases.push_back({"untied", v, "tensor 'lm_head.weight' differs from wte.weight"});
    }
    {
        auto v = good;
        HandTensor* lm = named(v, "lm_head.weight");
        lm->shape = {25, 16};
        cases.push_back({"lm_head_shape", v, "tensor 'lm_head.weight' has shape [25, 16]"});
    }
    for (const Case& k : cases) {
        SCOPED_TRACE(k.name);
        const std::string dir = write_hand_dir(k.name, config, k.tensors);
        EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, dir + "/model.safetensors", k.problem);
    }
    // config.json disagreeing with the tensors (the message names both files)
    struct ConfigCase { std::map<std::string, std::string> set; std::string file, problem; };
    const std::string tensors_file = "model.safetensors";
    const ConfigCase config_cases[] = {
        {{{"n_embd", "16"}}, tensors_file, "tensor 'wte.weight' has shape [50, 8], but "},
        {{{"vocab_size", "51"}}, tensors_file, "tensor 'wte.weight' has shape [50, 8], but "},
        {{{"n_positions", "9"}}, tensors_file, "tensor 'wpe.weight' has shape [8, 8], but "},
        {{{"n_layer", "3"}}, tensors_file, "missing tensor 'h.2.ln_1.weight'"},
        {{{"n_layer", "1"}}, tensors_file, "unexpected tensor 'h.1."},
        {{{"tie_word_embeddings", "false"}}, "", ""},  // lm_head.weight is there and equal: fine
    };
    for (const ConfigCase& k : config_cases) {
        const std::string dir = write_hand_dir("config_vs_tensors", hand_config_json(c, k.set), good);
        if (k.problem.empty()) { expect_params(read_hf_gpt2(dir), c); continue; }
        EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, dir + "/" + k.file, k.problem);
        if (k.problem.find("but") != std::string::npos) {
            EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, dir + "/" + k.file, dir + "/config.json implies");
        }
    }
    const std::string untied = write_hand_dir("untied_no_lm_head", hand_config_json(c, {{"tie_word_embeddings", "false"}}),
                                              without(good, "lm_head.weight"));
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(untied); }, untied + "/config.json",
                      "tie_word_embeddings is false but the weights have no lm_head.weight");
}

TEST(HfGpt2Import, ConfigErrors) {
    const GPT2Config c = hf_test_config();
    const std::vector<HandTensor> good = hand_tensors(c, mixed_dtype);
    struct Case { std::map<std::string, std::string> set; std::string problem; };
    const Case cases[] = {
        {{{"n_head", ""}}, "missing \"n_head\""},
        {{{"n_positions", ""}, {"n_ctx", ""}}, "missing \"n_positions\""},
        {{{"n_head", "\"2\""}}, "\"n_head\": invalid JSON at byte"},
        {{{"n_layer", "0"}}, "\"n_layer\" = 0, must be in [1, 1024]"},
        {{{"n_head", "3"}}, "\"n_embd\" = 8 is not divisible by \"n_head\" = 3"},
        {{{"model_type", "\"llama\""}}, "model_type is \"llama\", not \"gpt2\""},
        {{{"activation_function", "\"relu\""}}, "activation_function \"relu\": ours is GPT-2's tanh GELU"},
        {{{"layer_norm_epsilon", "1e-6"}}, "layer_norm_epsilon 1e-06: ours is 1e-05"},
        {{{"n_inner", "40"}}, "n_inner 40: ours is 4 * n_embd = 32"},
        {{{"scale_attn_by_inverse_layer_idx", "true"}}, "scale_attn_by_inverse_layer_idx is true: ours is false"},
        {{{"scale_attn_weights", "false"}}, "scale_attn_weights is false: ours is true"},
        {{{"add_cross_attention", "true"}}, "add_cross_attention is true: ours is false"},
        {{{"tie_word_embeddings", "1"}}, "\"tie_word_embeddings\": invalid JSON"},
    };
    for (const Case& k : cases) {
        const std::string dir = write_hand_dir("config", hand_config_json(c, k.set), good);
        EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, dir + "/config.json", k.problem);
    }
    // accepted: n_ctx alone (older configs), n_inner null or 4C, gelu_pytorch_tanh (the same function)
    const Case fine[] = {{{{"n_positions", ""}}, ""}, {{{"n_inner", "null"}}, ""}, {{{"n_inner", "32"}}, ""},
                         {{{"activation_function", "\"gelu_pytorch_tanh\""}}, ""}};
    for (const Case& k : fine) expect_params(read_hf_gpt2(write_hand_dir("fine", hand_config_json(c, k.set), good)), c);
    const std::string dir = write_hand_dir("raw", "{\"n_layer\": 2, \"n_layer\": 2}", good);
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, dir + "/config.json", "\"n_layer\" appears twice");
    write_text_file(dir + "/config.json", "{\"n_layer\": 2,}");
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(dir); }, dir + "/config.json", "invalid JSON at byte 14");
}

TEST(HfGpt2Import, WhereTheFilesAre) {
    const GPT2Config c = hf_test_config();
    const std::string lone = scratch_path("lone");
    ensure_directory(lone);
    write_hand_safetensors(lone + "/gpt2.safetensors", hand_tensors(c, mixed_dtype));
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(lone + "/gpt2.safetensors"); }, lone + "/config.json",
                      "the weights need the model's config.json beside them (GPT-2's n_head cannot be inferred");
    EXPECT_FILE_ERROR([&] { read_model_any(lone + "/gpt2.safetensors"); }, lone + "/config.json", "n_head cannot be inferred");
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(lone + "/missing.safetensors"); }, lone + "/missing.safetensors", "cannot open");
    const std::string empty = scratch_path("empty");
    ensure_directory(empty);
    EXPECT_FILE_ERROR([&] { read_model_any(empty); }, empty, "no model.safetensors or model.safetensors.index.json");
    write_text_file(empty + "/pytorch_model.bin", "x");
    EXPECT_FILE_ERROR([&] { read_model_any(empty); }, empty, "safe_serialization=True");
    const std::string bin = scratch_path("model.bin");
    write_text_file(bin, std::string(2000, 'x'));
    EXPECT_FILE_ERROR([&] { read_hf_gpt2(bin); }, bin, "not a Hugging Face GPT-2 model");
    EXPECT_FILE_ERROR([&] { read_model_any(bin); }, bin, "not a GPT-2 model file");  // our reader's message
}
