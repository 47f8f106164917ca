// Learning-rate schedules (llmc/optimizer/schedulers.h), against the formulas in its header written out here
// in double precision. Tolerance: 1e-6 relative (the scheduler returns float).
#include <gtest/gtest.h>

#include <cmath>

#include "llmc/optimizer/schedulers.h"

namespace {

LRScheduler make(LRSchedule type, int warmup = 10, int total = 110, float max_lr = 6e-4f, float frac = 0.1f) {
    LRScheduler s;
    s.type = type;
    s.max_lr = max_lr;
    s.warmup_steps = warmup;
    s.total_steps = total;
    s.final_lr_frac = frac;
    return s;
}

void expect_close(float got, double want, const std::string& what) {
    EXPECT_NEAR(got, want, 1e-6 * std::fabs(want) + 1e-12) << what;
}

}  // namespace

TEST(Schedulers, ParseNames) {
    LRSchedule s;
    ASSERT_TRUE(parse_lr_schedule("cosine", &s));
    EXPECT_EQ(s, LRSchedule::Cosine);
    ASSERT_TRUE(parse_lr_schedule("linear", &s));
    EXPECT_EQ(s, LRSchedule::Linear);
    ASSERT_TRUE(parse_lr_schedule("constant", &s));
    EXPECT_EQ(s, LRSchedule::Constant);
    ASSERT_TRUE(parse_lr_schedule("wsd", &s));
    EXPECT_EQ(s, LRSchedule::WSD);
    EXPECT_FALSE(parse_lr_schedule("Cosine", &s));
    EXPECT_FALSE(parse_lr_schedule("", &s));
    EXPECT_FALSE(parse_lr_schedule("step", &s));
    for (LRSchedule t : {LRSchedule::Cosine, LRSchedule::Linear, LRSchedule::Constant, LRSchedule::WSD}) {
        LRSchedule back;
        ASSERT_TRUE(parse_lr_schedule(lr_schedule_name(t), &back));
        EXPECT_EQ(back, t);
    }
}

TEST(Schedulers, WarmupIsLinearFromMaxOverWarmup) {
    for (LRSchedule t : {LRSchedule::Cosine, LRSchedule::Linear, LRSchedule::Constant, LRSchedule::WSD}) {
        LRScheduler s = make(t);
        for (int step = 0; step < 10; step++) {
            expect_close(s.lr_at(step), 6e-4 * (step + 1) / 10, std::string(lr_schedule_name(t)) + " step " + std::to_string(step));
        }
    }
}

TEST(Schedulers, Cosine) {
    LRScheduler s = make(LRSchedule::Cosine);
    const double max = 6e-4, min = 6e-5;
    for (int step = 10; step <= 120; step++) {
        double p = std::min(1.0, (step - 10) / 100.0);
        expect_close(s.lr_at(step), min + (max - min) * 0.5 * (1 + std::cos(3.141592653589793 * p)), "step " + std::to_string(step));
    }
    expect_close(s.lr_at(10), max, "start of decay");
    expect_close(s.lr_at(60), (max + min) / 2, "halfway");
    expect_close(s.lr_at(110), min, "end");
    expect_close(s.lr_at(100000), min, "long after the end");
    for (int step = 10; step < 110; step++) EXPECT_LE(s.lr_at(step + 1), s.lr_at(step)) << step;
}

TEST(Schedulers, Linear) {
    LRScheduler s = make(LRSchedule::Linear);
    expect_close(s.lr_at(10), 6e-4, "start");
    expect_close(s.lr_at(35), 6e-4 - 5.4e-4 * 0.25, "quarter");
    expect_close(s.lr_at(60), 3.3e-4, "halfway");
    expect_close(s.lr_at(110), 6e-5, "end");
    expect_close(s.lr_at(500), 6e-5, "past the end");
}

TEST(Schedulers, Constant) {
    LRScheduler s = make(LRSchedule::Constant);
    for (int step : {10, 50, 109, 110, 1000}) expect_close(s.lr_at(step), 6e-4, std::to_string(step));
}

TEST(Schedulers, WSD) {
    LRScheduler s = make(LRSchedule::WSD, 10, 100);  // decay over the last 20 steps: 80..100
    const double max = 6e-4, min = 6e-5;
    for (int step = 10; step < 80; step++) expect_close(s.lr_at(step), max, "stable " + std::to_string(step));
    for (int step = 80; step <= 100; step++) {
        double d = (step - 80) / 20.0;
        expect_close(s.lr_at(step), min + (max - min) * (1 - std::sqrt(d)), "decay " + std::to_string(step));
    }
    expect_close(s.lr_at(85), min + (max - min) * 0.5, "sqrt(1/4)");
    expect_close(s.lr_at(100), min, "end");
    expect_close(s.lr_at(200), min, "past the end");
}

TEST(Schedulers, EdgeCases) {
    // No warmup: step 0 is already on the schedule.
    expect_close(make(LRSchedule::Cosine, 0, 100).lr_at(0), 6e-4, "cosine without warmup");
    // Warmup as long as the run: after it, the end value, never NaN or a division by zero.
    LRScheduler s = make(LRSchedule::Cosine, 100, 100);
    expect_close(s.lr_at(99), 6e-4, "end of warmup");
    expect_close(s.lr_at(100), 6e-5, "after");
    EXPECT_FALSE(std::isnan(make(LRSchedule::Linear, 50, 10).lr_at(60)));
    // A tiny WSD run still decays over at least one step.
    LRScheduler w = make(LRSchedule::WSD, 0, 3);
    expect_close(w.lr_at(1), 6e-4, "stable");
    expect_close(w.lr_at(2), 6e-4, "decay start");
    expect_close(w.lr_at(3), 6e-5, "end");
    // final_lr_frac = 0 decays to zero.
    expect_close(make(LRSchedule::Cosine, 0, 10, 1e-3f, 0.0f).lr_at(10), 0.0, "to zero");
}

TEST(Schedulers, InvalidSettingsAreReported) {
    EXPECT_EQ(make(LRSchedule::Cosine).invalid_reason(), "");
    EXPECT_NE(make(LRSchedule::Cosine, -1).invalid_reason(), "");
    EXPECT_NE(make(LRSchedule::Cosine, 10, 0).invalid_reason(), "");
    EXPECT_NE(make(LRSchedule::Cosine, 10, 100, -1.0f).invalid_reason(), "");
    EXPECT_NE(make(LRSchedule::Cosine, 10, 100, NAN).invalid_reason(), "");
    EXPECT_NE(make(LRSchedule::Cosine, 10, 100, 1e-3f, 1.5f).invalid_reason(), "");
}
