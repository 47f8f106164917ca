// GPT-2's pre-tokenization: the text is cut into pieces by the regular expression
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with leftmost-first alternation, as tiktoken's regex engine runs it. Written out by hand: at
// each position exactly one alternative can win, and which one depends only on the next one or
// two characters, so a single forward scan gives the same pieces as the backtracking engine:
//   - ' followed by s t m d (or re ve ll): the contraction, even inside a word ("'sup" -> "'s","up");
//   - otherwise an optional literal space joins the run of letters, numbers or "other" characters
//     (neither letter, number nor whitespace) that follows it;
//   - a whitespace run ending at a non-space character leaves its last character to the next piece
//     (\s+(?!\S)), unless the run is one character long (then \s+ takes it); at the end of the text
//     it is one piece.
// Bytes that are not valid UTF-8 count as one "other" character each (tiktoken's regex only sees
// valid text), so no byte is lost and decode(encode(x)) == x for every byte string.
#pragma once

#include <cstddef>
#include <string_view>

#include "llmc/tokenizer/unicode_classes.h"

struct CharAt {
    CharClass cls;
    int len;
};

inline CharAt char_class_at(const unsigned char* s, size_t i, size_t n, const UnicodeClassTable& table) {
    unsigned char b = s[i];
    if (b < 0x80) return {table.of(b), 1};
    uint32_t cp;
    int len = utf8_decode(s + i, n - i, &cp);
    if (len == 0) return {kCharOther, 1};
    return {table.of(cp), len};
}

// Calls emit(offset, length) for each piece of `text`, in order; the pieces tile the text.
template <typename Emit>
inline void gpt2_pretokenize(std::string_view text, Emit&& emit) {
    const UnicodeClassTable& table = UnicodeClassTable::get();
    const unsigned char* s = (const unsigned char*)text.data();
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
        const unsigned char b = s[i];
        if (b == '\'' && i + 1 < n) {
            const unsigned char c1 = s[i + 1];
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                emit(i, (size_t)2);
                i += 2;
                continue;
            }
            if (i + 2 < n) {
                const unsigned char c2 = s[i + 2];
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
                    emit(i, (size_t)3);
                    i += 3;
                    continue;
                }
            }
        }
        CharAt first = char_class_at(s, i, n, table);
        CharClass run = first.cls;
        size_t j = i + (size_t)first.len;
        if (b == ' ' && j < n) {  // " ?X+": the space belongs to a following non-space run
            CharAt next = char_class_at(s, j, n, table);
            if (next.cls != kCharSpace) {
                run = next.cls;
                j += (size_t)next.len;
            }
        }
        if (run == kCharSpace) {
            size_t last = i;
            j = i;
            while (j < n) {
                CharAt c = char_class_at(s, j, n, table);
                if (c.cls != kCharSpace) break;
                last = j;
                j += (size_t)c.len;
            }
            if (j < n && last > i) j = last;  // \s+(?!\S): the last space starts the next piece
            emit(i, j - i);
            i = j;
            continue;
        }
        while (j < n) {
            CharAt c = char_class_at(s, j, n, table);
            if (c.cls != run) break;
            j += (size_t)c.len;
        }
        emit(i, j - i);
        i = j;
    }
}

// True if a piece boundary falls at `pos` whatever came before: an ASCII letter followed by a
// space. (The letter's piece is a letter run or a contraction, and both end there; the regex has
// no look-behind.) Used to cut one long text into chunks that can be encoded in parallel.
inline bool is_safe_split_point(std::string_view text, size_t pos) {
    if (pos == 0 || pos >= text.size()) return false;
    unsigned char a = (unsigned char)text[pos - 1];
    return text[pos] == ' ' && ((a >= 'a' && a <= 'z') || (a >= 'A' && a <= 'Z'));
}
