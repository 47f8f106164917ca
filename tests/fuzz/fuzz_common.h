// Shared by the libFuzzer targets in tests/fuzz/ (README in tests/fuzz/Makefile): the readers take
// paths, so each target writes its input to a file in a per-process scratch directory and calls the
// real reader on it, as the programs do. Also: the one way a target reports a broken property (abort,
// so libFuzzer saves the input), and a check that text is safe to print on a terminal.
#pragma once

#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "llmc/core/utils.h"

namespace fuzz {

// A property a target checks does not hold: print it and abort (libFuzzer reports a deadly signal
// and writes the input to its artifact file).
[[noreturn]] inline void finding(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] inline void finding(const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "FUZZ FINDING: ");
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    abort();
}
#define FUZZ_REQUIRE(cond, ...) \
    do {                        \
        if (!(cond)) ::fuzz::finding(__VA_ARGS__); \
    } while (0)

inline std::string& scratch_dir_path() {
    static std::string dir;
    return dir;
}

inline void remove_scratch_dir() {
    std::string& dir = scratch_dir_path();
    if (dir.empty()) return;
    nftw(dir.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return remove(p); }, 8,
         FTW_DEPTH | FTW_PHYS);
    dir.clear();
}

// $TMPDIR/llmc_fuzz_XXXXXX ($TMPDIR unset: /dev/shm if it is there, else /tmp), made on first use and
// removed when the process exits normally (run_fuzzers.sh points TMPDIR at a directory it removes, for
// the runs that end in a crash).
inline const std::string& scratch_dir() {
    std::string& dir = scratch_dir_path();
    if (dir.empty()) {
        const char* env = getenv("TMPDIR");
        std::string base = env && *env ? env : access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        std::string tmpl = base + "/llmc_fuzz_XXXXXX";
        if (!mkdtemp(&tmpl[0])) {
            perror("fuzz: mkdtemp");
            abort();
        }
        dir = tmpl;
        atexit(remove_scratch_dir);
    }
    return dir;
}

// Writes bytes to scratch_dir()/name, replacing what was there, and returns the path.
inline std::string write_scratch_file(const std::string& name, const void* data, size_t size) {
    const std::string path = scratch_dir() + "/" + name;
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || (size > 0 && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(("fuzz: cannot write " + path).c_str());
        abort();
    }
    return path;
}
inline std::string write_scratch_file(const std::string& name, std::string_view bytes) {
    return write_scratch_file(name, bytes.data(), bytes.size());
}

inline std::string read_whole_scratch_file(const std::string& path) {
    std::string s;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) finding("cannot reopen %s", path.c_str());
    char buf[1 << 14];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, got);
    fclose(f);
    return s;
}

// Runs fn(); true if it returned, false if it threw the reader's documented error (FileError).
// Any other exception leaves the target uncaught: std::terminate, a finding.
template <typename Fn>
inline bool accepts(Fn&& fn) {
    try {
        fn();
        return true;
    } catch (const FileError&) {
        return false;
    }
}

// True if s is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF) and, with
// reject_controls, holds no control character but newline and tab (C0, DEL, C1). Written apart from the
// project's own UTF-8 code so that it checks that code rather than repeating it.
inline bool is_valid_utf8(std::string_view s, bool reject_controls) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        size_t len;
        if (c < 0x80) { cp = c; len = 1; }
        else if ((c & 0xE0) == 0xC0) { cp = c & 0x1F; len = 2; }
        else if ((c & 0xF0) == 0xE0) { cp = c & 0x0F; len = 3; }
        else if ((c & 0xF8) == 0xF0) { cp = c & 0x07; len = 4; }
        else return false;
        if (i + len > s.size()) return false;
        for (size_t k = 1; k < len; k++) {
            const unsigned char d = (unsigned char)s[i + k];
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        static const uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        if (reject_controls && ((cp < 0x20 && cp != '\n' && cp != '\t') || (cp >= 0x7F && cp <= 0x9F))) return false;
        i += len;
    }
    return true;
}

// What may reach a terminal from a file.
inline bool is_terminal_safe(std::string_view s) { return is_valid_utf8(s, true); }

}  // namespace fuzz
