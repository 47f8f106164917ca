// Fuzzes the reference trajectory reader (reference/reference_trajectory.h) on the input as a text
// file. Expected: FileError.
// Findings: a crash or sanitizer report, another exception, a leak, a hang, an accepted file with values
// outside what the reader promises (finite floats, steps losses, optimizer settings in range), or one that
// does not survive write_reference_trajectory + read_reference_trajectory bit for bit.
#include <cmath>
#include <cstring>

#include "reference/reference_trajectory.h"
#include "tests/fuzz/fuzz_common.h"

static bool same_float(float a, float b) { return memcmp(&a, &b, sizeof(float)) == 0; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::write_scratch_file("trajectory.txt", data, size);
    ReferenceTrajectory t;
    if (!fuzz::accepts([&] { t = read_reference_trajectory(path); })) return 0;
    FUZZ_REQUIRE(!t.losses.empty() && t.losses.size() <= (size_t)kReferenceTrajectoryMaxSteps, "%zu losses",
                 t.losses.size());
    for (float x : t.losses) FUZZ_REQUIRE(std::isfinite(x), "a loss is not finite");
    FUZZ_REQUIRE(t.lr > 0 && std::isfinite(t.lr) && t.beta1 >= 0 && t.beta1 < 1 && t.beta2 >= 0 && t.beta2 < 1 &&
                     t.eps > 0 && std::isfinite(t.eps) && t.weight_decay >= 0 && std::isfinite(t.weight_decay),
                 "optimizer settings out of range were accepted");
    const std::string again_path = fuzz::scratch_dir() + "/trajectory_again.txt";
    write_reference_trajectory(again_path, t);
    const ReferenceTrajectory again = read_reference_trajectory(again_path);
    bool same = again.losses.size() == t.losses.size() && same_float(again.lr, t.lr) && same_float(again.beta1, t.beta1) &&
                same_float(again.beta2, t.beta2) && same_float(again.eps, t.eps) &&
                same_float(again.weight_decay, t.weight_decay);
    for (size_t i = 0; same && i < t.losses.size(); i++) same = same_float(again.losses[i], t.losses[i]);
    FUZZ_REQUIRE(same, "trajectory changed on a rewrite");
    return 0;
}
