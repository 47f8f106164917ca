// What the trainer prints and logs.
// main.log (in -o) uses llm.c's line format so its plotting tools read it:
//   "s:<step> trl:<loss>"   training loss of step <step> (0-based: the batch seen after <step> updates)
//   "s:<step> tel:<loss>"   validation loss after <step> updates
//   "s:<step> eval:<acc>"   HellaSwag accuracy (acc_norm) after <step> updates (-h 1), four decimals as llm.c
// On resume from step S, lines from the earlier run at s >= S are dropped (the resumed run writes them
// again), so an interrupted-and-resumed run leaves the same main.log as an uninterrupted one.
// The console gets a start-up table (llmc/core/startup_table.h) and one line per step (format_step_line).
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/core/startup_table.h"
#include "llmc/core/utils.h"

class MainLog {
public:
    MainLog() = default;
    ~MainLog() { if (fp_) fclose(fp_); }
    MainLog(const MainLog&) = delete;
    MainLog& operator=(const MainLog&) = delete;

    // dir empty: logging off. resume_step < 0: start a new log; else keep the old lines with s < resume_step.
    void open(const std::string& dir, int resume_step) {
        if (dir.empty()) return;
        path_ = dir + "/main.log";
        if (resume_step >= 0) keep_lines_before(resume_step);
        fp_ = fopen(path_.c_str(), resume_step >= 0 ? "a" : "w");
        if (!fp_) file_error(path_, "cannot open for writing (%s)", strerror(errno));
    }
    bool enabled() const { return fp_ != nullptr; }
    const std::string& path() const { return path_; }

    void log_train(int step, float loss) { write_line("s:%d trl:%f\n", step, loss); }
    void log_val(int step, float loss) { write_line("s:%d tel:%f\n", step, loss); }
    void log_eval(int step, float accuracy) { write_line("s:%d eval:%.4f\n", step, accuracy); }

    // The step number of a main.log line, or -1 if it is not one.
    static int line_step(const std::string& line) {
        int step = -1, consumed = 0;
        if (sscanf(line.c_str(), "s:%d %n", &step, &consumed) != 1 || consumed == 0) return -1;
        return step;
    }

private:
    void write_line(const char* fmt, int step, float loss) {
        if (!fp_) return;
        if (fprintf(fp_, fmt, step, (double)loss) < 0 || fflush(fp_) != 0) {
            file_error(path_, "write failed (%s)", strerror(errno));
        }
    }

    // Rewrites the log (atomically) without lines at steps >= step. A missing log is fine. Read as bytes (a
    // NUL inside a line must not cut it short and glue it to the next), split at each '\n'.
    void keep_lines_before(int step) {
        FILE* in = fopen(path_.c_str(), "rb");
        if (!in) return;
        std::string text;
        char buf[1 << 16];
        size_t got;
        while ((got = fread(buf, 1, sizeof(buf), in)) > 0) text.append(buf, got);
        const bool failed = ferror(in) != 0;
        fclose(in);
        if (failed) file_error(path_, "read failed (%s)", strerror(errno));
        std::vector<std::string> kept;
        for (size_t at = 0; at < text.size();) {
            size_t end = text.find('\n', at);
            if (end == std::string::npos) break;  // an unfinished last line (a crash mid-write) is dropped
            const std::string line = text.substr(at, end + 1 - at);
            const int s = line_step(line);
            if (s >= 0 && s < step) kept.push_back(line);
            at = end + 1;
        }
        AtomicOutputFile out(path_);
        for (const std::string& l : kept) out.write(l.data(), l.size());
        out.commit();
    }

    std::string path_;
    FILE* fp_ = nullptr;
};

struct StepStats {
    int step = 0;            // 1-based for display
    int total_steps = 0;
    float loss = 0, grad_norm = 0, lr = 0;
    double ms = 0;           // wall time of the step
    double tokens_per_s = 0; // over all processes
    double mfu = -1;         // fraction of peak with 6N + 6LTC FLOPs per token (llm.c's count), < 0 = unknown
    double mfu_full = -1;    // the same with 6N + 12LTC (nanoGPT's count: attention without the causal half)
};

// "... | MFU 37.8% (6N+6LTC; 40.9% with 6N+12LTC)": the first figure stays where scripts read it.
inline std::string format_step_line(const StepStats& s) {
    char mfu[64];
    if (s.mfu >= 0 && s.mfu_full >= 0) {
        snprintf(mfu, sizeof(mfu), "%.1f%% (6N+6LTC; %.1f%% with 6N+12LTC)", 100.0 * s.mfu, 100.0 * s.mfu_full);
    } else if (s.mfu >= 0) {
        snprintf(mfu, sizeof(mfu), "%.1f%%", 100.0 * s.mfu);
    } else {
        snprintf(mfu, sizeof(mfu), "n/a");
    }
    char buf[320];
    snprintf(buf, sizeof(buf), "step %5d/%d | loss %.6f | norm %8.4f | lr %.3e | %8.2f ms | %9.0f tok/s | MFU %s",
             s.step, s.total_steps, (double)s.loss, (double)s.grad_norm, (double)s.lr, s.ms, s.tokens_per_s, mfu);
    return buf;
}
