// SHA-256 (FIPS 180-4), for fingerprints of token streams and files in tests and tools.
//   Sha256 h; h.update(data, n); ...; std::string hex = h.hex_digest();
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

class Sha256 {
public:
    Sha256() {
        static const uint32_t init[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
        memcpy(state_, init, sizeof(state_));
    }
    void update(const void* data, size_t n) {
        const unsigned char* p = (const unsigned char*)data;
        total_bytes_ += n;
        if (buffered_ > 0) {
            size_t take = std::min<size_t>(64 - buffered_, n);
            memcpy(buffer_ + buffered_, p, take);
            buffered_ += take;
            p += take;
            n -= take;
            if (buffered_ < 64) return;
            compress(buffer_);
            buffered_ = 0;
        }
        for (; n >= 64; p += 64, n -= 64) compress(p);
        memcpy(buffer_, p, n);
        buffered_ = n;
    }
    std::string hex_digest() {
        uint64_t bits = total_bytes_ * 8;
        unsigned char pad[72] = {0x80};
        size_t pad_len = (buffered_ < 56 ? 56 : 120) - buffered_;
        update(pad, pad_len);
        unsigned char len_be[8];
        for (int i = 0; i < 8; i++) len_be[i] = (unsigned char)(bits >> (56 - 8 * i));
        update(len_be, 8);
        static const char* digits = "0123456789abcdef";
        std::string out;
        for (uint32_t w : state_) {
            for (int i = 28; i >= 0; i -= 4) out += digits[(w >> i) & 15];
        }
        return out;
    }

private:
    uint32_t state_[8];
    unsigned char buffer_[64];
    size_t buffered_ = 0;
    uint64_t total_bytes_ = 0;

    static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
    void compress(const unsigned char* block) {
        static const uint32_t k[64] = {
            0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
            0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
            0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
            0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
            0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
            0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
            0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
            0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
        uint32_t w[64];
        for (int i = 0; i < 16; i++) {
            w[i] = ((uint32_t)block[4 * i] << 24) | ((uint32_t)block[4 * i + 1] << 16) | ((uint32_t)block[4 * i + 2] << 8) |
                   block[4 * i + 3];
        }
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
        uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
        for (int i = 0; i < 64; i++) {
            uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
            uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            h = g; g = f; f = e; e = d + t1;
            d = c; c = b; b = a; a = t1 + t2;
        }
        state_[0] += a; state_[1] += b; state_[2] += c; state_[3] += d;
        state_[4] += e; state_[5] += f; state_[6] += g; state_[7] += h;
    }
};

// SHA-256 of token ids laid out as little-endian uint32 (the fingerprint our tests compare with
// tiktoken's output).
template <typename Int>
inline std::string sha256_of_ids_le32(const Int* ids, size_t n) {
    Sha256 h;
    unsigned char buf[4096];
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ids[i];
        buf[used++] = (unsigned char)v;
        buf[used++] = (unsigned char)(v >> 8);
        buf[used++] = (unsigned char)(v >> 16);
        buf[used++] = (unsigned char)(v >> 24);
        if (used == sizeof(buf)) { h.update(buf, used); used = 0; }
    }
    h.update(buf, used);
    return h.hex_digest();
}
