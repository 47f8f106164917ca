// The training model's memory as one table of named tensors: every buffer the model owns is a row with a name, an
// element count, an element size and a group (parameters, gradients, activations, workspace). Offsets into the
// single device allocation, the MemoryPlan and its printout all come from this table; nothing else counts bytes by
// hand. The optimizer's state (master weights, AdamW moments, the exchange's staging) is its own table
// (llmc/optimizer/adamw_optimizer.cuh), in the same MemoryTensor rows.
// recompute: 0 keeps every activation; 1 recomputes GELU(fch) in backward instead of storing it per layer;
// 2 additionally recomputes the ln1/ln2 outputs from the saved residuals and statistics.
// grads: where the gradients live (gpt2_params.cuh): the whole flat buffer, or (ZeRO-2) only the tensors outside the
// layers, in the exchange's layout; the layers' gradients are then in the optimizer's table.
// The logits buffer doubles as the backward's scratch once the classifier's gradient is consumed: dqkv, the
// attention's workspace, then the reduction partials (gpt2_backward_partials_offset). The attention forward also
// takes it as workspace.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "llmc/core/cuda_common.h"
#include "llmc/core/memory_table.h"
#include "llmc/gpt2/gpt2_config.h"
#include "llmc/kernels/attention/attention.cuh"
#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/layernorm_backward.cuh"
#include "llmc/kernels/matmul/matmul.cuh"
#include "llmc/kernels/matmul/matmul_hopper_dgelu.cuh"
#include "llmc/model/gpt2_params.cuh"

// ---------------------------------------------------------------- the memory table
// Indices of the table's rows (the order of this enum is the order of the table).
namespace mem {
enum Id {
    Params, Grads,
    Encoded, Ln1, Ln1Mean, Ln1Rstd, Qkv, Atty, AttSaved, Residual2, Ln2, Ln2Mean, Ln2Rstd, Fch,
    FchGelu, Residual3, Lnf, LnfMean, LnfRstd, Logits, Losses,
    DResidual, ScratchBTC, ScratchBT4C, Inputs, Targets, EncoderScratch, Count
};
}  // namespace mem

// The backward's reduction partials (fp32): LayerNorm backward's weight and bias sums, the bias-gradient column sums,
// the GELU-backward GEMM's bias partials and the attention's qkv bias partial rows, each used and finished within
// one step of the backward.
inline size_t gpt2_backward_partials_floats(const GPT2Config& c, int B, int T) {
    const size_t C = c.channels, BT = (size_t)B * T;
    const int rows = (int)BT, C4 = (int)(4 * C);
    return std::max({layernorm_backward_scratch_floats(rows, (int)C), column_sum_scratch_floats(rows, C4),
                     matmul_dgelu_partials_floats(rows, C4), (size_t)attention_qkv_bias_partial_rows(B, T) * 3 * C});
}

// Where they sit in the logits buffer (bytes): past dqkv (B·T·3C floatX) and the attention's workspace, which the
// attention backward writes beside them; the classifier's backward, which reads dlogits there, takes none.
inline size_t gpt2_backward_partials_offset(const GPT2Config& c, int B, int T, AttentionBackend backend) {
    const size_t dqkv_bytes = (size_t)B * T * 3 * c.channels * sizeof(floatX);
    return round_up(dqkv_bytes + attention_workspace_bytes(backend, B, T, c.channels, c.num_heads), 256);
}

// fp8: the blocks' linears run in FP8 (llmc/model/gpt2_fp8.cuh), whose backward reads the transposes their forward
// casts kept, so ln1, ln2 and the GELU output are one buffer for every layer, as under recompute.
inline std::vector<MemoryTensor> gpt2_memory_table(const GPT2Config& c, int B, int T, int recompute,
                                                   AttentionBackend backend, const GradLayout& grads = GradLayout{},
                                                   bool fp8 = false) {
    const size_t N = gpt2_num_parameters(c), L = c.num_layers, C = c.channels, NH = c.num_heads,
                 Vp = c.padded_vocab_size, BT = (size_t)B * T;
    const size_t X = sizeof(floatX), F = sizeof(float);
    using G = MemoryGroup;
    const size_t ln_layers = recompute >= 2 || fp8 ? 1 : L;    // ln1/ln2 outputs kept per layer unless recomputed
    const size_t gelu_layers = recompute >= 1 || fp8 ? 1 : L;  // GELU outputs kept per layer unless recomputed
    const size_t scratch_bytes =
        gpt2_backward_partials_offset(c, B, T, backend) + gpt2_backward_partials_floats(c, B, T) * F;
    const size_t logits_elems = std::max(BT * Vp, (scratch_bytes + X - 1) / X);
    std::vector<MemoryTensor> t(mem::Count);
    t[mem::Params] = {"parameters (" PRECISION_NAME ")", G::Parameters, N, X};
    t[mem::Grads] = grads.flat() ? MemoryTensor{"gradients (" PRECISION_NAME ")", G::Gradients, N, X}
                                 : MemoryTensor{"gradients (" PRECISION_NAME ", wte wpe lnf only: ZeRO-2)", G::Gradients,
                                                grads.elements, X};
    t[mem::Encoded] = {"encoded", G::Activations, BT * C, X};
    t[mem::Ln1] = {"ln1", G::Activations, ln_layers * BT * C, X};
    t[mem::Ln1Mean] = {"ln1_mean", G::Activations, L * BT, F};
    t[mem::Ln1Rstd] = {"ln1_rstd", G::Activations, L * BT, F};
    t[mem::Qkv] = {"qkv", G::Activations, L * BT * 3 * C, X};
    t[mem::Atty] = {"atty", G::Activations, L * BT * C, X};
    t[mem::AttSaved] = {std::string("attention saved (") + attention_backend_name(backend) + ")", G::Activations,
                    L * attention_saved_bytes(backend, B, T, (int)NH), 1};
    t[mem::Residual2] = {"residual2", G::Activations, L * BT * C, X};
    t[mem::Ln2] = {"ln2", G::Activations, ln_layers * BT * C, X};
    t[mem::Ln2Mean] = {"ln2_mean", G::Activations, L * BT, F};
    t[mem::Ln2Rstd] = {"ln2_rstd", G::Activations, L * BT, F};
    t[mem::Fch] = {"fch (pre-GELU)", G::Activations, L * BT * 4 * C, X};
    t[mem::FchGelu] = {"fch_gelu", G::Activations, gelu_layers * BT * 4 * C, X};
    t[mem::Residual3] = {"residual3", G::Activations, L * BT * C, X};
    t[mem::Lnf] = {"lnf", G::Activations, BT * C, X};
    t[mem::LnfMean] = {"lnf_mean", G::Activations, BT, F};
    t[mem::LnfRstd] = {"lnf_rstd", G::Activations, BT, F};
    t[mem::Logits] = {"logits / scratch", G::Activations, logits_elems, X};
    t[mem::Losses] = {"losses", G::Activations, BT, F};
    t[mem::DResidual] = {"dresidual", G::Workspace, BT * C, X};
    t[mem::ScratchBTC] = {"scratch (B,T,C)", G::Workspace, BT * C, X};
    t[mem::ScratchBT4C] = {"scratch (B,T,4C)", G::Workspace, BT * 4 * C, X};
    t[mem::Inputs] = {"inputs", G::Workspace, BT, sizeof(int)};
    t[mem::Targets] = {"targets", G::Workspace, BT, sizeof(int)};
    t[mem::EncoderScratch] = {"encoder backward sort", G::Workspace,
                          encoder_backward_scratch_bytes((int)BT, c.vocab_size), 1};
    return t;
}

// The model's plan: its table, and cuBLASLt's workspace (matmul_init allocates it; counted once, here).
inline MemoryPlan gpt2_memory_plan(const std::vector<MemoryTensor>& table) {
    MemoryPlan p = memory_plan_of(table);
    p.workspace += matmul_workspace_bytes();
    return p;
}
