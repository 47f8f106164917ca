// POST /v1/completions bodies (llmc/serving/completion_request.h): every field's accepted values and defaults, and
// the bad-input table (each invalid field a 400 naming it, another model 404, a body over the limit 413, a prompt
// or prompt + max_tokens past the context 400), with OpenAI's error shape (llmc/serving/completion_json.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/serving/completion_json.h"
#include "llmc/serving/completion_request.h"

namespace {

// A byte-level prompt encoder: each byte its own token (ids 0..255); the test model has V 300 and context 64.
ServeLimits limits() {
    ServeLimits l;
    l.model = "test-model";
    l.context = 64;
    l.vocab_size = 300;
    l.max_body_bytes = 4096;
    l.max_tokens = 16;
    return l;
}
std::vector<int> bytes_encoder(const std::string& s) {
    std::vector<int> ids;
    for (unsigned char c : s) ids.push_back(c);
    return ids;
}

struct Parsed {
    bool ok;
    CompletionRequest r;
    ApiError e;
};
Parsed parse(const std::string& body, const ServeLimits& l = limits()) {
    Parsed p;
    p.ok = parse_completion_request(body, l, bytes_encoder, &p.r, &p.e);
    return p;
}

TEST(ServeRequest, DefaultsAndEveryField) {
    Parsed p = parse(R"({"prompt": "Hi"})");
    ASSERT_TRUE(p.ok) << p.e.message;
    EXPECT_EQ(p.r.prompt, (std::vector<int>{'H', 'i'}));
    EXPECT_EQ(p.r.max_tokens, 16);
    EXPECT_EQ(p.r.pick.temperature, 1.0f);
    EXPECT_EQ(p.r.pick.top_k, 0);
    EXPECT_EQ(p.r.pick.top_p, 1.0f);
    EXPECT_FALSE(p.r.seeded);
    EXPECT_FALSE(p.r.stream);
    EXPECT_EQ(p.r.logprobs, -1);
    EXPECT_TRUE(p.r.stop.empty());

    p = parse(R"({"model": "test-model", "prompt": [1, 2, 299], "max_tokens": 61, "temperature": 0, "top_p": 0.5,
                  "top_k": 40, "seed": 18446744073709551615, "stop": ["a", "bc"], "stream": true,
                  "stream_options": {"include_usage": true}, "logprobs": 5, "n": 1, "best_of": 1, "echo": false,
                  "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "suffix": null, "user": "u",
                  "ignore_eos": true})");
    ASSERT_TRUE(p.ok) << p.e.message;
    EXPECT_EQ(p.r.prompt, (std::vector<int>{1, 2, 299}));
    EXPECT_EQ(p.r.max_tokens, 61);
    EXPECT_EQ(p.r.pick.temperature, 0.0f);
    EXPECT_TRUE(p.r.pick.greedy());
    EXPECT_EQ(p.r.pick.top_p, 0.5f);
    EXPECT_EQ(p.r.pick.top_k, 40);
    EXPECT_TRUE(p.r.seeded);
    EXPECT_EQ(p.r.seed, 18446744073709551615ull);
    EXPECT_EQ(p.r.stop, (std::vector<std::string>{"a", "bc"}));
    EXPECT_TRUE(p.r.stream);
    EXPECT_TRUE(p.r.include_usage);
    EXPECT_EQ(p.r.logprobs, 5);
    EXPECT_TRUE(p.r.ignore_eos);

    p = parse(R"({"prompt": "x", "top_k": -1, "seed": -5, "stop": "\n", "logprobs": 0, "max_tokens": null})");
    ASSERT_TRUE(p.ok) << p.e.message;
    EXPECT_EQ(p.r.pick.top_k, 0);
    EXPECT_EQ(p.r.seed, (uint64_t)(int64_t)-5);
    EXPECT_EQ(p.r.stop, std::vector<std::string>{"\n"});
    EXPECT_EQ(p.r.logprobs, 0);
}

TEST(ServeRequest, ServerDefaultsAndTheRoomLeft) {
    ServeLimits l = limits();
    l.max_tokens = 100;
    l.pick = PickParams{0.7f, 20, 0.9f};
    l.has_seed = true, l.seed = 99;
    Parsed p = parse(R"({"prompt": "0123456789"})", l);
    ASSERT_TRUE(p.ok);
    EXPECT_EQ(p.r.max_tokens, 54);  // 100 does not fit: what the context leaves
    EXPECT_EQ(p.r.pick.temperature, 0.7f);
    EXPECT_EQ(p.r.pick.top_k, 20);
    EXPECT_EQ(p.r.pick.top_p, 0.9f);
    EXPECT_TRUE(p.r.seeded);
    EXPECT_EQ(p.r.seed, 99u);
    p = parse(R"({"prompt": "0123456789", "seed": 3, "temperature": 1.5})", l);
    EXPECT_EQ(p.r.seed, 3u);
    EXPECT_EQ(p.r.pick.temperature, 1.5f);
    // a model whose vocabulary is smaller than the tokenizer's: the encoded prompt is checked too
    l.vocab_size = 100;
    p = parse(R"({"prompt": "a~"})", l);
    ASSERT_FALSE(p.ok);
    EXPECT_EQ(p.e.param, "prompt");
    EXPECT_NE(p.e.message.find("encodes to token 126 (at 1), outside this model's vocabulary (0..99)"), std::string::npos)
        << p.e.message;
}

// The bad-input table: body -> status, param ("" = null), a piece of the message, code ("" = null or any).
struct Bad {
    std::string body;
    int status;
    std::string param, message, code;
};

TEST(ServeRequest, BadInputTable) {
    const std::string long_prompt(64, 'a'), big(5000, ' ');
    const std::string deep = std::string(100, '[') + std::string(100, ']');
    const std::vector<Bad> table = {
        {"{", 400, "", "not valid JSON", ""},
        {"", 400, "", "not valid JSON", ""},
        {"[]", 400, "", "must be a JSON object", ""},
        {"\"prompt\"", 400, "", "must be a JSON object", ""},
        {"{}", 400, "prompt", "required", ""},
        {R"({"prompt": 5})", 400, "prompt", "a string or an array", ""},
        {R"({"prompt": ""})", 400, "prompt", "empty", ""},
        {R"({"prompt": []})", 400, "prompt", "empty array", ""},
        {R"({"prompt": ["a", "b"]})", 400, "prompt", "batches are not supported", ""},
        {R"({"prompt": [[1, 2]]})", 400, "prompt", "batches are not supported", ""},
        {R"({"prompt": [1, "a"]})", 400, "prompt", "item 1", ""},
        {R"({"prompt": [1, 300]})", 400, "prompt", "outside the vocabulary", ""},
        {R"({"prompt": [-1]})", 400, "prompt", "outside the vocabulary", ""},
        {R"({"prompt": [1.5]})", 400, "prompt", "item 0", ""},
        {R"({"prompt": [18446744073709551615]})", 400, "prompt", "outside the vocabulary", ""},
        {"{\"prompt\": \"" + long_prompt + "\"}", 400, "prompt", "no room", "context_length_exceeded"},
        {R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens", "[1, ", ""},
        {R"({"prompt": "x", "max_tokens": "16"})", 400, "max_tokens", "an integer", ""},
        {R"({"prompt": "x", "max_tokens": 16.0})", 400, "max_tokens", "an integer", ""},
        {R"({"prompt": "x", "max_tokens": true})", 400, "max_tokens", "an integer", ""},
        {R"({"prompt": "x", "max_tokens": 64})", 400, "max_tokens", "at most 63", "context_length_exceeded"},
        {R"({"prompt": "x", "temperature": -0.1})", 400, "temperature", "[0, 2]", ""},
        {R"({"prompt": "x", "temperature": 2.5})", 400, "temperature", "[0, 2]", ""},
        {R"({"prompt": "x", "temperature": "1"})", 400, "temperature", "a number", ""},
        {R"({"prompt": "x", "top_p": 0})", 400, "top_p", "(0, 1]", ""},
        {R"({"prompt": "x", "top_p": 1.01})", 400, "top_p", "(0, 1]", ""},
        {R"({"prompt": "x", "top_k": -2})", 400, "top_k", "[-1, ", ""},
        {R"({"prompt": "x", "top_k": 0.5})", 400, "top_k", "an integer", ""},
        {R"({"prompt": "x", "seed": "7"})", 400, "seed", "an integer", ""},
        {R"({"prompt": "x", "seed": 1.5})", 400, "seed", "an integer", ""},
        {R"({"prompt": "x", "stop": ""})", 400, "stop", "empty", ""},
        {R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", 400, "stop", "at most 4", ""},
        {R"({"prompt": "x", "stop": [1]})", 400, "stop", "an array of strings", ""},
        {R"({"prompt": "x", "stop": ["a", ""]})", 400, "stop", "empty", ""},
        {R"({"prompt": "x", "stop": {"a": 1}})", 400, "stop", "a string or an array", ""},
        {R"({"prompt": "x", "stream": "yes"})", 400, "stream", "a boolean", ""},
        {R"({"prompt": "x", "stream_options": {"include_usage": true}})", 400, "stream_options", "needs 'stream'", ""},
        {R"({"prompt": "x", "stream": true, "stream_options": {"x": 1}})", 400, "stream_options", "only include_usage", ""},
        {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})", 400,
         "stream_options.include_usage", "a boolean", ""},
        {R"({"prompt": "x", "logprobs": 6})", 400, "logprobs", "[0, 5]", ""},
        {R"({"prompt": "x", "logprobs": -1})", 400, "logprobs", "[0, 5]", ""},
        {R"({"prompt": "x", "logprobs": true})", 400, "logprobs", "an integer", ""},
        {R"({"prompt": "x", "n": 2})", 400, "n", "only n = 1", ""},
        {R"({"prompt": "x", "n": 0})", 400, "n", "[1, ", ""},
        {R"({"prompt": "x", "best_of": 3})", 400, "best_of", "only best_of = 1", ""},
        {R"({"prompt": "x", "echo": true})", 400, "echo", "not supported", ""},
        {R"({"prompt": "x", "presence_penalty": 0.5})", 400, "presence_penalty", "not supported", ""},
        {R"({"prompt": "x", "frequency_penalty": -1})", 400, "frequency_penalty", "not supported", ""},
        {R"({"prompt": "x", "logit_bias": {"1": 2}})", 400, "logit_bias", "not supported", ""},
        {R"({"prompt": "x", "suffix": "y"})", 400, "suffix", "not supported", ""},
        {R"({"prompt": "x", "user": 5})", 400, "user", "a string", ""},
        {R"({"prompt": "x", "ignore_eos": 1})", 400, "ignore_eos", "a boolean", ""},
        {R"({"prompt": "x", "model": 5})", 400, "model", "a string", ""},
        {R"({"prompt": "x", "model": "gpt-4"})", 404, "model", "does not exist", "model_not_found"},
        {R"({"prompt": "x", "foo": 1})", 400, "foo", "unrecognized request argument", ""},
        {"{\"prompt\": \"x\", \"pad\": \"" + big + "\"}", 413, "", "over the limit", "body_too_large"},
        {deep, 400, "", "nests deeper", ""},
        {"{\"prompt\": \"\xFF\"}", 400, "", "not valid JSON", ""},
    };
    for (const Bad& b : table) {
        const Parsed p = parse(b.body);
        const std::string shown = b.body.substr(0, 80);
        ASSERT_FALSE(p.ok) << shown;
        EXPECT_EQ(p.e.status, b.status) << shown << ": " << p.e.message;
        EXPECT_EQ(p.e.param, b.param) << shown << ": " << p.e.message;
        EXPECT_NE(p.e.message.find(b.message), std::string::npos) << shown << ": '" << p.e.message << "' lacks '"
                                                                   << b.message << "'";
        if (!b.code.empty()) {
            EXPECT_EQ(p.e.code, b.code) << shown;
        }
        // OpenAI's shape, valid JSON whatever the input held
        const nlohmann::json j = nlohmann::json::parse(api_error_json(p.e));
        ASSERT_TRUE(j.contains("error")) << shown;
        EXPECT_EQ(j["error"]["message"], utf8::sanitize(p.e.message));
        EXPECT_EQ(j["error"]["type"], "invalid_request_error");
        if (b.param.empty()) {
            EXPECT_TRUE(j["error"]["param"].is_null()) << shown;
        } else {
            EXPECT_EQ(j["error"]["param"], b.param) << shown;
        }
    }
}

TEST(ServeRequest, ResponsesInOpenAIsShape) {
    const CompletionIds ids{"cmpl-1", 1700000000, "m"};
    SequenceEnd end;
    end.reason = FinishReason::Length;
    end.prompt_tokens = 3, end.completion_tokens = 2;
    const std::vector<std::string> vocab = {"a", "\xE2\x82", "\xAC", "<|endoftext|>"};
    std::vector<TokenRecord> toks = {{1, -0.5f, {{1, -0.5f}, {0, -1.5f}}, 0}, {2, -0.25f, {{2, -0.25f}, {3, -2.f}}, 2}};
    nlohmann::json j = nlohmann::json::parse(completion_json(ids, "\xE2\x82\xAC", end, logprobs_json(toks, 2, vocab, 3)));
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["text"], "\xE2\x82\xAC");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["total_tokens"], 5);
    EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"][0], "bytes:\\xe2\\x82");  // half a character
    EXPECT_EQ(j["choices"][0]["logprobs"]["token_logprobs"][1], -0.25);
    EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][1]["<|endoftext|>"], -2.0);
    EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"][1], 2);
    EXPECT_TRUE(nlohmann::json::parse(completion_json(ids, "x", end, logprobs_json({}, -1, vocab, 3)))["choices"][0]["logprobs"].is_null());
    j = nlohmann::json::parse(stream_chunk_json(ids, "x", nullptr, nullptr, true));
    EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
    EXPECT_TRUE(j.contains("usage") && j["usage"].is_null());
    end.reason = FinishReason::Stop;
    j = nlohmann::json::parse(stream_chunk_json(ids, "", &end, nullptr, false));
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    EXPECT_FALSE(j.contains("usage"));
    j = nlohmann::json::parse(usage_chunk_json(ids, end));
    EXPECT_TRUE(j["choices"].empty());
    EXPECT_EQ(j["usage"]["completion_tokens"], 2);
    // invalid UTF-8 in text never reaches the client
    EXPECT_TRUE(utf8::is_valid(completion_json(ids, "a\xFF", end, nullptr)));
}

}  // namespace
