// Token + position embedding: out[b,t,:] = wte[token[b,t],:] + wpe[t,:].
// Backward, deterministic and entirely on the device:
//   dwpe[t,:] += Σ_b dout[b,t,:]             one thread per (t, c), b summed in order;
//   dwte[v,:] += Σ_{(b,t): token = v} dout   the B·T positions are sorted by token with CUB's stable radix
//                                            sort, then one thread per (run of equal tokens, channel) sums its
//                                            positions in order. No atomics, no host work per step.
#pragma once

#include <cub/device/device_radix_sort.cuh>

#include "llmc/core/cuda_common.h"

__global__ void encoder_forward_kernel(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B,
                                       int T, int C) {
    // one thread per x128 pack of channels
    const int packs_per_row = C / x128::size;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * packs_per_row) return;
    const int bt = idx / packs_per_row, c = (idx % packs_per_row) * x128::size, t = bt % T;
    const x128 e = load128(wte + (size_t)tokens[bt] * C + c), p = load128(wpe + (size_t)t * C + c);
    x128 o;
    for (int k = 0; k < x128::size; k++) o[k] = from_float<floatX>(to_float(e[k]) + to_float(p[k]));
    store128(out + (size_t)bt * C + c, o);
}

__global__ void encoder_backward_wpe_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * C) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += to_float(dout[(size_t)b * T * C + idx]);
    dwpe[idx] = from_float<floatX>(to_float(dwpe[idx]) + acc);
}

__global__ void encoder_positions_kernel(int* positions, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) positions[i] = i;
}

// grid.x = sorted position index, threads over channels. Only the first position of each run of equal
// tokens does work: it sums the whole run (ascending position order, the sort is stable).
__global__ void encoder_backward_wte_kernel(floatX* dwte, const floatX* dout, const int* sorted_tokens,
                                            const int* sorted_positions, int n, int C) {
    const int i = blockIdx.x;
    const int token = sorted_tokens[i];
    if (i > 0 && sorted_tokens[i - 1] == token) return;
    for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < C; c += gridDim.y * blockDim.x) {
        float acc = 0.0f;
        for (int j = i; j < n && sorted_tokens[j] == token; j++) acc += to_float(dout[(size_t)sorted_positions[j] * C + c]);
        dwte[(size_t)token * C + c] = from_float<floatX>(to_float(dwte[(size_t)token * C + c]) + acc);
    }
}

inline void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B, int T, int C,
                            cudaStream_t stream = 0) {
    if (C % x128::size != 0) {
        fprintf(stderr, "error: encoder_forward: C = %d must be a multiple of %d\n", C, x128::size);
        exit(EXIT_FAILURE);
    }
    const int threads = 256;
    encoder_forward_kernel<<<ceil_div((long long)B * T * C / x128::size, threads), threads, 0, stream>>>(
        out, tokens, wte, wpe, B, T, C);
    cudaCheckLaunch();
}

// Scratch for encoder_backward: sorted keys/values, the identity positions, and CUB's temporary storage.
struct EncoderBackwardScratch {
    int* positions = nullptr;         // B*T
    int* sorted_tokens = nullptr;     // B*T
    int* sorted_positions = nullptr;  // B*T
    void* cub_temp = nullptr;
    size_t cub_temp_bytes = 0;
};

inline size_t encoder_backward_cub_temp_bytes(int n, int vocab_size) {
    size_t bytes = 0;
    int end_bit = 1;
    while ((1ll << end_bit) < vocab_size) end_bit++;
    cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const int*)nullptr, (int*)nullptr, (const int*)nullptr,
                                              (int*)nullptr, n, 0, end_bit));
    return bytes;
}
// Total bytes the model reserves for the scratch (three int arrays + CUB temp, each 256-byte aligned).
inline size_t encoder_backward_scratch_bytes(int n, int vocab_size) {
    return 3 * round_up((size_t)n * sizeof(int), 256) + round_up(encoder_backward_cub_temp_bytes(n, vocab_size), 256);
}
inline EncoderBackwardScratch encoder_backward_scratch_at(void* base, int n, int vocab_size) {
    EncoderBackwardScratch s;
    char* p = (char*)base;
    const size_t ints = round_up((size_t)n * sizeof(int), 256);
    s.positions = (int*)p;
    s.sorted_tokens = (int*)(p + ints);
    s.sorted_positions = (int*)(p + 2 * ints);
    s.cub_temp = p + 3 * ints;
    s.cub_temp_bytes = encoder_backward_cub_temp_bytes(n, vocab_size);
    return s;
}

// dwte, dwpe are accumulated. tokens is on the device.
inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens, int B, int T, int C,
                             int vocab_size, const EncoderBackwardScratch& s, cudaStream_t stream = 0) {
    const int n = B * T, threads = 256;
    encoder_backward_wpe_kernel<<<ceil_div((long long)T * C, threads), threads, 0, stream>>>(dwpe, dout, B, T, C);
    cudaCheckLaunch();
    encoder_positions_kernel<<<ceil_div(n, threads), threads, 0, stream>>>(s.positions, n);
    cudaCheckLaunch();
    int end_bit = 1;
    while ((1ll << end_bit) < vocab_size) end_bit++;
    size_t temp_bytes = s.cub_temp_bytes;
    cudaCheck(cub::DeviceRadixSort::SortPairs(s.cub_temp, temp_bytes, tokens, s.sorted_tokens, s.positions,
                                              s.sorted_positions, n, 0, end_bit, stream));
    const int wte_threads = 128;
    dim3 grid(n, ceil_div(C, wte_threads));
    encoder_backward_wte_kernel<<<grid, wte_threads, 0, stream>>>(dwte, dout, s.sorted_tokens, s.sorted_positions, n, C);
    cudaCheckLaunch();
}
