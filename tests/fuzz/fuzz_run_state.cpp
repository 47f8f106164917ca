// Fuzzes the run-state reader (llmc/formats/run_state.h): read_run_state_header and read_run_state on the input as
// a checkpoint's run-state file (versions 1 to 3, with or without the FP8 section). Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, an allocation past -malloc_limit_mb
// (the optimizer blob and the FP8 section are sized from the header), the two readers disagreeing, or an accepted file that does
// not survive write_run_state + read_run_state (what the reader accepts, the writer must write so that the
// reader accepts it again; a version 2 file must come back byte for byte). A version 1 file has run id and
// model hash 0, which the writer refuses (a FileError): Checkpointer::restore gives such a run a new id and
// save() a real hash, as the rewrite here does.
#include <cstring>

#include "llmc/formats/run_state.h"
#include "tests/fuzz/fuzz_common.h"

static bool same_state(const RunState& a, const RunState& b) {
    return a.step == b.step && a.B == b.B && a.T == b.T && a.num_processes == b.num_processes &&
           a.grad_accum_steps == b.grad_accum_steps && a.run_id == b.run_id && a.model_hash == b.model_hash &&
           memcmp(&a.sampler_rng, &b.sampler_rng, sizeof(RngState)) == 0 &&
           memcmp(&a.train_loader, &b.train_loader, sizeof(DataLoaderState)) == 0 &&
           memcmp(&a.val_loader, &b.val_loader, sizeof(DataLoaderState)) == 0 && a.optimizer_state == b.optimizer_state &&
           a.fp8_state == b.fp8_state;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::write_scratch_file("run_state.bin", data, size);
    RunState header, s;
    const bool header_ok = fuzz::accepts([&] { header = read_run_state_header(path); });
    const bool ok = fuzz::accepts([&] { s = read_run_state(path); });
    FUZZ_REQUIRE(ok == header_ok, "read_run_state_header %s the file, read_run_state %s it",
                 header_ok ? "accepts" : "rejects", ok ? "accepts" : "rejects");
    if (!ok) return 0;
    FUZZ_REQUIRE(header.step == s.step && header.run_id == s.run_id && header.model_hash == s.model_hash,
                 "header and file readers disagree");

    const std::string again_path = fuzz::scratch_dir() + "/run_state_again.bin";
    FUZZ_REQUIRE(!fuzz::accepts([&] { RunState zero = s; zero.run_id = 0; write_run_state(again_path, zero); }),
                 "write_run_state wrote a run id of 0");
    if (s.run_id == 0) {  // version 1: as restore + save make it
        s.run_id = 1;
        s.model_hash = 2;
    }
    write_run_state(again_path, s);
    RunState again;
    std::string why;
    try {
        again = read_run_state(again_path);
    } catch (const FileError& e) {
        why = e.what();
    }
    FUZZ_REQUIRE(why.empty(), "write_run_state wrote a file read_run_state refuses: %s", why.c_str());
    FUZZ_REQUIRE(same_state(again, s), "run state changed on a rewrite");
    int32_t version = 0;
    memcpy(&version, data + 4, sizeof(version));
    if (version == kRunStateVersion) {  // (a version 1 file comes back as version 2: other bytes)
        const std::string bytes = fuzz::read_whole_scratch_file(again_path);
        FUZZ_REQUIRE(bytes.size() == size && memcmp(bytes.data(), data, size) == 0,
                     "a version %d file is not rewritten byte for byte", kRunStateVersion);
    }
    return 0;
}
