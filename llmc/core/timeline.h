// A timeline of what the GPU ran during a window (one training step), and where its time went: host-only
// arithmetic over intervals, filled by llmc/core/cupti_trace.h and tested on the CPU (tests/unit/test_timeline.cpp).
//
// Each record is a kernel, copy or memset with its start and end (ns, one clock for every rank on a host) and
// whether it is communication (an NCCL kernel, or a copy or memset on the communication stream). Over a window:
//   compute   the union of the compute records' intervals (several streams may overlap: counted once);
//   comm      the union of the communication records' intervals;
//   exposed   communication while no compute record runs: time the step would lose if nothing else changed;
//   hidden    communication under compute;
//   idle      neither: host gaps, launch latency, waits on the host.
// write_chrome_trace writes the records as Chrome trace events (chrome://tracing, ui.perfetto.dev), one process per
// rank and one thread per stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

struct TimelineRecord {
    std::string name;  // kernel name (demangled, short) or "memcpy DtoD" / "memset N B"
    uint32_t stream = 0;
    uint64_t start = 0, end = 0;  // ns
    bool comm = false;
};

struct Interval {
    uint64_t begin, end;
};

namespace timeline_detail {

// Sorted, disjoint union of the intervals, clipped to [lo, hi).
inline std::vector<Interval> merged(std::vector<Interval> v, uint64_t lo, uint64_t hi) {
    std::vector<Interval> out;
    for (Interval& i : v) i.begin = std::max(i.begin, lo), i.end = std::min(i.end, hi);
    v.erase(std::remove_if(v.begin(), v.end(), [](const Interval& i) { return i.end <= i.begin; }), v.end());
    std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
    for (const Interval& i : v) {
        if (!out.empty() && i.begin <= out.back().end) out.back().end = std::max(out.back().end, i.end);
        else out.push_back(i);
    }
    return out;
}
inline uint64_t length(const std::vector<Interval>& v) {
    uint64_t n = 0;
    for (const Interval& i : v) n += i.end - i.begin;
    return n;
}
// Length of the intersection of two sorted disjoint unions.
inline uint64_t overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
    uint64_t n = 0;
    for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
        const uint64_t lo = std::max(a[i].begin, b[j].begin), hi = std::min(a[i].end, b[j].end);
        if (lo < hi) n += hi - lo;
        (a[i].end < b[j].end) ? i++ : j++;
    }
    return n;
}

}  // namespace timeline_detail

struct TimelineSummary {
    uint64_t window = 0, compute = 0, comm = 0, exposed = 0, hidden = 0, idle = 0;  // ns
    int comm_records = 0, compute_records = 0;
};

inline TimelineSummary summarize_timeline(const std::vector<TimelineRecord>& records, uint64_t lo, uint64_t hi) {
    using namespace timeline_detail;
    std::vector<Interval> compute, comm;
    TimelineSummary s;
    for (const TimelineRecord& r : records) {
        if (r.end <= lo || r.start >= hi) continue;
        (r.comm ? comm : compute).push_back({r.start, r.end});
        (r.comm ? s.comm_records : s.compute_records)++;
    }
    const std::vector<Interval> a = merged(compute, lo, hi), b = merged(comm, lo, hi);
    s.window = hi > lo ? hi - lo : 0;
    s.compute = length(a);
    s.comm = length(b);
    s.hidden = overlap(a, b);
    s.exposed = s.comm - s.hidden;
    s.idle = s.window - s.compute - s.exposed;
    return s;
}

// Time per name inside the window, largest first (a record's full duration when it starts inside).
struct TimelineTotal {
    std::string name;
    bool comm;
    int count;
    uint64_t ns;
};
inline std::vector<TimelineTotal> timeline_totals(const std::vector<TimelineRecord>& records, uint64_t lo, uint64_t hi) {
    std::map<std::pair<std::string, bool>, TimelineTotal> by;
    for (const TimelineRecord& r : records) {
        if (r.start < lo || r.start >= hi) continue;
        TimelineTotal& t = by[{r.name, r.comm}];
        t.name = r.name, t.comm = r.comm, t.count++, t.ns += r.end - r.start;
    }
    std::vector<TimelineTotal> out;
    for (auto& kv : by) out.push_back(kv.second);
    std::sort(out.begin(), out.end(), [](const TimelineTotal& a, const TimelineTotal& b) { return a.ns > b.ns; });
    return out;
}

inline std::string timeline_summary_line(const TimelineSummary& s) {
    char b[320];
    auto ms = [](uint64_t ns) { return ns / 1e6; };
    snprintf(b, sizeof(b),
             "%.3f ms: compute %.3f ms, communication %.3f ms (hidden under compute %.3f, exposed %.3f), "
             "idle %.3f ms; %d compute and %d communication records",
             ms(s.window), ms(s.compute), ms(s.comm), ms(s.hidden), ms(s.exposed), ms(s.idle), s.compute_records,
             s.comm_records);
    return b;
}

// Chrome trace events (times in microseconds from t0); marks: instants such as each step's start. Returns false if
// the file cannot be written.
inline bool write_chrome_trace(const std::string& path, const std::vector<TimelineRecord>& records, int rank,
                               uint64_t t0, const std::vector<std::pair<std::string, uint64_t>>& marks) {
    FILE* f = fopen(path.c_str(), "w");
    if (!f) return false;
    auto escaped = [](const std::string& s) {
        std::string o;
        for (char c : s) {
            if (c == '"' || c == '\\') o += '\\';
            if ((unsigned char)c >= 0x20) o += c;
        }
        return o;
    };
    fprintf(f, "{\"traceEvents\":[\n");
    bool first = true;
    for (const TimelineRecord& r : records) {
        fprintf(f, "%s{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f}",
                first ? "" : ",\n", escaped(r.name).c_str(), r.comm ? "comm" : "compute", rank, r.stream,
                (double)(int64_t)(r.start - t0) / 1e3, (double)(r.end - r.start) / 1e3);
        first = false;
    }
    for (const auto& [name, at] : marks) {
        fprintf(f, "%s{\"name\":\"%s\",\"ph\":\"i\",\"s\":\"p\",\"pid\":%d,\"tid\":0,\"ts\":%.3f}", first ? "" : ",\n",
                escaped(name).c_str(), rank, (double)(int64_t)(at - t0) / 1e3);
        first = false;
    }
    fprintf(f, "\n]}\n");
    return fclose(f) == 0;
}
