// Generation's batch-1 decode step as one persistent kernel (llmc/kernels/decode/decode_persistent.cuh):
// the phase list over the engine's parameters, KV cache and buffers, built once at set-up, and the launch of one
// step. The kernel reads the token and the length from the device and leaves its counters zero, so the step's
// CUDA Graph replays it; with generation's greedy pick it writes what pick_tokens writes (store_pick).
#pragma once

#include <string>
#include <vector>

#include "llmc/core/cuda_common.h"
#include "llmc/hopper/arch.cuh"
#include "llmc/inference/kv_cache.cuh"
#include "llmc/kernels/decode/decode_persistent.cuh"
#include "llmc/model/gpt2_params.cuh"

// A head's key chunks in the step's attention (at the model's whole context, so the same for every cache).
inline int persistent_attention_splits(const GPT2Config& c) {
    return decode_persistent::attention_splits(c.num_heads, c.max_seq_len);
}
// What the step writes besides the logits, in bf16 elements: per layer qkv (3C), atty (C), residual2 (C), fch (4C),
// residual3 (C); then the attention's partial results (floats, reused by every layer).
inline size_t persistent_activation_elems(const GPT2Config& c) {
    const size_t partials = (size_t)c.num_heads * persistent_attention_splits(c) * decode_persistent::kUnitFloats;
    return (size_t)c.num_layers * 10 * c.channels + 2 * partials;
}
inline int persistent_phase_count(const GPT2Config& c) { return 5 * c.num_layers + 1; }

// Whether the kernel takes this model at batch B here: a BF16 build on Hopper, heads of 64, a context within the
// attention's chunks, C within one staging vector a thread, every product's rows per block within its
// bias/residual rows. Else false and why, in one line.
inline bool persistent_step_supported(const GPT2Config& c, int B, std::string* why) {
    namespace dp = decode_persistent;
    const int C = c.channels, sms = device_sm_count();
    int smem_optin = 0;
    cudaCheck(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_info().device));
    const size_t smem = std::max(dp::smem_bytes(dp::x_floats_for(C)), dp::smem_bytes(dp::x_floats_for(C), true));
    const char* no = !kFloatXIsBF16                     ? "FP32 builds decode with the other kernels"
                     : !hopper::hopper_available()      ? "it needs an sm_90a build on an H100/H200"
                     : B != 1                           ? "it is a batch-1 step"
                     : C / c.num_heads != dp::kHeadSize ? "it takes heads of 64"
                     : persistent_attention_splits(c) == 0 ? "it takes contexts of 2048 positions at most"
                     : C > 8 * dp::kConsumers || C % 16 ? "C must be a multiple of 16, at most 2048"
                     : (4 * C + sms - 1) / sms > dp::kMaxBlockRows ? "the fc product has too many rows per SM"
                     : smem > (size_t)smem_optin                   ? "its shared memory is more than a block's"
                                                                   : nullptr;
    if (no && why) *why = no;
    return no == nullptr;
}

// Auto's choice at batch 1: the persistent step for models from this width on, where it measured ahead of
// decode_matvec (docs/DECODE.md); the narrower ones wait at the phase boundaries longer than they stream weights.
constexpr int kPersistentAutoMinChannels = 1024;
// Whether Auto takes the persistent step for steps of B rows: batch 1 with the KV cache (generation's, or a server's
// lone busy slot's), a model from kPersistentAutoMinChannels on, and the kernel supported here.
inline bool persistent_auto_takes(const GPT2Config& c, int B, bool cached) {
    return B == 1 && cached && c.channels >= kPersistentAutoMinChannels &&
           persistent_step_supported(c, B, nullptr);
}

// The phases over parameters p and the cache, activations into acts (persistent_activation_elems), the logits into
// logits (Vp). Pointers are taken as bf16 (the path exists in BF16 builds only).
inline std::vector<decode_persistent::Phase> persistent_phases(const GPT2Config& c, const GPT2Params& p,
                                                               const KVCache& cache, floatX* acts, floatX* logits) {
    namespace dp = decode_persistent;
    using bf16 = dp::bf16;
    auto b = [](const floatX* x) { return reinterpret_cast<const bf16*>(x); };
    auto w = [](floatX* x) { return reinterpret_cast<bf16*>(x); };
    const int C = c.channels;
    float* partials = reinterpret_cast<float*>(w(acts) + (size_t)c.num_layers * 10 * C);
    std::vector<dp::Phase> phases;
    const bf16* residual = nullptr;  // layer 0: the embedding
    for (int l = 0; l < c.num_layers; l++) {
        bf16* qkv = w(acts) + (size_t)l * 10 * C;
        bf16 *atty = qkv + 3 * C, *res2 = atty + C, *fch = res2 + C, *res3 = fch + 4 * C;
        bf16 *k = w(cache.k_layer(l)), *v = w(cache.v_layer(l));
        phases.push_back({dp::Kind::Product, dp::Epilogue::Qkv, b(p(QKVW, l)), b(p(QKVB, l)), 3 * C, C, b(p(LN1W, l)),
                          b(p(LN1B, l)), residual, nullptr, qkv, k, v});
        phases.push_back({dp::Kind::Attention, dp::Epilogue::Plain, nullptr, nullptr, 0, 0, nullptr, nullptr, qkv,
                          nullptr, nullptr, k, v, partials});
        phases.push_back({dp::Kind::Product, dp::Epilogue::Residual, b(p(ATTPROJW, l)), b(p(ATTPROJB, l)), C, C,
                          nullptr, nullptr, atty, residual, res2, nullptr, nullptr, partials});
        phases.push_back({dp::Kind::Product, dp::Epilogue::Gelu, b(p(FCW, l)), b(p(FCB, l)), 4 * C, C, b(p(LN2W, l)),
                          b(p(LN2B, l)), res2, nullptr, fch, nullptr, nullptr});
        phases.push_back({dp::Kind::Product, dp::Epilogue::Residual, b(p(FCPROJW, l)), b(p(FCPROJB, l)), C, 4 * C,
                          nullptr, nullptr, fch, res2, res3, nullptr, nullptr});
        residual = res3;
    }
    phases.push_back({dp::Kind::Product, dp::Epilogue::Logits, b(p(WTE)), nullptr, c.padded_vocab_size, C, b(p(LNFW)),
                      b(p(LNFB)), residual, nullptr, w(logits), nullptr, nullptr});
    for (dp::Phase& ph : phases) dp::with_tiles(ph);
    return phases;
}

// The engine's part: where the phase list, counters and ranks live, and the kernel's launch shape.
struct PersistentStep {
    const decode_persistent::Phase* phases = nullptr;  // device, persistent_phase_count of them
    unsigned* counters = nullptr;                      // zero; each launch leaves them zero
    unsigned long long* picks = nullptr;               // a greedy rank per block
    int count = 0, x_floats = 0, blocks = 0;
    bool tiles = false;  // the products on the tensor cores (decode_persistent_tiles.cuh)
};

// Uploads the phases into `phases_device` and prepares the kernel; the PersistentStep to launch with (tiles: the
// products on the tensor cores).
inline PersistentStep persistent_step_set_up(const GPT2Config& c, const GPT2Params& p, const KVCache& cache,
                                             floatX* acts, floatX* logits, void* phases_device, unsigned* counters,
                                             unsigned long long* picks, cudaStream_t stream, bool tiles = false) {
    const std::vector<decode_persistent::Phase> phases = persistent_phases(c, p, cache, acts, logits);
    cudaCheck(cudaMemcpyAsync(phases_device, phases.data(), phases.size() * sizeof(phases[0]), cudaMemcpyHostToDevice,
                              stream));
    cudaCheck(cudaMemsetAsync(counters, 0, phases.size() * sizeof(unsigned), stream));
    cudaCheck(cudaStreamSynchronize(stream));  // the host vector goes now
    PersistentStep ps;
    ps.phases = static_cast<const decode_persistent::Phase*>(phases_device), ps.counters = counters;
    ps.picks = picks, ps.count = (int)phases.size(), ps.blocks = device_sm_count();
    ps.x_floats = decode_persistent::x_floats_for(c.channels), ps.tiles = tiles;
    decode_persistent::prepare(ps.x_floats);
    return ps;
}

// One step of sequence b = *row (null: 0): its token tokens[b] at position len[b] - 1 (len advanced already), the
// logits into row b of the buffer the phases were built with. Greedy generation (sequence 0) passes the pick's
// outputs (prompt_len null: none), which the kernel writes as pick_tokens would, advancing len.
inline void persistent_step_launch(const PersistentStep& ps, const GPT2Config& c, const GPT2Params& p,
                                   const KVCache& cache, const int* tokens, const int* prompt_len, int* next_tokens,
                                   int* tokens_out, int max_new, cudaStream_t stream, const int* row = nullptr) {
    decode_persistent::Step s{ps.phases, ps.count, reinterpret_cast<const decode_persistent::bf16*>(p(WTE)),
                              reinterpret_cast<const decode_persistent::bf16*>(p(WPE)), c.channels, c.num_heads,
                              c.channels / c.num_heads, cache.max_T, c.vocab_size, tokens, cache.len, ps.counters,
                              ps.picks};
    s.prompt_len = prompt_len, s.next_tokens = prompt_len ? next_tokens : nullptr, s.tokens_out = tokens_out;
    s.max_new = max_new, s.attn_splits = persistent_attention_splits(c), s.row = row, s.tiles = ps.tiles;
    decode_persistent::launch(s, ps.x_floats, ps.blocks, stream);
}
