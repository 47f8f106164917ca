// The flags generate_gpt2cu and serve_gpt2cu share, each with one name and one check (the server's are the defaults
// of the request fields a client leaves out): -e the model, -g the new tokens, -st -sk -sp the sampling rule, -seed,
// --vocab-dir; the trainers' names where they have the concept (-e, -g, -st, -sk, -seed: docs/CLI.md).
#pragma once

#include <cstdint>
#include <string>

#include "llmc/core/flag_parse.h"

struct GenerationFlags {
    std::string model;                          // -e
    int new_tokens = 256;                       // -g
    float temperature = 1.0f;                   // -st (0 = greedy)
    int top_k = 0;                              // -sk (0 = off)
    float top_p = 1.0f;                         // -sp (1 = off)
    bool has_seed = false;                      // -seed given
    uint64_t seed = 1337;                       // -seed
    std::string vocab_dir = "data/cache/gpt2";  // --vocab-dir
};

// Whether a flag was taken: Yes, No (not this parser's), Bad (its value is not what it must be).
enum class FlagTaken { No, Yes, Bad };

// Takes `flag v` into g if the flag is a shared one; for Bad, *expected says what the value must be (or, for the old
// -n, *error the whole line). max_temperature: the program's bound (the server's is the API's 2).
inline FlagTaken parse_generation_flag(const std::string& flag, const std::string& v, GenerationFlags* g,
                                       double max_temperature, std::string* expected, std::string* error) {
    using namespace flag_parse;
    int64_t n = 0;
    auto bad = [&](const std::string& what) {
        *expected = what;
        return FlagTaken::Bad;
    };
    if (flag == "-e") {
        if (v.empty()) return bad("a model path");
        g->model = v;
    } else if (flag == "-g") {
        if (!parse_int64(v, 1, 2147483647, &n)) return bad("an integer >= 1");
        g->new_tokens = (int)n;
    } else if (flag == "-n") {  // the old name; -n is the trainers' checkpoint interval
        *error = "flag -n: the number of new tokens is -g (as in the trainers, where -n is the checkpoint interval)";
        return FlagTaken::Bad;
    } else if (flag == "-st") {
        if (!parse_float(v, 0.0, max_temperature, &g->temperature)) {
            return bad(max_temperature >= 1e6 ? "a number >= 0" : "a number in [0, " + std::to_string((int)max_temperature) + "]");
        }
    } else if (flag == "-sk") {
        if (!parse_int64(v, 0, 2147483647, &n)) return bad("an integer >= 0");
        g->top_k = (int)n;
    } else if (flag == "-sp") {
        if (!parse_float(v, 0.0, 1.0, &g->top_p) || !(g->top_p > 0.0f)) return bad("a number in (0, 1]");
    } else if (flag == "-seed") {
        if (!parse_int64(v, 0, INT64_MAX, &n)) return bad("an integer >= 0");
        g->seed = (uint64_t)n;
        g->has_seed = true;
    } else if (flag == "--vocab-dir") {
        if (v.empty()) return bad("a directory");
        g->vocab_dir = v;
    } else {
        return FlagTaken::No;
    }
    return FlagTaken::Yes;
}

// The flag loop of both programs: -h / --help, --version, then flags with one value each, the shared ones first and
// then own(flag, value, &expected), the program's (Yes, No, or Bad with what the value must be). Errors are one line:
// "flag F: expected E, got 'V'", "unknown flag F", "flag F: needs a value"; -e is required.
template <class Own>
inline ParseStatus parse_generation_args(int argc, const char* const* argv, GenerationFlags* g, double max_temperature,
                                         std::string* error, Own&& own) {
    for (int i = 1; i < argc; i++) {
        const std::string flag = argv[i];
        if (flag == "--help" || flag == "-h") return ParseStatus::Help;
        if (flag == "--version") return ParseStatus::Version;
        if (i + 1 >= argc) {
            *error = "flag " + flag + ": " + (flag.size() > 1 && flag[0] == '-' ? "needs a value" : "unexpected argument");
            return ParseStatus::Error;
        }
        const std::string v = argv[++i];
        std::string expected;
        FlagTaken taken = parse_generation_flag(flag, v, g, max_temperature, &expected, error);
        if (taken == FlagTaken::No) taken = own(flag, v, &expected);
        if (taken == FlagTaken::No) *error = "unknown flag " + flag;
        if (taken == FlagTaken::Bad && !expected.empty()) *error = "flag " + flag + ": expected " + expected + ", got '" + v + "'";
        if (taken != FlagTaken::Yes) return ParseStatus::Error;
    }
    if (g->model.empty()) {
        *error = "flag -e: a model is required";
        return ParseStatus::Error;
    }
    return ParseStatus::Ok;
}
