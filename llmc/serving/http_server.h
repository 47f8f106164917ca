// The HTTP side of the server, on cpp-httplib (no parser of our own): the routes (completions and chat completions,
// tokenize and detokenize, the models, health, Prometheus metrics, the playground page), each request checked
// (llmc/serving/completion_request.h, chat_request.h) before it is queued on the scheduler, whole responses and server-sent event
// streams, OpenAI-style errors for everything that goes wrong (400, 404, 405, 413, 429 with Retry-After, 500, 503
// while draining), and the drain: stop accepting, let every accepted request finish and its response be written,
// then stop listening. Each request runs on one of the server's threads, which waits on its CompletionSession while
// the engine's thread steps the scheduler. A stream notices a client that left when a write fails (at the latest two
// writes after the close; a comment line is written every 2 s of silence) and cancels its request; a non-streaming
// request runs to its end (cpp-httplib 0.11 tells a handler nothing of its connection). Host-only.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "llmc/serving/chat_json.h"
#include "llmc/serving/chat_request.h"
#include "llmc/serving/completion_json.h"
#include "llmc/serving/completion_request.h"
#include "llmc/serving/completion_session.h"
#include "llmc/serving/metrics.h"
#include "llmc/serving/playground_page.h"
#include "llmc/serving/tokenize_request.h"
#include "llmc/serving/scheduler.h"

// What the program gives the server besides the scheduler.
struct ServeSetup {
    ServeLimits limits;
    PromptEncoder encode;                            // text -> token ids (the server's GPT-2 BPE)
    const std::vector<std::string>* token_bytes = nullptr;  // id -> bytes
    int eot = -1;                                    // <|endoftext|>: ends a completion (unless ignore_eos)
    int threads = 0;                                 // request threads (0: slots + max_queue + 8, at most 1024)
    int retry_after_s = 1;                           // 429's Retry-After
    FILE* log = stderr;                              // a line per finished completion (null: none)
    ChatTemplate chat_template;                      // conversations to prompts (--chat-template)
};

class CompletionServer {
public:
    CompletionServer(Scheduler* scheduler, ServeSetup setup)
        : sched_(scheduler), setup_(std::move(setup)), created_(unix_seconds()) {
        const SchedulerStats st = sched_->stats();
        // a thread per request in the system (running or queued) and a few to refuse more with 429; at most 1024
        // (beyond, connections wait in cpp-httplib's queue for a thread)
        const int threads =
            setup_.threads > 0 ? setup_.threads : std::min(1024, st.slots + sched_->options().max_queue + 8);
        svr_.new_task_queue = [threads] { return new httplib::ThreadPool((size_t)threads); };
        svr_.set_payload_max_length(setup_.limits.max_body_bytes);
        svr_.set_keep_alive_timeout(3);
        svr_.set_keep_alive_max_count(1000);  // requests per connection (cpp-httplib's default: 5)
        routes();
    }

    // port 0: any free port (port() says which). false with *error when the address cannot be bound.
    bool bind(const std::string& host, int port, std::string* error) {
        if (port == 0) port_ = svr_.bind_to_any_port(host);
        else port_ = svr_.bind_to_port(host, port) ? port : -1;
        if (port_ < 0) *error = "cannot listen on " + host + ":" + std::to_string(port) + " (address in use, or not "
                                "an address of this machine)";
        return port_ >= 0;
    }
    int port() const { return port_; }
    // Serves until stop() or drain_and_stop(); false if listening failed.
    bool listen() { return svr_.listen_after_bind(); }

    // Stop accepting (503), let every accepted completion finish and its response be written, then stop listening.
    void drain_and_stop() {
        sched_->begin_drain();
        sched_->wait_idle();
        {
            std::unique_lock<std::mutex> lock(m_);
            cv_.wait(lock, [&] { return open_streams_ == 0; });
        }
        // a drain that starts before the listener does (a signal at start-up) must not stop it before it runs
        for (int i = 0; i < 500 && !svr_.is_running(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        svr_.stop();
    }
    void stop() { svr_.stop(); }
    bool running() const { return svr_.is_running(); }

private:
    static void send_error(httplib::Response& res, const ApiError& e) {
        res.status = e.status;
        res.set_content(api_error_json(e), "application/json");
    }
    static ApiError error_of(int status, const std::string& type, const std::string& message, const std::string& code) {
        ApiError e;
        e.status = status, e.type = type, e.message = message, e.code = code;
        return e;
    }

    void routes() {
        svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
            const SchedulerStats st = sched_->stats();
            res.status = st.draining ? 503 : 200;
            res.set_content(health_json(st, setup_.limits.model, setup_.limits.context), "application/json");
        });
        svr_.Get("/", [](const httplib::Request&, httplib::Response& res) {
            res.set_content(kPlaygroundPage, "text/html; charset=utf-8");
        });
        svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(metrics_->render(sched_->stats(), setup_.limits.model, setup_.limits.context),
                            "text/plain; version=0.0.4; charset=utf-8");
        });
        svr_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(models_json(setup_.limits.model, created_), "application/json");
        });
        svr_.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
            if (req.matches[1] == setup_.limits.model) {
                res.set_content(model_json(setup_.limits.model, created_), "application/json");
                return;
            }
            send_error(res, error_of(404, "invalid_request_error", "the model '" + req.matches[1].str() +
                                     "' does not exist: this server serves '" + setup_.limits.model + "'",
                                     "model_not_found"));
        });
        svr_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
            completion(req, res, false);
        });
        svr_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
            completion(req, res, true);
        });
        svr_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
            std::string out;
            ApiError err;
            if (!tokenize_response(req.body, setup_.limits, setup_.encode, setup_.chat_template, *setup_.token_bytes,
                                   setup_.eot, &out, &err))
                return send_error(res, err);
            res.set_content(out, "application/json");
        });
        svr_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
            std::string out;
            ApiError err;
            if (!detokenize_response(req.body, setup_.limits, *setup_.token_bytes, &out, &err)) return send_error(res, err);
            res.set_content(out, "application/json");
        });
        auto not_allowed = [](const char* allow) {
            return [allow](const httplib::Request& req, httplib::Response& res) {
                res.set_header("Allow", allow);
                send_error(res, error_of(405, "invalid_request_error", req.method + " " + req.path +
                                         " is not allowed: use " + allow, "method_not_allowed"));
            };
        };
        for (const char* path : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"}) {
            svr_.Get(path, not_allowed("POST"));
            svr_.Put(path, not_allowed("POST"));
            svr_.Delete(path, not_allowed("POST"));
            svr_.Patch(path, not_allowed("POST"));
        }
        for (const char* path : {"/v1/models", "/health", "/metrics"}) {
            svr_.Post(path, not_allowed("GET"));
            svr_.Put(path, not_allowed("GET"));
            svr_.Delete(path, not_allowed("GET"));
            svr_.Patch(path, not_allowed("GET"));
        }
        // statuses cpp-httplib sets itself (no route, a body over the limit, a malformed request) get a JSON body
        svr_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return;
            ApiError e;
            e.status = res.status;
            if (res.status == 404) {
                e.message = "no such endpoint: " + req.method + " " + req.path +
                            " (this server has POST /v1/completions, POST /v1/chat/completions, POST /tokenize, POST "
                            "/detokenize, GET /v1/models, GET /health, GET /metrics, and a page at GET /)";
                e.code = "not_found";
            } else if (res.status == 413) {
                e.message = "the request body is over the server's limit (--max-body)";
                e.code = "body_too_large";
            } else {
                e.message = "the HTTP request could not be handled (status " + std::to_string(res.status) + ")";
            }
            res.set_content(api_error_json(e), "application/json");
        });
        svr_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "unknown error";
            try {
                if (ep) std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            send_error(res, error_of(500, "server_error", "internal error: " + what, ""));
        });
    }

    uint64_t fresh_seed() {
        std::lock_guard<std::mutex> lock(m_);
        return seeds_();
    }

    void log_end(const CompletionIds& ids, const SequenceEnd& e) {
        if (!setup_.log) return;
        const int gen = e.completion_tokens;
        fprintf(setup_.log, "%s: %d prompt + %d tokens, %s; queued %.1f ms, first token %.1f ms, %.2f ms/token after\n",
                ids.id.c_str(), e.prompt_tokens, gen, finish_reason_name(e.reason), e.queued_ms, e.first_token_ms,
                gen > 1 ? (e.total_ms - e.first_token_ms) / (gen - 1) : 0.0);
        fflush(setup_.log);
    }

    // POST /v1/completions (chat false) or /v1/chat/completions (chat true): the same request underneath, in each
    // endpoint's shapes
    void completion(const httplib::Request& req, httplib::Response& res, bool chat) {
        CompletionRequest cr;
        ApiError err;
        const bool parsed = chat ? parse_chat_request(req.body, setup_.limits, setup_.encode, setup_.chat_template, &cr, &err)
                                 : parse_completion_request(req.body, setup_.limits, setup_.encode, &cr, &err);
        if (!parsed) return send_error(res, err);
        auto session = std::make_shared<CompletionSession>(setup_.token_bytes, setup_.eot, cr.stop, cr.logprobs >= 0);
        const TokenPick pick{cr.pick, 0.f, cr.logprobs};
        const uint64_t seed = cr.seeded ? cr.seed : fresh_seed();
        if (cr.stream) stream_opened(+1);  // before it is queued: a drain waits for its last write
        std::string why;
        SequenceRequest sr = session->request(cr.prompt, cr.max_tokens, pick, seed, cr.ignore_eos ? -1 : setup_.eot);
        sr.on_end = [metrics = metrics_, inner = std::move(sr.on_end)](const SequenceEnd& e) {
            metrics->observe_end(e);
            inner(e);
        };
        const Admission a = sched_->submit(std::move(sr), &why);
        if (a != Admission::Accepted && cr.stream) stream_opened(-1);
        if (a == Admission::QueueFull) {
            res.set_header("Retry-After", std::to_string(setup_.retry_after_s));
            return send_error(res, error_of(429, "server_overloaded", "the server's queue is full: retry later",
                                            "queue_full"));
        }
        if (a == Admission::Draining) {
            res.set_header("Connection", "close");
            return send_error(res, error_of(503, "server_shutting_down", "the server is shutting down", "draining"));
        }
        if (a == Admission::Invalid) return send_error(res, error_of(400, "invalid_request_error", why, ""));
        const CompletionIds ids{chat ? new_chat_completion_id() : new_completion_id(), unix_seconds(), setup_.limits.model};
        auto logprobs = [this, chat, top_n = cr.logprobs](const std::vector<TokenRecord>& tokens) {
            return chat ? chat_logprobs_json(tokens, top_n, *setup_.token_bytes, setup_.eot)
                        : logprobs_json(tokens, top_n, *setup_.token_bytes, setup_.eot);
        };
        if (!cr.stream) {
            const SessionUpdate u = session->wait_end();
            log_end(ids, u.end);
            if (u.end.reason == FinishReason::Error)
                return send_error(res, error_of(500, "server_error", "generation failed: " + u.end.error, ""));
            if (u.end.reason == FinishReason::Cancelled)  // the server stopped at once (a second signal)
                return send_error(res, error_of(503, "server_shutting_down", "the server stopped before this "
                                                "completion finished", "stopped"));
            res.set_content(chat ? chat_completion_json(ids, u.text, u.end, logprobs(u.tokens))
                                 : completion_json(ids, u.text, u.end, logprobs(u.tokens)),
                            "application/json");
            return;
        }
        auto done = std::make_shared<bool>(false);
        auto last_write = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
        const bool usage = cr.include_usage;
        auto first = std::make_shared<bool>(true);  // chat: the first chunk carries the role
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream",
            [this, session, ids, done, last_write, usage, chat, first, logprobs](size_t, httplib::DataSink& sink) {
                const SessionUpdate u = session->wait(std::chrono::milliseconds(250));
                std::string out;
                if (!u.text.empty() || !u.tokens.empty() || u.finished) {
                    const nlohmann::json lp = logprobs(u.tokens);
                    if (u.finished && u.end.reason == FinishReason::Error) {
                        out = "data: " + api_error_json(error_of(500, "server_error", "generation failed: " +
                                                                 u.end.error, "")) + "\n\n";
                    } else if (u.finished && u.end.reason == FinishReason::Cancelled) {
                        out = "data: " + api_error_json(error_of(503, "server_shutting_down", "the server stopped "
                                                                 "before this completion finished", "stopped")) + "\n\n";
                    } else {
                        const SequenceEnd* end = u.finished ? &u.end : nullptr;
                        out = "data: " + (chat ? chat_chunk_json(ids, *first, u.text, end, lp, usage)
                                               : stream_chunk_json(ids, u.text, end, lp, usage)) + "\n\n";
                        *first = false;
                        if (u.finished && usage)
                            out += "data: " +
                                   usage_chunk_json(ids, u.end, chat ? "chat.completion.chunk" : "text_completion") +
                                   "\n\n";
                    }
                    if (u.finished) out += "data: [DONE]\n\n";
                } else if (std::chrono::steady_clock::now() - *last_write > std::chrono::seconds(2)) {
                    out = ": keep-alive\n\n";  // an SSE comment: clients skip it; a failed write means the client left
                }
                if (!out.empty()) {
                    if (!sink.write(out.data(), out.size())) {
                        session->cancel();
                        return false;
                    }
                    *last_write = std::chrono::steady_clock::now();
                }
                if (u.finished) {
                    *done = true;
                    log_end(ids, u.end);
                    sink.done();
                }
                return true;
            },
            [this, session, done](bool) {
                if (!*done) session->cancel();  // the client left before the end
                stream_opened(-1);
            });
    }

    void stream_opened(int change) {
        std::lock_guard<std::mutex> lock(m_);
        open_streams_ += change;
        cv_.notify_all();
    }

    Scheduler* sched_;
    ServeSetup setup_;
    int64_t created_;
    httplib::Server svr_;
    int port_ = -1;
    std::mutex m_;
    std::condition_variable cv_;
    int open_streams_ = 0;  // streams not yet written to the end, under m_
    std::mt19937_64 seeds_{std::random_device{}()};
    // held by each request's end callback too: the scheduler may end requests after the server is gone
    std::shared_ptr<ServeMetrics> metrics_ = std::make_shared<ServeMetrics>();
};
