// GPT-2's random initialisation, on the host: what -e d12 (a preset, llmc/gpt2/gpt2_config.h) starts from, the same
// values for a seed in the GPU trainer (llmc/model/gpt2.cuh) and the CPU trainer (llmc/cpu/gpt2.h).
// Weights N(0, 0.02), the residual projections (attprojw, fcprojw) N(0, 0.02/sqrt(2L)), LayerNorm weights 1,
// biases 0; wte's padding rows zero. Deterministic for a seed on every platform (llmc/core/rand.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/gpt2/gpt2_config.h"

// The parameters in gpt2_parameter_table order, gpt2_num_parameters(c) floats.
inline std::vector<float> gpt2_random_init(const GPT2Config& c, uint64_t seed) {
    std::vector<float> params(gpt2_num_parameters(c), 0.0f);
    const auto table = gpt2_parameter_table(c);
    const auto offsets = gpt2_parameter_offsets(c);
    Rng rng(seed);
    const float residual_std = 0.02f / sqrtf(2.0f * c.num_layers);
    for (int t = 0; t < kNumParameterTensors; t++) {
        const ParamTensor i = (ParamTensor)t;
        float* p = params.data() + offsets[i];
        const size_t n = table[i].numel;
        if (i == LN1W || i == LN2W || i == LNFW) {
            for (size_t k = 0; k < n; k++) p[k] = 1.0f;
        } else if (i == WTE) {
            rng.fill_normal(p, (size_t)c.vocab_size * c.channels, 0.0f, 0.02f);  // padding rows stay 0
        } else if (i == WPE || i == QKVW || i == FCW) {
            rng.fill_normal(p, n, 0.0f, 0.02f);
        } else if (i == ATTPROJW || i == FCPROJW) {
            rng.fill_normal(p, n, 0.0f, residual_std);
        }  // biases stay 0
    }
    return params;
}
