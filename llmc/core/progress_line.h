// A counter on stderr for long evaluations ("HellaSwag: batch 120/628"), redrawn in place, erased at the end. Only
// when stderr is a terminal and the caller asks (rank 0): logs and pipes get the result lines alone.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>

class ProgressLine {
public:
    ProgressLine(std::string what, int total, bool wanted)
        : what_(std::move(what)), total_(total), on_(wanted && total > 1 && isatty(fileno(stderr))) {}
    ~ProgressLine() { finish(); }
    ProgressLine(const ProgressLine&) = delete;
    ProgressLine& operator=(const ProgressLine&) = delete;

    // done items of total; redrawn every 8 and at the last
    void update(int done) {
        if (!on_ || (done % 8 != 0 && done != total_)) return;
        fprintf(stderr, "\r%s: batch %d/%d", what_.c_str(), done, total_);
        fflush(stderr);
        drawn_ = true;
    }
    void finish() {
        if (!drawn_) return;
        fprintf(stderr, "\r%*s\r", (int)what_.size() + 32, "");
        fflush(stderr);
        drawn_ = false;
    }

private:
    std::string what_;
    int total_;
    bool on_, drawn_ = false;
};
