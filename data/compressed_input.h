// A file's bytes as a stream, decompressed on the fly when it is gzip (zlib) or zstd (libzstd), so data/prepro
// reads a .jsonl.gz or .jsonl.zst of any size in constant memory. The format is told by the file's first bytes
// (gzip 1f 8b, zstd 28 b5 2f fd), never by its name; what a name promises is checked by the caller
// (data/prepro_input.h). Concatenated gzip members and zstd frames are read one after the other, as gzip -d and
// zstd -d do. Damaged or truncated data is a FileError naming the file and the compressed byte where it failed.
// zlib and libzstd are optional at build time (detect.mk: LLMC_HAVE_ZLIB, LLMC_HAVE_ZSTD); without one, a
// file in its format fails in one line saying which package the build lacked.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#ifdef LLMC_HAVE_ZLIB
#include <zlib.h>
#endif
#ifdef LLMC_HAVE_ZSTD
#include <zstd.h>
#endif

#include "llmc/core/utils.h"

enum class Compression { None, Gzip, Zstd };

inline const char* compression_name(Compression c) {
    return c == Compression::Gzip ? "gzip" : c == Compression::Zstd ? "zstd" : "uncompressed";
}

// What the first bytes of a file say it is.
inline Compression sniff_compression(const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) return Compression::Gzip;
    if (n >= 4 && p[0] == 0x28 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd) return Compression::Zstd;
    return Compression::None;
}

// Up to `n` bytes from the start of the file (fewer if it is shorter): for sniffing.
inline std::string read_file_prefix(const std::string& path, size_t n) {
    InputFile in(path);
    std::string s((size_t)std::min<int64_t>((int64_t)n, in.size()), '\0');
    if (!s.empty()) in.read(&s[0], s.size(), "the start of the file");
    return s;
}

class DecompressingReader {
public:
    explicit DecompressingReader(const std::string& path) : path_(path), buf_(1 << 20) {
        file_size_or_throw(path);
        fp_ = fopen(path.c_str(), "rb");
        if (!fp_) file_error(path, "cannot open (%s)", strerror(errno));
        refill();
        kind_ = sniff_compression(buf_.data(), len_);
        if (kind_ == Compression::Gzip) {
#ifdef LLMC_HAVE_ZLIB
            memset(&z_, 0, sizeof(z_));
            if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) file_error(path, "cannot start zlib's inflate");
            z_open_ = true;
#else
            file_error(path, "is gzip data, and this build has no zlib (install zlib1g-dev and rebuild)");
#endif
        } else if (kind_ == Compression::Zstd) {
#ifdef LLMC_HAVE_ZSTD
            zstd_ = ZSTD_createDCtx();
            if (!zstd_) file_error(path, "cannot create a zstd decompression context");
#else
            file_error(path, "is zstd data, and this build has no libzstd (install libzstd-dev and rebuild)");
#endif
        }
    }
    ~DecompressingReader() {
        if (fp_) fclose(fp_);
#ifdef LLMC_HAVE_ZLIB
        if (z_open_) inflateEnd(&z_);
#endif
#ifdef LLMC_HAVE_ZSTD
        if (zstd_) ZSTD_freeDCtx(zstd_);
#endif
    }
    DecompressingReader(const DecompressingReader&) = delete;
    DecompressingReader& operator=(const DecompressingReader&) = delete;

    Compression compression() const { return kind_; }
    // Bytes of the file consumed so far (compressed bytes for gzip and zstd): for progress.
    int64_t file_bytes_read() const { return consumed_before_ + (int64_t)pos_; }

    // Up to `cap` bytes of the (decompressed) stream into dst; 0 only at its end.
    size_t read(char* dst, size_t cap) {
        if (cap == 0) return 0;
        switch (kind_) {
            case Compression::None: return read_plain(dst, cap);
            case Compression::Gzip: return read_gzip(dst, cap);
            case Compression::Zstd: return read_zstd(dst, cap);
        }
        return 0;
    }

private:
    std::string path_;
    FILE* fp_ = nullptr;
    std::vector<char> buf_;
    size_t pos_ = 0, len_ = 0;     // the unread input is buf_[pos_, len_)
    int64_t consumed_before_ = 0;  // file bytes before buf_
    bool file_end_ = false;
    Compression kind_ = Compression::None;

    // Reads the next piece of the file into buf_ (after everything in it was consumed); false at the end.
    bool refill() {
        consumed_before_ += (int64_t)len_;
        pos_ = len_ = 0;
        if (file_end_) return false;
        len_ = fread(buf_.data(), 1, buf_.size(), fp_);
        if (ferror(fp_)) file_error(path_, "read failed (%s)", strerror(errno));
        if (len_ < buf_.size()) file_end_ = true;
        return len_ > 0;
    }
    [[noreturn]] void damaged(const char* what, const char* detail) const {
        file_error(path_, "damaged %s data at compressed byte %lld (%s)", what, (long long)file_bytes_read(), detail);
    }

    size_t read_plain(char* dst, size_t cap) {
        if (pos_ == len_ && !refill()) return 0;
        const size_t n = std::min(cap, len_ - pos_);
        memcpy(dst, buf_.data() + pos_, n);
        pos_ += n;
        return n;
    }

#ifdef LLMC_HAVE_ZLIB
    z_stream z_;
    bool z_open_ = false, in_member_ = false;
    size_t read_gzip(char* dst, size_t cap) {
        while (true) {
            if (pos_ == len_ && !refill()) {
                if (in_member_) {
                    file_error(path_, "truncated gzip data: the file ends inside a member (after %lld bytes)",
                               (long long)file_bytes_read());
                }
                return 0;
            }
            if (!in_member_) {
                if (inflateReset(&z_) != Z_OK) damaged("gzip", "inflateReset failed");
                in_member_ = true;
            }
            z_.next_in = (Bytef*)buf_.data() + pos_;
            z_.avail_in = (uInt)(len_ - pos_);
            z_.next_out = (Bytef*)dst;
            z_.avail_out = (uInt)std::min<size_t>(cap, 1u << 30);
            const uInt out_before = z_.avail_out;
            const int ret = inflate(&z_, Z_NO_FLUSH);
            pos_ = len_ - z_.avail_in;
            const size_t produced = out_before - z_.avail_out;
            if (ret == Z_STREAM_END) {
                in_member_ = false;  // another member may follow
            } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
                damaged("gzip", z_.msg ? z_.msg : "inflate failed");
            }
            if (produced > 0) return produced;
        }
    }
#else
    size_t read_gzip(char*, size_t) { return 0; }
#endif

#ifdef LLMC_HAVE_ZSTD
    ZSTD_DCtx* zstd_ = nullptr;
    size_t zstd_last_ = 0;  // ZSTD_decompressStream's last hint: 0 once a frame is complete and flushed
    size_t read_zstd(char* dst, size_t cap) {
        while (true) {
            const bool more = pos_ < len_ || refill();
            ZSTD_inBuffer in{buf_.data() + pos_, len_ - pos_, 0};
            ZSTD_outBuffer out{dst, cap, 0};
            if (!more && zstd_last_ == 0) return 0;
            const size_t ret = ZSTD_decompressStream(zstd_, &out, &in);
            pos_ += in.pos;
            if (ZSTD_isError(ret)) damaged("zstd", ZSTD_getErrorName(ret));
            zstd_last_ = ret;
            if (out.pos > 0) return out.pos;
            if (!more) {
                file_error(path_, "truncated zstd data: the file ends inside a frame (after %lld bytes)",
                           (long long)file_bytes_read());
            }
        }
    }
#else
    size_t read_zstd(char*, size_t) { return 0; }
#endif
};

// The size of the file's decompressed stream (the file's size when it is not compressed): one pass through it.
inline int64_t decompressed_size(const std::string& path) {
    DecompressingReader in(path);
    if (in.compression() == Compression::None) return file_size_or_throw(path);
    std::vector<char> buf(1 << 20);
    int64_t total = 0;
    for (size_t got; (got = in.read(buf.data(), buf.size())) > 0;) total += (int64_t)got;
    return total;
}
