// How the warp-specialised kernels hand shared-memory buffers from producers (TMA, or threads storing) to consumer
// warpgroups and back: mbarriers, and the ring of stages built on them. PTX ISA 8.x, "mbarrier".
#pragma once

#include <cstdint>

#include "llmc/hopper/arch.cuh"

namespace hopper {

// ---- mbarrier: a 64-bit shared-memory object that completes a phase when `count` arrivals have happened and
// the transaction bytes announced with expect_tx have landed. Waiters name the phase by its parity bit.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int count) {
    LLMC_HOPPER_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
// After initialising barriers, make them visible to the async proxy (TMA completes on them) before any use.
__device__ __forceinline__ void fence_barrier_init() {
    LLMC_HOPPER_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` more to land in this phase (the producer, before its TMA loads).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    LLMC_HOPPER_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                    : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
    LLMC_HOPPER_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so waiting for parity
// 1 returns at once: a producer starts on "empty" barriers with parity 1.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#if defined(LLMC_HOPPER_DEVICE)
    uint32_t done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(parity)
            : "memory");
    } while (!done);
#else
    __trap();
#endif
}

// ---- a ring of kStages buffers: stage s is filled (full[s] completes: its producers arrived and its bytes landed),
// read, and released (empty[s] completes: every consumer warp arrived), then filled again. The barriers live in the
// kernel's shared-memory layout; one thread initialises them, then calls fence_barrier_init, then the block syncs.
template <int kStages>
struct RingBarriers {
    uint64_t full[kStages];
    uint64_t empty[kStages];
    // producers: arrivals that fill a stage (a TMA thread's arrive_expect_tx is one); consumers: arrivals that
    // release it (one per consumer warp or thread: Ring::release)
    __device__ __forceinline__ void init(int producers, int consumers) {
        for (int s = 0; s < kStages; s++) {
            mbarrier_init(&full[s], producers);
            mbarrier_init(&empty[s], consumers);
        }
    }
};

// One thread's (or warp's) place in a ring: the stage it is at and the parity of that stage's fill, as buffer n
// sits in stage n % kStages as that stage's fill number n / kStages. Producers and consumers each keep their own
// Ring over the same barriers and advance it past every buffer they fill or read, their own or not (a consumer that
// skips another's buffers advances by their count). Stage and phase are kept, not derived from a count: the
// increment-and-flip is what the kernels' loops were measured fastest with (the attention forward at HS 64).
template <int kStages>
class Ring {
  public:
    __device__ __forceinline__ explicit Ring(RingBarriers<kStages>& barriers, uint32_t buffers_before = 0)
        : bar_(barriers), stage_(buffers_before % kStages), phase_((buffers_before / kStages) & 1) {}
    __device__ __forceinline__ int stage() const { return stage_; }
    __device__ __forceinline__ uint32_t phase() const { return phase_; }
    __device__ __forceinline__ void advance(uint32_t buffers = 1) {
        if (buffers == 1) {
            if (++stage_ == kStages) stage_ = 0, phase_ ^= 1;
            return;
        }
        const uint32_t n = stage_ + buffers;
        stage_ = n % kStages;
        phase_ ^= (n / kStages) & 1;
    }

    // Producer: waits until the consumers have released this stage (at once in the first round).
    __device__ __forceinline__ void wait_empty() const { mbarrier_wait(&bar_.empty[stage()], phase() ^ 1); }
    // TMA producer: the wait above, then arms the stage's full barrier with the bytes its copies will land; returns
    // the barrier the copies complete on.
    __device__ __forceinline__ uint64_t* acquire(uint32_t bytes) const {
        wait_empty();
        mbarrier_arrive_expect_tx(&bar_.full[stage()], bytes);
        return &bar_.full[stage()];
    }
    // Producer storing with threads: its arrival once the warp's stores are done (one lane, after __syncwarp).
    __device__ __forceinline__ void arrive_full() const { mbarrier_arrive(&bar_.full[stage()]); }
    // The stage's full barrier, for copies issued by lanes other than the one that armed it (acquire).
    __device__ __forceinline__ uint64_t* full_barrier() const { return &bar_.full[stage()]; }

    // Consumer: waits until this stage holds its next buffer.
    __device__ __forceinline__ void wait_full() const { mbarrier_wait(&bar_.full[stage()], phase()); }
    // Consumer: a release of stage s. wgmma readers: lane 0 of a warp, once its wgmma are done; plain shared-memory
    // loads: every reading thread, as an arrival releases only its own thread's accesses (racecheck holds to it).
    __device__ __forceinline__ void release(int s) const { mbarrier_arrive(&bar_.empty[s]); }
    __device__ __forceinline__ void release() const { release(stage()); }

  private:
    RingBarriers<kStages>& bar_;
    int stage_;
    uint32_t phase_;
};

}  // namespace hopper
