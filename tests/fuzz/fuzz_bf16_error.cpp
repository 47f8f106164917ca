// Fuzzes the reader of PyTorch's bf16 error record (reference/bf16_error.h, read_pytorch_bf16_error) on
// the input as a text file. Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, a hang, an accepted record with a value
// that is negative or not finite or a trajectory that is not 'steps' long, or one that does not read back the
// same once written out again in the format (format_bf16_error, fuzz_inputs.h).
#include <cmath>

#include "reference/bf16_error.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_inputs.h"

static std::vector<Bf16ErrorPair> all_pairs(const PyTorchBf16Error& e) {
    std::vector<Bf16ErrorPair> v{e.logits_rel_l2, e.loss_abs};
    v.insert(v.end(), e.grad_rel_l2.begin(), e.grad_rel_l2.end());
    v.insert(v.end(), e.trajectory_abs.begin(), e.trajectory_abs.end());
    return v;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::write_scratch_file("bf16_error.txt", data, size);
    PyTorchBf16Error e;
    if (!fuzz::accepts([&] { e = read_pytorch_bf16_error(path); })) return 0;
    FUZZ_REQUIRE(!e.trajectory_abs.empty() && e.trajectory_abs.size() <= (size_t)kReferenceTrajectoryMaxSteps,
                 "%zu trajectory steps accepted", e.trajectory_abs.size());
    const std::vector<Bf16ErrorPair> read = all_pairs(e);
    for (const Bf16ErrorPair& p : read) {
        FUZZ_REQUIRE(std::isfinite(p.all_bf16) && std::isfinite(p.autocast) && p.all_bf16 >= 0 && p.autocast >= 0,
                     "an error of %g / %g accepted", p.all_bf16, p.autocast);
    }
    const std::string again_path = fuzz::write_scratch_file("bf16_error_again.txt", fuzz::format_bf16_error(e));
    const std::vector<Bf16ErrorPair> again = all_pairs(read_pytorch_bf16_error(again_path));
    FUZZ_REQUIRE(again.size() == read.size(), "%zu values read back, %zu written", again.size(), read.size());
    for (size_t i = 0; i < read.size(); i++) {
        FUZZ_REQUIRE(again[i].all_bf16 == read[i].all_bf16 && again[i].autocast == read[i].autocast,
                     "value pair %zu changed when written out and read again", i);
    }
    return 0;
}
