// What every command-line parser of the programs shares (train_args.h, generate_args.h): the outcome of a parse
// and strict number parsing (the whole string, in range; anything else is the caller's one-line error).
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

enum class ParseStatus { Ok, Help, Error };

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
