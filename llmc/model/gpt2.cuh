// GPT-2 for training on the GPU: the model object (build, allocate, free, copies to the host). It owns the
// parameters, their gradients and the activations; the optimizer owns its state (llmc/optimizer/adamw_optimizer.cuh)
// and generation its own memory (llmc/inference/).
//
// Memory is one table of named tensors (gpt2_memory.cuh), allocated as one device block. Parameters are floatX
// (bf16 or fp32) in gpt2_parameter_table order. The passes that run on it: llmc/model/gpt2_step.cuh.
#pragma once

#include <string>
#include <vector>

#include "llmc/core/cuda_common.h"
#include "llmc/core/options.h"
#include "llmc/core/rand.h"
#include "llmc/formats/hf_gpt2.h"
#include "llmc/gpt2/gpt2_config.h"
#include "llmc/gpt2/gpt2_init.h"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/matmul/matmul_hopper_dgelu.cuh"
#include "llmc/model/gpt2_forward.cuh"
#include "llmc/model/gpt2_fp8.cuh"
#include "llmc/model/gpt2_fp8_delayed.cuh"
#include "llmc/model/gpt2_memory.cuh"
#include "llmc/model/gpt2_params.cuh"
#include "llmc/model/step_graph.h"

struct GPT2 {
    GPT2Config config;
    bool fuse_gelu = kFloatXIsBF16;  // GELU in the cuBLASLt epilogue (FP32 builds use the exact kernel)
    // Set by gpt2_allocate: fcproj's input gradient through the GELU, with fc's bias gradient and (under recompute)
    // the GELU output, by the Hopper kernel (llmc/kernels/matmul/matmul_hopper_dgelu.cuh) instead of the GELU kernel
    // and cuBLASLt's DGELU and BGRADB epilogues: BF16 builds on sm_90 with the fused GELU, unless LLMC_HOPPER_DGELU=0.
    bool hopper_dgelu = false;
    // gpt2_forward_backward replays its kernels from a CUDA Graph (llmc/model/gpt2_step.cuh). Set before
    // gpt2_allocate, which then gives the model a stream of its own if it has none (the legacy stream cannot be
    // captured).
    bool use_graphs = false;
    std::vector<StepGraph> graphs;        // one per key (llmc/model/step_graph.h), at most kMaxStepGraphs
    cudaStream_t owned_stream = nullptr;  // created by gpt2_allocate for use_graphs
    // Set before gpt2_allocate: where the gradients live (gpt2_params.cuh). Flat by default; with ZeRO-2 the model
    // keeps only wte's, wpe's and lnf's, and grads.slices point at the optimizer's slots for the layers' (both set by
    // model_and_optimizer_init, llmc/optimizer/model_and_optimizer.cuh).
    GradLayout grad_layout;
    // Set before gpt2_allocate (-fp8, after gpt2_fp8_problem): 1 the blocks' linear layers in FP8, 2 the lm_head's
    // forward too (llmc/model/gpt2_fp8.cuh), whose state gpt2_allocate allocates beside the memory table.
    int fp8 = 0;
    int fp8_history = 0;  // -fp8h: delayed scaling over that many micro-steps where it fuses (0: current scaling)
    int fp8_micro_steps = 1;  // micro-steps an optimizer step (gradient accumulation): -fp8h's weights cast once a step
    Fp8Layers fp8_layers;
    // The FP8 weight copies are the parameters' (cast by a forward since they last changed): set by that forward,
    // cleared where the parameters change (their upload here, the optimizer's update).
    bool fp8_weights_current = false;

    // Set by gpt2_build_*: the parameters in fp32 as built or read. gpt2_allocate uploads them and keeps them for
    // the optimizer's master copy (exact fp32, not the rounded floatX); gpt2_release_host_params frees them.
    std::vector<float> host_params;
    size_t num_parameters = 0;

    // Set by gpt2_allocate.
    int B = 0, T = 0, recompute = 1;
    AttentionBackend backend = AttentionBackend::Materialized;
    std::vector<MemoryTensor> memory_table;
    std::vector<void*> memory;  // device pointer per mem::Id
    void* device_block = nullptr;
    MemoryPlan plan;
    EncoderBackwardScratch encoder_scratch;
    GPT2Params params, grads;  // views of mem::Params and mem::Grads
    ForwardActivations acts;   // the forward's buffers in the memory table (every layer's, for the backward)
    cudaStream_t stream = 0;

    // State of the last forward pass.
    int last_B = 0, last_T = 0;
    bool logits_valid = false;      // logits hold the last forward's logits (no targets given)
    bool dlogits_ready = false;     // logits hold dlogits for backward (targets given)
    float last_loss = NAN;
};

// What the GPU engine cannot train, for a valid GPT-2 shape ("" when it can): rows of C must be 16-byte aligned, and the
// LayerNorm forward holds a row in registers. The trainer's preflight asks first (train_gpt2.cu passes it).
inline std::string gpt2_shape_problem(const GPT2Config& c) {
    if (c.channels % 8 != 0) return "C = " + std::to_string(c.channels) + " must be a multiple of 8 (16-byte rows)";
    if (c.channels > kLayerNormMaxChannels) {
        return "C = " + std::to_string(c.channels) + ", at most " + std::to_string(kLayerNormMaxChannels) +
               " in this build";
    }
    return "";
}

namespace gpt2_detail {

template <typename T> inline T* buf(GPT2* m, mem::Id id) { return (T*)m->memory[id]; }

// The forward's buffers in the memory table: every layer's slice (the backward reads them), except what recompute
// makes again in the backward (ln1, ln2 at 2; the GELU output at 1 and 2) or an FP8 backward does not read (ln1,
// ln2, the GELU output), which is one buffer for every layer.
inline ForwardActivations training_activations(GPT2* m) {
    const size_t ld = (size_t)m->B * m->T, C = m->config.channels;  // per-layer strides use the allocated size
    const bool fp8 = m->fp8 != 0;
    const size_t ln_stride = m->recompute >= 2 || fp8 ? 0 : ld * C;
    const size_t gelu_stride = m->recompute >= 1 || fp8 ? 0 : ld * 4 * C;
    ForwardActivations a;
    a.encoded = buf<floatX>(m, mem::Encoded);
    a.ln1 = {buf<floatX>(m, mem::Ln1), ln_stride};
    a.ln1_mean = {buf<float>(m, mem::Ln1Mean), ld};
    a.ln1_rstd = {buf<float>(m, mem::Ln1Rstd), ld};
    a.qkv = {buf<floatX>(m, mem::Qkv), ld * 3 * C};
    a.atty = {buf<floatX>(m, mem::Atty), ld * C};
    a.attention_saved = {buf<char>(m, mem::AttSaved), attention_saved_bytes(m->backend, m->B, m->T, m->config.num_heads)};
    a.residual2 = {buf<floatX>(m, mem::Residual2), ld * C};
    a.ln2 = {buf<floatX>(m, mem::Ln2), ln_stride};
    a.ln2_mean = {buf<float>(m, mem::Ln2Mean), ld};
    a.ln2_rstd = {buf<float>(m, mem::Ln2Rstd), ld};
    a.fch = {buf<floatX>(m, mem::Fch), ld * 4 * C};
    a.fch_gelu = {buf<floatX>(m, mem::FchGelu), gelu_stride};
    a.residual3 = {buf<floatX>(m, mem::Residual3), ld * C};
    a.lnf = buf<floatX>(m, mem::Lnf);
    a.lnf_mean = buf<float>(m, mem::LnfMean);
    a.lnf_rstd = buf<float>(m, mem::LnfRstd);
    a.scratch = buf<floatX>(m, mem::ScratchBTC);
    a.attention_workspace = buf<floatX>(m, mem::Logits);  // the forward's attention takes the logits as workspace
    return a;
}

inline void set_config(GPT2* m, const GPT2Config& c) {
    validate_gpt2_config("model", c, "invalid GPT-2 config");
    const std::string problem = gpt2_shape_problem(c);  // the trainer's preflight refused such a model already
    if (!problem.empty()) {
        fprintf(stderr, "error: GPT-2 config: %s\n", problem.c_str());
        exit(EXIT_FAILURE);
    }
    m->config = c;
    m->num_parameters = gpt2_num_parameters(c);
}

}  // namespace gpt2_detail

// path: our model file, or a Hugging Face GPT-2 directory / .safetensors (read_model_any, llmc/formats/hf_gpt2.h).
inline void gpt2_build_from_checkpoint(GPT2* m, const std::string& path) {
    ModelFile f = read_model_any(path);  // throws FileError naming the file
    gpt2_detail::set_config(m, f.config);
    m->host_params = std::move(f.params);
}

// GPT-2's random init (llmc/gpt2/gpt2_init.h), deterministic for a seed.
inline void gpt2_build_random(GPT2* m, const GPT2Config& c, uint64_t seed) {
    gpt2_detail::set_config(m, c);
    m->host_params = gpt2_random_init(c, seed);
}

// The start-up tables' line on the matrix products: cuBLASLt, where its algorithms come from, the Hopper GELU
// backward where it runs (set by gpt2_allocate), and where the qkv bias gradient comes from.
inline std::string gpt2_matmuls_description(const GPT2& m) {
    const bool qkv_bias = attention_backward_sums_qkv_bias(m.backend, m.config.channels / m.config.num_heads);
    return "cuBLASLt" + matmul_algorithms_description() +
           (m.hopper_dgelu ? std::string("; GELU backward + fc bias gradient") +
                                 (m.recompute >= 1 ? " + GELU recompute" : "") + " by the Hopper kernel"
                           : "") +
           (qkv_bias ? "; qkv bias gradient by the attention backward" : "") +
           (m.fp8_layers.on() ? std::string("; the blocks' linear layers") +
                                    (m.fp8_layers.lm_head() ? " and the lm_head's forward" : "") +
                                    " in FP8 (E4M3 x E4M3 forward, " +
                                    (m.fp8_layers.grads == Fp8Format::E4M3 ? "E4M3" : "E5M2") +
                                    " gradients, " +
                                    (m.fp8_layers.blocks() ? "a scale per block of 128 (weights 128x128)"
                                                           : "current scaling") +
                                    (m.fp8_layers.delayed.on()
                                         ? ", delayed over " + std::to_string(m.fp8_layers.delayed.H) +
                                               " micro-steps for the weights, qkv's, fc's and fcproj's inputs and "
                                               "fc's output gradient"
                                         : std::string()) + "; " +
                                    std::to_string(m.fp8_layers.bytes >> 20) + " MiB)"
                              : "");
}

// Allocates the memory table for batches up to B x T and uploads the parameters. reserve_bytes: device memory the
// caller allocates next (the optimizer's state), counted when checking that the plan fits.
inline void gpt2_allocate(GPT2* m, int B, int T, int recompute, AttentionBackend backend, size_t reserve_bytes = 0) {
    using namespace gpt2_detail;
    const GPT2Config& c = m->config;
    if (m->num_parameters == 0 || m->host_params.size() != m->num_parameters) {
        fprintf(stderr, "error: gpt2_allocate: build the model first\n");
        exit(EXIT_FAILURE);
    }
    if (B < 1 || T < 1 || T > c.max_seq_len || recompute < 0 || recompute > 2) {
        fprintf(stderr, "error: gpt2_allocate: need B >= 1, 1 <= T <= %d (max_seq_len), recompute 0..2 "
                        "(got B=%d T=%d recompute=%d)\n", c.max_seq_len, B, T, recompute);
        exit(EXIT_FAILURE);
    }
    std::string why;
    if (!attention_backend_supported(backend, c.channels, c.num_heads, &why)) {
        fprintf(stderr, "error: %s\n", why.c_str());
        exit(EXIT_FAILURE);
    }
    matmul_init();
    if (m->use_graphs && m->stream == 0) {  // blocking: ordered with the legacy stream, as the default stream was
        cudaCheck(cudaStreamCreate(&m->owned_stream));
        m->stream = m->owned_stream;
    }
    m->B = B;
    m->T = T;
    m->recompute = recompute;
    m->backend = backend;
    m->hopper_dgelu = engine_options().hopper_dgelu && kFloatXIsBF16 && m->fuse_gelu && matmul_hopper_available() &&
                      c.channels % 8 == 0 && !m->fp8;  // FP8 runs: the input gradient is an FP8 GEMM
    const size_t reserve_without_fp8 = reserve_bytes;  // the FP8 state grows with B (the "fits" search below)
    const int fp8_Vp = m->fp8 >= 2 ? c.padded_vocab_size : 0;  // the lm_head's FP8 weight
    auto fp8_bytes = [&](int b) { return m->fp8 ? gpt2_fp8_bytes(c.num_layers, c.channels, b * T, fp8_Vp) : 0; };
    reserve_bytes += fp8_bytes(B);
    m->memory_table = gpt2_memory_table(c, B, T, recompute, backend, m->grad_layout, m->fp8 != 0);
    m->plan = gpt2_memory_plan(m->memory_table);
    const size_t bytes = memory_table_bytes(m->memory_table);  // cuBLASLt's workspace is already allocated
    size_t free_bytes = 0, total_bytes = 0;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total_bytes));
    cudaError_t err =
        bytes + reserve_bytes <= free_bytes ? cudaMalloc(&m->device_block, bytes) : cudaErrorMemoryAllocation;
    if (err != cudaSuccess) {
        cudaGetLastError();  // clear the failed allocation's error state
        int fits = 0;
        for (int b = B - 1; b >= 1; b--) {
            if (memory_table_bytes(gpt2_memory_table(c, b, T, recompute, backend, m->grad_layout, m->fp8 != 0)) +
                    reserve_without_fp8 + fp8_bytes(b) <= free_bytes) {
                fits = b;
                break;
            }
        }
        const double GiB = 1024.0 * 1024.0 * 1024.0, need = (bytes + reserve_bytes) / GiB;
        if (fits > 0) {
            fprintf(stderr, "error: out of device memory: B=%d T=%d recompute=%d needs %.2f GiB, %.2f GiB free; "
                            "the largest batch size that fits is B=%d (or raise -r recompute)\n",
                    B, T, recompute, need, free_bytes / GiB, fits);
        } else {
            fprintf(stderr, "error: out of device memory: B=%d T=%d recompute=%d needs %.2f GiB, %.2f GiB free; "
                            "even B=1 does not fit at this T\n", B, T, recompute, need, free_bytes / GiB);
        }
        exit(EXIT_FAILURE);
    }
    m->memory = memory_table_carve(m->memory_table, m->device_block);
    if (m->fp8) gpt2_fp8_allocate(&m->fp8_layers, c.num_layers, c.channels, B * T, fp8_Vp);
    if (m->fp8 && m->fp8_history > 0)
        gpt2_fp8_delayed_allocate(&m->fp8_layers, m->fp8_history, m->fp8_micro_steps);
    if (engine_options().print_memory_map) {  // to read sanitizer reports' addresses
        for (int i = 0; i < mem::Count; i++)
            printf("memory map: %p .. %p  %s\n", m->memory[i], (char*)m->memory[i] + m->memory_table[i].bytes(),
                   m->memory_table[i].name.c_str());
    }
    m->encoder_scratch = encoder_backward_scratch_at(m->memory[mem::EncoderScratch], B * T, c.vocab_size);
    m->params = GPT2Params(c, buf<floatX>(m, mem::Params));
    m->grads = GPT2Params(c, buf<floatX>(m, mem::Grads), m->grad_layout);
    m->acts = training_activations(m);
    host_floats_to_device(m->params.base, m->host_params.data(), m->num_parameters);  // fp32 -> floatX, to nearest
    m->fp8_weights_current = false;
    cudaCheck(cudaMemset(m->grads.base, 0, m->memory_table[mem::Grads].elems * sizeof(floatX)));
}

// The fp32 parameters gpt2_build_* made, once nothing needs them any more (the optimizer has its master copy).
inline void gpt2_release_host_params(GPT2* m) {
    m->host_params.clear();
    m->host_params.shrink_to_fit();
}

// Device memory nothing reads between two optimizer steps (the activations): for work between steps, such as
// gathering the optimizer state for a checkpoint.
inline void* gpt2_scratch_between_steps(GPT2* m, size_t* bytes) {
    *bytes = m->plan.activations;
    return m->memory[mem::Encoded];  // the first activation row: the activations are contiguous in the table
}

// Vp logits of position (b, t) of the last forward, which must have been run without targets.
inline void gpt2_logits_to_host(GPT2* m, int b, int t, float* host_out) {
    if (!m->logits_valid || b < 0 || b >= m->last_B || t < 0 || t >= m->last_T) {
        fprintf(stderr, "error: gpt2_logits_to_host: needs a preceding gpt2_forward without targets and b < B, t < T\n");
        exit(EXIT_FAILURE);
    }
    const int Vp = m->config.padded_vocab_size;
    cudaCheck(cudaStreamSynchronize(m->stream));  // the copy runs on the legacy stream; m->stream may not be it
    device_to_host_floats(host_out, (const floatX*)m->memory[mem::Logits] + ((size_t)b * m->last_T + t) * Vp, Vp);
}

// The parameters as fp32 on the host (bf16 widened exactly).
inline std::vector<float> gpt2_params_to_host(GPT2* m) {
    std::vector<float> out(m->num_parameters);
    device_to_host_floats(out.data(), m->params.base, out.size());
    return out;
}

// The gradients as fp32 on the host (for tests; a model that holds them all).
inline std::vector<float> gpt2_grads_to_host(GPT2* m) {
    if (!m->grad_layout.flat()) {
        fprintf(stderr, "error: gpt2_grads_to_host: this model keeps only wte's, wpe's and lnf's gradients (ZeRO-2)\n");
        exit(EXIT_FAILURE);
    }
    std::vector<float> out(m->num_parameters);
    device_to_host_floats(out.data(), m->grads.base, out.size());
    return out;
}

// The model as computed with: fp32 v3 in FP32 builds, bf16 v5 (the bf16 parameters, exactly) in BF16 builds.
inline void gpt2_write_model(GPT2* m, const std::string& path) {
    std::vector<float> params = gpt2_params_to_host(m);
    write_model_file(path, m->config, params.data(), kFloatXIsBF16 ? ParamDtype::BF16 : ParamDtype::FP32);
}

inline size_t gpt2_num_parameters(const GPT2* m) { return m->num_parameters; }

inline void gpt2_free(GPT2* m) {
    for (StepGraph& g : m->graphs) step_graph_free(&g);
    m->graphs.clear();
    if (m->owned_stream) {
        cudaCheck(cudaStreamDestroy(m->owned_stream));
        if (m->stream == m->owned_stream) m->stream = 0;
        m->owned_stream = nullptr;
    }
    if (m->device_block) cudaCheck(cudaFree(m->device_block));
    m->device_block = nullptr;
    gpt2_fp8_free(&m->fp8_layers);
    m->memory.clear();
    gpt2_release_host_params(m);
}
