// generate_gpt2cu: text from a GPT-2 model for your prompts, on the GPU.
//   ./generate_gpt2cu -e MODEL -p "Once upon a time" [-n 256] [-st 1.0] [-sk 0] [-sp 1.0] [-seed 1337]
//   ./generate_gpt2cu -e MODEL -pf prompts.txt      (one prompt per line, all in one batch)
// MODEL: our or llm.c's model file, a Hugging Face GPT-2 directory or .safetensors. Prompts are encoded by our
// GPT-2 BPE (--vocab-dir, default data/cache/gpt2 from `make data`). One prompt streams its text as it is made;
// several print one block each at the end. Then: prefill time, decode ms/token and tokens/s.
//
// The prompts are prefilled with the trainer's forward, their K and V kept in a KV cache (bf16 or fp32 as the build)
// (llmc/inference/gpt2_decode.cuh), then each new token is one decode step (decode attention over the cache, the classifier
// on that position only, then the token picker: greedy, temperature, top-k, top-p on the GPU, llmc/kernels/sampling.cuh),
// its ~100 kernels replayed as one CUDA Graph; the picked token is the next step's input, so the host only launches
// steps, up to 4 ahead, and reads the tokens from mapped memory. A model whose head size decode attention does not
// handle (not 64 or 128) recomputes the batch's whole sequence per token and samples on the host (llmc/inference/sampler.h,
// the same rule).
// Everything the user gives is checked before the GPU is touched (one line each); each prompt has its own random
// stream seeded by -seed alone, so the same seed gives the same text, and a prompt the same text alone or in a batch
// up to near-ties (the GEMMs' shapes change with the batch, so cuBLASLt may pick other kernels: the math is the
// same, the rounding may not be).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/tokenizer/bpe.h"
#include "llmc/kernels/attention.cuh"
#include "llmc/inference/generate_args.h"
#include "llmc/model/gpt2.cuh"
#include "llmc/inference/gpt2_decode.cuh"
#include "llmc/core/options.h"
#include "llmc/core/rand.h"
#include "llmc/inference/sampler.h"

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
    const EngineOptions& options = engine_options();  // a bad LLMC_* value stops here, before the GPU
    const DecodeAttentionKernel attention = options.decode_attention == "split" ? DecodeAttentionKernel::Split
                                            : options.decode_attention == "head" ? DecodeAttentionKernel::PerHead
                                                                                 : DecodeAttentionKernel::Auto;
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
    std::string note;
    const AttentionBackend backend = resolve_attention_backend("auto", c.channels, c.num_heads, &note);
    if (!note.empty()) fprintf(stderr, "note: %s\n", note.c_str());
    const bool cached = kv_cache_supported(c);  // decode attention's head sizes (64 or 128: every GPT-2 size)
    // recompute: one length for every forward (a multiple of 64 where the context allows: the GEMM plans are built
    // once); positions past a sequence's end hold <|endoftext|> and cannot change earlier logits (causal attention).
    // cached: the forward is the prefill only.
    const int T = cached ? (int)longest : std::min(c.max_seq_len, (int)((longest + new_tokens + 63) / 64 * 64));
    gpt2_allocate(&model, B, T, /*recompute=*/2, backend);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    model.stream = stream;  // a created stream: the decode step is captured as a CUDA Graph

    std::vector<Sequence> seqs(B);
    for (int b = 0; b < B; b++) {
        seqs[b].text = texts[b];
        seqs[b].tokens = ids[b];
        seqs[b].prompt_len = ids[b].size();
        seqs[b].rng = Rng(a.seed);  // the seed alone: a prompt's text does not depend on its batch
    }
    const TokenizerFile table = token_table(bpe);
    std::unique_ptr<TokenPrinter> stream_out = B == 1 ? std::make_unique<TokenPrinter>(table) : nullptr;
    if (stream_out) printf("%s", printable_bytes(texts[0]).c_str());
    long long generated = 0;
    // appends sequence b's next token; marks the sequence done at <|endoftext|> or the token limit
    auto emit = [&](int b, int next) {
        Sequence& s = seqs[b];
        s.tokens.push_back(next);
        generated++;
        if (stream_out) {
            printf("%s", next == eot ? "" : stream_out->next(next).c_str());
            fflush(stdout);
        }
        if (next == eot || (int)(s.tokens.size() - s.prompt_len) >= new_tokens) s.done = true;
    };
    std::vector<float> logits(c.padded_vocab_size);
    auto sample_at = [&](int b, int t) {
        gpt2_logits_to_host(&model, b, t, logits.data());
        return sample_token(logits.data(), c.vocab_size, a.temperature, a.top_k, a.top_p, seqs[b].rng.uniform());
    };

    std::vector<int> batch((size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) batch[(size_t)b * T + t] = t < (int)seqs[b].tokens.size() ? seqs[b].tokens[t] : eot;
    gpt2_forward(&model, batch.data(), nullptr, B, T);  // untimed: cuBLASLt plans and lazy kernel loading
    cudaCheck(cudaStreamSynchronize(stream));
    double prefill_ms = 0, decode_ms = 0;
    int decode_steps = 0;
    if (cached) {
        KVCache cache = kv_cache_allocate(&model, B, (int)longest + new_tokens);
        if (options.decode_cublas) cache.products = DecodeProducts::Cublas;  // for comparison
        cache.attention = attention;
        // every coin up front, sequence b's g-th at [g * B + b]: the same stream per sequence as the host sampler
        std::vector<float> coins;
        const PickParams pick{a.temperature, a.top_k, a.top_p};
        if (!pick.greedy()) {
            coins.resize((size_t)new_tokens * B);
            for (int g = 0; g < new_tokens; g++)
                for (int b = 0; b < B; b++) coins[(size_t)g * B + b] = seqs[b].rng.uniform();
        }
        // steps run ahead of the host by up to kAhead: the host reads step s's tokens while s+1.. are computed
        constexpr int kAhead = 4;
        cudaEvent_t done_ev[kAhead];
        for (cudaEvent_t& e : done_ev) cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        DecodeLoop loop = decode_loop_create(cache, pick, coins, new_tokens, /*graph=*/true);
        std::vector<int> lengths(B);
        for (int b = 0; b < B; b++) lengths[b] = (int)seqs[b].prompt_len;
        // untimed, from the warm-up forward: a step plainly (cuBLASLt plans) and one captured as the graph; the
        // prefill below resets the cache's lengths, and each step rewrites its token row before the host reads it
        kv_cache_fill(&model, &cache, T, lengths);
        decode_loop_begin(&model, &cache, &loop);
        for (int w = 0; w < std::min(2, new_tokens - 1); w++) decode_loop_step(&model, &cache, &loop);
        cudaCheck(cudaStreamSynchronize(stream));
        auto t0 = Clock::now();
        gpt2_forward(&model, batch.data(), nullptr, B, T);  // the prefill
        kv_cache_fill(&model, &cache, T, lengths);
        decode_loop_begin(&model, &cache, &loop);
        cudaCheck(cudaEventRecord(done_ev[0], stream));
        int launched = 1, consumed = 0;  // token rows 0..launched-1 are on their way; rows < consumed are emitted
        bool all_done = false;
        auto t_first = t0;
        while (consumed < launched && !all_done) {
            while (launched < new_tokens && launched - consumed < kAhead) {
                decode_loop_step(&model, &cache, &loop);
                cudaCheck(cudaEventRecord(done_ev[launched % kAhead], stream));
                launched++;
            }
            cudaCheck(cudaEventSynchronize(done_ev[consumed % kAhead]));
            all_done = true;
            for (int b = 0; b < B; b++) {
                if (!seqs[b].done) emit(b, loop.tokens[(size_t)consumed * B + b]);
                all_done = all_done && seqs[b].done;
            }
            if (consumed == 0) prefill_ms = ms_since(t0), t_first = Clock::now();
            consumed++;
        }
        decode_ms = consumed > 1 ? ms_since(t_first) : 0.0;
        decode_steps = consumed - 1;
        cudaCheck(cudaStreamSynchronize(stream));  // steps launched past the end
        for (cudaEvent_t& e : done_ev) cudaCheck(cudaEventDestroy(e));
        decode_loop_free(&loop);
        kv_cache_free(&cache);
    }
    for (int step = 0; !cached && step < new_tokens; step++) {
        bool any = false;
        for (int b = 0; b < B; b++) {
            const Sequence& s = seqs[b];
            any = any || !s.done;
            for (int t = 0; t < T; t++) batch[(size_t)b * T + t] = t < (int)s.tokens.size() ? s.tokens[t] : eot;
        }
        if (!any) break;
        const auto t0 = Clock::now();
        gpt2_forward(&model, batch.data(), nullptr, B, T);
        for (int b = 0; b < B; b++)
            if (!seqs[b].done) emit(b, sample_at(b, (int)seqs[b].tokens.size() - 1));
        const double ms = ms_since(t0);
        if (step == 0) prefill_ms = ms;
        else decode_ms += ms, decode_steps++;
    }
    if (stream_out) printf("%s\n", stream_out->finish().c_str());
    for (int b = 0; B > 1 && b < B; b++) {
        TokenPrinter printer(table);
        std::string out = printable_bytes(seqs[b].text);
        for (size_t i = seqs[b].prompt_len; i < seqs[b].tokens.size(); i++) {
            if (seqs[b].tokens[i] != eot) out += printer.next(seqs[b].tokens[i]);
        }
        out += printer.finish();
        printf("=== prompt %d (%s)\n%s\n", b + 1, where(b).c_str(), out.c_str());
    }
    if (!a.ids_file.empty()) {  // written whole, then renamed: a reader never sees half a file
        const std::string tmp = a.ids_file + ".tmp";
        FILE* f = fopen(tmp.c_str(), "w");
        if (!f) throw std::runtime_error("--ids " + a.ids_file + ": cannot write");
        for (const Sequence& s : seqs) {
            for (size_t i = s.prompt_len; i < s.tokens.size(); i++) fprintf(f, i > s.prompt_len ? " %d" : "%d", s.tokens[i]);
            fprintf(f, "\n");
        }
        if (fclose(f) != 0 || rename(tmp.c_str(), a.ids_file.c_str()) != 0)
            throw std::runtime_error("--ids " + a.ids_file + ": cannot write");
    }
    fprintf(stderr, "prefill %.2f ms (batch %d, to the first token) | decode %.3f ms/step over %d steps | %.0f tokens/s "
                    "(batch %d, %lld tokens, %s)\n",
            prefill_ms, B, decode_steps ? decode_ms / decode_steps : 0.0, decode_steps,
            generated / ((prefill_ms + decode_ms) / 1e3), B, generated,
            cached ? "KV cache, CUDA Graph" : "full recompute per token");
    model.stream = 0;
    cudaCheck(cudaStreamDestroy(stream));
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
