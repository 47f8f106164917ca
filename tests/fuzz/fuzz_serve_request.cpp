// Fuzzes the server's request layer: parse_completion_request (llmc/serving/completion_request.h) on the input as a
// POST /v1/completions body, and CompletionText (llmc/serving/completion_text.h) on the input cut into tokens and
// stop strings. Expected: an accepted request or an ApiError. Findings: a crash or sanitizer report, any exception
// (nlohmann's included), a leak; an error without a message, with a status other than 400/404/413, or whose JSON is
// not valid UTF-8 JSON; an accepted request outside what the parser promises (prompt 1..context-1 ids below V,
// 1 <= max_tokens <= the room left, temperature in [0, 2], top_p in (0, 1], top_k >= 0, logprobs -1..5, at most 4
// non-empty stops, include_usage only with stream); completion text that is not valid UTF-8, a piece handed out that
// is not a prefix of the final text, or a final text other than the reference's (join, cut at the first stop in
// the order tokens come, sanitise); a response that is not valid UTF-8 JSON.
#include <nlohmann/json.hpp>

#include "llmc/serving/completion_json.h"
#include "llmc/serving/completion_request.h"
#include "llmc/serving/completion_text.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

constexpr int kContext = 64, kVocab = 300;

void check_json(const std::string& text, const char* what) {
    FUZZ_REQUIRE(utf8::is_valid(text), "%s is not valid UTF-8", what);
    try {
        (void)nlohmann::json::parse(text);
    } catch (const std::exception& e) {
        fuzz::finding("%s is not JSON: %s", what, e.what());
    }
}

void fuzz_request(std::string_view body) {
    ServeLimits l;
    l.model = "m";
    l.context = kContext;
    l.vocab_size = kVocab;
    l.max_body_bytes = 4096;
    auto encode = [](const std::string& s) {
        std::vector<int> ids;
        for (unsigned char c : s) ids.push_back(c);
        return ids;
    };
    CompletionRequest r;
    ApiError e;
    if (!parse_completion_request(body, l, encode, &r, &e)) {
        FUZZ_REQUIRE(!e.message.empty(), "an error without a message");
        FUZZ_REQUIRE(e.status == 400 || e.status == 404 || e.status == 413, "status %d", e.status);
        check_json(api_error_json(e), "an error body");
        return;
    }
    const int n = (int)r.prompt.size();
    FUZZ_REQUIRE(n >= 1 && n < kContext, "a prompt of %d tokens accepted", n);
    for (int id : r.prompt) FUZZ_REQUIRE(id >= 0 && id < kVocab, "token %d accepted", id);
    FUZZ_REQUIRE(r.max_tokens >= 1 && r.max_tokens <= kContext - n, "max_tokens %d with a prompt of %d", r.max_tokens, n);
    FUZZ_REQUIRE(r.pick.temperature >= 0 && r.pick.temperature <= 2, "temperature %g", (double)r.pick.temperature);
    FUZZ_REQUIRE(r.pick.top_p > 0 && r.pick.top_p <= 1, "top_p %g", (double)r.pick.top_p);
    FUZZ_REQUIRE(r.pick.top_k >= 0, "top_k %d", r.pick.top_k);
    FUZZ_REQUIRE(!pick_params_problem(r.pick), "pick parameters the rule refuses");
    FUZZ_REQUIRE(r.logprobs >= -1 && r.logprobs <= kMaxLogprobs, "logprobs %d", r.logprobs);
    FUZZ_REQUIRE(r.stop.size() <= (size_t)kMaxStops, "%zu stops", r.stop.size());
    for (const std::string& s : r.stop) FUZZ_REQUIRE(!s.empty() && utf8::is_valid(s), "a stop string empty or not UTF-8");
    FUZZ_REQUIRE(!r.include_usage || r.stream, "include_usage without stream");
}

// input: u8 stops count (0..3), stops as u8 length + bytes, then tokens as u8 length + bytes
void fuzz_text(const uint8_t* data, size_t size) {
    size_t at = 0;
    auto take = [&](size_t n) {
        n = std::min(n, size - at);
        std::string s((const char*)data + at, n);
        at += n;
        return s;
    };
    const int n_stops = size ? data[at++] % 4 : 0;
    std::vector<std::string> stops;
    for (int i = 0; i < n_stops && at < size; i++) stops.push_back(take(1 + data[at++] % 6));
    std::vector<std::string> tokens;
    while (at < size) tokens.push_back(take(data[at++] % 8));
    CompletionText t(stops);
    std::string handed, all;
    size_t cut = std::string::npos;
    bool stopped = false;
    for (const std::string& tok : tokens) {
        all += tok;
        for (const std::string& s : stops)
            if (!s.empty()) cut = std::min(cut, all.find(s));
        stopped = t.add(tok);
        FUZZ_REQUIRE(stopped == (cut != std::string::npos), "a stop %s", stopped ? "found where none is" : "missed");
        const std::string piece = t.take();
        FUZZ_REQUIRE(utf8::is_valid(piece), "a piece that is not valid UTF-8");
        handed += piece;
        if (stopped) break;
    }
    handed += t.finish();
    const std::string expect = utf8::sanitize(all.substr(0, std::min(cut, all.size())));
    FUZZ_REQUIRE(handed == expect, "the text handed out is not the reference's");
    SequenceEnd end;
    check_json(completion_json(CompletionIds{"cmpl-x", 0, "m"}, handed, end, nullptr), "a response");
    check_json(stream_chunk_json(CompletionIds{"cmpl-x", 0, all}, all, nullptr, nullptr, true), "a chunk");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_request(std::string_view((const char*)data, size));
    fuzz_text(data, size);
    return 0;
}
