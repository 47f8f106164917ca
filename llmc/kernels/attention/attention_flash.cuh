// Causal flash attention on bf16 tensor cores (FlashAttention-2 loop order), forward and backward: the engine's
// entry points, each running the tuned default configuration for its head size. On Hopper (sm_90a builds on
// compute capability 9.0) they run the TMA + wgmma kernels of llmc/kernels/attention/attention_hopper_forward.cuh and
// attention_hopper_backward.cuh instead (LLMC_NO_HOPPER=1 keeps these). Only those configurations are compiled into
// the engine; the kernels and their tiling are in llmc/kernels/attention/attention_flash_forward.cuh and
// attention_flash_backward.cuh (tile primitives in llmc/mma/tiles.cuh), and dev/cuda sweeps the others.
//
// Layout, as the QKV projection writes it and the rest of the model reads it:
//   qkv  (B, T, 3, NH, HS) bf16     Q, K, V of every head packed per token
//   out  (B, T, NH*HS)     bf16     heads concatenated
//   lse  (B, NH, T)        fp32     natural-log log-sum-exp of each scaled score row (saved for backward)
//   dqkv (B, T, 3, NH, HS) bf16     fully overwritten by the backward (not accumulated)
// Softmax scale 1/sqrt(HS); HS = 64 or 128; any T >= 1 (tiles are padded and masked). The backward is
// deterministic (no atomics): bit-identical results run to run.
//
// Every function returns cudaSuccess or the launch error; callers check it (cudaCheck in llmc/core/cuda_common.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>

#include "llmc/kernels/attention/attention_flash_backward.cuh"
#include "llmc/kernels/attention/attention_flash_forward.cuh"
#include "llmc/kernels/fp8/cast_transpose.cuh"
#include "llmc/kernels/attention/attention_hopper_backward.cuh"
#include "llmc/kernels/attention/attention_hopper_forward.cuh"

namespace flash {

// The defaults, measured on an H200 (docs/PERFORMANCE.md, Attention; dev/cuda configuration numbers in brackets).
// Forward: Bc = 128 pays for HS 64 (half the barriers per key); HS 128 wants Bc = 64 (Bc 128 spills).
// Backward at HS 64: K/V (dK/dV kernel) and Q/dO (dQ kernel) fragments held in registers, which are capped for
// three blocks per SM (a small spill): that hides more of the ldmatrix latency than two blocks, level or faster at
// B8..32 T1024, B2 T2048, B4 T4096 and B1 T16384. At HS 128 holding the fragments, or a cap, spills.
template <int HS>
struct DefaultConfigs;
template <>
struct DefaultConfigs<64> {
    using Forward = ForwardConfig<64, 64, 128, 2>;  // [3] Br 64 (4 warps), Bc 128, 2 blocks/SM
    using Backward = BackwardConfig<BackwardDQConfig<64, 64, 64, true, 3>,
                                    BackwardDKVConfig<64, 64, 64, true, 3>>;  // [4] 4 warps, hoisted, 3 blocks/SM
};
template <>
struct DefaultConfigs<128> {
    using Forward = ForwardConfig<128, 64, 64, 2>;  // [1] Br 64 (4 warps), Bc 64, 2 blocks/SM
    using Backward = BackwardConfig<BackwardDQConfig<128, 64, 64, false, 1>,
                                    BackwardDKVConfig<128, 64, 64, false, 1>>;  // [1] 4 warps, fragments re-read
};

inline bool head_size_supported(int HS, const char* who) {
    if (HS == 64 || HS == 128) return true;
    fprintf(stderr, "%s: head size %d is not supported (flash attention is built for 64 and 128)\n", who, HS);
    return false;
}

}  // namespace flash

// out_amax (null: none): max |out| folded into it, for an FP8 cast of out: by the Hopper kernel as it stores, by a
// pass of its own after the mma.sync kernel.
inline cudaError_t attention_flash_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                                           int NH, int HS, cudaStream_t stream, float* out_amax = nullptr) {
    if (!flash::head_size_supported(HS, "attention_flash_forward")) return cudaErrorInvalidValue;
    // Hopper (TMA + wgmma) where the build and the GPU have it; same outputs and LSE convention, so the backward
    // below takes either forward's
    if (hopper::hopper_available()) return attention_hopper_forward(out, lse, qkv, B, T, NH, HS, stream, out_amax);
    const cudaError_t status =
        HS == 64 ? flash::launch_forward<flash::DefaultConfigs<64>::Forward>(out, lse, qkv, B, T, NH, stream)
                 : flash::launch_forward<flash::DefaultConfigs<128>::Forward>(out, lse, qkv, B, T, NH, stream);
    if (status == cudaSuccess && out_amax) fp8_amax(out, B * T, NH * HS, out_amax, stream);
    return status;
}

// Bytes of scratch the backward needs: the mma.sync kernels' D = rowsum(dO∘O), one float per (b, h, t), or the Hopper
// two-kernel scheme's LSE and D rows (padded), whichever is larger, so that the size does not depend on the GPU.
inline size_t attention_flash_backward_workspace_bytes(int B, int T, int NH) {
    return std::max((size_t)B * NH * T * sizeof(float), attention_hopper_backward_two_kernel_workspace_bytes(B, T, NH));
}

// The mma.sync backward (any GPU since Ampere): dqkv is overwritten. out and lse are the forward's outputs for the
// same qkv. workspace: see above.
inline cudaError_t attention_flash_backward_mma(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                                                const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* qkv,
                                                int B, int T, int NH, int HS, float* workspace, cudaStream_t stream) {
    if (!flash::head_size_supported(HS, "attention_flash_backward")) return cudaErrorInvalidValue;
    float* D = workspace;
    if (HS == 64) {
        return flash::launch_backward<flash::DefaultConfigs<64>::Backward>(dqkv, D, dout, out, lse, qkv, B, T, NH,
                                                                           stream);
    }
    return flash::launch_backward<flash::DefaultConfigs<128>::Backward>(dqkv, D, dout, out, lse, qkv, B, T, NH,
                                                                        stream);
}

// The engine's backward: on Hopper the TMA + wgmma kernels' deterministic two-kernel scheme (measured faster than
// the fused kernel with ordered dQ additions, docs/PERFORMANCE.md), else the mma.sync kernels. Same workspace.
// bias_partials: only where attention_flash_backward_sums_bias() (else nullptr); see attention_hopper_backward.
inline bool attention_flash_backward_sums_bias() { return hopper::hopper_available(); }
// dqkv_amax (null: none): max |dqkv| folded into it, for an FP8 cast of dqkv: by the Hopper kernels as they store, by
// a pass of its own after the mma.sync kernels.
inline cudaError_t attention_flash_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                                            const float* lse, const __nv_bfloat16* qkv, int B, int T, int NH, int HS,
                                            float* workspace, cudaStream_t stream, float* bias_partials = nullptr,
                                            float* dqkv_amax = nullptr) {
    if (!flash::head_size_supported(HS, "attention_flash_backward")) return cudaErrorInvalidValue;
    if (hopper::hopper_available()) {
        return attention_hopper_backward(dqkv, dout, out, lse, qkv, B, T, NH, HS, workspace, stream,
                                         flash_hopper::DqMode::TwoKernels, bias_partials, dqkv_amax);
    }
    if (bias_partials) return cudaErrorInvalidValue;
    const cudaError_t status = attention_flash_backward_mma(dqkv, dout, out, lse, qkv, B, T, NH, HS, workspace, stream);
    if (status == cudaSuccess && dqkv_amax) fp8_amax(dqkv, B * T, 3 * NH * HS, dqkv_amax, stream);
    return status;
}

// The non-deterministic option (-ab flash-nondet): on Hopper the fused backward with unordered dQ reduce-adds
// (faster than the default at T >= 4096, level at 1024; run-to-run differences in the last bits of dQ), else the
// default above.
inline bool flash_nondet_uses_fused(int HS) { return (HS == 64 || HS == 128) && hopper::hopper_available(); }
inline size_t attention_flash_nondet_workspace_bytes(int B, int T, int NH, int HS) {
    return flash_nondet_uses_fused(HS) ? attention_hopper_backward_workspace_bytes(B, T, NH, HS)
                                       : attention_flash_backward_workspace_bytes(B, T, NH);
}
inline cudaError_t attention_flash_backward_nondet(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                                                   const __nv_bfloat16* out, const float* lse,
                                                   const __nv_bfloat16* qkv, int B, int T, int NH, int HS,
                                                   float* workspace, cudaStream_t stream,
                                                   float* bias_partials = nullptr, float* dqkv_amax = nullptr) {
    if (flash_nondet_uses_fused(HS)) {
        if (bias_partials) return cudaErrorInvalidValue;
        const cudaError_t status = attention_hopper_backward(dqkv, dout, out, lse, qkv, B, T, NH, HS, workspace,
                                                             stream, flash_hopper::DqMode::Unordered);
        if (status == cudaSuccess && dqkv_amax) fp8_amax(dqkv, B * T, 3 * NH * HS, dqkv_amax, stream);
        return status;
    }
    return attention_flash_backward(dqkv, dout, out, lse, qkv, B, T, NH, HS, workspace, stream, bias_partials,
                                    dqkv_amax);
}
