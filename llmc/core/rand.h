// A small deterministic random number generator: xoshiro256** (Blackman & Vigna) seeded with
// splitmix64. Integer and uniform outputs are defined only by 64-bit integer arithmetic, so they are
// bit-identical on every platform and compiler. Used for weight init, data shuffling and sampling.
// Distributions are written here rather than taken from <random>: std::uniform_int_distribution,
// std::normal_distribution and std::shuffle differ between standard libraries.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

// splitmix64 step: advances *x and returns a well-mixed 64-bit value.
inline uint64_t splitmix64(uint64_t* x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Derives an independent seed from a base seed and a stream id (e.g. epoch, shard, rank).
inline uint64_t mix_seed(uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
    splitmix64(&x);
    return splitmix64(&x);
}

// The whole generator state; POD so checkpoints can store it and resume bit-exactly.
struct RngState {
    uint64_t s[4];
};

class Rng {
public:
    explicit Rng(uint64_t seed = 0) { reseed(seed); }

    void reseed(uint64_t seed) {
        uint64_t x = seed;
        for (uint64_t& w : st_.s) w = splitmix64(&x);  // never all zero: splitmix64 is a bijection of a counter
    }
    RngState get_state() const { return st_; }
    void set_state(const RngState& s) { st_ = s; }

    uint64_t next_u64() {
        uint64_t* s = st_.s;
        const uint64_t result = rotl(s[1] * 5, 7) * 9;
        const uint64_t t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rotl(s[3], 45);
        return result;
    }
    uint32_t next_u32() { return (uint32_t)(next_u64() >> 32); }

    // Uniform in [0, 1) from the top 24 bits (every value exactly representable as a float).
    float uniform() { return (float)(next_u64() >> 40) * (1.0f / 16777216.0f); }
    // Uniform in [0, 1) with 53 random bits.
    double uniform_double() { return (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

    // Unbiased integer in [0, n) by rejection; n must be >= 1.
    uint64_t below(uint64_t n) {
        const uint64_t threshold = (0 - n) % n;  // 2^64 mod n: values under it would favour small results
        for (;;) {
            uint64_t r = next_u64();
            if (r >= threshold) return r % n;
        }
    }

    // Standard normal by Box-Muller, computed in double and rounded to float. log/sqrt/cos in
    // double are accurate to ~1 ulp on every libm we know, so the rounded floats agree across
    // platforms except in vanishingly rare ties; the integer stream itself is exact.
    float normal() { return (float)box_muller().first; }
    double normal_double() { return box_muller().first; }

    // n values ~ N(mean, std), using both outputs of each Box-Muller pair.
    void fill_normal(float* out, size_t n, float mean, float std) {
        size_t i = 0;
        for (; i + 1 < n; i += 2) {
            std::pair<double, double> z = box_muller();
            out[i] = (float)(mean + std * z.first);
            out[i + 1] = (float)(mean + std * z.second);
        }
        if (i < n) out[i] = (float)(mean + std * box_muller().first);
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    std::pair<double, double> box_muller() {
        const double u1 = 1.0 - uniform_double();  // (0, 1]: log never sees 0
        const double u2 = uniform_double();
        const double r = std::sqrt(-2.0 * std::log(u1));
        const double theta = 6.283185307179586 * u2;
        return {r * std::cos(theta), r * std::sin(theta)};
    }
    RngState st_;
};

// Fisher-Yates shuffle in place (the modern form: swap element i with a uniform j in [0, i]).
template <typename T>
inline void shuffle_in_place(Rng& rng, T* data, size_t n) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rng.below(i);
        std::swap(data[i - 1], data[j]);
    }
}

// A uniformly random permutation of 0..n-1.
inline std::vector<int64_t> random_permutation(Rng& rng, size_t n) {
    std::vector<int64_t> p(n);
    for (size_t i = 0; i < n; i++) p[i] = (int64_t)i;
    shuffle_in_place(rng, p.data(), n);
    return p;
}
