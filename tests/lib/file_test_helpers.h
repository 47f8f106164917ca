// Helpers for the file-format tests: a per-process scratch directory, raw byte access for
// corrupting files, and a check that a call fails with a one-line FileError naming the file.
#pragma once

#include <gtest/gtest.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "llmc/core/utils.h"

// A fresh directory under $TMPDIR (or /tmp), one per test process, removed when the tests end.
inline std::string& scratch_dir_storage() {
    static std::string dir;
    return dir;
}

inline const std::string& scratch_dir() {
    std::string& dir = scratch_dir_storage();
    if (dir.empty()) {
        const char* base = getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/tmp") + "/llmc_unit_XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (!mkdtemp(buf.data())) {
            perror("mkdtemp");
            abort();
        }
        dir = buf.data();
    }
    return dir;
}

class ScratchDirCleanup : public ::testing::Environment {
public:
    void TearDown() override {
        std::string& dir = scratch_dir_storage();
        if (dir.empty()) return;
        nftw(dir.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return remove(p); }, 16,
             FTW_DEPTH | FTW_PHYS);
        dir.clear();
    }
};
// Registered once however many test files include this header (C++17 inline variable).
inline ::testing::Environment* const kScratchDirCleanup = ::testing::AddGlobalTestEnvironment(new ScratchDirCleanup);

// A path in the scratch directory, unique to the running test and `name`.
inline std::string scratch_path(const std::string& name) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string prefix = info ? std::string(info->test_suite_name()) + "." + info->name() + "." : "";
    return scratch_dir() + "/" + prefix + name;
}

inline std::vector<unsigned char> read_bytes(const std::string& path) {
    std::vector<unsigned char> bytes;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return bytes;
    unsigned char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) bytes.insert(bytes.end(), buf, buf + got);
    fclose(f);
    return bytes;
}

inline void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
    remove(path.c_str());  // a new file: ext4 flushes a truncated-and-rewritten one on close (milliseconds each)
    FILE* f = fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    if (!bytes.empty()) {
        ASSERT_EQ(fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    }
    fclose(f);
}

inline bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// Copy of `src` at `dst` with 32-bit header slot `index` set to `value`.
inline void copy_with_header_slot(const std::string& src, const std::string& dst, int index, uint32_t value) {
    std::vector<unsigned char> b = read_bytes(src);
    ASSERT_GE(b.size(), (size_t)(index + 1) * 4);
    memcpy(b.data() + 4 * index, &value, 4);
    write_bytes(dst, b);
}

// Copy of `src` at `dst` with its length changed by `delta` bytes (negative truncates, positive pads with zeros).
inline void copy_resized(const std::string& src, const std::string& dst, long delta) {
    std::vector<unsigned char> b = read_bytes(src);
    ASSERT_GE((long)b.size() + delta, 0);
    b.resize((size_t)((long)b.size() + delta), 0);
    write_bytes(dst, b);
}

// Runs f; returns the FileError message, or a marker string when none (or another exception) was thrown.
inline std::string file_error_message(const std::function<void()>& f) {
    try {
        f();
    } catch (const FileError& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("<other exception: ") + e.what() + ">";
    }
    return "<no exception>";
}

// f must throw a single-line FileError that starts with "<path>: " and contains `problem`.
#define EXPECT_FILE_ERROR(f, path, problem)                                                         \
    do {                                                                                           \
        const std::string msg_ = file_error_message(f);                                            \
        const std::string path_ = (path);                                                          \
        EXPECT_EQ(msg_.rfind(path_ + ": ", 0), 0u) << "message does not start with the path: " << msg_; \
        EXPECT_NE(msg_.find(problem), std::string::npos) << "expected '" << (problem) << "' in: " << msg_; \
        EXPECT_EQ(msg_.find('\n'), std::string::npos) << "message is not one line: " << msg_;      \
    } while (0)
