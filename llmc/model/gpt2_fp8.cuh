// The four linear layers of every block (qkv, attproj, fc, fcproj) in FP8 on Hopper (`-fp8 1`, docs/FP8.md): the
// forward, the input gradient and the weight gradient each one cuBLASLt FP8 GEMM (llmc/kernels/matmul/matmul_fp8.cuh)
// on operands cast from the bf16 tensors the BF16 step already has, E4M3 for activations and weights, E5M2 for
// output gradients. Per-tensor current scaling: each operand's amax first (folded in by the kernel that writes it:
// the LayerNorms', the GELU backward's and attention's; fcproj's input's and the weights' by a pass of their own),
// then the cast with the scale that amax gives (llmc/kernels/fp8/cast_transpose.cuh), so a scale never lags its
// tensor and there is no state across steps (but for -fp8h's delayed operands, llmc/model/gpt2_fp8_delayed.cuh, whose
// state the checkpoints keep). What FP8 GEMMs on Hopper need, both operands K-major:
//   forward           out (N, OC)  = inp (N, C)   · W (OC, C)ᵀ       K = C:  inp's y, W's y
//   input gradient    dinp (N, C)  = dout (N, OC) · Wᵀ (C, OC)ᵀ      K = OC: dout's y, W's yT
//   weight gradient   dW (OC, C)  += doutᵀ (OC, N) · inpᵀ (C, N)ᵀ    K = N:  dout's yT, inp's yT
// The weights are cast (y and yT) as their layer begins in the first forward after the parameters change (once per
// optimizer step: the other micro-steps reuse the copies; GPT2::fp8_weights_current); inp's forward cast writes its
// yT too, kept per layer for the weight gradient (cheaper than reading the bf16 input again in the backward, and the
// bf16 ln1, ln2 and GELU outputs then need no per-layer copies: llmc/model/gpt2_memory.cuh).
// Accumulation: fast in the forward, promoted to fp32 in both gradients (TransformerEngine's choice; K = N is long in
// the weight gradient; LLMC_FP8_FAST_ACCUM changes it, LLMC_FP8_GRADS the gradients' format, for comparisons). The
// bias gradients are column sums of the bf16 output gradients (fp32): fc's taken by its output gradient's cast, the
// others by the LayerNorm and attention backwards as in BF16 runs. The lm_head stays bf16 but for its forward under
// -fp8 2. LLMC_FP8_BLOCKS=1: a scale per block instead, llmc/model/gpt2_fp8_blocks.cuh (the layout of the state:
// llmc/model/gpt2_fp8_layout.cuh).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "llmc/core/cuda_common.h"
#include "llmc/core/fp8.h"
#include "llmc/core/options.h"
#include "llmc/kernels/column_sum.cuh"
#include "llmc/kernels/fp8/cast_group.cuh"
#include "llmc/kernels/fp8/cast_transpose.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/matmul/matmul_fp8.cuh"
#include "llmc/model/gpt2_fp8_blocks.cuh"
#include "llmc/model/gpt2_fp8_layout.cuh"
#include "llmc/model/gpt2_params.cuh"

namespace gpt2_fp8_detail {

// LLMC_FP8_CHECK_AMAX: slot s's folded amax against the pass just taken into f.check + s (the first mismatch kept).
inline void compare_fold(const Fp8Layers& f, size_t s, cudaStream_t stream) {
    amax_compare_kernel<<<1, 1, 0, stream>>>(f.amax(s), f.check + s, (int)s, (int*)(f.check + f.slots()),
                                             f.check + f.slots() + 1);
    cudaCheck(cudaGetLastError());
}

// fn called with the output gradients' format (f.grads, LLMC_FP8_GRADS) as a compile-time argument for the casts.
template <typename Fn>
inline void with_grads_format(const Fp8Layers& f, Fn&& fn) {
    if (f.grads == Fp8Format::E4M3) fn(std::integral_constant<Fp8Format, Fp8Format::E4M3>());
    else fn(std::integral_constant<Fp8Format, Fp8Format::E5M2>());
}

// x (rows, cols) cast to F with current scaling into slot s: its amax (unless its producer folded it in already:
// amax_taken), then y and/or yT with the scale from it (and x's column sums per tile into colsum, if given).
// kGelu: x is a GELU's input and gelu(x) is what is cast (fp8_cast_transpose's kGelu).
template <Fp8Format F, bool kGelu = false>
inline void cast_current(const Fp8Layers& f, size_t s, const floatX* x, int rows, int cols, uint8_t* y, uint8_t* yT,
                         cudaStream_t stream, bool amax_taken = false, float* colsum = nullptr) {
    if (!amax_taken) fp8_amax<kGelu>(x, rows, cols, f.amax(s), stream);
    if (amax_taken && f.check) {  // the producer's fold against a pass of its own
        fp8_amax<kGelu>(x, rows, cols, f.check + s, stream);
        compare_fold(f, s, stream);
    }
    fp8_cast_transpose_current<F, kGelu>(x, rows, cols, f.amax(s), 0, f.scale(s), f.descale(s), y, yT, stream,
                                         colsum);
}

// The cast with slot s's delayed scale (its scale and descale set by gpt2_fp8_delayed_update), its amax folded in
// for the next update, a value that is not finite making the descale NaN at once (this step's GEMMs); dgelu_in: x
// is a GELU output's gradient cast through the GELU backward (fp8_cast_transpose_dgelu; given gelu_yT, the GELU's
// output cast again beside it), kGelu: x a GELU's input cast through the GELU. With LLMC_FP8_CHECK_AMAX the fold
// against a pass of its own.
template <Fp8Format F, bool kGelu = false>
inline void cast_delayed(const Fp8Layers& f, size_t s, const floatX* x, int rows, int cols, uint8_t* y, uint8_t* yT,
                         cudaStream_t stream, const floatX* dgelu_in = nullptr, float* colsum = nullptr,
                         const float* gelu_scale = nullptr, uint8_t* gelu_yT = nullptr) {
    float* const descale = f.descale(s);
    if (gelu_yT && !dgelu_in) {
        fprintf(stderr, "error: cast_delayed: the GELU output's yT comes only with the GELU backward's cast\n");
        exit(EXIT_FAILURE);
    }
    if (dgelu_in)
        fp8_cast_transpose_dgelu<F>(x, dgelu_in, rows, cols, f.scale(s), y, yT, f.amax(s), stream, colsum, descale,
                                    gelu_scale, gelu_yT);
    else fp8_cast_transpose<F, kGelu>(x, rows, cols, f.scale(s), y, yT, f.amax(s), stream, colsum, descale);
    if (f.check) {
        if (dgelu_in) fp8_amax_dgelu(x, dgelu_in, rows, cols, f.check + s, stream);
        else fp8_amax<kGelu>(x, rows, cols, f.check + s, stream);
        compare_fold(f, s, stream);
    }
}

// Linear k's weight of layer l under delayed scaling, as a job of the layer's grouped cast: the scale from its
// history's window (Fp8Delayed::window, kept by gpt2_fp8_delayed_update), written with its descale as it casts, so
// the micro-steps that reuse the copy read the descale it was cast with; its amax folded in for the history (no amax
// pass first).
inline Fp8CastJob weight_job_delayed(const Fp8Layers& f, const GPT2Params& p, int l, Fp8Linear k) {
    const Dims d = dims(f.C, k);
    const size_t s = f.slot(l, k, kFp8Weight);
    Fp8CastJob j;
    j.x = p(d.weight, l), j.rows = d.out, j.cols = d.in;
    j.amax = f.delayed.window + (size_t)l * kFp8DelayedPerLayer + kFp8DelayedFirstWeight + k;
    j.scale_out = f.scale(s), j.descale_out = f.descale(s), j.fold_amax = f.amax(s);
    j.y = weight_y(f, l, k), j.yT = weight_yT(f, l, k);
    return j;
}

}  // namespace gpt2_fp8_detail

// Why -fp8 1 cannot run here ("" when it can): BF16 builds, C a multiple of 16 (K of the forward) and B*T of 16 (K of
// the weight gradient), and, once the device is known (compute_capability_major >= 0), FP8 tensor cores (Hopper).
inline std::string gpt2_fp8_problem(int C, int BT, int compute_capability_major) {
    if (!kFloatXIsBF16) return "FP8 training needs a BF16 build (make PRECISION=BF16, the default)";
    if (compute_capability_major >= 0 && compute_capability_major < 9)
        return "FP8 training needs FP8 tensor cores with Hopper's GEMMs (compute capability 9.0+, H100/H200)";
    if (C % 16 != 0) return "FP8 training needs C a multiple of 16, got " + std::to_string(C);
    if (BT % 16 != 0) return "FP8 training needs B*T a multiple of 16, got " + std::to_string(BT);
    return "";
}

// The device memory for L layers of width C, batches up to max_rows = B*T rows, the lm_head's Vp x C weight if Vp > 0.
inline size_t gpt2_fp8_bytes(int L, int C, int max_rows, int Vp = 0) {
    Fp8Layers shape;
    shape.L = L;
    using namespace gpt2_fp8_detail;
    const size_t grids = engine_options().fp8_blocks ? gpt2_fp8_block_grid_floats(L, C, max_rows) * sizeof(float) : 0;
    const bool recast = engine_options().fp8_recast;
    return (size_t)L * (layer_weight_bytes(C) + layer_input_bytes(C, max_rows, recast)) + (size_t)Vp * C +
           shape.stats_floats() * sizeof(float) + (recast ? 3 : 2) * (size_t)max_rows * 4 * C +
           (recast ? (size_t)max_rows * C : 0) + 8 * 256 + grids;  // + each piece's alignment
}

inline void gpt2_fp8_allocate(Fp8Layers* f, int L, int C, int max_rows, int Vp = 0) {
    f->L = L, f->C = C, f->max_rows = max_rows, f->Vp = Vp;
    const bool blocks = engine_options().fp8_blocks;
    f->grads = engine_options().fp8_grads_e4m3 || blocks ? Fp8Format::E4M3 : Fp8Format::E5M2;
    f->bytes = gpt2_fp8_bytes(L, C, max_rows, Vp);
    char* block;
    cudaCheck(cudaMalloc(&block, f->bytes));
    auto take = [&block](size_t n) {
        char* p = block;
        block += (n + 255) / 256 * 256;
        return p;
    };
    f->weights = (uint8_t*)take((size_t)L * gpt2_fp8_detail::layer_weight_bytes(C));
    f->recast = engine_options().fp8_recast;
    f->inputs_T = (uint8_t*)take((size_t)L * gpt2_fp8_detail::layer_input_bytes(C, max_rows, f->recast));
    if (f->recast) f->recast_T = (uint8_t*)take((size_t)max_rows * 4 * C);
    if (f->recast) f->fcproj_dout_T = (uint8_t*)take((size_t)max_rows * C);
    f->stats = (float*)take(f->stats_floats() * sizeof(float));
    for (auto& w : f->work) w = (uint8_t*)take((size_t)max_rows * 4 * C);
    if (Vp > 0) f->wte = (uint8_t*)take((size_t)Vp * C);
    if (blocks) gpt2_fp8_block_grids_place(f, (float*)take(gpt2_fp8_block_grid_floats(L, C, max_rows) * sizeof(float)));
    if (blocks && engine_options().fp8_check_amax) {  // the block linears take no per-tensor amax to check
        fprintf(stderr, "error: LLMC_FP8_CHECK_AMAX=1 checks per-tensor amaxes; LLMC_FP8_BLOCKS=1 has none\n");
        exit(EXIT_FAILURE);
    }
    cudaCheck(cudaMemset(f->stats, 0, f->stats_floats() * sizeof(float)));
    if (engine_options().fp8_check_amax) {
        cudaCheck(cudaMalloc(&f->check, (f->slots() + 2) * sizeof(float)));
        cudaCheck(cudaMemset(f->check, 0, (f->slots() + 2) * sizeof(float)));
    }
    matmul_init();
    matmul_fp8_detail::unit_scale();  // allocated now, not inside a captured step
}

inline void gpt2_fp8_free(Fp8Layers* f) {
    if (f->weights) cudaCheck(cudaFree(f->weights));  // the block's start
    if (f->check) cudaCheck(cudaFree(f->check));
    if (f->delayed.history) cudaCheck(cudaFree(f->delayed.history));  // llmc/model/gpt2_fp8_delayed.cuh's block
    *f = Fp8Layers{};
}

// LLMC_FP8_CHECK_AMAX's verdict on the passes since the last forward began (waits for the stream): "" when every
// fold equals its pass, else which slot and the two values.
inline std::string gpt2_fp8_check_result(const Fp8Layers& f, cudaStream_t stream) {
    if (!f.check) return "";
    int bad = 0;
    cudaCheck(cudaMemcpyAsync(&bad, f.check + f.slots(), sizeof(int), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    if (bad == 0) return "";
    const size_t s = (size_t)bad - 1;
    float got = 0.f, want = 0.f;
    cudaCheck(cudaMemcpy(&got, f.check + f.slots() + 1, sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&want, f.check + s, sizeof(float), cudaMemcpyDeviceToHost));
    static const char* const kLinear[] = {"qkv", "attproj", "fc", "fcproj"};
    static const char* const kOperand[] = {"input", "weight", "output gradient"};
    const int l = (int)(s / (kFp8Linears * kFp8Operands)), k = (int)(s / kFp8Operands % kFp8Linears);
    const int o = (int)(s % kFp8Operands);
    const std::string where = l == f.L ? std::string("the lm_head's")
                                       : "layer " + std::to_string(l) + " " + kLinear[k] + "'s";
    char text[200];
    snprintf(text, sizeof(text), "%s %s: the amax its producer folded in is %.9g, a pass of its own finds %.9g",
             where.c_str(), kOperand[o], got, want);
    return text;
}

// The FP8 state a pass over BT rows runs with, or null (floatX): FP8 GEMMs take K in multiples of 16, so a pass over
// another row count (an evaluation's) runs in floatX. The forward and the backward after it ask with the same BT.
inline const Fp8Layers* gpt2_fp8_for_rows(const Fp8Layers* f, int BT) {
    return f && f->on() && BT % 16 == 0 && BT <= f->max_rows ? f : nullptr;
}

// Under delayed scaling, at a forward's start: every amax but the blocks' weights' back to zero (a weight's stays
// until the update after the next backward takes it into the history and zeroes it: a cast made in an evaluation's
// forward counts too), and the delayed activations' and gradient's descales back to 1 / scale (an overflow an
// evaluation met, marked NaN, must not reach the next training step; a training step's has ended the run).
__global__ void gpt2_fp8_delayed_begin_forward_kernel(float* amax, int slots, int block_slots, const float* scale,
                                                      float* descale, int delayed_operands) {
    for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < slots; s += gridDim.x * blockDim.x)
        if (s >= block_slots || s % kFp8Operands != kFp8Weight) amax[s] = 0.f;
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < delayed_operands; t += gridDim.x * blockDim.x) {
        if (gpt2_fp8_delayed_is_weight(t)) continue;  // a weight's descale is its copy's, set by its cast
        const size_t s = gpt2_fp8_delayed_slot(t);
        // as fp8_update_one writes it; no scale yet (0): the first micro-step's current scaling writes both
        if (scale[s] > 0.f) descale[kFp8DescaleStride * s] = (float)(1.0 / (double)scale[s]);
    }
}

// At a forward's start: every amax back to zero (each pass folds its tensor's into its slot), but under delayed
// scaling the weights' (the kernel above: their casts happen once between two updates, the trainer's order).
inline void gpt2_fp8_begin_forward(const Fp8Layers& f, cudaStream_t stream) {
    if (f.delayed.on()) {
        const int block_slots = f.L * kFp8Linears * kFp8Operands;
        gpt2_fp8_delayed_begin_forward_kernel<<<1, 256, 0, stream>>>(f.stats, (int)f.slots(), block_slots,
                                                                    f.scale(0), f.descale(0),
                                                                    kFp8DelayedPerLayer * f.L);
        cudaCheck(cudaGetLastError());
    } else {
        cudaCheck(cudaMemsetAsync(f.stats, 0, f.slots() * sizeof(float), stream));
    }
    if (f.check) cudaCheck(cudaMemsetAsync(f.check, 0, (f.slots() + 2) * sizeof(float), stream));
}

// Layer l's four weights to E4M3, y and yT, once its parameters are there (before its first GEMM); delayed: with
// their slots' delayed scales, no amax pass first, the four in one launch.
inline void gpt2_fp8_cast_weights(const Fp8Layers& f, const GPT2Params& p, int l, cudaStream_t stream,
                                  bool delayed = false) {
    if (f.blocks()) return gpt2_fp8_blocks_cast_weights(f, p, l, stream);  // LLMC_FP8_BLOCKS
    using namespace gpt2_fp8_detail;
    if (delayed) {  // the four in one launch (cast_group.cuh); LLMC_FP8_CHECK_AMAX: each fold against a pass of its own
        static_assert(kFp8Linears <= kFp8CastGroupMax, "a layer's weights fit one grouped cast");
        Fp8CastJob jobs[kFp8Linears];
        for (int k = 0; k < kFp8Linears; k++) jobs[k] = weight_job_delayed(f, p, l, (Fp8Linear)k);
        fp8_cast_transpose_current_group<Fp8Format::E4M3>(jobs, kFp8Linears, stream);
        for (int k = 0; f.check && k < kFp8Linears; k++) {
            const size_t s = f.slot(l, (Fp8Linear)k, kFp8Weight);
            fp8_amax(jobs[k].x, jobs[k].rows, jobs[k].cols, f.check + s, stream);
            compare_fold(f, s, stream);
        }
        return;
    }
    for (int k = 0; k < kFp8Linears; k++) {
        const Dims d = dims(f.C, (Fp8Linear)k);
        const size_t s = f.slot(l, (Fp8Linear)k, kFp8Weight);
        cast_current<Fp8Format::E4M3>(f, s, p(d.weight, l), d.out, d.in, weight_y(f, l, (Fp8Linear)k),
                                      weight_yT(f, l, (Fp8Linear)k), stream);
    }
}

// Where inp's (or dout's) amax goes when its producer takes it (the LayerNorm forwards' for qkv's and fc's inputs,
// the attention forward's for attproj's; the LayerNorm backwards' for fcproj's and attproj's output gradients,
// gelu_backward_inplace's for fc's, the attention backward's for qkv's); then the calls below are told so (amax_taken).
inline float* gpt2_fp8_amax_slot(const Fp8Layers& f, int l, Fp8Linear k, Fp8Operand o) {
    return f.amax(f.slot(l, k, o));
}

// Where linear k of layer l wants its input written in E4M3 by the LayerNorm ahead of it (qkv, fc) under delayed
// scaling: the y its forward reads (f.work[0]), with the slot's delayed scale; then gpt2_fp8_forward is told so
// (inp_y_written) and transposes those bytes (faster than the LayerNorm writing yT too: docs/FP8.md).
inline LayerNormFp8Out gpt2_fp8_layernorm_out(const Fp8Layers& f, int l, Fp8Linear k) {
    const size_t si = f.slot(l, k, kFp8Inp);
    return {f.work[0], f.scale(si), f.descale(si)};
}

// out (N, OC) = inp (N, C) · Wᵀ + bias for linear k of layer l (weights cast by gpt2_fp8_cast_weights); inp's yT
// kept for the backward. inp_is_pre_gelu (fcproj): inp is the GELU's input, and gelu(inp) the linear's input (never
// written in bf16). delayed: inp cast with its slot's delayed scale (no amax pass first). inp_y_written: its
// producer wrote inp's y already (gpt2_fp8_layernorm_out; inp unused): its yT by a transpose of those bytes.
inline void gpt2_fp8_forward(const Fp8Layers& f, int l, Fp8Linear k, floatX* out, const floatX* inp,
                             const floatX* bias, int N, cudaStream_t stream, bool inp_amax_taken = false,
                             bool inp_is_pre_gelu = false, bool delayed = false, bool inp_y_written = false) {
    using namespace gpt2_fp8_detail;
    const Dims d = dims(f.C, k);
    if (f.blocks()) return gpt2_fp8_blocks_forward(f, l, k, out, inp, bias, N, stream, inp_is_pre_gelu);
    const size_t si = f.slot(l, k, kFp8Inp), sw = f.slot(l, k, kFp8Weight);
    // LLMC_FP8_RECAST: attproj's and fcproj's yT comes from the backward's own cast (the same scale, the same bytes)
    uint8_t *inp_y = f.work[0], *inp_yT = f.recast && recast_input(k) ? nullptr : input_yT(f, l, k);
    auto cast = [&](auto gelu) {
        constexpr bool kGelu = decltype(gelu)::value;
        if (delayed) cast_delayed<Fp8Format::E4M3, kGelu>(f, si, inp, N, d.in, inp_y, inp_yT, stream);
        else cast_current<Fp8Format::E4M3, kGelu>(f, si, inp, N, d.in, inp_y, inp_yT, stream, inp_amax_taken);
    };
    if (inp_y_written) fp8_transpose(inp_y, N, d.in, inp_yT, stream);
    else inp_is_pre_gelu ? cast(std::true_type()) : cast(std::false_type());
    matmul_fp8(out, inp_y, Fp8Format::E4M3, f.descale(si), weight_y(f, l, k), Fp8Format::E4M3, f.descale(sw), bias, N,
               d.out, d.in, engine_options().fp8_fast_fwd, stream);
}

// The lm_head's forward in FP8 (-fp8 2): logits (N, Vp) = lnf (N, C) · wteᵀ, both E4M3, current scaling, accumulation
// as the blocks' forwards; wte cast unless its copy is current (cast_wte), lnf's amax taken by the final LayerNorm
// (gpt2_fp8_lm_head_amax) unless told otherwise. Its backward stays bf16 (the weight gradient would need B·T·V cast).
inline float* gpt2_fp8_lm_head_amax(const Fp8Layers& f) {
    return f.lm_head() ? f.amax(f.lm_head_slot(kFp8Inp)) : nullptr;
}
inline void gpt2_fp8_lm_head_forward(const Fp8Layers& f, floatX* logits, const floatX* lnf, const floatX* wte, int N,
                                     cudaStream_t stream, bool lnf_amax_taken = true, bool cast_wte = true) {
    using namespace gpt2_fp8_detail;
    const size_t si = f.lm_head_slot(kFp8Inp), sw = f.lm_head_slot(kFp8Weight);
    if (cast_wte) cast_current<Fp8Format::E4M3>(f, sw, wte, f.Vp, f.C, f.wte, nullptr, stream);
    cast_current<Fp8Format::E4M3>(f, si, lnf, N, f.C, f.work[0], nullptr, stream, lnf_amax_taken);
    matmul_fp8(logits, f.work[0], Fp8Format::E4M3, f.descale(si), f.wte, Fp8Format::E4M3, f.descale(sw), nullptr, N,
               f.Vp, f.C, engine_options().fp8_fast_fwd, stream);
}

// Linear k of layer l backward: dW += doutᵀ · inp, dbias += column sums of dout (if dbias), dinp = dout · W
// (overwritten); inp is the yT its forward over the same N rows kept. reduce: column_sum's scratch. dout_gelu_in
// (fc under delayed scaling): dout holds the gradient of the GELU's output and this the GELU's input; the output
// gradient, their GELU backward, is cast as it is computed, with its slot's delayed scale; and, given gelu_yT, the
// GELU's output cast again beside it (E4M3 with *gelu_scale, transposed: gpt2_fp8_mlp_backward's fcproj input).
inline void gpt2_fp8_backward(const Fp8Layers& f, int l, Fp8Linear k, floatX* dinp, floatX* dweight, floatX* dbias,
                              const floatX* dout, int N, float* reduce, cudaStream_t stream,
                              bool dout_amax_taken = false, const floatX* dout_gelu_in = nullptr,
                              const floatX* inp = nullptr, bool inp_is_pre_gelu = false,
                              const float* gelu_scale = nullptr, uint8_t* gelu_yT = nullptr) {
    using namespace gpt2_fp8_detail;
    const Dims d = dims(f.C, k);
    if (f.blocks()) return gpt2_fp8_blocks_backward(f, l, k, dinp, dweight, dbias, dout, N, reduce, stream);
    const size_t si = f.slot(l, k, kFp8Inp), sw = f.slot(l, k, kFp8Weight), sd = f.slot(l, k, kFp8Dout);
    if (f.recast && recast_input(k)) {  // inp's yT again, with the scale its forward cast took (inp: the forward's)
        if (!inp) {
            fprintf(stderr, "error: gpt2_fp8_backward: LLMC_FP8_RECAST needs the layer's input\n");
            exit(EXIT_FAILURE);
        }
        if (inp_is_pre_gelu) fp8_cast_transpose<Fp8Format::E4M3, true>(inp, N, d.in, f.scale(si), nullptr, f.recast_T,
                                                                       nullptr, stream);
        else fp8_cast_transpose<Fp8Format::E4M3>(inp, N, d.in, f.scale(si), nullptr, f.recast_T, nullptr, stream);
    }
    uint8_t *dout_y = f.work[0], *dout_yT = f.work[1];
    float* const colsum = dbias ? reduce : nullptr;  // dbias from the cast's column sums, added in order below
    with_grads_format(f, [&](auto grads) {
        constexpr Fp8Format G = decltype(grads)::value;
        if (dout_gelu_in)
            cast_delayed<G>(f, sd, dout, N, d.out, dout_y, dout_yT, stream, dout_gelu_in, colsum, gelu_scale, gelu_yT);
        else cast_current<G>(f, sd, dout, N, d.out, dout_y, dout_yT, stream, dout_amax_taken, colsum);
    });
    if (dbias) column_sum_finish(dbias, reduce, fp8_cast_colsum_chunks(N), d.out, 1.0f, stream);
    matmul_fp8(dweight, dout_yT, f.grads, f.descale(sd), input_yT(f, l, k), Fp8Format::E4M3, f.descale(si), nullptr,
               d.out, d.in, N, engine_options().fp8_fast_wgrad, stream, /*accumulate=*/true);
    matmul_fp8(dinp, dout_y, f.grads, f.descale(sd), weight_yT(f, l, k), Fp8Format::E4M3, f.descale(sw), nullptr, N,
               d.in, d.out, engine_options().fp8_fast_dgrad, stream);
}

// fcproj's and fc's backward together, under delayed scaling with LLMC_FP8_RECAST: fcproj's output gradient cast
// (its yT kept in fcproj_dout_T) and its input gradient dfch_gelu (the GELU output's gradient) first, then fc's
// backward (gpt2_fp8_backward), whose output-gradient cast computes the GELU backward from fch and so casts fcproj's
// input (gelu(fch)) again beside it, transposed, with its forward's scale; then fcproj's weight gradient from those
// bytes. The recast without a pass of its own over fch; the same bytes and sums as the two calls.
inline void gpt2_fp8_mlp_backward(const Fp8Layers& f, int l, floatX* dfch_gelu, floatX* dfcproj_w, floatX* dln2,
                                  floatX* dfc_w, floatX* dfc_b, const floatX* dout, const floatX* fch, int N,
                                  float* reduce, cudaStream_t stream) {
    using namespace gpt2_fp8_detail;
    const int C = f.C;
    const size_t pi = f.slot(l, kFp8FcProj, kFp8Inp), pw = f.slot(l, kFp8FcProj, kFp8Weight);
    const size_t pd = f.slot(l, kFp8FcProj, kFp8Dout);
    // fcproj's output gradient: its amax folded by the LayerNorm backward, its bias summed there
    with_grads_format(f, [&](auto grads) {
        cast_current<decltype(grads)::value>(f, pd, dout, N, C, f.work[0], f.fcproj_dout_T, stream, true);
    });
    matmul_fp8(dfch_gelu, f.work[0], f.grads, f.descale(pd), weight_yT(f, l, kFp8FcProj), Fp8Format::E4M3,
               f.descale(pw), nullptr, N, 4 * C, C, engine_options().fp8_fast_dgrad, stream);
    gpt2_fp8_backward(f, l, kFp8Fc, dln2, dfc_w, dfc_b, dfch_gelu, N, reduce, stream, false, fch, nullptr, false,
                      f.scale(pi), f.recast_T);
    matmul_fp8(dfcproj_w, f.fcproj_dout_T, f.grads, f.descale(pd), f.recast_T, Fp8Format::E4M3, f.descale(pi),
               nullptr, C, 4 * C, N, engine_options().fp8_fast_wgrad, stream, /*accumulate=*/true);
}
