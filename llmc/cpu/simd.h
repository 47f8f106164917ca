// The CPU engine's vectors: one fp32 vector type as wide as the target allows (AVX-512: 16 lanes, AVX/AVX2: 8,
// otherwise 4), written with GCC/Clang vector extensions so one source serves every x86 level (and other
// architectures) the compiler is told about (-march=native in the Makefile). Loads and stores are unaligned;
// exp and tanh are polynomial approximations good to a few ulp (exp) and ~1e-7 absolute (tanh), which the
// trainer's losses do not notice (tests/cpu/test_cpu_engine.cpp checks against the reference and PyTorch).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace cpu {

#if defined(__AVX512F__)
constexpr int kVec = 16;
constexpr const char* kVecName = "AVX-512 (16 floats)";
#elif defined(__AVX__)
constexpr int kVec = 8;
constexpr const char* kVecName = "AVX (8 floats)";
#else
constexpr int kVec = 4;
constexpr const char* kVecName = "128-bit (4 floats)";
#endif

typedef float vfloat __attribute__((vector_size(kVec * sizeof(float))));
typedef int32_t vint __attribute__((vector_size(kVec * sizeof(int32_t))));

inline vfloat vload(const float* p) {
    vfloat v;
    memcpy(&v, p, sizeof(v));
    return v;
}
inline void vstore(float* p, vfloat v) { memcpy(p, &v, sizeof(v)); }
inline vfloat vset1(float x) { return x - vfloat{}; }  // x - 0 is x for every x (x + 0 is not, for -0)
inline float vsum(vfloat v) {
    float s = 0.0f;
    for (int i = 0; i < kVec; i++) s += v[i];
    return s;
}
inline vfloat vmax(vfloat a, vfloat b) { return a > b ? a : b; }
inline vfloat vmin(vfloat a, vfloat b) { return a < b ? a : b; }
inline float vmax_lanes(vfloat v) {
    float m = v[0];
    for (int i = 1; i < kVec; i++) m = v[i] > m ? v[i] : m;
    return m;
}

// Transposes the kVec x kVec matrix whose rows are r[0..kVec): log2(kVec) stages, each swapping the off-diagonal
// blocks of size d between rows i and i + d (one two-input shuffle per row: vpermt2ps on AVX-512).
inline void vtranspose(vfloat* r) {
#if defined(__clang__)
    float m[kVec][kVec];
    for (int i = 0; i < kVec; i++) vstore(m[i], r[i]);
    for (int i = 0; i < kVec; i++)
        for (int l = 0; l < kVec; l++) r[i][l] = m[l][i];
#else
#pragma GCC unroll 4
    for (int d = 1; d < kVec; d *= 2) {
        vint lo, hi;
#pragma GCC unroll 16
        for (int l = 0; l < kVec; l++) {
            lo[l] = (l & d) ? kVec + l - d : l;
            hi[l] = (l & d) ? kVec + l : l + d;
        }
#pragma GCC unroll 16
        for (int i = 0; i < kVec; i++) {
            if (i & d) continue;
            const vfloat a = r[i], b = r[i + d];
            r[i] = __builtin_shuffle(a, b, lo);
            r[i + d] = __builtin_shuffle(a, b, hi);
        }
    }
#endif
}

// exp(x) lane-wise: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial (Cephes' expf coefficients),
// 2^n built in the exponent bits. Inputs below -87.3 give 0 (denormals flushed), above 88.3 are clamped.
inline vfloat vexp(vfloat x) {
    x = vmin(x, vset1(88.3762626647949f));
    const vfloat lo = vset1(-87.3365478515625f);
    const auto underflow = x < lo;
    x = vmax(x, lo);
    // round to nearest: floor(x * log2(e) + 0.5)
    vfloat fx = x * 1.44269504088896341f + 0.5f;
    vint fi = __builtin_convertvector(fx, vint);  // truncates toward zero
    vfloat tf = __builtin_convertvector(fi, vfloat);
    tf = tf > fx ? tf - 1.0f : tf;  // floor
    fi = __builtin_convertvector(tf, vint);
    vfloat r = x - tf * 0.693359375f;
    r = r - tf * -2.12194440e-4f;
    vfloat y = vset1(1.9875691500e-4f);
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * (r * r) + r + 1.0f;
    const vint bits = (fi + 127) << 23;
    vfloat pow2n;
    memcpy(&pow2n, &bits, sizeof(pow2n));
    y = y * pow2n;
    return underflow ? vset1(0.0f) : y;
}

// tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)); absolute error ~1e-7 (what GELU needs), exact +-1 for |x| > 9.
inline vfloat vtanh(vfloat x) {
    const vfloat ax = vmin(x < 0.0f ? -x : x, vset1(9.0f));
    const vfloat t = 1.0f - 2.0f / (vexp(ax + ax) + 1.0f);
    return x < 0.0f ? -t : t;
}

inline float sexp(float x) { return vexp(vset1(x))[0]; }

}  // namespace cpu
