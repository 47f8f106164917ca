// The FP8 switches (llmc/core/options.h): LLMC_FP8_FAST_ACCUM's list, LLMC_FP8_GRADS, LLMC_FP8_RECAST and
// LLMC_FP8_BLOCKS, and the three-way LLMC_DECODE_PERSISTENT: their defaults, the start-up table's line, and a value
// they do not take stopped in one line naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>

#include "llmc/core/options.h"

namespace {

struct Accum { bool fwd, dgrad, wgrad; };
Accum accum() {
    const EngineOptions o = options_detail::read();
    return {o.fp8_fast_fwd, o.fp8_fast_dgrad, o.fp8_fast_wgrad};
}

}  // namespace

TEST(EngineOptionsDeathTest, Fp8FastAccum) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const char* name = "LLMC_FP8_FAST_ACCUM";
    unsetenv(name);
    Accum a = accum();
    EXPECT_TRUE(a.fwd && !a.dgrad && !a.wgrad);  // TransformerEngine's choice
    EXPECT_EQ(options_detail::read().description(), "none");
    setenv(name, "none", 1);
    a = accum();
    EXPECT_TRUE(!a.fwd && !a.dgrad && !a.wgrad);
    EXPECT_EQ(options_detail::read().description(), "LLMC_FP8_FAST_ACCUM=none");
    setenv(name, "wgrad,fwd", 1);
    a = accum();
    EXPECT_TRUE(a.fwd && !a.dgrad && a.wgrad);
    EXPECT_EQ(options_detail::read().description(), "LLMC_FP8_FAST_ACCUM=fwd,wgrad");
    setenv(name, "dgrad", 1);
    a = accum();
    EXPECT_TRUE(!a.fwd && a.dgrad && !a.wgrad);
    setenv(name, "fwd", 1);
    EXPECT_EQ(options_detail::read().description(), "none");  // the default, so not listed
    for (const char* bad : {"fast", "fwd,", ",fwd", "fwd,,dgrad", "FWD", "none,fwd"}) {
        setenv(name, bad, 1);
        EXPECT_EXIT(options_detail::read(), testing::ExitedWithCode(EXIT_FAILURE),
                    "^error: environment variable LLMC_FP8_FAST_ACCUM=.*: expected none or a comma list of fwd, "
                    "dgrad and wgrad\n$")
            << bad;
    }
    unsetenv(name);
}

TEST(EngineOptionsDeathTest, Fp8Grads) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const char* name = "LLMC_FP8_GRADS";
    unsetenv(name);
    EXPECT_FALSE(options_detail::read().fp8_grads_e4m3);
    setenv(name, "e4m3", 1);
    EXPECT_TRUE(options_detail::read().fp8_grads_e4m3);
    EXPECT_EQ(options_detail::read().description(), "LLMC_FP8_GRADS=e4m3");
    setenv(name, "e5m2", 1);
    EXPECT_FALSE(options_detail::read().fp8_grads_e4m3);
    setenv(name, "E4M3", 1);
    EXPECT_EXIT(options_detail::read(), testing::ExitedWithCode(EXIT_FAILURE),
                "^error: environment variable LLMC_FP8_GRADS=E4M3: expected e5m2 or e4m3\n$");
    unsetenv(name);
}

TEST(EngineOptionsDeathTest, Fp8Blocks) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const char* name = "LLMC_FP8_BLOCKS";
    unsetenv(name);
    EXPECT_FALSE(options_detail::read().fp8_blocks);
    setenv(name, "1", 1);
    EXPECT_TRUE(options_detail::read().fp8_blocks);
    EXPECT_EQ(options_detail::read().description(), "LLMC_FP8_BLOCKS=1");
    setenv(name, "yes", 1);
    EXPECT_EXIT(options_detail::read(), testing::ExitedWithCode(EXIT_FAILURE),
                "^error: environment variable LLMC_FP8_BLOCKS=yes: expected 0 or 1\n$");
    unsetenv(name);
}

TEST(EngineOptionsDeathTest, Fp8RecastNotWithBlocks) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    unsetenv("LLMC_FP8_BLOCKS");
    setenv("LLMC_FP8_RECAST", "1", 1);
    EXPECT_TRUE(options_detail::read().fp8_recast);
    EXPECT_EQ(options_detail::read().description(), "LLMC_FP8_RECAST=1");
    setenv("LLMC_FP8_BLOCKS", "1", 1);
    EXPECT_EXIT(options_detail::read(), testing::ExitedWithCode(EXIT_FAILURE),
                "^error: LLMC_FP8_RECAST=1 and LLMC_FP8_BLOCKS=1 do not go together");
    unsetenv("LLMC_FP8_BLOCKS");
    unsetenv("LLMC_FP8_RECAST");
}

// LLMC_DECODE_PERSISTENT: unset leaves Auto's choice (-1, not in the table's line), 0 never, 1 forced
TEST(EngineOptionsDeathTest, DecodePersistent) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const char* name = "LLMC_DECODE_PERSISTENT";
    unsetenv(name);
    EXPECT_EQ(options_detail::read().decode_persistent, -1);
    EXPECT_EQ(options_detail::read().description(), "none");
    setenv(name, "0", 1);
    EXPECT_EQ(options_detail::read().decode_persistent, 0);
    EXPECT_EQ(options_detail::read().description(), "LLMC_DECODE_PERSISTENT=0");
    setenv(name, "1", 1);
    EXPECT_EQ(options_detail::read().decode_persistent, 1);
    EXPECT_EQ(options_detail::read().description(), "LLMC_DECODE_PERSISTENT=1");
    setenv(name, "auto", 1);
    EXPECT_EXIT(options_detail::read(), testing::ExitedWithCode(EXIT_FAILURE),
                "^error: environment variable LLMC_DECODE_PERSISTENT=auto: expected 0 or 1\n$");
    unsetenv(name);
}
