// tests/serving/serve_mock: serve_gpt2cu's server on the CPU — the same flags and the same code (llmc/serving/: requests,
// scheduler, HTTP, drain, signals) around the fake engine (tests/serving/serve_fake_engine.h) instead of the GPU — so that
// tests/serving/check_serve.py and scripts/bench/bench_serve.py run here against something real (tests/serving/test_serve_scripts.sh).
//   tests/serving/serve_mock -e NAME --vocab-dir DIR [serve_gpt2cu's flags] [--fake-step-us N] [--fake-prefill-us N]
//                    [--fake-eot-every N] [--fake-chunk N]
//   tests/serving/serve_mock generate [generate_gpt2cu's flags] [--fake-eot-every N]     (-e is only a name)
// The second form stands in for generate_gpt2cu: each prompt alone on the fake engine, its ids written as --ids
// writes them (a line per prompt, <|endoftext|> included where it came), so check_serve.py's comparison with
// generate runs end to end. The fake engine's tokens are a hash of the sequence (and the coin when sampling), over
// the GPT-2 vocabulary of --vocab-dir; --fake-step-us and --fake-prefill-us give it a GPU's rhythm.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/app/generate/generate_args.h"
#include "llmc/app/serve/serve_main.h"
#include "llmc/core/rand.h"
#include "llmc/tokenizer/bpe_encoder.h"
#include "tests/serving/serve_fake_engine.h"

namespace {

struct FakeFlags {
    int step_us = 0, prefill_us = 0, eot_every = 200, chunk = 0;
};

// Takes the --fake-* flags out of argv; the rest is the program's own.
std::vector<const char*> take_fake_flags(int argc, char** argv, FakeFlags* f) {
    std::vector<const char*> rest = {argv[0]};
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        int* target = a == "--fake-step-us" ? &f->step_us : a == "--fake-prefill-us" ? &f->prefill_us
                      : a == "--fake-eot-every" ? &f->eot_every : a == "--fake-chunk" ? &f->chunk : nullptr;
        if (!target) {
            rest.push_back(argv[i]);
            continue;
        }
        int64_t v = 0;
        if (i + 1 >= argc || !flag_parse::parse_int64(argv[i + 1], 0, 100000000, &v))
            throw std::runtime_error("flag " + a + ": expected an integer >= 0");
        *target = (int)v;
        i++;
    }
    return rest;
}

FakeEngineOptions engine_options(const FakeFlags& f, const BPETokenizer& bpe, int slots, int context,
                                 int prefill_rows = 1, int steps_in_flight = 1) {
    FakeEngineOptions o;
    o.slots = slots, o.context = context, o.vocab = bpe.vocab_size(), o.chunk = f.chunk;
    o.prefill_rows = f.chunk > 0 ? 1 : prefill_rows;  // whole prompts together, as the GPU engine takes them
    o.eot = bpe.eot_token(), o.eot_every = f.eot_every;
    o.step_us = f.step_us, o.prefill_us_per_token = f.prefill_us;
    o.in_flight = steps_in_flight;
    return o;
}

int generate(const std::vector<const char*>& argv, const FakeFlags& f) {
    GenerateArgs a;
    std::string error;
    const ParseStatus st = parse_generate_args((int)argv.size(), argv.data(), &a, &error);
    if (st == ParseStatus::Help) return printf("%s", generate_usage("serve_mock generate").c_str()), 0;
    if (st == ParseStatus::Error) throw std::runtime_error(error);
    const BPETokenizer bpe = BPETokenizer::load(a.vocab_dir);
    BPEEncoder encoder(bpe);
    const int context = 1024;
    FakeEngine engine(engine_options(f, bpe, 1, context));
    const std::vector<std::string> texts = read_prompt_texts(a);
    std::vector<std::vector<int>> ids(texts.size());
    for (size_t i = 0; i < texts.size(); i++) encoder.encode_ordinary(texts[i], ids[i]);
    const int n = check_prompts(ids, bpe.vocab_size(), context, a.new_tokens, [](size_t i) { return "prompt " + std::to_string(i + 1); });
    TokenPick pick;
    pick.params = PickParams{a.temperature, a.top_k, a.top_p};
    FILE* out = a.ids_file.empty() ? stdout : fopen(a.ids_file.c_str(), "w");
    if (!out) throw std::runtime_error("--ids " + a.ids_file + ": cannot write");
    for (const std::vector<int>& p : ids) {
        const std::vector<int> toks = engine.alone(p, n, pick, a.seed, bpe.eot_token());
        for (size_t i = 0; i < toks.size(); i++) fprintf(out, i ? " %d" : "%d", toks[i]);
        fprintf(out, "\n");
    }
    if (out != stdout) fclose(out);
    return 0;
}

int serve(const std::vector<const char*>& argv, const FakeFlags& f, const ServeSignals& signals) {
    ServeArgs a;
    std::string error;
    const ParseStatus st = parse_serve_args((int)argv.size(), argv.data(), &a, &error);
    if (st == ParseStatus::Help) return printf("%s", serve_usage(argv[0]).c_str()), 0;
    if (st == ParseStatus::Error) throw std::runtime_error(error + " (" + argv[0] + " --help lists the flags)");
    if (st == ParseStatus::Version) return printf("serve_mock (the fake engine)\n"), 0;
    const BPETokenizer bpe = BPETokenizer::load(a.vocab_dir);
    ChatTemplate chat = serve_chat_template(a);
    const int context = a.max_context > 0 ? a.max_context : 1024;
    FakeEngine engine(engine_options(f, bpe, a.max_batch, context, a.prefill_rows, a.steps_in_flight));
    ServeSetup setup;
    setup.limits = serve_limits(a, context, bpe.vocab_size());
    LockedEncoder encoder(bpe);
    setup.encode = [&](const std::string& text) { return encoder.encode_ordinary(text); };
    setup.token_bytes = &bpe.tokens();
    setup.eot = bpe.eot_token();
    setup.chat_template = std::move(chat);
    return run_server(&engine, a, std::move(setup), signals, "the fake engine, CPU");
}

}  // namespace

int main(int argc, char** argv) {
    const ServeSignals signals = serve_install_signals();
    try {
        FakeFlags f;
        std::vector<const char*> rest = take_fake_flags(argc, argv, &f);
        if (rest.size() > 1 && std::string(rest[1]) == "generate") {
            rest.erase(rest.begin() + 1);
            return generate(rest, f);
        }
        return serve(rest, f, signals);
    } catch (const std::exception& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
