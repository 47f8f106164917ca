// What a decode step reads (llmc/inference/decode_traffic.h), checked by hand: d12's weights without wpe in bf16 are
// 123,689,472 values (124,475,904 parameters less 1024 x 768), K and V of 12 layers of 768 per position, the
// positions a static batch attends over its steps, and the bandwidth line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "llmc/inference/decode_traffic.h"

namespace {

GPT2Config d12() { return GPT2Config{1024, 50257, 50304, 12, 12, 768}; }

TEST(DecodeTraffic, D12Bytes) {
    const DecodeTraffic bf16 = decode_traffic(d12(), 2), fp32 = decode_traffic(d12(), 4);
    EXPECT_DOUBLE_EQ(bf16.weight_bytes, 123689472.0 * 2);
    EXPECT_DOUBLE_EQ(fp32.weight_bytes, 123689472.0 * 4);
    EXPECT_DOUBLE_EQ(bf16.kv_bytes_per_position, 2.0 * 12 * 768 * 2);
}

TEST(DecodeTraffic, PositionsOfAStaticBatch) {
    // prompts of 3 and 1 tokens, 2 steps: (3+1) + (3+2) + (1+1) + (1+2)
    EXPECT_DOUBLE_EQ(decode_positions({{5, 6, 7}, {8}}, 2), 4 + 5 + 2 + 3);
    EXPECT_DOUBLE_EQ(decode_positions({{5, 6, 7}}, 0), 0);
}

TEST(DecodeTraffic, BandwidthText) {
    EXPECT_EQ(bandwidth_text(1e12, 1000, 4e12), "1.00 TB/s of weights and KV cache (25% of the device's 4.00 TB/s)");
    EXPECT_EQ(bandwidth_text(2.5e11, 100, 0), "2.50 TB/s of weights and KV cache");
    EXPECT_EQ(bandwidth_text(1e9, 0, 4e12), "bandwidth unknown (no decode steps)");
}

}  // namespace
