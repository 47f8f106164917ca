// The sampling rule, written once. The host sampler (llmc/inference/sampler.h), the GPU picker
// (llmc/kernels/sampling/sampling.cuh) and the classifier's folded greedy pick (llmc/kernels/decode/decode_matvec.cuh) are built
// from these pieces, so the three pick the same token by construction, not by keeping three copies in step.
//
// The rule: greedy at temperature 0 or top-k 1. Else every real token (ids below V) weighs
// exp((logit - max) / temperature); the top_k highest logits are kept, then the nucleus: the highest of those until
// their weight reaches top_p of the kept weight; one coin in [0, 1) walks the CDF of what is kept in id order.
// "Higher" is the order of `rank`: the logit's key (its value as an ordered bit pattern), ties to the lower id.
//
// Host-only programs (CPU tests, tools) include this with g++ alone: SAMPLING_RULE_HD adds __host__ __device__
// only under nvcc.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SAMPLING_RULE_HD __host__ __device__
#else
#define SAMPLING_RULE_HD
#endif

struct PickParams {
    float temperature = 1.0f;  // 0: greedy
    int top_k = 0;             // 0 or >= V: no top-k
    float top_p = 1.0f;        // (0, 1]; 1: no nucleus
    SAMPLING_RULE_HD bool greedy() const { return temperature <= 0.f || top_k == 1; }
    SAMPLING_RULE_HD bool cuts_top_k(int V) const { return top_k > 0 && top_k < V; }
    SAMPLING_RULE_HD bool cuts_top_p() const { return top_p < 1.f; }
};

// What is wrong with the parameters (nullptr: nothing): both sides refuse the same values.
inline const char* pick_params_problem(const PickParams& p) {
    if (!(p.temperature >= 0.0f)) return "temperature must be >= 0";
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return "top_p must be in (0, 1]";
    return nullptr;
}

namespace sampling_rule {

// A logit's bit pattern as an unsigned key in the same order as the values (negative values reversed), and back:
// bf16 (16 bits) and fp32 (32). Widening bf16 to fp32 keeps the order, so bf16 keys on the GPU and the widened
// floats' keys on the host rank alike.
SAMPLING_RULE_HD inline uint32_t key_of_bits16(uint32_t u) { return (u & 0x8000u) ? (~u & 0xffffu) : (u | 0x8000u); }
SAMPLING_RULE_HD inline uint32_t bits16_of_key(uint32_t k) { return (k & 0x8000u) ? (k & 0x7fffu) : (~k & 0xffffu); }
SAMPLING_RULE_HD inline uint32_t key_of_bits32(uint32_t u) { return (u & 0x80000000u) ? ~u : (u | 0x80000000u); }
SAMPLING_RULE_HD inline uint32_t bits32_of_key(uint32_t k) { return (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k; }
SAMPLING_RULE_HD inline uint32_t key_of(float x) {
#if defined(__CUDA_ARCH__)
    return key_of_bits32(__float_as_uint(x));
#else
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return key_of_bits32(u);
#endif
}

// (key, id) packed so that the higher key wins and, among equal keys, the lower id: "higher" is one 64-bit max.
SAMPLING_RULE_HD inline unsigned long long rank(uint32_t key, int id) {
    return ((unsigned long long)key << 32) | (0xffffffffu - (uint32_t)id);
}
SAMPLING_RULE_HD inline int rank_id(unsigned long long r) { return (int)(0xffffffffu - (uint32_t)r); }
// Below every real candidate's rank: where a search for the highest starts.
SAMPLING_RULE_HD inline unsigned long long rank_floor() { return rank(0u, 0x7fffffff); }

// A candidate's weight before normalisation: fp32 on the GPU, double on the host.
SAMPLING_RULE_HD inline float weight(float logit, float max_logit, float inv_temperature) {
    return expf((logit - max_logit) * inv_temperature);
}
SAMPLING_RULE_HD inline double weight(double logit, double max_logit, double inv_temperature) {
    return exp((logit - max_logit) * inv_temperature);
}

// The nucleus is complete once the weight kept so far reaches this; the coin's point on the CDF.
template <typename R>
SAMPLING_RULE_HD inline R nucleus_target(float top_p, R kept_total) { return (R)top_p * kept_total; }
template <typename R>
SAMPLING_RULE_HD inline R cdf_target(float coin, R kept_total) { return (R)coin * kept_total; }

// The coin's walk over the kept candidates in id order: step() each (id, weight) from where the CDF stands (`cdf`,
// the weight of the candidates before them) until one takes the CDF past the target. A target at the very top by
// rounding gets the last candidate with weight.
template <typename R>
struct CdfWalk {
    R target, cdf;
    int pick = -1, last = -1;
    SAMPLING_RULE_HD CdfWalk(R target_, R cdf_before) : target(target_), cdf(cdf_before) {}
    SAMPLING_RULE_HD bool done() const { return pick >= 0; }
    SAMPLING_RULE_HD void step(int id, R w) {
        if (pick >= 0) return;
        cdf += w;
        if (w > R(0)) last = id;
        if (target < cdf) pick = id;
    }
    SAMPLING_RULE_HD int result() const { return pick >= 0 ? pick : last; }
};

}  // namespace sampling_rule
