// main.log format and resume trimming (llmc/app/train/logger.h); peak FLOP/s and model FLOPs (llmc/app/train/mfu.h).
#include <gtest/gtest.h>

#include <string>

#include "llmc/app/train/logger.h"
#include "llmc/app/train/mfu.h"
#include "llmc/formats/run_state.h"
#include "tests/lib/file_test_helpers.h"

namespace {

std::string read_text(const std::string& path) {
    std::vector<unsigned char> b = read_bytes(path);
    return std::string(b.begin(), b.end());
}

}  // namespace

TEST(MainLog, LlmcLineFormat) {
    const std::string dir = scratch_path("log");
    ensure_directory(dir);
    {
        MainLog log;
        log.open(dir, -1);
        log.log_val(0, 10.98765f);
        log.log_train(0, 10.5f);
        log.log_train(1, 9.25f);
    }
    EXPECT_EQ(read_text(dir + "/main.log"), "s:0 tel:10.987650\ns:0 trl:10.500000\ns:1 trl:9.250000\n");
}

TEST(MainLog, DisabledWithoutDirectory) {
    MainLog log;
    log.open("", -1);
    EXPECT_FALSE(log.enabled());
    log.log_train(0, 1.0f);  // no-op
}

TEST(MainLog, ResumeDropsLinesFromTheResumeStepOn) {
    const std::string dir = scratch_path("resume");
    ensure_directory(dir);
    {
        MainLog log;
        log.open(dir, -1);
        for (int s = 0; s < 8; s++) {
            if (s % 4 == 0) log.log_val(s, 5.0f);
            log.log_train(s, 4.0f);
        }
    }
    const std::string uninterrupted = read_text(dir + "/main.log");
    {
        MainLog log;
        log.open(dir, 4);  // resume after 4 completed steps: the val at 4 and train 4..7 are written again
        for (int s = 4; s < 8; s++) {
            if (s % 4 == 0) log.log_val(s, 5.0f);
            log.log_train(s, 4.0f);
        }
    }
    EXPECT_EQ(read_text(dir + "/main.log"), uninterrupted);
    // a fresh (non-resumed) run truncates
    {
        MainLog log;
        log.open(dir, -1);
    }
    EXPECT_EQ(read_text(dir + "/main.log"), "");
    EXPECT_EQ(MainLog::line_step("s:12 trl:1.0\n"), 12);
    EXPECT_EQ(MainLog::line_step("garbage\n"), -1);
}

TEST(Console, StepLineAndTable) {
    StepStats s;
    s.step = 3;
    s.total_steps = 20;
    s.loss = 7.123456f;
    s.grad_norm = 1.5f;
    s.lr = 3e-4f;
    s.ms = 123.456;
    s.tokens_per_s = 132710;
    s.mfu = 0.456;
    const std::string line = format_step_line(s);
    EXPECT_NE(line.find("step     3/20"), std::string::npos) << line;
    EXPECT_NE(line.find("loss 7.123456"), std::string::npos) << line;
    EXPECT_NE(line.find("norm   1.5000"), std::string::npos) << line;
    EXPECT_NE(line.find("lr 3.000e-04"), std::string::npos) << line;
    EXPECT_NE(line.find("123.46 ms"), std::string::npos) << line;
    EXPECT_NE(line.find("132710 tok/s"), std::string::npos) << line;
    EXPECT_NE(line.find("MFU 45.6%"), std::string::npos) << line;
    s.mfu_full = 0.5;
    EXPECT_NE(format_step_line(s).find("MFU 45.6% (6N+6LTC; 50.0% with 6N+12LTC)"), std::string::npos)
        << format_step_line(s);
    s.mfu = -1;
    s.mfu_full = -1;
    EXPECT_NE(format_step_line(s).find("MFU n/a"), std::string::npos);
    EXPECT_EQ(format_bytes(512), "512 B");
    EXPECT_EQ(format_bytes(1536), "1.5 KiB");
    EXPECT_EQ(format_bytes(12.4 * 1024 * 1024 * 1024), "12.40 GiB");
    EXPECT_EQ(format_table_row("a", "b").size(), format_table_rule().size());
}

TEST(Mfu, PeakFromDeviceProperties) {
    // H100 SXM / H200: sm_90, 132 SMs, 1980 MHz peak clock -> 4096 * 132 * 1.98e9 = 1070.5 TFLOP/s bf16
    const double h100 = peak_flops(9, 0, 132, 1980000, MathMode::BF16);
    printf("sm_90 132 SMs 1980 MHz: bf16 %.1f TFLOP/s, tf32 %.1f, fp32 %.1f\n", h100 / 1e12,
           peak_flops(9, 0, 132, 1980000, MathMode::TF32) / 1e12, peak_flops(9, 0, 132, 1980000, MathMode::FP32) / 1e12);
    EXPECT_NEAR(h100 / 1e12, 1070.5, 0.1);
    EXPECT_NEAR(peak_flops(9, 0, 132, 1980000, MathMode::TF32) / 1e12, 535.3, 0.1);
    EXPECT_NEAR(peak_flops(9, 0, 132, 1980000, MathMode::FP32) / 1e12, 66.9, 0.1);
    // A100 SXM: sm_80, 108 SMs, 1410 MHz -> NVIDIA's 312 TFLOP/s bf16 and 19.5 fp32
    EXPECT_NEAR(peak_flops(8, 0, 108, 1410000, MathMode::BF16) / 1e12, 311.9, 0.1);
    EXPECT_NEAR(peak_flops(8, 0, 108, 1410000, MathMode::FP32) / 1e12, 19.5, 0.1);
    EXPECT_FALSE(peak_rate_per_sm(9, 0, MathMode::BF16).assumed);
    // A future minor of a known major uses that major's newest entry and says so
    PeakRate future = peak_rate_per_sm(9, 5, MathMode::BF16);
    EXPECT_TRUE(future.assumed);
    EXPECT_EQ(future.flops_per_sm_per_clock, 4096);
    EXPECT_TRUE(peak_rate_per_sm(13, 0, MathMode::BF16).assumed);
    EXPECT_GT(peak_rate_per_sm(13, 0, MathMode::BF16).flops_per_sm_per_clock, 0);
    EXPECT_EQ(peak_flops(6, 0, 56, 1480000, MathMode::BF16), 0.0);  // pre-Volta: unknown
}

TEST(Mfu, ModelFlopsPerToken) {
    GPT2Config c;
    ASSERT_TRUE(gpt2_preset("d12", &c));
    const double N = (double)gpt2_num_parameters(c);
    EXPECT_EQ(N, 124475904.0);  // GPT-2 124M with Vp = 50304
    const double f = gpt2_flops_per_token(c, 1024);
    EXPECT_DOUBLE_EQ(f, 6 * N + 6.0 * 12 * 1024 * 768);
    EXPECT_DOUBLE_EQ(gpt2_flops_per_token(c, 1024, AttentionFlops::Full), 6 * N + 12.0 * 12 * 1024 * 768);
    // 1 second for tokens worth exactly the peak -> MFU 1
    EXPECT_DOUBLE_EQ(model_flops_utilization(f, 1000, 1.0, f * 1000), 1.0);
    EXPECT_EQ(model_flops_utilization(f, 1000, 1.0, 0.0), 0.0);
}

// Regression (fuzzer finding): a NUL byte in a line cut the rest of it off and glued the next line to it when a
// resumed run rewrote main.log; bytes now pass through whole, line by line.
TEST(MainLog, ResumeKeepsLinesWithANulByteWhole) {
    const std::string dir = scratch_path("resume_nul");
    ensure_directory(dir);
    const std::string old_log("s:1 trl:1.0\0x\ns:2 trl:2.0\ns:3 trl:3.0\n", 38);
    write_bytes(dir + "/main.log", std::vector<unsigned char>(old_log.begin(), old_log.end()));
    {
        MainLog log;
        log.open(dir, 3);
    }
    const std::vector<unsigned char> got = read_bytes(dir + "/main.log");
    EXPECT_EQ(std::string(got.begin(), got.end()), std::string("s:1 trl:1.0\0x\ns:2 trl:2.0\n", 26));
}
