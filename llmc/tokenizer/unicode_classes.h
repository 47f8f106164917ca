// The three Unicode classes the GPT-2 pre-tokenization pattern asks about, for every code point:
// \p{L} (general category Letter), \p{N} (general category Number) and \s (the White_Space
// property, which is what \s means in the Rust regex crate that tiktoken uses). The ranges come
// from ICU through data/gen_unicode_classes.cpp (llmc/tokenizer/unicode_class_ranges.h, committed, so no
// library is needed to build). At first use they are expanded into a two-level table (256 code
// points per block, identical blocks shared: about 100 KB) so a lookup is two loads.
// Plus a strict UTF-8 decoder with the rules of Rust's str::from_utf8 (no overlongs, no
// surrogates, nothing above U+10FFFF).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "llmc/tokenizer/unicode_class_ranges.h"

enum CharClass : uint8_t { kCharOther = 0, kCharLetter = 1, kCharNumber = 2, kCharSpace = 3 };

class UnicodeClassTable {
public:
    static const UnicodeClassTable& get() {
        static const UnicodeClassTable table;  // built on first use; thread-safe (C++11 statics)
        return table;
    }
    CharClass of(uint32_t cp) const {
        if (cp > 0x10FFFF) return kCharOther;
        return (CharClass)blocks_[(size_t)block_index_[cp >> 8] * 256 + (cp & 255)];
    }
    // The Unicode version of the tables, e.g. "15.0".
    static std::string unicode_version() { return kUnicodeClassVersion; }

private:
    std::vector<uint16_t> block_index_;
    std::vector<uint8_t> blocks_;

    UnicodeClassTable() {
        std::vector<uint8_t> flat(0x110000, kCharOther);
        for (const UnicodeClassRange& r : kUnicodeClassRanges) {
            for (uint32_t c = r.first; c <= r.last; c++) flat[c] = r.cls;
        }
        const uint32_t num_blocks = 0x110000 / 256;
        block_index_.resize(num_blocks);
        std::map<std::string, uint16_t> seen;
        for (uint32_t b = 0; b < num_blocks; b++) {
            std::string block((const char*)flat.data() + b * 256, 256);
            auto it = seen.find(block);
            if (it == seen.end()) {
                it = seen.emplace(block, (uint16_t)(blocks_.size() / 256)).first;
                blocks_.insert(blocks_.end(), block.begin(), block.end());
            }
            block_index_[b] = it->second;
        }
    }
};

// Decodes the UTF-8 sequence at p (left > 0 bytes available). Returns its length (1..4) and the
// code point, or 0 if the bytes at p do not start a valid sequence.
inline int utf8_decode(const unsigned char* p, size_t left, uint32_t* cp) {
    unsigned char b0 = p[0];
    if (b0 < 0x80) { *cp = b0; return 1; }
    auto cont = [&](size_t i) { return i < left && (p[i] & 0xC0) == 0x80; };
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        if (!cont(1)) return 0;
        *cp = ((uint32_t)(b0 & 0x1F) << 6) | (p[1] & 0x3F);
        return 2;
    }
    if (b0 >= 0xE0 && b0 <= 0xEF) {
        if (!cont(1) || !cont(2)) return 0;
        if (b0 == 0xE0 && p[1] < 0xA0) return 0;   // overlong
        if (b0 == 0xED && p[1] >= 0xA0) return 0;  // UTF-16 surrogate
        *cp = ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
        return 3;
    }
    if (b0 >= 0xF0 && b0 <= 0xF4) {
        if (!cont(1) || !cont(2) || !cont(3)) return 0;
        if (b0 == 0xF0 && p[1] < 0x90) return 0;   // overlong
        if (b0 == 0xF4 && p[1] >= 0x90) return 0;  // above U+10FFFF
        *cp = ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) |
              (p[3] & 0x3F);
        return 4;
    }
    return 0;
}
