// A completion's text as its tokens' bytes arrive: what may be sent to the client now, and where a stop string
// ends it. Stop strings are found in the decoded bytes, across token boundaries, and are not part of the text (as
// OpenAI does); text that could still turn out to be the start of a stop string is held back, and so are the bytes
// of a character not yet complete. Invalid UTF-8 becomes U+FFFD, one per maximal invalid subpart (the Unicode and
// WHATWG practice, which Python's bytes.decode(errors="replace") follows), so the pieces handed out one by one join
// to the text sanitised at once. Host-only, no JSON (tests/serving/test_serve_text.cpp; fuzzed by fuzz_serve_request).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace utf8 {

// One step of decoding at p[0..n): len bytes that are a whole valid character (valid), or one maximal invalid
// subpart (to be replaced by one U+FFFD), or, when they reach the end of the input, possibly the unfinished start
// of a valid character (unfinished).
struct Step {
    int len = 1;
    bool valid = false;
    bool unfinished = false;
};

inline Step step(const unsigned char* p, size_t n) {
    const unsigned char c = p[0];
    if (c < 0x80) return {1, true, false};
    int need;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) need = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return {1, false, false};
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n) return {i, false, true};
        const unsigned char b = p[i];
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return {i, false, false};
    }
    return {need, true, false};
}

// Valid UTF-8: every maximal invalid subpart (an unfinished character at the end too) as U+FFFD.
inline std::string sanitize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    const unsigned char* p = (const unsigned char*)s.data();
    for (size_t i = 0; i < s.size();) {
        const Step st = step(p + i, s.size() - i);
        if (st.valid) out.append(s.data() + i, (size_t)st.len);
        else out += "\xEF\xBF\xBD";
        i += (size_t)st.len;
    }
    return out;
}

inline bool is_valid(std::string_view s) {
    const unsigned char* p = (const unsigned char*)s.data();
    for (size_t i = 0; i < s.size();) {
        const Step st = step(p + i, s.size() - i);
        if (!st.valid) return false;
        i += (size_t)st.len;
    }
    return true;
}

// The largest end <= limit (and >= from) that does not cut a character that may still complete: limit, or the start
// of an unfinished valid prefix just before it.
inline size_t safe_end(std::string_view s, size_t from, size_t limit) {
    const unsigned char* p = (const unsigned char*)s.data();
    // the last character's first byte: the last byte that is not a continuation byte, among the last four
    for (size_t j = limit; j > from && limit - j < 4;) {
        j--;
        if ((p[j] & 0xC0) != 0x80) return step(p + j, limit - j).unfinished ? j : limit;
    }
    return limit;
}

}  // namespace utf8

class CompletionText {
public:
    explicit CompletionText(std::vector<std::string> stops = {}) : stops_(std::move(stops)) {
        stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
        for (const std::string& s : stops_) longest_ = std::max(longest_, s.size());
    }

    // Appends a token's bytes; true once a stop string is complete (the text ends before it; later bytes are
    // ignored).
    bool add(std::string_view bytes) {
        if (stopped_) return true;
        const size_t old = buf_.size();
        buf_.append(bytes.data(), bytes.size());
        size_t cut = std::string::npos;
        for (const std::string& stop : stops_) {
            const size_t from = old >= stop.size() - 1 ? old - (stop.size() - 1) : 0;
            const size_t at = buf_.find(stop, from);
            if (at != std::string::npos) cut = std::min(cut, at);
        }
        if (cut == std::string::npos) return false;
        buf_.resize(std::max(cut, released_));  // never below what was handed out (held text cannot be)
        stopped_ = true;
        return true;
    }

    // The text that may be handed out now: complete characters that cannot be the start of a stop string.
    std::string take() {
        size_t limit = buf_.size();
        if (!stopped_) {
            limit -= held_for_stops();
            limit = utf8::safe_end(buf_, released_, limit);
        }
        return release(limit);
    }
    // The rest, at the end (an unfinished character as U+FFFD).
    std::string finish() { return release(buf_.size()); }

    bool stopped() const { return stopped_; }
    size_t bytes() const { return buf_.size(); }                    // so far (after a stop: up to it)
    std::string text() const { return utf8::sanitize(buf_); }       // the whole text so far

private:
    // The longest end of the unreleased text that is a proper prefix of some stop string.
    size_t held_for_stops() const {
        const size_t room = buf_.size() - released_;
        for (size_t k = std::min(room, longest_ ? longest_ - 1 : 0); k > 0; k--) {
            const std::string_view tail(buf_.data() + buf_.size() - k, k);
            for (const std::string& stop : stops_)
                if (stop.size() > k && std::string_view(stop).substr(0, k) == tail) return k;
        }
        return 0;
    }
    std::string release(size_t limit) {
        if (limit <= released_) return "";
        std::string out = utf8::sanitize(std::string_view(buf_).substr(released_, limit - released_));
        released_ = limit;
        return out;
    }

    std::vector<std::string> stops_;
    size_t longest_ = 0;
    std::string buf_;
    size_t released_ = 0;
    bool stopped_ = false;
};
