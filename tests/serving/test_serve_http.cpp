// The server end to end on loopback (llmc/serving/http_server.h over cpp-httplib), on the fake engine
// (tests/serving/serve_fake_engine.h): responses in OpenAI's shape with the tokens each request gets alone, streams whose
// pieces join to the whole response and end with "data: [DONE]", usage chunks, logprobs, stop strings across
// tokens, <|endoftext|> and ignore_eos, seeds, the error statuses (400, 404, 405, 413, 429 with Retry-After, 503
// while draining) with JSON bodies, a client that leaves a stream (its request cancelled), and the drain.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tests/serving/serve_http_fixture.h"

namespace {

using namespace serve_test;

TEST(ServeHttp, HealthAndModels) {
    Server s(fake());
    httplib::Client c = s.client();
    auto r = c.Get("/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    json h = json::parse(r->body);
    EXPECT_EQ(h["status"], "ok");
    EXPECT_EQ(h["slots"], 4);
    EXPECT_EQ(h["decode_device_ms"], 0.0);  // no step yet
    r = c.Get("/v1/models");
    ASSERT_TRUE(r);
    json m = json::parse(r->body);
    EXPECT_EQ(m["object"], "list");
    EXPECT_EQ(m["data"][0]["id"], "fake");
    EXPECT_EQ(c.Get("/v1/models/fake")->status, 200);
    r = c.Get("/v1/models/gpt-4");
    EXPECT_EQ(r->status, 404);
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "model_not_found");
}

TEST(ServeHttp, CompletionsAsAloneStreamedOrNot) {
    Server s(fake(4, 40));
    httplib::Client c = s.client();
    for (const json& extra : {json{{"temperature", 0}}, json{{"temperature", 0.9}, {"top_k", 30}, {"seed", 5}}}) {
        json body = {{"prompt", "Hello there"}, {"max_tokens", 60}};
        body.update(extra);
        TokenPick p;
        p.params = PickParams{extra["temperature"].get<float>(), extra.value("top_k", 0), 1.f};
        const auto [text, finish] = s.alone("Hello there", 60, p, extra.value("seed", 0ull));
        int status = 0;
        json r = post_json(c, body, &status);
        ASSERT_EQ(status, 200) << r.dump();
        EXPECT_EQ(r["object"], "text_completion");
        EXPECT_EQ(r["model"], "fake");
        EXPECT_EQ(r["id"].get<std::string>().rfind("cmpl-", 0), 0u);
        EXPECT_GT(r["created"].get<int64_t>(), 1600000000);
        EXPECT_EQ(r["choices"][0]["text"], text);
        EXPECT_EQ(r["choices"][0]["finish_reason"], finish);
        EXPECT_EQ(r["usage"]["prompt_tokens"], 11);
        EXPECT_EQ(r["usage"]["total_tokens"], 11 + r["usage"]["completion_tokens"].get<int>());
        // streamed: the same text in pieces, finish_reason on the last, usage after it, then [DONE]
        body["stream"] = true;
        body["stream_options"] = {{"include_usage", true}};
        const std::vector<std::string> events = post_stream(c, body, &status);
        ASSERT_EQ(status, 200);
        ASSERT_GE(events.size(), 3u);
        EXPECT_EQ(events.back(), "[DONE]");
        std::string joined;
        for (size_t i = 0; i + 2 < events.size(); i++) {
            const json e = json::parse(events[i]);
            EXPECT_EQ(e["object"], "text_completion");
            EXPECT_TRUE(e["usage"].is_null());
            joined += e["choices"][0]["text"].get<std::string>();
            if (i + 3 < events.size()) {
                EXPECT_TRUE(e["choices"][0]["finish_reason"].is_null());
            } else {
                EXPECT_EQ(e["choices"][0]["finish_reason"], finish);
            }
        }
        EXPECT_EQ(joined, text);
        const json usage = json::parse(events[events.size() - 2]);
        EXPECT_TRUE(usage["choices"].empty());
        EXPECT_EQ(usage["usage"], r["usage"]);
    }
}

TEST(ServeHttp, SeedsStopStringsEndOfTextAndLogprobs) {
    Server s(fake(4, 25));
    httplib::Client c = s.client();
    const json sampled = {{"prompt", "abc"}, {"max_tokens", 30}, {"temperature", 1.0}, {"seed", 11}, {"ignore_eos", true}};
    const std::string t1 = post_json(c, sampled)["choices"][0]["text"];
    EXPECT_EQ(post_json(c, sampled)["choices"][0]["text"], t1);
    json other = sampled;
    other["seed"] = 12;
    EXPECT_NE(post_json(c, other)["choices"][0]["text"], t1);
    // <|endoftext|> ends a completion unless ignore_eos; eot_every 25 makes it come early in some of these
    int ended_early = 0;
    for (int i = 0; i < 8; i++) {
        const std::string prompt = "p" + std::to_string(i);
        json r = post_json(c, {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}});
        const auto [text, finish] = s.alone(prompt, 40, {}, 0);
        EXPECT_EQ(r["choices"][0]["text"], text);
        EXPECT_EQ(r["choices"][0]["finish_reason"], finish);
        ended_early += finish == "stop";
        r = post_json(c, {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}});
        EXPECT_EQ(r["usage"]["completion_tokens"], 40);
        EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
    }
    EXPECT_GT(ended_early, 0);
    // a stop string from the middle of the greedy text (each token is one byte: it spans tokens), left out
    const std::string full = post_json(c, {{"prompt", "xyz"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}})["choices"][0]["text"];
    size_t at = 5;
    while (at + 3 < full.size() && (full.substr(at, 3).find_first_not_of(
                                        " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~") != std::string::npos))
        at++;
    ASSERT_LT(at + 3, full.size()) << "no ASCII run in " << full;
    const std::string stop = full.substr(at, 3);
    json r = post_json(c, {{"prompt", "xyz"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}, {"stop", {"\u00e9\u00e9\u00e9", stop}}});
    EXPECT_EQ(r["choices"][0]["text"], full.substr(0, full.find(stop)));
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    EXPECT_LT(r["usage"]["completion_tokens"].get<int>(), 40);
    // logprobs: one entry per token, the engine's values, top N each
    r = post_json(c, {{"prompt", "lp"}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 2}, {"ignore_eos", true}});
    const json& lp = r["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 12u);
    ASSERT_EQ(lp["top_logprobs"].size(), 12u);
    EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
    TokenPick p;
    p.top_logprobs = 2;
    std::vector<int> seq = encode("lp");
    const PickedToken first = FakeEngine::pick(seq, p, kV, kEot, 25);
    EXPECT_FLOAT_EQ(lp["token_logprobs"][0].get<float>(), first.logprob);
    EXPECT_EQ(lp["tokens"][0], token_display(s.vocab, kEot, first.token));
    EXPECT_EQ(lp["text_offset"][0], 0);
}

TEST(ServeHttp, ErrorStatusesWithJsonBodies) {
    Server s(fake(), {}, 2048);
    httplib::Client c = s.client();
    auto expect_error = [&](const httplib::Result& r, int status, const std::string& param) {
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, status) << r->body;
        const json j = json::parse(r->body);
        ASSERT_TRUE(j.contains("error")) << r->body;
        EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
        if (param.empty()) {
            EXPECT_TRUE(j["error"]["param"].is_null()) << r->body;
        } else {
            EXPECT_EQ(j["error"]["param"], param) << r->body;
        }
    };
    expect_error(c.Post("/v1/completions", "{not json", "application/json"), 400, "");
    expect_error(c.Post("/v1/completions", R"({"prompt": "x", "n": 3})", "application/json"), 400, "n");
    expect_error(c.Post("/v1/completions", R"({"prompt": "x", "temperature": 9})", "application/json"), 400, "temperature");
    expect_error(c.Post("/v1/completions", R"({"prompt": "x", "model": "m"})", "application/json"), 404, "model");
    expect_error(c.Post("/v1/completions", "{\"prompt\": \"" + std::string(200, 'a') + "\"}", "application/json"), 400, "prompt");
    expect_error(c.Post("/v1/completions", std::string(3000, ' '), "application/json"), 413, "");
    expect_error(c.Post("/v1/embeddings", "{}", "application/json"), 404, "");
    auto r = c.Get("/v1/completions");
    expect_error(r, 405, "");
    EXPECT_EQ(r->get_header_value("Allow"), "POST");
    // not HTTP at all, a truncated body, a client that closes at once: answered or dropped, never a crash
    for (const std::string& raw : {std::string("GARBAGE\r\n\r\n"), std::string("POST /v1/completions HTTP/1.1\r\n"
                                  "Content-Length: 100\r\n\r\n{\"prompt\""), std::string("")}) {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)s.server.port());
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(connect(fd, (sockaddr*)&a, sizeof(a)), 0);
        if (!raw.empty()) {
            ASSERT_EQ(send(fd, raw.data(), raw.size(), 0), (ssize_t)raw.size());
        }
        shutdown(fd, SHUT_WR);
        char buf[256];
        while (recv(fd, buf, sizeof(buf), 0) > 0) {  // whatever it answers, until it closes
        }
        close(fd);
    }
    // still serving after all that
    EXPECT_EQ(post_json(c, {{"prompt", "ok"}, {"max_tokens", 2}, {"ignore_eos", true}})["usage"]["completion_tokens"], 2);
}

TEST(ServeHttp, QueueFullIs429WithRetryAfter) {
    SchedulerOptions so;
    so.max_queue = 0;
    Server s(fake(1, 0, 20000), so);  // one slot, no queue, 20 ms a step
    std::thread first([&] {
        httplib::Client c = s.client();
        post_json(c, {{"prompt", "slow"}, {"max_tokens", 20}, {"ignore_eos", true}});
    });
    for (int i = 0; i < 500 && s.scheduler.stats().running == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ASSERT_EQ(s.scheduler.stats().running, 1);
    httplib::Client c = s.client();
    auto r = c.Post("/v1/completions", R"({"prompt": "x"})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 429);
    EXPECT_EQ(r->get_header_value("Retry-After"), "1");
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "queue_full");
    first.join();
    EXPECT_EQ(post_json(c, {{"prompt", "x"}, {"max_tokens", 1}})["usage"]["completion_tokens"], 1);
}

TEST(ServeHttp, ClientLeavingAStreamCancelsIt) {
    Server s(fake(2, 0, 5000));  // 5 ms a step
    httplib::Client c = s.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"prompt", "long"}, {"max_tokens", 120}, {"stream", true}, {"ignore_eos", true}}.dump();
    req.set_header("Content-Type", "application/json");
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };  // leave early
    c.send(req);
    c.stop();
    const auto t0 = std::chrono::steady_clock::now();
    while (s.scheduler.stats().cancelled == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(s.scheduler.stats().cancelled, 1u);
    EXPECT_LT(s.scheduler.stats().tokens, 120u);  // it left well before its end
    EXPECT_EQ(s.scheduler.stats().running, 0);
}

TEST(ServeHttp, DrainFinishesStreamsAndRefusesNewRequests) {
    Server s(fake(2, 0, 10000));  // 10 ms a step
    std::vector<std::string> events;
    std::thread streaming([&] {
        httplib::Client c = s.client();
        events = post_stream(c, {{"prompt", "drain"}, {"max_tokens", 25}, {"stream", true}, {"ignore_eos", true}});
    });
    for (int i = 0; i < 500 && s.scheduler.stats().running == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::thread drainer([&] { s.server.drain_and_stop(); });
    for (int i = 0; i < 500 && !s.scheduler.stats().draining; i++) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    httplib::Client c = s.client();
    auto r = c.Post("/v1/completions", R"({"prompt": "late"})", "application/json");
    if (r) {  // refused with 503, or (once the listener stopped) no connection at all
        EXPECT_EQ(r->status, 503);
        EXPECT_EQ(json::parse(r->body)["error"]["type"], "server_shutting_down");
    }
    drainer.join();
    streaming.join();
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events.back(), "[DONE]");
    EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(s.scheduler.stats().finished, 1u);
    EXPECT_EQ(s.scheduler.stats().cancelled, 0u);
}

}  // namespace
