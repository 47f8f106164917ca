// The host reference of FP8 with a scale per block (llmc/kernels/fp8/block_cast.cuh), for test_fp8_blocks and
// test_fp8_linear: each block's scale the power of two its own amax gives (fp8_scale_from_amax, margin 0), every
// value fp8_encode(x * scale), the descale 1 / scale at its place in cuBLASLt's grid (NaN for a block holding a value
// that is not finite), and the dequantized values decode(code) / scale: what a block-scaled GEMM multiplies.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "llmc/core/fp8.h"
#include "llmc/kernels/fp8/block_cast.cuh"

// x (rows, cols) in blocks b (1x128 along the columns, or 128x128): the codes, the descale grid (padding = pad) and,
// if deq, the dequantized values.
inline void fp8_block_quantize_host(const std::vector<float>& x, int rows, int cols, Fp8Granularity b, Fp8Format F,
                                    float pad, std::vector<uint8_t>* codes, std::vector<float>* descales,
                                    std::vector<double>* deq) {
    const size_t ld = fp8_block_ld(rows, cols, b);
    descales->assign(fp8_block_descales(rows, cols, b), pad);
    codes->resize(x.size());
    if (deq) deq->resize(x.size());
    const int band = b == Fp8Granularity::k1x128 ? 1 : kFp8Block;
    for (int r0 = 0; r0 < rows; r0 += band)
        for (int c0 = 0; c0 < cols; c0 += kFp8Block) {
            const int r1 = std::min(rows, r0 + band), c1 = std::min(cols, c0 + kFp8Block);
            float amax = 0.f;
            bool finite = true;
            for (int r = r0; r < r1; r++)
                for (int c = c0; c < c1; c++) {
                    const float v = x[(size_t)r * cols + c];
                    amax = std::fmax(amax, std::fabs(v)), finite = finite && std::isfinite(v);
                }
            const float scale = fp8_scale_from_amax(amax, F, 0, 1.f);
            (*descales)[fp8_block_index(r0, c0, ld, b)] = finite ? 1.f / scale : NAN;
            for (int r = r0; r < r1; r++)
                for (int c = c0; c < c1; c++) {
                    const size_t i = (size_t)r * cols + c;
                    (*codes)[i] = fp8_encode((double)x[i] * scale, F);
                    if (deq) (*deq)[i] = fp8_decode((*codes)[i], F) / scale;
                }
        }
}

// What a GEMM multiplies for x cast in blocks b, in x's layout.
inline std::vector<double> fp8_block_dequantized(const std::vector<float>& x, int rows, int cols, Fp8Granularity b,
                                                 Fp8Format F) {
    std::vector<uint8_t> codes;
    std::vector<float> descales;
    std::vector<double> deq;
    fp8_block_quantize_host(x, rows, cols, b, F, 0.f, &codes, &descales, &deq);
    return deq;
}

// The same for x cast as its transpose is (1x128 blocks along x's rows: a weight gradient's operand), in x's layout.
inline std::vector<double> fp8_block_dequantized_transposed(const std::vector<float>& x, int rows, int cols,
                                                            Fp8Format F) {
    std::vector<float> xT(x.size());
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) xT[(size_t)c * rows + r] = x[(size_t)r * cols + c];
    const std::vector<double> dT = fp8_block_dequantized(xT, cols, rows, Fp8Granularity::k1x128, F);
    std::vector<double> d(x.size());
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) d[(size_t)r * cols + c] = dT[(size_t)c * rows + r];
    return d;
}
