// PyTorch's own bf16 error on a reference (text), written next to it by scripts/reference/train_gpt2.py, or for a reference
// made elsewhere by scripts/reference/pytorch_bf16_error.py: how far PyTorch's bf16 results are from the reference's fp32
// values, run two ways (all-bf16: weights, activations and AdamW in bf16; autocast: fp32 weights and AdamW, bf16
// matmuls). test_gpt2cu's BF16 build is checked against a factor of the larger of the two (bf16_bound below),
// so its bounds hold for any valid reference, not one tuned to a single fixture.
//
//   # comment lines and blank lines are ignored
//   gpt2_bf16_error 1                     <- format name and version, first non-comment line
//   steps 10
//   logits_rel_l2 <all_bf16> <autocast>
//   loss_abs <all_bf16> <autocast>
//   grad_rel_l2 <tensor> <all_bf16> <autocast>    <- 16 lines, gpt2_parameter_table order and names
//   trajectory_abs <i> <all_bf16> <autocast>      <- one line per step, i = 0 .. steps-1 in order
//
// Lines are read and checked as the trajectory file's are (reference/text_record.h).
#pragma once

#include <algorithm>
#include <array>
#include <sstream>
#include <string>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/gpt2/gpt2_config.h"
#include "reference/reference_trajectory.h"
#include "reference/text_record.h"

struct Bf16ErrorPair {
    double all_bf16 = 0, autocast = 0;
    double worst() const { return std::max(all_bf16, autocast); }
};

struct PyTorchBf16Error {
    Bf16ErrorPair logits_rel_l2, loss_abs;
    std::array<Bf16ErrorPair, kNumParameterTensors> grad_rel_l2;
    std::vector<Bf16ErrorPair> trajectory_abs;  // one per step
};

constexpr int kBf16ErrorVersion = 1;

// Any problem -> FileError "<path>: line N: <problem>".
inline PyTorchBf16Error read_pytorch_bf16_error(const std::string& path) {
    using namespace text_record;
    PyTorchBf16Error e;
    const GPT2Config any{1, 1, 1, 1, 1, 1};  // for the tensor names only
    const auto table = gpt2_parameter_table(any);
    bool have_header = false, have_logits = false, have_loss = false;
    long steps = -1;
    size_t grads = 0;
    for_each_line(path, 1 << 20, "bf16 error record", [&](int line, const std::vector<std::string>& w) {
        const std::string& key = w[0];
        auto pair_at = [&](size_t i) {  // the two columns starting at word i, each >= 0
            if (w.size() != i + 2) file_error(path, "line %d: expected two values after '%s'", line, key.c_str());
            Bf16ErrorPair p{parse_float(path, line, key, w[i]), parse_float(path, line, key, w[i + 1])};
            if (p.all_bf16 < 0 || p.autocast < 0) file_error(path, "line %d: %s: errors cannot be negative", line, key.c_str());
            return p;
        };
        if (!have_header) {
            if (key != "gpt2_bf16_error" || w.size() != 2 || parse_int(path, line, key, w[1]) != kBf16ErrorVersion) {
                file_error(path, "line %d: not a bf16 error record (expected 'gpt2_bf16_error %d')", line,
                           kBf16ErrorVersion);
            }
            have_header = true;
        } else if (key == "steps" && w.size() == 2 && steps < 0) {
            steps = parse_int(path, line, key, w[1]);
            if (steps < 1 || steps > kReferenceTrajectoryMaxSteps) file_error(path, "line %d: steps = %ld", line, steps);
        } else if (key == "logits_rel_l2" && !have_logits) {
            e.logits_rel_l2 = pair_at(1);
            have_logits = true;
        } else if (key == "loss_abs" && !have_loss) {
            e.loss_abs = pair_at(1);
            have_loss = true;
        } else if (key == "grad_rel_l2" && w.size() == 4) {
            if (grads >= table.size() || w[1] != table[grads].name) {
                file_error(path, "line %d: expected the gradient of %s (16 tensors in checkpoint order)", line,
                           grads < table.size() ? table[grads].name : "no further tensor");
            }
            e.grad_rel_l2[grads++] = pair_at(2);
        } else if (key == "trajectory_abs" && w.size() == 4) {
            if (steps < 0 || parse_int(path, line, key, w[1]) != (long)e.trajectory_abs.size() ||
                (long)e.trajectory_abs.size() >= steps) {
                file_error(path, "line %d: expected trajectory step %zu of 'steps' (in order from 0)", line,
                           e.trajectory_abs.size());
            }
            e.trajectory_abs.push_back(pair_at(2));
        } else {
            file_error(path, "line %d: unexpected or repeated line '%s'", line, key.c_str());
        }
    });
    if (!have_header) file_error(path, "empty: no 'gpt2_bf16_error' line");
    if (!have_logits || !have_loss || grads != table.size() || steps < 0 || (long)e.trajectory_abs.size() != steps) {
        file_error(path, "incomplete: needs logits_rel_l2, loss_abs, 16 grad_rel_l2 and 'steps' trajectory_abs lines");
    }
    return e;
}
