// Causal attention backward on Hopper: the launchers and the entry point. Layouts as the forward
// (attention_hopper_forward.cuh): qkv, dqkv (B, T, 3, NH, HS) bf16 (dqkv fully overwritten), out, dout (B, T, NH·HS)
// bf16, lse (B, NH, T) fp32; the workspace as BackwardWorkspace below. HS 64 or 128, any T.
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

#include "llmc/kernels/attention/attention_hopper_backward_fused.cuh"
#include "llmc/kernels/attention/attention_hopper_backward_kv.cuh"
#include "llmc/kernels/attention/attention_hopper_backward_parts.cuh"
#include "llmc/kernels/attention/attention_hopper_backward_q.cuh"

namespace flash_hopper {

enum class DqMode { TwoKernels, Unordered };

// The backward's scratch, carved from one float buffer: the fused scheme's dQacc first (B·T·C fp32; TMA and the
// float4 conversion want it 16-byte aligned), then the LSE and D rows every scheme reads (B·NH rows of LSE·log2(e)
// then D, each padded_T(T) long: backward_d_kernel), then a DqOrder's turns (B·NH·ceil(T/32) ints).
struct BackwardWorkspace {
    float* dqacc = nullptr;
    float* lse_d = nullptr;
    int* turns = nullptr;
};
inline size_t lse_d_floats(int B, int T, int NH) { return (size_t)B * NH * 2 * padded_T(T); }
inline size_t two_kernel_workspace_bytes(int B, int T, int NH) { return lse_d_floats(B, T, NH) * 4; }
inline size_t fused_workspace_bytes(int B, int T, int NH, int HS) {
    return (size_t)B * T * NH * HS * 4 + lse_d_floats(B, T, NH) * 4 + (size_t)B * NH * ((T + 31) / 32) * 4;
}
inline BackwardWorkspace carve_workspace(float* workspace, int B, int T, int NH, int HS, bool fused) {
    BackwardWorkspace w;
    if (fused) w.dqacc = workspace, workspace += (size_t)B * T * NH * HS;
    w.lse_d = workspace;
    w.turns = reinterpret_cast<int*>(workspace + lse_d_floats(B, T, NH));
    return w;
}

// The fused backward with DqOrder's order of the dQ additions, workspace as above (fused). dQacc must be zeroed first
// unless DqOrder's first contributors store (the caller clears what its order needs, on `stream`, before this).
template <int kHS, typename DqOrder>
inline void launch_backward_fused(bf16* dqkv, const BackwardWorkspace& w, const bf16* dout, const bf16* out,
                                  const float* lse, const bf16* qkv, int B, int T, int NH, cudaStream_t stream) {
    using F = BackwardFusedConfig<kHS>;
    static_assert(128 % F::kBq == 0 && 128 % F::kBk == 0, "padded_T's rows end where the tiles end");
    static const bool smem_ready = (hopper::allow_dynamic_smem(backward_fused_kernel<kHS, DqOrder>, F::kSmemBytes),
                                    true);
    (void)smem_ready;
    const int C = NH * kHS;
    launch_backward_d<kHS>(w.lse_d, lse, out, dout, B, T, NH, stream);
    const CUtensorMap qkv_128 = head_slice_map(qkv, B, T, 3 * C, 128);
    const CUtensorMap q_tiles = head_slice_map(qkv, B, T, 3 * C, F::kBq);
    const CUtensorMap dout_tiles = head_slice_map(dout, B, T, C, F::kBq);
    const CUtensorMap dqkv_64 = head_slice_store_map(dqkv, B, T, 3 * C, 64, stream);
    const CUtensorMap dqacc_map = hopper::make_store_map_3d(w.dqacc, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, B, T, C, C,
                                                            (uint64_t)T * C, F::kDqN, 32, CU_TENSOR_MAP_SWIZZLE_128B,
                                                            stream);
    const CUtensorMap lse_d_tiles = lse_d_map(w.lse_d, B, T, NH, F::kBq);
    const dim3 grid((T + F::kBk - 1) / F::kBk, B * NH);
    backward_fused_kernel<kHS, DqOrder><<<grid, F::kThreads, F::kSmemBytes, stream>>>(
        qkv_128, q_tiles, dout_tiles, dqkv_64, dqacc_map, lse_d_tiles, w.turns, T, NH);
    cudaCheckLaunch();
    const long long n4 = (long long)B * T * C / 4;
    dq_convert_kernel<<<(unsigned)((n4 + 255) / 256), 256, 0, stream>>>(dqkv, w.dqacc, n4, C, rsqrtf((float)kHS));
    cudaCheckLaunch();
}

template <int kHS>
inline void launch_backward(bf16* dqkv, const BackwardWorkspace& w, const bf16* dout, const bf16* out,
                            const float* lse, const bf16* qkv, int B, int T, int NH, float* bias_partials,
                            cudaStream_t stream, float* dqkv_amax) {
    static_assert(BackwardKVConfig<kHS>::kBk == 128 && BackwardQConfig<kHS>::kBq == 128, "backward_bias_partial_rows");
    static_assert(128 % BackwardKVConfig<kHS>::kBq == 0 && 128 % BackwardQConfig<kHS>::kBk == 0,
                  "padded_T's rows end where the tiles end");
    using KV = BackwardKVConfig<kHS>;
    using Q = BackwardQConfig<kHS>;
    static const bool smem_ready = (hopper::allow_dynamic_smem(backward_kv_kernel<kHS>, KV::kSmemBytes),
                                    hopper::allow_dynamic_smem(backward_q_kernel<kHS>, Q::kSmemBytes), true);
    (void)smem_ready;
    const int C = NH * kHS;
    launch_backward_d<kHS>(w.lse_d, lse, out, dout, B, T, NH, stream);
    const CUtensorMap qkv_128 = head_slice_map(qkv, B, T, 3 * C, 128);
    const CUtensorMap qkv_64 = head_slice_map(qkv, B, T, 3 * C, 64);
    const CUtensorMap q_kv = head_slice_map(qkv, B, T, 3 * C, KV::kBq);
    const CUtensorMap dout_128 = head_slice_map(dout, B, T, C, 128);
    const CUtensorMap dout_kv = head_slice_map(dout, B, T, C, KV::kBq);
    const CUtensorMap dqkv_64 = head_slice_store_map(dqkv, B, T, 3 * C, 64, stream);
    const CUtensorMap lse_d_kv = lse_d_map(w.lse_d, B, T, NH, KV::kBq);
    backward_kv_kernel<kHS><<<dim3((T + KV::kBk - 1) / KV::kBk, B * NH), KV::kThreads, KV::kSmemBytes, stream>>>(
        qkv_128, q_kv, dout_kv, dqkv_64, lse_d_kv, bias_partials, T, NH, dqkv_amax);
    cudaCheckLaunch();
    backward_q_kernel<kHS><<<dim3((T + Q::kBq - 1) / Q::kBq, B * NH), Q::kThreads, Q::kSmemBytes, stream>>>(
        qkv_128, dout_128, qkv_64, dqkv_64, w.lse_d, bias_partials, T, NH, dqkv_amax);
    cudaCheckLaunch();
}

}  // namespace flash_hopper

// Scratch the backward needs (HS 64 or 128): the fused scheme's workspace (DqMode::Unordered, and what the dev
// programs pass); the two-kernel scheme needs only attention_hopper_backward_two_kernel_workspace_bytes.
inline size_t attention_hopper_backward_workspace_bytes(int B, int T, int NH, int HS) {
    return flash_hopper::fused_workspace_bytes(B, T, NH, HS);
}
inline size_t attention_hopper_backward_two_kernel_workspace_bytes(int B, int T, int NH) {
    return flash_hopper::two_kernel_workspace_bytes(B, T, NH);
}

// dqkv is overwritten; out and lse are the forward's outputs for the same qkv. HS 64 or 128. mode: TwoKernels
// (deterministic, dQ recomputed) or Unordered (the fused kernel: faster at long T, not bit-reproducible).
// bias_partials (TwoKernels only; else nullptr): flash_hopper::backward_bias_partial_rows(B, T) rows of 3C floats,
// overwritten with partial column sums of dqkv; column_sum_finish over them gives the qkv bias gradient.
// dqkv_amax (TwoKernels only; else nullptr): max |dqkv| folded in as the tiles are stored (an FP8 cast's scale).
inline cudaError_t attention_hopper_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                                             const float* lse, const __nv_bfloat16* qkv, int B, int T, int NH, int HS,
                                             float* workspace, cudaStream_t stream = 0,
                                             flash_hopper::DqMode mode = flash_hopper::DqMode::TwoKernels,
                                             float* bias_partials = nullptr, float* dqkv_amax = nullptr) {
    using namespace flash_hopper;
    if (HS != 64 && HS != 128) return cudaErrorInvalidValue;
    if ((bias_partials || dqkv_amax) && mode != DqMode::TwoKernels) return cudaErrorInvalidValue;
    const BackwardWorkspace w = carve_workspace(workspace, B, T, NH, HS, mode != DqMode::TwoKernels);
    if (mode == DqMode::TwoKernels) {
        if (HS == 64) launch_backward<64>(dqkv, w, dout, out, lse, qkv, B, T, NH, bias_partials, stream, dqkv_amax);
        else launch_backward<128>(dqkv, w, dout, out, lse, qkv, B, T, NH, bias_partials, stream, dqkv_amax);
    } else {
        cudaCheck(cudaMemsetAsync(w.dqacc, 0, (size_t)B * T * NH * HS * sizeof(float), stream));
        if (HS == 64) launch_backward_fused<64, UnorderedDq>(dqkv, w, dout, out, lse, qkv, B, T, NH, stream);
        else launch_backward_fused<128, UnorderedDq>(dqkv, w, dout, out, lse, qkv, B, T, NH, stream);
    }
    return cudaGetLastError();
}
