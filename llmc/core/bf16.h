// bfloat16 <-> float on the host, by bit manipulation (no CUDA types), so checkpoint files,
// CPU tests and GPU code all agree on the same rounding; and IEEE half -> float, for the F16
// tensors of Hugging Face files.
// bf16 is the top 16 bits of an IEEE float: 1 sign, 8 exponent, 7 mantissa bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

// Round to nearest, ties to even (what PyTorch and __float2bfloat16_rn do). NaN stays NaN
// (quiet bit forced, so a NaN whose payload sits in the low bits is not rounded to Inf);
// values that round past the largest bf16 become Inf, as IEEE rounding says.
inline uint16_t float_to_bf16_bits(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
        return (uint16_t)((bits >> 16) | 0x0040u);
    }
    // Adding 0x7fff plus the lowest kept bit rounds up exactly when the dropped half is
    // above 0x8000, or equal to it with an odd kept part.
    uint32_t lsb = (bits >> 16) & 1u;
    bits += 0x7fffu + lsb;
    return (uint16_t)(bits >> 16);
}

inline float bf16_bits_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

// A float rounded to the nearest bf16 value (what a bf16 tensor holding it stores).
inline float round_to_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

// Whole arrays, for checkpoints and host <-> device copies of bf16 tensors.
inline void floats_to_bf16_bits(const float* in, uint16_t* out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = float_to_bf16_bits(in[i]);
}
inline void bf16_bits_to_floats(const uint16_t* in, float* out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = bf16_bits_to_float(in[i]);
}

// IEEE half (1 sign, 5 exponent, 10 mantissa bits) -> float. Exact: every half is a float. Inf and NaN
// (payload included) carry over; subnormal halves become normal floats.
inline float fp16_bits_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu, bits;
    if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
    } else if (mantissa == 0) {
        bits = sign;
    } else {  // subnormal: mantissa * 2^-24; shift the leading 1 up to the implicit bit
        uint32_t shift = 0;
        while (!(mantissa & 0x400u)) { mantissa <<= 1; shift++; }
        bits = sign | ((113 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}
