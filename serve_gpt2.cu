// serve_gpt2cu: an OpenAI-compatible server (completions, chat, a page to try it) for a GPT-2 model on the GPU, with continuous batching.
//   ./serve_gpt2cu -e MODEL [--host 127.0.0.1] [--port 8000] [--max-batch 16] [--max-context T]
//   curl http://127.0.0.1:8000/v1/completions -d '{"prompt": "Once upon a time", "max_tokens": 32}'
// docs/SERVING.md: the API subset, errors, the scheduler, what is measured. Requests are checked on arrival
// (llmc/serving/completion_request.h) and queued on the scheduler (llmc/serving/scheduler.h), which the engine's
// thread steps: prompts prefilled into free KV-cache slots, one decode step for every running sequence at a time,
// each token picked by its own request's rule and seed (llmc/serving/gpu_engine.cuh over llmc/inference/slots.cuh).
// Everything the user gives is checked before the GPU is touched (one line each); without a GPU it stops in one
// line. SIGTERM or Ctrl-C: no new requests, every accepted one finishes, exit 0 (llmc/app/serve/serve_main.h).
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/app/generation/host_model.cuh"
#include "llmc/app/serve/serve_args.h"
#include "llmc/app/serve/serve_main.h"
#include "llmc/core/version.h"
#include "llmc/serving/gpu_engine.cuh"
#include "llmc/tokenizer/bpe_encoder.h"

namespace {

int run(const ServeArgs& a, const char* program, const ServeSignals& signals) {
    // ---- everything the user gave, on the host
    const BPETokenizer bpe = BPETokenizer::load(a.vocab_dir);
    ChatTemplate chat = serve_chat_template(a);
    // the on-GPU loop's picker (warm-up only); requests pick on the host
    HostModel model = load_host_model(a.model, PickParams{0.f, 0, 1.f});
    const GPT2Config& c = model.file.config;
    if (!kv_cache_supported(c)) {
        throw std::runtime_error(a.model + ": head size " + std::to_string(c.channels / c.num_heads) + " (C " +
                                 std::to_string(c.channels) + ", NH " + std::to_string(c.num_heads) +
                                 "): the server needs a KV cache, for head size 64 or 128 (every GPT-2 size)");
    }
    const int context = a.max_context > 0 ? a.max_context : c.max_seq_len;
    if (context > c.max_seq_len)
        throw std::runtime_error("flag --max-context: " + std::to_string(context) + " is over the model's context of " +
                                 std::to_string(c.max_seq_len));

    // ---- the GPU
    require_cuda_device(program);
    GpuServeEngine engine(c, std::move(model.file.params), a.max_batch, context, a.prefill_rows, model.options,
                          a.steps_in_flight, a.prefill_chunk);

    ServeSetup setup;
    setup.limits = serve_limits(a, context, c.vocab_size);
    LockedEncoder encoder(bpe);
    setup.encode = [&](const std::string& text) { return encoder.encode_ordinary(text); };
    setup.token_bytes = &bpe.tokens();
    setup.eot = bpe.eot_token();
    setup.chat_template = std::move(chat);
    return run_server(&engine, a, std::move(setup), signals, std::string("GPU, ") + PRECISION_NAME);
}

}  // namespace

int main(int argc, char** argv) {
    const ServeSignals signals = serve_install_signals();  // before any thread
    ServeArgs args;
    std::string error;
    const ParseStatus st = parse_serve_args(argc, argv, &args, &error);
    const int done =
        finish_parse(st, error, argv[0], serve_usage(argv[0]), version_line("serve_gpt2cu", PRECISION_NAME));
    if (done >= 0) return done;
    try {
        return run(args, argv[0], signals);
    } catch (const std::exception& e) {
        fflush(stdout);
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
