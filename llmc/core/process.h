// Whether a process on this machine is still running, and which machine "this machine" is. kill(pid, 0) alone is
// not enough: a process that was killed stays a zombie until its parent reaps it (and kill() still finds it), and a
// pid can be reused by a new process, which the start time in /proc/<pid>/stat tells apart. Linux; without /proc
// only kill() is asked.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

// What /proc/<pid>/stat says of a process: its state letter (R, S, D, Z, X, ...) and its start time in clock ticks
// after boot (field 22), which never changes while the process lives.
struct ProcessStat {
    char state = '?';
    uint64_t start_ticks = 0;
};

// Parses the text of /proc/<pid>/stat: "pid (comm) S ppid ...". comm may hold spaces and ')' itself, so the
// fields are counted from the last ')'. False if the text is not of that shape.
inline bool parse_process_stat(const std::string& text, ProcessStat* out) {
    const size_t close = text.rfind(')');
    if (close == std::string::npos || close + 2 >= text.size()) return false;
    const char* p = text.c_str() + close + 2;  // field 3, the state
    ProcessStat s;
    s.state = *p;
    for (int field = 3; field < 22; field++) {  // to field 22, starttime
        p = strchr(p, ' ');
        if (!p) return false;
        p++;
    }
    char* end = nullptr;
    errno = 0;
    s.start_ticks = strtoull(p, &end, 10);
    if (end == p || errno != 0) return false;
    *out = s;
    return true;
}

// /proc/<pid>/stat of a process, or false when it cannot be read (no such process, or no /proc).
inline bool read_process_stat(pid_t pid, ProcessStat* out) {
    const std::string path = "/proc/" + std::to_string((long)pid) + "/stat";
    FILE* f = fopen(path.c_str(), "r");
    if (!f) return false;
    char buf[1024];
    const size_t got = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    return parse_process_stat(std::string(buf, got), out);
}

// The start time of this process (0 when /proc cannot tell).
inline uint64_t process_start_ticks(pid_t pid) {
    ProcessStat s;
    return read_process_stat(pid, &s) ? s.start_ticks : 0;
}

// Whether process `pid` of this machine runs: it exists (kill(pid, 0); EPERM means it exists but is not ours), is
// neither a zombie (Z) nor dead (X), and, when start_ticks is not 0, is the process that started then, not a later
// one with the same pid.
inline bool process_alive(pid_t pid, uint64_t start_ticks = 0) {
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno != EPERM) return false;
    ProcessStat s;
    if (!read_process_stat(pid, &s)) return true;  // exists by kill(); /proc cannot tell more
    if (s.state == 'Z' || s.state == 'X' || s.state == 'x') return false;
    return start_ticks == 0 || s.start_ticks == start_ticks;
}

// A 64-bit key for "the same machine, the same pid namespace": the host name, the kernel's boot id and the pid
// namespace. Two processes with the same key see each other's pids (containers on one host have different keys).
inline uint64_t this_machine_key(std::string* host_name = nullptr) {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "unknown");
    if (host_name) *host_name = host;
    std::string key = host;
    if (FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r")) {
        char boot[64] = {0};
        if (fgets(boot, sizeof(boot), f)) key += std::string("|") + boot;
        fclose(f);
    }
    char ns[128] = {0};
    const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
    if (n > 0) key += "|" + std::string(ns, (size_t)n);
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ull;
    return h;
}
