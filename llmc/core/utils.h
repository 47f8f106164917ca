// Host-side helpers shared by every program and test: errors that name the file,
// checked stdio, atomic writes (temporary file + rename + directory sync), file fingerprints.
// Readers throw FileError so tests can inspect the message; programs catch it in main,
// print the one line, and exit non-zero.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// An error about one file. what() is a single line: "<path>: <problem>".
struct FileError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] inline void file_error(const std::string& path, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
[[noreturn]] inline void file_error(const std::string& path, const char* fmt, ...) {
    char msg[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof(msg), fmt, args);
    va_end(args);
    throw FileError(path + ": " + msg);
}

// Size of a regular file in bytes (64-bit, so shards over 2 GiB work).
inline int64_t file_size_or_throw(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) file_error(path, "cannot open (%s)", strerror(errno));
    if (!S_ISREG(st.st_mode)) file_error(path, "not a regular file");
    return (int64_t)st.st_size;
}

// A bad command line: a tool's main prints it as one line pointing at --help.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A command-line tool's main around body(): exit status 0, or 1 after one line on stderr, "error: <what>" (for a
// UsageError "error: <what>; see <program> --help"). on_error runs before the line (a progress line to end, say).
template <typename Body>
inline int run_tool(const char* program, Body&& body, void (*on_error)() = nullptr) {
    try {
        body();
    } catch (const UsageError& e) {
        if (on_error) on_error();
        fprintf(stderr, "error: %s; see %s --help\n", e.what(), program);
        return 1;
    } catch (const std::exception& e) {
        if (on_error) on_error();
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}

inline bool path_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// The directory a path names its file in ("." for a bare name).
inline std::string parent_directory(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// An open file that closes itself; reads throw FileError naming the file.
class InputFile {
public:
    explicit InputFile(const std::string& path) : path_(path) {
        size_ = file_size_or_throw(path);
        fp_ = fopen(path.c_str(), "rb");
        if (!fp_) file_error(path, "cannot open (%s)", strerror(errno));
    }
    ~InputFile() { if (fp_) fclose(fp_); }
    InputFile(const InputFile&) = delete;
    InputFile& operator=(const InputFile&) = delete;

    const std::string& path() const { return path_; }
    int64_t size() const { return size_; }

    // Reads exactly `bytes`; `what` names the part of the file for the error message.
    void read(void* dst, size_t bytes, const char* what) {
        size_t got = fread(dst, 1, bytes, fp_);
        if (got != bytes) {
            file_error(path_, "truncated while reading %s (wanted %zu bytes, got %zu)", what, bytes, got);
        }
    }
    void seek(int64_t offset) {
        if (fseeko(fp_, (off_t)offset, SEEK_SET) != 0) {
            file_error(path_, "cannot seek to byte %lld (%s)", (long long)offset, strerror(errno));
        }
    }

private:
    std::string path_;
    FILE* fp_ = nullptr;
    int64_t size_ = 0;
};

// Writes go to "<path>.tmp.<pid>"; commit() flushes, syncs and renames over `path`, so a
// reader never sees a half-written file and a crash leaves the old file intact.
class AtomicOutputFile {
public:
    explicit AtomicOutputFile(const std::string& path)
        : path_(path), tmp_path_(path + ".tmp." + std::to_string((long)getpid())) {
        fp_ = fopen(tmp_path_.c_str(), "wb");
        if (!fp_) file_error(path_, "cannot create temporary file %s (%s)", tmp_path_.c_str(), strerror(errno));
    }
    ~AtomicOutputFile() {
        if (fp_) {  // not committed: leave the destination untouched
            fclose(fp_);
            remove(tmp_path_.c_str());
        }
    }
    AtomicOutputFile(const AtomicOutputFile&) = delete;
    AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;

    void write(const void* src, size_t bytes) {
        if (bytes > 0 && fwrite(src, 1, bytes, fp_) != bytes) {
            file_error(path_, "write failed (%s)", strerror(errno));
        }
    }
    // For writers that patch a header after streaming the body (ShardWriter).
    void seek(int64_t offset) {
        if (fseeko(fp_, (off_t)offset, SEEK_SET) != 0) {
            file_error(path_, "cannot seek to byte %lld (%s)", (long long)offset, strerror(errno));
        }
    }
    void commit() {
        if (fflush(fp_) != 0 || fsync(fileno(fp_)) != 0) file_error(path_, "flush failed (%s)", strerror(errno));
        if (fclose(fp_) != 0) { fp_ = nullptr; file_error(path_, "close failed (%s)", strerror(errno)); }
        fp_ = nullptr;
        if (rename(tmp_path_.c_str(), path_.c_str()) != 0) {
            int err = errno;
            remove(tmp_path_.c_str());
            file_error(path_, "cannot rename temporary file into place (%s)", strerror(err));
        }
        sync_parent_directory();
    }

private:
    // The rename is durable only once the directory entry is on disk: a crash must not lose the new file.
    void sync_parent_directory() {
        const std::string dir = parent_directory(path_);
        const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
        if (fd < 0 || fsync(fd) != 0) {
            const int err = errno;
            if (fd >= 0) close(fd);
            file_error(path_, "cannot sync directory %s after the rename (%s)", dir.c_str(), strerror(err));
        }
        close(fd);
    }

    std::string path_, tmp_path_;
    FILE* fp_ = nullptr;
};

// A 64-bit fingerprint of a file's bytes, for telling whether two files are the same (not a cryptographic hash):
// a run state records the one of the model file it pairs with. Never 0 (0 means "unknown" there).
inline uint64_t file_hash64(const std::string& path) {
    FILE* fp = fopen(path.c_str(), "rb");
    if (!fp) file_error(path, "cannot open (%s)", strerror(errno));
    auto mix = [](uint64_t x) {  // murmur3's finaliser
        x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; return x ^ (x >> 33);
    };
    std::vector<unsigned char> buf(1 << 22);
    uint64_t h = 0x9e3779b97f4a7c15ull, total = 0;
    size_t got;
    while ((got = fread(buf.data(), 1, buf.size(), fp)) > 0) {
        for (size_t i = 0; i < got; i += 8) {
            uint64_t w = 0;
            memcpy(&w, buf.data() + i, std::min<size_t>(8, got - i));  // the last word zero-padded
            h = (h ^ mix(w + total + i)) * 0x9fb21c651e98df25ull;
        }
        total += got;
    }
    const bool failed = ferror(fp) != 0;
    fclose(fp);
    if (failed) file_error(path, "read failed while fingerprinting (%s)", strerror(errno));
    h = mix(h ^ total);
    return h ? h : 1;
}

// Host allocation that exits with a clear message instead of returning null.
inline void* malloc_or_die(size_t bytes, const char* what) {
    void* p = malloc(bytes > 0 ? bytes : 1);
    if (!p) {
        fprintf(stderr, "error: out of host memory allocating %zu bytes for %s\n", bytes, what);
        exit(EXIT_FAILURE);
    }
    return p;
}

inline size_t round_up(size_t x, size_t multiple) { return (x + multiple - 1) / multiple * multiple; }

// Creates `dir` (one level, like mkdir) if it does not exist.
inline void ensure_directory(const std::string& dir) {
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) file_error(dir, "cannot create directory (%s)", strerror(errno));
    struct stat st;
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) file_error(dir, "exists but is not a directory");
}

// Why files could not be written in `dir` later, checked now without writing anything ("" when they can): it must be
// a writable directory, or not exist yet with a writable parent (ensure_directory makes one level).
inline std::string directory_unwritable_reason(std::string dir) {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    struct stat st;
    if (stat(dir.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return "exists and is not a directory";
        if (access(dir.c_str(), W_OK | X_OK) != 0) return std::string("is not writable (") + strerror(errno) + ")";
        return "";
    }
    if (errno == ENOTDIR) return "cannot be made: part of its path is a file, not a directory";
    if (errno != ENOENT) return std::string("cannot be looked at (") + strerror(errno) + ")";
    const std::string parent = parent_directory(dir);
    if (stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return "does not exist, nor does the directory it would be made in, " + parent;
    }
    if (access(parent.c_str(), W_OK | X_OK) != 0) {
        return "does not exist and cannot be made: " + parent + " is not writable (" + strerror(errno) + ")";
    }
    return "";
}

// Why a file could not be written at `path` later, checked now without writing anything ("" when it can): its
// directory must exist and be writable, and the path must not be a directory.
inline std::string file_unwritable_reason(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return "is a directory";
    const std::string dir = parent_directory(path);
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "its directory " + dir + " does not exist";
    if (access(dir.c_str(), W_OK | X_OK) != 0) {
        return "its directory " + dir + " is not writable (" + strerror(errno) + ")";
    }
    return "";
}

// Memory sized from a file's header or length: a valid header can ask for terabytes (a sparse file costs no disk).
// allocate_for_file(path, bytes, what, fn) runs fn (which allocates about `bytes`) only if RAM + swap can hold it,
// and turns a failed allocation (std::bad_alloc) into a one-line FileError naming the file and the size. Checking
// first matters where the kernel overcommits memory: there the allocation succeeds and the process dies later.
// RAM + swap in bytes (0 if unknown).
inline uint64_t host_memory_bytes() {
    struct sysinfo si;
    if (sysinfo(&si) != 0) return 0;
    return ((uint64_t)si.totalram + (uint64_t)si.totalswap) * (uint64_t)si.mem_unit;
}

template <typename Allocate>
inline void allocate_for_file(const std::string& path, uint64_t bytes, const char* what, Allocate&& allocate) {
    const double gib = (double)bytes / (double)(1ull << 30);
    const uint64_t memory = host_memory_bytes();
    if (memory > 0 && bytes > memory) {
        file_error(path, "needs %llu bytes (%.1f GiB) for %s, more than this machine's memory (%.1f GiB of RAM + swap)",
                   (unsigned long long)bytes, gib, what, (double)memory / (double)(1ull << 30));
    }
    try {
        allocate();
    } catch (const std::bad_alloc&) {
        file_error(path, "needs %llu bytes (%.1f GiB) for %s: out of memory", (unsigned long long)bytes, gib, what);
    }
}

// Two stages on two threads, two buffers in flight: produce(i, buffer) fills piece i here while consume(i, buffer)
// takes piece i - 1 on a second thread, pieces in order. For streaming conversions: reading and transposing
// the next tensor overlaps writing the last. The first exception on either side stops both and is rethrown here.
template <typename Buffer, typename Produce, typename Consume>
inline void run_pipeline(size_t pieces, Produce&& produce, Consume&& consume) {
    Buffer buffers[2];
    bool full[2] = {false, false}, stop = false;
    std::exception_ptr error;
    std::mutex mu;
    std::condition_variable cv;
    auto fail = [&] {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        stop = true;
        cv.notify_all();
    };
    auto hand_over = [&](size_t slot, bool now_full) {
        std::lock_guard<std::mutex> lock(mu);
        full[slot] = now_full;
        cv.notify_all();
    };
    std::thread consumer([&] {
        for (size_t i = 0; i < pieces; i++) {
            {
                std::unique_lock<std::mutex> lock(mu);
                cv.wait(lock, [&] { return full[i % 2] || stop; });
                if (stop) return;
            }
            try { consume(i, buffers[i % 2]); } catch (...) { return fail(); }
            hand_over(i % 2, false);
        }
    });
    for (size_t i = 0; i < pieces; i++) {
        {
            std::unique_lock<std::mutex> lock(mu);
            cv.wait(lock, [&] { return !full[i % 2] || stop; });
            if (stop) break;
        }
        try { produce(i, buffers[i % 2]); } catch (...) { fail(); break; }
        hand_over(i % 2, true);
    }
    consumer.join();
    if (error) std::rethrow_exception(error);
}
