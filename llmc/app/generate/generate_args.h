// Flags of the generation program (generate_gpt2cu) and its prompts: what the user asks for, checked
// before any GPU work, each problem one line naming the flag, the file or the prompt.
//   -e MODEL      model file (ours or llm.c's), Hugging Face GPT-2 directory / .safetensors (required)
//   -p TEXT       one prompt            -pf FILE   one prompt per line (UTF-8; "\n" and "\r\n" line ends)
//   -g N          new tokens per prompt (default 256; the trainer's name for the samples' length)
//   -st T         temperature (default 1.0; 0 = greedy)     -sk K   top-k (default 0 = off)
//   -sp P         top-p, nucleus (default 1.0 = off)        -seed S random seed (default 1337)
//   --vocab-dir DIR   encoder.json + vocab.bpe (default data/cache/gpt2, made by `make data`)
// Prompts are encoded with our GPT-2 BPE (llmc/tokenizer/bpe.h) as tiktoken's encode_ordinary does (the text
// "<|endoftext|>" is ordinary text); generation stops at <|endoftext|> or after -n tokens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/app/generation/generation_flags.h"
#include "llmc/core/flag_parse.h"
#include "llmc/core/utils.h"

// -e, -g, -st, -sk, -sp, -seed, --vocab-dir: GenerationFlags (shared with the server), here with their defaults
struct GenerateArgs : GenerationFlags {
    std::string prompt;                      // -p
    bool has_prompt = false;                 // -p given (an empty -p is an error, not a missing flag)
    std::string prompt_file;                 // -pf
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

// Parses argv[1..argc). On Error, *error holds one line naming the flag and the problem.
inline ParseStatus parse_generate_args(int argc, const char* const* argv, GenerateArgs* a, std::string* error) {
    const ParseStatus st = parse_generation_args(argc, argv, a, 1e6, error,
                                                 [&](const std::string& flag, const std::string& v, std::string* expected) {
        if (flag != "-p" && flag != "-pf" && flag != "--ids") return FlagTaken::No;
        if (v.empty()) {
            *expected = flag == "-p" ? "a prompt (it is empty)" : "a file";
            return FlagTaken::Bad;
        }
        if (flag == "-p") a->prompt = v, a->has_prompt = true;
        if (flag == "-pf") a->prompt_file = v;
        if (flag == "--ids") a->ids_file = v;
        return FlagTaken::Yes;
    });
    if (st != ParseStatus::Ok) return st;
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
