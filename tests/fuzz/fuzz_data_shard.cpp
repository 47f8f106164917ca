// Fuzzes the token shard reader (llmc/formats/data_shard.h): ShardReader / read_shard_header / read_shard_tokens
// on the input as a shard file. Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, an allocation past -malloc_limit_mb,
// the readers disagreeing, a token range outside the shard that reads instead of failing, or an accepted
// shard whose tokens do not survive write_shard + read_shard_tokens.
#include <cstring>
#include <vector>

#include "llmc/formats/data_shard.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::write_scratch_file("shard.bin", data, size);
    int64_t n = 0;
    const bool header_ok = fuzz::accepts([&] { n = read_shard_header(path); });
    std::vector<uint16_t> tokens;
    const bool ok = fuzz::accepts([&] {
        ShardReader reader(path);
        FUZZ_REQUIRE(reader.num_tokens() == n, "ShardReader says %lld tokens, read_shard_header %lld",
                     (long long)reader.num_tokens(), (long long)n);
        tokens.resize((size_t)n);
        reader.read(0, n, tokens.data());
        reader.read(n, 0, tokens.data());  // an empty range at the end is fine
        for (int64_t first : {(int64_t)-1, n, n - 1}) {
            uint16_t spill[2];
            FUZZ_REQUIRE(!fuzz::accepts([&] { reader.read(first, 2, spill); }),
                         "tokens [%lld, %lld) of a %lld-token shard read without an error", (long long)first,
                         (long long)first + 2, (long long)n);
        }
    });
    FUZZ_REQUIRE(ok == header_ok, "read_shard_header %s the shard, ShardReader %s it", header_ok ? "accepts" : "rejects",
                 ok ? "accepts" : "rejects");
    if (!ok) return 0;
    FUZZ_REQUIRE(memcmp(tokens.data(), data + kFileHeaderBytes, (size_t)n * 2) == 0, "tokens differ from the file's bytes");
    const std::string again = fuzz::scratch_dir() + "/shard_again.bin";
    write_shard(again, tokens.data(), n);
    std::vector<uint16_t> back((size_t)n);
    read_shard_tokens(again, 0, n, back.data());
    FUZZ_REQUIRE(back == tokens, "tokens changed on a rewrite");
    return 0;
}
