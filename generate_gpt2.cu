// generate_gpt2cu: text from a GPT-2 model for your prompts, on the GPU.
//   ./generate_gpt2cu -e MODEL -p "Once upon a time" [-g 256] [-st 1.0] [-sk 0] [-sp 1.0] [-seed 1337]
//   ./generate_gpt2cu -e MODEL -pf prompts.txt      (one prompt per line, all in one batch)
// MODEL: our or llm.c's model file, a Hugging Face GPT-2 directory or .safetensors. Prompts are encoded by our
// GPT-2 BPE (--vocab-dir, default data/cache/gpt2 from `make data`). One prompt streams its text as it is made;
// several print one block each at the end. Then: prefill time, decode ms/token, tokens/s and the decode's bandwidth
// (llmc/inference/decode_traffic.h).
//
// The model's parameters are uploaded as bf16 (fp32 in FP32 builds) into generation's own memory plan
// (llmc/inference/engine.cuh: parameters, KV cache, one layer of prefill scratch, the decode step's; printed to
// stderr at start-up with the device memory in use), and generate() (llmc/inference/generate.cuh) runs: the prefill
// fills the KV cache as each layer makes K and V, then each new token is one decode step (decode attention over the
// cache, the classifier on that position only, then the token picker on the GPU: greedy, temperature, top-k,
// top-p), replayed as one CUDA Graph; the picked token is the next step's input, so the host only launches steps,
// up to 4 ahead, and reads the tokens from mapped memory. A model whose head size decode attention does not handle
// (not 64 or 128) recomputes the batch's whole sequence per token and samples on the host, by the same rule.
// Everything the user gives is checked before the GPU is touched (one line each); each prompt has its own random
// stream seeded by -seed alone, so the same seed gives the same text, and a prompt the same text alone or in a batch
// up to near-ties (the GEMMs' shapes change with the batch, so cuBLASLt may pick other kernels: the math is the
// same, the rounding may not be).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/app/generate/generate_args.h"
#include "llmc/app/generation/host_model.cuh"
#include "llmc/inference/decode_traffic.h"
#include "llmc/core/rand.h"
#include "llmc/core/version.h"
#include "llmc/inference/generate.cuh"
#include "llmc/inference/sampler.h"
#include "llmc/tokenizer/bpe_encoder.h"

namespace {

// Our BPE vocabulary as the printer's token table (bytes per id, <|endoftext|>), as `tokenizer export` writes it.
TokenizerFile token_table(const BPETokenizer& bpe) {
    TokenizerFile t;
    t.tokens = bpe.tokens();
    t.eot_token = bpe.eot_token();
    return t;
}

// Each prompt's ids written whole, then renamed: a reader never sees half a file.
void write_ids(const std::string& path, const std::vector<std::vector<int>>& tokens) {
    const std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "w");
    if (!f) throw std::runtime_error("--ids " + path + ": cannot write");
    for (const std::vector<int>& t : tokens) {
        for (size_t i = 0; i < t.size(); i++) fprintf(f, i > 0 ? " %d" : "%d", t[i]);
        fprintf(f, "\n");
    }
    if (fclose(f) != 0 || rename(tmp.c_str(), path.c_str()) != 0)
        throw std::runtime_error("--ids " + path + ": cannot write");
}

int run(const GenerateArgs& a, const char* program) {
    // ---- everything the user gave, on the host
    const BPETokenizer bpe = BPETokenizer::load(a.vocab_dir);
    BPEEncoder encoder(bpe);
    const std::vector<std::string> texts = read_prompt_texts(a);
    const std::string ids_unwritable = a.ids_file.empty() ? "" : file_unwritable_reason(a.ids_file);
    if (!ids_unwritable.empty()) throw std::runtime_error("flag --ids " + a.ids_file + ": " + ids_unwritable);
    const PickParams pick{a.temperature, a.top_k, a.top_p};
    HostModel model = load_host_model(a.model, pick);
    const GPT2Config& c = model.file.config;
    std::vector<std::vector<int>> ids(texts.size());
    for (size_t i = 0; i < texts.size(); i++) encoder.encode_ordinary(texts[i], ids[i]);
    auto where = [&](size_t i) {
        return a.prompt_file.empty() ? std::string("-p") : a.prompt_file + " line " + std::to_string(i + 1);
    };
    const int new_tokens = check_prompts(ids, c.vocab_size, c.max_seq_len, a.new_tokens, where);
    if (new_tokens < a.new_tokens) {
        fprintf(stderr, "note: -g %d cut to %d: the longest prompt leaves room for %d tokens in the model's context "
                "of %d\n", a.new_tokens, new_tokens, new_tokens, c.max_seq_len);
    }
    const int eot = bpe.eot_token();
    const int B = (int)texts.size();
    size_t longest = 0;
    for (const auto& p : ids) longest = std::max(longest, p.size());
    // every coin up front, sequence b's g-th at [g * B + b]: each prompt's own stream, seeded by -seed alone
    std::vector<float> coins;
    if (!pick.greedy()) {
        std::vector<Rng> rngs(B, Rng(a.seed));
        coins.resize((size_t)new_tokens * B);
        for (int g = 0; g < new_tokens; g++)
            for (int b = 0; b < B; b++) coins[(size_t)g * B + b] = rngs[b].uniform();
    }

    // ---- the GPU
    require_cuda_device(program);
    InferenceEngine engine;
    inference_engine_upload(&engine, c, std::move(model.file.params), generation_shape(c, B, (int)longest, new_tokens),
                            model.options);

    const TokenizerFile table = token_table(bpe);
    std::unique_ptr<TokenPrinter> stream_out = B == 1 ? std::make_unique<TokenPrinter>(table) : nullptr;
    if (stream_out) printf("%s", printable_bytes(texts[0]).c_str());
    GenerateRequest request;
    request.prompts = ids;
    request.max_new = new_tokens;
    request.coins = coins;
    request.stop_token = request.pad_token = eot;
    if (stream_out) {
        request.on_token = [&](int, int next) {
            printf("%s", next == eot ? "" : stream_out->next(next).c_str());
            fflush(stdout);
        };
    }
    const GenerateResult r = generate(&engine, request);
    if (stream_out) printf("%s\n", stream_out->finish().c_str());
    for (int b = 0; B > 1 && b < B; b++) {
        TokenPrinter printer(table);
        std::string out = printable_bytes(texts[b]);
        for (int t : r.tokens[b])
            if (t != eot) out += printer.next(t);
        out += printer.finish();
        printf("=== prompt %d (%s)\n%s\n", b + 1, where(b).c_str(), out.c_str());
    }
    if (!a.ids_file.empty()) write_ids(a.ids_file, r.tokens);
    // the decode steps' bytes over their time: with a KV cache, every weight and the cached K, V per step
    std::string bandwidth;
    if (engine.shape.cached) {
        const DecodeTraffic t = decode_traffic(c, sizeof(floatX));
        const double bytes =
            r.decode_steps * t.weight_bytes + decode_positions(ids, r.decode_steps) * t.kv_bytes_per_position;
        bandwidth = " | decode reads " + bandwidth_text(bytes, r.decode_ms, device_peak_memory_bandwidth());
    }
    fprintf(stderr, "prefill %.2f ms (batch %d, to the first token) | decode %.3f ms/step over %d steps | %.0f "
                    "tokens/s (batch %d, %lld tokens, %s)%s\n",
            r.prefill_ms, B, r.decode_steps ? r.decode_ms / r.decode_steps : 0.0, r.decode_steps,
            r.generated / ((r.prefill_ms + r.decode_ms) / 1e3), B, r.generated,
            engine.shape.cached ? "KV cache, CUDA Graph" : "full recompute per token", bandwidth.c_str());
    inference_engine_free(&engine);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    GenerateArgs args;
    std::string error;
    const ParseStatus st = parse_generate_args(argc, argv, &args, &error);
    const int done =
        finish_parse(st, error, argv[0], generate_usage(argv[0]), version_line("generate_gpt2cu", PRECISION_NAME));
    if (done >= 0) return done;
    try {
        return run(args, argv[0]);
    } catch (const std::exception& e) {
        fflush(stdout);
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
