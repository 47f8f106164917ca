// POST /v1/completions bodies: parsed and checked field by field before anything is queued, each problem an
// OpenAI-style error naming the field (ApiError: the HTTP status, message, type, param, code). The subset taken
// (docs/SERVING.md has the table):
//   prompt       a string (encoded by the server's GPT-2 BPE) or an array of token ids; one prompt per request
//                (arrays of prompts are refused: send one request each); 1 .. context - 1 tokens
//   max_tokens   >= 1, prompt + max_tokens <= context (default: serve_gpt2cu's -g, cut to what fits)
//   temperature  [0, 2] (0: greedy)   top_p (0, 1]   top_k  -1 or 0 (off) or >= 1 (an extension, as vLLM's)
//   seed         an integer: the same seed and prompt give the same tokens, whatever else runs
//   stop         a string or up to 4 non-empty strings, found in the text across tokens and left out of it
//   stream       server-sent events, OpenAI's chunks, then "data: [DONE]"; stream_options {include_usage}
//   logprobs     0..5: the chosen tokens' log-probabilities and the N most likely at each position
//   n, best_of   1 only      echo false only      presence_penalty, frequency_penalty 0 only
//   logit_bias   empty only  suffix null only     user: any string (ignored)     ignore_eos (an extension, vLLM's)
//   model        the served model's id (GET /v1/models), or left out; another id is 404 model_not_found
// Any other field is refused (400). Host-only: nlohmann/json; the tokenizer comes in as a function.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/kernels/sampling/sampling_rule.h"

struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // the field; empty: null
    std::string code;   // empty: null
};

// What the server serves and its defaults for fields a request leaves out (serve_gpt2cu's -g -st -sk -sp -seed).
struct ServeLimits {
    std::string model = "gpt2";
    int context = 1024;             // positions per sequence: prompt + completion
    int vocab_size = 50257;
    size_t max_body_bytes = 1 << 20;
    int max_tokens = 16;
    PickParams pick{1.f, 0, 1.f};
    bool has_seed = false;          // -seed given: requests without a seed use it (else a fresh one each)
    uint64_t seed = 0;
};

using PromptEncoder = std::function<std::vector<int>(const std::string&)>;

struct CompletionRequest {
    std::vector<int> prompt;
    int max_tokens = 16;
    PickParams pick{1.f, 0, 1.f};
    bool seeded = false;  // false: the server picks the seed
    uint64_t seed = 0;
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false;
    int logprobs = -1;    // -1: none
    bool ignore_eos = false;
};

constexpr int kMaxStops = 4;
constexpr int kMaxLogprobs = 5;
constexpr int kMaxJsonDepth = 32;

namespace completion_request_detail {

using json = nlohmann::json;

// The deepest nesting of arrays and objects (outside strings), so a body of a million '[' is refused before a
// parser recurses into it.
inline int json_depth(std::string_view s) {
    int depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (char c : s) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return deepest;
}

inline const char* kind(const json& v) {
    switch (v.type()) {
        case json::value_t::null: return "null";
        case json::value_t::boolean: return "a boolean";
        case json::value_t::string: return "a string";
        case json::value_t::array: return "an array";
        case json::value_t::object: return "an object";
        case json::value_t::number_float: return "a number";
        default: return "an integer";
    }
}

struct Checker {
    ApiError* err;
    bool fail(const std::string& param, const std::string& message, int status = 400, const std::string& code = "") {
        err->status = status;
        err->param = param;
        err->message = message;
        err->code = code;
        err->type = "invalid_request_error";
        return false;
    }
    bool bad_type(const std::string& param, const json& v, const std::string& want) {
        return fail(param, "'" + param + "' must be " + want + ", not " + kind(v));
    }
    // An integer in [lo, hi] (JSON integers only: 16.0 and "16" are refused).
    bool integer(const std::string& param, const json& v, int64_t lo, int64_t hi, int64_t* out) {
        if (!v.is_number_integer()) return bad_type(param, v, "an integer");
        if (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t)INT64_MAX)
            return fail(param, "'" + param + "' must be at most " + std::to_string(hi));
        const int64_t x = v.get<int64_t>();
        if (x < lo || x > hi)
            return fail(param, "'" + param + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                   "], not " + std::to_string(x));
        *out = x;
        return true;
    }
    bool number(const std::string& param, const json& v, double* out) {
        if (!v.is_number()) return bad_type(param, v, "a number");
        *out = v.get<double>();
        return true;
    }
};

inline bool parse_prompt(const json& v, const ServeLimits& lim, const PromptEncoder& encode, std::vector<int>* out,
                         Checker& c) {
    if (v.is_string()) {
        *out = encode(v.get<std::string>());
        if (out->empty()) return c.fail("prompt", "'prompt' is empty: it must encode to at least one token");
        for (size_t i = 0; i < out->size(); i++)  // a model with a smaller vocabulary than the tokenizer's
            if ((*out)[i] < 0 || (*out)[i] >= lim.vocab_size)
                return c.fail("prompt", "'prompt' encodes to token " + std::to_string((*out)[i]) + " (at " +
                                            std::to_string(i) + "), outside this model's vocabulary (0.." +
                                            std::to_string(lim.vocab_size - 1) + ")");
    } else if (v.is_array()) {
        if (v.empty()) return c.fail("prompt", "'prompt' is an empty array: give a string or token ids");
        if (v[0].is_string() || v[0].is_array())
            return c.fail("prompt", "'prompt' holds several prompts: batches are not supported, send one request per "
                                    "prompt (they are batched on the server)");
        out->reserve(v.size());
        for (size_t i = 0; i < v.size(); i++) {
            if (!v[i].is_number_integer())
                return c.fail("prompt", "'prompt' must be a string or an array of token ids; item " +
                                            std::to_string(i) + " is " + kind(v[i]));
            const bool neg = v[i].is_number_integer() && !v[i].is_number_unsigned() && v[i].get<int64_t>() < 0;
            const uint64_t id = neg ? 0 : v[i].get<uint64_t>();
            if (neg || id >= (uint64_t)lim.vocab_size)
                return c.fail("prompt", "'prompt' token " + std::to_string(i) + " is " + v[i].dump() +
                                            ", outside the vocabulary (0.." + std::to_string(lim.vocab_size - 1) + ")");
            out->push_back((int)id);
        }
    } else {
        return c.bad_type("prompt", v, "a string or an array of token ids");
    }
    if ((int64_t)out->size() >= lim.context)
        return c.fail("prompt", "the prompt is " + std::to_string(out->size()) + " tokens; this model's context is " +
                                    std::to_string(lim.context) + " tokens, which leaves no room for a completion",
                      400, "context_length_exceeded");
    return true;
}

inline bool parse_stop(const json& v, std::vector<std::string>* out, Checker& c) {
    if (v.is_null()) return true;
    if (v.is_string()) {
        if (v.get<std::string>().empty()) return c.fail("stop", "'stop' must not be an empty string");
        out->push_back(v.get<std::string>());
        return true;
    }
    if (!v.is_array()) return c.bad_type("stop", v, "a string or an array of strings");
    if (v.size() > (size_t)kMaxStops)
        return c.fail("stop", "'stop' holds " + std::to_string(v.size()) + " strings, at most " +
                                  std::to_string(kMaxStops));
    for (const json& s : v) {
        if (!s.is_string()) return c.bad_type("stop", s, "an array of strings; an item");
        if (s.get<std::string>().empty()) return c.fail("stop", "'stop' must not hold an empty string");
        out->push_back(s.get<std::string>());
    }
    return true;
}

}  // namespace completion_request_detail

namespace completion_request_detail {

// The body as a JSON object, or an error (413 over the limit, 400 too deep, not JSON, not an object).
inline bool parse_body(std::string_view body, const ServeLimits& lim, json* j, Checker& c) {
    if (body.size() > lim.max_body_bytes)
        return c.fail("", "the request body is " + std::to_string(body.size()) + " bytes, over the limit of " +
                              std::to_string(lim.max_body_bytes), 413, "body_too_large");
    if (json_depth(body) > kMaxJsonDepth)
        return c.fail("", "the request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    try {
        *j = json::parse(body.begin(), body.end());
    } catch (const json::parse_error& e) {
        return c.fail("", std::string("the request body is not valid JSON: ") + e.what());
    }
    if (!j->is_object()) return c.fail("", std::string("the request body must be a JSON object, not ") + kind(*j));
    return true;
}

// The fields completions and chat completions share: the model, the length, the sampling rule, the seed, stop
// strings, streaming, and the unsupported ones refused unless they ask for the default.
enum class Field { Taken, NotShared, Failed };
struct SharedFields {
    bool has_max_tokens = false, has_stream_options = false;
};
// "model": the served id (or left out); another is 404 model_not_found.
inline bool check_model(const json& v, const ServeLimits& lim, Checker& c) {
    if (!v.is_string()) return c.bad_type("model", v, "a string");
    if (v.get<std::string>() != lim.model)
        return c.fail("model", "the model '" + v.get<std::string>() + "' does not exist: this server serves '" +
                                   lim.model + "'", 404, "model_not_found");
    return true;
}

inline Field parse_shared_field(const std::string& k, const json& v, const ServeLimits& lim, CompletionRequest& r,
                                SharedFields& seen, Checker& c) {
    int64_t n = 0;
    double x = 0;
    auto taken = [](bool ok) { return ok ? Field::Taken : Field::Failed; };
    if (k == "model") {
        return taken(check_model(v, lim, c));
    } else if (k == "max_tokens") {
        if (v.is_null()) return Field::Taken;
        if (!c.integer(k, v, 1, INT32_MAX, &n)) return Field::Failed;
        r.max_tokens = (int)n, seen.has_max_tokens = true;
    } else if (k == "temperature") {
        if (v.is_null()) return Field::Taken;
        if (!c.number(k, v, &x)) return Field::Failed;
        if (!(x >= 0 && x <= 2)) return taken(c.fail(k, "'temperature' must be in [0, 2], not " + v.dump()));
        r.pick.temperature = (float)x;
    } else if (k == "top_p") {
        if (v.is_null()) return Field::Taken;
        if (!c.number(k, v, &x)) return Field::Failed;
        if (!(x > 0 && x <= 1)) return taken(c.fail(k, "'top_p' must be in (0, 1], not " + v.dump()));
        r.pick.top_p = (float)x;
    } else if (k == "top_k") {
        if (v.is_null()) return Field::Taken;
        if (!c.integer(k, v, -1, INT32_MAX, &n)) return Field::Failed;
        r.pick.top_k = n < 0 ? 0 : (int)n;
    } else if (k == "seed") {
        if (v.is_null()) return Field::Taken;
        if (!v.is_number_integer()) return taken(c.bad_type(k, v, "an integer"));
        r.seed = v.is_number_unsigned() ? v.get<uint64_t>() : (uint64_t)v.get<int64_t>();
        r.seeded = true;
    } else if (k == "stop") {
        if (!parse_stop(v, &r.stop, c)) return Field::Failed;
    } else if (k == "stream") {
        if (v.is_null()) return Field::Taken;
        if (!v.is_boolean()) return taken(c.bad_type(k, v, "a boolean"));
        r.stream = v.get<bool>();
    } else if (k == "stream_options") {
        if (v.is_null()) return Field::Taken;
        if (!v.is_object()) return taken(c.bad_type(k, v, "an object"));
        for (auto o = v.begin(); o != v.end(); ++o) {
            if (o.key() != "include_usage")
                return taken(c.fail(k, "'stream_options' takes only include_usage, not '" + o.key() + "'"));
            if (!o.value().is_boolean()) return taken(c.bad_type("stream_options.include_usage", o.value(), "a boolean"));
            r.include_usage = o.value().get<bool>();
        }
        seen.has_stream_options = true;
    } else if (k == "n") {
        if (v.is_null()) return Field::Taken;
        if (!c.integer(k, v, 1, INT32_MAX, &n)) return Field::Failed;
        if (n != 1) return taken(c.fail(k, "only n = 1 is supported (send one request per completion)"));
    } else if (k == "presence_penalty" || k == "frequency_penalty") {
        if (v.is_null()) return Field::Taken;
        if (!c.number(k, v, &x)) return Field::Failed;
        if (x != 0) return taken(c.fail(k, "'" + k + "' is not supported (only 0)"));
    } else if (k == "logit_bias") {
        if (v.is_null()) return Field::Taken;
        if (!v.is_object()) return taken(c.bad_type(k, v, "an object"));
        if (!v.empty()) return taken(c.fail(k, "'logit_bias' is not supported (only {})"));
    } else if (k == "user") {
        if (!v.is_null() && !v.is_string()) return taken(c.bad_type(k, v, "a string"));
    } else if (k == "ignore_eos") {
        if (v.is_null()) return Field::Taken;
        if (!v.is_boolean()) return taken(c.bad_type(k, v, "a boolean"));
        r.ignore_eos = v.get<bool>();
    } else {
        return Field::NotShared;
    }
    return Field::Taken;
}

// What holds once every field is read: stream_options only with a stream; max_tokens (or the server's default, cut
// to what fits) within the context after the prompt.
inline bool finish_shared(const ServeLimits& lim, const SharedFields& seen, CompletionRequest& r, Checker& c) {
    if (seen.has_stream_options && !r.stream) return c.fail("stream_options", "'stream_options' needs 'stream': true");
    const int room = lim.context - (int)r.prompt.size();
    if (!seen.has_max_tokens) {
        r.max_tokens = std::min(lim.max_tokens, room);
    } else if (r.max_tokens > room) {
        return c.fail("max_tokens", "this model's context is " + std::to_string(lim.context) + " tokens; the prompt's " +
                                        std::to_string(r.prompt.size()) + " and max_tokens " +
                                        std::to_string(r.max_tokens) + " exceed it (at most " + std::to_string(room) +
                                        " for this prompt)", 400, "context_length_exceeded");
    }
    return true;
}

// The body parsed with `required` present, and *out reset to the server's defaults (the flags' rule and seed).
inline bool begin_request(std::string_view body, const ServeLimits& lim, const char* required, json* j,
                          CompletionRequest* out, Checker& c) {
    *out = CompletionRequest{};
    if (!parse_body(body, lim, j, c)) return false;
    if (!j->contains(required)) return c.fail(required, std::string("'") + required + "' is required");
    out->pick = lim.pick;
    out->seeded = lim.has_seed, out->seed = lim.seed;
    return true;
}

}  // namespace completion_request_detail

// true with *out filled; false with *err (status 400, 404 for another model, 413 for a body over the limit).
inline bool parse_completion_request(std::string_view body, const ServeLimits& lim, const PromptEncoder& encode,
                                     CompletionRequest* out, ApiError* err) {
    using namespace completion_request_detail;
    Checker c{err};
    json j;
    if (!begin_request(body, lim, "prompt", &j, out, c)) return false;
    CompletionRequest& r = *out;
    SharedFields seen;
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& k = it.key();
        const json& v = it.value();
        const Field f = parse_shared_field(k, v, lim, r, seen, c);
        if (f == Field::Failed) return false;
        if (f == Field::Taken) continue;
        int64_t n = 0;
        if (k == "prompt") {
            if (!parse_prompt(v, lim, encode, &r.prompt, c)) return false;
        } else if (k == "logprobs") {
            if (v.is_null()) continue;
            if (!c.integer(k, v, 0, kMaxLogprobs, &n)) return false;
            r.logprobs = (int)n;
        } else if (k == "best_of") {
            if (v.is_null()) continue;
            if (!c.integer(k, v, 1, INT32_MAX, &n)) return false;
            if (n != 1) return c.fail(k, "only best_of = 1 is supported (send one request per completion)");
        } else if (k == "echo") {
            if (v.is_null()) continue;
            if (!v.is_boolean()) return c.bad_type(k, v, "a boolean");
            if (v.get<bool>()) return c.fail(k, "'echo' is not supported");
        } else if (k == "suffix") {
            if (!v.is_null()) return c.fail(k, "'suffix' is not supported");
        } else {
            return c.fail(k, "unrecognized request argument: '" + k + "'");
        }
    }
    return finish_shared(lim, seen, r, c);
}
