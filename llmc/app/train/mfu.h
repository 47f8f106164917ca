// Model FLOPs utilisation: achieved model FLOP/s over the device's peak.
//
// Peak = SM count x peak clock x dense FLOPs per SM per clock of the architecture (compute capability),
// so any GPU of a known architecture works without a table of product names. The clock is the
// device's peak clock (cudaDevAttrClockRate; cudaDeviceProp::clockRate is gone in CUDA 13). Vendors
// quote some parts at a lower clock (H100 SXM: 989 TFLOP/s bf16 at 1.83 GHz, while it reports 1.98
// GHz, giving 1070 here), so this MFU is if anything an underestimate.
// Dense per-SM rates (FLOPs = 2 x FMAs), from NVIDIA's architecture whitepapers:
//   tensor bf16/fp16 with fp32 accumulate: sm_80 2048, sm_86/87/89 1024, sm_90 4096, sm_100 8192,
//   sm_120 1024; TF32 is half the bf16 rate; plain fp32 (CUDA cores) = 2 x fp32 lanes per SM
//   (64 on sm_70/80, 128 from sm_86 on). Volta/Turing (sm_7x) have fp16, not bf16, tensor cores: 1024.
// An architecture newer than the table uses the newest entry of the same major version (or the newest
// overall) and says so (`assumed`).
//
// Model FLOPs per token (forward + backward = 3 x forward, forward = 2 FLOPs per weight use):
//   6 N  (N = all parameters; the tied wte is used by the classifier matmul; wpe is counted too, as llm.c does)
//   + 6 L T C for attention (QK^T and PV are 2 x 2 T C FLOPs per token per layer forward, halved by the
//     causal mask, times 3 for backward): PaLM's appendix B formula with the causal half, as llm.c counts.
//   nanoGPT (and PaLM) count the attention without the causal half, 12 L T C: the step line prints both.
// Recomputation (-r) is not counted: MFU counts the model's FLOPs, not the hardware's.
#pragma once

#include <cstddef>

#include "llmc/gpt2/gpt2_config.h"

enum class MathMode { BF16, TF32, FP32 };

struct PeakRate {
    double flops_per_sm_per_clock = 0;  // dense
    bool assumed = false;               // architecture not in the table: nearest older entry used
};

inline PeakRate peak_rate_per_sm(int cc_major, int cc_minor, MathMode mode) {
    struct Entry { int major, minor; double tensor16, fp32_lanes; };
    static const Entry table[] = {
        {7, 0, 1024, 64},  {7, 5, 1024, 64},  {8, 0, 2048, 64},   {8, 6, 1024, 128}, {8, 7, 1024, 128},
        {8, 9, 1024, 128}, {9, 0, 4096, 128}, {10, 0, 8192, 128}, {12, 0, 1024, 128},
    };
    const int n = (int)(sizeof(table) / sizeof(table[0]));
    const int cc = cc_major * 10 + cc_minor;
    int pick = -1;
    bool exact = false;
    for (int i = 0; i < n; i++) {  // newest entry not newer than the device, preferring the same major
        const int e = table[i].major * 10 + table[i].minor;
        if (e == cc) { pick = i; exact = true; break; }
        if (e < cc && table[i].major == cc_major) pick = i;
    }
    if (pick < 0) {
        for (int i = 0; i < n; i++) {
            if (table[i].major * 10 + table[i].minor <= cc) pick = i;
        }
    }
    PeakRate r;
    if (pick < 0) return r;  // older than Volta: unknown, MFU not reported
    r.assumed = !exact;
    switch (mode) {
        case MathMode::BF16: r.flops_per_sm_per_clock = table[pick].tensor16; break;
        case MathMode::TF32: r.flops_per_sm_per_clock = table[pick].tensor16 / 2; break;
        case MathMode::FP32: r.flops_per_sm_per_clock = 2 * table[pick].fp32_lanes; break;
    }
    return r;
}

// Peak FLOP/s; 0 when unknown. clock_khz as cudaDevAttrClockRate reports it.
inline double peak_flops(int cc_major, int cc_minor, int sm_count, double clock_khz, MathMode mode) {
    return peak_rate_per_sm(cc_major, cc_minor, mode).flops_per_sm_per_clock * sm_count * clock_khz * 1e3;
}

enum class AttentionFlops { Causal, Full };  // 6 L T C (llm.c) or 12 L T C (nanoGPT, PaLM)

inline double gpt2_flops_per_token(const GPT2Config& c, int T, AttentionFlops attention = AttentionFlops::Causal) {
    const double N = (double)gpt2_num_parameters(c);
    const double per_layer = attention == AttentionFlops::Causal ? 6.0 : 12.0;
    return 6.0 * N + per_layer * c.num_layers * (double)T * c.channels;
}

// Fraction of peak (0..1) for `tokens` processed by one device in `seconds`; 0 if the peak is unknown.
inline double model_flops_utilization(double flops_per_token, double tokens, double seconds, double peak) {
    if (peak <= 0 || seconds <= 0) return 0.0;
    return flops_per_token * tokens / seconds / peak;
}
