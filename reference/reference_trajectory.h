// Reference AdamW loss trajectory (text), written by scripts/reference/train_gpt2.py next to a model and debug state:
// the model is trained for `steps` AdamW steps on the debug state's one batch, starting from the saved
// weights with fresh optimizer state (m = v = 0) and no gradient clipping. losses[i] is the mean loss of
// the forward pass of step i, BEFORE that step's update (so losses[0] is the debug state's loss); the
// update of step i uses AdamW step number t = i + 1 for bias correction. Weight decay applies only to the
// tensors gpt2_parameter_table() marks (the matrices, including the tied wte, and wpe).
//
//   # comment lines and blank lines are ignored
//   gpt2_reference_trajectory 1          <- format name and version, first non-comment line
//   steps 10
//   lr 0.0001
//   beta1 0.9
//   beta2 0.95
//   eps 1e-08
//   weight_decay 0.1
//   loss 0 6.912345
//   ...                                  <- one "loss <i> <value>" line per step, i = 0 .. steps-1 in order
//
// Values are written with 9 significant digits, so a float read back is the float written.
// The file is ASCII text: a control byte anywhere (a NUL, an escape) or a non-ASCII byte outside a
// comment is an error, and so is a number outside the float range (it must not become inf or 0).
#pragma once

#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "llmc/core/utils.h"
#include "reference/text_record.h"

struct ReferenceTrajectory {
    float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
    std::vector<float> losses;  // one per step
};

constexpr int kReferenceTrajectoryVersion = 1;
constexpr int kReferenceTrajectoryMaxSteps = 100000;

// Reads and validates a trajectory file; any problem -> FileError "<path>: line N: <problem>".
inline ReferenceTrajectory read_reference_trajectory(const std::string& path) {
    using namespace text_record;
    ReferenceTrajectory t;
    bool have_header = false;
    long steps = -1;
    bool have[5] = {false, false, false, false, false};
    const char* names[5] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
    float* fields[5] = {&t.lr, &t.beta1, &t.beta2, &t.eps, &t.weight_decay};

    for_each_line(path, 1 << 24, "trajectory file", [&](int line, const std::vector<std::string>& w) {
        const std::string& key = w[0];
        if (!have_header) {
            if (key != "gpt2_reference_trajectory" || w.size() != 2) {
                file_error(path, "line %d: not a reference trajectory (expected 'gpt2_reference_trajectory %d')", line,
                           kReferenceTrajectoryVersion);
            }
            long version = parse_int(path, line, key, w[1]);
            if (version != kReferenceTrajectoryVersion) {
                file_error(path, "line %d: unsupported trajectory version %ld (expected %d)", line, version,
                           kReferenceTrajectoryVersion);
            }
            have_header = true;
            return;
        }
        if (key == "loss") {
            if (w.size() != 3) file_error(path, "line %d: expected 'loss <step> <value>'", line);
            if (steps < 0) file_error(path, "line %d: 'steps' must come before the losses", line);
            long i = parse_int(path, line, key, w[1]);
            if (i != (long)t.losses.size()) {
                file_error(path, "line %d: loss for step %ld, expected step %zu (steps in order from 0)", line, i,
                           t.losses.size());
            }
            if (i >= steps) file_error(path, "line %d: loss for step %ld but steps = %ld", line, i, steps);
            t.losses.push_back(parse_float(path, line, key, w[2]));
            return;
        }
        if (w.size() != 2) file_error(path, "line %d: expected '<key> <value>'", line);
        if (key == "steps") {
            if (steps >= 0) file_error(path, "line %d: 'steps' given twice", line);
            steps = parse_int(path, line, key, w[1]);
            if (steps < 1 || steps > kReferenceTrajectoryMaxSteps) {
                file_error(path, "line %d: steps = %ld, must be in [1, %d]", line, steps, kReferenceTrajectoryMaxSteps);
            }
            return;
        }
        bool known = false;
        for (int k = 0; k < 5; k++) {
            if (key != names[k]) continue;
            if (have[k]) file_error(path, "line %d: '%s' given twice", line, names[k]);
            *fields[k] = parse_float(path, line, key, w[1]);
            have[k] = true;
            known = true;
        }
        if (!known) file_error(path, "line %d: unknown key '%s'", line, key.c_str());
    });
    if (!have_header) file_error(path, "empty: no 'gpt2_reference_trajectory' line");
    if (steps < 0) file_error(path, "missing 'steps'");
    for (int k = 0; k < 5; k++) {
        if (!have[k]) file_error(path, "missing '%s'", names[k]);
    }
    if ((long)t.losses.size() != steps) {
        file_error(path, "has %zu loss lines but steps = %ld (truncated?)", t.losses.size(), steps);
    }
    if (!(t.lr > 0) || !(t.beta1 >= 0 && t.beta1 < 1) || !(t.beta2 >= 0 && t.beta2 < 1) || !(t.eps > 0) ||
        !(t.weight_decay >= 0)) {
        file_error(path, "optimizer settings out of range (need lr > 0, 0 <= beta1, beta2 < 1, eps > 0, "
                         "weight_decay >= 0)");
    }
    return t;
}

// Writes the file atomically in the format above.
inline void write_reference_trajectory(const std::string& path, const ReferenceTrajectory& t) {
    if (t.losses.empty()) file_error(path, "cannot write a trajectory with no losses");
    std::string s;
    char buf[256];
    s += "# GPT-2 reference trajectory: AdamW on one batch (the debug state's), fresh optimizer state, no clipping.\n";
    s += "# loss i = mean loss of step i's forward pass, before its update (AdamW step t = i + 1).\n";
    s += "# Weight decay only on the tensors the parameter table marks (matrices incl. tied wte, and wpe).\n";
    snprintf(buf, sizeof(buf), "gpt2_reference_trajectory %d\nsteps %zu\n", kReferenceTrajectoryVersion,
             t.losses.size());
    s += buf;
    snprintf(buf, sizeof(buf), "lr %.9g\nbeta1 %.9g\nbeta2 %.9g\neps %.9g\nweight_decay %.9g\n", t.lr, t.beta1,
             t.beta2, t.eps, t.weight_decay);
    s += buf;
    for (size_t i = 0; i < t.losses.size(); i++) {
        snprintf(buf, sizeof(buf), "loss %zu %.9g\n", i, t.losses[i]);
        s += buf;
    }
    AtomicOutputFile out(path);
    out.write(s.data(), s.size());
    out.commit();
}
