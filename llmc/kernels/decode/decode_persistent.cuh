// A batch-1 decode step as one persistent kernel (docs/DECODE.md has the measurements that shaped it).
// One block per SM, 8 consumer warps and a producer warp. The step is a list of phases in order (per layer: QKV,
// attention, attention projection, fc, fc projection; then the classifier with the greedy pick). A product phase
// gives each block a contiguous share of the matrix's rows; the producer warp streams every product phase's share,
// page after page, into a ring of shared-memory pages (cp.async.bulk on mbarriers), never waiting for activations,
// so the weights keep streaming while the consumers wait at a phase boundary. Between phases a counter per phase
// (llmc/core/block_counters.cuh): a block waits until every block has finished the phase before, no grid barrier;
// block 0 zeroes them at the end, once every block is past its last wait, so a graph can replay the step.
// Consumers: each lane's columns are fixed for a whole matrix, so its part of the input x lives in registers and
// the pages serve weights alone (decode_probe's pagesR: shared memory's reads of x had bounded the products); a
// row's K is cut into 1-8 slices so a lane holds at most kRegV 16-byte vectors; slices are added in a fixed order, so
// the step is deterministic. LayerNorms are recomputed by every block that needs them (a C-wide row). Rounding follows
// decode_matvec: LayerNorm outputs, product + bias before a residual add, GELU outputs, logits, all to bf16.
// Attention is split over the grid in key chunks (decode_persistent_attention.cuh), merged by the next phase.
// With Step::tiles the products run on the tensor cores, a page a tile of rows x a chunk of K
// (decode_persistent_tiles.cuh). Hopper (sm_90a) only: the bulk copies.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "llmc/core/block_counters.cuh"
#include "llmc/hopper/pipeline.cuh"
#include "llmc/hopper/tma.cuh"
#include "llmc/kernels/decode/decode_persistent_attention.cuh"
#include "llmc/kernels/decode/decode_persistent_common.cuh"
#include "llmc/kernels/decode/decode_persistent_products.cuh"
#include "llmc/kernels/decode/decode_persistent_tiles.cuh"
#include "llmc/kernels/sampling/sampling.cuh"

namespace decode_persistent {

// What no phase should divide for, made once a launch by thread 0 and kept in shared memory (in registers for the
// whole kernel they pushed the tile kernel past its 168 and into spills): the blocks' rows, this block's attention
// unit. docs/DECODE.md: each division on the path between phases costs 0.15-0.3 us.
struct LaunchConsts {
    RowSplit split;
    UnitKeys first;
};
static_assert(sizeof(LaunchConsts) <= kLaunchConstsBytes, "the launch's constants fit their shared memory");

template <bool kTiles>
__global__ void __launch_bounds__(kThreads, 1) step_kernel(Step step, int x_floats) {
    Step s = step;
    s.seq = s.row ? *s.row : 0;
    s.token += s.seq, s.len += s.seq, s.cache_offset = (size_t)s.seq * s.NH * s.max_T * s.HS;
    s.pos = *s.len - 1;
    s.attn_splits = splits_at(s.pos, s.attn_splits);
    // the host's limits (persistent_step_supported), kept here too: past them chunks or keys would be dropped silently
    if (s.pos < 0 || s.attn_splits < 1 || s.attn_splits > kMaxSplits || s.pos + 1 > kChunkKeys * s.attn_splits ||
        x_floats % 4 != 0 || (s.seq != 0 && s.next_tokens) || s.HS != kHeadSize || gridDim.x > 1024)
        __trap();
    extern __shared__ __align__(128) uint8_t smem[];
    constexpr int kRingStages = stages(kTiles);
    auto* bars = reinterpret_cast<hopper::RingBarriers<kRingStages>*>(smem);
    uint8_t* pages = smem + 128;
    float* x = reinterpret_cast<float*>(pages + (size_t)kRingStages * page_bytes(kTiles));
    float* partials = x + x_floats;
    float* rows_bias = partials + 2 * kPartials;
    float* rows_res = rows_bias + kMaxBlockRows;
    float* red = rows_res + kMaxBlockRows;
    auto* red_key = reinterpret_cast<unsigned long long*>(red + kConsumers);
    auto* slots = reinterpret_cast<Phase*>(red_key + kWarps);  // this phase's description and the next one's
    auto* consts = reinterpret_cast<LaunchConsts*>(slots + 2);
    auto* xb = reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(consts) + kLaunchConstsBytes);  // tiles: x, bf16
    static_assert(sizeof(hopper::RingBarriers<kRingStages>) <= 128, "the barriers fit before the pages");
    if (threadIdx.x == 0) {
        bars->init(1, kTiles && kTileWarpRelease ? kWarps : kConsumers), hopper::fence_barrier_init();
        consts->split = RowSplit(gridDim.x), consts->first = unit_keys(s, blockIdx.x);
    }
    __syncthreads();
    const RowSplit& split = consts->split;
    const UnitKeys& first = consts->first;
    hopper::Ring<kRingStages> ring(*bars);
    const unsigned all = gridDim.x;
    if constexpr (kTiles) {
        if (threadIdx.x / 32 == kWarps) {  // the producer warp: every product phase's tiles, in order
            hopper::Ring<kRingStages> lag(*bars);
            int issued = 0;
            for (int i = 0; i < s.count; i++) {
                const Phase& ph = s.phases[i];
                if (ph.kind == Kind::Product) produce_tiles(ph, s, i, split, pages, ring, lag, issued);
            }
            return;
        }
    } else if (threadIdx.x / 32 == kWarps) {  // the producer: every product phase's pages, in order
        if (threadIdx.x % 32 == 0)
            for (int i = 0; i < s.count; i++) {
                const Phase& ph = s.phases[i];
                if (ph.kind != Kind::Product) continue;
                int begin, end;
                rows_of(split, ph.N, &begin, &end);
                const int per_page = rows_per_page(ph.K);
                for (int r0 = begin; r0 < end; r0 += per_page, ring.advance()) {
                    const uint32_t bytes = (uint32_t)(min(per_page, end - r0) * ph.K * sizeof(bf16));
                    uint64_t* bar = ring.acquire(bytes);
                    if (s.timeline) {
                        if (r0 == begin) mark_value(s, i, kMarkFirstIssued, clock64());
                        if (r0 + per_page >= end) mark_value(s, i, kMarkLastIssued, clock64());
                    }
                    hopper::bulk_load_1d(pages + (size_t)ring.stage() * kPageBytes, ph.W + (size_t)r0 * ph.K, bytes,
                                         bar);
                }
            }
        return;
    }
    const int token = *s.token;
    int sliced_pages = 0;
    unsigned held = 0;  // kHoldPages: the stages thread 0 has not released yet
    // The next phase's description is copied by thread 0 while this phase works (cp.async: nothing waits for it),
    // into the slot the phase before used, and published by the barrier that ends the phase. Two descriptions in
    // registers (this one and the next) had pushed the kernel past its register limit (168 with 9 warps).
    auto fetch = [&](int i) {
        const uint32_t dst = smem_addr(slots + (i & 1));
        for (int k = 0; k < (int)(sizeof(Phase) / 16); k++)
            cp_async_16(dst + 16 * k, reinterpret_cast<const uint8_t*>(s.phases + i) + 16 * k, true);
        cp_async_commit();
    };
    if (threadIdx.x == 0) fetch(0), cp_async_wait<0>();
    consumers_sync();
    mark_span(s, 0);
    for (int i = 0; i < s.count; i++) {
        mark(s, i, 0);
        const Phase& ph = slots[i & 1];
        if (threadIdx.x == 0 && i + 1 < s.count) fetch(i + 1);
        const bool attend = ph.kind == Kind::Attention && !(s.diagnose & kSkipAttention);
        ChunkKV kv = {};
        if (attend && (int)blockIdx.x < s.NH * s.attn_splits)
            load_kv(ph, s, first, 0, s.pos, kv);  // earlier steps' keys, in flight during the wait
        int begin = 0, end = 0;
        RowsIn rin;
        if (ph.kind == Kind::Product)
            rows_of(split, ph.N, &begin, &end), rin = load_rows(ph, s, token, begin, end);
        if (i > 0 && !(s.diagnose & kSkipWaits)) {
            if (threadIdx.x == 0) wait_count(&s.done[i - 1], all);
            consumers_sync();
        }
        if constexpr (kTiles && kHoldPages > 0 && kHoldUntil != 0) {  // the held pages, after the wait (1; 2: attention)
            if (threadIdx.x == 0 && (kHoldUntil == 1 || ph.kind == Kind::Attention)) release_held(ring, held);
        }
        mark(s, i, 1);
        if (ph.kind == Kind::Attention) {
            mark(s, i, 2);  // nothing staged: its keys were loaded before the wait; no pages
            if (s.timeline && threadIdx.x == 0)
                for (int k : {kMarkPagesWait, kMarkFirstIssued, kMarkLastIssued}) mark_value(s, i, k, 0);
            if (attend) attention(ph, s, first, kv, x);
        } else {
            stage_input(ph, s, token, begin, end, rin, x, rows_bias, rows_res, red, kTiles ? xb : nullptr);
            if constexpr (kTiles && kHoldPages > 0 && kHoldUntil == 2) {  // the held pages, after the staging
                if (threadIdx.x == 0) release_held(ring, held);
            }
            mark(s, i, 2);
            if constexpr (kTiles)
                product_tiles(ph, s, i, begin, end, pages, xb, partials, rows_bias, rows_res, red_key, ring,
                              sliced_pages, held);
            else
                product(ph, s, i, begin, end, pages, x, partials, rows_bias, rows_res, red_key, ring, sliced_pages);
        }
        mark(s, i, 3);
        if (threadIdx.x == 0) cp_async_wait<0>();
        consumers_sync();  // every thread's stores (and the next description), then the release
        // the timeline's stamp past the barrier stays in a register until after the release: a store before it
        // would be one more for the release's fence to wait for
        const unsigned long long synced = s.timeline && threadIdx.x == 0 ? clock64() : 0;
        if (threadIdx.x == 0) red_release_add(&s.done[i], 1u);
        if constexpr (kTiles && kHoldPages > 0 && kHoldUntil == 0) {
            if (threadIdx.x == 0) release_held(ring, held);
        }
        mark(s, i, 4);
        if (s.timeline && threadIdx.x == 0) mark_value(s, i, kMarkSynced, synced);
    }
    if constexpr (kTiles && kHoldPages > 0 && kHoldUntil != 0) {  // the last phase's (nothing waits for them)
        if (threadIdx.x == 0) release_held(ring, held);
    }
    mark_span(s, 2);
    if (blockIdx.x == 0) {  // the greedy pick over every block's key, once all have written theirs
        if (threadIdx.x == 0) wait_count(&s.done[s.count - 1], all);
        consumers_sync();
        unsigned long long best = sampling_rule::rank_floor();
        for (int b = threadIdx.x; b < (int)gridDim.x; b += kConsumers) {
            const unsigned long long k = __ldcg(s.pick_partials + b);
            best = k > best ? k : best;
        }
        best = block_max_key(best, red_key);
        if (threadIdx.x == 0) {
            const int picked = sampling_rule::rank_id(best);
            if (s.token_out) *s.token_out = picked;
            if (s.next_tokens)
                store_pick(0, picked, s.pos + 1, s.prompt_len, s.len, s.next_tokens, s.tokens_out, s.max_new, 1);
        }
        for (int i = threadIdx.x; i < s.count; i += kConsumers) s.done[i] = 0;  // every block is past its last wait
    }
}

// Before launches with x_floats: the kernels' shared-memory limits, raised to the largest asked so far (a process
// may hold steps of several shapes, and a lower limit would fail the larger ones' launches).
inline void prepare(int x_floats) {
    static size_t largest[2] = {0, 0};
    for (int tiles = 0; tiles < 2; tiles++) {
        const size_t bytes = smem_bytes(x_floats, tiles);
        if (bytes <= largest[tiles]) continue;
        largest[tiles] = bytes;
        cudaCheck(cudaFuncSetAttribute(tiles ? step_kernel<true> : step_kernel<false>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    }
}
// One step: a block per SM, all resident (a cooperative launch, which a CUDA Graph can capture).
inline void launch(const Step& s, int x_floats, int blocks, cudaStream_t stream) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(blocks), config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = smem_bytes(x_floats, s.tiles);
    config.stream = stream;
    cudaLaunchAttribute cooperative[1];
    cooperative[0].id = cudaLaunchAttributeCooperative, cooperative[0].val.cooperative = 1;
    config.attrs = cooperative, config.numAttrs = 1;
    cudaCheck(cudaLaunchKernelEx(&config, s.tiles ? step_kernel<true> : step_kernel<false>, s, x_floats));
}

}  // namespace decode_persistent
