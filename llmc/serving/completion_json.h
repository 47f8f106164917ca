// What the server writes, in OpenAI's shapes: a completion ("object": "text_completion", one choice, usage), a
// stream's chunks (the same object with the new text, finish_reason null until the last; with
// stream_options.include_usage a last chunk of usage and no choices, then "data: [DONE]"), logprobs (tokens,
// token_logprobs, top_logprobs, text_offset), errors ({"error": {message, type, param, code}}) and the model list.
// Every string is valid UTF-8 (token texts that are not: "bytes:\xNN..." as OpenAI writes them). Host-only.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/serving/completion_request.h"
#include "llmc/serving/completion_session.h"
#include "llmc/serving/completion_text.h"

// Which completion a response belongs to.
struct CompletionIds {
    std::string id;       // "cmpl-" and 24 hex digits
    int64_t created = 0;  // Unix seconds
    std::string model;
};

inline int64_t unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

inline std::string new_completion_id() {
    static std::mutex m;
    static std::mt19937_64 gen{std::random_device{}()};
    std::lock_guard<std::mutex> lock(m);
    char buf[32];
    snprintf(buf, sizeof(buf), "cmpl-%016llx%08x", (unsigned long long)gen(), (unsigned)(gen() >> 32));
    return buf;
}

// A JSON text that is always valid UTF-8 (anything that is not is replaced, never thrown about).
inline std::string json_text(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline std::string api_error_json(const ApiError& e) {
    nlohmann::json j;
    j["error"] = {{"message", utf8::sanitize(e.message)},
                  {"type", e.type},
                  {"param", e.param.empty() ? nlohmann::json() : nlohmann::json(e.param)},
                  {"code", e.code.empty() ? nlohmann::json() : nlohmann::json(e.code)}};
    return json_text(j);
}

// A token's text for logprobs: its bytes when they are valid UTF-8 on their own, else "bytes:\xE2\x80" (OpenAI's
// form for a token that holds part of a character).
inline std::string token_display(const std::vector<std::string>& token_bytes, int eot, int id) {
    if (id == eot) return "<|endoftext|>";
    if (id < 0 || (size_t)id >= token_bytes.size()) return "<id " + std::to_string(id) + ">";
    const std::string& b = token_bytes[(size_t)id];
    if (utf8::is_valid(b)) return b;
    std::string out = "bytes:";
    for (unsigned char c : b) {
        char x[5];
        snprintf(x, sizeof(x), "\\x%02x", c);
        out += x;
    }
    return out;
}

// The logprobs object for these tokens (null when none was asked for: top_n < 0); text_offset as recorded.
inline nlohmann::json logprobs_json(const std::vector<TokenRecord>& tokens, int top_n,
                                    const std::vector<std::string>& token_bytes, int eot) {
    if (top_n < 0) return nullptr;
    nlohmann::json toks = nlohmann::json::array(), lps = nlohmann::json::array(), tops = nlohmann::json::array(),
                   offsets = nlohmann::json::array();
    for (const TokenRecord& t : tokens) {
        toks.push_back(token_display(token_bytes, eot, t.id));
        lps.push_back(t.logprob);
        nlohmann::json top = nlohmann::json::object();
        for (const auto& [id, lp] : t.top) top[token_display(token_bytes, eot, id)] = lp;
        tops.push_back(top);
        offsets.push_back(t.text_offset);
    }
    return {{"tokens", toks},
            {"token_logprobs", lps},
            {"top_logprobs", top_n > 0 ? tops : nlohmann::json()},
            {"text_offset", offsets}};
}

// OpenAI's finish_reason: "stop" (a stop string or <|endoftext|>) or "length" (max_tokens); null while running.
inline nlohmann::json finish_json(const SequenceEnd* end) {
    if (!end) return nullptr;
    return end->reason == FinishReason::Length ? "length" : "stop";
}

inline nlohmann::json usage_json(const SequenceEnd& e) {
    return {{"prompt_tokens", e.prompt_tokens},
            {"completion_tokens", e.completion_tokens},
            {"total_tokens", e.prompt_tokens + e.completion_tokens}};
}

// What every response and stream chunk has: which completion, its kind (object), its choices.
inline nlohmann::json response_json(const CompletionIds& ids, const char* object, nlohmann::json choices) {
    return {{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model}, {"choices", choices}};
}

inline std::string completion_json(const CompletionIds& ids, const std::string& text, const SequenceEnd& end,
                                   const nlohmann::json& logprobs) {
    nlohmann::json choice = {{"text", text}, {"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_json(&end)}};
    nlohmann::json j = response_json(ids, "text_completion", nlohmann::json::array({choice}));
    j["usage"] = usage_json(end);
    return json_text(j);
}

// One stream chunk: the new text (and its tokens' logprobs); end non-null on the last. include_usage: "usage": null
// on every chunk but the usage chunk (OpenAI's shape).
inline std::string stream_chunk_json(const CompletionIds& ids, const std::string& text, const SequenceEnd* end,
                                     const nlohmann::json& logprobs, bool include_usage) {
    nlohmann::json choice = {{"text", text}, {"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_json(end)}};
    nlohmann::json j = response_json(ids, "text_completion", nlohmann::json::array({choice}));
    if (include_usage) j["usage"] = nullptr;
    return json_text(j);
}

// A stream's usage chunk: no choices, the usage (object: the stream's chunks' kind).
inline std::string usage_chunk_json(const CompletionIds& ids, const SequenceEnd& end,
                                    const char* object = "text_completion") {
    nlohmann::json j = response_json(ids, object, nlohmann::json::array());
    j["usage"] = usage_json(end);
    return json_text(j);
}

inline std::string models_json(const std::string& model, int64_t created) {
    nlohmann::json m = {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "llmc"}};
    return json_text({{"object", "list"}, {"data", nlohmann::json::array({m})}});
}

inline std::string model_json(const std::string& model, int64_t created) {
    return json_text({{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "llmc"}});
}

// GET /health: the scheduler's state and counters (scripts/bench/bench_serve.py reads batch occupancy from them).
inline std::string health_json(const SchedulerStats& s, const std::string& model, int context) {
    nlohmann::json j = {{"status", s.draining ? "draining" : "ok"},
                        {"model", model},
                        {"context", context},
                        {"slots", s.slots},
                        {"running", s.running},
                        {"queued", s.queued},
                        {"steps", s.steps},
                        {"decode_steps", s.decode_steps},
                        {"decode_rows", s.decode_rows},
                        {"decode_ms", s.decode_ms},
                        {"deliver_ms", s.deliver_ms},
                        {"decode_device_ms", s.decode_device_ms},
                        {"prefill_calls", s.prefill_calls},
                        {"prefill_tokens", s.prefill_tokens},
                        {"generated_tokens", s.tokens},
                        {"accepted", s.accepted},
                        {"finished", s.finished},
                        {"cancelled", s.cancelled},
                        {"errors", s.errors},
                        {"refused_queue_full", s.refused_full}};
    return json_text(j);
}
