// Flags of the server (serve_gpt2cu, and tests/serve_mock, which runs the same server on a fake engine), checked
// before any GPU work, each problem one line naming the flag. Shared concepts keep generate_gpt2cu's names
// (-e, -g, -st, -sk, -sp, -seed, --vocab-dir); -g, -st, -sk, -sp and -seed are the defaults of the request fields
// a client leaves out (max_tokens, temperature, top_k, top_p, seed).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "llmc/core/flag_parse.h"
#include "llmc/inference/generate_args.h"

struct ServeArgs {
    std::string model;                          // -e
    std::string host = "127.0.0.1";             // --host: loopback unless asked
    int port = 8000;                            // --port (0: any free port)
    int max_batch = 16;                         // --max-batch: the KV cache's slots
    int max_context = 0;                        // --max-context (0: the model's)
    int max_queue = 64;                         // --max-queue
    int prefill_budget = 512;                   // --prefill-budget
    int64_t max_body = 1 << 20;                 // --max-body
    std::string model_name;                     // --model-name (empty: from -e)
    int max_tokens = 16;                        // -g
    float temperature = 1.0f;                   // -st
    int top_k = 0;                              // -sk
    float top_p = 1.0f;                         // -sp
    bool has_seed = false;                      // -seed given
    uint64_t seed = 0;                          // -seed
    std::string vocab_dir = "data/cache/gpt2";  // --vocab-dir
};

inline std::string serve_usage(const std::string& program) {
    const ServeArgs d;
    char buf[3072];
    snprintf(buf, sizeof(buf),
             "usage: %s -e MODEL [options]\n"
             "An OpenAI-compatible completions server (POST /v1/completions, GET /v1/models, GET /health) with\n"
             "continuous batching over the KV cache; SIGTERM or Ctrl-C stops accepting, finishes what runs, exits 0.\n"
             "  -e <path>            model: our or llm.c's model file, a Hugging Face GPT-2 directory or .safetensors\n"
             "  --host <addr>        address to listen on (default %s: this machine only)\n"
             "  --port <int>         port (default %d; 0: any free port, printed at start)\n"
             "  --max-batch <int>    sequences decoded together, the KV cache's slots (default %d)\n"
             "  --max-context <int>  positions per sequence, prompt + completion (default: the model's)\n"
             "  --max-queue <int>    requests waiting beyond the free slots; more get 429 (default %d)\n"
             "  --prefill-budget <int>  prompt tokens prefilled per step, between decode steps (default %d)\n"
             "  --max-body <bytes>   largest request body; larger ones get 413 (default %lld)\n"
             "  --model-name <id>    the model's id in the API (default: the last part of -e)\n"
             "  -g <int>             max_tokens when a request leaves it out (default %d)\n"
             "  -st <float>          temperature when left out (default %g; 0 = greedy)\n"
             "  -sk <int>            top_k when left out (default %d = off)\n"
             "  -sp <float>          top_p when left out (default %g = off)\n"
             "  -seed <int>          the seed of requests without one (default: a fresh seed per request)\n"
             "  --vocab-dir <dir>    encoder.json + vocab.bpe (default %s; `make data` fills it)\n"
             "  -h, --help           print this and exit\n"
             "  --version            print the program, the commit it was built from and its precision, and exit\n",
             program.c_str(), d.host.c_str(), d.port, d.max_batch, d.max_queue, d.prefill_budget,
             (long long)d.max_body, d.max_tokens, (double)d.temperature, d.top_k, (double)d.top_p,
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
    for (int i = 1; i < argc; i++) {
        const std::string flag = argv[i];
        if (flag == "--help" || flag == "-h") return ParseStatus::Help;
        if (flag == "--version") return ParseStatus::Version;
        if (i + 1 >= argc) {
            *error = "flag " + flag + ": " + (flag.size() > 1 && flag[0] == '-' ? "needs a value" : "unexpected argument");
            return ParseStatus::Error;
        }
        const std::string v = argv[++i];
        auto fail = [&](const std::string& what) {
            *error = "flag " + flag + ": expected " + what + ", got '" + v + "'";
            return ParseStatus::Error;
        };
        int64_t n = 0;
        if (flag == "-e") { if (v.empty()) return fail("a model path"); a->model = v; }
        else if (flag == "--host") { if (v.empty()) return fail("an address"); a->host = v; }
        else if (flag == "--port") { if (!parse_int64(v, 0, 65535, &n)) return fail("a port in [0, 65535]"); a->port = (int)n; }
        else if (flag == "--max-batch") { if (!parse_int64(v, 1, 4096, &n)) return fail("an integer in [1, 4096]"); a->max_batch = (int)n; }
        else if (flag == "--max-context") { if (!parse_int64(v, 2, kIntMax, &n)) return fail("an integer >= 2"); a->max_context = (int)n; }
        else if (flag == "--max-queue") { if (!parse_int64(v, 0, 1 << 20, &n)) return fail("an integer in [0, 1048576]"); a->max_queue = (int)n; }
        else if (flag == "--prefill-budget") { if (!parse_int64(v, 1, kIntMax, &n)) return fail("an integer >= 1"); a->prefill_budget = (int)n; }
        else if (flag == "--max-body") { if (!parse_int64(v, 64, INT64_MAX, &n)) return fail("a number of bytes >= 64"); a->max_body = n; }
        else if (flag == "--model-name") { if (v.empty()) return fail("a name"); a->model_name = v; }
        else if (flag == "-g") { if (!parse_int64(v, 1, kIntMax, &n)) return fail("an integer >= 1"); a->max_tokens = (int)n; }
        else if (flag == "-n") { *error = kNewTokensFlagMoved; return ParseStatus::Error; }
        else if (flag == "-st") { if (!parse_float(v, 0.0, 2.0, &a->temperature)) return fail("a number in [0, 2]"); }
        else if (flag == "-sk") { if (!parse_int64(v, 0, kIntMax, &n)) return fail("an integer >= 0"); a->top_k = (int)n; }
        else if (flag == "-sp") {
            if (!parse_float(v, 0.0, 1.0, &a->top_p) || !(a->top_p > 0.0f)) return fail("a number in (0, 1]");
        }
        else if (flag == "-seed") {
            if (!parse_int64(v, 0, INT64_MAX, &n)) return fail("an integer >= 0");
            a->seed = (uint64_t)n;
            a->has_seed = true;
        }
        else if (flag == "--vocab-dir") { if (v.empty()) return fail("a directory"); a->vocab_dir = v; }
        else {
            *error = "unknown flag " + flag;
            return ParseStatus::Error;
        }
    }
    if (a->model.empty()) { *error = "flag -e: a model is required"; return ParseStatus::Error; }
    if (a->model_name.empty()) a->model_name = model_name_of(a->model);
    return ParseStatus::Ok;
}
