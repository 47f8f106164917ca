// Token data shard, byte-compatible with llm.c's .bin shards (dev/data/*.py):
//   int32 header[256]: [0]=20240520 (magic), [1]=1 (version), [2]=num_tokens; the rest zero.
//   then uint16 tokens[num_tokens], little-endian.
// num_tokens is an int32, so a shard holds up to 2^31-1 tokens (4 GiB of tokens); every offset here
// is 64-bit (fseeko / off_t) so shards past 2 GiB read and write correctly.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/formats/file_header.h"

constexpr int kShardMagic = 20240520;
constexpr int kShardVersion = 1;
constexpr int64_t kShardMaxTokens = INT32_MAX;

inline int64_t shard_file_bytes(int64_t num_tokens) { return kFileHeaderBytes + num_tokens * 2; }

// A shard's header against the file's length: magic, version, a positive token count, the exact length. Returns
// the token count.
inline int64_t check_shard_header(const std::string& path, const int32_t* h, int64_t file_bytes) {
    if (h[0] != kShardMagic) file_error(path, "not a token data shard (magic %d, expected %d)", h[0], kShardMagic);
    if (h[1] != kShardVersion) file_error(path, "unsupported data shard version %d (expected %d)", h[1], kShardVersion);
    if (h[2] < 1) file_error(path, "bad data shard header: num_tokens = %d, must be positive", h[2]);
    const int64_t expected = shard_file_bytes(h[2]);
    if (file_bytes != expected) {
        file_error(path, "file is %lld bytes but its header (%lld tokens) implies %lld (%s)", (long long)file_bytes,
                   (long long)h[2], (long long)expected, file_bytes < expected ? "truncated" : "trailing bytes");
    }
    return h[2];
}

// Whether bytes begin as a shard does (its magic): how a tool tells a shard from other input.
inline bool starts_with_shard_magic(const std::string& bytes) {
    int32_t magic = 0;
    if (bytes.size() >= sizeof(magic)) memcpy(&magic, bytes.data(), sizeof(magic));
    return magic == kShardMagic;
}

// The tokens of a whole shard held in memory (read from a pipe, say), checked as a file's are; `source` names it.
inline std::vector<uint16_t> shard_tokens_from_bytes(const std::string& source, const std::string& bytes) {
    if ((int64_t)bytes.size() < kFileHeaderBytes) {
        file_error(source, "%zu bytes, shorter than the %lld-byte data shard header", bytes.size(),
                   (long long)kFileHeaderBytes);
    }
    int32_t h[kFileHeaderInts];
    memcpy(h, bytes.data(), sizeof(h));
    std::vector<uint16_t> tokens((size_t)check_shard_header(source, h, (int64_t)bytes.size()));
    memcpy(tokens.data(), bytes.data() + kFileHeaderBytes, tokens.size() * sizeof(uint16_t));
    return tokens;
}

// An open, validated shard; reads any token range without reopening (what the DataLoader keeps).
class ShardReader {
public:
    explicit ShardReader(const std::string& path) : in_(path) {
        int32_t h[kFileHeaderInts];
        read_file_header(in_, h, "data shard");
        num_tokens_ = check_shard_header(path, h, in_.size());
    }
    const std::string& path() const { return in_.path(); }
    int64_t num_tokens() const { return num_tokens_; }

    // Tokens [first, first+count) into dst.
    void read(int64_t first, int64_t count, uint16_t* dst) {
        if (first < 0 || count < 0 || first + count > num_tokens_) {
            file_error(in_.path(), "token range [%lld, %lld) is outside the shard's %lld tokens", (long long)first,
                       (long long)(first + count), (long long)num_tokens_);
        }
        if (count == 0) return;
        in_.seek(kFileHeaderBytes + first * 2);
        in_.read(dst, (size_t)count * sizeof(uint16_t), "tokens");
    }

private:
    InputFile in_;
    int64_t num_tokens_ = 0;
};

// Validates the shard (magic, version, num_tokens, exact length) and returns num_tokens.
inline int64_t read_shard_header(const std::string& path) { return ShardReader(path).num_tokens(); }

inline void read_shard_tokens(const std::string& path, int64_t first, int64_t count, uint16_t* dst) {
    ShardReader(path).read(first, count, dst);
}

// Every token of a shard, read once in large pieces: the count, the largest id, and where the first id >= limit
// stands (-1 if none). What a trainer checks before it starts (no run dies hours in on a bad token) and what
// `tokenizer info` prints.
struct ShardTokenScan {
    int64_t num_tokens = 0;
    int max_token = 0;
    int64_t first_over = -1;  // token offset of the first id >= limit
    int first_over_id = 0;
};

inline ShardTokenScan scan_shard_tokens(const std::string& path, int limit = 65536) {
    ShardReader r(path);
    ShardTokenScan s;
    s.num_tokens = r.num_tokens();
    std::vector<uint16_t> chunk((size_t)std::min<int64_t>(s.num_tokens, (int64_t)1 << 22));
    for (int64_t at = 0; at < s.num_tokens; at += (int64_t)chunk.size()) {
        const size_t n = (size_t)std::min<int64_t>((int64_t)chunk.size(), s.num_tokens - at);
        r.read(at, (int64_t)n, chunk.data());
        uint16_t m = 0;
        for (size_t i = 0; i < n; i++) m = std::max(m, chunk[i]);  // a plain max: the compiler vectorises it
        s.max_token = std::max(s.max_token, (int)m);
        if (s.first_over < 0 && m >= limit) {
            size_t i = 0;
            while (chunk[i] < limit) i++;
            s.first_over = at + (int64_t)i;
            s.first_over_id = chunk[i];
        }
    }
    return s;
}

// Streaming writer: append() any number of times, then commit() patches the header and renames
// the file into place. Destroyed without commit(): nothing is written at `path`.
class ShardWriter {
public:
    explicit ShardWriter(const std::string& path) : path_(path), out_(path) {
        int32_t h[kFileHeaderInts] = {};  // patched at commit
        out_.write(h, sizeof(h));
    }
    void append(const uint16_t* tokens, int64_t n) {
        if (n < 0) file_error(path_, "cannot append %lld tokens", (long long)n);
        if (num_tokens_ + n > kShardMaxTokens) {
            file_error(path_, "shard would exceed %lld tokens (the int32 header limit)", (long long)kShardMaxTokens);
        }
        out_.write(tokens, (size_t)n * sizeof(uint16_t));
        num_tokens_ += n;
    }
    int64_t num_tokens() const { return num_tokens_; }
    void commit() {
        if (num_tokens_ < 1) file_error(path_, "cannot write an empty data shard");
        int32_t h[kFileHeaderInts] = {};
        h[0] = kShardMagic;
        h[1] = kShardVersion;
        h[2] = (int32_t)num_tokens_;
        out_.seek(0);
        out_.write(h, sizeof(h));
        out_.commit();
    }

private:
    std::string path_;  // declared before out_: initialised first
    AtomicOutputFile out_;
    int64_t num_tokens_ = 0;
};

inline void write_shard(const std::string& path, const uint16_t* tokens, int64_t n) {
    ShardWriter w(path);
    w.append(tokens, n);
    w.commit();
}
