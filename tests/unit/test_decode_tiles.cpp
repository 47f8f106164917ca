// The tensor-core decode products' page geometry (llmc/kernels/decode/decode_tile_geometry.h) for every K the
// persistent step takes (C and 4C, C a multiple of 16 up to 2048): the chunks cover the row in order, each a
// multiple of 16 columns (the mma's k-step) and at most kTileMaxK; every copy's size a multiple of 16 bytes; the
// row stride 16 bytes past a multiple of 128 (ldmatrix's eight rows in eight bank groups) and wide enough for the
// widest chunk; 16 rows of it within a page. The GPU side (test_decode's check 6, decode_step -m 1) checks the
// products themselves. And the attention's chunks (decode_attention_chunks.h) at every position of every GPT-2 shape.
#include <gtest/gtest.h>

#include "llmc/kernels/decode/decode_attention_chunks.h"
#include "llmc/kernels/decode/decode_tile_geometry.h"

namespace dp = decode_persistent;

TEST(DecodeTiles, ChunksCoverEveryRowInSixteens) {
    for (int C = 16; C <= 2048; C += 16)
        for (int K : {C, 4 * C}) {
            const int chunks = dp::tile_chunks(K), stride = dp::tile_stride(K, chunks);
            ASSERT_GE(chunks, 1) << "K " << K;
            EXPECT_EQ(dp::chunk_begin(K, 0, chunks), 0) << "K " << K;
            EXPECT_EQ(dp::chunk_begin(K, chunks, chunks), K) << "K " << K;
            for (int c = 0; c < chunks; c++) {
                const int k0 = dp::chunk_begin(K, c, chunks), width = dp::chunk_begin(K, c + 1, chunks) - k0;
                EXPECT_EQ(k0 % 16, 0) << "K " << K << " chunk " << c;
                EXPECT_GT(width, 0) << "K " << K << " chunk " << c;
                EXPECT_EQ(width % 16, 0) << "K " << K << " chunk " << c;
                EXPECT_LE(width, dp::kTileMaxK) << "K " << K << " chunk " << c;
                EXPECT_LE(2 * width, stride) << "K " << K << " chunk " << c;
            }
            EXPECT_EQ(stride % 128, 16) << "K " << K;
            EXPECT_LE(dp::kTileRows * stride, dp::kTilePageBytes) << "K " << K;
        }
}

// The kernels' walk over a row's chunks (no division a chunk) gives chunk_begin's chunks, for every K a multiple of
// 16 up to 8192 and every chunk count a row could be cut in.
TEST(DecodeTiles, ChunkWalkIsChunkBegin) {
    for (int K = 16; K <= 8192; K += 16)
        for (int chunks = 1; chunks <= 8 && chunks <= K / 16; chunks++) {
            dp::ChunkWalk walk(K, chunks);
            for (int round = 0; round < 2; round++, walk.restart())  // a row group's walk, then the next's
                for (int c = 0; c < chunks; c++, walk.next()) {
                    const int k0 = dp::chunk_begin(K, c, chunks);
                    ASSERT_EQ(walk.k0, k0) << "K " << K << " chunks " << chunks << " chunk " << c;
                    ASSERT_EQ(16 * walk.steps, dp::chunk_begin(K, c + 1, chunks) - k0)
                        << "K " << K << " chunks " << chunks << " chunk " << c;
                }
        }
}

// What the host puts in a product's phase (Phase::tiles) is what the kernel would compute: the chunks, the stride,
// and a walk from its q and r that gives chunk_begin's chunks.
TEST(DecodeTiles, TileCutIsTheGeometry) {
    for (int K = 16; K <= 8192; K += 16) {
        const dp::TileCut t = dp::tile_cut(K);
        ASSERT_EQ(t.chunks, dp::tile_chunks(K)) << "K " << K;
        EXPECT_EQ(t.stride, dp::tile_stride(K, t.chunks)) << "K " << K;
        dp::ChunkWalk walk(t.q, t.r, t.chunks);
        for (int c = 0; c < t.chunks; c++, walk.next()) {
            ASSERT_EQ(walk.k0, dp::chunk_begin(K, c, t.chunks)) << "K " << K << " chunk " << c;
            ASSERT_EQ(16 * walk.steps, dp::chunk_begin(K, c + 1, t.chunks) - walk.k0) << "K " << K << " chunk " << c;
        }
    }
}

// A block's rows by the reciprocal (RowSplit) are the integer division's, at every grid up to 1024 blocks and rows up
// to 2^16 (every GPT-2 product: the padded vocabulary is the most), every block.
TEST(DecodeTiles, RowSplitIsTheDivision) {
    for (int blocks = 1; blocks <= 1024; blocks++) {
        const dp::RowSplit split(blocks);
        for (int n : {1, 7, 64, 768, 2304, 3072, 4800, 6400, 50257, 50304, 65535, 65536}) {
            for (int block = 0; block < blocks; block++) {
                int begin, end;
                split.rows(n, block, &begin, &end);
                ASSERT_EQ(begin, (int)((long long)n * block / blocks)) << "n " << n << " of " << blocks << " blocks";
                ASSERT_EQ(end, (int)((long long)n * (block + 1) / blocks)) << "n " << n << " of " << blocks << " blocks";
            }
        }
    }
}

// The shapes of GPT-2 d12 to d48: chunks and strides as docs/DECODE.md describes them.
TEST(DecodeTiles, GPT2Shapes) {
    struct Want { int K, chunks, stride; };
    for (const Want& w : {Want{768, 1, 1552}, Want{3072, 3, 2064}, Want{1024, 1, 2064}, Want{4096, 4, 2064},
                          Want{1280, 1, 2576}, Want{5120, 4, 2576}, Want{1600, 2, 1680}, Want{6400, 5, 2576}}) {
        const int chunks = dp::tile_chunks(w.K);
        EXPECT_EQ(chunks, w.chunks) << "K " << w.K;
        EXPECT_EQ(dp::tile_stride(w.K, chunks), w.stride) << "K " << w.K;
    }
}

// splits_at at every position of GPT-2's shapes: between 1 and the model's most; every chunk within its registers
// (the longest of unit_keys' cuts is ceil(keys / splits)); about kUnitKeys keys a chunk until the most is reached,
// the most from there on (today's cut for long contexts).
TEST(DecodeTiles, AttentionChunksByPosition) {
    const int max_T = 1024;
    for (int NH : {12, 16, 20, 25}) {
        const int most = dp::attention_splits(NH, max_T);
        ASSERT_GE(most, 1) << "NH " << NH;
        for (int pos = 0; pos < max_T; pos++) {
            const int s = dp::splits_at(pos, most), keys = pos + 1;
            ASSERT_GE(s, 1) << "NH " << NH << " pos " << pos;
            ASSERT_LE(s, most) << "NH " << NH << " pos " << pos;
            ASSERT_LE((keys + s - 1) / s, dp::kChunkKeys) << "NH " << NH << " pos " << pos;
            const int wanted = (keys + dp::kUnitKeys - 1) / dp::kUnitKeys;
            EXPECT_EQ(s, wanted < most ? wanted : most) << "NH " << NH << " pos " << pos;
        }
    }
    EXPECT_EQ(dp::splits_at(255, dp::attention_splits(25, max_T)), 2);  // d48 at position 255
    EXPECT_EQ(dp::splits_at(1023, dp::attention_splits(25, max_T)), 5);
    EXPECT_EQ(dp::splits_at(1023, dp::attention_splits(12, max_T)), 8);
    EXPECT_EQ(dp::splits_at(2047, 8), 8);
    EXPECT_EQ(dp::splits_at(2048, 8), 9);  // past the kernel's reach: it traps on more than kMaxSplits
}
