// Sparse files for the tests of "memory taken from a file's size": a header followed by a hole, so a
// file of terabytes costs no disk space and reads as zeros.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>

// Writes `header` at offset 0 of a new file of `bytes` bytes; false if the file system cannot make a
// file that large (the caller skips its test then).
inline bool make_sparse_file(const std::string& path, const void* header, size_t header_bytes, int64_t bytes) {
    int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) return false;
    bool ok = pwrite(fd, header, header_bytes, 0) == (ssize_t)header_bytes && ftruncate(fd, (off_t)bytes) == 0;
    close(fd);
    if (!ok) unlink(path.c_str());
    return ok;
}

// More than any test machine's RAM + swap, and below ext4's 16 TiB file size limit.
constexpr int64_t kBeyondMemoryBytes = (int64_t)4 << 40;  // 4 TiB
