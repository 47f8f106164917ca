// GPT-2 on the GPU: build, allocate, forward, backward, gradient norm, AdamW, and copies to the host.
//
// Memory is one table of named tensors (gpt2_memory.cuh), allocated as one device block. Parameters are floatX
// (bf16 or fp32) in gpt2_parameter_table order; BF16 builds keep fp32 master weights that AdamW updates
// (rounded stochastically into the bf16 copy).
//
// One layer (llm.c's layout): ln1 -> qkv -> attention -> attproj -> (+residual, ln2 fused) -> fc + GELU ->
// fcproj -> (+residual, next ln1 or lnf fused).
#pragma once

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "llmc/kernels/adamw.cuh"
#include "llmc/kernels/attention.cuh"
#include "llmc/core/cuda_common.h"
#include "llmc/core/options.h"
#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/fused_classifier.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/model/gpt2_config.h"
#include "llmc/model/gpt2_forward.cuh"
#include "llmc/model/gpt2_memory.cuh"
#include "llmc/model/gpt2_params.cuh"
#include "llmc/formats/hf_gpt2.h"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/matmul.cuh"
#include "llmc/kernels/hopper/matmul_hopper_dgelu.cuh"
#include "llmc/formats/model_file.h"
#include "llmc/core/rand.h"
#include "llmc/distributed/zero.cuh"

// ---------------------------------------------------------------- the model
struct GPT2 {
    GPT2Config config;
    // Settings, read by gpt2_allocate.
    bool use_master_weights = kFloatXIsBF16;  // BF16 builds: fp32 master copy (the trainer's -w)
    bool fuse_gelu = kFloatXIsBF16;           // GELU in the cuBLASLt epilogue (FP32 builds use the exact kernel)
    // Set by gpt2_allocate: fcproj's input gradient through the GELU, with fc's bias gradient and (under recompute)
    // the GELU output fcproj's weight gradient reads, by the Hopper kernel (llmc/kernels/hopper/matmul_hopper_dgelu.cuh) instead of
    // the GELU kernel and cuBLASLt's DGELU and BGRADB epilogues. BF16 builds on sm_90 with the fused GELU (faster at
    // d12 and d48: docs/PERFORMANCE.md); LLMC_HOPPER_DGELU=0 in the environment turns it off.
    bool hopper_dgelu = false;

    // ZeRO-1 (the trainer's -z 1), set by gpt2_use_zero before gpt2_allocate: master weights and AdamW moments
    // exist for this rank's shard only (llmc/distributed/zero.cuh); the trainer exchanges gradients and parameters.
    struct Zero {
        bool on = false;
        int num_ranks = 1, rank = 0;
        std::vector<GradBucket> plan;
        ZeroShard shard;           // set by gpt2_allocate
        size_t staging_elements = 0;
    } zero;

    // Hooks for the trainer's gradient and parameter exchange (train_gpt2.cu), called while the work is queued on
    // m->stream (not when it has run): grads_ready(l) once layer l's parameter gradients are all queued (l = L-1 down
    // to 0), then grads_ready(-1) after the encoder's (wte, wpe, lnf); params_needed(-1) before the forward queues
    // its first kernel (encoder, and lnf at its end), params_needed(l) before the first kernel that reads layer l's
    // parameters (the LayerNorm ahead of the layer, which reads its ln1). Unset: nothing is called.
    std::function<void(int)> grads_ready, params_needed;

    // gpt2_forward_backward replays its kernels from a CUDA Graph (captured on the second call with the same shape
    // and loss scale) where nothing runs between them on the host: no hooks (one GPU). Set before gpt2_allocate,
    // which then gives the model a stream of its own if it has none (the legacy stream cannot be captured).
    bool use_graphs = false;
    struct StepGraph {
        int B = 0, T = 0;
        float loss_scale = 0.0f;
        bool seen = false;                // an eager run with this key has set up every plan and lazy state
        cudaGraphExec_t exec = nullptr;
    } graph;
    cudaStream_t owned_stream = nullptr;  // created by gpt2_allocate for use_graphs

    // Set by gpt2_build_*: the initial parameters in fp32, uploaded by gpt2_allocate.
    std::vector<float> host_params;
    size_t num_parameters = 0;
    std::array<size_t, kNumParameterTensors> param_offsets{};

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

namespace gpt2_detail {

template <typename T> inline T* buf(GPT2* m, mem::Id id) { return (T*)m->memory[id]; }

// The forward's buffers in the memory table: every layer's slice (the backward reads them), except what recompute
// makes again in the backward (ln1, ln2 at 2; the GELU output at 1 and 2), which is one buffer for every layer.
inline ForwardActivations training_activations(GPT2* m) {
    const size_t ld = (size_t)m->B * m->T, C = m->config.channels;  // per-layer strides use the allocated size
    const size_t ln_stride = m->recompute >= 2 ? 0 : ld * C, gelu_stride = m->recompute >= 1 ? 0 : ld * 4 * C;
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

// the trainer's hooks as the forward's listener (until the optimizer object replaces them)
struct HookListener : ForwardListener {
    GPT2* m;
    explicit HookListener(GPT2* model) : m(model) {}
    void parameters_needed(int layer) override { m->params_needed(layer); }
};
// Layer `layer`'s slice of a parameter tensor (the whole tensor for the ones that are not per layer).
inline floatX* param(GPT2* m, ParamTensor tensor, int layer = 0) {
    const TensorSpec spec = gpt2_parameter_table(m->config)[tensor];
    const size_t layer_stride = spec.per_layer ? spec.numel / m->config.num_layers : 0;
    return buf<floatX>(m, mem::Params) + m->param_offsets[tensor] + (size_t)layer * layer_stride;
}
inline floatX* grad(GPT2* m, ParamTensor tensor, int layer = 0) {
    return buf<floatX>(m, mem::Grads) + (param(m, tensor, layer) - buf<floatX>(m, mem::Params));
}

inline void set_config(GPT2* m, const GPT2Config& c) {
    validate_gpt2_config("model", c, "invalid GPT-2 config");
    if (c.channels % 8 != 0) {
        fprintf(stderr, "error: GPT-2 config: C = %d must be a multiple of 8 (128-bit aligned rows)\n", c.channels);
        exit(EXIT_FAILURE);
    }
    if (c.channels > kLayerNormMaxChannels) {  // the LayerNorm forward holds a row in registers
        fprintf(stderr, "error: GPT-2 config: C = %d, at most %d in this build\n", c.channels, kLayerNormMaxChannels);
        exit(EXIT_FAILURE);
    }
    m->config = c;
    m->num_parameters = gpt2_num_parameters(c);
    m->param_offsets = gpt2_parameter_offsets(c);
}

inline void upload_tokens(GPT2* m, mem::Id id, const int* host, int B, int T, const char* what) {
    const int V = m->config.vocab_size;
    for (int i = 0; i < B * T; i++) {
        if (host[i] < 0 || host[i] >= V) {
            fprintf(stderr, "error: gpt2_forward: %s token %d at position %d is out of range [0, %d)\n", what, host[i],
                    i, V);
            exit(EXIT_FAILURE);
        }
    }
    cudaCheck(cudaMemcpyAsync(m->memory[id], host, (size_t)B * T * sizeof(int), cudaMemcpyHostToDevice, m->stream));
}

}  // namespace gpt2_detail

// path: our model file, or a Hugging Face GPT-2 directory / .safetensors (read_model_any, llmc/formats/hf_gpt2.h).
inline void gpt2_build_from_checkpoint(GPT2* m, const std::string& path) {
    ModelFile f = read_model_any(path);  // throws FileError naming the file
    gpt2_detail::set_config(m, f.config);
    m->host_params = std::move(f.params);
}

// GPT-2 init: weights N(0, 0.02), the residual projections (attprojw, fcprojw) N(0, 0.02/sqrt(2L)),
// LayerNorm weights 1, biases 0; wte's padding rows zero. Deterministic for a seed (llmc/core/rand.h).
inline void gpt2_build_random(GPT2* m, const GPT2Config& c, uint64_t seed) {
    using namespace gpt2_detail;
    set_config(m, c);
    m->host_params.assign(m->num_parameters, 0.0f);
    auto table = gpt2_parameter_table(c);
    Rng rng(seed);
    const float residual_std = 0.02f / sqrtf(2.0f * c.num_layers);
    for (int t = 0; t < kNumParameterTensors; t++) {
        const ParamTensor i = (ParamTensor)t;
        float* p = m->host_params.data() + m->param_offsets[i];
        size_t n = table[i].numel;
        if (i == LN1W || i == LN2W || i == LNFW) {
            for (size_t k = 0; k < n; k++) p[k] = 1.0f;
        } else if (i == WTE) {
            rng.fill_normal(p, (size_t)c.vocab_size * c.channels, 0.0f, 0.02f);  // padding rows stay 0
        } else if (i == WPE || i == QKVW || i == FCW) {
            rng.fill_normal(p, n, 0.0f, 0.02f);
        } else if (i == ATTPROJW || i == FCPROJW) {
            rng.fill_normal(p, n, 0.0f, residual_std);
        }  // biases stay 0
    }
}

// ZeRO-1 over num_ranks ranks (before gpt2_allocate): buckets of about bucket_bytes of bf16 gradients.
inline void gpt2_use_zero(GPT2* m, int num_ranks, int rank, size_t bucket_bytes) {
    m->zero.on = true;
    m->zero.num_ranks = num_ranks;
    m->zero.rank = rank;
    m->zero.plan = zero_bucket_plan(m->config, bucket_bytes, num_ranks);
    m->zero.staging_elements = 0;
    for (const GradBucket& b : m->zero.plan) m->zero.staging_elements = std::max(m->zero.staging_elements, b.padded);
}

// The start-up tables' line on the matrix products: cuBLASLt, where its algorithms come from, the Hopper GELU
// backward where it runs (set by gpt2_allocate), and where the qkv bias gradient comes from.
inline std::string gpt2_matmuls_description(const GPT2& m) {
    const bool qkv_bias = attention_backward_sums_qkv_bias(m.backend, m.config.channels / m.config.num_heads);
    return "cuBLASLt" + matmul_algorithms_description() +
           (m.hopper_dgelu ? std::string("; GELU backward + fc bias gradient") +
                                 (m.recompute >= 1 ? " + GELU recompute" : "") + " by the Hopper kernel"
                           : "") +
           (qkv_bias ? "; qkv bias gradient by the attention backward" : "");
}

inline void gpt2_allocate(GPT2* m, int B, int T, int recompute, AttentionBackend backend) {
    using namespace gpt2_detail;
    const GPT2Config& c = m->config;
    if (m->num_parameters == 0) {
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
    m->hopper_dgelu = engine_options().hopper_dgelu && kFloatXIsBF16 && m->fuse_gelu && matmul_hopper_available() && c.channels % 8 == 0;
    const size_t zero_shard = m->zero.on ? zero_shard_size(m->zero.plan, m->zero.num_ranks) : 0;
    const size_t zero_staging = m->zero.on ? m->zero.staging_elements : 0;
    m->memory_table = gpt2_memory_table(c, B, T, recompute, backend, m->use_master_weights, zero_shard, zero_staging);
    m->plan = memory_plan_of(m->memory_table);
    const size_t bytes = m->plan.total() - matmul_workspace_bytes();  // that one is already allocated
    size_t free_bytes = 0, total_bytes = 0;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total_bytes));
    cudaError_t err = bytes <= free_bytes ? cudaMalloc(&m->device_block, bytes) : cudaErrorMemoryAllocation;
    if (err != cudaSuccess) {
        cudaGetLastError();  // clear the failed allocation's error state
        int fits = 0;
        for (int b = B - 1; b >= 1; b--) {
            size_t need = memory_plan_of(gpt2_memory_table(c, b, T, recompute, backend, m->use_master_weights,
                                                            zero_shard, zero_staging)).total() -
                          matmul_workspace_bytes();
            if (need <= free_bytes) { fits = b; break; }
        }
        const double GiB = 1024.0 * 1024.0 * 1024.0;
        if (fits > 0) {
            fprintf(stderr, "error: out of device memory: B=%d T=%d recompute=%d needs %.2f GiB, %.2f GiB free; "
                            "the largest batch size that fits is B=%d (or raise -r recompute)\n",
                    B, T, recompute, bytes / GiB, free_bytes / GiB, fits);
        } else {
            fprintf(stderr, "error: out of device memory: B=%d T=%d recompute=%d needs %.2f GiB, %.2f GiB free; "
                            "even B=1 does not fit at this T\n", B, T, recompute, bytes / GiB, free_bytes / GiB);
        }
        exit(EXIT_FAILURE);
    }
    m->memory.assign(mem::Count, nullptr);
    char* at = (char*)m->device_block;
    const bool print_map = engine_options().print_memory_map;
    for (int i = 0; i < mem::Count; i++) {
        m->memory[i] = m->memory_table[i].elems ? at : nullptr;
        if (print_map) printf("memory map: %p .. %p  %s\n", (void*)at, (void*)(at + m->memory_table[i].bytes()),
                              m->memory_table[i].name.c_str());
        at += m->memory_table[i].bytes();
    }
    m->encoder_scratch = encoder_backward_scratch_at(m->memory[mem::EncoderScratch], B * T, c.vocab_size);
    m->params = GPT2Params(c, buf<floatX>(m, mem::Params));
    m->grads = GPT2Params(c, buf<floatX>(m, mem::Grads));
    m->acts = training_activations(m);

    // Upload the parameters: fp32 -> floatX (round to nearest), and the fp32 master copy.
    const size_t N = m->num_parameters, opt = zero_shard ? zero_shard : N;
    if (m->memory[mem::Master]) {
        if (m->zero.on) {  // this rank's shard of the fp32 parameters (padding 0)
            const std::vector<float> shard =
                zero_shard_from_flat(m->zero.plan, m->zero.num_ranks, m->zero.rank, m->host_params.data(), 0.0f);
            cudaCheck(cudaMemcpy(m->memory[mem::Master], shard.data(), opt * sizeof(float), cudaMemcpyHostToDevice));
        } else {
            cudaCheck(cudaMemcpy(m->memory[mem::Master], m->host_params.data(), N * sizeof(float), cudaMemcpyHostToDevice));
        }
    }
    host_floats_to_device(buf<floatX>(m, mem::Params), m->host_params.data(), N);
    cudaCheck(cudaMemset(m->memory[mem::Grads], 0, N * sizeof(floatX)));
    cudaCheck(cudaMemset(m->memory[mem::AdamM], 0, opt * sizeof(float)));
    cudaCheck(cudaMemset(m->memory[mem::AdamV], 0, opt * sizeof(float)));
    if (m->zero.on) {
        cudaCheck(cudaMemset(m->memory[mem::ZeroStaging], 0, zero_staging * sizeof(floatX)));
        m->zero.shard = zero_shard_create(m->zero.plan, c, m->zero.num_ranks, m->zero.rank);
    }
    m->host_params.clear();
    m->host_params.shrink_to_fit();
}

namespace gpt2_detail {

inline void check_forward_shape(const GPT2* m, int B, int T, const char* what) {
    if (!m->device_block || B < 1 || T < 1 || B > m->B || T > m->T) {
        fprintf(stderr, "error: %s: B=%d T=%d must be within the allocated B=%d T=%d\n", what, B, T, m->B, m->T);
        exit(EXIT_FAILURE);
    }
}

// The forward's kernels on m->stream (tokens already on the device), through the classifier when with_targets
// (the logits become dlogits, the losses land in mem::Losses). Queues only: no host synchronisation.
inline void forward_enqueue(GPT2* m, int B, int T, bool with_targets) {
    const GPT2Config& c = m->config;
    const int C = c.channels, V = c.vocab_size, Vp = c.padded_vocab_size;
    const int BT = B * T;
    cudaStream_t s = m->stream;
    HookListener hooks(m);
    gpt2_forward_layers(c, m->params, m->acts, buf<int>(m, mem::Inputs), ForwardShape{B, T, m->backend, m->fuse_gelu},
                        s, m->params_needed ? &hooks : nullptr);
    matmul_forward(buf<floatX>(m, mem::Logits), buf<floatX>(m, mem::Lnf), param(m, WTE), nullptr, BT, C, Vp, nullptr, false, s);
    if (with_targets) {
        fused_classifier(buf<floatX>(m, mem::Logits), buf<float>(m, mem::Losses), buf<int>(m, mem::Targets), BT, V, Vp,
                         1.0f / (float)BT, s);
    }
}

// The mean of the last forward's losses (waits for the stream).
inline float read_mean_loss(GPT2* m, int BT) {
    std::vector<float> losses(BT);
    cudaCheck(cudaMemcpyAsync(losses.data(), m->memory[mem::Losses], BT * sizeof(float), cudaMemcpyDeviceToHost,
                              m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    double sum = 0.0;
    for (int i = 0; i < BT; i++) sum += losses[i];
    return (float)(sum / BT);
}

}  // namespace gpt2_detail

// Forward pass on host token arrays (B*T each, B <= allocated B, T <= allocated T). Returns the mean loss,
// or NAN when targets is null (then the logits stay readable through gpt2_logits_to_host). With targets the
// logits are replaced by the gradient of the mean loss (the fused classifier), ready for gpt2_backward.
inline float gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T) {
    using namespace gpt2_detail;
    check_forward_shape(m, B, T, "gpt2_forward");
    upload_tokens(m, mem::Inputs, inputs, B, T, "input");
    if (targets) upload_tokens(m, mem::Targets, targets, B, T, "target");
    forward_enqueue(m, B, T, targets != nullptr);
    m->last_B = B;
    m->last_T = T;
    m->logits_valid = !targets;
    m->dlogits_ready = targets != nullptr;
    m->last_loss = targets ? read_mean_loss(m, B * T) : NAN;
    return m->last_loss;
}

inline void gpt2_zero_grad(GPT2* m) {
    cudaCheck(cudaMemsetAsync(m->memory[mem::Grads], 0, m->num_parameters * sizeof(floatX), m->stream));
}

namespace gpt2_detail {

// The backward's kernels on m->stream, after forward_enqueue with targets for the same B, T. Queues only (the
// hooks are called as their work is queued).
inline void backward_enqueue(GPT2* m, int B, int T, float loss_scale) {
    const GPT2Config& c = m->config;
    const int L = c.num_layers, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size;
    const int BT = B * T;
    const size_t ld = (size_t)m->B * m->T;
    cudaStream_t s = m->stream;
    floatX* dresidual = buf<floatX>(m, mem::DResidual);
    floatX* scratch = buf<floatX>(m, mem::ScratchBTC);
    floatX* scratch4 = buf<floatX>(m, mem::ScratchBT4C);
    floatX* dqkv = buf<floatX>(m, mem::Logits);
    void* attn_ws = dqkv + (size_t)BT * 3 * C;
    float* reduce = (float*)(buf<char>(m, mem::Logits) + gpt2_backward_partials_offset(c, m->B, m->T, m->backend));
    const size_t saved_stride = attention_saved_bytes(m->backend, m->B, m->T, NH);
    const bool qkv_bias_in_attention = attention_backward_sums_qkv_bias(m->backend, C / NH);
    auto ln1 = [&](int l) { return buf<floatX>(m, mem::Ln1) + (m->recompute >= 2 ? 0 : l * ld * C); };
    auto ln2 = [&](int l) { return buf<floatX>(m, mem::Ln2) + (m->recompute >= 2 ? 0 : l * ld * C); };

    // Classifier: the logits buffer holds dlogits of the mean loss; loss_scale enters as the GEMMs' alpha.
    // (no bias: no partials, which would overwrite dlogits)
    matmul_backward(scratch, grad(m, WTE), nullptr, buf<floatX>(m, mem::Logits), buf<floatX>(m, mem::Lnf), param(m, WTE), BT,
                    C, Vp, nullptr, nullptr, false, loss_scale, s);
    cudaCheck(cudaMemsetAsync(dresidual, 0, (size_t)BT * C * sizeof(floatX), s));
    // Each LayerNorm backward also sums its dinp over rows: the bias gradient of the projection (fcproj or
    // attproj) whose output gradient that residual stream is, so those two GEMMs need no bias pass.
    layernorm_backward(dresidual, grad(m, LNFW), grad(m, LNFB), scratch, buf<floatX>(m, mem::Residual3) + (L - 1) * ld * C,
                       param(m, LNFW), buf<float>(m, mem::LnfMean), buf<float>(m, mem::LnfRstd), BT, C, reduce, s,
                       grad(m, FCPROJB, L - 1));
    for (int l = L - 1; l >= 0; l--) {
        const floatX* residual = l == 0 ? buf<floatX>(m, mem::Encoded) : buf<floatX>(m, mem::Residual3) + (l - 1) * ld * C;
        const floatX* qkv = buf<floatX>(m, mem::Qkv) + l * ld * 3 * C;
        const floatX* atty = buf<floatX>(m, mem::Atty) + l * ld * C;
        const void* saved = buf<char>(m, mem::AttSaved) + l * saved_stride;
        const floatX* residual2 = buf<floatX>(m, mem::Residual2) + l * ld * C;
        const floatX* fch = buf<floatX>(m, mem::Fch) + l * ld * 4 * C;
        float* ln1_mean = buf<float>(m, mem::Ln1Mean) + l * ld;
        float* ln1_rstd = buf<float>(m, mem::Ln1Rstd) + l * ld;
        float* ln2_mean = buf<float>(m, mem::Ln2Mean) + l * ld;
        float* ln2_rstd = buf<float>(m, mem::Ln2Rstd) + l * ld;
        floatX* fch_gelu = buf<floatX>(m, mem::FchGelu) + (m->recompute >= 1 ? 0 : l * ld * 4 * C);
        if (m->recompute >= 1 && !m->hopper_dgelu) gelu_forward(fch_gelu, fch, (size_t)BT * 4 * C, s);
        if (m->recompute >= 2) {  // same kernel, same inputs: bit-identical to the forward's outputs
            layernorm_forward(ln1(l), ln1_mean, ln1_rstd, residual, param(m, LN1W, l), param(m, LN1B, l), BT, C, s);
            layernorm_forward(ln2(l), ln2_mean, ln2_rstd, residual2, param(m, LN2W, l), param(m, LN2B, l), BT, C, s);
        }
        // MLP: dresidual is d(residual3) here.
        floatX* dfch = scratch4;
        floatX* fc_dbias = grad(m, FCB, l);
        if (m->hopper_dgelu) {
            // dfch, fc's bias gradient summed in the same kernel (so none in fc's GEMM) and, under recompute, the
            // GELU output fcproj's weight gradient reads (so no pass of its own over fch)
            matmul_backward_dgelu_hopper(dfch, reduce, dresidual, param(m, FCPROJW, l), fch, BT, 4 * C, C, 1.0f, s,
                                         m->recompute >= 1 ? fch_gelu : nullptr);
            matmul_dgelu_bias_grad(fc_dbias, reduce, BT, 4 * C, 1.0f, s);
            fc_dbias = nullptr;
        } else {
            matmul_backward_input(dfch, dresidual, param(m, FCPROJW, l), BT, 4 * C, C, fch, m->fuse_gelu, 1.0f, s);
        }
        // after dfch: the Hopper kernel may have written fch_gelu (dfch has a buffer of its own, scratch4)
        matmul_backward_weight(grad(m, FCPROJW, l), nullptr, dresidual, fch_gelu, BT, 4 * C, C, reduce, 1.0f, s);
        matmul_backward(scratch, grad(m, FCW, l), fc_dbias, dfch, ln2(l), param(m, FCW, l), BT, C, 4 * C, reduce,
                        nullptr, false, 1.0f, s);
        layernorm_backward(dresidual, grad(m, LN2W, l), grad(m, LN2B, l), scratch, residual2, param(m, LN2W, l),
                           ln2_mean, ln2_rstd, BT, C, reduce, s, grad(m, ATTPROJB, l));
        // Attention: dresidual is now d(residual2).
        matmul_backward(scratch, grad(m, ATTPROJW, l), nullptr, dresidual, atty, param(m, ATTPROJW, l),
                        BT, C, C, reduce, nullptr, false, 1.0f, s);
        // on Hopper the attention backward also sums dqkv's columns (the qkv bias gradient), so its GEMM takes none
        attention_backward(m->backend, dqkv, scratch, qkv, atty, saved, attn_ws, B, T, C, NH, s,
                           qkv_bias_in_attention ? reduce : nullptr);
        if (qkv_bias_in_attention)
            column_sum_finish(grad(m, QKVB, l), reduce, attention_qkv_bias_partial_rows(B, T), 3 * C, 1.0f, s);
        matmul_backward(scratch, grad(m, QKVW, l), qkv_bias_in_attention ? nullptr : grad(m, QKVB, l), dqkv, ln1(l),
                        param(m, QKVW, l), BT, C, 3 * C, reduce, nullptr, false, 1.0f, s);
        layernorm_backward(dresidual, grad(m, LN1W, l), grad(m, LN1B, l), scratch, residual, param(m, LN1W, l),
                           ln1_mean, ln1_rstd, BT, C, reduce, s, l > 0 ? grad(m, FCPROJB, l - 1) : nullptr);
        // layer l's gradients are final (its fcproj bias was written by the LayerNorm backward above it)
        if (m->grads_ready) m->grads_ready(l);
    }
    encoder_backward(grad(m, WTE), grad(m, WPE), dresidual, buf<int>(m, mem::Inputs), B, T, C, c.vocab_size,
                     m->encoder_scratch, s);
    if (m->grads_ready) m->grads_ready(-1);
}

}  // namespace gpt2_detail

// Accumulates the gradient of loss_scale · (mean loss of the last forward) into the gradients.
// Must follow a gpt2_forward with targets (its inputs and targets are still on the device).
inline void gpt2_backward(GPT2* m, float loss_scale) {
    if (!m->dlogits_ready) {
        fprintf(stderr, "error: gpt2_backward: needs a preceding gpt2_forward with targets\n");
        exit(EXIT_FAILURE);
    }
    m->dlogits_ready = false;
    gpt2_detail::backward_enqueue(m, m->last_B, m->last_T, loss_scale);
    cudaCheck(cudaStreamSynchronize(m->stream));
}

// gpt2_forward with targets, then gpt2_backward(loss_scale), as one unit: with use_graphs and no hooks, the
// second call with the same B, T and loss_scale captures the kernels into a CUDA Graph and every later call
// replays it (one launch instead of ~380: no gaps while the host queues them). Same kernels, same order, same
// bits. Returns the mean loss.
inline float gpt2_forward_backward(GPT2* m, const int* inputs, const int* targets, int B, int T, float loss_scale) {
    using namespace gpt2_detail;
    check_forward_shape(m, B, T, "gpt2_forward_backward");
    upload_tokens(m, mem::Inputs, inputs, B, T, "input");
    upload_tokens(m, mem::Targets, targets, B, T, "target");
    GPT2::StepGraph& g = m->graph;
    const bool graphable = m->use_graphs && m->stream != 0 && !m->grads_ready && !m->params_needed;
    const bool same_key = g.B == B && g.T == T && g.loss_scale == loss_scale;
    if (!graphable || !same_key) {
        if (g.exec) cudaCheck(cudaGraphExecDestroy(g.exec));
        g = GPT2::StepGraph{};
        g.B = B, g.T = T, g.loss_scale = loss_scale;
    }
    if (graphable && g.seen && !g.exec) {
        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(m->stream, cudaStreamCaptureModeThreadLocal));
        forward_enqueue(m, B, T, true);
        backward_enqueue(m, B, T, loss_scale);
        cudaCheck(cudaStreamEndCapture(m->stream, &graph));
        cudaCheck(cudaGraphInstantiate(&g.exec, graph, 0));
        cudaCheck(cudaGraphDestroy(graph));
    }
    if (g.exec) {
        cudaCheck(cudaGraphLaunch(g.exec, m->stream));
    } else {
        forward_enqueue(m, B, T, true);
        backward_enqueue(m, B, T, loss_scale);
        g.seen = true;
    }
    m->last_B = B;
    m->last_T = T;
    m->logits_valid = false;
    m->dlogits_ready = false;
    m->last_loss = read_mean_loss(m, B * T);
    return m->last_loss;
}

// The gradients' L2 norm; with ZeRO-1 that of this rank's owned, reduce-scattered gradients (the trainer combines
// the ranks').
inline float gpt2_grad_norm(GPT2* m) {
    if (m->zero.on) return zero_grad_norm(m->zero.shard, (const floatX*)m->memory[mem::Grads], m->stream);
    return global_norm((const floatX*)m->memory[mem::Grads], m->num_parameters, (float*)m->memory[mem::NormPartials],
                       m->stream);
}

struct AdamWParams {
    float lr, beta1, beta2, eps, weight_decay;
};

// One AdamW step on every tensor; gradients are multiplied by grad_scale first (clipping). step >= 1.
inline void gpt2_update(GPT2* m, const AdamWParams& p, float grad_scale, int step, uint64_t seed) {
    if (step < 1) {
        fprintf(stderr, "error: gpt2_update: step must be >= 1 (got %d)\n", step);
        exit(EXIT_FAILURE);
    }
    AdamWTensorTable table;
    auto specs = gpt2_parameter_table(m->config);
    for (int i = 0; i < kNumParameterTensors; i++) {
        table.offset[i] = m->param_offsets[i];
        table.size[i] = specs[i].numel;
        table.weight_decay[i] = specs[i].weight_decay ? p.weight_decay : 0.0f;
    }
    if (m->zero.on) {  // this rank's shard, from its reduce-scattered gradients (the trainer gathers after)
        zero_adamw_update(m->zero.shard, (floatX*)m->memory[mem::Params], (float*)m->memory[mem::Master],
                          (const floatX*)m->memory[mem::Grads], (float*)m->memory[mem::AdamM],
                          (float*)m->memory[mem::AdamV], table, adamw_step(p.lr, p.beta1, p.beta2, p.eps, grad_scale,
                                                                           step, seed), m->stream);
    } else {
        adamw_update((floatX*)m->memory[mem::Params], (float*)m->memory[mem::Master],
                     (const floatX*)m->memory[mem::Grads], (float*)m->memory[mem::AdamM], (float*)m->memory[mem::AdamV],
                     table, kNumParameterTensors, p.lr, p.beta1, p.beta2, p.eps, grad_scale, step, seed, m->stream);
    }
    cudaCheck(cudaStreamSynchronize(m->stream));
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
    device_to_host_floats(out.data(), (const floatX*)m->memory[mem::Params], out.size());
    return out;
}

// The gradients as fp32 on the host (for tests).
inline std::vector<float> gpt2_grads_to_host(GPT2* m) {
    std::vector<float> out(m->num_parameters);
    device_to_host_floats(out.data(), (const floatX*)m->memory[mem::Grads], out.size());
    return out;
}

// The model as computed with: fp32 v3 in FP32 builds, bf16 v5 (the bf16 parameters, exactly) in BF16 builds.
inline void gpt2_write_model(GPT2* m, const std::string& path) {
    std::vector<float> params = gpt2_params_to_host(m);
    write_model_file(path, m->config, params.data(), kFloatXIsBF16 ? ParamDtype::BF16 : ParamDtype::FP32);
}

inline floatX* gpt2_grads(GPT2* m) { return (floatX*)m->memory[mem::Grads]; }
inline size_t gpt2_num_parameters(const GPT2* m) { return m->num_parameters; }

inline void gpt2_free(GPT2* m) {
    if (m->graph.exec) cudaCheck(cudaGraphExecDestroy(m->graph.exec));
    m->graph = GPT2::StepGraph{};
    if (m->owned_stream) {
        cudaCheck(cudaStreamDestroy(m->owned_stream));
        if (m->stream == m->owned_stream) m->stream = 0;
        m->owned_stream = nullptr;
    }
    zero_shard_free(&m->zero.shard);
    if (m->device_block) cudaCheck(cudaFree(m->device_block));
    m->device_block = nullptr;
    m->memory.clear();
    m->host_params.clear();
}
