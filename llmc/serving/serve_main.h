// The server's process around an engine: three threads and a signal handler, shared by serve_gpt2cu (the GPU
// engine) and tests/serve_mock (the fake one).
//   - the engine's thread steps the scheduler (Scheduler::run);
//   - the caller's thread runs cpp-httplib's listener, whose pool of threads handles the requests;
//   - a signal thread waits for SIGTERM or SIGINT: the first drains (stop accepting, finish every accepted request,
//     write its response, stop listening, exit 0), a second stops at once (what runs is cancelled; exit 0).
// SIGPIPE is ignored: a client that leaves is a failed write, never the end of the process. Host-only.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "llmc/serving/http_server.h"
#include "llmc/serving/serve_args.h"

// Blocks SIGTERM, SIGINT and the wake-up signal in the calling thread and every thread it starts after (they are
// taken by sigwait in the signal thread), and ignores SIGPIPE. Call first in main, before any thread exists.
inline sigset_t serve_block_signals() {
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR2);  // the process's own wake-up for the signal thread
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    return set;
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

inline int run_server(ServeEngine* engine, const ServeArgs& a, ServeSetup setup, const sigset_t& signals,
                      const std::string& what) {
    SchedulerOptions so;
    so.max_queue = a.max_queue;
    so.prefill_budget = a.prefill_budget;
    Scheduler scheduler(engine, so);
    CompletionServer server(&scheduler, std::move(setup));
    std::string error;
    if (!server.bind(a.host, a.port, &error)) {
        fprintf(stderr, "error: %s\n", error.c_str());
        return 1;
    }
    fprintf(stderr, "serving %s (%s) on http://%s:%d: %d slots of %d positions, queue %d; POST /v1/completions, "
            "GET /v1/models, GET /health; SIGTERM or Ctrl-C drains and exits\n", a.model_name.c_str(), what.c_str(),
            a.host.c_str(), server.port(), engine->slots(), engine->context(), a.max_queue);
    fflush(stderr);

    std::thread engine_thread([&] { scheduler.run(); });
    std::thread drainer;
    std::thread signal_thread([&] {
        int sig = 0;
        if (sigwait(&signals, &sig) != 0 || sig == SIGUSR2) return;
        fprintf(stderr, "%s: draining: no new requests; finishing %d running and %d queued (a second signal stops at "
                "once)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", scheduler.stats().running, scheduler.stats().queued);
        fflush(stderr);
        drainer = std::thread([&] { server.drain_and_stop(); });
        if (sigwait(&signals, &sig) != 0 || sig == SIGUSR2) return;
        fprintf(stderr, "second signal: stopping now\n");
        scheduler.shut_down();
        server.stop();
    });
    const bool ok = server.listen();
    scheduler.shut_down();  // drained already, unless listening failed or a second signal came
    engine_thread.join();
    pthread_kill(signal_thread.native_handle(), SIGUSR2);
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
    return 0;
}
