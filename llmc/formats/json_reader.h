// A small strict JSON reader (RFC 8259) for the places we read JSON: the GPT-2 vocabulary
// (encoder.json, one object of string -> integer), JSONL datasets (one object per line with a
// "text" field), safetensors headers and Hugging Face config files. It is a cursor over a byte
// buffer: callers pull the values they expect and skip the rest. Every violation throws JsonError
// with the byte offset, which callers turn into a FileError naming the file (and line, for JSONL).
// json_quote is the one piece of writing our JSON writers need.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

struct JsonError : std::runtime_error {
    size_t offset;
    JsonError(const std::string& msg, size_t off) : std::runtime_error(msg), offset(off) {}
};

class JsonCursor {
public:
    explicit JsonCursor(std::string_view text) : s_(text) {}

    size_t offset() const { return pos_; }
    bool at_end() { skip_ws(); return pos_ == s_.size(); }

    // Skips a UTF-8 byte order mark (EF BB BF) at the very start, which some editors write.
    void skip_byte_order_mark() {
        if (pos_ == 0 && s_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
    }
    void skip_ws() {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) pos_++;
    }
    // Consumes `c` (after whitespace) or throws.
    void expect(char c) {
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != c) fail(std::string("expected '") + c + "'");
        pos_++;
    }
    // Consumes `c` if it is next (after whitespace).
    bool accept(char c) {
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == c) { pos_++; return true; }
        return false;
    }
    char peek() {
        skip_ws();
        return pos_ < s_.size() ? s_[pos_] : '\0';
    }

    // A JSON string, unescaped to UTF-8. Raw control characters, invalid UTF-8, bad escapes and
    // unpaired surrogates are errors.
    std::string parse_string() {
        std::string out;
        expect('"');
        while (true) {
            if (pos_ >= s_.size()) fail("unterminated string");
            unsigned char c = (unsigned char)s_[pos_];
            if (c == '"') { pos_++; return out; }
            if (c < 0x20) fail("raw control character in string");
            if (c == '\\') {
                pos_++;
                if (pos_ >= s_.size()) fail("unterminated escape");
                char e = s_[pos_++];
                switch (e) {
                    case '"': out += '"'; break;
                    case '\\': out += '\\'; break;
                    case '/': out += '/'; break;
                    case 'b': out += '\b'; break;
                    case 'f': out += '\f'; break;
                    case 'n': out += '\n'; break;
                    case 'r': out += '\r'; break;
                    case 't': out += '\t'; break;
                    case 'u': {
                        uint32_t cp = parse_hex4();
                        if (cp >= 0xD800 && cp <= 0xDBFF) {  // high surrogate: a low one must follow
                            if (pos_ + 1 >= s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u') fail("unpaired surrogate");
                            pos_ += 2;
                            uint32_t lo = parse_hex4();
                            if (lo < 0xDC00 || lo > 0xDFFF) fail("unpaired surrogate");
                            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                            fail("unpaired surrogate");
                        }
                        append_utf8(out, cp);
                        break;
                    }
                    default: pos_--; fail("invalid escape");
                }
                continue;
            }
            // Copy a run of plain bytes at once; validate UTF-8 sequences.
            if (c < 0x80) {
                size_t start = pos_;
                while (pos_ < s_.size() && (unsigned char)s_[pos_] >= 0x20 && (unsigned char)s_[pos_] < 0x80 &&
                       s_[pos_] != '"' && s_[pos_] != '\\') pos_++;
                out.append(s_.data() + start, pos_ - start);
            } else {
                size_t n = utf8_sequence_length(pos_);
                if (n == 0) fail("invalid UTF-8 in string");
                out.append(s_.data() + pos_, n);
                pos_ += n;
            }
        }
    }

    // An integer (no fraction or exponent), range-checked against int64.
    int64_t parse_int() {
        skip_ws();
        size_t start = pos_;
        bool neg = accept_raw('-');
        if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("expected an integer");
        if (s_[pos_] == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9') fail("leading zero");
        uint64_t v = 0;
        while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
            v = v * 10 + (uint64_t)(s_[pos_] - '0');
            if (v > (uint64_t)INT64_MAX) { pos_ = start; fail("integer out of range"); }
            pos_++;
        }
        if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) fail("expected an integer, got a fraction");
        return neg ? -(int64_t)v : (int64_t)v;
    }

    // The members of the object at the cursor, in order: fn(key) is called with the cursor on the member's value,
    // which fn must consume (parse or skip).
    template <typename Fn>
    void for_each_member(Fn&& fn) {
        expect('{');
        if (accept('}')) return;
        do {
            std::string key = parse_string();
            expect(':');
            fn(key);
        } while (accept(','));
        expect('}');
    }
    // Only whitespace may follow the top-level value.
    void expect_end() {
        if (!at_end()) fail("trailing characters after the object");
    }

    // Any number, as a double (syntax checked as strictly as skip_value does).
    double parse_number() {
        skip_ws();
        const size_t start = pos_;
        skip_number();
        return strtod(std::string(s_.substr(start, pos_ - start)).c_str(), nullptr);
    }
    bool parse_bool() {
        char c = peek();
        if (c == 't') { expect_word("true"); return true; }
        if (c == 'f') { expect_word("false"); return false; }
        fail("expected true or false");
    }
    // Consumes null if it is next.
    bool accept_null() {
        if (peek() != 'n') return false;
        expect_word("null");
        return true;
    }

    // Skips any value (object, array, string, number, true, false, null), checking its syntax.
    void skip_value(int depth = 0) {
        if (depth > 512) fail("nesting too deep");
        char c = peek();
        if (c == '"') { parse_string(); return; }
        if (c == '{') {
            pos_++;
            if (accept('}')) return;
            do { parse_string(); expect(':'); skip_value(depth + 1); } while (accept(','));
            expect('}');
            return;
        }
        if (c == '[') {
            pos_++;
            if (accept(']')) return;
            do { skip_value(depth + 1); } while (accept(','));
            expect(']');
            return;
        }
        if (c == 't') { expect_word("true"); return; }
        if (c == 'f') { expect_word("false"); return; }
        if (c == 'n') { expect_word("null"); return; }
        skip_number();
    }

    [[noreturn]] void fail(const std::string& what) const {
        throw JsonError("invalid JSON at byte " + std::to_string(pos_) + ": " + what, pos_);
    }

private:
    std::string_view s_;
    size_t pos_ = 0;

    bool accept_raw(char c) {
        if (pos_ < s_.size() && s_[pos_] == c) { pos_++; return true; }
        return false;
    }
    void expect_word(const char* w) {
        size_t n = strlen(w);
        if (s_.substr(pos_, n) != w) fail(std::string("expected ") + w);
        pos_ += n;
    }
    void skip_number() {
        skip_ws();
        accept_raw('-');
        if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("expected a value");
        if (s_[pos_] == '0') pos_++;
        else while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') pos_++;
        if (accept_raw('.')) {
            if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("expected digits after '.'");
            while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') pos_++;
        }
        if (accept_raw('e') || accept_raw('E')) {
            if (!accept_raw('+')) accept_raw('-');
            if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("expected exponent digits");
            while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') pos_++;
        }
    }
    uint32_t parse_hex4() {
        if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) {
            char h = s_[pos_++];
            v <<= 4;
            if (h >= '0' && h <= '9') v |= (uint32_t)(h - '0');
            else if (h >= 'a' && h <= 'f') v |= (uint32_t)(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') v |= (uint32_t)(h - 'A' + 10);
            else fail("bad hex digit in \\u escape");
        }
        return v;
    }
    // Length of the valid UTF-8 sequence at p (2..4), or 0 if invalid (overlong, surrogate, > U+10FFFF).
    size_t utf8_sequence_length(size_t p) const {
        const unsigned char* b = (const unsigned char*)s_.data() + p;
        size_t left = s_.size() - p;
        auto cont = [&](size_t i) { return i < left && (b[i] & 0xC0) == 0x80; };
        if (b[0] >= 0xC2 && b[0] <= 0xDF) return cont(1) ? 2 : 0;
        if (b[0] >= 0xE0 && b[0] <= 0xEF) {
            if (!cont(1) || !cont(2)) return 0;
            if (b[0] == 0xE0 && b[1] < 0xA0) return 0;   // overlong
            if (b[0] == 0xED && b[1] >= 0xA0) return 0;  // surrogate
            return 3;
        }
        if (b[0] >= 0xF0 && b[0] <= 0xF4) {
            if (!cont(1) || !cont(2) || !cont(3)) return 0;
            if (b[0] == 0xF0 && b[1] < 0x90) return 0;   // overlong
            if (b[0] == 0xF4 && b[1] >= 0x90) return 0;  // > U+10FFFF
            return 4;
        }
        return 0;
    }
    static void append_utf8(std::string& out, uint32_t cp) {
        if (cp < 0x80) {
            out += (char)cp;
        } else if (cp < 0x800) {
            out += (char)(0xC0 | (cp >> 6));
            out += (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += (char)(0xE0 | (cp >> 12));
            out += (char)(0x80 | ((cp >> 6) & 0x3F));
            out += (char)(0x80 | (cp & 0x3F));
        } else {
            out += (char)(0xF0 | (cp >> 18));
            out += (char)(0x80 | ((cp >> 12) & 0x3F));
            out += (char)(0x80 | ((cp >> 6) & 0x3F));
            out += (char)(0x80 | (cp & 0x3F));
        }
    }
};

// `s` as a JSON string literal: quotes, backslashes and control characters escaped (UTF-8 passes through).
inline std::string json_quote(std::string_view s) {
    std::string out = "\"";
    for (char ch : s) {
        const unsigned char c = (unsigned char)ch;
        if (c == '"' || c == '\\') { out += '\\'; out += ch; }
        else if (c == '\n') out += "\\n";
        else if (c < 0x20) { char esc[8]; snprintf(esc, sizeof(esc), "\\u%04x", c); out += esc; }
        else out += ch;
    }
    return out + "\"";
}
