// What a decode step reads from device memory, so that its speed can be said as bandwidth: every weight once per step
// whatever the batch (the layers', lnf's and wte's, which is also the lm_head; of wpe only a row per sequence, left
// out), and for each sequence the K and V of every layer over the positions it attends to (its own included). Batch-1
// decoding does almost no arithmetic, so these bytes over the step's time, against the device's peak, say how far it
// is from the memory's speed (the peak: device_peak_memory_bandwidth, llmc/core/cuda_common.h).
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/gpt2/gpt2_config.h"

struct DecodeTraffic {
    double weight_bytes = 0;           // per decode step
    double kv_bytes_per_position = 0;  // per attended position of one sequence (K and V, every layer)
};

inline DecodeTraffic decode_traffic(const GPT2Config& c, size_t bytes_per_value) {
    DecodeTraffic t;
    const double wpe = (double)c.max_seq_len * c.channels;
    t.weight_bytes = ((double)gpt2_num_parameters(c) - wpe) * (double)bytes_per_value;
    t.kv_bytes_per_position = 2.0 * c.num_layers * c.channels * (double)bytes_per_value;
    return t;
}

// Positions attended over `steps` decode steps of a static batch of these prompts: step s (1..steps) of a sequence
// with a prompt of P tokens reads P + s positions (a sequence past its stop token keeps its row in the batch).
inline double decode_positions(const std::vector<std::vector<int>>& prompts, int steps) {
    double sum = 0;
    for (const std::vector<int>& p : prompts) sum += (double)steps * (double)p.size() + 0.5 * steps * (steps + 1.0);
    return sum;
}

// "2.41 TB/s of weights and KV cache (50% of the device's 4.80 TB/s)" for `bytes` read in `ms` (peak 0: no share).
inline std::string bandwidth_text(double bytes, double ms, double peak_bytes_per_s) {
    if (!(ms > 0)) return "bandwidth unknown (no decode steps)";
    const double rate = bytes / (ms * 1e-3);
    char buf[160];
    if (peak_bytes_per_s > 0)
        snprintf(buf, sizeof(buf), "%.2f TB/s of weights and KV cache (%.0f%% of the device's %.2f TB/s)", rate / 1e12,
                 100.0 * rate / peak_bytes_per_s, peak_bytes_per_s / 1e12);
    else
        snprintf(buf, sizeof(buf), "%.2f TB/s of weights and KV cache", rate / 1e12);
    return buf;
}
