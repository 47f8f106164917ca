// The rank watchdog: when one data-parallel process is lost (killed, or exited on an error), every other rank stops
// with one line on stderr instead of waiting forever inside an NCCL collective, whose kernels spin on data that
// will never come. A thread (one per process, only with several ranks) looks every second at:
//   1. the peers on this machine: is each one's process still alive (llmc/core/process.h: not gone, not a zombie,
//      not a new process under a reused pid)? The ranks swap their RankPeer (pid, machine) at start-up;
//   2. the communicator's asynchronous error (ncclCommGetAsyncError, passed in as poll_error): how NCCL reports a
//      peer on another machine that went away, when its transport notices;
//   3. optionally (LLMC_RANK_TIMEOUT_S, off by default) how long this rank has made no progress: peers on other
//      machines whose loss NCCL does not report, and hangs of any cause.
// On a loss it flushes stdout, writes one line naming the lost rank and the last step this rank completed, and
// ends the process with _exit(EXIT_FAILURE): the kernels still spinning die with the CUDA context. ncclCommAbort is
// not called: it waits for the communicator's work, which is what hangs.
// Host-only (no CUDA, no NCCL), so tests/unit/test_rank_watchdog.cpp runs it with forked processes as peers.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "llmc/core/process.h"

// One rank's identity, swapped between the ranks as bytes at start-up.
struct RankPeer {
    int32_t pid = 0;
    uint32_t reserved = 0;
    uint64_t machine = 0;      // this_machine_key(): pids mean something only between processes with the same key
    uint64_t start_ticks = 0;  // tells the process from a later one under the same pid
    char host[64] = {0};       // for the message
};
static_assert(std::is_trivially_copyable<RankPeer>::value && sizeof(RankPeer) == 88, "sent as bytes");

inline RankPeer this_rank_peer() {
    RankPeer p;
    std::string host;
    p.pid = (int32_t)getpid();
    p.machine = this_machine_key(&host);
    p.start_ticks = process_start_ticks(getpid());
    snprintf(p.host, sizeof(p.host), "%s", host.c_str());
    return p;
}

struct RankWatchdogSettings {
    int rank = 0;
    std::vector<RankPeer> peers;               // every rank's, by rank (this one's included)
    std::function<std::string()> poll_error;   // the communicator's asynchronous error, "" if none (may be unset)
    double interval_s = 1.0;                   // between two looks
    double timeout_s = 0;                      // no progress for this long stops the rank (0: off)
    // After its line, a rank waits this long before it exits, so that the other ranks on this machine (which look
    // every interval_s) see the rank that was really lost first, and not this one, which leaves because of it.
    double linger_s = 3.0;
    // After closing(): a rank that leaves may simply have finished, so a loss stops this rank only if it has not
    // reached stop() this long after the loss was seen (the last barrier or the communicator's destruction hung).
    double close_grace_s = 20.0;
};

// "rank 3 (pid 1234 on host gpu7) is gone", "ranks 2 (...) and 3 (...) are gone".
inline std::string lost_ranks_text(const std::vector<RankPeer>& peers, const std::vector<int>& lost) {
    std::string s = lost.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < lost.size(); i++) {
        const RankPeer& p = peers[(size_t)lost[i]];
        if (i > 0) s += i + 1 == lost.size() ? " and " : ", ";
        s += std::to_string(lost[i]) + " (pid " + std::to_string(p.pid) + " on host " + p.host + ")";
    }
    return s + (lost.size() == 1 ? " is gone" : " are gone");
}

// The whole line: "error: <what>; rank 0 stops after step 12, the last one it completed".
inline std::string rank_watchdog_line(int rank, int completed_steps, const std::string& what) {
    const std::string r = "rank " + std::to_string(rank);
    return "error: " + what + "; " + r +
           (completed_steps > 0 ? " stops after step " + std::to_string(completed_steps) + ", the last one it completed"
                                : " stops before completing a step");
}

class RankWatchdog {
public:
    explicit RankWatchdog(RankWatchdogSettings s) : s_(std::move(s)) {}
    ~RankWatchdog() { stop(); }
    RankWatchdog(const RankWatchdog&) = delete;
    RankWatchdog& operator=(const RankWatchdog&) = delete;

    void start() {
        active().store(this);
        thread_ = std::thread([this] { run(); });
    }

    // This rank has completed `completed_steps` steps (or finished the work between two): the step the line names,
    // and progress for the timeout, which counts from the first call.
    void progress(int completed_steps) {
        completed_.store(completed_steps, std::memory_order_relaxed);
        last_progress_ns_.store(now_ns(), std::memory_order_relaxed);
    }

    // The run is ending; see close_grace_s.
    void closing() { closing_.store(true); }

    // Before the communicator is destroyed: poll_error must not be called any more.
    void forget_error_poll() {
        std::lock_guard<std::mutex> lock(poll_mu_);
        s_.poll_error = nullptr;
    }

    // Ends the thread and waits for it. After a loss was reported this never returns: the thread ends the process.
    void stop() {
        RankWatchdog* self = this;
        active().compare_exchange_strong(self, nullptr);
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_requested_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable()) thread_.join();
    }

    // One look: the line to stop with, or "" (closing()'s grace applied). The thread's; public for tests.
    std::string look() {
        std::string what = lost_peers();
        if (what.empty()) what = async_error();
        if (what.empty()) what = no_progress();
        if (what.empty()) return "";
        if (closing_.load()) {
            const int64_t now = now_ns();
            if (first_seen_closing_ns_ == 0) first_seen_closing_ns_ = now;
            if ((double)(now - first_seen_closing_ns_) * 1e-9 < s_.close_grace_s) return "";
        }
        return rank_watchdog_line(s_.rank, completed_.load(std::memory_order_relaxed), what);
    }

    // On the thread whose CUDA or NCCL call just failed, before it prints that error: a lost peer is the reason,
    // so its line is printed instead, once, and the process ends. Returns when every peer is alive.
    void explain_failure() {
        const std::string what = lost_peers();
        if (!what.empty()) report_and_exit(rank_watchdog_line(s_.rank, completed_.load(), what));
    }

    // explain_failure() of the running watchdog, if there is one (the target of library_failure_hook).
    static void explain_failure_of_running() {
        if (RankWatchdog* w = active().load()) w->explain_failure();
    }

    // "rank 3 (...) is gone" for the peers on this machine whose process is not alive, or "".
    std::string lost_peers() const {
        std::vector<int> lost;
        const uint64_t here = s_.peers[(size_t)s_.rank].machine;
        for (size_t r = 0; r < s_.peers.size(); r++) {
            const RankPeer& p = s_.peers[r];
            if ((int)r != s_.rank && p.machine == here && !process_alive((pid_t)p.pid, p.start_ticks)) {
                lost.push_back((int)r);
            }
        }
        return lost.empty() ? "" : lost_ranks_text(s_.peers, lost);
    }

private:
    static std::atomic<RankWatchdog*>& active() {  // one per process: the one started last and not yet stopped
        static std::atomic<RankWatchdog*> running{nullptr};
        return running;
    }

    static int64_t now_ns() {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now().time_since_epoch()).count();
    }

    std::string async_error() {
        std::lock_guard<std::mutex> lock(poll_mu_);
        const std::string err = s_.poll_error ? s_.poll_error() : "";
        return err.empty() ? "" : "NCCL reports an asynchronous error (" + err + "): a rank may be gone";
    }

    std::string no_progress() const {
        const int64_t last = last_progress_ns_.load(std::memory_order_relaxed);
        if (s_.timeout_s <= 0 || last == 0 || (double)(now_ns() - last) * 1e-9 < s_.timeout_s) return "";
        char buf[160];
        snprintf(buf, sizeof(buf), "no progress for %g s (LLMC_RANK_TIMEOUT_S): a rank may be gone or stuck",
                 s_.timeout_s);
        return buf;
    }

    void run() {
        const auto interval = std::chrono::duration<double>(s_.interval_s);
        std::unique_lock<std::mutex> lock(mu_);
        while (!cv_.wait_for(lock, interval, [this] { return stop_requested_; })) {
            lock.unlock();
            const std::string line = look();
            if (!line.empty()) report_and_exit(line);
            lock.lock();
        }
    }

    [[noreturn]] void report_and_exit(const std::string& line) {
        if (reported_.exchange(true)) {  // the other thread is reporting; it ends the process
            for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
        }
        if (ftrylockfile(stdout) == 0) {  // what this rank printed comes first; a writer stuck on stdout must not stop us
            fflush_unlocked(stdout);
            funlockfile(stdout);
        }
        const std::string text = line + "\n";
        for (size_t at = 0; at < text.size();) {  // one write(): the line stays whole among the other ranks' output
            const ssize_t n = write(STDERR_FILENO, text.data() + at, text.size() - at);
            if (n <= 0 && errno != EINTR) break;
            if (n > 0) at += (size_t)n;
        }
        std::this_thread::sleep_for(std::chrono::duration<double>(s_.linger_s));
        _exit(EXIT_FAILURE);
    }

    RankWatchdogSettings s_;
    std::thread thread_;
    std::mutex mu_, poll_mu_;
    std::condition_variable cv_;
    bool stop_requested_ = false;
    std::atomic<int> completed_{0};
    std::atomic<int64_t> last_progress_ns_{0};
    std::atomic<bool> closing_{false}, reported_{false};
    int64_t first_seen_closing_ns_ = 0;  // the looking thread's
};
