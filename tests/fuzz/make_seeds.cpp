// Writes the seed corpus of the fuzz targets: small valid inputs made with the project's own writers
// (and a few hand-made ones), one directory per target: corpus/<target without fuzz_>/. Nothing comes from
// ../shared/data: the tokenizer seeds use the synthetic vocabulary of fuzz_inputs.h.
//   bin/make_seeds corpus        (make -C tests/fuzz seeds)
#include <sys/stat.h>
#ifdef LLMC_HAVE_ZLIB
#include <zlib.h>
#endif
#ifdef LLMC_HAVE_ZSTD
#include <zstd.h>
#endif

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "llmc/formats/data_shard.h"
#include "llmc/formats/eval_file.h"
#include "llmc/formats/hf_gpt2.h"
#include "llmc/formats/model_file.h"
#include "llmc/formats/run_state.h"
#include "llmc/formats/tokenizer_file.h"
#include "reference/bf16_error.h"
#include "reference/debug_state.h"
#include "reference/reference_trajectory.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_inputs.h"

static std::string root;

static std::string dir(const std::string& target) {
    const std::string d = root + "/" + target;
    ensure_directory(d);
    return d;
}

static void put(const std::string& target, const std::string& name, std::string_view bytes) {
    const std::string path = dir(target) + "/" + name;
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || fclose(f) != 0) {
        file_error(path, "cannot write");
    }
}

// The bytes a writer made at a scratch path.
template <typename Write>
static std::string written(Write&& write) {
    const std::string path = fuzz::scratch_dir() + "/seed";
    write(path);
    return fuzz::read_whole_scratch_file(path);
}

// maxT 4, V 5, Vp 8, L 1, NH 2, C 4: 300 parameters.
static GPT2Config tiny_config() { return GPT2Config{4, 5, 8, 1, 2, 4}; }

static std::vector<float> some_floats(size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = std::sin(0.37f * (float)i) * (float)(i % 7);
    if (n > 4) {
        v[1] = std::numeric_limits<float>::quiet_NaN();
        v[2] = std::numeric_limits<float>::infinity();
        v[3] = -0.0f;
        v[4] = std::numeric_limits<float>::denorm_min();
    }
    return v;
}

static std::string shard_bytes(int n, int vocab) {
    std::vector<uint16_t> tokens((size_t)n);
    for (int i = 0; i < n; i++) tokens[(size_t)i] = (uint16_t)((i * 7 + 3) % vocab);
    return written([&](const std::string& p) { write_shard(p, tokens.data(), n); });
}

static void model_seeds() {
    GPT2Config c = tiny_config();
    const std::vector<float> params = some_floats(gpt2_num_parameters(c));
    put("model_file", "tiny_fp32.bin", written([&](const std::string& p) { write_model_file(p, c, params.data(), ParamDtype::FP32); }));
    put("model_file", "tiny_bf16.bin", written([&](const std::string& p) { write_model_file(p, c, params.data(), ParamDtype::BF16); }));
    const GPT2Config one{1, 1, 1, 1, 1, 1};
    const std::vector<float> p1 = some_floats(gpt2_num_parameters(one));
    put("model_file", "ones_bf16.bin", written([&](const std::string& p) { write_model_file(p, one, p1.data(), ParamDtype::BF16); }));
}

// fuzz_hf_gpt2's input: config.json, a NUL, model.safetensors (our tiny models exported by export_hf_gpt2).
static void hf_gpt2_seeds() {
    const GPT2Config c = tiny_config();
    const std::vector<float> params = some_floats(gpt2_num_parameters(c));
    for (ParamDtype dtype : {ParamDtype::FP32, ParamDtype::BF16}) {
        const std::string model = fuzz::scratch_dir() + "/seed.bin", dir = fuzz::scratch_dir() + "/seed_hf";
        write_model_file(model, c, params.data(), dtype);
        export_hf_gpt2(model, dir);
        put("hf_gpt2", dtype == ParamDtype::FP32 ? "tiny_f32" : "tiny_bf16",
            fuzz::read_whole_scratch_file(dir + "/config.json") + std::string(1, '\0') +
                fuzz::read_whole_scratch_file(dir + "/model.safetensors"));
    }
}

static void shard_seeds() {
    put("data_shard", "100_tokens.bin", shard_bytes(100, 50257));
    put("data_shard", "1_token.bin", shard_bytes(1, 50257));
}

// Two HellaSwag-like examples (4 endings) and one with a single ending.
static void eval_file_seeds() {
    EvalExample a{3, {464, 582, 318}, {{318, 1262}, {318, 2712, 13}, {11}, {50256, 7, 8}}};
    EvalExample b{0, {7}, {{8, 9, 10}, {9}, {10}, {11, 12}}};
    put("eval_file", "two_examples.bin", written([&](const std::string& p) { write_eval_file(p, {a, b}); }));
    EvalExample c{0, {65534}, {{0}}};
    put("eval_file", "one_ending.bin", written([&](const std::string& p) { write_eval_file(p, {c}); }));
}

static void loader_seeds() {
    fuzz::LoaderInput in;
    in.B = 2;
    in.T = 3;
    in.steps = 12;
    in.vocab_size = 11;
    in.shards = {shard_bytes(20, 11), shard_bytes(15, 11)};
    put("dataloader", "two_shards.bin", fuzz::pack_loader_input(in));
    in.shuffle = true;
    in.seed = 1234;
    in.num_processes = 2;
    in.process_rank = 1;
    in.B = 1;
    in.shards.push_back(shard_bytes(9, 11));
    put("dataloader", "shuffled_rank1.bin", fuzz::pack_loader_input(in));
    // A saved state taken from a loader on these shards after 4 batches.
    const std::string pattern = fuzz::scratch_dir() + "/seed_shard_*.bin";
    for (size_t i = 0; i < in.shards.size(); i++) {
        fuzz::write_scratch_file("seed_shard_" + std::to_string(i) + ".bin", in.shards[i]);
    }
    DataLoader d(pattern, in.B, in.T, in.process_rank, in.num_processes, in.shuffle, in.seed, in.vocab_size);
    for (int i = 0; i < 4; i++) d.next_batch();
    in.restore = true;
    in.state = d.get_state();
    in.steps = 5;
    put("dataloader", "restore_state.bin", fuzz::pack_loader_input(in));
    // two micro-steps per window (gradient accumulation)
    in.restore = false;
    in.micro_steps = 2;
    in.steps = 9;
    put("dataloader", "two_micro_steps.bin", fuzz::pack_loader_input(in));
}

static void tokenizer_seeds() {
    TokenizerFile t;
    t.tokens = {"a", "b", " the", "\n", "\xC3", "\xA9", "caf\xC3\xA9", "\x1B[31m", "\xE2\x82", "\xAC", "\xFF", "<|endoftext|>"};
    t.eot_token = (int)t.tokens.size() - 1;
    put("tokenizer_file", "small_v2.bin", written([&](const std::string& p) { write_tokenizer_file(p, t); }));
}

static void run_state_seeds() {
    RunState s{/*step*/ 7, /*B*/ 2, /*T*/ 8, /*processes*/ 1, /*grad_accum*/ 2, /*run_id*/ 0x1234567890abcdefull,
               /*model_hash*/ 0xfedcba0987654321ull, RngState{{1, 2, 3, 4}},
               DataLoaderState{1, 0, 3, 1, 42, 1, 2, 8, 0, 1, 1, 10, 2}, DataLoaderState{0, 0, 0, 0, 42, 0, 2, 8, 0, 1, 1, 4, 1},
               std::vector<uint8_t>(64, 0x5a)};
    const std::string v3 = written([&](const std::string& p) { write_run_state(p, s); });
    put("run_state", "v3.bin", v3);
    // version 2, as earlier builds wrote it: loader records without micro_steps
    const size_t at = 1024 + sizeof(RngState), rec = sizeof(DataLoaderState), old = (size_t)kDataLoaderStateV2Bytes;
    std::string v2 = v3.substr(0, at) + v3.substr(at, old) + v3.substr(at + rec, old) + v3.substr(at + 2 * rec);
    const int32_t two = 2, old_record = (int32_t)old;
    memcpy(&v2[4], &two, 4);
    memcpy(&v2[8 * 4], &old_record, 4);
    put("run_state", "v2.bin", v2);
    std::string v1 = v2;  // version 1: no run id, no model hash
    const int32_t one = 1;
    memcpy(&v1[4], &one, 4);
    memset(&v1[11 * 4], 0, 4 * 4);
    put("run_state", "v1.bin", v1);
    s.fp8_state = std::vector<uint8_t>(40, 0x3c);  // an FP8 section (train_gpt2cu -fp8h): header field 15
    put("run_state", "v3_fp8.bin", written([&](const std::string& p) { write_run_state(p, s); }));
}

static void debug_state_seeds() {
    const GPT2Config c = tiny_config();
    DebugState s;
    s.B = 1;
    s.T = 2;
    s.inputs = {1, 4};
    s.targets = {4, 0};
    s.logits = some_floats(2 * (size_t)c.vocab_size);
    s.loss = 1.5f;
    s.grads = some_floats(gpt2_num_parameters(c));
    fuzz::ByteWriter w;
    fuzz::pack_config(w, c);
    w.bytes(written([&](const std::string& p) { write_debug_state(p, c, s); }));
    put("debug_state", "tiny.bin", w.out);
}

static void trajectory_seeds() {
    const ReferenceTrajectory t{/*lr*/ 1e-4f, /*beta1*/ 0.9f, /*beta2*/ 0.95f, /*eps*/ 1e-8f, /*weight_decay*/ 0.1f,
                                {6.9123454f, 5.5f, 4.25f}};
    put("trajectory", "three_steps.txt", written([&](const std::string& p) { write_reference_trajectory(p, t); }));
}

static void bf16_error_seeds() {
    PyTorchBf16Error e;
    e.logits_rel_l2 = {1.17e-2, 3.5e-3};
    e.loss_abs = {2e-4, 0};
    for (size_t i = 0; i < e.grad_rel_l2.size(); i++) e.grad_rel_l2[i] = {0.01 * (double)(i + 1), 5e-3};
    e.trajectory_abs = {{2.4e-2, 1e-3}, {1e-38, 3.4e38}};
    put("bf16_error", "two_steps.txt", fuzz::format_bf16_error(e));
}

static void main_log_seeds() {
    fuzz::ByteWriter w;
    w.put<uint32_t>(3);  // resume from step 3
    w.bytes("s:0 trl:10.987654\ns:0 tel:10.950000\ns:1 trl:9.500000\ns:2 trl:8.250000\ns:3 trl:7.000000\n"
            "s:3 tel:7.100000\ns:4 trl:6.5");  // the last line cut short by a crash
    put("main_log", "resume_at_3.log", w.out);
}

static void json_seeds() {
    put("json", "any_value.json", std::string(1, '\0') +
        "{\"a\": [1, -2.5e+3, true, false, null, {\"b\": \"\\u00e9\\ud83d\\ude00\\n\"}], \"c\": \"caf\xC3\xA9\"}");
    put("json", "encoder_like.json", std::string(1, '\1') + "\xEF\xBB\xBF{\"!\": 0, \"\\\"\": 1, \"\xC4\xA0the\": 256, \"<|endoftext|>\": 257}");
    put("json", "strings.json", std::string(1, '\2') + "\"plain\" \"esc\\\\ \\/ \\b\\f\\r\\t\" \"\\uD834\\uDD1E\" \"\xF0\x9F\x98\x80\"");
    put("json", "integers.json", std::string(1, '\3') + "0, -0, 9223372036854775807, -9223372036854775807, 12");
}

static void bpe_seeds() {
    const fuzz::SyntheticVocab v = fuzz::demo_vocab();
    put("encoder_json", "demo_encoder.json", v.encoder_json);
    put("vocab_bpe", "demo_vocab.bpe", v.vocab_bpe);
    std::string crlf = "\xEF\xBB\xBF";  // the same with a byte order mark and CRLF line ends
    for (char c : v.vocab_bpe) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    put("vocab_bpe", "crlf_bom.bpe", crlf);

    // fuzz_bpe_encode: the demo merges as ids, with texts that reach every path of the encoder.
    const char* merges[][2] = {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {"in", "g"}, {" ", " "},
                               {"  ", "  "}, {"    ", "    "}, {"\xC3", "\xA9"}, {"'", "s"}, {"1", "2"}};
    fuzz::VocabBuilder b;
    const uint8_t num_merges = (uint8_t)(sizeof(merges) / sizeof(merges[0]));
    fuzz::ByteWriter ids;
    for (const auto& m : merges) {
        ids.put<uint16_t>((uint16_t)b.index_of(m[0]));
        ids.put<uint16_t>((uint16_t)b.index_of(m[1]));
        b.merge(m[0], m[1]);
    }
    const std::string texts[] = {
        "the thing's 12 rings in the  the\n\n",
        "caf\xC3\xA9 \xC3\xA9t\xC3\xA9 \xFF\xFE\xC3 <|endoftext|>the<|endoftext|>",
        std::string(200, ' ') + "thing" + std::string(150, 'e') + "\t\t\r\n",
    };
    for (int k = 0; k < 3; k++) {
        fuzz::ByteWriter w;
        w.put<uint8_t>(num_merges);
        w.put<uint8_t>((uint8_t)(k == 1 ? num_merges - 1 : num_merges));  // <|endoftext|> last, or before the last merge
        w.put<uint8_t>((uint8_t)(k == 1 ? 1 + (4 << 1) : (7 << 1)));  // allow_special on the second; chunk 5 or 8 bytes
        w.bytes(ids.out);
        w.bytes(texts[k]);
        put("bpe_encode", "demo_" + std::to_string(k) + ".bin", w.out);
    }
}

static void prepro_seeds() {
    auto input = [](uint8_t flags, uint32_t base, const std::string& bytes) {
        fuzz::ByteWriter w;
        w.put<uint8_t>(flags);
        w.put<uint32_t>(base);
        w.bytes(bytes);
        return w.out;
    };
    put("prepro_input", "lines.jsonl", input(1, 0,
        "\xEF\xBB\xBF{\"text\": \"first doc\\nline\", \"id\": 1}\n\n{\"meta\": {\"a\": [1, 2]}, \"text\": \"caf\\u00e9\"}\r\n"
        "  {\"text\": \"\"}\n"));
    put("prepro_input", "paragraphs.txt", input(2, 1000, "one paragraph\nstill\n\nsecond\n\n\nthird"));
    put("prepro_input", "whole.txt", input(0, 0, "a whole file \xFF as one document\n"));
}

// fuzz_jsonl_stream: a small JSONL file as it is, as gzip (two members) and as zstd, and a .txt.
static void jsonl_stream_seeds() {
    const std::string jsonl = "{\"text\": \"first\", \"id\": 1}\n\n{\"text\": \"caf\\u00e9 second\\n\"}\r\n{\"text\": \"\"}\n";
    auto input = [](uint8_t name, uint16_t batch, const std::string& bytes) {
        fuzz::ByteWriter w;
        w.put<uint8_t>(name);
        w.put<uint16_t>(batch);
        w.bytes(bytes);
        return w.out;
    };
    put("jsonl_stream", "plain.bin", input(0, 9, jsonl));
    put("jsonl_stream", "text.bin", input(3, 100, "a text\n\nfile\n"));
#ifdef LLMC_HAVE_ZLIB
    auto gzip = [](const std::string& s) {
        z_stream z{};
        deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
        std::string out(deflateBound(&z, (uLong)s.size()) + 64, '\0');
        z.next_in = (Bytef*)s.data();
        z.avail_in = (uInt)s.size();
        z.next_out = (Bytef*)&out[0];
        z.avail_out = (uInt)out.size();
        deflate(&z, Z_FINISH);
        out.resize(out.size() - z.avail_out);
        deflateEnd(&z);
        return out;
    };
    put("jsonl_stream", "gzip_two_members.bin", input(1, 5, gzip(jsonl.substr(0, 20)) + gzip(jsonl.substr(20))));
#endif
#ifdef LLMC_HAVE_ZSTD
    std::string z(ZSTD_compressBound(jsonl.size()), '\0');
    z.resize(ZSTD_compress(&z[0], z.size(), jsonl.data(), jsonl.size(), 3));
    put("jsonl_stream", "zstd.bin", input(2, 3, z));
#endif
}

static void train_args_seeds() {
    auto argv = [](std::vector<std::string> args) {
        std::string s;
        for (size_t i = 0; i < args.size(); i++) s += (i ? std::string(1, '\0') : "") + args[i];
        return s;
    };
    put("train_args", "tinyshakespeare.bin", argv({"-e", "d12", "-i", "data/train_*.bin", "-j", "data/val.bin", "-o",
                                                   "out", "-b", "16", "-t", "1024", "-x", "300", "-v", "25", "-s", "100",
                                                   "-n", "100", "-nk", "2", "-y", "1"}));
    put("train_args", "accumulation.bin", argv({"-b", "4", "-t", "64", "-d", "1024", "-pn", "2", "-pr", "1", "-pi", "fs",
                                                "-pf", "/tmp/r", "-k", "wsd", "-l", "6e-4", "-q", "0.1", "-u", "10",
                                                "-c", "0.1", "-gc", "0", "-ab", "flash", "-seed", "7", "-sh", "0"}));
    put("train_args", "help.bin", argv({"-b", "1", "--help"}));
    put("generate_args", "prompt.bin", argv({"-e", "d12", "-p", "Hello, world"}));
    put("generate_args", "file.bin", argv({"-e", "hf_dir", "-pf", "prompts.txt", "-g", "64", "-st", "0.7", "-sk", "40",
                                           "-sp", "0.9", "-seed", "7", "--vocab-dir", "v"}));
    put("generate_args", "lines.txt", "Once upon a time\r\nThe meaning of life is\nHello");
}

// POST /v1/completions bodies (fuzz_serve_request; its second half reads the same bytes as stops and tokens).
static void serve_request_seeds() {
    put("serve_request", "basic.json", R"({"prompt": "Hello", "max_tokens": 8})");
    put("serve_request", "every_field.json",
        R"({"model": "m", "prompt": [1, 2, 299], "max_tokens": 61, "temperature": 0, "top_p": 0.5, "top_k": 40, )"
        R"("seed": 18446744073709551615, "stop": ["a", "bc"], "stream": true, "stream_options": {"include_usage": )"
        R"(true}, "logprobs": 5, "n": 1, "best_of": 1, "echo": false, "presence_penalty": 0, "frequency_penalty": )"
        R"(0.0, "logit_bias": {}, "suffix": null, "user": "u", "ignore_eos": true})");
    put("serve_request", "bad.json", R"({"prompt": ["a", "b"], "n": 2, "stop": ["", "x", "y", "z", "w"], "temperature": 9})");
    put("serve_request", "unicode.json", R"({"prompt": "caf\u00e9 \ud83d\ude00", "stop": "\n\n", "seed": -3})");
    put("serve_request", "text.bin", std::string_view("\x02\x03" "abc\x02\xc3\xa9\x03xab\x05" "cdefg\x02\xe2\x82\x01\xac", 23));
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    root = argv[1];
    try {
        ensure_directory(root);
        model_seeds();
        hf_gpt2_seeds();
        shard_seeds();
        eval_file_seeds();
        loader_seeds();
        tokenizer_seeds();
        run_state_seeds();
        debug_state_seeds();
        trajectory_seeds();
        bf16_error_seeds();
        main_log_seeds();
        json_seeds();
        bpe_seeds();
        prepro_seeds();
        jsonl_stream_seeds();
        train_args_seeds();
        serve_request_seeds();
    } catch (const std::exception& e) {
        fprintf(stderr, "make_seeds: %s\n", e.what());
        return 1;
    }
    return 0;
}
