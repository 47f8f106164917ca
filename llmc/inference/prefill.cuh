// Generation's prefill: the shared forward (llmc/model/gpt2_forward.cuh, the trainer's kernels in the trainer's
// order) over the prompts, on one layer's buffers that every layer reuses (the caller's ForwardActivations, stride
// 0), then the classifier on each sequence's last position only: B rows of logits, not B·T. The KV cache is filled
// by the caller's listener as each layer's QKV is queued (KVCacheWriter); the recompute path passes none.
#pragma once

#include "llmc/kernels/matmul/matmul.cuh"
#include "llmc/model/gpt2_forward.cuh"

namespace prefill_detail {

// out (b, :) = lnf (b, len[b] - 1, :): each sequence's last position.
__global__ void gather_last_kernel(floatX* __restrict__ out, const floatX* __restrict__ lnf,
                                   const int* __restrict__ len, int B, int T, int C) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * C) return;
    const int b = idx / C, c = idx % C;
    out[idx] = lnf[((size_t)b * T + len[b] - 1) * C + c];
}

}  // namespace prefill_detail

// inputs: (B, T) token ids on the device; len: (B) lengths on the device, 1 <= len[b] <= T (positions past a
// sequence's length hold padding, which causal attention keeps out of earlier positions). Leaves logits (B, Vp), row
// b that of position len[b] - 1, and lnf_rows (B, C) the normalised rows it was computed from. Queues only.
inline void prefill_forward(const GPT2Config& c, const GPT2Params& p, const ForwardActivations& a, const int* inputs,
                            const int* len, const ForwardShape& shape, floatX* lnf_rows, floatX* logits,
                            cudaStream_t stream, ForwardListener* listener = nullptr) {
    const int B = shape.B, C = c.channels;
    gpt2_forward_layers(c, p, a, inputs, shape, stream, listener);
    prefill_detail::gather_last_kernel<<<(B * C + 255) / 256, 256, 0, stream>>>(lnf_rows, a.lnf, len, B, shape.T, C);
    cudaCheckLaunch();
    matmul_forward(logits, lnf_rows, p(WTE), nullptr, B, C, c.padded_vocab_size, nullptr, false, stream);
}
