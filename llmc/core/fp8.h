// The two 8-bit floating-point formats of Hopper's tensor cores (OCP 8-bit floating point, as NVIDIA's E4M3 and
// E5M2 and cuda_fp8.h): their bit layouts, their largest finite values, the reference rounding every FP8 kernel is
// checked against (round to nearest, ties to even, saturating to the largest finite value as the kernels' satfinite
// conversions do; NaN stays NaN), and the per-tensor scale that maps a tensor's amax near the top of a format.
//   E4M3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN; largest 448 = 1.75 * 2^8;
//         smallest normal 2^-6, subnormals down to 2^-9. For activations and weights (precision over range).
//   E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits; infinities and NaNs as in IEEE; largest 57344 = 1.75 * 2^15;
//         smallest normal 2^-14, subnormals down to 2^-16. For gradients (range over precision).
// Host and device; the reference is plain C++ (the tests and the CPU side use it). Micikevicius et al., "FP8 Formats
// for Deep Learning" (2022).
#pragma once

#include <cmath>
#include <cstdint>

#include <math.h>  // fmaxf on the host

#if defined(__CUDACC__)
#define LLMC_FP8_HD __host__ __device__
#else
#define LLMC_FP8_HD
#endif

enum class Fp8Format { E4M3, E5M2 };
// What a descale covers: the whole tensor, or blocks of a K-major GEMM operand (llmc/kernels/fp8/block_cast.cuh): 1x128
// along K (activations, gradients) or 128x128 (weights), as cuBLASLt's VEC128_32F and BLK128x128_32F scale modes.
enum class Fp8Granularity { kTensor, k1x128, k128x128 };

// Floats between two descales an FP8 GEMM reads: cuBLASLt refuses (NOT_SUPPORTED, every algorithm) a scale pointer
// that is not 16-byte aligned, so arrays of descales keep each in its own 16 bytes.
constexpr int kFp8DescaleStride = 4;

struct Fp8Traits {
    int exponent_bits, mantissa_bits, bias;
    double max_finite;  // the largest finite magnitude
    bool has_inf;
};
LLMC_FP8_HD inline constexpr Fp8Traits fp8_traits(Fp8Format f) {
    return f == Fp8Format::E4M3 ? Fp8Traits{4, 3, 7, 448.0, false} : Fp8Traits{5, 2, 15, 57344.0, true};
}
LLMC_FP8_HD inline constexpr const char* fp8_name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }

// The value of a code (NaN for NaN codes; +-inf for E5M2's infinities).
LLMC_FP8_HD inline double fp8_decode(uint8_t code, Fp8Format f) {
    const Fp8Traits t = fp8_traits(f);
    const int sign = code >> 7, e = (code >> t.mantissa_bits) & ((1 << t.exponent_bits) - 1),
              m = code & ((1 << t.mantissa_bits) - 1);
    const int e_max = (1 << t.exponent_bits) - 1;
    double v;
    if (f == Fp8Format::E4M3 && e == e_max && m == (1 << t.mantissa_bits) - 1) return NAN;
    if (f == Fp8Format::E5M2 && e == e_max) {
        if (m != 0) return NAN;
        v = INFINITY;
    } else if (e == 0) {
        v = std::ldexp((double)m, 1 - t.bias - t.mantissa_bits);  // subnormal
    } else {
        v = std::ldexp((double)((1 << t.mantissa_bits) + m), e - t.bias - t.mantissa_bits);
    }
    return sign ? -v : v;
}

// The code nearest to x (ties to the even code), magnitudes over the largest finite value saturated to it (also
// infinities), NaN to a NaN code. Exact in double: every FP8 value and every midpoint between two is a double.
LLMC_FP8_HD inline uint8_t fp8_encode(double x, Fp8Format f) {
    const Fp8Traits t = fp8_traits(f);
    if (std::isnan(x)) return 0x7F;  // a NaN code in both formats (as cuda_fp8.h writes it)
    const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
    double a = std::fabs(x);
    if (a >= t.max_finite) return sign | (f == Fp8Format::E4M3 ? 0x7E : 0x7B);  // satfinite
    // the quantum at a's binade (subnormals share the smallest normal binade's quantum)
    const int min_exp = 1 - t.bias;  // the smallest normal's exponent
    int exp = a > 0 ? (int)std::floor(std::log2(a)) : min_exp;
    if (exp < min_exp) exp = min_exp;
    // log2 can be off by one near powers of two: correct it so that 2^exp <= a < 2^(exp+1) (or a subnormal)
    while (exp > min_exp && std::ldexp(1.0, exp) > a) exp--;
    while (std::ldexp(1.0, exp + 1) <= a) exp++;
    const double quantum = std::ldexp(1.0, exp - t.mantissa_bits);
    double q = a / quantum;  // exact: a power-of-two division
    double r = std::floor(q);
    const double frac = q - r;
    if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
    const double v = r * quantum;
    if (v >= t.max_finite) return sign | (f == Fp8Format::E4M3 ? 0x7E : 0x7B);
    // v = r * 2^(exp - mantissa_bits); r in [0, 2^(mantissa_bits + 1)]: rebuild the code
    int m_full = (int)r, e_field;
    if (exp == min_exp && m_full < (1 << t.mantissa_bits)) {
        e_field = 0;  // subnormal (or zero)
    } else {
        e_field = exp + t.bias;
        if (m_full == (2 << t.mantissa_bits)) m_full >>= 1, e_field++;  // rounded up into the next binade
        m_full -= 1 << t.mantissa_bits;
    }
    return sign | (uint8_t)((e_field << t.mantissa_bits) | m_full);
}

// The per-tensor scale that maps amax to the format's largest value over 2^margin (x is cast as x * scale, the GEMM
// multiplies by 1 / scale): a power of two (at most 2^126, at least 2^-126), so scaling itself rounds nothing. amax
// 0, inf or NaN: the previous scale.
LLMC_FP8_HD inline float fp8_scale_from_amax(float amax, Fp8Format f, int margin, float previous) {
    if (!(amax > 0.f) || std::isinf(amax)) return previous;
    const double target = fp8_traits(f).max_finite / amax;
    int e;
    std::frexp(target, &e);  // target = m * 2^e, m in [0.5, 1): floor(log2(target)) = e - 1, exactly on every device
    // within 2^-126 .. 2^126: the scale and its reciprocal stay normal floats (an amax near 0 would give inf)
    const int exponent = e - 1 - margin < -126 ? -126 : e - 1 - margin > 126 ? 126 : e - 1 - margin;
    return (float)std::ldexp(1.0, exponent);
}

// The largest amax of a ring of H (fmaxf: a NaN entry does not win; an empty ring gives 0).
LLMC_FP8_HD inline float fp8_window_max(const float* history, int H) {
    float window = 0.f;
    for (int i = 0; i < H; i++) window = fmaxf(window, history[i]);
    return window;
}

// Delayed scaling (llmc/kernels/fp8/scaling.cuh), one tensor after step `step`: its amax into the ring `history` (H
// floats) at step % H and zeroed for the next step; the scale from the ring's largest amax (else kept), its descale.
LLMC_FP8_HD inline void fp8_update_one(float* history, int H, int step, float* amax, Fp8Format format, int margin,
                                       float* scale, float* descale) {
    history[step % H] = *amax;
    *amax = 0.f;
    *scale = fp8_scale_from_amax(fp8_window_max(history, H), format, margin, *scale);
    *descale = (float)(1.0 / (double)*scale);  // in double: exact, and untouched by --use_fast_math
}
