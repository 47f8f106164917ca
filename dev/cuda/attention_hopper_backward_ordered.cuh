// The fused Hopper attention backward with its dQ additions in a fixed order (attention_backward variant 5): the
// engine's fused kernel (llmc/kernels/attention/attention_hopper_backward_fused.cuh) with a DqOrder that serialises the
// additions into each query tile through a semaphore per (b, h, query tile): deterministic. Not in the engine: the
// two-kernel scheme is deterministic too and faster (docs/PERFORMANCE.md).
#pragma once

#include "llmc/kernels/attention/attention_hopper_backward.cuh"

namespace flash_hopper {

// ---- a semaphore in global memory that orders bulk writes of different blocks. The writer completes its bulk group
// (tma_store_wait<0>), then releases; the next waits with acquire before issuing its own. The proxy fences order the
// async proxy's global writes against the generic proxy's semaphore accesses on both sides.
__device__ __forceinline__ void semaphore_wait_at_least(const int* sem, int target) {
#if defined(LLMC_HOPPER_DEVICE)
    int v;
    do {
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(sem) : "memory");
    } while (v < target);
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
#else
    __trap();
#endif
}
__device__ __forceinline__ void semaphore_release_add(int* sem, int count) {
#if defined(LLMC_HOPPER_DEVICE)
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(sem), "r"(count) : "memory");
#else
    __trap();
#endif
}

// The additions into each query tile happen key block by key block from the diagonal down: the first contributor
// stores (so dQacc needs no memset), each later one waits until the semaphore counts all blocks before it (kUnits
// per block). Blocks launch shortest first, so every block waits only on blocks launched before it.
template <int kUnits>
class OrderedDq {
  public:
    __device__ __forceinline__ OrderedDq(int* semaphores, int bh, int n_q) : sem_(semaphores + (size_t)bh * n_q) {}
    __device__ __forceinline__ static int key_block(int block, int n_blocks) { return n_blocks - 1 - block; }
    __device__ __forceinline__ bool wait_turn(int i, int kb, int kb_diag) {
        const bool first = kb == kb_diag;
        if (!first) semaphore_wait_at_least(sem_ + i, kUnits * (kb_diag - kb));
        return first;
    }
    __device__ __forceinline__ void pass_turn(int i) { semaphore_release_add(sem_ + i, kUnits); }

  private:
    int* sem_;
};

}  // namespace flash_hopper

// As attention_hopper_backward with the fused kernel, its additions ordered (same workspace).
inline cudaError_t attention_hopper_backward_ordered(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                                                     const __nv_bfloat16* out, const float* lse,
                                                     const __nv_bfloat16* qkv, int B, int T, int NH, int HS,
                                                     float* workspace, cudaStream_t stream = 0) {
    using namespace flash_hopper;
    if (HS != 64 && HS != 128) return cudaErrorInvalidValue;
    using Order = OrderedDq<BackwardFusedConfig<64>::kConsumers>;  // a unit per consumer and tile
    static_assert(BackwardFusedConfig<64>::kBq == BackwardFusedConfig<128>::kBq, "query tiles");
    const int n_q = (T + BackwardFusedConfig<64>::kBq - 1) / BackwardFusedConfig<64>::kBq;
    const BackwardWorkspace w = carve_workspace(workspace, B, T, NH, HS, /*fused=*/true);
    cudaCheck(cudaMemsetAsync(w.turns, 0, (size_t)B * NH * n_q * sizeof(int), stream));  // the semaphores
    if (HS == 64) launch_backward_fused<64, Order>(dqkv, w, dout, out, lse, qkv, B, T, NH, stream);
    else launch_backward_fused<128, Order>(dqkv, w, dout, out, lse, qkv, B, T, NH, stream);
    return cudaGetLastError();
}
