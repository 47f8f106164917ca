// The step timeline's arithmetic (llmc/core/timeline.h): hand-made records with known answers, and random ones
// against a brute-force count over every nanosecond; the kernel-name shortening of llmc/core/cupti_trace.h.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "llmc/core/cupti_trace.h"
#include "llmc/core/timeline.h"

namespace {

TimelineRecord rec(uint64_t a, uint64_t b, bool comm, uint32_t stream = 7) {
    TimelineRecord r;
    r.name = comm ? "ncclDevKernel" : "gemm";
    r.start = a, r.end = b, r.comm = comm, r.stream = stream;
    return r;
}

}  // namespace

TEST(Timeline, HandMade) {
    // compute [0,10) and [5,20) on two streams (union 20), [30,40); comm [15,35): hidden 5 + 5, exposed 10
    const std::vector<TimelineRecord> r = {rec(0, 10, false, 1), rec(5, 20, false, 2), rec(30, 40, false, 1),
                                           rec(15, 35, true)};
    const TimelineSummary s = summarize_timeline(r, 0, 50);
    EXPECT_EQ(s.window, 50u);
    EXPECT_EQ(s.compute, 30u);
    EXPECT_EQ(s.comm, 20u);
    EXPECT_EQ(s.hidden, 10u);
    EXPECT_EQ(s.exposed, 10u);
    EXPECT_EQ(s.idle, 10u);  // [40,50)
    EXPECT_EQ(s.compute_records, 3);
    EXPECT_EQ(s.comm_records, 1);
}

TEST(Timeline, ClippedToWindow) {
    const std::vector<TimelineRecord> r = {rec(0, 100, true), rec(90, 200, false), rec(300, 400, false)};
    const TimelineSummary s = summarize_timeline(r, 50, 150);
    EXPECT_EQ(s.window, 100u);
    EXPECT_EQ(s.comm, 50u);
    EXPECT_EQ(s.compute, 60u);
    EXPECT_EQ(s.hidden, 10u);
    EXPECT_EQ(s.exposed, 40u);
    EXPECT_EQ(s.idle, 0u);
    EXPECT_EQ(s.compute_records, 1);  // the record past the window is not counted
}

TEST(Timeline, RandomAgainstBruteForce) {
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 200; trial++) {
        std::vector<TimelineRecord> r;
        const int n = (int)(rng() % 12);
        for (int i = 0; i < n; i++) {
            const uint64_t a = rng() % 300, len = 1 + rng() % 60;
            r.push_back(rec(a, a + len, rng() % 3 == 0, rng() % 3));
        }
        const uint64_t lo = rng() % 100, hi = lo + rng() % 300;
        uint64_t compute = 0, comm = 0, hidden = 0, idle = 0;
        for (uint64_t t = lo; t < hi; t++) {
            bool c = false, m = false;
            for (const TimelineRecord& x : r)
                if (x.start <= t && t < x.end) (x.comm ? m : c) = true;
            compute += c, comm += m, hidden += c && m, idle += !c && !m;
        }
        const TimelineSummary s = summarize_timeline(r, lo, hi);
        ASSERT_EQ(s.compute, compute) << "trial " << trial;
        ASSERT_EQ(s.comm, comm) << "trial " << trial;
        ASSERT_EQ(s.hidden, hidden) << "trial " << trial;
        ASSERT_EQ(s.exposed, comm - hidden) << "trial " << trial;
        ASSERT_EQ(s.idle, idle) << "trial " << trial;
    }
}

TEST(Timeline, TotalsLargestFirst) {
    std::vector<TimelineRecord> r = {rec(0, 10, false), rec(10, 15, false), rec(20, 50, true)};
    r[1].name = "layernorm";
    const auto t = timeline_totals(r, 0, 100);
    ASSERT_EQ(t.size(), 3u);
    EXPECT_EQ(t[0].name, "ncclDevKernel");
    EXPECT_EQ(t[0].ns, 30u);
    EXPECT_TRUE(t[0].comm);
    EXPECT_EQ(t[1].name, "gemm");
    EXPECT_EQ(t[2].name, "layernorm");
}

TEST(Timeline, ChromeTraceIsWritten) {
    const std::string path = testing::TempDir() + "timeline_test.json";
    std::vector<TimelineRecord> r = {rec(1000, 3000, false), rec(2000, 2500, true)};
    r[0].name = "say \"hi\"";
    ASSERT_TRUE(write_chrome_trace(path, r, 3, 1000, {{"step 6", 1000}}));
    std::ifstream f(path);
    std::stringstream text;
    text << f.rdbuf();
    const std::string s = text.str();
    EXPECT_NE(s.find("\"name\":\"say \\\"hi\\\"\""), std::string::npos);
    EXPECT_NE(s.find("\"pid\":3"), std::string::npos);
    EXPECT_NE(s.find("\"ts\":1.000,\"dur\":0.500"), std::string::npos);  // the comm record, 1 us after t0
    EXPECT_NE(s.find("\"name\":\"step 6\""), std::string::npos);
    std::remove(path.c_str());
    EXPECT_FALSE(write_chrome_trace("/nonexistent-dir/x.json", r, 0, 0, {}));
}

TEST(Timeline, KernelNamesShortened) {
    // void matmul_hopper::dgelu_kernel<128>(int, float*)
    EXPECT_EQ(cupti_trace_detail::short_name("_ZN13matmul_hopper12dgelu_kernelILi128EEEviPf"),
              "matmul_hopper::dgelu_kernel");
    EXPECT_EQ(cupti_trace_detail::short_name("ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
              "ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
}
