// What a decode step made of one persistent kernel could cost on this GPU, before that kernel is written
// (docs/DECODE.md, "First measurements"):
//   edge    one dependency edge between two SMs: a block stores a payload, releases a counter; a block on another SM
//           acquires it and reads the payload (ping-pong: the one-way time); and one block to all the others and
//           back (fan-out + fan-in, a round)
//   stream  a model's blocks' weight matrices (per layer 3C x C, C x C, 4C x C, C x 4C; bf16, row-major, one output
//           row a dot over C or 4C) times a vector, y = W x in fp32, all of them in order:
//             graph      one kernel per matrix, replayed as a CUDA Graph (today's step's shape)
//             stream     one persistent kernel, each block its rows of every matrix, never waiting (the bound)
//             counters   the same, each matrix waiting until every block has finished the one before (a counter per
//                        matrix: release by the last thread of a block, acquire by one thread of each block)
//             prefetch   counters, each warp's first row of the next matrix loaded into registers before the wait
//             stream+L2, counters+L2   stream and counters, each block's rows of the matrices `ahead` in front
//                        queued into L2 (cp.async.bulk.prefetch: no registers, no shared memory, nothing to wait
//                        for) before it works on this one, so DRAM keeps streaming while blocks wait and compute
//             pages, pages+counters   a producer warp per block copies the block's rows of every matrix, in
//                        order, into a ring of 4 shared-memory pages of 48 KB (cp.async.bulk on an mbarrier), never
//                        waiting for x; 8 consumer warps multiply each page and release it; +counters: they wait
//                        for the matrix before as counters does (sm_90a builds on H100/H200; skipped elsewhere)
//             pages4, pages4+counters   pages, each warp up to 4 rows of a page at once, so each lane's x is
//                        loaded once for the group (pages:math found the consumers, not the copies, setting the pace)
//             pages4+xs   pages4 with x staged in shared memory once (every product reads it there, not from L1)
//             +ms         every matrix's shape and pointers staged in shared memory once (not loaded per matrix)
//             pages8, pages8+counters   pages4+xs+ms with every warp busy on every page: units of (rows, a slice of
//                        K) over the warps, each lane 4 weight vectors in flight, a page's slices summed in order
//                        (deterministic) after a barrier; pages8:math-signal its products alone
//             pagesR, pagesR+counters   each lane's columns fixed for the whole matrix, x in registers (the pages
//                        then serve weights alone: pages8 found x's shared-memory reads the products' limit), a
//                        row's K in 1-4 slices over the warps, two rows at a time; pagesR:math-signal the products
//             +stage      x loaded from global memory into shared memory at each matrix's start (after the wait),
//                        as the persistent decode step stages its inputs: what that latency costs a matrix
//             pages:copy, pages:math   pages' two halves alone, to see which sets its pace: the copies with the
//                        pages released unread, or the products on pages marked full with nothing copied (no y)
//             pages4:math+xs   pages:math with pages4's groups and x in shared memory
//             pages:sync, pages:ring   the skeleton alone, nothing copied and nothing multiplied: the ring's
//                        hand-offs and each matrix's end (the consumers' barrier and the counter's release), then
//                        the hand-offs alone (where pages:math's time a matrix goes); -signal: without each matrix's
//                        end (what the release after the y stores costs)
// Every mode's y (but the diagnostics') is checked against the fp64 product (rel-L2 <= 1e-5) and every payload the
// edges carried counted before anything is timed; times are medians of CUDA-event timings with L2 flushed
// (dev/cuda/common.h).
//   make -C dev/cuda decode_probe && ./dev/cuda/decode_probe [-e 12|24|36|48] [-r repeats] [-a ahead (2)]
#include <cstdio>
#include <string>
#include <vector>

#include "common.h"
#include "llmc/core/block_counters.cuh"
#include "llmc/kernels/decode/decode_persistent.cuh"
#include "llmc/hopper/pipeline.cuh"
#include "llmc/hopper/tma.cuh"

constexpr int kThreads = 256, kWarps = kThreads / 32;

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned sm_id() {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
// One thread of the block waits until *count reaches target; the barrier then extends the acquire to the block.
__device__ __forceinline__ void block_wait(const unsigned* count, unsigned target) {
    if (threadIdx.x == 0) wait_count(count, target);
    __syncthreads();
}
// Every thread's stores of the block before the barrier, then one release.
__device__ __forceinline__ void block_signal(unsigned* count) {
    __syncthreads();
    if (threadIdx.x == 0) red_release_add(count, 1u);
}

// ------------------------------------------------------------------------------------------ edge
// Round i's payload: 32 words, i * 32 + lane; a reader counts the words that differ into out[2].
__device__ __forceinline__ void write_payload(unsigned* payload, int i) {
    if (threadIdx.x < 32) payload[threadIdx.x] = i * 32u + threadIdx.x;
}
__device__ __forceinline__ void check_payload(const unsigned* payload, int i, unsigned long long* out) {
    if (threadIdx.x < 32 && __ldcg(payload + threadIdx.x) != i * 32u + threadIdx.x) atomicAdd(&out[2], 1ull);
}
// flags[0]: ping, flags[1]: pong, flags[2]: the fan-in count; payload: 32 words. out: [0] ping-pong ns, [1] fan
// round ns, [2] payload words that arrived wrong, [3] and [4] the SMs the ping and the pong block ran on.
__global__ void edge_kernel(unsigned* flags, unsigned* payload, unsigned long long* out, int rounds) {
    const int partner = gridDim.x / 2;
    if (blockIdx.x == 0 || blockIdx.x == partner) {
        const bool ping = blockIdx.x == 0;
        if (threadIdx.x == 0) out[ping ? 3 : 4] = sm_id();
        const unsigned long long t0 = global_ns();
        for (int i = 1; i <= rounds; i++) {
            if (ping) {
                write_payload(payload, i);
                block_signal(&flags[0]);
                block_wait(&flags[1], i);
            } else {
                block_wait(&flags[0], i);
                check_payload(payload, i, out);
                block_signal(&flags[1]);
            }
        }
        if (ping && threadIdx.x == 0) out[0] = (global_ns() - t0) / (2ull * rounds);
    }
}
__global__ void fan_kernel(unsigned* flags, unsigned* payload, unsigned long long* out, int rounds) {
    const unsigned long long t0 = global_ns();
    for (int i = 1; i <= rounds; i++) {
        if (blockIdx.x == 0) {
            write_payload(payload, i);
            block_signal(&flags[0]);
            block_wait(&flags[2], (unsigned)i * (gridDim.x - 1));
        } else {
            block_wait(&flags[0], i);
            check_payload(payload, i, out);
            block_signal(&flags[2]);
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) out[1] = (global_ns() - t0) / rounds;
}

// ------------------------------------------------------------------------------------------ stream
struct Matrices {
    const __nv_bfloat16* const* w;  // per matrix, rows x cols
    const int* rows;
    const int* cols;
    int count;
};

// Row r of one matrix times x (cols a multiple of 256): each lane 16-byte loads, a warp sum.
template <int kMaxChunks>
__device__ __forceinline__ void load_row(const __nv_bfloat16* w, int cols, int r, uint4 (&v)[kMaxChunks]) {
    const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)r * cols);
#pragma unroll
    for (int j = 0; j < kMaxChunks; j++)
        if ((j * 32 + (int)threadIdx.x % 32) * 8 < cols) v[j] = __ldcs(row + j * 32 + threadIdx.x % 32);
}
template <int kMaxChunks>
__device__ __forceinline__ float row_dot(const uint4 (&v)[kMaxChunks], const float* x, int cols) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxChunks; j++) {
        const int c = (j * 32 + (int)threadIdx.x % 32) * 8;
        if (c < cols) {
            const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&v[j]);
            for (int k = 0; k < 8; k++) s += __bfloat162float(h[k]) * x[c + k];
        }
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

constexpr int kMaxChunks = 6400 / 256;  // cols up to 4 x 1600
// The rows of matrix m this block takes (contiguous), its warps round-robin over them.
__device__ __forceinline__ void rows_of(int n, int block, int blocks, int* begin, int* end) {
    *begin = (int)((long long)n * block / blocks), *end = (int)((long long)n * (block + 1) / blocks);
}
__device__ void matrix_part(const Matrices& M, int m, const float* x, float* y, int block, int blocks,
                            bool preloaded, uint4 (&v)[kMaxChunks]) {
    int begin, end;
    rows_of(M.rows[m], block, blocks, &begin, &end);
    const int warp = threadIdx.x / 32;
    bool first = true;
    for (int r = begin + warp; r < end; r += kWarps) {
        if (!(first && preloaded)) load_row(M.w[m], M.cols[m], r, v);
        first = false;
        const float s = row_dot(v, x, M.cols[m]);
        if (threadIdx.x % 32 == 0) y[r] = s;
    }
}

__global__ void __launch_bounds__(kThreads) matrix_kernel(Matrices M, int m, const float* x, float* const* y) {
    uint4 v[kMaxChunks];
    matrix_part(M, m, x, y[m], blockIdx.x, gridDim.x, false, v);
}
// This block's rows of matrix m into L2, queued by warp 0 in pieces of 64 KB (16-byte multiples: cols is of 256).
__device__ __forceinline__ void prefetch_l2(const Matrices& M, int m) {
    if (m >= M.count || threadIdx.x >= 32) return;
    int begin, end;
    rows_of(M.rows[m], blockIdx.x, gridDim.x, &begin, &end);
    const char* base = reinterpret_cast<const char*>(M.w[m] + (size_t)begin * M.cols[m]);
    const size_t bytes = (size_t)(end - begin) * M.cols[m] * sizeof(__nv_bfloat16), piece = 64 << 10;
    for (size_t off = threadIdx.x * piece; off < bytes; off += 32 * piece) {
        const unsigned n = (unsigned)(bytes - off < piece ? bytes - off : piece);
#if __CUDA_ARCH__ >= 900
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + off), "r"(n) : "memory");
#endif
    }
}
// mode 0: never waits; 1: waits for the matrix before; 2: waits, its first rows loaded before. ahead > 0: the rows of
// the matrices that far in front queued into L2 first. Every mode signals, and epoch is this launch's number (from
// 1), so the counters need no reset: matrix m is done at epoch * gridDim.x.
__global__ void __launch_bounds__(kThreads) persistent_kernel(Matrices M, const float* x, float* const* y,
                                                              unsigned* done, unsigned epoch, int mode, int ahead) {
    uint4 v[kMaxChunks];
    for (int m = 0; m < ahead; m++) prefetch_l2(M, m);
    for (int m = 0; m < M.count; m++) {
        if (ahead > 0) prefetch_l2(M, m + ahead);
        bool preloaded = false;
        if (mode > 0 && m > 0) {
            if (mode == 2) {
                int begin, end;
                rows_of(M.rows[m], blockIdx.x, gridDim.x, &begin, &end);
                const int r = begin + (int)threadIdx.x / 32;
                if (r < end) load_row(M.w[m], M.cols[m], r, v), preloaded = true;
            }
            block_wait(&done[m - 1], epoch * gridDim.x);
        }
        matrix_part(M, m, x, y[m], blockIdx.x, gridDim.x, preloaded, v);
        block_signal(&done[m]);
    }
}

// ------------------------------------------------------------------------------------------ pages
constexpr int kPageStages = 4, kPageBytes = 48 << 10, kPageThreads = kThreads + kWarpSize;
constexpr size_t kPageSmem = 128 + (size_t)kPageStages * kPageBytes;  // the ring's barriers, then the pages
// The consumer warps' own barrier (the producer warp has left): named barrier 1 over kThreads.
__device__ __forceinline__ void consumers_wait(const unsigned* count, unsigned target) {
    if (threadIdx.x == 0) wait_count(count, target);
    hopper::named_barrier_sync(1, kThreads);
}
__device__ __forceinline__ void consumers_signal(unsigned* count) {
    hopper::named_barrier_sync(1, kThreads);
    if (threadIdx.x == 0) red_release_add(count, 1u);
}
constexpr int kGroup = 4;  // pages4: rows a warp takes at once
// A warp's g rows (g <= kGroup) of a page, y[i] = row i . x: each lane's 8 columns of x loaded once (two float4) for
// all g rows, each row's 8 weights one 16-byte load, bf16 pairs widened two at a time.
__device__ __forceinline__ void group_rows(const __nv_bfloat16* rows, int cols, int g, const float* x, float* y,
                                           int lane) {
    float s[kGroup] = {};
    for (int c = lane * 8; c < cols; c += kWarpSize * 8) {
        const float4 xa = *reinterpret_cast<const float4*>(x + c), xb = *reinterpret_cast<const float4*>(x + c + 4);
        const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
        for (int i = 0; i < kGroup; i++) {
            if (i >= g) break;
            const uint4 v = *reinterpret_cast<const uint4*>(rows + (size_t)i * cols + c);
            const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 f = __bfloat1622float2(h[k]);
                s[i] += f.x * xv[2 * k] + f.y * xv[2 * k + 1];
            }
        }
    }
#pragma unroll
    for (int i = 0; i < kGroup; i++) {
        for (int o = 16; o > 0; o >>= 1) s[i] += __shfl_xor_sync(0xffffffffu, s[i], o);
        if (lane == 0 && i < g) y[i] = s[i];
    }
}

// Whole rows a page holds (a block's share of a matrix is [begin, end), in pages of this many rows).
__device__ __forceinline__ int rows_per_page(int cols) { return kPageBytes / (cols * (int)sizeof(__nv_bfloat16)); }

// pages8: a page's work as units (g rows, one of S slices of their K) spread over all warps, so a page of few wide
// rows keeps every warp busy; each lane keeps kG * kV 16-byte weight vectors in flight (kG rows, kV column vectors).
// Returns each row's sum of the slice [v0, v1) of 16-byte vectors in every lane.
template <int kG, int kV>
__device__ __forceinline__ void slice_dot(const __nv_bfloat16* rows, int cols, int g, int v0, int v1, const float* x,
                                          int lane, float (&s)[kGroup]) {
#pragma unroll
    for (int i = 0; i < kGroup; i++) s[i] = 0.f;
    for (int v = v0 + lane; v < v1; v += kV * kWarpSize) {
        uint4 w[kG][kV];
        float4 xv[kV][2];
#pragma unroll
        for (int j = 0; j < kV; j++) {
            const int c = (v + j * kWarpSize) * 8;
            const bool in = v + j * kWarpSize < v1;
            xv[j][0] = in ? *reinterpret_cast<const float4*>(x + c) : make_float4(0.f, 0.f, 0.f, 0.f);
            xv[j][1] = in ? *reinterpret_cast<const float4*>(x + c + 4) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int i = 0; i < kG; i++)
                w[i][j] = in && i < g ? *reinterpret_cast<const uint4*>(rows + (size_t)i * cols + c)
                                      : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < kG; i++)
#pragma unroll
            for (int j = 0; j < kV; j++) {
                const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&w[i][j]);
                const float xs[8] = {xv[j][0].x, xv[j][0].y, xv[j][0].z, xv[j][0].w,
                                     xv[j][1].x, xv[j][1].y, xv[j][1].z, xv[j][1].w};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float2 f = __bfloat1622float2(h[k]);
                    s[i] += f.x * xs[2 * k] + f.y * xs[2 * k + 1];
                }
            }
    }
#pragma unroll
    for (int i = 0; i < kGroup; i++)
        for (int o = 16; o > 0; o >>= 1) s[i] += __shfl_xor_sync(0xffffffffu, s[i], o);
}
// pagesR: the persistent decode step's consumer (llmc/kernels/decode/decode_persistent.cuh): each lane's columns
// fixed for a whole matrix, x in registers, a row's K in slices_of(V) slices over the warps, rows two at a time.
namespace dpc = decode_persistent;
constexpr int kMaxSlices = 8, kMinSliceVectors = 64;  // a slice: at least 2 vectors a lane
// The slices S of a page of n rows of V vectors: the fewest that leave the warps' last round fullest.
__device__ __forceinline__ int slices_for(int n, int V) {
    int best = 1, best_fill = 0;
    for (int S = 1; S <= kMaxSlices && (S == 1 || V / S >= kMinSliceVectors); S++) {
        const int units = n * S, fill = units * 1000 / (((units + kWarps - 1) / kWarps) * kWarps);
        if (fill > best_fill) best = S, best_fill = fill;
    }
    return best;
}

// How a pages mode runs: wait (for the matrix before: counters), copy (the producer fills the pages; else it marks
// them full at once), math (the products; else each page is released unread), grouped (each warp up to kGroup rows of
// a page at once), x_smem (x staged in shared memory first), signal (each matrix's end: the consumers' barrier and the
// counter's release; wait needs it).
struct PageMode {
    bool wait, copy, math, grouped, x_smem, signal, meta_smem = false, split = false, regs = false, stage = false;
};
// meta_smem: every matrix's shape and pointers staged into shared memory once, so a matrix's first step is not a
// dependent global load (a round trip before any of the matrix's work)
struct PageMeta {
    const __nv_bfloat16* w;
    float* y;
    int rows, cols;
};
constexpr int kMaxMatrices = 4 * 48;
constexpr int kPartials = 32 * kMaxSlices;  // a page's rows (at most 32: 768 wide) times its slices
__global__ void __launch_bounds__(kPageThreads) pages_kernel(Matrices M, const float* x_global, int x_len,
                                                             float* const* y, unsigned* done, unsigned epoch,
                                                             PageMode pm) {
    const bool wait = pm.wait, copy = pm.copy, math = pm.math, grouped = pm.grouped;
    extern __shared__ __align__(128) uint8_t smem[];
    auto* bars = reinterpret_cast<hopper::RingBarriers<kPageStages>*>(smem);
    uint8_t* pages = smem + 128;
    static_assert(sizeof(hopper::RingBarriers<kPageStages>) <= 128, "the barriers fit before the pages");
    auto* meta = reinterpret_cast<PageMeta*>(pages + (size_t)kPageStages * kPageBytes);  // then x (x_smem)
    float* partials = reinterpret_cast<float*>(meta + kMaxMatrices);  // split: two pages' (row, slice) sums
    float* xs = partials + 2 * kPartials;
    if (pm.x_smem)
        for (int i = threadIdx.x; i < x_len; i += blockDim.x) xs[i] = x_global[i];
    if (pm.meta_smem)
        for (int m = threadIdx.x; m < M.count; m += blockDim.x) meta[m] = {M.w[m], y[m], M.rows[m], M.cols[m]};
    const float* x = pm.x_smem ? xs : x_global;
    const bool ms = pm.meta_smem;
    auto rows_m = [&](int m) { return ms ? meta[m].rows : M.rows[m]; };
    auto cols_m = [&](int m) { return ms ? meta[m].cols : M.cols[m]; };
    auto w_m = [&](int m) { return ms ? meta[m].w : M.w[m]; };
    auto y_m = [&](int m) { return ms ? meta[m].y : y[m]; };
    if (threadIdx.x == 0) bars->init(1, kWarps * kWarpSize), hopper::fence_barrier_init();  // every reader releases
    __syncthreads();
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    hopper::Ring<kPageStages> ring(*bars);
    if (warp == kWarps) {  // the producer: every page of every matrix, as far ahead as the ring allows
        if (lane == 0) {
            for (int m = 0; m < M.count; m++) {
                int begin, end;
                rows_of(rows_m(m), blockIdx.x, gridDim.x, &begin, &end);
                const int cols = cols_m(m), per_page = rows_per_page(cols);
                for (int r0 = begin; r0 < end; r0 += per_page, ring.advance()) {
                    const uint32_t bytes = (uint32_t)(min(per_page, end - r0) * cols * sizeof(__nv_bfloat16));
                    if (!copy) {
                        ring.wait_empty(), ring.arrive_full();
                        continue;
                    }
                    uint64_t* bar = ring.acquire(bytes);
                    hopper::bulk_load_1d(pages + (size_t)ring.stage() * kPageBytes, w_m(m) + (size_t)r0 * cols,
                                         bytes, bar);
                }
            }
        }
        return;
    }
    // split: sliced pages alternate two partial-sum buffers, so a page's writes wait for no one, and the barrier of
    // the sliced page between two that share a buffer orders the first one's reads before the second one's writes
    int sliced_pages = 0;
    // A page's end for pages8 and pagesR: with S > 1 slices, each row's S partial sums (row-major in this page's
    // buffer) added in slice order once every warp has stored its own
    auto end_sliced_page = [&](bool products, int S, int n, float* y_page) {
        if (products && S > 1) {
            const float* part = partials + (sliced_pages & 1) * kPartials;
            hopper::named_barrier_sync(1, kThreads);
            for (int r = threadIdx.x; r < n; r += kThreads) {
                float t = 0.f;
                for (int sl = 0; sl < S; sl++) t += part[r * S + sl];
                y_page[r] = t;
            }
        }
        sliced_pages += S > 1;
    };
    for (int m = 0; m < M.count; m++) {
        if (wait && m > 0) consumers_wait(&done[m - 1], epoch * gridDim.x);
        int begin, end;
        rows_of(rows_m(m), blockIdx.x, gridDim.x, &begin, &end);
        const int cols = cols_m(m), per_page = rows_per_page(cols);
        float* const ym = y_m(m);
        // regs: this warp's place (wr, wk), its slice's first vector rv0, its lane's nv vectors of x in registers
        const int V = cols / 8, Wk = pm.regs ? dpc::slices_of(V) : 1, Wr = kWarps / Wk, wk = warp % Wk;
        const int wr = warp / Wk, rv0 = V * wk / Wk, rv1 = V * (wk + 1) / Wk;
        const int nv = max(0, min(dpc::kRegV, (rv1 - rv0 - lane + kWarpSize - 1) / kWarpSize));
        float4 xr[dpc::kRegV][2];
        if (pm.stage) {  // x from global memory into shared memory at each matrix's start, as the decode step does
            constexpr int kStageVec = 8;  // float4s a thread: up to 8192 columns
            hopper::named_barrier_sync(1, kThreads);  // every warp has its x of the matrix before in registers
            float4 v[kStageVec];
#pragma unroll
            for (int j = 0; j < kStageVec; j++) {
                const int i = threadIdx.x + j * kThreads;
                if (i < cols / 4) v[j] = __ldcg(reinterpret_cast<const float4*>(x_global) + i);
            }
#pragma unroll
            for (int j = 0; j < kStageVec; j++) {
                const int i = threadIdx.x + j * kThreads;
                if (i < cols / 4) reinterpret_cast<float4*>(xs)[i] = v[j];
            }
            hopper::named_barrier_sync(1, kThreads);
        }
        if (pm.regs) dpc::load_x_slice(x, rv0, nv, xr);
        for (int r0 = begin; r0 < end; r0 += per_page, ring.advance()) {
            const int n = min(per_page, end - r0);
            ring.wait_full();
            const __nv_bfloat16* page =
                reinterpret_cast<const __nv_bfloat16*>(pages + (size_t)ring.stage() * kPageBytes);
            if (pm.regs) {  // warp (wr, wk): rows wr, wr + Wr, ... two at a time, over slice wk, x in registers
                if (math) {
                    float* part = partials + (sliced_pages & 1) * kPartials;
                    for (int r = wr; r < n; r += 2 * Wr) {
                        const bool two = r + Wr < n;
                        const __nv_bfloat16* ra = page + (size_t)r * cols + (size_t)(rv0 + lane) * 8;
                        float sa, sb;
                        dpc::row_pair_dot(ra, ra + (size_t)Wr * cols, two, nv, xr, sa, sb);
                        if (lane == 0) {
                            if (Wk == 1) {
                                ym[r0 + r] = sa;
                                if (two) ym[r0 + r + Wr] = sb;
                            } else {
                                part[r * Wk + wk] = sa;
                                if (two) part[(r + Wr) * Wk + wk] = sb;
                            }
                        }
                    }
                }
                ring.release();
                end_sliced_page(math, Wk, n, ym + r0);
                continue;
            }
            if (pm.split) {  // units of (g rows, slice s) over all warps; S > 1: slices summed in order after a barrier
                const int S = slices_for(n, V);
                const int g = S == 1 ? max(1, min(kGroup, n / kWarps)) : 1, units = (n + g - 1) / g * S;
                float* part = partials + (sliced_pages & 1) * kPartials;
                for (int u = warp; math && u < units; u += kWarps) {
                    const int r = u / S * g, sl = u % S, gg = min(g, n - r);
                    const int v0 = V * sl / S, v1 = V * (sl + 1) / S;
                    float sum[kGroup];
                    if (g == 1) slice_dot<1, 4>(page + (size_t)r * cols, cols, gg, v0, v1, x, lane, sum);
                    else if (g == 2) slice_dot<2, 2>(page + (size_t)r * cols, cols, gg, v0, v1, x, lane, sum);
                    else slice_dot<4, 1>(page + (size_t)r * cols, cols, gg, v0, v1, x, lane, sum);
                    if (lane == 0)
                        for (int i = 0; i < gg; i++) {
                            if (S == 1) ym[r0 + r + i] = sum[i];
                            else part[(r + i) * S + sl] = sum[i];
                        }
                }
                ring.release();
                end_sliced_page(math, S, n, ym + r0);
                continue;
            }
            if (grouped) {  // rows per warp: as many as keep every warp busy, up to kGroup
                const int g = max(1, min(kGroup, n / kWarps));
                for (int r = warp * g; math && r < n; r += kWarps * g)
                    group_rows(page + (size_t)r * cols, cols, min(g, n - r), x, ym + r0 + r, lane);
                ring.release();
                continue;
            }
            for (int r = warp; math && r < n; r += kWarps) {
                float s = 0.f;
                for (int c = lane * 8; c < cols; c += kWarpSize * 8) {
                    const uint4 v = *reinterpret_cast<const uint4*>(page + (size_t)r * cols + c);
                    const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&v);
                    for (int k = 0; k < 8; k++) s += __bfloat162float(h[k]) * x[c + k];
                }
                for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                if (lane == 0) ym[r0 + r] = s;
            }
            ring.release();
        }
        if (pm.signal) consumers_signal(&done[m]);
    }
}

int main(int argc, char** argv) {
    int depth = 12, repeats = 20, ahead = 2;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if ((a == "-e" || a == "-r" || a == "-a") && i + 1 < argc) {
            const int v = positive_int(argv[++i]);
            if (v == 0 || (a == "-e" && v != 12 && v != 24 && v != 36 && v != 48)) {
                fprintf(stderr, "error: %s %s: -e takes 12, 24, 36 or 48, -r and -a a positive count\n", a.c_str(),
                        argv[i]);
                return 1;
            }
            (a == "-e" ? depth : a == "-r" ? repeats : ahead) = v;
        } else {
            fprintf(stderr, "usage: %s [-e 12|24|36|48] [-r repeats] [-a matrices ahead into L2]\n", argv[0]);
            return 1;
        }
    }
    print_device();
    int dev, sms;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int C = depth == 12 ? 768 : depth == 24 ? 1024 : depth == 36 ? 1280 : 1600;

    // ---- edge
    DeviceBuffer<unsigned> flags(3), payload(32);
    DeviceBuffer<unsigned long long> out(5);
    cudaCheck(cudaMemset(flags.ptr, 0, flags.bytes())), cudaCheck(cudaMemset(out.ptr, 0, out.bytes()));
    const int rounds = 20000;
    edge_kernel<<<sms, kThreads>>>(flags.ptr, payload.ptr, out.ptr, rounds);
    cudaCheckLaunch();
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemset(flags.ptr, 0, flags.bytes()));
    fan_kernel<<<sms, kThreads>>>(flags.ptr, payload.ptr, out.ptr, rounds / 10);
    cudaCheckLaunch();
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<unsigned long long> e = out.download();
    printf("edge: %llu payload words wrong (must be 0); ping-pong one way %.2f us (SMs %llu and %llu); one block to %d "
           "and back %.2f us a round\n", e[2], e[0] / 1e3, e[3], e[4], sms - 1, e[1] / 1e3);
    if (e[2] != 0) return 1;

    // ---- stream: the layers' matrices (uniform in +-0.05), x uniform in +-1; the fp64 products kept for the checks
    std::vector<int> rows, cols;
    for (int l = 0; l < depth; l++) {
        const int r[4] = {3 * C, C, 4 * C, C}, k[4] = {C, C, C, 4 * C};
        for (int j = 0; j < 4; j++) rows.push_back(r[j]), cols.push_back(k[j]);
    }
    const int count = (int)rows.size();
    Rng rng(7);
    std::vector<float> x((size_t)4 * C);
    for (float& v : x) v = 2.f * rng.uniform() - 1.f;
    std::vector<DeviceBuffer<__nv_bfloat16>> w(count);
    std::vector<DeviceBuffer<float>> y(count);
    std::vector<std::vector<double>> ref(count);
    std::vector<const __nv_bfloat16*> w_ptrs;
    std::vector<float*> y_ptrs;
    double bytes = 0;
    for (int m = 0; m < count; m++) {
        std::vector<__nv_bfloat16> h((size_t)rows[m] * cols[m]);
        for (auto& v : h) v = __float2bfloat16(0.1f * rng.uniform() - 0.05f);
        ref[m].assign(rows[m], 0.0);
        for (int r = 0; r < rows[m]; r++)
            for (int k = 0; k < cols[m]; k++) ref[m][r] += (double)__bfloat162float(h[(size_t)r * cols[m] + k]) * x[k];
        w[m].resize(h.size()), w[m].upload(h), y[m].resize(rows[m]);
        w_ptrs.push_back(w[m].ptr), y_ptrs.push_back(y[m].ptr);
        bytes += 2.0 * h.size();
    }
    DeviceBuffer<const __nv_bfloat16*> d_w(count);
    DeviceBuffer<float*> d_y(count);
    DeviceBuffer<int> d_rows(count), d_cols(count);
    DeviceBuffer<float> d_x(x.size());
    DeviceBuffer<unsigned> done(count);
    d_w.upload(w_ptrs), d_y.upload(y_ptrs), d_rows.upload(rows), d_cols.upload(cols), d_x.upload(x);
    cudaCheck(cudaMemset(done.ptr, 0, done.bytes()));
    const Matrices M{d_w.ptr, d_rows.ptr, d_cols.ptr, count};
    unsigned epoch = 0;
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int m = 0; m < count; m++) matrix_kernel<<<sms, kThreads, 0, stream>>>(M, m, d_x.ptr, d_y.ptr);
    cudaCheck(cudaStreamEndCapture(stream, &graph));
    cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
    for (int c : cols) {  // a page holds whole rows
        if (c * (int)sizeof(__nv_bfloat16) <= kPageBytes) continue;
        fprintf(stderr, "error: a row of %d columns is wider than a page (%d bytes)\n", c, kPageBytes);
        return 1;
    }
    const bool hopper = hopper::hopper_available();
    // the pages modes, by mode - 6: wait, copy, math, grouped, x in shared memory, signal, shapes in shared memory
    const PageMode page_modes[] = {
        {false, true, true, false, false, true},         // pages
        {true, true, true, false, false, true},          // pages+counters
        {false, true, true, true, false, true},          // pages4
        {true, true, true, true, false, true},           // pages4+counters
        {false, true, true, true, true, true},           // pages4+xs
        {false, true, true, true, true, true, true},     // pages4+xs+ms
        {true, true, true, true, true, true, true},      // pages4+xs+ms+counters
        {false, true, true, false, true, true, true, true},  // pages8
        {true, true, true, false, true, true, true, true},   // pages8+counters
        {false, true, true, false, true, true, true, false, true},  // pagesR
        {true, true, true, false, true, true, true, false, true},   // pagesR+counters
        {false, true, true, false, true, true, true, false, true, true},  // pagesR+stage
        {true, true, true, false, true, true, true, false, true, true},   // pagesR+stage+counters
        {false, true, false, false, false, true},        // pages:copy
        {false, false, true, false, false, true},        // pages:math
        {false, false, true, true, true, true},          // pages4:math+xs
        {false, false, true, true, true, true, true},    // pages4:math+xs+ms
        {false, false, true, true, true, false, true},   // pages4:math+xs+ms-signal
        {false, false, true, false, true, false, true, true},  // pages8:math-signal
        {false, false, true, false, true, false, true, false, true},  // pagesR:math-signal
        {false, false, false, false, false, true},       // pages:sync
        {false, false, false, false, false, true, true}, // pages:sync+ms
        {false, false, false, false, false, false},      // pages:ring
        {false, false, false, false, false, false, true} // pages:ring+ms
    };
    const char* names[] = {"graph",       "stream",          "counters",         "prefetch",
                           "stream+L2",   "counters+L2",     "pages",            "pages+counters",
                           "pages4",      "pages4+counters", "pages4+xs",        "pages4+xs+ms",
                           "pages4+xs+ms+counters",          "pages8",           "pages8+counters",
                           "pagesR",      "pagesR+counters", "pagesR+stage",    "pagesR+stage+counters",
                           "pages:copy",  "pages:math",      "pages4:math+xs",   "pages4:math+xs+ms",
                           "pages4:math+xs+ms-signal",       "pages8:math-signal", "pagesR:math-signal",
                           "pages:sync",  "pages:sync+ms",   "pages:ring",       "pages:ring+ms"};
    constexpr int kModes = (int)(sizeof(names) / sizeof(names[0]));
    static_assert(kModes == 6 + (int)(sizeof(page_modes) / sizeof(page_modes[0])), "a name for every mode");
    if (count > kMaxMatrices) {
        fprintf(stderr, "error: %d matrices, more than the %d the shapes' shared memory holds\n", count, kMaxMatrices);
        return 1;
    }
    const int modes = hopper ? kModes : 6, checked = hopper ? 19 : 6;  // the diagnostics (from pages:copy) compute no y
    const int x_len = (int)x.size();
    const size_t page_smem =
        kPageSmem + kMaxMatrices * sizeof(PageMeta) + (2 * kPartials + (size_t)x_len) * sizeof(float);
    if (!hopper) printf("(the pages modes: sm_90a builds on H100/H200 only, skipped)\n");
    else cudaCheck(cudaFuncSetAttribute(pages_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)page_smem));
    auto run = [&](int mode) {  // on the legacy default stream, as benchmark() times it (the graph captured apart)
        if (mode == 0) {
            cudaCheck(cudaGraphLaunch(exec, 0));
        } else if (mode >= 6) {
            pages_kernel<<<sms, kPageThreads, page_smem>>>(M, d_x.ptr, x_len, d_y.ptr, done.ptr, ++epoch,
                                                           page_modes[mode - 6]);
            cudaCheckLaunch();
        } else {
            const int wait = mode <= 3 ? mode - 1 : mode - 4;  // stream+L2: never waits, counters+L2: waits
            persistent_kernel<<<sms, kThreads>>>(M, d_x.ptr, d_y.ptr, done.ptr, ++epoch, wait, mode <= 3 ? 0 : ahead);
            cudaCheckLaunch();
        }
    };
    auto rel_l2 = [&] {  // every y against fp64, after the device is done
        cudaCheck(cudaDeviceSynchronize());
        double err = 0, norm = 0;
        for (int m = 0; m < count; m++) {
            const std::vector<float> got = y[m].download();
            for (int r = 0; r < rows[m]; r++) {
                const double d = got[r] - ref[m][r];
                err += d * d, norm += ref[m][r] * ref[m][r];
            }
        }
        return std::sqrt(err / norm);
    };
    for (int mode = 0; mode < checked; mode++) {  // validation: every y of every mode, outputs poisoned first
        for (auto& b : y) b.poison();
        run(mode);
        const double rel = rel_l2();
        printf("stream %-21s: y of %d matrices against fp64, rel-L2 %.2e (<= 1e-5)\n", names[mode], count, rel);
        if (!(rel <= 1e-5)) return 1;
    }
    printf("\nd%d, C %d: %d matrices, %.1f MB of weights; cold L2, median of %d; +L2: %d matrices ahead\n", depth, C,
           count, bytes / 1e6, repeats, ahead);
    for (int mode = 0; mode < modes; mode++) {
        for (auto& b : y) b.poison();
        const Timing t = benchmark([&] { run(mode); }, repeats);
        // the last timed launch's y too: a race that came and went would show here
        const double rel = mode < checked ? rel_l2() : NAN;
        printf("  %-24s %8.1f us  %7.0f GB/s  %6.2f us a matrix  ", names[mode], 1e3 * t.cold_ms,
               bytes / (t.cold_ms * 1e6), 1e3 * t.cold_ms / count);
        if (mode >= checked) printf("(a diagnostic: no y)\n");
        else printf("(y rel-L2 %.1e)\n", rel);
        if (mode < checked && !(rel <= 1e-5)) return 1;
    }
    cudaCheck(cudaGraphExecDestroy(exec)), cudaCheck(cudaGraphDestroy(graph)), cudaCheck(cudaStreamDestroy(stream));
    return 0;
}
