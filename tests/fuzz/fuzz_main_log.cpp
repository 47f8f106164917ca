// Fuzzes the main.log reader of a resumed run (llmc/app/train/logger.h, MainLog::open with a resume step, which keeps the
// earlier run's lines before that step): the first 4 bytes are the resume step, the rest the old main.log.
// Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, a hang, or a kept log that is not the old
// log's complete lines with 0 <= step < the resume step, unchanged and in order (as documented: a resumed run
// must leave the same main.log as an uninterrupted one).
#include <cstring>

#include "llmc/app/train/logger.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_inputs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::ByteReader r{data, size};
    const int resume_step = (int)(r.get<uint32_t>() & 0x7fffffff);
    const std::string_view old_log = r.rest();
    fuzz::write_scratch_file("main.log", old_log);
    {
        MainLog log;
        if (!fuzz::accepts([&] { log.open(fuzz::scratch_dir(), resume_step); })) return 0;
    }
    std::string expect;  // the old log's complete lines at steps [0, resume_step)
    for (size_t pos = 0; pos < old_log.size();) {
        const size_t nl = old_log.find('\n', pos);
        if (nl == std::string_view::npos) break;
        const std::string line(old_log.substr(pos, nl + 1 - pos));
        const int step = MainLog::line_step(line);
        if (step >= 0 && step < resume_step) expect += line;
        pos = nl + 1;
    }
    const std::string kept = fuzz::read_whole_scratch_file(fuzz::scratch_dir() + "/main.log");
    FUZZ_REQUIRE(kept == expect, "the kept log (%zu bytes) is not the old log's lines before step %d (%zu bytes)",
                 kept.size(), resume_step, expect.size());
    return 0;
}
