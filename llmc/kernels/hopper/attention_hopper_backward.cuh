// Causal attention backward on Hopper: the launchers and the entry point. Layouts as the forward
// (attention_hopper_forward.cuh): qkv, dqkv (B, T, 3, NH, HS) bf16 (dqkv fully overwritten), out, dout (B, T, NH·HS)
// bf16, lse and the workspace D (B, NH, T) fp32. HS 64 or 128, any T.
//
// Two schemes, both validated against the fp64 reference (dev/cuda/attention_backward):
// A. Two kernels, deterministic by construction like the mma.sync backward (the engine's default on Hopper): every
//    output element is written once, by one thread, no atomics and no reduction across blocks. D = rowsum(dO∘O)
//    first (attention_hopper_backward_parts.cuh), then the dK/dV kernel (attention_hopper_backward_kv.cuh) and the
//    dQ kernel (attention_hopper_backward_q.cuh), which computes S and dP again (7 products instead of 5) and still
//    beats the fused kernel with its additions in a fixed order (docs/PERFORMANCE.md). Both kernels can also leave
//    the column sums of their output tiles (the qkv bias gradient; staged_column_sums).
// B. Fused, as FlashAttention-3 (attention_hopper_backward_fused.cuh): the dK/dV kernel plus dQ pieces that a writer
//    thread adds into an fp32 accumulator by TMA reduce-adds, unordered (`-ab flash-nondet`: not bit-reproducible,
//    faster than A at T >= 4096).
// Scale 1/sqrt(HS) is folded into the exponent and applied once to dK and dQ at the end.
#pragma once

#include "llmc/kernels/hopper/attention_hopper_backward_fused.cuh"
#include "llmc/kernels/hopper/attention_hopper_backward_kv.cuh"
#include "llmc/kernels/hopper/attention_hopper_backward_parts.cuh"
#include "llmc/kernels/hopper/attention_hopper_backward_q.cuh"

namespace flash_hopper {

enum class DqMode { TwoKernels, Unordered };

// Workspace of the fused backward: dQacc (B·T·C fp32), D (B·NH·T fp32), a DqOrder's turns (B·NH·ceil(T/32) ints).
inline size_t fused_workspace_bytes(int B, int T, int NH, int HS) {
    return (size_t)B * NH * T * 4 + (size_t)B * T * NH * HS * 4 + (size_t)B * NH * ((T + 31) / 32) * 4;
}

// The fused backward with DqOrder's order of the dQ additions, workspace as above. dQacc must be zeroed first unless
// DqOrder's first contributors store (the caller clears what its order needs, on `stream`, before this).
template <int kHS, typename DqOrder>
inline void launch_backward_fused(bf16* dqkv, float* workspace, const bf16* dout, const bf16* out, const float* lse,
                                  const bf16* qkv, int B, int T, int NH, cudaStream_t stream) {
    using F = BackwardFusedConfig<kHS>;
    static const bool smem_ready = (hopper::allow_dynamic_smem(backward_fused_kernel<kHS, DqOrder>, F::kSmemBytes),
                                    true);
    (void)smem_ready;
    const int C = NH * kHS;
    float* dqacc = workspace;  // first: TMA and the float4 conversion want it 16-byte aligned
    float* D = dqacc + (size_t)B * T * C;
    int* turns = reinterpret_cast<int*>(D + (size_t)B * NH * T);
    launch_backward_d<kHS>(D, out, dout, B, T, NH, stream);
    const CUtensorMap qkv_128 = head_slice_map(qkv, B, T, 3 * C, 128);
    const CUtensorMap q_tiles = head_slice_map(qkv, B, T, 3 * C, F::kBq);
    const CUtensorMap dout_tiles = head_slice_map(dout, B, T, C, F::kBq);
    const CUtensorMap dqkv_64 = head_slice_store_map(dqkv, B, T, 3 * C, 64, stream);
    const CUtensorMap dqacc_map = hopper::make_store_map_3d(dqacc, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, B, T, C, C,
                                                            (uint64_t)T * C, F::kDqN, 32, CU_TENSOR_MAP_SWIZZLE_128B,
                                                            stream);
    const dim3 grid((T + F::kBk - 1) / F::kBk, B * NH);
    backward_fused_kernel<kHS, DqOrder><<<grid, F::kThreads, F::kSmemBytes, stream>>>(
        qkv_128, q_tiles, dout_tiles, dqkv_64, dqacc_map, lse, D, turns, T, NH);
    cudaCheckLaunch();
    const long long n4 = (long long)B * T * C / 4;
    dq_convert_kernel<<<(unsigned)((n4 + 255) / 256), 256, 0, stream>>>(dqkv, dqacc, n4, C, rsqrtf((float)kHS));
    cudaCheckLaunch();
}

template <int kHS>
inline void launch_backward(bf16* dqkv, float* D, const bf16* dout, const bf16* out, const float* lse, const bf16* qkv,
                            int B, int T, int NH, float* bias_partials, cudaStream_t stream) {
    static_assert(BackwardKVConfig<kHS>::kBk == 128 && BackwardQConfig<kHS>::kBq == 128, "backward_bias_partial_rows");
    using KV = BackwardKVConfig<kHS>;
    using Q = BackwardQConfig<kHS>;
    static const bool smem_ready = (hopper::allow_dynamic_smem(backward_kv_kernel<kHS>, KV::kSmemBytes),
                                    hopper::allow_dynamic_smem(backward_q_kernel<kHS>, Q::kSmemBytes), true);
    (void)smem_ready;
    const int C = NH * kHS;
    launch_backward_d<kHS>(D, out, dout, B, T, NH, stream);
    const CUtensorMap qkv_128 = head_slice_map(qkv, B, T, 3 * C, 128);
    const CUtensorMap qkv_64 = head_slice_map(qkv, B, T, 3 * C, 64);
    const CUtensorMap q_kv = head_slice_map(qkv, B, T, 3 * C, KV::kBq);
    const CUtensorMap dout_128 = head_slice_map(dout, B, T, C, 128);
    const CUtensorMap dout_kv = head_slice_map(dout, B, T, C, KV::kBq);
    const CUtensorMap dqkv_64 = head_slice_store_map(dqkv, B, T, 3 * C, 64, stream);
    backward_kv_kernel<kHS><<<dim3((T + KV::kBk - 1) / KV::kBk, B * NH), KV::kThreads, KV::kSmemBytes, stream>>>(
        qkv_128, q_kv, dout_kv, dqkv_64, lse, D, bias_partials, T, NH);
    cudaCheckLaunch();
    backward_q_kernel<kHS><<<dim3((T + Q::kBq - 1) / Q::kBq, B * NH), Q::kThreads, Q::kSmemBytes, stream>>>(
        qkv_128, dout_128, qkv_64, dqkv_64, lse, D, bias_partials, T, NH);
    cudaCheckLaunch();
}

}  // namespace flash_hopper

// Scratch the backward needs (HS 64 or 128): the fused scheme's workspace; the two-kernel scheme uses its D only.
inline size_t attention_hopper_backward_workspace_bytes(int B, int T, int NH, int HS) {
    return flash_hopper::fused_workspace_bytes(B, T, NH, HS);
}

// dqkv is overwritten; out and lse are the forward's outputs for the same qkv. HS 64 or 128. mode: TwoKernels
// (deterministic, dQ recomputed) or Unordered (the fused kernel: faster at long T, not bit-reproducible).
// bias_partials (TwoKernels only; else nullptr): flash_hopper::backward_bias_partial_rows(B, T) rows of 3C floats,
// overwritten with partial column sums of dqkv; column_sum_finish over them gives the qkv bias gradient.
inline cudaError_t attention_hopper_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                                             const float* lse, const __nv_bfloat16* qkv, int B, int T, int NH, int HS,
                                             float* workspace, cudaStream_t stream = 0,
                                             flash_hopper::DqMode mode = flash_hopper::DqMode::TwoKernels,
                                             float* bias_partials = nullptr) {
    using namespace flash_hopper;
    if (HS != 64 && HS != 128) return cudaErrorInvalidValue;
    if (bias_partials && mode != DqMode::TwoKernels) return cudaErrorInvalidValue;
    if (mode == DqMode::TwoKernels) {
        if (HS == 64) launch_backward<64>(dqkv, workspace, dout, out, lse, qkv, B, T, NH, bias_partials, stream);
        else launch_backward<128>(dqkv, workspace, dout, out, lse, qkv, B, T, NH, bias_partials, stream);
    } else {
        cudaCheck(cudaMemsetAsync(workspace, 0, (size_t)B * T * NH * HS * sizeof(float), stream));  // dQacc
        if (HS == 64) launch_backward_fused<64, UnorderedDq>(dqkv, workspace, dout, out, lse, qkv, B, T, NH, stream);
        else launch_backward_fused<128, UnorderedDq>(dqkv, workspace, dout, out, lse, qkv, B, T, NH, stream);
    }
    return cudaGetLastError();
}
