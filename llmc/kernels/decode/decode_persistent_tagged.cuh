// The persistent decode step's hand-off between blocks by tagged words (Step::tagged), NCCL's "LL" protocol in one
// word: a product's epilogue stores each output as a word that carries the step's tag beside the value, and a
// phase that reads it loads the words it needs and loads again those whose tag is not yet the step's. The data is
// its own flag: no fence orders a block's stores before a counter, no counter is waited for before the data is
// loaded (docs/DECODE.md: at d48 a phase's wait, release and staging cost 4-5 us, most of it three round trips
// to L2 under the weights' stream). A word is one single-copy-atomic access (PTX ISA, memory consistency model: a
// vector access is atomic element by element): a bf16 and its tag in 32 bits, an attention partial (float) and its
// tag in 64. Every word is written once a step (partials have a region per layer), so the tag only has to differ
// from the step before and from the zeroed start: it runs 1..65535 from a counter the kernel advances.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace decode_persistent {

__device__ __forceinline__ void tagged_store(uint32_t* p, uint32_t tag, __nv_bfloat16 v) {
    const uint32_t w = tag << 16 | __bfloat16_as_ushort(v);
    asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(w) : "memory");
}
__device__ __forceinline__ void tagged_store(unsigned long long* p, uint32_t tag, float v) {
    const unsigned long long w = (unsigned long long)tag << 32 | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}
// Four 32-bit words (16-byte aligned), two 64-bit ones; volatile: a poll's loads are issued again every time.
__device__ __forceinline__ uint4 tagged_load4(const uint32_t* p) {
    uint4 v;
    asm volatile("ld.relaxed.gpu.global.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ ulonglong2 tagged_load2(const unsigned long long* p) {
    ulonglong2 v;
    asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p));
    return v;
}

// The settles: words already loaded from p, loaded again after a short sleep until every one carries `tag` (any
// tag when !wait: decode_step's diagnostic without waits); then the values. Eight bf16 (two vectors) as a uint4 of
// bf16 pairs; one bf16; two floats.
__device__ __forceinline__ uint4 tagged_settle8(uint4 a, uint4 b, const uint32_t* p, uint32_t tag, bool wait) {
    const uint32_t t = tag << 16;
    while (wait && ((a.x ^ t) | (a.y ^ t) | (a.z ^ t) | (a.w ^ t) | (b.x ^ t) | (b.y ^ t) | (b.z ^ t) | (b.w ^ t)) >>
                       16) {
        __nanosleep(32);
        a = tagged_load4(p), b = tagged_load4(p + 4);
    }
    return make_uint4(__byte_perm(a.x, a.y, 0x5410), __byte_perm(a.z, a.w, 0x5410), __byte_perm(b.x, b.y, 0x5410),
                      __byte_perm(b.z, b.w, 0x5410));
}
// Eight bf16 at p (32-byte aligned): both vectors' loads issued, then settled.
__device__ __forceinline__ uint4 tagged_read8(const uint32_t* p, uint32_t tag, bool wait) {
    const uint4 a = tagged_load4(p), b = tagged_load4(p + 4);
    return tagged_settle8(a, b, p, tag, wait);
}
__device__ __forceinline__ __nv_bfloat16 tagged_read1(const uint32_t* p, uint32_t tag, bool wait) {
    uint32_t w;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(w) : "l"(p));
    while (wait && (w >> 16) != tag) {
        __nanosleep(32);
        asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(w) : "l"(p));
    }
    return __ushort_as_bfloat16((unsigned short)(w & 0xffffu));
}
__device__ __forceinline__ float2 tagged_settle2(ulonglong2 w, const unsigned long long* p, uint32_t tag, bool wait) {
    while (wait && ((uint32_t)(w.x >> 32) != tag || (uint32_t)(w.y >> 32) != tag)) {
        __nanosleep(32);
        w = tagged_load2(p);
    }
    return make_float2(__uint_as_float((uint32_t)w.x), __uint_as_float((uint32_t)w.y));
}

}  // namespace decode_persistent
