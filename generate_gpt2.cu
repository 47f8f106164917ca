// generate_gpt2cu: text from a GPT-2 model for your prompts, on the GPU.
//   ./generate_gpt2cu -e MODEL -p "Once upon a time" [-n 256] [-st 1.0] [-sk 0] [-sp 1.0] [-seed 1337]
//   ./generate_gpt2cu -e MODEL -pf prompts.txt      (one prompt per line, all in one batch)
// MODEL: our or llm.c's model file, a Hugging Face GPT-2 directory or .safetensors. Prompts are encoded by our
// GPT-2 BPE (--vocab-dir, default data/cache/gpt2 from `make data`). One prompt streams its text as it is made;
// several print one block each at the end. Then: prefill time, decode ms/token and tokens/s.
//
// FIRST VERSION (issue 16 in progress): every new token recomputes the batch's whole sequence with the trainer's
// forward (as its periodic samples do); the KV cache, the decode attention kernel, CUDA Graphs and sampling on
// the GPU come next. What it already guarantees: everything the user gives is checked before the GPU is touched
// (one line each); each prompt has its own random stream seeded by -seed alone, so the same seed gives the same
// text, and a prompt the same text alone or in a batch up to near-ties (the GEMMs' shapes change with the batch, so
// cuBLASLt may pick other kernels: the math is the same, the rounding may not be).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer/bpe.h"
#include "llmc/attention.cuh"
#include "llmc/generate_args.h"
#include "llmc/gpt2.cuh"
#include "llmc/rand.h"
#include "llmc/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Our BPE vocabulary as the printer's token table (bytes per id, <|endoftext|>), as `tokenizer export` writes it.
TokenizerFile token_table(const BPETokenizer& bpe) {
    TokenizerFile t;
    t.tokens = bpe.tokens();
    t.eot_token = bpe.eot_token();
    return t;
}

struct Sequence {
    std::string text;          // the prompt as given
    std::vector<int> tokens;   // prompt, then what is generated
    size_t prompt_len = 0;
    bool done = false;
    Rng rng{0};
};

int generate(const GenerateArgs& a, const char* program) {
    // ---- everything the user gave, on the host
    const BPETokenizer bpe = BPETokenizer::load(a.vocab_dir);
    BPEEncoder encoder(bpe);
    const std::vector<std::string> texts = read_prompt_texts(a);
    GPT2 model;
    gpt2_build_from_checkpoint(&model, a.model);  // host only: reads and checks the file
    const GPT2Config& c = model.config;
    std::vector<std::vector<int>> ids(texts.size());
    for (size_t i = 0; i < texts.size(); i++) encoder.encode_ordinary(texts[i], ids[i]);
    auto where = [&](size_t i) { return a.prompt_file.empty() ? std::string("-p") : a.prompt_file + " line " + std::to_string(i + 1); };
    const int new_tokens = check_prompts(ids, c.vocab_size, c.max_seq_len, a.new_tokens, where);
    if (new_tokens < a.new_tokens) {
        fprintf(stderr, "note: -n %d cut to %d: the longest prompt leaves room for %d tokens in the model's context of %d\n",
                a.new_tokens, new_tokens, new_tokens, c.max_seq_len);
    }
    const int eot = bpe.eot_token();

    // ---- the GPU
    require_cuda_device(program);
    const int B = (int)texts.size();
    size_t longest = 0;
    for (const auto& p : ids) longest = std::max(longest, p.size());
    // one length for every forward (a multiple of 64 where the context allows: the GEMM plans are built once);
    // positions past a sequence's end hold <|endoftext|> and cannot change earlier logits (causal attention)
    const int T = std::min(c.max_seq_len, (int)((longest + new_tokens + 63) / 64 * 64));
    std::string note;
    const AttentionBackend backend = resolve_attention_backend("auto", c.channels, c.num_heads, &note);
    if (!note.empty()) fprintf(stderr, "note: %s\n", note.c_str());
    model.use_master_weights = false;  // inference: no fp32 master copy (gradients and AdamW state are still
                                       // allocated by the trainer's memory plan: the KV-cache version drops them)
    gpt2_allocate(&model, B, T, /*recompute=*/2, backend);

    std::vector<Sequence> seqs(B);
    for (int b = 0; b < B; b++) {
        seqs[b].text = texts[b];
        seqs[b].tokens = ids[b];
        seqs[b].prompt_len = ids[b].size();
        seqs[b].rng = Rng(a.seed);  // the seed alone: a prompt's text does not depend on its batch
    }
    const TokenizerFile table = token_table(bpe);
    std::unique_ptr<TokenPrinter> stream = B == 1 ? std::make_unique<TokenPrinter>(table) : nullptr;
    if (stream) printf("%s", printable_bytes(texts[0]).c_str());

    std::vector<int> batch((size_t)B * T);
    std::vector<float> logits(c.padded_vocab_size);
    for (int b = 0; b < B; b++)  // one untimed forward: cuBLASLt plans and lazy kernel loading out of the timings
        for (int t = 0; t < T; t++) batch[(size_t)b * T + t] = t < (int)seqs[b].tokens.size() ? seqs[b].tokens[t] : eot;
    gpt2_forward(&model, batch.data(), nullptr, B, T);
    cudaCheck(cudaDeviceSynchronize());
    double prefill_ms = 0, decode_ms = 0;
    int decode_steps = 0;
    long long generated = 0;
    for (int step = 0; step < new_tokens; step++) {
        bool any = false;
        for (int b = 0; b < B; b++) {
            const Sequence& s = seqs[b];
            any = any || !s.done;
            for (int t = 0; t < T; t++) batch[(size_t)b * T + t] = t < (int)s.tokens.size() ? s.tokens[t] : eot;
        }
        if (!any) break;
        const auto t0 = Clock::now();
        gpt2_forward(&model, batch.data(), nullptr, B, T);
        for (int b = 0; b < B; b++) {
            Sequence& s = seqs[b];
            if (s.done) continue;
            gpt2_logits_to_host(&model, b, (int)s.tokens.size() - 1, logits.data());
            const int next = sample_token(logits.data(), c.vocab_size, a.temperature, a.top_k, a.top_p, s.rng.uniform());
            s.tokens.push_back(next);
            generated++;
            if (stream) {
                printf("%s", next == eot ? "" : stream->next(next).c_str());
                fflush(stdout);
            }
            if (next == eot || (int)(s.tokens.size() - s.prompt_len) >= new_tokens) s.done = true;
        }
        const double ms = ms_since(t0);
        if (step == 0) prefill_ms = ms;
        else decode_ms += ms, decode_steps++;
    }
    if (stream) printf("%s\n", stream->finish().c_str());
    for (int b = 0; B > 1 && b < B; b++) {
        TokenPrinter printer(table);
        std::string out = printable_bytes(seqs[b].text);
        for (size_t i = seqs[b].prompt_len; i < seqs[b].tokens.size(); i++) {
            if (seqs[b].tokens[i] != eot) out += printer.next(seqs[b].tokens[i]);
        }
        out += printer.finish();
        printf("=== prompt %d (%s)\n%s\n", b + 1, where(b).c_str(), out.c_str());
    }
    fprintf(stderr, "prefill %.2f ms (batch %d, first token) | decode %.3f ms/step over %d steps | %.0f tokens/s "
                    "(batch %d, %lld tokens, full recompute per token)\n",
            prefill_ms, B, decode_steps ? decode_ms / decode_steps : 0.0, decode_steps,
            generated / ((prefill_ms + decode_ms) / 1e3), B, generated);
    gpt2_free(&model);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    GenerateArgs args;
    std::string error;
    const ParseStatus st = parse_generate_args(argc, argv, &args, &error);
    if (st == ParseStatus::Help) {
        printf("%s", generate_usage(argv[0]).c_str());
        return 0;
    }
    if (st == ParseStatus::Error) {
        fprintf(stderr, "error: %s (%s --help lists the flags)\n", error.c_str(), argv[0]);
        return 1;
    }
    try {
        return generate(args, argv[0]);
    } catch (const std::exception& e) {
        fflush(stdout);
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
