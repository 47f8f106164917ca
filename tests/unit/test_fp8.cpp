// The FP8 reference (llmc/core/fp8.h) that every FP8 kernel is checked against, exhaustively in both formats: every
// code decodes to the value its bits say (spot values from the formats' definitions) and encodes back to itself; the
// midpoint between two neighbours goes to the even code, and a hair either side to the nearer; magnitudes over the
// largest finite value (infinities too) saturate to it; NaN stays NaN; the scale from an amax is a power of two
// that maps the amax into the format below its largest value by the margin; and delayed scaling's update (the ring
// of amaxes, the scale from its largest, an empty or NaN window keeping the scale).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "llmc/core/fp8.h"

namespace {

TEST(Fp8, SpotValuesFromTheDefinitions) {
    EXPECT_EQ(fp8_decode(0x38, Fp8Format::E4M3), 1.0);
    EXPECT_EQ(fp8_decode(0x3C, Fp8Format::E5M2), 1.0);
    EXPECT_EQ(fp8_decode(0x7E, Fp8Format::E4M3), 448.0);
    EXPECT_EQ(fp8_decode(0x7B, Fp8Format::E5M2), 57344.0);
    EXPECT_EQ(fp8_decode(0x01, Fp8Format::E4M3), std::ldexp(1.0, -9));   // the smallest subnormal
    EXPECT_EQ(fp8_decode(0x08, Fp8Format::E4M3), std::ldexp(1.0, -6));   // the smallest normal
    EXPECT_EQ(fp8_decode(0x01, Fp8Format::E5M2), std::ldexp(1.0, -16));
    EXPECT_EQ(fp8_decode(0x04, Fp8Format::E5M2), std::ldexp(1.0, -14));
    EXPECT_EQ(fp8_decode(0xC0, Fp8Format::E4M3), -2.0);
    EXPECT_TRUE(std::isnan(fp8_decode(0x7F, Fp8Format::E4M3)));
    EXPECT_TRUE(std::isnan(fp8_decode(0xFF, Fp8Format::E4M3)));
    EXPECT_TRUE(std::isinf(fp8_decode(0x7C, Fp8Format::E5M2)));
    EXPECT_TRUE(std::isnan(fp8_decode(0x7D, Fp8Format::E5M2)));
    EXPECT_EQ(fp8_decode(0x7E - 1, Fp8Format::E4M3), 416.0);
    EXPECT_EQ(fp8_encode(1.0, Fp8Format::E4M3), 0x38);
    EXPECT_EQ(fp8_encode(-0.0, Fp8Format::E4M3), 0x80);
}

// The finite codes of a format with non-negative values, in increasing order.
std::vector<int> positive_codes(Fp8Format f) {
    std::vector<int> codes;
    for (int c = 0; c < 128; c++) {
        const double v = fp8_decode((uint8_t)c, f);
        if (std::isfinite(v)) codes.push_back(c);
    }
    return codes;
}

TEST(Fp8, EveryCodeRoundTripsAndMidpointsGoToEven) {
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
        SCOPED_TRACE(fp8_name(f));
        int finite = 0;
        for (int c = 0; c < 256; c++) {
            const double v = fp8_decode((uint8_t)c, f);
            if (std::isnan(v)) {
                EXPECT_TRUE(std::isnan(fp8_decode(fp8_encode(v, f), f)));
                continue;
            }
            if (std::isinf(v)) continue;
            finite++;
            EXPECT_EQ(fp8_encode(v, f), c) << "code " << c << " value " << v;
        }
        EXPECT_EQ(finite, f == Fp8Format::E4M3 ? 254 : 248);
        const std::vector<int> codes = positive_codes(f);
        for (size_t i = 0; i + 1 < codes.size(); i++) {
            const double lo = fp8_decode((uint8_t)codes[i], f), hi = fp8_decode((uint8_t)codes[i + 1], f);
            ASSERT_LT(lo, hi);
            const double mid = (lo + hi) / 2, hair = (hi - lo) / 1024;
            const int even = (codes[i] & 1) == 0 ? codes[i] : codes[i + 1];
            EXPECT_EQ(fp8_encode(mid, f), even) << lo << " .. " << hi;
            EXPECT_EQ(fp8_encode(mid - hair, f), codes[i]) << lo << " .. " << hi;
            EXPECT_EQ(fp8_encode(mid + hair, f), codes[i + 1]) << lo << " .. " << hi;
            EXPECT_EQ(fp8_encode(-mid - hair, f), codes[i + 1] | 0x80) << lo << " .. " << hi;
        }
    }
}

TEST(Fp8, SaturationAndNaN) {
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
        const double max = fp8_traits(f).max_finite;
        const uint8_t max_code = f == Fp8Format::E4M3 ? 0x7E : 0x7B;
        EXPECT_EQ(fp8_decode(max_code, f), max);
        for (double x : {max, max * 1.01, max * 1.5, 1e30, (double)INFINITY}) {
            EXPECT_EQ(fp8_encode(x, f), max_code) << x;
            EXPECT_EQ(fp8_encode(-x, f), max_code | 0x80) << x;
        }
        EXPECT_TRUE(std::isnan(fp8_decode(fp8_encode(NAN, f), f)));
        const double tiny = fp8_decode(0x01, f);
        EXPECT_EQ(fp8_encode(tiny / 2, f), 0x00);           // a tie between 0 and the smallest: to 0 (even)
        EXPECT_EQ(fp8_encode(tiny * 0.51, f), 0x01);
        EXPECT_EQ(fp8_encode(1e-30, f), 0x00);
    }
}

TEST(Fp8, ScalesArePowersOfTwoBelowTheTop) {
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
        for (float amax : {1e-6f, 0.01f, 0.7f, 1.f, 3.3f, 448.f, 1000.f, 6e4f}) {
            for (int margin : {0, 1, 3}) {
                const float s = fp8_scale_from_amax(amax, f, margin, 1.f);
                int e;
                EXPECT_EQ(std::frexp(s, &e), 0.5f) << "not a power of two: " << s;
                EXPECT_LE((double)amax * s, fp8_traits(f).max_finite / std::ldexp(1.0, margin));
                EXPECT_GT((double)amax * s * 2, fp8_traits(f).max_finite / std::ldexp(1.0, margin));
            }
        }
        for (float tiny : {1e-37f, 1e-40f, 1e-45f}) {  // near 0 (subnormal too): clamped, never inf
            const float s = fp8_scale_from_amax(tiny, f, 0, 1.f);
            EXPECT_EQ(s, std::ldexp(1.f, 126)) << tiny;
            EXPECT_TRUE(std::isnormal(1.f / s));
        }
        EXPECT_TRUE(std::isnormal(fp8_scale_from_amax(3e38f, f, 3, 1.f)));  // near float's top: small, normal
        EXPECT_EQ(fp8_scale_from_amax(0.f, f, 0, 0.25f), 0.25f);
        EXPECT_EQ(fp8_scale_from_amax(NAN, f, 0, 0.25f), 0.25f);
        EXPECT_EQ(fp8_scale_from_amax(INFINITY, f, 0, 0.25f), 0.25f);
    }
}

TEST(Fp8, DelayedScalingTakesTheRingsLargestAmax) {
    const int H = 4;
    float history[H] = {0, 0, 0, 0}, amax = 0.f, scale = 1.f, descale = 1.f;
    fp8_update_one(history, H, 0, &amax, Fp8Format::E4M3, 0, &scale, &descale);  // nothing seen yet: kept
    EXPECT_EQ(scale, 1.f);
    const float seen[] = {2.f, 100.f, 3.f, 0.5f, 1.f, 0.25f};  // step 1.. : 100 falls out of the window at step 6
    for (int step = 1; step <= 6; step++) {
        amax = seen[step - 1];
        fp8_update_one(history, H, step, &amax, Fp8Format::E4M3, 1, &scale, &descale);
        EXPECT_EQ(amax, 0.f) << "the step's amax is zeroed for the next";
        EXPECT_EQ(history[step % H], seen[step - 1]);
        float window = 0;
        for (float h : history) window = std::max(window, h);
        EXPECT_EQ(scale, fp8_scale_from_amax(window, Fp8Format::E4M3, 1, 0.f)) << "step " << step;
        EXPECT_EQ(descale * scale, 1.f);
    }
    EXPECT_EQ(scale, fp8_scale_from_amax(3.f, Fp8Format::E4M3, 1, 0.f));  // 100 is gone
    amax = NAN;  // a NaN step (it takes the 3's place): recorded, ignored by the window, whose largest is now 1
    fp8_update_one(history, H, 7, &amax, Fp8Format::E4M3, 1, &scale, &descale);
    EXPECT_TRUE(std::isnan(history[7 % H]));
    EXPECT_EQ(scale, fp8_scale_from_amax(1.f, Fp8Format::E4M3, 1, 0.f));
    for (float& h : history) h = NAN;  // a window of NaNs only: the scale stays
    const float before = scale;
    amax = NAN;
    fp8_update_one(history, H, 8, &amax, Fp8Format::E5M2, 0, &scale, &descale);
    EXPECT_EQ(scale, before);
}

}  // namespace
