// A diagnostic build of the persistent step, compiled only with -DLLMC_DECODE_SLOT_CHECK (dev/cuda's
// decode_slot_check target; docs/DECODE.md, "The tile path's failure, chased"), never in the engine. The tiled
// kernel failed whenever its code changed, its epilogue storing through a bad phase description read from its
// shared-memory slot. This build compares the slot with the phase list in global memory where a phase's work begins
// (after its wait) and at each epilogue, keeps the first mismatch, and goes on with the global description, so the
// step finishes and the host can print what was found (slot_check_print).
#pragma once

#include <cstdio>

#include "llmc/kernels/decode/decode_persistent_common.cuh"

namespace decode_persistent {

// [0] set once a mismatch is kept; then where (0: the phase's start, 1: an epilogue), the phase, the block, the
// thread, the slot's and the list's `out`, their epilogues, thread 0's phase at that moment, the slot's address
constexpr int kSlotCheckWords = 10;
__device__ unsigned long long slot_check_record[kSlotCheckWords];
__device__ int slot_check_phase[1024];  // per block: the phase thread 0 is in (written as it begins one)

__device__ __forceinline__ void slot_check_mark(int i) {
    if (threadIdx.x == 0) *reinterpret_cast<volatile int*>(&slot_check_phase[blockIdx.x]) = i;
}

// ph if it holds phase i's description (all of its bytes), else the global one, the first such moment recorded.
__device__ __noinline__ const Phase& slot_checked(const Phase& ph, const Step& s, int i, int where) {
    const Phase& g = s.phases[i];
    const uint4* a = reinterpret_cast<const uint4*>(&ph);
    const uint4* b = reinterpret_cast<const uint4*>(&g);
    bool same = true;
    for (int k = 0; k < (int)(sizeof(Phase) / 16); k++) {
        const uint4 x = a[k], y = __ldcg(b + k);
        same = same && x.x == y.x && x.y == y.y && x.z == y.z && x.w == y.w;
    }
    if (same) return ph;
    if (atomicCAS(&slot_check_record[0], 0ull, 1ull) == 0ull) {
        unsigned long long* r = slot_check_record;
        r[1] = (unsigned long long)where, r[2] = (unsigned long long)i, r[3] = blockIdx.x, r[4] = threadIdx.x;
        r[5] = reinterpret_cast<unsigned long long>(ph.out), r[6] = reinterpret_cast<unsigned long long>(__ldcg(
                                                                   reinterpret_cast<const unsigned long long*>(&g.out)));
        r[7] = (unsigned long long)(unsigned)ph.epilogue << 32 | (unsigned)g.epilogue;
        r[8] = (unsigned long long)*reinterpret_cast<volatile int*>(&slot_check_phase[blockIdx.x]);
        r[9] = reinterpret_cast<unsigned long long>(&ph);
        __threadfence();
    }
    return g;
}

// Host: the record after a step (and clears it); true when the slots matched throughout.
inline bool slot_check_print() {
    unsigned long long r[kSlotCheckWords] = {};
    if (cudaMemcpyFromSymbol(r, slot_check_record, sizeof(r)) != cudaSuccess) {
        printf("slot check: the record could not be read (the step failed before it)\n");
        return false;
    }
    if (r[0] == 0) {
        printf("slot check: every description read from a slot matched the phase list\n");
        return true;
    }
    printf("slot check: MISMATCH at %s of phase %llu, block %llu, thread %llu: the slot's out %#llx, the list's "
           "%#llx; epilogue %llu against %llu; thread 0 was in phase %llu; the slot at %#llx\n",
           r[1] ? "an epilogue" : "the start", r[2], r[3], r[4], r[5], r[6], r[7] >> 32, r[7] & 0xffffffffull, r[8],
           r[9]);
    const unsigned long long zero[kSlotCheckWords] = {};
    cudaMemcpyToSymbol(slot_check_record, zero, sizeof(zero));
    return false;
}

}  // namespace decode_persistent
