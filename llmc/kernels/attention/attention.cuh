// Causal multi-head self-attention as one module with interchangeable backends.
//   qkv  (B, T, 3, NH, HS)  the QKV projection's output (kept per layer by the model)
//   out  (B, T, NH·HS)
//   saved: what backward needs besides qkv and out: P (B,NH,T,T) for Materialized, LSE (B,NH,T) fp32 for Flash
//   workspace: scratch shared by forward and backward (the model lends a buffer that is free at that moment)
// backward overwrites dqkv.
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/core/cuda_common.h"
#include "llmc/kernels/attention/attention_materialized.cuh"
#include "llmc/kernels/fp8/cast_transpose.cuh"
#if !defined(ENABLE_FP32)
#include "llmc/kernels/attention/attention_flash.cuh"  // bf16 tensor-core kernels, BF16 builds only
#endif

// Flash is deterministic (bit-identical runs); FlashNondeterministic ("flash-nondet") trades that for speed where
// a faster unordered kernel exists (the Hopper fused backward at head size 64), and is Flash elsewhere.
enum class AttentionBackend { Materialized, Flash, FlashNondeterministic };

inline bool is_flash(AttentionBackend b) {
    return b == AttentionBackend::Flash || b == AttentionBackend::FlashNondeterministic;
}
inline const char* attention_backend_name(AttentionBackend b) {
    return b == AttentionBackend::Flash ? "flash" : b == AttentionBackend::FlashNondeterministic ? "flash-nondet"
                                                                                                : "materialized";
}
// What the backend runs here, for the start-up table: flash runs the Hopper kernels on sm_90a + H100/H200.
inline std::string attention_backend_description(AttentionBackend b) {
#if !defined(ENABLE_FP32)
    if (is_flash(b) && hopper::hopper_available()) return std::string(attention_backend_name(b)) + " (Hopper TMA/wgmma)";
#endif
    return attention_backend_name(b);
}
inline bool parse_attention_backend(const std::string& s, AttentionBackend* out) {
    if (s == "materialized") { *out = AttentionBackend::Materialized; return true; }
    if (s == "flash") { *out = AttentionBackend::Flash; return true; }
    if (s == "flash-nondet") { *out = AttentionBackend::FlashNondeterministic; return true; }
    return false;
}

// Whether the backend can run this shape in this build; *why says why not.
inline bool attention_backend_supported(AttentionBackend b, int C, int NH, std::string* why) {
    if (b == AttentionBackend::Materialized) return true;
#if defined(ENABLE_FP32)
    if (why) *why = "the flash attention backend needs a BF16 build";
    return false;
#else
    const int HS = C / NH;
    if (HS != 64 && HS != 128) {
        if (why) *why = "the flash attention backend supports head sizes 64 and 128, not " + std::to_string(HS);
        return false;
    }
    return true;
#endif
}

// The backend a run uses, from -ab's value: "flash" or "materialized" as asked (an error if it cannot run this
// build and shape), or "auto": flash where it can run, else materialized with *note saying why. Errors throw
// std::runtime_error with one line naming the flag.
inline AttentionBackend resolve_attention_backend(const std::string& name, int C, int NH, std::string* note) {
    AttentionBackend b = AttentionBackend::Flash;
    if (name != "auto" && !parse_attention_backend(name, &b)) {
        throw std::runtime_error("flag -ab: unknown attention backend " + name);
    }
    std::string why;
    if (attention_backend_supported(b, C, NH, &why)) return b;
    if (name != "auto") throw std::runtime_error("flag -ab: " + why);
    if (note) *note = "attention backend auto -> materialized (" + why + ")";
    return AttentionBackend::Materialized;
}

inline size_t attention_saved_bytes(AttentionBackend b, int B, int T, int NH) {
    if (is_flash(b)) return (size_t)B * NH * T * sizeof(float);
    return attention_materialized_saved_bytes(B, T, NH);
}

inline size_t attention_workspace_bytes(AttentionBackend b, int B, int T, int C, int NH) {
#if !defined(ENABLE_FP32)
    if (b == AttentionBackend::Flash) return attention_flash_backward_workspace_bytes(B, T, NH);
    if (b == AttentionBackend::FlashNondeterministic) return attention_flash_nondet_workspace_bytes(B, T, NH, C / NH);
#endif
    return attention_materialized_workspace_bytes(B, T, C, NH);
}

// What the forward alone needs (generation's prefill, which keeps no backward): flash none; materialized its
// permuted Q, K, V and S, laid out as the backward lays them, so the whole workspace.
inline size_t attention_forward_workspace_bytes(AttentionBackend b, int B, int T, int C, int NH) {
    return is_flash(b) ? 0 : attention_materialized_workspace_bytes(B, T, C, NH);
}

// out_amax (null: none): max |out| folded into it, for the FP8 cast of attproj's input (the flash backend on Hopper
// takes it as it stores; elsewhere a pass of its own).
inline void attention_forward(AttentionBackend b, floatX* out, void* saved, const floatX* qkv, void* workspace, int B,
                              int T, int C, int NH, cudaStream_t stream = 0, float* out_amax = nullptr) {
    if (b == AttentionBackend::Materialized) {
        attention_materialized_forward(out, (floatX*)saved, qkv, workspace, B, T, C, NH, stream);
        if (out_amax) fp8_amax(out, B * T, C, out_amax, stream);
        return;
    }
#if !defined(ENABLE_FP32)
    cudaCheck(attention_flash_forward(out, (float*)saved, qkv, B, T, NH, C / NH, stream, out_amax));
#else
    fprintf(stderr, "error: the flash attention backend needs a BF16 build\n");
    exit(EXIT_FAILURE);
#endif
}

// Whether attention_backward can also leave the partial column sums of dqkv, the qkv bias gradient (the Hopper
// two-kernel backward sums its output tiles as it stores them): the caller then finishes them with
// column_sum_finish over attention_qkv_bias_partial_rows(B, T) rows of 3C floats, and the qkv weight-gradient GEMM
// takes no bias (cuBLASLt's BGRADB runs a reduction kernel of its own over dqkv).
inline bool attention_backward_sums_qkv_bias(AttentionBackend b, int HS) {
#if !defined(ENABLE_FP32)
    if (b == AttentionBackend::Flash) return attention_flash_backward_sums_bias();
    if (b == AttentionBackend::FlashNondeterministic)
        return !flash_nondet_uses_fused(HS) && attention_flash_backward_sums_bias();
#endif
    (void)b, (void)HS;
    return false;
}
inline int attention_qkv_bias_partial_rows(int B, int T) {
#if !defined(ENABLE_FP32)
    return flash_hopper::backward_bias_partial_rows(B, T);
#else
    (void)B, (void)T;
    return 0;  // no FP32 backend sums it
#endif
}

// qkv_bias_partials: only where attention_backward_sums_qkv_bias (else nullptr). dqkv_amax (null: none): max |dqkv|
// folded into it, for the FP8 cast of qkv's output gradient (the Hopper two-kernel backward takes it as it stores;
// elsewhere a pass of its own).
inline void attention_backward(AttentionBackend b, floatX* dqkv, const floatX* dout, const floatX* qkv,
                               const floatX* out, const void* saved, void* workspace, int B, int T, int C, int NH,
                               cudaStream_t stream = 0, float* qkv_bias_partials = nullptr,
                               float* dqkv_amax = nullptr) {
    if (qkv_bias_partials && !attention_backward_sums_qkv_bias(b, C / NH)) {
        fprintf(stderr, "error: attention_backward: this backend does not sum the qkv bias gradient\n");
        exit(EXIT_FAILURE);
    }
    if (b == AttentionBackend::Materialized) {
        attention_materialized_backward(dqkv, dout, qkv, (const floatX*)saved, workspace, B, T, C, NH, stream);
        if (dqkv_amax) fp8_amax(dqkv, B * T, 3 * C, dqkv_amax, stream);
        return;
    }
#if !defined(ENABLE_FP32)
    if (b == AttentionBackend::FlashNondeterministic) {
        cudaCheck(attention_flash_backward_nondet(dqkv, dout, out, (const float*)saved, qkv, B, T, NH, C / NH,
                                                  (float*)workspace, stream, qkv_bias_partials, dqkv_amax));
        return;
    }
    cudaCheck(attention_flash_backward(dqkv, dout, out, (const float*)saved, qkv, B, T, NH, C / NH, (float*)workspace,
                                       stream, qkv_bias_partials, dqkv_amax));
#else
    fprintf(stderr, "error: the flash attention backend needs a BF16 build\n");
    exit(EXIT_FAILURE);
#endif
}
