// LLMC_TRACE=PREFIX (llmc/core/options.h): the GPU's timeline of one training step on every rank. CUPTI records
// step LLMC_TRACE_STEP and the step before it (whose all-gather runs under the traced step's forward); the traced
// step's window runs from the host starting it to the host seeing its update done, as the step time does. Each rank
// prints one summary line (llmc/core/timeline.h: compute, communication hidden and exposed, idle) and writes
// PREFIX.rank<R>.json; rank 0 also prints the time per kernel.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "llmc/core/cupti_trace.h"
#include "llmc/core/options.h"
#include "llmc/core/timeline.h"

struct StepTrace {
    bool on = false;
    int step = 0;  // as printed: "step N/..."
    int rank = 0;
    std::string prefix;
    CuptiTrace cupti;
    uint64_t begin = 0, end = 0;
    std::vector<std::pair<std::string, uint64_t>> marks;

    void init(int process_rank) {
        const EngineOptions& o = engine_options();
        on = !o.trace.empty(), step = o.trace_step, prefix = o.trace, rank = process_rank;
    }

    // Before the host starts step `printed` (1-based, as printed).
    void before(int printed) {
        if (!on || printed < step - 1 || printed > step) return;
        if (printed == step - 1) cupti.start();
        const uint64_t t = cupti.now();
        marks.push_back({"step " + std::to_string(printed), t});
        if (printed == step) begin = t;
    }

    // After step `printed` has returned; sync_all() waits for every stream (the exchange included).
    template <typename SyncAll>
    void after(int printed, SyncAll sync_all) {
        if (!on || printed != step) return;
        end = cupti.now();
        marks.push_back({"step " + std::to_string(printed) + " end", end});
        sync_all();
        cupti.stop();
        const TimelineSummary s = summarize_timeline(cupti.records, begin, end);
        printf("trace step %d rank %d: %s\n", step, rank, timeline_summary_line(s).c_str());
        if (rank == 0) {
            int shown = 0;
            for (const TimelineTotal& t : timeline_totals(cupti.records, begin, end)) {
                if (shown++ == 24) break;
                printf("trace step %d rank 0: %9.3f ms %5d x %s%s\n", step, t.ns / 1e6, t.count, t.name.c_str(),
                       t.comm ? " (communication stream)" : "");
            }
        }
        const std::string path = prefix + ".rank" + std::to_string(rank) + ".json";
        if (!write_chrome_trace(path, cupti.records, rank, marks.empty() ? begin : marks.front().second, marks))
            fprintf(stderr, "warning: LLMC_TRACE: cannot write %s\n", path.c_str());
        else printf("trace step %d rank %d: %zu records in %s\n", step, rank, cupti.records.size(), path.c_str());
        fflush(stdout);
        on = false;
    }
};
