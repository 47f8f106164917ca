// LLMC_FP8_BLOCKS=1 (docs/FP8.md, "d48's gap"): the blocks' linear layers with a scale per block instead of one per
// tensor. Every input and output gradient is cast in 1x128 blocks along its GEMM's K, y and yT each with its own
// blocks, in one pass (fp8_block_cast_transpose: the forward's input along C for the forward and along the rows for
// the weight gradient, likewise the output gradient); the weights in 128x128 blocks once per optimizer step, Wᵀ being
// W's bytes and grid transposed. The gradients are E4M3 (each block has its own range, DeepSeek-V3's and
// TransformerEngine's blockwise choice), every GEMM promoted (cuBLASLt's block-scaled GEMMs take no other). A block's
// scale comes from its own amax, so there is no history: -fp8h is refused with it. The producers still fold their
// amaxes into the per-tensor slots (unused here); the lm_head's forward (-fp8 2) keeps its per-tensor scales. fc's
// bias gradient is a column sum of its bf16 output gradient (the per-tensor cast took it as it read).
#pragma once

#include "llmc/kernels/column_sum.cuh"
#include "llmc/kernels/fp8/block_cast.cuh"
#include "llmc/kernels/fp8/cast_transpose.cuh"
#include "llmc/kernels/matmul/matmul_fp8.cuh"
#include "llmc/model/gpt2_fp8_layout.cuh"

namespace gpt2_fp8_blocks_detail {

using gpt2_fp8_detail::Dims;
using gpt2_fp8_detail::dims;
constexpr Fp8Granularity k1x128 = Fp8Granularity::k1x128, k128x128 = Fp8Granularity::k128x128;
constexpr Fp8Format kGrads = Fp8Format::E4M3;

// Floats of linear k's weight grids (W's, then Wᵀ's) and of its input's yT grid over `rows` rows; every grid a
// multiple of 4 floats, so each starts 16-byte aligned after the one before.
inline size_t weight_grids(int C, Fp8Linear k) {
    const Dims d = dims(C, k);
    return fp8_block_descales(d.out, d.in, k128x128) + fp8_block_descales(d.in, d.out, k128x128);
}
inline size_t input_grid(int C, int rows, Fp8Linear k) { return fp8_block_descales(dims(C, k).in, rows, k1x128); }
inline size_t layer_weight_grids(int C) {
    size_t n = 0;
    for (int k = 0; k < kFp8Linears; k++) n += weight_grids(C, (Fp8Linear)k);
    return n;
}
inline size_t layer_input_grids(int C, int rows) {
    size_t n = 0;
    for (int k = 0; k < kFp8Linears; k++) n += input_grid(C, rows, (Fp8Linear)k);
    return n;
}
inline float* weight_grid(const Fp8Layers& f, int l, Fp8Linear k) {
    float* g = f.grids.weights + (size_t)l * layer_weight_grids(f.C);
    for (int i = 0; i < k; i++) g += weight_grids(f.C, (Fp8Linear)i);
    return g;
}
inline float* weightT_grid(const Fp8Layers& f, int l, Fp8Linear k) {
    const Dims d = dims(f.C, k);
    return weight_grid(f, l, k) + fp8_block_descales(d.out, d.in, k128x128);
}
inline float* input_yT_grid(const Fp8Layers& f, int l, Fp8Linear k) {
    float* g = f.grids.inputs_T + (size_t)l * layer_input_grids(f.C, f.max_rows);
    for (int i = 0; i < k; i++) g += input_grid(f.C, f.max_rows, (Fp8Linear)i);
    return g;
}
// the work grids: a y operand of up to 4C columns (K), and dout's yT of up to 4C rows
inline size_t work_grid(int C, int rows, int i) {
    return i == 0 ? fp8_block_descales(rows, 4 * C, k1x128) : fp8_block_descales(4 * C, rows, k1x128);
}

}  // namespace gpt2_fp8_blocks_detail

// Floats of every grid for L layers of width C over up to max_rows rows.
inline size_t gpt2_fp8_block_grid_floats(int L, int C, int max_rows) {
    using namespace gpt2_fp8_blocks_detail;
    return (size_t)L * (layer_weight_grids(C) + layer_input_grids(C, max_rows)) + work_grid(C, max_rows, 0) +
           work_grid(C, max_rows, 1);
}

// The grids' pointers in a block of gpt2_fp8_block_grid_floats floats (16-byte aligned), zeroed: the padding
// entries of a grid are never written and a GEMM may read them.
inline void gpt2_fp8_block_grids_place(Fp8Layers* f, float* block) {
    using namespace gpt2_fp8_blocks_detail;
    cudaCheck(cudaMemset(block, 0, gpt2_fp8_block_grid_floats(f->L, f->C, f->max_rows) * sizeof(float)));
    f->grids.weights = block;
    f->grids.inputs_T = block + (size_t)f->L * layer_weight_grids(f->C);
    f->grids.work[0] = f->grids.inputs_T + (size_t)f->L * layer_input_grids(f->C, f->max_rows);
    f->grids.work[1] = f->grids.work[0] + work_grid(f->C, f->max_rows, 0);
}

// Layer l's four weights in 128x128 blocks: y with its grid, yT (Wᵀ) the same bytes and grid transposed.
inline void gpt2_fp8_blocks_cast_weights(const Fp8Layers& f, const GPT2Params& p, int l, cudaStream_t stream) {
    using namespace gpt2_fp8_blocks_detail;
    for (int k = 0; k < kFp8Linears; k++) {
        const Dims d = dims(f.C, (Fp8Linear)k);
        uint8_t* y = gpt2_fp8_detail::weight_y(f, l, (Fp8Linear)k);
        fp8_block_cast<Fp8Format::E4M3>(p(d.weight, l), d.out, d.in, k128x128, y, weight_grid(f, l, (Fp8Linear)k),
                                        stream);
        fp8_transpose(y, d.out, d.in, gpt2_fp8_detail::weight_yT(f, l, (Fp8Linear)k), stream);
        fp8_block_grid_transpose(weight_grid(f, l, (Fp8Linear)k), d.out, d.in, weightT_grid(f, l, (Fp8Linear)k),
                                 stream);
    }
}

// out (N, OC) = inp (N, C) · Wᵀ + bias; inp's yT and its grid kept for the backward. inp_is_pre_gelu: gelu(inp) is
// the linear's input (fcproj).
inline void gpt2_fp8_blocks_forward(const Fp8Layers& f, int l, Fp8Linear k, floatX* out, const floatX* inp,
                                    const floatX* bias, int N, cudaStream_t stream, bool inp_is_pre_gelu) {
    using namespace gpt2_fp8_blocks_detail;
    const Dims d = dims(f.C, k);
    uint8_t *y = f.work[0], *yT = gpt2_fp8_detail::input_yT(f, l, k);
    float *y_grid = f.grids.work[0], *yT_grid = input_yT_grid(f, l, k);
    if (inp_is_pre_gelu) fp8_block_cast_transpose<Fp8Format::E4M3, true>(inp, N, d.in, y, y_grid, yT, yT_grid, stream);
    else fp8_block_cast_transpose<Fp8Format::E4M3>(inp, N, d.in, y, y_grid, yT, yT_grid, stream);
    matmul_fp8(out, y, Fp8Format::E4M3, y_grid, gpt2_fp8_detail::weight_y(f, l, k), Fp8Format::E4M3,
               weight_grid(f, l, k), bias, N, d.out, d.in, /*fast_accum=*/false, stream, false, k1x128, k128x128);
}

// dW += doutᵀ · inp, dbias += column sums of dout (if dbias; reduce: column_sum's scratch), dinp = dout · W.
inline void gpt2_fp8_blocks_backward(const Fp8Layers& f, int l, Fp8Linear k, floatX* dinp, floatX* dweight,
                                     floatX* dbias, const floatX* dout, int N, float* reduce, cudaStream_t stream) {
    using namespace gpt2_fp8_blocks_detail;
    const Dims d = dims(f.C, k);
    uint8_t *y = f.work[0], *yT = f.work[1];
    float *y_grid = f.grids.work[0], *yT_grid = f.grids.work[1];
    fp8_block_cast_transpose<kGrads>(dout, N, d.out, y, y_grid, yT, yT_grid, stream);
    if (dbias) column_sum_accumulate(dbias, dout, N, d.out, 1.0f, reduce, stream);
    matmul_fp8(dweight, yT, kGrads, yT_grid, gpt2_fp8_detail::input_yT(f, l, k), Fp8Format::E4M3,
               input_yT_grid(f, l, k), nullptr, d.out, d.in, N, false, stream, /*accumulate=*/true, k1x128, k1x128);
    matmul_fp8(dinp, y, kGrads, y_grid, gpt2_fp8_detail::weight_yT(f, l, k), Fp8Format::E4M3, weightT_grid(f, l, k),
               nullptr, N, d.in, d.out, false, stream, false, k1x128, k128x128);
}
