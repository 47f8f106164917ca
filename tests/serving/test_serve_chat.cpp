// Chat completions, tokenize and detokenize (llmc/serving/chat_template.h, chat_request.h, chat_json.h,
// tokenize_request.h): the default template's prompt, templates from files (and each way a file can be wrong, one
// message naming it), chat's own fields and errors; on the server (fake engine) a chat reply is exactly the
// completion of the rendered conversation with the template's stop strings, in chat's shapes, whole or streamed
// (the first delta carries the role, the deltas join to the whole reply), with chat's logprobs; /tokenize and
// /detokenize round-trip, take a conversation, and refuse what is not theirs.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "llmc/serving/chat_request.h"
#include "tests/serving/serve_http_fixture.h"

namespace {

using namespace serve_test;

TEST(ServeChat, TheDefaultTemplate) {
    const ChatTemplate t;
    EXPECT_EQ(t.render({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Why?"}}),
              "Be brief.\n\nUser: Hi\nAssistant: Hello.\nUser: Why?\nAssistant:");
    EXPECT_EQ(t.stop, std::vector<std::string>{"\nUser:"});
}

std::string write_file(const std::string& name, const std::string& text) {
    const std::string path = ::testing::TempDir() + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

TEST(ServeChat, TemplatesFromFilesAndTheirErrors) {
    const std::string good = write_file("good.json", R"({"system": "<s>{content}</s>", "user": "Q: {content}\n",
        "assistant": "A: {content}\n", "generation_prompt": "A:", "stop": ["\nQ:", "</s>"]})");
    const ChatTemplate t = ChatTemplate::load(good);
    EXPECT_EQ(t.render({{"system", "x"}, {"user", "y"}}), "<s>x</s>Q: y\nA:");
    EXPECT_EQ(t.stop, (std::vector<std::string>{"\nQ:", "</s>"}));
    auto error_of = [](const std::string& path) {
        try {
            ChatTemplate::load(path);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const std::string all = R"("system": "{content}", "user": "{content}", "assistant": "{content}", "generation_prompt": "")";
    struct Case { const char* name; std::string text, want; };
    const std::vector<Case> cases = {
        {"notjson.json", "{", "not valid JSON"},
        {"array.json", "[]", "must be a JSON object"},
        {"unknown.json", "{" + all + R"(, "stop": [], "bos": "x"})", "unknown key 'bos'"},
        {"nostop.json", "{" + all + "}", "has no 'stop'"},
        {"nocontent.json", R"({"system": "{content}", "user": "User:", "assistant": "{content}", "generation_prompt": "", "stop": []})",
         "'user' must hold \"{content}\" exactly once"},
        {"twice.json", R"({"system": "{content}{content}", "user": "{content}", "assistant": "{content}", "generation_prompt": "", "stop": []})",
         "'system' must hold"},
        {"stops.json", "{" + all + R"(, "stop": ["a", "b", "c", "d", "e"]})", "at most 4"},
        {"emptystop.json", "{" + all + R"(, "stop": [""]})", "non-empty"},
        {"number.json", R"({"system": 1, "user": "{content}", "assistant": "{content}", "generation_prompt": "", "stop": []})",
         "'system' must be a string"},
    };
    for (const Case& c : cases) {
        const std::string path = write_file(c.name, c.text);
        const std::string e = error_of(path);
        EXPECT_NE(e.find(path), std::string::npos) << e;
        EXPECT_NE(e.find(c.want), std::string::npos) << c.name << ": " << e;
    }
    const std::string missing = error_of(::testing::TempDir() + "no_such_template.json");
    EXPECT_NE(missing.find("cannot open"), std::string::npos) << missing;
}

ServeLimits limits() {
    ServeLimits l;
    l.model = "fake", l.context = 128, l.vocab_size = kV;
    return l;
}

TEST(ServeChat, ChatFieldsAndErrors) {
    const ChatTemplate t;
    CompletionRequest r;
    ApiError e;
    ASSERT_TRUE(parse_chat_request(R"({"messages": [{"role": "developer", "content": [{"type": "text", "text": "S"},
        {"type": "text", "text": "T"}]}, {"role": "user", "content": "Hi", "name": "ann"}], "max_completion_tokens": 5,
        "logprobs": true, "top_logprobs": 2, "stop": "!", "seed": 3})", limits(), encode, t, &r, &e)) << e.message;
    EXPECT_EQ(r.prompt, encode("ST\n\nUser: Hi\nAssistant:"));
    EXPECT_EQ(r.max_tokens, 5);
    EXPECT_EQ(r.logprobs, 2);
    EXPECT_EQ(r.stop, (std::vector<std::string>{"!", "\nUser:"}));
    EXPECT_TRUE(r.seeded);
    ASSERT_TRUE(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}]})", limits(), encode, t, &r, &e));
    EXPECT_EQ(r.logprobs, -1);
    struct Bad { const char* body; const char* param; const char* says; int status; };
    const std::vector<Bad> bad = {
        {R"({})", "messages", "required", 400},
        {R"({"messages": []})", "messages", "empty", 400},
        {R"({"messages": "hi"})", "messages", "must be an array", 400},
        {R"({"messages": [{"content": "x"}]})", "messages[0].role", "required", 400},
        {R"({"messages": [{"role": "user"}]})", "messages[0].content", "required", 400},
        {R"({"messages": [{"role": "tool", "content": "x"}]})", "messages[0].role", "tools are not supported", 400},
        {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content", "a string or an array", 400},
        {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
         "messages[0].content[0]", "text only", 400},
        {R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", "messages[0].tool_calls",
         "not supported", 400},
        {R"({"messages": [{"role": "user", "content": "x"}], "prompt": "y"})", "prompt", "take 'messages'", 400},
        {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs", "needs", 400},
        {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs", "a boolean", 400},
        {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "max_completion_tokens": 5})",
         "max_completion_tokens", "differ", 400},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": []})", "tools", "unrecognized", 400},
        {R"({"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"})", "model", "does not exist", 404},
        {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 200})", "max_tokens", "context", 400},
    };
    for (const Bad& b : bad) {
        EXPECT_FALSE(parse_chat_request(b.body, limits(), encode, t, &r, &e)) << b.body;
        EXPECT_EQ(e.param, b.param) << b.body;
        EXPECT_NE(e.message.find(b.says), std::string::npos) << b.body << ": " << e.message;
        EXPECT_EQ(e.status, b.status) << b.body;
    }
    const std::string long_content(200, 'x');
    EXPECT_FALSE(parse_chat_request(R"({"messages": [{"role": "user", "content": ")" + long_content + R"("}]})",
                                    limits(), encode, t, &r, &e));
    EXPECT_EQ(e.code, "context_length_exceeded");
}

TEST(ServeChat, ARepliesIsTheCompletionOfTheRenderedConversation) {
    Server s(fake());
    httplib::Client c = s.client();
    const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello"}}};
    const std::string rendered = ChatTemplate{}.render({{"system", "Be brief."}, {"user", "Hello"}});
    const json as_completion = post_json(c, {{"prompt", rendered}, {"max_tokens", 12}, {"seed", 5},
                                             {"temperature", 0.7}, {"stop", {"\nUser:"}}});
    int status = 0;
    auto r = c.Post("/v1/chat/completions",
                    json({{"messages", messages}, {"max_tokens", 12}, {"seed", 5}, {"temperature", 0.7}}).dump(),
                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    const json chat = json::parse(r->body);
    EXPECT_EQ(chat["object"], "chat.completion");
    EXPECT_EQ(chat["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
    EXPECT_EQ(chat["model"], "fake");
    EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(chat["choices"][0]["message"]["content"], as_completion["choices"][0]["text"]);
    EXPECT_EQ(chat["choices"][0]["finish_reason"], as_completion["choices"][0]["finish_reason"]);
    EXPECT_EQ(chat["usage"], as_completion["usage"]);
    EXPECT_TRUE(chat["choices"][0]["logprobs"].is_null());
    // streamed: the first delta has the role, the deltas join to the whole reply, the last has the finish reason
    const std::vector<std::string> events =
        post_stream(c, {{"messages", messages}, {"max_tokens", 12}, {"seed", 5}, {"temperature", 0.7}, {"stream", true},
                        {"stream_options", {{"include_usage", true}}}}, nullptr, "/v1/chat/completions");
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::string joined;
    for (size_t i = 0; i + 2 < events.size(); i++) {
        const json e = json::parse(events[i]);
        EXPECT_EQ(e["object"], "chat.completion.chunk");
        EXPECT_EQ(e["id"], json::parse(events[0])["id"]);
        const json& d = e["choices"][0]["delta"];
        EXPECT_EQ(d.contains("role"), i == 0) << events[i];
        if (d.contains("content")) joined += d["content"].get<std::string>();
        EXPECT_EQ(e["choices"][0]["finish_reason"].is_null(), i + 3 < events.size()) << events[i];
    }
    EXPECT_EQ(joined, chat["choices"][0]["message"]["content"]);
    const json usage = json::parse(events[events.size() - 2]);
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"], chat["usage"]);
    // logprobs in chat's shape: one entry per token, each with its bytes and the top alternatives
    const json lp = post_json(c, {{"prompt", "x"}}, &status);  // warm: the server answers completions meanwhile
    EXPECT_EQ(status, 200);
    auto rl = c.Post("/v1/chat/completions",
                     json({{"messages", messages}, {"max_tokens", 6}, {"ignore_eos", true}, {"logprobs", true},
                           {"top_logprobs", 2}}).dump(), "application/json");
    ASSERT_TRUE(rl);
    const json withlp = json::parse(rl->body);
    const json& content = withlp["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(content.size(), 6u) << rl->body;
    for (const json& t : content) {
        EXPECT_TRUE(t["token"].is_string());
        EXPECT_LE(t["logprob"].get<double>(), 0.0);
        EXPECT_TRUE(t["bytes"].is_array());
        EXPECT_EQ(t["top_logprobs"].size(), 2u);
    }
    // errors in OpenAI's shape; GET is 405
    auto bad = c.Post("/v1/chat/completions", R"({"messages": []})", "application/json");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400);
    EXPECT_EQ(json::parse(bad->body)["error"]["param"], "messages");
    auto get = c.Get("/v1/chat/completions");
    ASSERT_TRUE(get);
    EXPECT_EQ(get->status, 405);
}

TEST(ServeChat, TokenizeAndDetokenize) {
    Server s(fake());
    httplib::Client c = s.client();
    auto post = [&](const char* path, const json& body, int* status) {
        auto r = c.Post(path, body.dump(), "application/json");
        EXPECT_TRUE(r);
        if (!r) return json();
        *status = r->status;
        return json::parse(r->body);
    };
    int status = 0;
    json t = post("/tokenize", {{"prompt", "Hello"}, {"model", "fake"}, {"return_token_strs", true}}, &status);
    EXPECT_EQ(status, 200);
    EXPECT_EQ(t["tokens"], json(encode("Hello")));
    EXPECT_EQ(t["count"], 5);
    EXPECT_EQ(t["max_model_len"], 128);
    EXPECT_EQ(t["token_strs"], json({"H", "e", "l", "l", "o"}));
    json d = post("/detokenize", {{"tokens", t["tokens"]}}, &status);
    EXPECT_EQ(status, 200);
    EXPECT_EQ(d["prompt"], "Hello");
    d = post("/detokenize", {{"tokens", {95, 96, 97}}}, &status);  // the euro sign's halves, then a stray byte
    EXPECT_EQ(d["prompt"], "\xE2\x82\xAC\xEF\xBF\xBD");
    json m = post("/tokenize", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, &status);
    EXPECT_EQ(status, 200);
    EXPECT_EQ(m["tokens"], json(encode("User: Hi\nAssistant:")));
    struct Bad { const char* path; json body; int status; const char* param; };
    const std::vector<Bad> bad = {
        {"/tokenize", json::object(), 400, "prompt"},
        {"/tokenize", {{"prompt", "x"}, {"messages", json::array()}}, 400, "prompt"},
        {"/tokenize", {{"prompt", 5}}, 400, "prompt"},
        {"/tokenize", {{"prompt", "x"}, {"extra", 1}}, 400, "extra"},
        {"/tokenize", {{"prompt", "x"}, {"model", "other"}}, 404, "model"},
        {"/detokenize", json::object(), 400, "tokens"},
        {"/detokenize", {{"tokens", {1, kV}}}, 400, "tokens"},
        {"/detokenize", {{"tokens", {-1}}}, 400, "tokens"},
        {"/detokenize", {{"tokens", {1.5}}}, 400, "tokens"},
        {"/detokenize", {{"tokens", "12"}}, 400, "tokens"},
    };
    for (const Bad& b : bad) {
        const json e = post(b.path, b.body, &status);
        EXPECT_EQ(status, b.status) << b.path << " " << b.body.dump();
        EXPECT_EQ(e["error"]["param"], b.param) << b.path << " " << b.body.dump();
    }
    auto get = c.Get("/tokenize");
    ASSERT_TRUE(get);
    EXPECT_EQ(get->status, 405);
}

}  // namespace
