// Where the FP8 state of the blocks' linear layers lives (llmc/model/gpt2_fp8.cuh): the linears and their operands,
// delayed scaling's state (llmc/model/gpt2_fp8_delayed.cuh), Fp8Layers (the FP8 copies of the weights, the kept input
// transposes, the slots of amax / scale / descale, the block-scale grids of LLMC_FP8_BLOCKS) and the offsets of each
// layer's and linear's pieces.
#pragma once

#include <cstddef>
#include <cstdint>

#include "llmc/core/fp8.h"
#include "llmc/model/gpt2_params.cuh"

enum Fp8Linear { kFp8Qkv, kFp8AttProj, kFp8Fc, kFp8FcProj, kFp8Linears };
enum Fp8Operand { kFp8Inp, kFp8Weight, kFp8Dout, kFp8Operands };  // a linear's three cast tensors

// Delayed scaling's state for the operands whose producers cast them when it is on (llmc/model/gpt2_fp8_delayed.cuh):
// per layer, delayed index 8l + j: fcproj's input (j = 0), fc's output gradient (1), qkv's input (2), fc's input (3),
// the weights of qkv, attproj, fc and fcproj (4 to 7: cast without an amax pass first).
constexpr int kFp8DelayedPerLayer = 8, kFp8DelayedFirstWeight = 4;
__host__ __device__ inline bool gpt2_fp8_delayed_is_weight(int t) {
    return t % kFp8DelayedPerLayer >= kFp8DelayedFirstWeight;
}
struct Fp8Delayed {
    int H = 0;                      // micro-steps of amax history; 0: off (current scaling everywhere)
    int G = 1;                      // micro-steps an optimizer step: a weight's history advances once a step
    float* history = nullptr;       // (kFp8DelayedPerLayer L, H)
    float* window = nullptr;        // (kFp8DelayedPerLayer L): a weight's window max, its next cast's amax
    long long* counter = nullptr;   // micro-steps folded into the histories (device: a replayed graph advances it)
    long long updates = 0;          // the same on the host, which picks the path
    bool on() const { return H > 0; }
    bool calibrated() const { return updates > 0; }  // else those operands run current scaling, filling the histories
};

// The slot of delayed operand t (Fp8Delayed's order: 8l fcproj's input, 8l + 1 fc's output gradient, 8l + 2 qkv's
// input, 8l + 3 fc's input, 8l + 4 + k linear k's weight), as Fp8Layers::slot numbers them, and its format.
__host__ __device__ inline size_t gpt2_fp8_delayed_slot(int t) {
    const int l = t / kFp8DelayedPerLayer, j = t % kFp8DelayedPerLayer;
    const size_t layer = (size_t)l * kFp8Linears;
    switch (j) {
        case 0: return (layer + kFp8FcProj) * kFp8Operands + kFp8Inp;
        case 1: return (layer + kFp8Fc) * kFp8Operands + kFp8Dout;
        case 2: return (layer + kFp8Qkv) * kFp8Operands + kFp8Inp;
        case 3: return (layer + kFp8Fc) * kFp8Operands + kFp8Inp;
        default: return (layer + (j - kFp8DelayedFirstWeight)) * kFp8Operands + kFp8Weight;
    }
}
__host__ __device__ inline Fp8Format gpt2_fp8_delayed_format(int t, Fp8Format grads = Fp8Format::E5M2) {
    return t % kFp8DelayedPerLayer == 1 ? grads : Fp8Format::E4M3;
}

// LLMC_FP8_BLOCKS: the descale grids of block-scaled operands (llmc/model/gpt2_fp8_blocks.cuh has their offsets).
struct Fp8BlockGrids {
    float* weights = nullptr;   // per layer, per linear: W's grid (128x128 blocks), then Wᵀ's
    float* inputs_T = nullptr;  // per layer, per linear: the grid of inp's yT (1x128 blocks along the rows)
    float* work[2] = {};        // the current GEMM's y operand's grid, dout's yT's
};

struct Fp8Layers {
    int L = 0, C = 0, max_rows = 0;
    int Vp = 0;                    // the lm_head's rows when its forward runs in FP8 too (-fp8 2), else 0
    Fp8Format grads = Fp8Format::E5M2;  // the output gradients' (LLMC_FP8_GRADS)
    uint8_t* weights = nullptr;    // per layer, per linear: W's y (OC x C) then yT (C x OC), E4M3
    uint8_t* wte = nullptr;        // the lm_head's weight (Vp x C), E4M3, when Vp > 0
    uint8_t* inputs_T = nullptr;   // per layer, per linear: inp's yT (in x rows), E4M3, from its forward cast
    bool recast = false;           // LLMC_FP8_RECAST: attproj's and fcproj's yT cast again in the backward into
    uint8_t* recast_T = nullptr;   // this one buffer (4C x rows), inputs_T keeping qkv's and fc's only
    uint8_t* fcproj_dout_T = nullptr;  // recast: fcproj's output gradient's yT (C x rows) across fc's cast
    float* stats = nullptr;        // amax, scale, descale of every slot (descales strided)
    float* check = nullptr;        // LLMC_FP8_CHECK_AMAX: every slot's amax by a pass, a mismatch (int), its fold
    Fp8Delayed delayed;
    Fp8BlockGrids grids;           // LLMC_FP8_BLOCKS: the grids (else null)
    uint8_t* work[2] = {};         // max_rows x 4C bytes each: the current GEMM's y operand, dout's yT
    size_t bytes = 0;              // all of the above
    bool on() const { return weights != nullptr; }
    bool lm_head() const { return wte != nullptr; }
    bool blocks() const { return grids.weights != nullptr; }

    // the slots: L x kFp8Linears x kFp8Operands for the blocks, then the lm_head's (its Inp and Weight used)
    size_t slot(int l, Fp8Linear k, Fp8Operand o) const { return ((size_t)l * kFp8Linears + k) * kFp8Operands + o; }
    size_t lm_head_slot(Fp8Operand o) const { return slot(L, kFp8Qkv, o); }
    size_t slots() const { return ((size_t)L * kFp8Linears + 1) * kFp8Operands; }
    float* amax(size_t s) const { return stats + s; }
    float* scale(size_t s) const { return stats + slots() + s; }
    // the descales start 16-byte aligned (stats is): after 2 * slots() floats rounded up to the stride
    size_t descale_base() const {
        return (2 * slots() + kFp8DescaleStride - 1) / kFp8DescaleStride * kFp8DescaleStride;
    }
    float* descale(size_t s) const { return stats + descale_base() + kFp8DescaleStride * s; }
    size_t stats_floats() const { return descale_base() + kFp8DescaleStride * slots(); }
};

namespace gpt2_fp8_detail {

struct Dims { int in, out; ParamTensor weight; };  // a linear's C (K of its forward) and OC
inline Dims dims(int C, Fp8Linear k) {
    switch (k) {
        case kFp8Qkv: return {C, 3 * C, QKVW};
        case kFp8AttProj: return {C, C, ATTPROJW};
        case kFp8Fc: return {C, 4 * C, FCW};
        default: return {4 * C, C, FCPROJW};
    }
}
// Bytes of one layer's FP8 weights (every linear's y and yT: 2 x 12 C^2) and where linear k's start.
inline size_t layer_weight_bytes(int C) { return (size_t)24 * C * C; }
// Bytes of one layer's kept input transposes (C + C + C + 4C columns of max_rows; recast: qkv's and fc's, C + C)
// and where linear k's starts.
inline size_t layer_input_bytes(int C, int max_rows, bool recast = false) {
    return (size_t)(recast ? 2 : 7) * C * max_rows;
}
inline bool recast_input(Fp8Linear k) { return k == kFp8AttProj || k == kFp8FcProj; }
inline size_t input_offset(int C, int max_rows, Fp8Linear k, bool recast = false) {
    if (recast) return k == kFp8Fc ? (size_t)C * max_rows : 0;
    return (size_t)(k == kFp8FcProj ? 3 : k) * C * max_rows;
}
inline size_t weight_offset(int C, Fp8Linear k) {
    size_t off = 0;
    for (int i = 0; i < k; i++) off += (size_t)2 * dims(C, (Fp8Linear)i).in * dims(C, (Fp8Linear)i).out;
    return off;
}
inline uint8_t* weight_y(const Fp8Layers& f, int l, Fp8Linear k) {
    return f.weights + (size_t)l * layer_weight_bytes(f.C) + weight_offset(f.C, k);
}
inline uint8_t* weight_yT(const Fp8Layers& f, int l, Fp8Linear k) {
    const Dims d = dims(f.C, k);
    return weight_y(f, l, k) + (size_t)d.in * d.out;
}
inline uint8_t* input_yT(const Fp8Layers& f, int l, Fp8Linear k) {
    if (f.recast && recast_input(k)) return f.recast_T;
    return f.inputs_T + (size_t)l * layer_input_bytes(f.C, f.max_rows, f.recast) +
           input_offset(f.C, f.max_rows, k, f.recast);
}

}  // namespace gpt2_fp8_detail
