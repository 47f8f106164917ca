// What POST /v1/chat/completions writes, in OpenAI's chat shapes: a whole response ("object": "chat.completion",
// the reply as the assistant's message), a stream's chunks ("chat.completion.chunk": the first delta carries the
// role, then the new text, the last the finish_reason) and chat's logprobs ({"content": [{token, logprob, bytes,
// top_logprobs: [{token, logprob, bytes}]}]}). The ids, the envelope, the usage chunk (with chat's object), errors and
// finish reasons are completions' (llmc/serving/completion_json.h). Host-only.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/serving/completion_json.h"

inline std::string new_chat_completion_id() { return "chat" + new_completion_id(); }  // "chatcmpl-..."

namespace chat_json_detail {
inline nlohmann::json bytes_of(const std::vector<std::string>& token_bytes, int id) {
    nlohmann::json b = nlohmann::json::array();
    if (id >= 0 && (size_t)id < token_bytes.size())
        for (unsigned char c : token_bytes[(size_t)id]) b.push_back((int)c);
    return b;
}
}  // namespace chat_json_detail

// chat's logprobs for these tokens; null when none was asked for (top_n < 0)
inline nlohmann::json chat_logprobs_json(const std::vector<TokenRecord>& tokens, int top_n,
                                         const std::vector<std::string>& token_bytes, int eot) {
    using chat_json_detail::bytes_of;
    if (top_n < 0) return nullptr;
    nlohmann::json content = nlohmann::json::array();
    for (const TokenRecord& t : tokens) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& [id, lp] : t.top)
            top.push_back({{"token", token_display(token_bytes, eot, id)}, {"logprob", lp}, {"bytes", bytes_of(token_bytes, id)}});
        content.push_back({{"token", token_display(token_bytes, eot, t.id)},
                           {"logprob", t.logprob},
                           {"bytes", bytes_of(token_bytes, t.id)},
                           {"top_logprobs", top}});
    }
    return {{"content", content}};
}

inline std::string chat_completion_json(const CompletionIds& ids, const std::string& text, const SequenceEnd& end,
                                        const nlohmann::json& logprobs) {
    nlohmann::json choice = {{"index", 0},
                             {"message", {{"role", "assistant"}, {"content", text}}},
                             {"logprobs", logprobs},
                             {"finish_reason", finish_json(&end)}};
    nlohmann::json j = response_json(ids, "chat.completion", nlohmann::json::array({choice}));
    j["usage"] = usage_json(end);
    return json_text(j);
}

// One chunk: first (the role with it), the new text, end non-null on the last (its delta empty of text when none).
inline std::string chat_chunk_json(const CompletionIds& ids, bool first, const std::string& text,
                                   const SequenceEnd* end, const nlohmann::json& logprobs, bool include_usage) {
    nlohmann::json delta = nlohmann::json::object();
    if (first) delta["role"] = "assistant";
    if (first || !text.empty()) delta["content"] = text;
    nlohmann::json choice = {{"index", 0}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish_json(end)}};
    nlohmann::json j = response_json(ids, "chat.completion.chunk", nlohmann::json::array({choice}));
    if (include_usage) j["usage"] = nullptr;
    return json_text(j);
}
