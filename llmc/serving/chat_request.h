// POST /v1/chat/completions bodies: the conversation ("messages") put through the chat template
// (llmc/serving/chat_template.h) into one prompt, then the same fields, checks and errors as completions
// (llmc/serving/completion_request.h), with chat's own names:
//   messages               1 or more {"role": "system"|"developer"|"user"|"assistant", "content": a string or an
//                          array of {"type": "text", "text": ...} parts, "name": ignored}
//   max_completion_tokens  as max_tokens (either; not both with different values)
//   logprobs               true: the chosen tokens' log-probabilities; top_logprobs 0..5 the most likely at each
// The template's stop strings join the request's (which may be up to 4). Tools, functions and response formats are
// refused (400). Host-only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/serving/chat_template.h"
#include "llmc/serving/completion_request.h"

namespace chat_request_detail {

using json = nlohmann::json;
using completion_request_detail::Checker;

inline bool parse_messages(const json& v, std::vector<ChatMessage>* out, Checker& c) {
    if (!v.is_array()) return c.bad_type("messages", v, "an array of messages");
    if (v.empty()) return c.fail("messages", "'messages' is empty: give at least one message");
    for (size_t i = 0; i < v.size(); i++) {
        const std::string at = "messages[" + std::to_string(i) + "]";
        const json& m = v[i];
        if (!m.is_object()) return c.bad_type(at, m, "an object");
        ChatMessage msg;
        bool has_content = false;
        for (auto it = m.begin(); it != m.end(); ++it) {
            const std::string& k = it.key();
            const json& x = it.value();
            if (k == "role") {
                if (!x.is_string()) return c.bad_type(at + ".role", x, "a string");
                msg.role = x.get<std::string>();
                if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for system messages
                if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
                    return c.fail(at + ".role", "'" + at + ".role' must be system, developer, user or assistant, not '" +
                                                    x.get<std::string>() + "' (tools are not supported)");
            } else if (k == "content") {
                has_content = true;
                if (x.is_string()) {
                    msg.content = x.get<std::string>();
                } else if (x.is_array()) {
                    for (size_t p = 0; p < x.size(); p++) {
                        const std::string part = at + ".content[" + std::to_string(p) + "]";
                        const json& y = x[p];
                        if (!y.is_object() || !y.contains("type") || y["type"] != "text" || !y.contains("text") ||
                            !y["text"].is_string() || y.size() != 2)
                            return c.fail(part, "'" + part + "' must be {\"type\": \"text\", \"text\": \"...\"} (text "
                                                "only)");
                        msg.content += y["text"].get<std::string>();
                    }
                } else {
                    return c.bad_type(at + ".content", x, "a string or an array of text parts");
                }
            } else if (k == "name") {
                if (!x.is_string()) return c.bad_type(at + ".name", x, "a string");
            } else {
                return c.fail(at + "." + k, "'" + at + "." + k + "' is not supported (messages take role, content, "
                                            "name)");
            }
        }
        if (msg.role.empty()) return c.fail(at + ".role", "'" + at + ".role' is required");
        if (!has_content) return c.fail(at + ".content", "'" + at + ".content' is required");
        out->push_back(std::move(msg));
    }
    return true;
}

}  // namespace chat_request_detail

// true with *out filled (its prompt the rendered conversation, its stops the request's and the template's); false
// with *err as for completions.
inline bool parse_chat_request(std::string_view body, const ServeLimits& lim, const PromptEncoder& encode,
                               const ChatTemplate& tmpl, CompletionRequest* out, ApiError* err) {
    using namespace completion_request_detail;
    using chat_request_detail::parse_messages;
    Checker c{err};
    json j;
    if (!begin_request(body, lim, "messages", &j, out, c)) return false;
    CompletionRequest& r = *out;
    SharedFields seen;
    std::vector<ChatMessage> messages;
    bool logprobs = false, has_top = false;
    int64_t top = 0, max_completion = -1;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& k = it.key();
        const json& v = it.value();
        if (k == "prompt") return c.fail(k, "chat completions take 'messages', not 'prompt' (POST /v1/completions "
                                            "takes a prompt)");
        const Field f = parse_shared_field(k, v, lim, r, seen, c);
        if (f == Field::Failed) return false;
        if (f == Field::Taken) continue;
        if (k == "messages") {
            if (!parse_messages(v, &messages, c)) return false;
        } else if (k == "max_completion_tokens") {
            if (v.is_null()) continue;
            if (!c.integer(k, v, 1, INT32_MAX, &max_completion)) return false;
        } else if (k == "logprobs") {
            if (v.is_null()) continue;
            if (!v.is_boolean()) return c.bad_type(k, v, "a boolean");
            logprobs = v.get<bool>();
        } else if (k == "top_logprobs") {
            if (v.is_null()) continue;
            if (!c.integer(k, v, 0, kMaxLogprobs, &top)) return false;
            has_top = true;
        } else {
            return c.fail(k, "unrecognized request argument: '" + k + "'");
        }
    }
    if (has_top && !logprobs) return c.fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (logprobs) r.logprobs = (int)top;
    if (max_completion >= 0) {
        if (seen.has_max_tokens && r.max_tokens != max_completion)
            return c.fail("max_completion_tokens", "'max_completion_tokens' and 'max_tokens' differ: give one");
        r.max_tokens = (int)max_completion, seen.has_max_tokens = true;
    }
    r.prompt = encode(tmpl.render(messages));
    for (size_t i = 0; i < r.prompt.size(); i++)
        if (r.prompt[i] < 0 || r.prompt[i] >= lim.vocab_size)
            return c.fail("messages", "the conversation encodes to token " + std::to_string(r.prompt[i]) +
                                          ", outside this model's vocabulary (0.." + std::to_string(lim.vocab_size - 1) +
                                          ")");
    if (r.prompt.empty()) return c.fail("messages", "the conversation encodes to no tokens");
    if ((int64_t)r.prompt.size() >= lim.context)
        return c.fail("messages", "the conversation is " + std::to_string(r.prompt.size()) + " tokens with the chat "
                                  "template; this model's context is " + std::to_string(lim.context) + " tokens, which "
                                  "leaves no room for a reply", 400, "context_length_exceeded");
    for (const std::string& s : tmpl.stop) r.stop.push_back(s);
    return finish_shared(lim, seen, r, c);
}
