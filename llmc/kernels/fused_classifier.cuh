// Softmax + cross-entropy + its gradient in one kernel: for each row of logits, the row's loss, then the logits
// overwritten in place with
//   dlogits[i] = (softmax(x)[i] - [i == target]) · dloss   for i < V,   0 for the padding V <= i < Vp.
// Each row is read from DRAM once and written once; probabilities are never stored, only the row's statistics (max
// and sum of exponentials, per thread, then merged across the block in a fixed order) live in registers.
// Two kernels, the same arithmetic per element (so the same bits):
//   - pipelined (sm_80+, rows that fit twice in shared memory: GPT-2 in bf16): one persistent block per SM keeps
//     two rows in shared memory and copies the next row in (cp.async) while it computes the current one, so DRAM
//     streams without pause;
//   - resident (everything else): one block per row, the row held in registers, in chunks when it is longer.
// A block per row that loads, computes and stores in turn leaves DRAM idle between its phases, which the pipelined
// kernel avoids (timings: docs/PERFORMANCE.md).
// Vp is a multiple of 128 (gpt2_config.h), so each row is 16-byte aligned and split into x128 packs.
#pragma once

#include <cuda_fp16.h>

#include "llmc/core/cuda_common.h"
#include "llmc/core/sm_budget.h"

struct SoftmaxStats {
    float m, l;  // running max and sum of exp(x - m)
};
__device__ __forceinline__ SoftmaxStats merge_stats(SoftmaxStats a, SoftmaxStats b) {
    float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.0f};
    return {m, a.l * expf(a.m - m) + b.l * expf(b.m - m)};
}

namespace classifier_detail {

constexpr int kThreads = 1024, kSize = x128::size;

// The largest of a pack's first `valid` values (all of them when valid >= kSize, the common case), compared in the
// pack's own type (bf16 pairs: no conversions that the sum pass would otherwise keep live in registers).
__device__ __forceinline__ float pack_max(const x128& v, int valid) {
    if (valid >= kSize) {
#if !defined(ENABLE_FP32)
        const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
        const __nv_bfloat162 m = __hmax2(__hmax2(p[0], p[1]), __hmax2(p[2], p[3]));
        return fmaxf(__low2float(m), __high2float(m));
#else
        float m = to_float(v[0]);
        for (int k = 1; k < kSize; k++) m = fmaxf(m, to_float(v[k]));
        return m;
#endif
    }
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < kSize; k++)
        if (k < valid) m = fmaxf(m, to_float(v[k]));
    return m;
}

// exp(x − max) ∈ [0, 1] is kept in the pack's own 2 bytes per value for the write pass, as fp16 (11 bits of
// precision: bf16 dlogits keep 8), so each element costs one exp2, not two (the SM's 16 exp2 per clock bound the
// kernel otherwise); fp32 builds keep fp32.
#if !defined(ENABLE_FP32)
typedef __half ExpT;
__device__ __forceinline__ ExpT exp_store(float x) { return __float2half_rn(x); }
__device__ __forceinline__ float exp_load(ExpT e) { return __half2float(e); }
#else
typedef float ExpT;
__device__ __forceinline__ ExpT exp_store(float x) { return x; }
__device__ __forceinline__ float exp_load(ExpT e) { return e; }
#endif
static_assert(sizeof(ExpT) == sizeof(floatX), "exponentials replace the logits in place");

// Σ exp(x − mx) over a pack's first `valid` values (mx2 = mx·log2 e: one FMA and one exp2 each); the pack's values
// are replaced by those exponentials (0 in the padding). The sum takes them before rounding.
__device__ __forceinline__ float pack_exp(x128& v, int valid, float mx2) {
    ExpT* e = reinterpret_cast<ExpT*>(&v);
    float sum = 0.0f;
    if (valid >= kSize) {
#pragma unroll
        for (int k = 0; k < kSize; k++) {
            const float ek = exp2f(fmaf(to_float(v[k]), kLog2e, -mx2));
            sum += ek;
            e[k] = exp_store(ek);
        }
    } else {
#pragma unroll
        for (int k = 0; k < kSize; k++) {
            const float ek = k < valid ? exp2f(fmaf(to_float(v[k]), kLog2e, -mx2)) : 0.0f;
            sum += ek;
            e[k] = exp_store(ek);
        }
    }
    return sum;
}

// dlogits of a pack that pack_exp filled: exp(x − mx)·f with f = exp(mx − m)·dloss / l (one multiply), minus dloss
// at the target (target_k: its index in this pack, or -1); the padding's exponentials are 0, so its gradient is too.
__device__ __forceinline__ x128 pack_dlogits(const x128& v, float f, int target_k, float dloss) {
    const ExpT* e = reinterpret_cast<const ExpT*>(&v);
    float g[kSize];
#pragma unroll
    for (int k = 0; k < kSize; k++) g[k] = exp_load(e[k]) * f;
    if (target_k >= 0) {
#pragma unroll
        for (int k = 0; k < kSize; k++)
            if (k == target_k) g[k] -= dloss;
    }
    x128 d;
#pragma unroll
    for (int k = 0; k < kSize; k++) d[k] = from_float<floatX>(g[k]);
    return d;
}

// The row's statistics from each thread's: merged across the warp, then warp by warp in order (the same order
// everywhere, so the result does not depend on timing). warp_stats: kThreads / 32 entries of shared memory; the
// caller syncs before writing it again.
__device__ __forceinline__ SoftmaxStats block_stats(SoftmaxStats st, SoftmaxStats* warp_stats) {
    for (int off = 16; off > 0; off >>= 1) {
        SoftmaxStats other = {__shfl_xor_sync(0xffffffff, st.m, off), __shfl_xor_sync(0xffffffff, st.l, off)};
        st = merge_stats(st, other);
    }
    if (threadIdx.x % kWarpSize == 0) warp_stats[threadIdx.x / kWarpSize] = st;
    __syncthreads();
    st = {-INFINITY, 0.0f};
    for (int w = 0; w < kThreads / kWarpSize; w++) st = merge_stats(st, warp_stats[w]);
    return st;
}

}  // namespace classifier_detail

// One block per row, the row in registers: each thread holds kPacks x128 packs (loaded together, so many loads are
// in flight); rows longer than kPacks·kThreads packs go in chunks, re-read for the write pass.
template <int kPacks>
__global__ void __launch_bounds__(classifier_detail::kThreads)
    fused_classifier_kernel(floatX* logits, float* losses, const int* targets, int V, int Vp, float dloss) {
    using namespace classifier_detail;
    constexpr int kChunk = kPacks * kThreads;
    __shared__ SoftmaxStats warp_stats[kThreads / kWarpSize];
    const size_t row = blockIdx.x;
    floatX* x = logits + row * Vp;
    const int packs = Vp / kSize;
    x128 v[kPacks];
    auto load_chunk = [&](int c0) {
#pragma unroll
        for (int i = 0; i < kPacks; i++) {
            const int pk = c0 + i * kThreads + threadIdx.x;
            if (pk < packs) v[i] = load128cs(x + pk * kSize);
        }
    };
    SoftmaxStats st = {-INFINITY, 0.0f};  // this thread's, merged once per chunk
    float mx2 = -INFINITY;                 // this thread's max of the last chunk, times log2 e
    for (int c0 = 0; c0 < packs; c0 += kChunk) {
        load_chunk(c0);
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < kPacks; i++) {
            const int pk = c0 + i * kThreads + threadIdx.x;
            if (pk < packs) mx = fmaxf(mx, pack_max(v[i], V - pk * kSize));
        }
        mx2 = mx * kLog2e;
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < kPacks; i++) {
            const int pk = c0 + i * kThreads + threadIdx.x;
            if (pk < packs) sum += pack_exp(v[i], V - pk * kSize, mx2);
        }
        if (mx != -INFINITY) st = merge_stats(st, {mx, sum});  // else nothing of the real vocabulary was here
    }
    st = block_stats(st, warp_stats);
    const int target = targets[row];
    if (threadIdx.x == 0) losses[row] = st.m + logf(st.l) - to_float(x[target]);
    __syncthreads();  // x[target] is read above before anyone overwrites it
    const float m2 = st.m * kLog2e, scale = dloss / st.l;
    const bool resident = packs <= kChunk;  // v holds this thread's exponentials (relative to mx2); else recomputed
    for (int c0 = 0; c0 < packs; c0 += kChunk) {
        if (!resident) load_chunk(c0);
#pragma unroll
        for (int i = 0; i < kPacks; i++) {
            const int pk = c0 + i * kThreads + threadIdx.x;
            if (pk >= packs) continue;
            if (!resident) pack_exp(v[i], V - pk * kSize, m2);
            const float f = resident ? exp2f(mx2 - m2) * scale : scale;
            const int target_k = pk == target / kSize ? target % kSize : -1;
            store128(x + pk * kSize, pack_dlogits(v[i], f, target_k, dloss));
        }
    }
}

// Persistent: block b takes rows b, b + gridDim.x, ...; shared memory holds two rows (Vp each), the next one
// arriving by cp.async while this one is computed. Each thread moves its packs of the current row into registers
// (kPacks, unrolled: all loads in flight together) and from there does what the resident kernel does, with the
// same arithmetic in the same order, so the two kernels give the same bits.
template <int kPacks>
__global__ void __launch_bounds__(classifier_detail::kThreads)
    fused_classifier_pipelined_kernel(floatX* logits, float* losses, const int* targets, int N, int V, int Vp,
                                      float dloss) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using namespace classifier_detail;
    extern __shared__ uint4 classifier_smem[];
    __shared__ SoftmaxStats warp_stats[kThreads / kWarpSize];
    const int packs = Vp / kSize;
    floatX* rows = reinterpret_cast<floatX*>(classifier_smem);  // row buffer i at rows + i·Vp
    auto fetch = [&](int row, floatX* dst) {
        const floatX* src = logits + (size_t)row * Vp;
#pragma unroll
        for (int i = 0; i < kPacks; i++) {
            const int pk = i * kThreads + threadIdx.x;
            if (pk < packs)
                cp_async_16(smem_addr(dst + pk * kSize), src + pk * kSize, true);
        }
        cp_async_commit();
    };
    int row = blockIdx.x;
    if (row < N) fetch(row, rows);
    for (int it = 0; row < N; it++, row += gridDim.x) {
        const floatX* xs = rows + (it & 1) * Vp;
        if (row + (int)gridDim.x < N) {
            // into the other buffer, whose last readers passed the sync that ended iteration it - 1
            fetch(row + gridDim.x, rows + ((it + 1) & 1) * Vp);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();  // every thread's copies of this row have landed
        x128 v[kPacks];
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < kPacks; i++) {
            const int pk = i * kThreads + threadIdx.x;
            if (pk < packs) v[i] = load128(xs + pk * kSize);
        }
#pragma unroll
        for (int i = 0; i < kPacks; i++) {
            const int pk = i * kThreads + threadIdx.x;
            if (pk < packs) mx = fmaxf(mx, pack_max(v[i], V - pk * kSize));
        }
        const float mx2 = mx * kLog2e;
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < kPacks; i++) {
            const int pk = i * kThreads + threadIdx.x;
            if (pk < packs) sum += pack_exp(v[i], V - pk * kSize, mx2);
        }
        SoftmaxStats st = mx != -INFINITY ? SoftmaxStats{mx, sum} : SoftmaxStats{-INFINITY, 0.0f};
        st = block_stats(st, warp_stats);
        const int target = targets[row];
        if (threadIdx.x == 0) losses[row] = st.m + logf(st.l) - to_float(xs[target]);
        const float m2 = st.m * kLog2e, f = exp2f(mx2 - m2) * (dloss / st.l);
        floatX* x = logits + (size_t)row * Vp;
#pragma unroll
        for (int i = 0; i < kPacks; i++) {
            const int pk = i * kThreads + threadIdx.x;
            if (pk >= packs) continue;
            const int target_k = pk == target / kSize ? target % kSize : -1;
            const x128 d = pack_dlogits(v[i], f, target_k, dloss);
            __stcs(reinterpret_cast<int4*>(x + pk * kSize), *reinterpret_cast<const int4*>(&d));
        }
        __syncthreads();  // all reads of this buffer (and of warp_stats) are done before they are written again
    }
#endif
}

enum class ClassifierKernel { Auto, Pipelined, Resident };

// Whether the pipelined kernel can run rows of Vp on this device.
namespace classifier_detail {
constexpr int kPipelinedPacks = 8;  // packs per thread: rows up to 8·1024 packs (two must fit in shared memory anyway)
}
inline bool fused_classifier_pipelined_fits(int Vp) {
    const cudaDeviceProp& prop = device_info().prop;
    return prop.major >= 8 && Vp / x128::size <= classifier_detail::kPipelinedPacks * classifier_detail::kThreads &&
           2 * (size_t)Vp * sizeof(floatX) + 1024 <= prop.sharedMemPerBlockOptin;
}

// logits (N, Vp) become dlogits; losses (N) get each row's loss. targets on the device, all < V. `kernel` is for
// tests (Auto: pipelined where it fits).
inline void fused_classifier(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss,
                             cudaStream_t stream = 0, ClassifierKernel kernel = ClassifierKernel::Auto) {
    using namespace classifier_detail;
    if (Vp % kSize != 0) {
        fprintf(stderr, "error: fused_classifier: padded vocab %d must be a multiple of %d\n", Vp, kSize);
        exit(EXIT_FAILURE);
    }
    const cudaDeviceProp& prop = device_info().prop;
    const size_t pipelined_smem = 2 * (size_t)Vp * sizeof(floatX);
    const bool fits = fused_classifier_pipelined_fits(Vp);
    if (kernel == ClassifierKernel::Pipelined && !fits) {
        fprintf(stderr, "error: fused_classifier: rows of %d do not fit twice in shared memory\n", Vp);
        exit(EXIT_FAILURE);
    }
    if (kernel == ClassifierKernel::Pipelined || (kernel == ClassifierKernel::Auto && fits)) {
        static size_t smem_set = 0;  // the largest size the attribute has been raised to
        const auto pipelined_kernel = fused_classifier_pipelined_kernel<kPipelinedPacks>;
        if (pipelined_smem > smem_set) {
            cudaCheck(cudaFuncSetAttribute(pipelined_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)pipelined_smem));
            smem_set = pipelined_smem;
        }
        const int blocks = std::min(N, compute_sm_count());
        pipelined_kernel<<<blocks, kThreads, pipelined_smem, stream>>>(logits, losses, targets, N, V, Vp, dloss);
        cudaCheckLaunch();
        return;
    }
    // the fewest packs per thread that hold a row (up to 8; longer rows go in chunks of 8 per thread)
    const int per_thread = ceil_div(Vp / kSize, kThreads);
    const auto resident_kernel = per_thread <= 1   ? fused_classifier_kernel<1>
                                 : per_thread <= 2 ? fused_classifier_kernel<2>
                                 : per_thread <= 4 ? fused_classifier_kernel<4>
                                                   : fused_classifier_kernel<8>;
    resident_kernel<<<N, kThreads, 0, stream>>>(logits, losses, targets, V, Vp, dloss);
    cudaCheckLaunch();
}
