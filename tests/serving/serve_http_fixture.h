// The server on loopback for the HTTP tests (tests/serving/test_serve_*.cpp): the fake engine
// (tests/serving/serve_fake_engine.h) under a scheduler and a CompletionServer on a free port, a client, what a request
// gets alone, and the request helpers. Test code.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "llmc/serving/http_server.h"
#include "tests/serving/serve_fake_engine.h"

namespace serve_test {

using json = nlohmann::json;

// The test vocabulary: ids 0..94 printable ASCII, 95 and 96 the halves of the euro sign, 97 a byte that is never
// valid UTF-8, 98 "é", 99 <|endoftext|>.
constexpr int kV = 100, kEot = 99;
inline std::vector<std::string> test_vocab() {
    std::vector<std::string> v;
    for (int c = 32; c < 127; c++) v.push_back(std::string(1, (char)c));
    v.push_back("\xE2\x82");
    v.push_back("\xAC");
    v.push_back("\xFF");
    v.push_back("\xC3\xA9");
    v.push_back("<|endoftext|>");
    return v;
}
inline std::vector<int> encode(const std::string& s) {
    std::vector<int> ids;
    for (unsigned char c : s) ids.push_back(c >= 32 && c < 127 ? c - 32 : 0);
    return ids;
}

struct Server {
    std::vector<std::string> vocab = test_vocab();
    FakeEngine engine;
    Scheduler scheduler;
    CompletionServer server;
    std::thread engine_thread, listen_thread;

    static ServeSetup setup_of(const std::vector<std::string>* vocab, size_t max_body) {
        ServeSetup s;
        s.limits.model = "fake";
        s.limits.context = 128;
        s.limits.vocab_size = kV;
        s.limits.max_body_bytes = max_body;
        s.encode = encode;
        s.token_bytes = vocab;
        s.eot = kEot;
        s.log = nullptr;
        return s;
    }
    Server(FakeEngineOptions fo, SchedulerOptions so = {}, size_t max_body = 1 << 16)
        : engine(fo), scheduler(&engine, so), server(&scheduler, setup_of(&vocab, max_body)) {
        std::string error;
        EXPECT_TRUE(server.bind("127.0.0.1", 0, &error)) << error;
        engine_thread = std::thread([this] { scheduler.run(); });
        listen_thread = std::thread([this] { server.listen(); });
        for (int i = 0; i < 500 && !server.running(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ~Server() {
        scheduler.shut_down();  // whatever still runs ends (cancelled), so no request thread waits on it
        engine_thread.join();
        server.stop();
        listen_thread.join();
    }
    httplib::Client client() {
        httplib::Client c("127.0.0.1", server.port());
        c.set_read_timeout(10, 0);
        return c;
    }
    // What a request alone gets: its text (the fake engine's tokens, <|endoftext|> left out) and finish reason.
    std::pair<std::string, std::string> alone(const std::string& prompt, int max_tokens, TokenPick p, uint64_t seed,
                                              bool ignore_eos = false) {
        const std::vector<int> toks = engine.alone(encode(prompt), max_tokens, p, seed, ignore_eos ? -1 : kEot);
        std::string bytes;
        for (int t : toks)
            if (t != kEot || ignore_eos) bytes += vocab[t];
        const bool eot = !ignore_eos && !toks.empty() && toks.back() == kEot;
        return {utf8::sanitize(bytes), eot ? "stop" : "length"};
    }
};

inline FakeEngineOptions fake(int slots = 4, int eot_every = 0, int step_us = 0) {
    FakeEngineOptions o;
    o.slots = slots, o.context = 128, o.vocab = kV, o.eot = kEot, o.eot_every = eot_every, o.step_us = step_us;
    return o;
}

inline json post_json(httplib::Client& c, const json& body, int* status = nullptr, httplib::Headers* headers = nullptr) {
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(r) << "no response";
    if (!r) return json();
    if (status) *status = r->status;
    if (headers) *headers = r->headers;
    return json::parse(r->body);
}

// A stream's events ("data: ..." lines), in order.
inline std::vector<std::string> post_stream(httplib::Client& c, const json& body, int* status = nullptr,
                                            const char* path = "/v1/completions") {
    auto r = c.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return {};
    if (status) *status = r->status;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    std::vector<std::string> events;
    size_t at = 0;
    while (at < r->body.size()) {
        const size_t end = r->body.find("\n\n", at);
        EXPECT_NE(end, std::string::npos) << "an event without its blank line";
        if (end == std::string::npos) break;
        const std::string e = r->body.substr(at, end - at);
        if (e.rfind("data: ", 0) == 0) events.push_back(e.substr(6));
        at = end + 2;
    }
    return events;
}

}  // namespace serve_test
