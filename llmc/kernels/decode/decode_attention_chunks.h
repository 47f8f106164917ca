// How the persistent decode step cuts a head's keys 0 .. pos into chunks, a (head, chunk) unit a block
// (llmc/kernels/decode/decode_persistent_attention.cuh), written once for the kernel and for host checks
// (tests/unit/test_decode_tiles.cpp). Every choice here comes from the model and the position alone, so a step's
// results do not depend on the GPU.
#pragma once

#include "llmc/kernels/decode/decode_tile_geometry.h"  // DECODE_TILE_HD

namespace decode_persistent {

// Heads of 64; a chunk of keys is up to kRounds rounds of 32 (in registers); at most kMaxSplits chunks a head, about
// kAttentionUnits (head, chunk) units a step at the whole context, whatever the grid; about kUnitKeys keys a chunk
// while the context is shorter than that asks for (docs/DECODE.md, "Attention's chunks by the position": fewer
// chunks to merge in the next phase's staging, which waits for them)
constexpr int kHeadSize = 64, kRounds = 8, kChunkKeys = kRounds * 32, kMaxSplits = 8, kAttentionUnits = 128;
constexpr int kUnitKeys = 128;
static_assert(kUnitKeys <= kChunkKeys && (kUnitKeys & (kUnitKeys - 1)) == 0, "a unit's keys fit, no division");

// A head's most chunks, at the model's whole context max_T: about kAttentionUnits units over the heads, and enough
// that a chunk at the whole context fits its registers; 0 past kMaxSplits chunks.
inline int attention_splits(int NH, int max_T) {
    const int by_units = NH >= kAttentionUnits ? 1 : kAttentionUnits / NH;
    const int by_keys = (max_T + kChunkKeys - 1) / kChunkKeys;
    if (by_keys > kMaxSplits) return 0;
    return by_units > kMaxSplits ? kMaxSplits : by_units > by_keys ? by_units : by_keys;
}

// A head's chunks at position pos (pos + 1 keys): about kUnitKeys keys a chunk, but at most `most` (attention_splits)
// and at least enough that every chunk fits its registers (ceil((pos + 1) / kChunkKeys); most is that at the whole
// context). Powers of two: shifts, no division, on the kernel's way in.
DECODE_TILE_HD int splits_at(int pos, int most) {
    const int fit = (pos + kChunkKeys) / kChunkKeys, wanted = (pos + kUnitKeys) / kUnitKeys;
    const int s = wanted < most ? wanted : most;
    return s > fit ? s : fit;
}

}  // namespace decode_persistent
