// The rank watchdog (llmc/distributed/rank_watchdog.h) and the process checks under it (llmc/core/process.h), with
// forked processes as the peers: alive, exited, killed (a zombie until reaped, then gone), a reused pid; the one line
// and the exit when a peer is lost, the grace at the end of a run, the no-progress limit, the switch that sets it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "llmc/core/options.h"
#include "llmc/distributed/rank_watchdog.h"

namespace {

// A child that sleeps until killed.
pid_t fork_sleeper() {
    const pid_t pid = fork();
    if (pid == 0) {
        for (;;) pause();
    }
    return pid;
}

// A child that has exited and been reaped: its pid names no process.
pid_t reaped_child() {
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    int status = 0;
    waitpid(pid, &status, 0);
    return pid;
}

// Waits until the child is a zombie (killed or exited, not yet reaped).
void wait_until_zombie(pid_t pid) {
    for (int i = 0; i < 500; i++) {
        ProcessStat s;
        if (read_process_stat(pid, &s) && s.state == 'Z') return;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL() << "process " << pid << " never became a zombie";
}

// Peers {this process as rank 0, `pid` as rank 1} on this machine.
RankWatchdogSettings two_ranks(pid_t peer) {
    RankWatchdogSettings s;
    s.rank = 0;
    s.peers = {this_rank_peer(), this_rank_peer()};
    s.peers[1].pid = (int32_t)peer;
    s.peers[1].start_ticks = process_start_ticks(peer);
    snprintf(s.peers[1].host, sizeof(s.peers[1].host), "node7");
    s.interval_s = 0.02;
    s.linger_s = 0;
    return s;
}

}  // namespace

TEST(Process, ParsesProcStat) {
    ProcessStat s;
    // comm with spaces and a ')' of its own: the fields count from the last ')'
    ASSERT_TRUE(parse_process_stat("42 (a) b (c) Z 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 5",
                                   &s));
    EXPECT_EQ(s.state, 'Z');
    EXPECT_EQ(s.start_ticks, 987654u);
    EXPECT_FALSE(parse_process_stat("42 (a) S 1 2 3", &s));
    EXPECT_FALSE(parse_process_stat("no parenthesis", &s));
    ASSERT_TRUE(read_process_stat(getpid(), &s));
    EXPECT_NE(s.state, 'Z');
    EXPECT_EQ(s.start_ticks, process_start_ticks(getpid()));
}

TEST(Process, AliveExitedKilledReused) {
    EXPECT_TRUE(process_alive(getpid()));
    EXPECT_TRUE(process_alive(getpid(), process_start_ticks(getpid())));
    EXPECT_FALSE(process_alive(getpid(), process_start_ticks(getpid()) + 1));  // another process under our pid
    EXPECT_FALSE(process_alive(0));
    EXPECT_FALSE(process_alive(999999999));  // above any pid_max
    EXPECT_FALSE(process_alive(reaped_child()));

    const pid_t killed = fork_sleeper();
    const uint64_t ticks = process_start_ticks(killed);
    EXPECT_TRUE(process_alive(killed, ticks));
    ASSERT_EQ(kill(killed, SIGKILL), 0);
    wait_until_zombie(killed);
    EXPECT_EQ(kill(killed, 0), 0);  // kill() alone still finds the zombie
    EXPECT_FALSE(process_alive(killed, ticks));
    int status = 0;
    waitpid(killed, &status, 0);
    EXPECT_FALSE(process_alive(killed, ticks));

    const pid_t exited = fork();
    if (exited == 0) _exit(3);
    wait_until_zombie(exited);
    EXPECT_FALSE(process_alive(exited));
    waitpid(exited, &status, 0);
}

TEST(Process, MachineKey) {
    std::string host;
    EXPECT_EQ(this_machine_key(&host), this_machine_key());
    EXPECT_FALSE(host.empty());
    const RankPeer me = this_rank_peer();
    EXPECT_EQ(me.pid, (int32_t)getpid());
    EXPECT_EQ(me.machine, this_machine_key());
    EXPECT_EQ(std::string(me.host), host.substr(0, sizeof(me.host) - 1));
}

TEST(RankWatchdog, Lines) {
    std::vector<RankPeer> peers(4);
    for (int r = 0; r < 4; r++) {
        peers[(size_t)r].pid = 100 + r;
        snprintf(peers[(size_t)r].host, sizeof(peers[(size_t)r].host), "gpu%d", r / 2);
    }
    EXPECT_EQ(rank_watchdog_line(0, 12, lost_ranks_text(peers, {3})),
              "error: rank 3 (pid 103 on host gpu1) is gone; rank 0 stops after step 12, the last one it completed");
    EXPECT_EQ(lost_ranks_text(peers, {1, 2, 3}),
              "ranks 1 (pid 101 on host gpu0), 2 (pid 102 on host gpu1) and 3 (pid 103 on host gpu1) are gone");
    EXPECT_EQ(rank_watchdog_line(2, 0, "x"), "error: x; rank 2 stops before completing a step");
}

TEST(RankWatchdog, SeesALostPeerOnThisMachineOnly) {
    const pid_t peer = fork_sleeper();
    RankWatchdog w(two_ranks(peer));
    w.progress(7);
    EXPECT_EQ(w.look(), "");
    kill(peer, SIGKILL);
    wait_until_zombie(peer);  // not reaped yet: still a loss
    const std::string want = "error: rank 1 (pid " + std::to_string(peer) +
                             " on host node7) is gone; rank 0 stops after step 7, the last one it completed";
    EXPECT_EQ(w.look(), want);
    int status = 0;
    waitpid(peer, &status, 0);
    EXPECT_EQ(w.look(), want);

    RankWatchdogSettings remote = two_ranks(peer);
    remote.peers[1].machine ^= 1;  // another machine: its pids mean nothing here
    RankWatchdog other(remote);
    EXPECT_EQ(other.look(), "");
}

TEST(RankWatchdog, AsyncErrorAndNoProgress) {
    RankWatchdogSettings s = two_ranks(getpid());
    std::string err;
    s.poll_error = [&err] { return err; };
    s.timeout_s = 0.2;
    RankWatchdog w(s);
    EXPECT_EQ(w.look(), "");
    err = "remote process exited or there was a network error";
    EXPECT_EQ(w.look(), "error: NCCL reports an asynchronous error (remote process exited or there was a network "
                        "error): a rank may be gone; rank 0 stops before completing a step");
    w.forget_error_poll();
    EXPECT_EQ(w.look(), "");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(w.look(), "") << "the limit counts from the first progress";
    w.progress(3);
    EXPECT_EQ(w.look(), "");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(w.look(), "error: no progress for 0.2 s (LLMC_RANK_TIMEOUT_S): a rank may be gone or stuck; rank 0 stops "
                        "after step 3, the last one it completed");
}

// The thread prints the one line and ends the process with EXIT_FAILURE; nothing else reaches stderr.
TEST(RankWatchdogDeathTest, ALostPeerStopsTheProcessWithOneLine) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            RankWatchdog w(two_ranks(reaped_child()));
            w.progress(12);
            w.start();
            std::this_thread::sleep_for(std::chrono::seconds(10));
            exit(0);
        },
        testing::ExitedWithCode(EXIT_FAILURE),
        "^error: rank 1 \\(pid [0-9]+ on host node7\\) is gone; rank 0 stops after step 12, the last one it "
        "completed\n$");
}

// A failed CUDA or NCCL call on a rank whose peer is gone names the peer, not the call.
TEST(RankWatchdogDeathTest, AFailedCallNamesTheLostPeer) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            RankWatchdogSettings s = two_ranks(reaped_child());
            s.interval_s = 60;  // the thread does not look in time: the failing call does
            RankWatchdog w(s);
            w.start();
            RankWatchdog::explain_failure_of_running();
            exit(0);
        },
        testing::ExitedWithCode(EXIT_FAILURE), "^error: rank 1 .* is gone; rank 0 stops before completing a step\n$");
    const pid_t peer = fork_sleeper();
    RankWatchdog w(two_ranks(peer));
    w.start();
    RankWatchdog::explain_failure_of_running();  // every peer alive: returns, the call's own error follows
    w.stop();
    RankWatchdog::explain_failure_of_running();  // none running: nothing
    kill(peer, SIGKILL);
    int status = 0;
    waitpid(peer, &status, 0);
}

// After closing(), a peer that leaves may have finished: no line if stop() comes within the grace, the line if not.
TEST(RankWatchdogDeathTest, ClosingGivesLeavingPeersAGrace) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    {
        RankWatchdogSettings s = two_ranks(reaped_child());
        s.close_grace_s = 5;
        RankWatchdog w(s);
        w.closing();
        w.start();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        w.stop();  // returns: no loss reported
    }
    EXPECT_EXIT(
        {
            RankWatchdogSettings s = two_ranks(reaped_child());
            s.close_grace_s = 0.2;
            RankWatchdog w(s);
            w.closing();
            w.start();
            std::this_thread::sleep_for(std::chrono::seconds(10));
            exit(0);
        },
        testing::ExitedWithCode(EXIT_FAILURE), "^error: rank 1 .* is gone; rank 0 stops before completing a step\n$");
}

TEST(RankWatchdogDeathTest, TimeoutSwitch) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const char* name = "LLMC_RANK_TIMEOUT_S";
    unsetenv(name);
    EXPECT_EQ(options_detail::read().rank_timeout_s, 0);
    setenv(name, "600", 1);
    EXPECT_EQ(options_detail::read().rank_timeout_s, 600);
    EXPECT_EQ(options_detail::read().description(), "LLMC_RANK_TIMEOUT_S=600");
    setenv(name, "0", 1);
    EXPECT_EQ(options_detail::read().rank_timeout_s, 0);
    for (const char* bad : {"-1", "1.5", "10s", "604801", "99999999999"}) {
        setenv(name, bad, 1);
        EXPECT_EXIT(options_detail::read(), testing::ExitedWithCode(EXIT_FAILURE),
                    "^error: environment variable LLMC_RANK_TIMEOUT_S=.*: expected whole seconds from 0 \\(off\\) to "
                    "604800\n$")
            << bad;
    }
    unsetenv(name);
}
