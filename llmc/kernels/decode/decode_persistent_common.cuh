// The persistent decode step's shared vocabulary (llmc/kernels/decode/decode_persistent.cuh has the design): its
// sizes, the phase list it runs, the consumers' barrier and deterministic block reductions, the greedy key.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "llmc/gpt2/gpt2_config.h"
#include "llmc/hopper/arch.cuh"
#include "llmc/kernels/decode/decode_attention_chunks.h"
#include "llmc/kernels/decode/decode_tile_geometry.h"
#include "llmc/kernels/sampling/sampling_rule.h"

namespace decode_persistent {

using bf16 = __nv_bfloat16;
constexpr int kWarps = 8, kConsumers = kWarps * 32, kThreads = kConsumers + 32;  // + the producer warp
constexpr int kStages = 4, kPageBytes = 48 << 10;
constexpr int kRegV = 8;            // 16-byte weight vectors of a row's slice per lane (x: 64 registers)
constexpr int kMaxPageRows = 32;    // rows of a page at the narrowest K (768)
constexpr int kPartials = kMaxPageRows * kWarps;  // a page's (row, slice) sums
constexpr int kInVec = 4;          // 16-byte input vectors a consumer thread stages (K up to 8192)
constexpr int kMaxBlockRows = 64;  // a block's rows of a phase with a bias or a residual (N up to 64 x the grid)
// attention (its chunks: decode_attention_chunks.h): a unit's partial result is m, l, two pads and o (64)
constexpr int kUnitFloats = 4 + kHeadSize;

enum class Kind : int { Product, Attention };
// Diagnostics: no attention (its blocks only signal; the projection stages a stale input, unmerged), no waits
// between phases, no LayerNorms, no staging (x, the rows' bias and residual left stale), no products (each page
// waited for and released unread, nothing stored).
constexpr unsigned kSkipAttention = 1, kSkipWaits = 2, kSkipLayerNorm = 4, kSkipStaging = 8, kSkipProducts = 16;
enum class Epilogue : int { Plain, Qkv, Gelu, Residual, Logits };

// One phase. Product: out (N) = epilogue(LayerNorm?(in) . W^T + bias), W (N, K) row-major; in null: the step's
// embedding (wte[token] + wpe[pos], rounded). Attention: out (C) from in = the layer's QKV row and the cache.
struct Phase {
    Kind kind;
    Epilogue epilogue;
    const bf16* W;
    const bf16* bias;
    int N, K;
    const bf16* ln_w;
    const bf16* ln_b;
    const bf16* in;
    const bf16* residual;  // Residual: out = residual + round(y); null: the embedding
    bf16* out;
    bf16* k_cache;  // the layer's (NH, max_T, HS): Qkv writes position pos, Attention reads 0..pos
    bf16* v_cache;
    // Attention: its units' partial results; a product after it: its input, merged (in: where block 0 leaves the
    // merged row)
    float* partials = nullptr;
    TileCut tiles = {};  // a product's pages on the tensor cores (with_tiles, on the host)
};
// 112 bytes: the plan counts it (tests/unit/test_inference_plan.cpp), and the kernel copies it in 16-byte pieces
static_assert(sizeof(Phase) == 112, "the phase list's size");
// A phase list's products' pages (Phase::tiles), computed here once rather than by the kernel every step. Every
// builder of a phase list calls it: the kernel reads them as they are (a check there, a __trap, pushed the tile
// kernel into spills; a product without them computes nothing, which the checks' poisoned outputs catch).
inline void with_tiles(Phase& ph) {
    if (ph.kind == Kind::Product) ph.tiles = tile_cut(ph.K);
}

struct Step {
    const Phase* phases;
    int count;
    const bf16* wte;
    const bf16* wpe;
    int C, NH, HS, max_T, V;
    const int* token;                    // the step's input token (device)
    int* len;                            // the sequence's length with that token (device): its position len - 1
    unsigned* done;                      // a counter per phase: zero before the first launch, left zero by each
    unsigned long long* pick_partials;   // a greedy rank per block
    int* token_out = nullptr;            // the greedy token, when given
    // generation's loop, when next_tokens is given: the pick's outputs as pick_tokens writes them (store_pick): the
    // token into next_tokens[0] (may be `token`: every block has read it by then) and tokens_out, len advanced
    const int* prompt_len = nullptr;
    int* next_tokens = nullptr;
    int* tokens_out = nullptr;
    int max_new = 0;
    unsigned diagnose = 0;               // dev/cuda/decode_step's timings of parts (wrong results): kSkip* bits
    int attn_splits = 1;                 // a head's key chunks: the host gives the most (attention_splits), the
                                         // kernel sets the step's (splits_at)
    // the sequence the step is for (a server's lone busy slot), read on the device so one captured graph serves any
    // slot; null: sequence 0. Its token, length, cache rows and logits row; the greedy fold is for sequence 0 only.
    const int* row = nullptr;
    int pos = 0;                         // set by the kernel: len - 1
    int seq = 0;                         // set by the kernel: *row (0 without one)
    size_t cache_offset = 0;             // set by the kernel: the sequence's rows in a layer's cache (seq NH max_T HS)
    // dev/cuda/decode_step's timeline (null: off; results unchanged): per block and phase, kTimelineMarks values
    // (kMark*), then per block clock64 and %globaltimer at the kernel's start and end (the clock's rate)
    unsigned long long* timeline = nullptr;
    int tiles = 0;                       // the products on the tensor cores (decode_persistent_tiles.cuh), else FFMA
};
// A phase's timeline values: consumer thread 0's clock64 at the phase's start, its wait done, its input staged, its
// products done and its release; the cycles it spent waiting for pages; the producer's clock64 as it issued the
// phase's first and its last page (all three 0 for a phase without pages, written by consumer thread 0); thread 0's
// clock64 past the barrier that ends the phase, before the release (kMarkSynced: the end's barrier and its release
// apart).
constexpr int kMarkPagesWait = 5, kMarkFirstIssued = 6, kMarkLastIssued = 7, kMarkSynced = 8, kTimelineMarks = 9;

// Shared memory: the ring's barriers, the pages, x (a product's input; attention's scratch), partial sums, the
// block's rows' bias and residual, a reduction scratch, two phase descriptions (each piece a multiple of 16 bytes);
// with tiles, x again as bf16 (the tensor cores' B) after them, and the pages are tiles (kTilePageBytes).
constexpr int kLaunchConstsBytes = 32;  // decode_persistent.cuh's LaunchConsts
inline int x_floats_for(int C) {  // a multiple of 4: what follows x stays 16-byte aligned
    return 4 * C > kWarps * kUnitFloats ? 4 * C : kWarps * kUnitFloats; }
__host__ __device__ constexpr int page_bytes(bool tiles) { return tiles ? kTilePageBytes : kPageBytes; }
__host__ __device__ constexpr int stages(bool tiles) { return tiles ? kTileStages : kStages; }
inline size_t smem_bytes(int x_floats, bool tiles = false) {
    return 128 + (size_t)stages(tiles) * page_bytes(tiles) +
           ((size_t)x_floats + 2 * kPartials + 2 * kMaxBlockRows + kConsumers) * sizeof(float) +
           kWarps * sizeof(unsigned long long) + 2 * sizeof(Phase) + kLaunchConstsBytes +
           (tiles ? (size_t)x_floats * sizeof(bf16) : 0);
}

__device__ __forceinline__ float bf(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16(v)); }
__device__ __forceinline__ float load_cg(const bf16* p) {
    return __bfloat162float(__ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(p))));
}
__device__ __forceinline__ void consumers_sync() { hopper::named_barrier_sync(1, kConsumers); }
__device__ __forceinline__ void rows_of(const RowSplit& split, int n, int* begin, int* end) {
    split.rows(n, blockIdx.x, begin, end);  // n * blocks < 2^30 for every GPT-2 shape (RowSplit)
}
__device__ __forceinline__ int rows_per_page(int K) { return min(kMaxPageRows, kPageBytes / (K * 2)); }
// Slices of a row of V vectors, a power of two, so that one lane holds at most kRegV vectors of its slice.
__device__ __forceinline__ int slices_of(int V) {
    int w = 1;
    while (w < kWarps && V > w * kRegV * 32) w *= 2;
    return w;
}

// Deterministic block reductions over the consumers: every thread gets the same total, warps added in order.
// block_sum returns with red[0, kWarps) still being read (one barrier, not two): the caller gives a second
// reduction before the next barrier other floats (the LayerNorm's two passes: red, red + kWarps).
__device__ __forceinline__ float block_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    consumers_sync();
    float t = 0.f;
    for (int w = 0; w < kWarps; w++) t += red[w];
    return t;
}
__device__ __forceinline__ float block_max(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    consumers_sync();
    float t = red[0];
    for (int w = 1; w < kWarps; w++) t = fmaxf(t, red[w]);
    consumers_sync();
    return t;
}
__device__ __forceinline__ unsigned long long block_max_key(unsigned long long v, unsigned long long* red) {
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    consumers_sync();
    unsigned long long t = red[0];
    for (int w = 1; w < kWarps; w++) t = red[w] > t ? red[w] : t;
    consumers_sync();
    return t;
}
// The greedy rank of a stored logit: the sampling rule's (llmc/kernels/sampling/sampling_rule.h: its value's key,
// ties to the lower id), so the fused pick is generation's greedy pick.
__device__ __forceinline__ unsigned long long pick_rank(bf16 logit, int id) {
    return sampling_rule::rank(sampling_rule::key_of_bits16(__bfloat16_as_ushort(logit)), id);
}

__device__ __forceinline__ float embedding(const Step& s, int token, int c) {
    return round_bf16(bf(s.wte[(size_t)token * s.C + c]) + bf(s.wpe[(size_t)s.pos * s.C + c]));
}

// Values of Step::timeline: stamps by consumer thread 0 of each block (mark), or any value by the caller (mark_value).
__device__ __forceinline__ void mark_value(const Step& s, int phase, int k, unsigned long long v) {
    s.timeline[((size_t)blockIdx.x * s.count + phase) * kTimelineMarks + k] = v;
}
__device__ __forceinline__ void mark(const Step& s, int phase, int k) {
    if (s.timeline && threadIdx.x == 0) mark_value(s, phase, k, clock64());
}
__device__ __forceinline__ void mark_span(const Step& s, int at) {  // at 0: the kernel's start, 2: its end
    if (!s.timeline || threadIdx.x != 0) return;
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    unsigned long long* p = s.timeline + (size_t)gridDim.x * s.count * kTimelineMarks + (size_t)blockIdx.x * 4 + at;
    p[0] = clock64(), p[1] = ns;
}

__device__ __forceinline__ float dot8(uint4 w, const float4 (&x)[2]) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&w);
    const float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]), c = __bfloat1622float2(h[2]),
                 d = __bfloat1622float2(h[3]);
    return a.x * x[0].x + a.y * x[0].y + b.x * x[0].z + b.y * x[0].w + c.x * x[1].x + c.y * x[1].y + d.x * x[1].z +
           d.y * x[1].w;
}

}  // namespace decode_persistent
