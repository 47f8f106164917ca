// Flags of the server (serve_gpt2cu, and tests/serving/serve_mock, which runs the same server on a fake engine), checked
// before any GPU work, each problem one line naming the flag. Shared concepts keep generate_gpt2cu's names
// (-e, -g, -st, -sk, -sp, -seed, --vocab-dir); -g, -st, -sk, -sp and -seed are the defaults of the request fields
// a client leaves out (max_tokens, temperature, top_k, top_p, seed).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "llmc/app/generation/generation_flags.h"
#include "llmc/core/flag_parse.h"

// -e, -g, -st, -sk, -sp, -seed, --vocab-dir: GenerationFlags (generate_gpt2cu's), here a request's defaults
struct ServeArgs : GenerationFlags {
    ServeArgs() {
        new_tokens = 16;  // max_tokens when a request leaves it out (OpenAI's default)
        seed = 0;         // used only with -seed: without it each request without a seed gets a fresh one
    }
    std::string host = "127.0.0.1";             // --host: loopback unless asked
    int port = 8000;                            // --port (0: any free port)
    int max_batch = 16;                         // --max-batch: the KV cache's slots
    int max_context = 0;                        // --max-context (0: the model's)
    int max_queue = 64;                         // --max-queue
    int prefill_budget = 512;                   // --prefill-budget
    int prefill_rows = 8;                       // --prefill-rows
    int prefill_wait = 16;                      // --prefill-wait
    int steps_in_flight = 2;                    // --steps-in-flight
    int prefill_chunk = 512;                    // --prefill-chunk
    int64_t max_body = 1 << 20;                 // --max-body
    std::string model_name;                     // --model-name (empty: from -e)
    std::string chat_template;                  // --chat-template (empty: the default, docs/SERVING.md)
    int prefix_cache = 0;                       // --prefix-cache 0|1
};

inline std::string serve_usage(const std::string& program) {
    const ServeArgs d;
    char buf[4096];
    snprintf(buf, sizeof(buf),
             "usage: %s -e MODEL [options]\n"
             "An OpenAI-compatible server (POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize; GET\n"
             "/v1/models, /health, /metrics) with continuous batching over the KV cache; SIGTERM or Ctrl-C stops\n"
             "accepting, finishes what runs, exits 0.\n"
             "  -e <path>            model: our or llm.c's model file, a Hugging Face GPT-2 directory or .safetensors\n"
             "  --host <addr>        address to listen on (default %s: this machine only)\n"
             "  --port <int>         port (default %d; 0: any free port, printed at start)\n"
             "  --max-batch <int>    sequences decoded together, the KV cache's slots (default %d)\n"
             "  --max-context <int>  positions per sequence, prompt + completion (default: the model's)\n"
             "  --max-queue <int>    requests waiting beyond the free slots; more get 429 (default %d)\n"
             "  --prefill-budget <int>  prompt tokens prefilled per step, between decode steps; prompts prefilled\n"
             "                       together count as rows of the longest (default %d)\n"
             "  --prefill-rows <int> prompts one prefill forward takes at most (default %d)\n"
             "  --prefill-wait <int> steps a short prompt may wait, while 32 or more sequences decode, for more to\n"
             "                       share its prefill call (each call holds up every decoding row; default %d, 0: none)\n"
             "  --prefill-chunk <int> prompts longer than this come in chunks of it, interleaved with the decode\n"
             "                       steps (default %d; 0: every prompt whole)\n"
             "  --steps-in-flight <int>  decode steps queued on the GPU at once, 1 or 2 (default %d: the next step is\n"
             "                       queued before the host waits for the last, so the GPU need not wait between them)\n"
             "  --max-body <bytes>   largest request body; larger ones get 413 (default %lld)\n"
             "  --model-name <id>    the model's id in the API (default: the last part of -e)\n"
             "  --prefix-cache 0|1   reuse the KV cache of prompt prefixes (whole --prefill-chunk blocks) that slots\n"
             "                       still hold: the same tokens, less prefill (default %d)\n"
             "  --chat-template <file>  how chat messages become a prompt: a JSON file of system, user, assistant,\n"
             "                       generation_prompt and stop (default: User:/Assistant: lines, docs/SERVING.md)\n"
             "  -g <int>             max_tokens when a request leaves it out (default %d)\n"
             "  -st <float>          temperature when left out (default %g; 0 = greedy)\n"
             "  -sk <int>            top_k when left out (default %d = off)\n"
             "  -sp <float>          top_p when left out (default %g = off)\n"
             "  -seed <int>          the seed of requests without one (default: a fresh seed per request)\n"
             "  --vocab-dir <dir>    encoder.json + vocab.bpe (default %s; `make data` fills it)\n"
             "  -h, --help           print this and exit\n"
             "  --version            print the program, the commit it was built from and its precision, and exit\n",
             program.c_str(), d.host.c_str(), d.port, d.max_batch, d.max_queue, d.prefill_budget, d.prefill_rows, d.prefill_wait,
             d.prefill_chunk, d.steps_in_flight,
             (long long)d.max_body, d.prefix_cache, d.new_tokens, (double)d.temperature, d.top_k, (double)d.top_p,
             d.vocab_dir.c_str());
    return buf;
}

// The API's id for a model path: its last part, without a .bin or .safetensors ending.
inline std::string model_name_of(std::string path) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const size_t slash = path.find_last_of('/');
    if (slash != std::string::npos) path = path.substr(slash + 1);
    for (const char* ext : {".bin", ".safetensors"}) {
        const std::string e = ext;
        if (path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0)
            path.resize(path.size() - e.size());
    }
    return path.empty() ? "gpt2" : path;
}

// Parses argv[1..argc). On Error, *error holds one line naming the flag and the problem.
inline ParseStatus parse_serve_args(int argc, const char* const* argv, ServeArgs* a, std::string* error) {
    using namespace flag_parse;
    constexpr int64_t kIntMax = 2147483647;
    const ParseStatus st = parse_generation_args(argc, argv, a, 2.0, error,
                                                 [&](const std::string& flag, const std::string& v, std::string* expected) {
        auto bad = [&](const char* what) { return *expected = what, FlagTaken::Bad; };
        int64_t n = 0;
        if (flag == "--host") { if (v.empty()) return bad("an address"); a->host = v; }
        else if (flag == "--port") { if (!parse_int64(v, 0, 65535, &n)) return bad("a port in [0, 65535]"); a->port = (int)n; }
        else if (flag == "--max-batch") { if (!parse_int64(v, 1, 4096, &n)) return bad("an integer in [1, 4096]"); a->max_batch = (int)n; }
        else if (flag == "--max-context") { if (!parse_int64(v, 2, kIntMax, &n)) return bad("an integer >= 2"); a->max_context = (int)n; }
        else if (flag == "--max-queue") { if (!parse_int64(v, 0, 1 << 20, &n)) return bad("an integer in [0, 1048576]"); a->max_queue = (int)n; }
        else if (flag == "--prefill-budget") { if (!parse_int64(v, 1, kIntMax, &n)) return bad("an integer >= 1"); a->prefill_budget = (int)n; }
        else if (flag == "--prefill-rows") { if (!parse_int64(v, 1, 256, &n)) return bad("an integer in [1, 256]"); a->prefill_rows = (int)n; }
        else if (flag == "--prefill-wait") { if (!parse_int64(v, 0, 1000, &n)) return bad("an integer in [0, 1000]"); a->prefill_wait = (int)n; }
        else if (flag == "--prefill-chunk") { if (!parse_int64(v, 0, 4096, &n)) return bad("an integer in [0, 4096]"); a->prefill_chunk = (int)n; }
        else if (flag == "--steps-in-flight") { if (!parse_int64(v, 1, 2, &n)) return bad("1 or 2"); a->steps_in_flight = (int)n; }
        else if (flag == "--max-body") { if (!parse_int64(v, 64, INT64_MAX, &n)) return bad("a number of bytes >= 64"); a->max_body = n; }
        else if (flag == "--model-name") { if (v.empty()) return bad("a name"); a->model_name = v; }
        else if (flag == "--prefix-cache") { if (!parse_int64(v, 0, 1, &n)) return bad("0 or 1"); a->prefix_cache = (int)n; }
        else if (flag == "--chat-template") { if (v.empty()) return bad("a file"); a->chat_template = v; }
        else return FlagTaken::No;
        return FlagTaken::Yes;
    });
    if (st == ParseStatus::Ok && a->model_name.empty()) a->model_name = model_name_of(a->model);
    return st;
}
