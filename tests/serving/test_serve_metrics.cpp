// GET /metrics (llmc/serving/metrics.h) read by a strict reader of Prometheus' text format
// (tests/serving/prometheus_text.h): the reader itself refuses what the format does not allow; the exposition of
// known request ends has the counts, sums and buckets they imply, every family typed and helped, the model's name
// escaped; and on the server (fake engine) the metrics move with requests: successes by finish reason, tokens, the
// latency histograms' counts, running and waiting requests, positions of the KV cache in use.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "llmc/serving/metrics.h"
#include "tests/serving/prometheus_text.h"
#include "tests/serving/serve_http_fixture.h"

namespace {

using namespace serve_test;

bool parses(const std::string& text, std::string* error = nullptr) {
    PromFamilies f;
    std::string e;
    const bool ok = parse_prometheus_text(text, &f, &e);
    if (error) *error = e;
    return ok;
}

TEST(ServeMetrics, TheReaderRefusesWhatTheFormatDoesNotAllow) {
    const std::string h = "# HELP x_seconds a histogram\n# TYPE x_seconds histogram\n";
    EXPECT_TRUE(parses(h + "x_seconds_bucket{le=\"0.1\"} 1\nx_seconds_bucket{le=\"+Inf\"} 2\nx_seconds_sum 0.5\n"
                           "x_seconds_count 2\n"));
    EXPECT_FALSE(parses(h + "x_seconds_bucket{le=\"0.1\"} 1\nx_seconds_sum 0.5\nx_seconds_count 1\n"));  // no +Inf
    EXPECT_FALSE(parses(h + "x_seconds_bucket{le=\"0.1\"} 3\nx_seconds_bucket{le=\"+Inf\"} 2\nx_seconds_sum 1\n"
                            "x_seconds_count 2\n"));  // decreasing
    EXPECT_FALSE(parses(h + "x_seconds_bucket{le=\"+Inf\"} 2\nx_seconds_sum 1\nx_seconds_count 3\n"));  // +Inf != count
    EXPECT_FALSE(parses("a_total 1\n# TYPE a_total counter\n"));                        // TYPE after samples
    EXPECT_FALSE(parses("# TYPE a_total counter\na_total -1\n"));                       // negative counter
    EXPECT_FALSE(parses("# TYPE a gauge\na{l=\"x\\q\"} 1\n"));                           // unknown escape
    EXPECT_FALSE(parses("# TYPE a gauge\na{l=\"x\"} 1\na{l=\"x\"} 2\n"));                // a series twice
    EXPECT_FALSE(parses("# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{l=\"y\"} 1\n"));   // a family split
    EXPECT_FALSE(parses("# TYPE a gauge\na one\n"));                                    // not a number
    EXPECT_FALSE(parses("# TYPE a gauge\n1a 1\n"));                                     // not a name
    EXPECT_FALSE(parses("# TYPE a gauge\na 1"));                                        // no final line feed
    EXPECT_FALSE(parses("# TYPE a kind\na 1\n"));                                       // no such type
    EXPECT_TRUE(parses("# a comment\n# TYPE a gauge\na{l=\"q\\\"\\\\\\n\",} NaN 1700000000000\n\n"));
}

TEST(ServeMetrics, KnownEndsGiveTheirCountsSumsAndBuckets) {
    ServeMetrics m;
    auto end = [](FinishReason r, int prompt, int gen, double queued, double first, double total) {
        SequenceEnd e;
        e.reason = r, e.prompt_tokens = prompt, e.completion_tokens = gen;
        e.queued_ms = queued, e.first_token_ms = first, e.total_ms = total;
        return e;
    };
    m.observe_end(end(FinishReason::Length, 10, 5, 1, 15, 55));    // tpot (55 - 15) / 4 = 10 ms
    m.observe_end(end(FinishReason::Stop, 20, 1, 2, 30, 30));      // one token: no tpot
    m.observe_end(end(FinishReason::Cancelled, 7, 0, 300, 0, 300));  // left while queued: no ttft, no prefill
    SchedulerStats st;
    st.slots = 4, st.running = 2, st.queued = 3, st.positions = 128, st.tokens = 6, st.accepted = 5;
    st.refused_full = 2, st.prefill_tokens = 30, st.decode_steps = 9, st.decode_ms = 1500;
    st.decode_device_ms = 1250;
    const std::string text = m.render(st, "my \"model\"\\\n", 64);
    PromFamilies f;
    std::string error;
    ASSERT_TRUE(parse_prometheus_text(text, &f, &error)) << error << "\n" << text;
    for (const auto& [name, fam] : f) {
        EXPECT_EQ(name.rfind("llmc_", 0), 0u) << name;
        EXPECT_NE(fam.type, "untyped") << name;
        EXPECT_FALSE(fam.help.empty()) << name;
        for (const PromSample& s : fam.samples) EXPECT_EQ(s.labels.at("model_name"), "my \"model\"\\\n") << s.name;
    }
    auto v = [&](const std::string& n, std::map<std::string, std::string> l = {}) { return prom_value(f, n, l); };
    EXPECT_EQ(v("llmc_num_requests_running"), 2);
    EXPECT_EQ(v("llmc_num_requests_waiting"), 3);
    EXPECT_EQ(v("llmc_kv_cache_slots"), 4);
    EXPECT_EQ(v("llmc_kv_cache_positions_in_use"), 128);
    EXPECT_DOUBLE_EQ(v("llmc_kv_cache_usage_ratio"), 128.0 / (4 * 64));
    EXPECT_EQ(v("llmc_request_success_total", {{"finished_reason", "length"}}), 1);
    EXPECT_EQ(v("llmc_request_success_total", {{"finished_reason", "stop"}}), 1);
    EXPECT_EQ(v("llmc_request_success_total", {{"finished_reason", "cancelled"}}), 1);
    EXPECT_EQ(v("llmc_request_success_total", {{"finished_reason", "error"}}), 0);
    EXPECT_EQ(v("llmc_requests_refused_total", {{"reason", "queue_full"}}), 2);
    EXPECT_EQ(v("llmc_prompt_tokens_total"), 37);
    EXPECT_EQ(v("llmc_generation_tokens_total"), 6);
    EXPECT_DOUBLE_EQ(v("llmc_decode_seconds_total"), 1.5);
    EXPECT_DOUBLE_EQ(v("llmc_decode_device_seconds_total"), 1.25);
    EXPECT_EQ(v("llmc_time_to_first_token_seconds_count"), 2);
    EXPECT_NEAR(v("llmc_time_to_first_token_seconds_sum"), 0.045, 1e-12);
    EXPECT_EQ(v("llmc_time_to_first_token_seconds_bucket", {{"le", "0.02"}}), 1);  // 15 ms
    EXPECT_EQ(v("llmc_time_to_first_token_seconds_bucket", {{"le", "0.04"}}), 2);  // and 30 ms
    EXPECT_EQ(v("llmc_time_per_output_token_seconds_count"), 1);
    EXPECT_NEAR(v("llmc_time_per_output_token_seconds_sum"), 0.010, 1e-12);
    EXPECT_EQ(v("llmc_time_per_output_token_seconds_bucket", {{"le", "0.0075"}}), 0);
    EXPECT_EQ(v("llmc_time_per_output_token_seconds_bucket", {{"le", "0.01"}}), 1);  // a bound is inclusive
    EXPECT_EQ(v("llmc_e2e_request_latency_seconds_count"), 3);
    EXPECT_EQ(v("llmc_request_queue_time_seconds_bucket", {{"le", "0.25"}}), 2);
    EXPECT_EQ(v("llmc_request_queue_time_seconds_bucket", {{"le", "0.5"}}), 3);
    EXPECT_EQ(v("llmc_request_prefill_time_seconds_count"), 2);
    EXPECT_NEAR(v("llmc_request_prefill_time_seconds_sum"), 0.042, 1e-12);  // 14 + 28 ms
    EXPECT_EQ(v("llmc_prefix_cache_hits_total"), 0);
}

TEST(ServeMetrics, TheServersMetricsMoveWithRequests) {
    Server s(fake(2, 0, 2000));  // 2 slots, 2 ms a step: requests overlap and queue
    httplib::Client c = s.client();
    auto scrape = [&](PromFamilies* f) {
        auto r = c.Get("/metrics");
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200);
        EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
        std::string error;
        ASSERT_TRUE(parse_prometheus_text(r->body, f, &error)) << error;
    };
    PromFamilies before;
    scrape(&before);
    EXPECT_EQ(prom_value(before, "llmc_e2e_request_latency_seconds_count"), 0);
    EXPECT_EQ(prom_value(before, "llmc_kv_cache_slots"), 2);
    // four requests at once over two slots (two wait), and a scrape while they run
    std::vector<std::thread> clients;
    std::atomic<int> ok{0};
    for (int i = 0; i < 4; i++)
        clients.emplace_back([&, i] {
            httplib::Client ci = s.client();
            int status = 0;
            json r = post_json(ci, {{"prompt", "request " + std::to_string(i)}, {"max_tokens", 40}, {"seed", i},
                                    {"ignore_eos", true}}, &status);
            ok += status == 200 && r["usage"]["completion_tokens"] == 40;
        });
    double running = 0, waiting = 0, positions = 0;
    for (int k = 0; k < 200 && (running < 2 || waiting < 1 || positions < 1); k++) {
        PromFamilies during;
        scrape(&during);
        running = std::max(running, prom_value(during, "llmc_num_requests_running"));
        waiting = std::max(waiting, prom_value(during, "llmc_num_requests_waiting"));
        positions = std::max(positions, prom_value(during, "llmc_kv_cache_positions_in_use"));
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (auto& t : clients) t.join();
    EXPECT_EQ(ok.load(), 4);
    EXPECT_EQ(running, 2);
    EXPECT_GE(waiting, 1);
    EXPECT_GT(positions, 0);
    PromFamilies after;
    scrape(&after);
    EXPECT_EQ(prom_value(after, "llmc_request_success_total", {{"finished_reason", "length"}}), 4);
    EXPECT_EQ(prom_value(after, "llmc_generation_tokens_total"), 160);
    EXPECT_EQ(prom_value(after, "llmc_time_to_first_token_seconds_count"), 4);
    EXPECT_EQ(prom_value(after, "llmc_time_per_output_token_seconds_count"), 4);
    EXPECT_EQ(prom_value(after, "llmc_e2e_request_latency_seconds_count"), 4);
    EXPECT_GT(prom_value(after, "llmc_request_queue_time_seconds_sum"), 0);
    EXPECT_EQ(prom_value(after, "llmc_num_requests_running"), 0);
    EXPECT_EQ(prom_value(after, "llmc_kv_cache_positions_in_use"), 0);
    EXPECT_EQ(prom_value(after, "llmc_requests_accepted_total"), 4);
    auto r = c.Post("/metrics", "", "text/plain");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 405);
}

}  // namespace
