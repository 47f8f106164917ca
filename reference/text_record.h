// The small text formats scripts/reference/train_gpt2.py writes next to a reference (the loss trajectory, PyTorch's bf16 error
// record): ASCII lines of space-separated words, '#' comments, checked strictly. One reader of their lines and
// numbers: every problem is a FileError "<path>: line N: <problem>".
#pragma once

#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "llmc/core/utils.h"

namespace text_record {


inline float parse_float(const std::string& path, int line, const std::string& key, const std::string& text) {
    errno = 0;
    char* end = nullptr;
    const double x = strtod(text.c_str(), &end);
    const bool double_range = errno == ERANGE;
    if (text.empty() || end != text.c_str() + text.size() || std::isnan(x) || (std::isinf(x) && !double_range)) {
        file_error(path, "line %d: %s: '%s' is not a finite number", line, key.c_str(), text.c_str());
    }
    // strtof rounds the text to float directly; beyond the largest float it gives inf, and a non-zero
    // value below the smallest subnormal float gives 0: neither is the number written.
    const float f = strtof(text.c_str(), nullptr);
    if (double_range || std::isinf(f) || (x != 0 && f == 0.0f)) {
        file_error(path, "line %d: %s: '%s' is outside the float range (magnitude %g to %g)", line, key.c_str(),
                   text.c_str(), (double)FLT_TRUE_MIN, (double)FLT_MAX);
    }
    return f;
}

inline long parse_int(const std::string& path, int line, const std::string& key, const std::string& text) {
    errno = 0;
    char* end = nullptr;
    long x = strtol(text.c_str(), &end, 10);
    if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
        file_error(path, "line %d: %s: '%s' is not an integer", line, key.c_str(), text.c_str());
    }
    return x;
}

// Control bytes (other than tab and a final CR) are errors on every line; non-ASCII bytes are
// allowed in comments only, so no quoted value can carry a terminal escape into a message.
inline void check_text_line(const std::string& path, int line, const std::string& raw) {
    const bool comment = raw.find_first_not_of(" \t") != std::string::npos && raw[raw.find_first_not_of(" \t")] == '#';
    for (size_t i = 0; i < raw.size(); i++) {
        const unsigned char c = (unsigned char)raw[i];
        if (c == 0) file_error(path, "line %d, column %zu: byte 0x00 (NUL): not a text file", line, i + 1);
        if ((c < 0x20 && c != '\t' && !(c == '\r' && i + 1 == raw.size())) || c == 0x7F) {
            file_error(path, "line %d, column %zu: byte 0x%02X is not text (a control character)", line, i + 1, c);
        }
        if (c >= 0x80 && !comment) {
            file_error(path, "line %d, column %zu: byte 0x%02X is not ASCII (only comments may hold other text)", line,
                       i + 1, c);
        }
    }
}

// Calls fn(line_number, words) for every line of the file that is not blank or a comment, after checking each
// line's bytes (check_text_line) and dropping a final CR. A file over max_bytes is refused unread.
template <typename Fn>
void for_each_line(const std::string& path, int64_t max_bytes, const char* what, Fn&& fn) {
    InputFile in(path);
    if (in.size() > max_bytes) file_error(path, "%lld bytes is too large for a %s", (long long)in.size(), what);
    std::string text((size_t)in.size(), '\0');
    in.read(&text[0], text.size(), what);
    std::istringstream lines(text);
    std::string raw;
    int line = 0;
    while (std::getline(lines, raw)) {
        line++;
        check_text_line(path, line, raw);
        if (!raw.empty() && raw.back() == '\r') raw.pop_back();
        std::istringstream words(raw);
        std::vector<std::string> w;
        std::string word;
        while (words >> word) w.push_back(word);
        if (w.empty() || w[0][0] == '#') continue;
        fn(line, w);
    }
}

}  // namespace text_record
