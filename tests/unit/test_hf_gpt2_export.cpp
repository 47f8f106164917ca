// Export to Hugging Face GPT-2 (llmc/formats/hf_gpt2.h export_hf_gpt2): ours -> HF -> ours is byte-identical for fp32
// and bf16 files at several shapes; the exported file is in HF's layout and naming (checked against the raw
// bytes, not through our importer), config.json carries transformers' keys; and the pieces under it:
// fp16 decoding, the tiled transpose.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/formats/hf_gpt2.h"
#include "tests/lib/file_test_helpers.h"
#include "tests/lib/hf_gpt2_test_helpers.h"

namespace {

std::vector<float> random_params(const GPT2Config& c, uint64_t seed) {
    std::vector<float> p(gpt2_num_parameters(c));
    Rng rng(seed);
    rng.fill_normal(p.data(), p.size(), 0.0f, 1.0f);
    return p;  // padding rows non-zero on purpose: the file writer zeroes them
}

}  // namespace

TEST(HfGpt2Export, RoundTripIsByteIdentical) {
    const GPT2Config shapes[] = {hf_test_config(), hf_test_config(3, 4, 16, 128, 12), hf_test_config(1, 1, 4, 300, 5),
                                 hf_test_config(2, 3, 24, 1000, 33)};
    int i = 0;
    for (const GPT2Config& c : shapes) {
        for (ParamDtype dtype : {ParamDtype::FP32, ParamDtype::BF16}) {
            SCOPED_TRACE("shape " + std::to_string(i) + " " + param_dtype_name(dtype));
            const std::string tag = std::to_string(i++), ours = scratch_path(tag + ".bin");
            const std::vector<float> p = random_params(c, 7 + i);
            write_model_file(ours, c, p.data(), dtype);
            const std::string dir = scratch_path(tag + "_hf");
            export_hf_gpt2(ours, dir);
            const ModelFile m = read_hf_gpt2(dir);
            EXPECT_EQ(m.dtype, dtype);
            const std::string back = scratch_path(tag + "_back.bin");
            write_model_file(back, m.config, m.params.data(), dtype);
            EXPECT_TRUE(read_bytes(ours) == read_bytes(back));
            const SafetensorsFile f = read_safetensors_header(dir + "/model.safetensors");
            EXPECT_EQ(f.tensors.size(), 4u + 12u * c.num_layers);
            for (const SafetensorsTensor& t : f.tensors) EXPECT_EQ(t.dtype, dtype == ParamDtype::BF16 ? "BF16" : "F32");
        }
    }
}

// The exported bytes where transformers looks for them: names, shapes, Conv1D transposes, no padding rows.
TEST(HfGpt2Export, LayoutIsHuggingFaces) {
    const GPT2Config c = hf_test_config(2, 2, 8, 50, 8);
    const std::vector<float> p = random_params(c, 3);
    const std::string ours = scratch_path("m.bin"), dir = scratch_path("hf");
    write_model_file(ours, c, p.data(), ParamDtype::FP32);
    export_hf_gpt2(ours, dir);
    const SafetensorsFile f = read_safetensors_header(dir + "/model.safetensors");
    ASSERT_EQ(f.metadata.size(), 1u);
    EXPECT_EQ(f.metadata[0], std::make_pair(std::string("format"), std::string("pt")));  // transformers checks it
    EXPECT_EQ(f.find("lm_head.weight"), nullptr);  // tied: transformers ties it on load
    const std::vector<unsigned char> bytes = read_bytes(dir + "/model.safetensors");
    auto value = [&](const char* name, size_t i) {
        const SafetensorsTensor* t = f.find(name);
        EXPECT_NE(t, nullptr) << name;
        float v;
        memcpy(&v, bytes.data() + f.data_offset(*t) + 4 * i, 4);
        return v;
    };
    auto shape = [&](const char* name) { return f.find(name) ? f.find(name)->shape : std::vector<uint64_t>{}; };
    const auto off = gpt2_parameter_offsets(c);
    const size_t C = 8;
    EXPECT_EQ(shape("transformer.wte.weight"), (std::vector<uint64_t>{50, 8}));
    EXPECT_EQ(shape("transformer.wpe.weight"), (std::vector<uint64_t>{8, 8}));
    EXPECT_EQ(shape("transformer.h.1.attn.c_attn.weight"), (std::vector<uint64_t>{8, 24}));
    EXPECT_EQ(shape("transformer.h.1.attn.c_attn.bias"), (std::vector<uint64_t>{24}));
    EXPECT_EQ(shape("transformer.h.0.mlp.c_fc.weight"), (std::vector<uint64_t>{8, 32}));
    EXPECT_EQ(shape("transformer.h.0.mlp.c_proj.weight"), (std::vector<uint64_t>{32, 8}));
    EXPECT_EQ(shape("transformer.ln_f.bias"), (std::vector<uint64_t>{8}));
    EXPECT_EQ(value("transformer.wte.weight", 49 * C + 7), p[off[WTE] + 49 * C + 7]);  // last real row
    // Conv1D: HF c_attn[i][o] (C, 3C) = our qkvw[l][o][i] (3C, C)
    for (size_t o : {0, 5, 23})
        for (size_t in : {0, 3, 7}) EXPECT_EQ(value("transformer.h.1.attn.c_attn.weight", in * 24 + o), p[off[QKVW] + 24 * C + o * C + in]);
    // mlp.c_proj: HF (4C, C), ours fcprojw (C, 4C)
    EXPECT_EQ(value("transformer.h.1.mlp.c_proj.weight", 31 * C + 2), p[off[FCPROJW] + 32 * C + 2 * 32 + 31]);
    EXPECT_EQ(value("transformer.h.1.ln_2.bias", 6), p[off[LN2B] + C + 6]);
    EXPECT_EQ(value("transformer.ln_f.weight", 1), p[off[LNFW] + 1]);

    const std::vector<unsigned char> config_bytes = read_bytes(dir + "/config.json");
    const std::string config(config_bytes.begin(), config_bytes.end());
    for (const char* key : {"\"architectures\": [\"GPT2LMHeadModel\"]", "\"model_type\": \"gpt2\"", "\"n_layer\": 2",
                            "\"n_head\": 2", "\"n_embd\": 8", "\"n_positions\": 8", "\"n_ctx\": 8", "\"vocab_size\": 50",
                            "\"activation_function\": \"gelu_new\"", "\"layer_norm_epsilon\": 1e-05",
                            "\"torch_dtype\": \"float32\"", "\"bos_token_id\": null", "\"tie_word_embeddings\": true"}) {
        EXPECT_NE(config.find(key), std::string::npos) << key << " not in\n" << config;
    }
    const HfGpt2Config back = read_hf_gpt2_config(dir + "/config.json");
    EXPECT_EQ(back.model.padded_vocab_size, 128);
    EXPECT_TRUE(back.tie_word_embeddings);
    GPT2Config d12;
    ASSERT_TRUE(gpt2_preset("d12", &d12));
    const std::string big = hf_gpt2_config_json(d12, ParamDtype::BF16);
    EXPECT_NE(big.find("\"bos_token_id\": 50256"), std::string::npos);
    EXPECT_NE(big.find("\"eos_token_id\": 50256"), std::string::npos);
    EXPECT_NE(big.find("\"torch_dtype\": \"bfloat16\""), std::string::npos);
}

TEST(HfGpt2Export, Errors) {
    const std::string bad = scratch_path("bad.bin");
    write_bytes(bad, std::vector<unsigned char>(1024, 0));
    EXPECT_FILE_ERROR([&] { export_hf_gpt2(bad, scratch_path("out")); }, bad, "not a GPT-2 model file");
    const GPT2Config c = hf_test_config();
    const std::vector<float> p = random_params(c, 1);
    const std::string ours = scratch_path("m.bin");
    write_model_file(ours, c, p.data(), ParamDtype::FP32);
    const std::string nested = scratch_path("no_such_dir/out");
    EXPECT_FILE_ERROR([&] { export_hf_gpt2(ours, nested); }, nested, "cannot create directory");
}

// Every half: exact against sign * mantissa * 2^exponent computed in double.
TEST(HalfFloat, EveryValueExact) {
    for (uint32_t h = 0; h < 65536; h++) {
        const int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
        const float got = fp16_bits_to_float((uint16_t)h);
        if (exponent == 31) {
            EXPECT_TRUE(mantissa ? std::isnan(got) : std::isinf(got)) << h;
            EXPECT_EQ(std::signbit(got), sign == 1) << h;
            continue;
        }
        const double want = (sign ? -1.0 : 1.0) *
                            (exponent ? std::ldexp(1024.0 + mantissa, exponent - 25) : std::ldexp((double)mantissa, -24));
        ASSERT_EQ((double)got, want) << "half bits " << h;
        EXPECT_EQ(std::signbit(got), sign == 1) << h;
    }
}

TEST(TransposeMatrix, MatchesTheDefinitionAtEdgeShapes) {
    Rng rng(5);
    const size_t shapes[][2] = {{1, 1}, {1, 70}, {70, 1}, {3, 70}, {33, 65}, {64, 32}, {96, 24}};
    for (const auto& s : shapes) {
        const size_t rows = s[0], cols = s[1];
        std::vector<uint32_t> a(rows * cols), b(rows * cols);
        std::vector<uint16_t> a16(rows * cols), b16(rows * cols);
        for (size_t i = 0; i < a.size(); i++) { a[i] = rng.next_u32(); a16[i] = (uint16_t)a[i]; }
        transpose_matrix(a.data(), b.data(), rows, cols);
        transpose_matrix(a16.data(), b16.data(), rows, cols);
        for (size_t r = 0; r < rows; r++)
            for (size_t k = 0; k < cols; k++) {
                ASSERT_EQ(b[k * rows + r], a[r * cols + k]) << rows << "x" << cols;
                ASSERT_EQ(b16[k * rows + r], a16[r * cols + k]);
            }
    }
}

// The two-thread pipeline under the streaming conversions (llmc/core/utils.h run_pipeline): pieces arrive in order, and
// an error on either side ends both threads and comes back to the caller (no deadlock, no lost error).
TEST(RunPipeline, InOrderAndErrorsFromEitherSide) {
    std::vector<int> got;
    run_pipeline<std::vector<int>>(
        100, [](size_t i, std::vector<int>& b) { b.assign(i % 7 + 1, (int)i); },
        [&](size_t i, std::vector<int>& b) {
            EXPECT_EQ(b.size(), i % 7 + 1);
            got.push_back(b[0]);
        });
    ASSERT_EQ(got.size(), 100u);
    for (int i = 0; i < 100; i++) EXPECT_EQ(got[i], i);
    run_pipeline<int>(0, [](size_t, int&) { FAIL(); }, [](size_t, int&) { FAIL(); });

    got.clear();
    EXPECT_FILE_ERROR([&] {
        run_pipeline<int>(
            50, [](size_t i, int& b) { if (i == 5) file_error("in", "producer fails at 5"); b = (int)i; },
            [&](size_t, int& b) { got.push_back(b); });
    }, "in", "producer fails at 5");
    ASSERT_LE(got.size(), 5u);  // pieces made before the error may or may not be written: the whole write fails
    for (size_t i = 0; i < got.size(); i++) EXPECT_EQ(got[i], (int)i);
    int produced = 0;
    EXPECT_FILE_ERROR([&] {
        run_pipeline<int>(
            1000, [&](size_t i, int& b) { b = (int)i; produced++; },
            [](size_t i, int&) { if (i == 3) file_error("out", "consumer fails at 3"); });
    }, "out", "consumer fails at 3");
    EXPECT_LE(produced, 6);  // the producer is at most two pieces ahead when it sees the stop
}
