// Flags of the generation program (generate_gpt2cu) and its prompts: what the user asks for, checked
// before any GPU work, each problem one line naming the flag, the file or the prompt.
//   -e MODEL      model file (ours or llm.c's), Hugging Face GPT-2 directory / .safetensors (required)
//   -p TEXT       one prompt            -pf FILE   one prompt per line (UTF-8; "\n" and "\r\n" line ends)
//   -g N          new tokens per prompt (default 256; the trainer's name for the samples' length)
//   -st T         temperature (default 1.0; 0 = greedy)     -sk K   top-k (default 0 = off)
//   -sp P         top-p, nucleus (default 1.0 = off)        -seed S random seed (default 1337)
//   --vocab-dir DIR   encoder.json + vocab.bpe (default data/cache/gpt2, made by `make data`)
// Prompts are encoded with our GPT-2 BPE (data/tokenizer/bpe.h) as tiktoken's encode_ordinary does (the text
// "<|endoftext|>" is ordinary text); generation stops at <|endoftext|> or after -n tokens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/core/flag_parse.h"
#include "llmc/core/utils.h"

struct GenerateArgs {
    std::string model;                       // -e
    std::string prompt;                      // -p
    bool has_prompt = false;                 // -p given (an empty -p is an error, not a missing flag)
    std::string prompt_file;                 // -pf
    int new_tokens = 256;                    // -g
    float temperature = 1.0f;                // -st
    int top_k = 0;                           // -sk
    float top_p = 1.0f;                      // -sp
    uint64_t seed = 1337;                    // -seed
    std::string vocab_dir = "data/cache/gpt2";  // --vocab-dir
    std::string ids_file;                    // --ids: each prompt's generated token ids, a line per prompt
};

inline std::string generate_usage(const std::string& program) {
    const GenerateArgs d;
    char buf[2048];
    snprintf(buf, sizeof(buf),
             "usage: %s -e MODEL (-p TEXT | -pf FILE) [options]\n"
             "  -e <path>    model: our or llm.c's model file, a Hugging Face GPT-2 directory or .safetensors\n"
             "  -p <text>    a prompt\n"
             "  -pf <file>   prompts, one per line (all generated in one batch)\n"
             "  -g <int>     new tokens per prompt (default %d); generation also stops at <|endoftext|>\n"
             "  -st <float>  temperature (default %g; 0 = greedy)\n"
             "  -sk <int>    top-k (default %d = off)\n"
             "  -sp <float>  top-p, the nucleus (default %g = off)\n"
             "  -seed <int>  random seed (default %llu): the same seed gives the same text\n"
             "  --vocab-dir <dir>  encoder.json + vocab.bpe (default %s; `make data` fills it)\n"
             "  --ids <file>  also write each prompt's generated token ids there, one line per prompt (default: none)\n"
             "  -h, --help   print this and exit\n"
             "  --version    print the program, the commit it was built from and its precision, and exit\n",
             program.c_str(), d.new_tokens, (double)d.temperature, d.top_k, (double)d.top_p,
             (unsigned long long)d.seed, d.vocab_dir.c_str());
    return buf;
}

// The new tokens' flag was -n; the trainers' -g (llm.c's) is its name everywhere, -n being their checkpoint interval.
constexpr const char* kNewTokensFlagMoved = "flag -n: the number of new tokens is -g (as in the trainers, where -n is "
                                            "the checkpoint interval)";

// Parses argv[1..argc). On Error, *error holds one line naming the flag and the problem.
inline ParseStatus parse_generate_args(int argc, const char* const* argv, GenerateArgs* a, std::string* error) {
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
        else if (flag == "-p") {
            if (v.empty()) return fail("a prompt (it is empty)");
            a->prompt = v;
            a->has_prompt = true;
        }
        else if (flag == "-pf") { if (v.empty()) return fail("a file"); a->prompt_file = v; }
        else if (flag == "-g") { if (!parse_int64(v, 1, kIntMax, &n)) return fail("an integer >= 1"); a->new_tokens = (int)n; }
        else if (flag == "-n") { *error = kNewTokensFlagMoved; return ParseStatus::Error; }
        else if (flag == "-st") { if (!parse_float(v, 0.0, 1e6, &a->temperature)) return fail("a number >= 0"); }
        else if (flag == "-sk") { if (!parse_int64(v, 0, kIntMax, &n)) return fail("an integer >= 0"); a->top_k = (int)n; }
        else if (flag == "-sp") {
            if (!parse_float(v, 0.0, 1.0, &a->top_p) || !(a->top_p > 0.0f)) return fail("a number in (0, 1]");
        }
        else if (flag == "-seed") {
            if (!parse_int64(v, 0, INT64_MAX, &n)) return fail("an integer >= 0");
            a->seed = (uint64_t)n;
        }
        else if (flag == "--vocab-dir") { if (v.empty()) return fail("a directory"); a->vocab_dir = v; }
        else if (flag == "--ids") { if (v.empty()) return fail("a file"); a->ids_file = v; }
        else {
            *error = "unknown flag " + flag;
            return ParseStatus::Error;
        }
    }
    if (a->model.empty()) { *error = "flag -e: a model is required"; return ParseStatus::Error; }
    const bool has_p = a->has_prompt, has_pf = !a->prompt_file.empty();
    if (has_p == has_pf) {
        *error = has_p ? "flags -p and -pf: give one of them, not both" : "flag -p or -pf: a prompt is required";
        return ParseStatus::Error;
    }
    return ParseStatus::Ok;
}

// The prompts' texts: -p's, or -pf's lines (a final line end is optional; "\r\n" is one line end). An empty file,
// an empty line or a NUL byte is an error naming the file and the line.
inline std::vector<std::string> read_prompt_texts(const GenerateArgs& a) {
    if (!a.prompt_file.empty()) {
        InputFile in(a.prompt_file);
        const int64_t size = in.size();
        std::string text((size_t)size, '\0');
        if (size > 0) in.read(&text[0], (size_t)size, "the prompts");
        if (text.empty()) file_error(a.prompt_file, "is empty: one prompt per line");
        std::vector<std::string> prompts;
        size_t at = 0;
        int line = 0;
        while (at < text.size()) {
            line++;
            size_t end = text.find('\n', at);
            if (end == std::string::npos) end = text.size();
            std::string p = text.substr(at, end - at);
            if (!p.empty() && p.back() == '\r') p.pop_back();
            if (p.empty()) file_error(a.prompt_file, "line %d is empty: one prompt per line", line);
            if (p.find('\0') != std::string::npos) file_error(a.prompt_file, "line %d holds a NUL byte", line);
            prompts.push_back(std::move(p));
            at = end + 1;
        }
        return prompts;
    }
    return {a.prompt};
}

// Checks encoded prompts against the model: each non-empty, every id inside the vocabulary, and room for at least
// one new token (prompt length < max_seq_len). Returns the longest generation every prompt has room for,
// min(new_tokens, max_seq_len - longest prompt), so the caller can say when -n is cut. `where(i)` names prompt i
// in errors ("-p", "prompts.txt line 3").
template <typename Where>
inline int check_prompts(const std::vector<std::vector<int>>& prompts, int vocab_size, int max_seq_len, int new_tokens,
                         Where&& where) {
    int longest = 0;
    for (size_t i = 0; i < prompts.size(); i++) {
        const std::vector<int>& p = prompts[i];
        if (p.empty()) throw FileError(where(i) + ": the prompt encodes to no tokens");
        for (int id : p) {
            if (id < 0 || id >= vocab_size) {
                throw FileError(where(i) + ": token id " + std::to_string(id) + " is outside the model's vocabulary (V = " +
                                std::to_string(vocab_size) + ")");
            }
        }
        if ((int64_t)p.size() >= max_seq_len) {
            throw FileError(where(i) + ": the prompt is " + std::to_string(p.size()) +
                            " tokens, the model's context is " + std::to_string(max_seq_len) +
                            ": no room for a new token");
        }
        longest = std::max(longest, (int)p.size());
    }
    return std::min(new_tokens, max_seq_len - longest);
}
