// What the Hopper attention kernels (attention_hopper_forward.cuh, attention_hopper_backward*.cuh) share: the
// machinery they are written in, the causal-mask sentinel, and the tensor maps over qkv, out and dout.
#pragma once

#include <cuda_bf16.h>

#include "llmc/hopper/accumulator.cuh"
#include "llmc/hopper/arch.cuh"
#include "llmc/hopper/pipeline.cuh"
#include "llmc/hopper/smem.cuh"
#include "llmc/hopper/tma.cuh"
#include "llmc/hopper/warp_specialized.cuh"
#include "llmc/hopper/wgmma.cuh"

namespace flash_hopper {

using bf16 = __nv_bfloat16;

// The causal masks test (column − row + delta > 0) per element, delta being the tile's first key minus its first
// query; tiles that do not reach the diagonal pass kNoMask, which no column − row difference overcomes, instead of
// taking an unmasked copy of the loop (see p_and_ds in attention_hopper_backward_parts.cuh for why).
constexpr int kNoMask = -(1 << 20);

// The backward's LSE and D rows (attention_hopper_backward.cuh, BackwardWorkspace): T padded to a whole number of the
// kernels' 128-row blocks, so that every query a block or streamed tile reaches has a place in its (b, h)'s row.
__host__ __device__ constexpr int padded_T(int T) { return (T + 127) / 128 * 128; }

// A bf16 tensor of B x T rows of `width` elements (qkv: 3C, out and dout: C) read or written in boxes of box_rows x
// 64 columns, the 64-column slice of one head's Q, K, V or output that a tile's box holds (128-byte swizzle). The 3D
// map keeps each batch's rows apart, so rows past T are zeros on reads and dropped on writes.
inline CUtensorMap head_slice_map(const void* base, int B, int T, int width, int box_rows) {
    return hopper::make_tensor_map_3d(base, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, B, T, width, width,
                                      (uint64_t)T * width, box_rows, 64, CU_TENSOR_MAP_SWIZZLE_128B);
}
// The same map for a tensor the kernel writes (out, dqkv), marked initialized for initcheck (tma.cuh).
inline CUtensorMap head_slice_store_map(void* base, int B, int T, int width, int box_rows, cudaStream_t stream) {
    return hopper::make_store_map_3d(base, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, B, T, width, width,
                                     (uint64_t)T * width, box_rows, 64, CU_TENSOR_MAP_SWIZZLE_128B, stream);
}

// The producer's stream of K and V tiles j = 0 .. n_tiles − 1 (rows j·rows.. of every batch b's keys) through the
// ring, both from the qkv map (head h's columns C.. and 2C..): the forward's and the dQ kernel's.
template <typename KVStage, int kStages, typename RingT>
__device__ __forceinline__ void produce_k_v_tiles(KVStage (&kv)[kStages], RingT& ring, const CUtensorMap* map_qkv,
                                                  int C, int h, int b, int n_tiles) {
    using TileT = decltype(kv[0].k);
    constexpr int kRows = TileT::kRows, kHS = TileT::kCols;
    for (int j = 0; j < n_tiles; j++, ring.advance()) {
        uint64_t* full = ring.acquire(sizeof(kv[0]));
        auto& stage = kv[ring.stage()];
        for (int sub = 0; sub < TileT::kBoxes; sub++) {
            hopper::tma_load_3d(stage.k.box(sub), map_qkv, full, C + h * kHS + 64 * sub, j * kRows, b);
            hopper::tma_load_3d(stage.v.box(sub), map_qkv, full, 2 * C + h * kHS + 64 * sub, j * kRows, b);
        }
    }
}

}  // namespace flash_hopper
