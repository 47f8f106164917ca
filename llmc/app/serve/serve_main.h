// The server's process around an engine: three threads and a signal handler, shared by serve_gpt2cu (the GPU
// engine) and tests/serving/serve_mock (the fake one).
//   - the engine's thread steps the scheduler (Scheduler::run);
//   - the caller's thread runs cpp-httplib's listener, whose pool of threads handles the requests;
//   - a signal thread waits for SIGTERM or SIGINT: the first drains (stop accepting, finish every accepted request,
//     write its response, stop listening, exit 0), a second stops at once (what runs is cancelled; exit 0).
// SIGPIPE is ignored: a client that leaves is a failed write, never the end of the process. Host-only.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "llmc/app/serve/serve_args.h"
#include "llmc/serving/http_server.h"

// SIGTERM and SIGINT reach the signal thread as bytes in a pipe, written by a handler. Not by sigwait on blocked
// signals: threads that exist before main (a tool's, such as compute-sanitizer's) do not block them, the kernel may
// hand the process's signal to one of those, and its default action would end the process with no drain. Our own
// threads block them, but for the signal thread, so the handler runs there or in a foreign thread.
struct ServeSignals {
    int read_fd = -1, write_fd = -1;
    sigset_t set;  // SIGTERM, SIGINT
};
inline int g_serve_signal_fd = -1;  // the handler's end of the pipe
inline void serve_on_signal(int sig) {
    const int saved = errno;
    const char c = (char)sig;
    if (write(g_serve_signal_fd, &c, 1) < 0) {}  // a full pipe holds signals enough
    errno = saved;
}
// Installs the handler and blocks the signals in the calling thread and every thread it starts after; ignores
// SIGPIPE. Call first in main, before any thread of ours exists.
inline ServeSignals serve_install_signals() {
    signal(SIGPIPE, SIG_IGN);
    ServeSignals s;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0 || fcntl(fds[1], F_SETFL, O_NONBLOCK) != 0) {
        perror("error: the server's signal pipe");
        exit(EXIT_FAILURE);
    }
    s.read_fd = fds[0], s.write_fd = fds[1];
    g_serve_signal_fd = s.write_fd;
    struct sigaction sa = {};
    sa.sa_handler = serve_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    sigemptyset(&s.set);
    sigaddset(&s.set, SIGTERM);
    sigaddset(&s.set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &s.set, nullptr);
    return s;
}
// The next signal's number, or 0 for the process's own wake-up (serve_wake) or a broken pipe.
inline int serve_next_signal(const ServeSignals& s) {
    char c = 0;
    for (;;) {
        const ssize_t n = read(s.read_fd, &c, 1);
        if (n == 1) return c;
        if (n < 0 && errno == EINTR) continue;
        return 0;
    }
}
inline void serve_wake(const ServeSignals& s) {
    const char c = 0;
    if (write(s.write_fd, &c, 1) < 0) {}  // full: the thread has bytes to read already
}

// Serves until a signal (see the top); the exit code. `what` names the engine in the start line.
// The requests' limits a server run with these flags serves: its model's context and vocabulary, and the flags'
// defaults for the fields a request leaves out.
inline ServeLimits serve_limits(const ServeArgs& a, int context, int vocab_size) {
    ServeLimits l;
    l.model = a.model_name;
    l.context = context;
    l.vocab_size = vocab_size;
    l.max_body_bytes = (size_t)a.max_body;
    l.max_tokens = a.new_tokens;
    l.pick = PickParams{a.temperature, a.top_k, a.top_p};
    l.has_seed = a.has_seed, l.seed = a.seed;
    return l;
}

// The chat template the flags name (--chat-template), or the default; throws one line naming the flag and the file.
inline ChatTemplate serve_chat_template(const ServeArgs& a) {
    if (a.chat_template.empty()) return ChatTemplate{};
    try {
        return ChatTemplate::load(a.chat_template);
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string("flag --chat-template: ") + e.what());
    }
}

inline int run_server(ServeEngine* engine, const ServeArgs& a, ServeSetup setup, const ServeSignals& signals,
                      const std::string& what) {
    SchedulerOptions so;
    so.max_queue = a.max_queue;
    so.prefill_budget = a.prefill_budget;
    so.prefill_wait = a.prefill_wait;
    so.prefix_cache = a.prefix_cache != 0;
    Scheduler scheduler(engine, so);
    CompletionServer server(&scheduler, std::move(setup));
    std::string error;
    if (!server.bind(a.host, a.port, &error)) {
        fprintf(stderr, "error: %s\n", error.c_str());
        return 1;
    }
    fprintf(stderr, "serving %s (%s) on http://%s:%d: %d slots of %d positions, queue %d; a page to try it at /, "
            "POST /v1/completions, /v1/chat/completions, GET /metrics; SIGTERM or Ctrl-C drains and exits\n",
            a.model_name.c_str(), what.c_str(),
            a.host.c_str(), server.port(), engine->slots(), engine->context(), a.max_queue);
    fflush(stderr);

    std::thread engine_thread([&] { scheduler.run(); });
    std::thread drainer;
    std::thread signal_thread([&] {
        pthread_sigmask(SIG_UNBLOCK, &signals.set, nullptr);  // the handler may run here
        int sig = serve_next_signal(signals);
        if (sig == 0) return;
        fprintf(stderr, "%s: draining: no new requests; finishing %d running and %d queued (a second signal stops at "
                "once)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", scheduler.stats().running, scheduler.stats().queued);
        fflush(stderr);
        drainer = std::thread([&] { server.drain_and_stop(); });
        if (serve_next_signal(signals) == 0) return;
        fprintf(stderr, "second signal: stopping now\n");
        scheduler.shut_down();
        server.stop();
    });
    const bool ok = server.listen();
    scheduler.shut_down();  // drained already, unless listening failed or a second signal came
    engine_thread.join();
    serve_wake(signals);
    signal_thread.join();
    if (drainer.joinable()) drainer.join();
    if (!ok) {
        fprintf(stderr, "error: the server stopped listening unexpectedly\n");
        return 1;
    }
    const SchedulerStats st = scheduler.stats();
    const double steps = (double)std::max<uint64_t>(st.decode_steps, 1);
    fprintf(stderr, "stopped: %llu completions (%llu cancelled, %llu failed), %llu tokens; %llu decode steps of %.1f "
                    "sequences: %.3f ms in the engine, %.3f ms delivering tokens per step\n",
            (unsigned long long)st.finished, (unsigned long long)st.cancelled, (unsigned long long)st.errors,
            (unsigned long long)st.tokens, (unsigned long long)st.decode_steps, st.decode_rows / steps,
            st.decode_ms / steps, st.deliver_ms / steps);
    if (scheduler.prefix_caching())
        fprintf(stderr, "prefix cache: %llu of %llu prompt tokens reused\n", (unsigned long long)st.prefix_hit_tokens,
                (unsigned long long)st.prefix_queried_tokens);
    const std::string report = engine->decode_report();
    if (!report.empty()) fprintf(stderr, "%s\n", report.c_str());
    return 0;
}
