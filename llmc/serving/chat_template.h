// How a conversation becomes a prompt for a base model, which has no chat format of its own: each message's text in
// its role's frame, then the frame that opens the assistant's turn; the reply ends at a stop string that opens the
// next turn (the model would otherwise go on writing the user's lines). The default (docs/SERVING.md):
//
//   <system text>\n\n            (each system message)
//   User: <text>\n               (each user message)
//   Assistant: <text>\n          (each assistant message)
//   Assistant:                   (the turn the model writes; stops at "\nUser:")
//
// --chat-template FILE replaces it with a JSON object of the same parts, "{content}" marking where the text goes:
//   {"system": "{content}\n\n", "user": "User: {content}\n", "assistant": "Assistant: {content}\n",
//    "generation_prompt": "Assistant:", "stop": ["\nUser:"]}
// Every key is required, each frame holds "{content}" once, and there are at most 4 stop strings. Host-only.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

struct ChatMessage {
    std::string role;  // system, user or assistant
    std::string content;
};

struct ChatTemplate {
    std::string system = "{content}\n\n";
    std::string user = "User: {content}\n";
    std::string assistant = "Assistant: {content}\n";
    std::string generation_prompt = "Assistant:";
    std::vector<std::string> stop = {"\nUser:"};

    std::string render(const std::vector<ChatMessage>& messages) const {
        std::string out;
        for (const ChatMessage& m : messages) {
            const std::string& frame = m.role == "system" ? system : m.role == "user" ? user : assistant;
            const size_t at = frame.find("{content}");
            out += frame.substr(0, at) + m.content + frame.substr(at + 9);
        }
        return out + generation_prompt;
    }

    // The template in `path` (the format above); throws std::runtime_error naming the file and the problem.
    static ChatTemplate load(const std::string& path) {
        std::ifstream f(path, std::ios::binary);
        if (!f) throw std::runtime_error(path + ": cannot open the chat template");
        std::stringstream ss;
        ss << f.rdbuf();
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(ss.str());
        } catch (const nlohmann::json::parse_error& e) {
            throw std::runtime_error(path + ": the chat template is not valid JSON (" + e.what() + ")");
        }
        if (!j.is_object()) throw std::runtime_error(path + ": the chat template must be a JSON object");
        ChatTemplate t;
        for (auto it = j.begin(); it != j.end(); ++it) {
            const std::string& k = it.key();
            if (k != "system" && k != "user" && k != "assistant" && k != "generation_prompt" && k != "stop")
                throw std::runtime_error(path + ": unknown key '" + k + "' in the chat template (system, user, "
                                         "assistant, generation_prompt, stop)");
        }
        for (const char* k : {"system", "user", "assistant", "generation_prompt", "stop"})
            if (!j.contains(k)) throw std::runtime_error(path + ": the chat template has no '" + k + "'");
        auto frame = [&](const char* k, std::string* out, bool needs_content) {
            if (!j[k].is_string()) throw std::runtime_error(path + ": '" + k + "' must be a string");
            *out = j[k].get<std::string>();
            const size_t at = out->find("{content}");
            if (needs_content && (at == std::string::npos || out->find("{content}", at + 1) != std::string::npos))
                throw std::runtime_error(path + ": '" + k + "' must hold \"{content}\" exactly once");
        };
        frame("system", &t.system, true);
        frame("user", &t.user, true);
        frame("assistant", &t.assistant, true);
        frame("generation_prompt", &t.generation_prompt, false);
        const nlohmann::json& s = j["stop"];
        if (!s.is_array() || s.size() > 4) throw std::runtime_error(path + ": 'stop' must be an array of at most 4 strings");
        t.stop.clear();
        for (const nlohmann::json& x : s) {
            if (!x.is_string() || x.get<std::string>().empty())
                throw std::runtime_error(path + ": 'stop' must hold non-empty strings");
            t.stop.push_back(x.get<std::string>());
        }
        return t;
    }
};
