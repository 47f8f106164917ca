// Dependencies between the blocks of one persistent kernel, as counters in global memory: a block that has written
// what others read adds one to a counter with release semantics (after its threads' stores, ordered before the add
// by a barrier); a block that reads waits until the counter reaches the number of writers with acquire semantics,
// then a barrier extends what it saw to its other threads. Counters only grow: a launch waits for epoch x writers
// (epoch: the launch's number from 1), so nothing is reset between launches. PTX ISA, "Memory Consistency Model".
#pragma once

#include <cstdint>

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release_add(unsigned* p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// One thread's wait (a short sleep between polls, so a waiting SM leaves the memory system to the others). The
// difference, not the values, is compared, so the wait stays right when epoch x writers wraps past 2^32.
__device__ __forceinline__ void wait_count(const unsigned* count, unsigned target) {
    while ((int)(ld_acquire(count) - target) < 0) __nanosleep(20);
}
