// The skeleton every warp-specialised kernel here shares (FlashAttention-3's producer and consumer warpgroups):
// thread 0 prefetches the tensor maps and initialises the barriers, then fences them for TMA; the block syncs; the
// producer warpgroup (0) gives registers back and runs the producer role, every one of its 128 threads (the role
// says which work); the consumer warpgroups take the registers and run the consumer role with their index.
//   warp_specialized<Cfg::kProducerRegs, Cfg::kConsumerRegs>(
//       [&] { prefetch_tensor_maps(&map_a, &map_b); ring_barriers.init(1, 8); },   // thread 0: the barriers
//       [&] { if (threadIdx.x == 0) produce(...); },                               // warpgroup 0
//       [&](int consumer) { ... });                                                // warpgroups 1..
// The launch must cap the registers (__launch_bounds__(threads, 1)) for setmaxnreg to move them (arch.cuh).
#pragma once

#include "llmc/hopper/arch.cuh"
#include "llmc/hopper/pipeline.cuh"
#include "llmc/hopper/tma.cuh"

namespace hopper {

template <typename... Maps>
__device__ __forceinline__ void prefetch_tensor_maps(const Maps*... maps) {
    (tma_prefetch_map(maps), ...);
}

template <int kProducerRegs, int kConsumerRegs, typename Init, typename Producer, typename Consumer>
__device__ __forceinline__ void warp_specialized(Init&& init, Producer&& producer, Consumer&& consumer) {
    if (threadIdx.x == 0) {
        init();
        fence_barrier_init();
    }
    __syncthreads();
    const int warpgroup = threadIdx.x / 128;
    if (warpgroup == 0) {
        setmaxnreg_dec<kProducerRegs>();
        producer();
        return;
    }
    setmaxnreg_inc<kConsumerRegs>();
    consumer(warpgroup - 1);
}

}  // namespace hopper
