// POST /tokenize and POST /detokenize (vLLM's): text to the server's token ids and back, without the model.
//   /tokenize    {"prompt": "text"} or {"messages": [...]} (put through the chat template, as chat completions
//                would), optional "model", "add_special_tokens" (GPT-2 adds none: accepted, no effect),
//                "return_token_strs"; -> {"count", "max_model_len", "tokens", ["token_strs"]}
//   /detokenize  {"tokens": [ids]}, optional "model" -> {"prompt": "text"} (bytes that are not valid UTF-8 become
//                U+FFFD, as in completions)
// Errors as completions' (400, 404 for another model, 413). Host-only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/serving/chat_request.h"
#include "llmc/serving/completion_json.h"

// The response body, or false with *err.
inline bool tokenize_response(std::string_view body, const ServeLimits& lim, const PromptEncoder& encode,
                              const ChatTemplate& tmpl, const std::vector<std::string>& token_bytes, int eot,
                              std::string* out, ApiError* err) {
    using namespace completion_request_detail;
    Checker c{err};
    json j;
    if (!parse_body(body, lim, &j, c)) return false;
    const bool has_prompt = j.contains("prompt"), has_messages = j.contains("messages");
    if (has_prompt == has_messages) return c.fail("prompt", "give one of 'prompt' (text) or 'messages' (a conversation)");
    std::vector<int> ids;
    bool strs = false;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& k = it.key();
        const json& v = it.value();
        if (k == "prompt") {
            if (!v.is_string()) return c.bad_type(k, v, "a string");
            ids = encode(v.get<std::string>());
        } else if (k == "messages") {
            std::vector<ChatMessage> messages;
            if (!chat_request_detail::parse_messages(v, &messages, c)) return false;
            ids = encode(tmpl.render(messages));
        } else if (k == "model") {
            if (!check_model(v, lim, c)) return false;
        } else if (k == "add_special_tokens" || k == "add_generation_prompt" || k == "return_token_strs") {
            if (!v.is_boolean()) return c.bad_type(k, v, "a boolean");
            if (k == "return_token_strs") strs = v.get<bool>();
        } else {
            return c.fail(k, "unrecognized request argument: '" + k + "'");
        }
    }
    nlohmann::json r = {{"count", ids.size()}, {"max_model_len", lim.context}, {"tokens", ids}};
    if (strs) {
        nlohmann::json s = nlohmann::json::array();
        for (int id : ids) s.push_back(token_display(token_bytes, eot, id));
        r["token_strs"] = s;
    }
    *out = json_text(r);
    return true;
}

inline bool detokenize_response(std::string_view body, const ServeLimits& lim,
                                const std::vector<std::string>& token_bytes, std::string* out, ApiError* err) {
    using namespace completion_request_detail;
    Checker c{err};
    json j;
    if (!parse_body(body, lim, &j, c)) return false;
    if (!j.contains("tokens")) return c.fail("tokens", "'tokens' is required");
    std::string bytes;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& k = it.key();
        const json& v = it.value();
        if (k == "tokens") {
            if (!v.is_array()) return c.bad_type(k, v, "an array of token ids");
            for (size_t i = 0; i < v.size(); i++) {
                const bool integer = v[i].is_number_integer();
                const bool neg = integer && !v[i].is_number_unsigned() && v[i].get<int64_t>() < 0;
                if (!integer || neg || v[i].get<uint64_t>() >= (uint64_t)lim.vocab_size ||
                    v[i].get<uint64_t>() >= token_bytes.size())
                    return c.fail(k, "'tokens' item " + std::to_string(i) + " is " + v[i].dump() +
                                         ", not a token id (0.." + std::to_string(lim.vocab_size - 1) + ")");
                bytes += token_bytes[v[i].get<size_t>()];
            }
        } else if (k == "model") {
            if (!check_model(v, lim, c)) return false;
        } else {
            return c.fail(k, "unrecognized request argument: '" + k + "'");
        }
    }
    *out = json_text({{"prompt", utf8::sanitize(bytes)}});
    return true;
}
