// Hopper (sm_90a) as a target: whether this build and this GPU have it, the guard every device wrapper of
// llmc/hopper/ compiles behind, and what a warp-specialised kernel does with its warpgroups (setmaxnreg, named
// barriers). The other wrappers: tma.cuh, pipeline.cuh, smem.cuh, wgmma.cuh; each states the rule it obeys (PTX ISA
// 8.x; FlashAttention-3, Shah et al. 2024, for how the attention kernels use them).
// Build: wgmma and setmaxnreg exist only on the sm_90a target (`-gencode arch=compute_90a,code=sm_90a`, which the
// Makefiles pass for GPU_COMPUTE_CAPABILITY=90 and announce with -DLLMC_SM90A); on any other target the device
// wrappers compile to a trap and hopper_available() is false, so callers keep their pre-Hopper path.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "llmc/core/cuda_common.h"
#include "llmc/core/options.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LLMC_HOPPER_DEVICE 1  // device code of the sm_90a pass: the instructions below exist
#endif

// An asm statement of an sm_90a-only instruction; elsewhere a trap (callers check hopper_available() first).
#if defined(LLMC_HOPPER_DEVICE)
#define LLMC_HOPPER_ASM(...) asm volatile(__VA_ARGS__)
#else
#define LLMC_HOPPER_ASM(...) __trap()
#endif

namespace hopper {

// True when this binary carries sm_90a code and the current device is compute capability 9.0 (H100, H200), unless
// LLMC_NO_HOPPER=1 in the environment asks for the pre-Hopper kernels (a fallback, and A/B timings in one build).
inline bool hopper_available() {
#if defined(LLMC_SM90A)
    static const bool yes = [] {
        if (engine_options().no_hopper) return false;
        int dev = 0, major = 0, minor = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        return major == 9 && minor == 0;
    }();
    return yes;
#else
    return false;
#endif
}

// Lets `kernel` take `bytes` of dynamic shared memory (over 48 KB needs the opt-in). Launchers call it once per
// kernel: static const bool ready = (hopper::allow_dynamic_smem(kernel, bytes), true);
template <typename Kernel>
inline void allow_dynamic_smem(Kernel kernel, int bytes) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// ---- setmaxnreg: a warpgroup gives registers back (dec) or takes them (inc). Every thread of the warpgroup
// executes it; it takes effect only in a kernel with a register cap at entry (__launch_bounds__(threads, 1)).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
    LLMC_HOPPER_ASM("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
    LLMC_HOPPER_ASM("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
// Whether one producer warpgroup at producer_regs and `consumers` warpgroups at consumer_regs fit the block's launch
// allocation under __launch_bounds__(threads, 1): the register file split evenly, per thread a multiple of 8 (168
// at 384 threads). setmaxnreg only moves registers within that allocation; a sum above it (e.g. 32 + 2 x 240 at 384
// threads, though 128 x 512 = 64K) leaves setmaxnreg.inc waiting forever.
constexpr bool setmaxnreg_fits(int consumers, int producer_regs, int consumer_regs) {
    const int threads = 128 * (1 + consumers), at_launch = 65536 / threads / 8 * 8;
    return producer_regs + consumers * consumer_regs <= (1 + consumers) * at_launch;
}

// ---- named barriers 1..15 (0 is __syncthreads): `threads` (a multiple of 32) take part. sync waits; arrive
// signals without waiting (a producer of a hand-off), as in FlashAttention-3's ping-pong of two warpgroups.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace hopper
