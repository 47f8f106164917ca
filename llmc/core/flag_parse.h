// What every command-line parser of the programs shares (train_args.h, generate_args.h, serve_args.h): the outcome
// of a parse, what main does with it, and strict number parsing (the whole string, in range; anything else is the
// caller's one-line error).
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

enum class ParseStatus { Ok, Help, Version, Error };

// main's answer to a parse: the usage or the version line on stdout (exit 0), or the error in one line pointing at
// --help (exit 1). Returns the exit code, or -1 when the program goes on.
inline int finish_parse(ParseStatus st, const std::string& error, const char* program, const std::string& usage,
                        const std::string& version) {
    if (st == ParseStatus::Help) printf("%s", usage.c_str());
    if (st == ParseStatus::Version) printf("%s\n", version.c_str());
    if (st == ParseStatus::Error) fprintf(stderr, "error: %s (%s --help lists the flags)\n", error.c_str(), program);
    return st == ParseStatus::Ok ? -1 : st == ParseStatus::Error ? 1 : 0;
}

namespace flag_parse {

// Whole string must be a base-10 integer in [lo, hi].
inline bool parse_int64(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
    if (s.empty()) return false;
    errno = 0;
    char* end = nullptr;
    long long v = strtoll(s.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
    *out = v;
    return true;
}

// Whole string must be a finite number in [lo, hi].
inline bool parse_float(const std::string& s, double lo, double hi, float* out) {
    if (s.empty()) return false;
    errno = 0;
    char* end = nullptr;
    double v = strtod(s.c_str(), &end);
    if (errno != 0 || *end != '\0' || !std::isfinite(v) || v < lo || v > hi) return false;
    *out = (float)v;
    return true;
}

}  // namespace flag_parse
