// GET /metrics: the server's state in Prometheus' text exposition format (version 0.0.4), the format deployments
// scrape. Counters and gauges come from the scheduler's counters at the moment of the scrape; the histograms (time to
// first token, time per output token, end-to-end latency, queue time, prefill time) from each request's end. Names
// follow Prometheus' conventions (base units: seconds; counters end in _total), prefixed llmc_; every sample carries
// the model's name as vLLM's do. Host-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "llmc/serving/sequence.h"

// A histogram's buckets: counts per upper bound (cumulative when written), their sum and count.
class Histogram {
public:
    explicit Histogram(std::vector<double> upper_bounds)
        : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}
    void observe(double v) {
        size_t i = 0;
        while (i < bounds_.size() && v > bounds_[i]) i++;
        counts_[i]++;
        sum_ += v;
        count_++;
    }
    const std::vector<double>& bounds() const { return bounds_; }
    const std::vector<uint64_t>& counts() const { return counts_; }  // per bucket; the last is above every bound
    double sum() const { return sum_; }
    uint64_t count() const { return count_; }

private:
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;
    double sum_ = 0;
    uint64_t count_ = 0;
};

class ServeMetrics {
public:
    // engine thread: one request's end (every accepted request ends exactly once)
    void observe_end(const SequenceEnd& e) {
        std::lock_guard<std::mutex> lock(m_);
        e2e_.observe(e.total_ms * 1e-3);
        queue_.observe(e.queued_ms * 1e-3);
        if (e.completion_tokens > 0) {
            ttft_.observe(e.first_token_ms * 1e-3);
            prefill_.observe(std::max(0.0, e.first_token_ms - e.queued_ms) * 1e-3);
        }
        if (e.completion_tokens > 1)
            tpot_.observe((e.total_ms - e.first_token_ms) * 1e-3 / (e.completion_tokens - 1));
        ended_[(int)e.reason]++;
        prompt_tokens_ += (uint64_t)e.prompt_tokens;
    }

    // The exposition: the scheduler's state now (stats), the slots' positions (context each).
    std::string render(const SchedulerStats& s, const std::string& model, int context) const {
        std::lock_guard<std::mutex> lock(m_);
        Writer w{"{model_name=\"" + label_value(model) + "\"}", ""};
        w.gauge("llmc_num_requests_running", "Requests in a slot of the KV cache (prefilling or decoding).", s.running);
        w.gauge("llmc_num_requests_waiting", "Requests queued for a free slot.", s.queued);
        w.gauge("llmc_kv_cache_slots", "Slots of the KV cache (--max-batch): sequences held at once.", s.slots);
        w.gauge("llmc_kv_cache_slots_in_use", "Slots holding a sequence.", s.running);
        w.gauge("llmc_kv_cache_positions_in_use", "Positions of the KV cache holding a token, all slots.",
                (double)s.positions);
        w.gauge("llmc_kv_cache_usage_ratio", "Positions in use over all positions (slots x context).",
                s.slots > 0 && context > 0 ? (double)s.positions / ((double)s.slots * context) : 0.0);
        w.gauge("llmc_draining", "1 while the server drains (SIGTERM): new requests get 503.", s.draining ? 1 : 0);

        w.counter("llmc_requests_accepted_total", "Requests accepted into the queue.", (double)s.accepted);
        w.family("llmc_requests_refused_total", "counter", "Requests refused with 429: the queue was full.");
        w.sample("llmc_requests_refused_total", (double)s.refused_full, "reason", "queue_full");
        w.family("llmc_request_success_total", "counter", "Requests ended, by why (cancelled: the client left or "
                 "the server stopped; error: the engine failed on it).");
        for (FinishReason r : {FinishReason::Stop, FinishReason::Length, FinishReason::Cancelled, FinishReason::Error})
            w.sample("llmc_request_success_total", (double)ended_[(int)r], "finished_reason", finish_reason_name(r));
        w.counter("llmc_prompt_tokens_total", "Prompt tokens of the requests ended.", (double)prompt_tokens_);
        w.counter("llmc_prefill_tokens_total", "Prompt tokens prefilled (a cached prefix is not).",
                  (double)s.prefill_tokens);
        w.counter("llmc_generation_tokens_total", "Tokens generated and delivered.", (double)s.tokens);
        w.counter("llmc_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
                  (double)s.prefix_queried_tokens);
        w.counter("llmc_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
                  (double)s.prefix_hit_tokens);
        w.counter("llmc_engine_steps_total", "Scheduler steps (decode, prefill, or both).", (double)s.steps);
        w.counter("llmc_decode_steps_total", "Decode steps.", (double)s.decode_steps);
        w.counter("llmc_decode_rows_total", "Sequences decoded, summed over decode steps (rows / steps: the mean "
                  "batch).", (double)s.decode_rows);
        w.counter("llmc_prefill_calls_total", "Prefill calls of the engine.", (double)s.prefill_calls);
        w.counter("llmc_decode_seconds_total", "Time in the engine's decode calls.", s.decode_ms * 1e-3);
        w.counter("llmc_deliver_seconds_total", "Time handing tokens to requests.", s.deliver_ms * 1e-3);
        w.counter("llmc_decode_device_seconds_total", "The decode steps' time on the device (0: not measured).",
                  s.decode_device_ms * 1e-3);

        w.histogram("llmc_time_to_first_token_seconds", "Submission to the first token.", ttft_);
        w.histogram("llmc_time_per_output_token_seconds", "Per token after the first, per request.", tpot_);
        w.histogram("llmc_e2e_request_latency_seconds", "Submission to the end.", e2e_);
        w.histogram("llmc_request_queue_time_seconds", "Submission to a slot.", queue_);
        w.histogram("llmc_request_prefill_time_seconds", "A slot to the first token (the prompt's prefill).",
                    prefill_);
        return w.out;
    }

    // Prometheus' escapes for a label value: backslash, double quote, line feed.
    static std::string label_value(const std::string& v) {
        std::string o;
        for (char c : v) {
            if (c == '\\') o += "\\\\";
            else if (c == '"') o += "\\\"";
            else if (c == '\n') o += "\\n";
            else o += c;
        }
        return o;
    }
    // A sample's value as the format writes it (Go's float syntax: +Inf, -Inf, NaN; integers without a point).
    static std::string number(double v) {
        if (std::isnan(v)) return "NaN";
        if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
        char b[40];
        if (v == std::floor(v) && std::fabs(v) < 1e15) snprintf(b, sizeof(b), "%.0f", v);
        else snprintf(b, sizeof(b), "%.9g", v);
        return b;
    }

private:
    struct Writer {
        std::string labels;  // {model_name="..."}
        std::string out;
        void gauge(const char* name, const char* help, double v) { family(name, "gauge", help), sample(name, v); }
        void counter(const char* name, const char* help, double v) { family(name, "counter", help), sample(name, v); }
        void family(const char* name, const char* type, const char* help) {
            out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
        }
        void sample(const std::string& name, double v, const char* key = nullptr, const std::string& value = "") {
            std::string l = labels;
            if (key) l.insert(l.size() - 1, std::string(",") + key + "=\"" + label_value(value) + "\"");
            out += name + l + " " + number(v) + "\n";
        }
        void histogram(const char* name, const char* help, const Histogram& h) {
            family(name, "histogram", help);
            uint64_t cumulative = 0;
            for (size_t i = 0; i < h.bounds().size(); i++) {
                cumulative += h.counts()[i];
                sample(std::string(name) + "_bucket", (double)cumulative, "le", number(h.bounds()[i]));
            }
            sample(std::string(name) + "_bucket", (double)h.count(), "le", "+Inf");
            sample(std::string(name) + "_sum", h.sum());
            sample(std::string(name) + "_count", (double)h.count());
        }
    };

    static std::vector<double> latency_buckets() {
        return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160};
    }

    mutable std::mutex m_;
    Histogram ttft_{latency_buckets()};
    Histogram tpot_{{0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
                     0.5, 0.75, 1, 2.5}};
    Histogram e2e_{latency_buckets()};
    Histogram queue_{latency_buckets()};
    Histogram prefill_{latency_buckets()};
    uint64_t ended_[4] = {0, 0, 0, 0};
    uint64_t prompt_tokens_ = 0;
};
