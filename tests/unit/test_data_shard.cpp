// Token data shards (llmc/formats/data_shard.h).
#include <gtest/gtest.h>
#include <fcntl.h>

#include "llmc/core/rand.h"
#include "llmc/formats/data_shard.h"
#include "tests/lib/file_test_helpers.h"

namespace {

std::vector<uint16_t> random_tokens(size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<uint16_t> t(n);
    for (uint16_t& x : t) x = (uint16_t)rng.below(65536);
    return t;
}

std::string write_valid(const std::string& name, size_t n = 1000) {
    std::string path = scratch_path(name);
    std::vector<uint16_t> t = random_tokens(n, 1);
    write_shard(path, t.data(), (int64_t)t.size());
    return path;
}

}  // namespace

TEST(DataShard, RoundTrip) {
    std::vector<uint16_t> t = random_tokens(5000, 2);
    std::string path = scratch_path("s.bin");
    write_shard(path, t.data(), (int64_t)t.size());
    EXPECT_EQ(read_bytes(path).size(), 1024u + 2 * 5000);
    EXPECT_EQ(read_shard_header(path), 5000);
    std::vector<uint16_t> all(5000);
    read_shard_tokens(path, 0, 5000, all.data());
    EXPECT_EQ(all, t);
    std::vector<uint16_t> part(17);
    read_shard_tokens(path, 4983, 17, part.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), t.begin() + 4983));
    ShardReader r(path);
    r.read(1234, 17, part.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), t.begin() + 1234));
}

TEST(DataShard, HeaderLayoutMatchesLlmc) {
    std::string path = write_valid("s.bin", 77);
    std::vector<unsigned char> b = read_bytes(path);
    int32_t h[256];
    memcpy(h, b.data(), sizeof(h));
    EXPECT_EQ(h[0], 20240520);
    EXPECT_EQ(h[1], 1);
    EXPECT_EQ(h[2], 77);
    for (int i = 3; i < 256; i++) EXPECT_EQ(h[i], 0) << i;
}

TEST(DataShard, StreamingWriter) {
    std::string path = scratch_path("s.bin");
    std::vector<uint16_t> t = random_tokens(10000, 3);
    {
        ShardWriter w(path);
        for (size_t at = 0; at < t.size(); at += 999) w.append(t.data() + at, (int64_t)std::min<size_t>(999, t.size() - at));
        w.append(t.data(), 0);
        EXPECT_EQ(w.num_tokens(), 10000);
        EXPECT_FALSE(file_exists(path));  // nothing visible before commit
        w.commit();
    }
    std::vector<uint16_t> back(10000);
    read_shard_tokens(path, 0, 10000, back.data());
    EXPECT_EQ(back, t);
}

TEST(DataShard, WriterWithoutCommitLeavesNothing) {
    std::string path = scratch_path("s.bin");
    {
        ShardWriter w(path);
        uint16_t x[3] = {1, 2, 3};
        w.append(x, 3);
    }
    EXPECT_FALSE(file_exists(path));
    EXPECT_FALSE(file_exists(path + ".tmp." + std::to_string((long)getpid())));
    ShardWriter empty(path);
    EXPECT_FILE_ERROR([&] { empty.commit(); }, path, "cannot write an empty data shard");
}

TEST(DataShard, WrongMagicAndVersion) {
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    copy_with_header_slot(good, bad, 0, 20240326);
    EXPECT_FILE_ERROR([&] { read_shard_header(bad); }, bad, "not a token data shard (magic 20240326");
    for (uint32_t v : {0u, 2u, 0xffffffffu}) {
        copy_with_header_slot(good, bad, 1, v);
        EXPECT_FILE_ERROR([&] { read_shard_header(bad); }, bad, "unsupported data shard version");
    }
}

TEST(DataShard, NumTokensCorrupted) {
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    struct Case { uint32_t value; const char* problem; };
    const Case cases[] = {
        {0, "num_tokens = 0, must be positive"},
        {(uint32_t)-1, "num_tokens = -1, must be positive"},
        {0x80000000u, "num_tokens = -2147483648"},
        {1001, "implies 3026 (truncated)"},
        {999, "implies 3022 (trailing bytes)"},
        {0x7fffffff, "truncated"},
    };
    for (const Case& k : cases) {
        SCOPED_TRACE("num_tokens = " + std::to_string((int32_t)k.value));
        copy_with_header_slot(good, bad, 2, k.value);
        EXPECT_FILE_ERROR([&] { read_shard_header(bad); }, bad, k.problem);
        std::vector<uint16_t> dst(4);
        EXPECT_FILE_ERROR([&] { read_shard_tokens(bad, 0, 4, dst.data()); }, bad, k.problem);
    }
}

TEST(DataShard, TruncatedAndPadded) {
    std::string good = write_valid("good.bin"), bad = scratch_path("bad.bin");
    for (long delta : {-1L, -2L, -1000L}) {
        copy_resized(good, bad, delta);
        EXPECT_FILE_ERROR([&] { read_shard_header(bad); }, bad, "truncated");
    }
    for (long delta : {1L, 2L, 5000L}) {
        copy_resized(good, bad, delta);
        EXPECT_FILE_ERROR([&] { read_shard_header(bad); }, bad, "trailing bytes");
    }
    copy_resized(good, bad, 512 - (long)read_bytes(good).size());
    EXPECT_FILE_ERROR([&] { read_shard_header(bad); }, bad, "shorter than the 1024-byte data shard header");
}

TEST(DataShard, RangeOutsideShard) {
    std::string path = write_valid("s.bin", 100);
    std::vector<uint16_t> dst(10);
    EXPECT_FILE_ERROR([&] { read_shard_tokens(path, 95, 10, dst.data()); }, path,
                      "token range [95, 105) is outside the shard's 100 tokens");
    EXPECT_FILE_ERROR([&] { read_shard_tokens(path, -1, 1, dst.data()); }, path, "outside the shard");
}

// A shard near the format's limit of 2^31-1 tokens, i.e. a ~4 GiB file (sparse: the header and a few real
// tokens around and past the 2 GiB byte mark): offsets must not wrap in 32 bits.
TEST(DataShard, OffsetsPast2GiB) {
    const int64_t n = 2147483000;  // 4.29 GB of tokens
    std::string path = scratch_path("big.bin");
    int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    int32_t h[256] = {20240520, 1, (int32_t)n};
    ASSERT_EQ(pwrite(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
    if (ftruncate(fd, 1024 + 2 * n) != 0) {
        close(fd);
        GTEST_SKIP() << "file system cannot hold a sparse 4.3 GB file";
    }
    const int64_t marks[] = {((int64_t)1 << 30) - 1, ((int64_t)1 << 30) + 7, n - 3};  // token indices
    for (int64_t m : marks) {
        uint16_t v[3] = {(uint16_t)(m & 0xffff), 0xbeef, (uint16_t)(m >> 16)};
        ASSERT_EQ(pwrite(fd, v, sizeof(v), 1024 + 2 * m), (ssize_t)sizeof(v));
    }
    close(fd);
    EXPECT_EQ(read_shard_header(path), n);
    ShardReader r(path);
    for (int64_t m : marks) {
        uint16_t v[3];
        r.read(m, 3, v);
        EXPECT_EQ(v[0], (uint16_t)(m & 0xffff)) << m;
        EXPECT_EQ(v[1], 0xbeef) << m;
        EXPECT_EQ(v[2], (uint16_t)(m >> 16)) << m;
    }
    remove(path.c_str());
}

// The whole-shard scan: the count, the largest id, and the first id at or over the limit, also past the scan's
// first piece of 2^22 tokens; a bad header is the reader's error.
TEST(DataShard, ScanEveryToken) {
    const size_t n = ((size_t)1 << 22) + 1000;
    std::vector<uint16_t> t(n, 7);
    t[5] = 300;
    t[((size_t)1 << 22) + 10] = 999;   // in the second piece: the first at or over 500
    t[((size_t)1 << 22) + 20] = 4000;  // the largest
    const std::string path = scratch_path("scan.bin");
    write_shard(path, t.data(), (int64_t)n);
    ShardTokenScan s = scan_shard_tokens(path, 500);
    EXPECT_EQ(s.num_tokens, (int64_t)n);
    EXPECT_EQ(s.max_token, 4000);
    EXPECT_EQ(s.first_over, (int64_t)((1 << 22) + 10));
    EXPECT_EQ(s.first_over_id, 999);
    s = scan_shard_tokens(path, 200);
    EXPECT_EQ(s.first_over, 5);
    EXPECT_EQ(s.first_over_id, 300);
    s = scan_shard_tokens(path);  // every uint16 is below the default limit
    EXPECT_EQ(s.first_over, -1);
    const std::string cut = scratch_path("scan_cut.bin");
    copy_resized(path, cut, -2);
    EXPECT_NE(file_error_message([&] { scan_shard_tokens(cut); }).find("(truncated)"), std::string::npos);
}
