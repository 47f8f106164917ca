// bfloat16 <-> float on the host, by bit manipulation (no CUDA types), so checkpoint files,
// CPU tests and GPU code all agree on the same rounding.
// bf16 is the top 16 bits of an IEEE float: 1 sign, 8 exponent, 7 mantissa bits.
#pragma once

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
