// Floats to FP8 bytes, for every kernel that writes an FP8 operand (the casts, the LayerNorm forward): round to
// nearest even, saturating (cvt.rn.satfinite: an infinite value to the largest finite, a NaN to NaN), so the bytes
// equal llmc/core/fp8.h's fp8_encode; the first value in the lowest byte (the tensor's order in memory).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "llmc/core/fp8.h"

template <Fp8Format F>
__device__ __forceinline__ uint16_t fp8x2(float a, float b) {
    constexpr __nv_fp8_interpretation_t kind = F == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
    return (uint16_t)__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kind);
}

template <Fp8Format F>
__device__ __forceinline__ uint32_t fp8x4(float a, float b, float c, float d) {
    return (uint32_t)fp8x2<F>(a, b) | ((uint32_t)fp8x2<F>(c, d) << 16);
}
