// The eval file (llmc/formats/eval_file.h) as batches for a forward pass, and the batch's losses back to picks:
// llm.c's EvalLoader (llmc/dataloader.h: evalloader_reset, evalloader_next_batch, evalloader_stat_losses), on the
// host, for the trainer's HellaSwag eval (-h 1, llmc/evaluation/hellaswag_eval.h; docs/EVALUATION.md).
//   - Each example takes 4 rows of a (B, T) batch, one per ending: the context, then the ending. B/4 examples fit.
//   - targets[t] = inputs[t + 1] where the ending is: the last context token predicts the first ending token; the
//     mask is 1 at those positions, so the forward's per-position losses there are the ending's -log p.
//   - The examples are split over the ranks as llm.c does (ceil(N / ranks) each, the last rank fewer) and every rank
//     runs the same number of batches (a rank out of examples runs empty ones), so collectives stay in step.
//   - Positions outside the examples are 0 in inputs and targets (llm.c leaves whatever was there; only the mask
//     is read) so a batch is the same bytes every time.
// llm.c's loader asks for context + ending < T; here <= T, which is all the rows need.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/evaluation/eval_scoring.h"
#include "llmc/formats/eval_file.h"

constexpr int kEvalRowsPerExample = 4;  // llm.c's ASSUMED_NUM_COMPLETIONS

struct EvalBatch {
    std::vector<int> inputs, targets;  // (B, T)
    std::vector<uint8_t> mask;         // (B, T): 1 where the target is an ending's token
    std::vector<int> labels;           // per example slot; -1 where the slot is empty
    int examples = 0;                  // slots filled (the first ones)
    int first_example = 0;             // the file's index of slot 0's example
};

class EvalLoader {
public:
    // path names the file in errors; B a multiple of 4, every row (context + ending) at most T tokens. The file must
    // outlive the loader (it is read, not copied).
    EvalLoader(const EvalFile& file, const std::string& path, int B, int T, int process_rank, int num_processes)
        : file_(file), B_(B), T_(T) {
        if (B < kEvalRowsPerExample || B % kEvalRowsPerExample != 0) {
            file_error(path, "the eval needs a batch size that is a multiple of %d (one row per ending), not %d",
                       kEvalRowsPerExample, B);
        }
        const int n = (int)file.examples.size();
        if (num_processes < 1 || process_rank < 0 || process_rank >= num_processes || n < num_processes) {
            file_error(path, "%d examples cannot be split over %d processes (rank %d)", n, num_processes, process_rank);
        }
        for (int i = 0; i < n; i++) {
            const EvalExample& e = file.examples[(size_t)i];
            if (e.endings.size() != (size_t)kEvalRowsPerExample) {
                file_error(path, "example %d has %zu endings; the eval needs %d", i, e.endings.size(), kEvalRowsPerExample);
            }
            for (size_t c = 0; c < e.endings.size(); c++) {
                const size_t row = e.context.size() + e.endings[c].size();
                if (row > (size_t)T) {
                    file_error(path, "example %d: context + ending %zu = %zu tokens, more than the sequence length %d", i,
                               c, row, T);
                }
            }
        }
        const int per_process = (n + num_processes - 1) / num_processes;
        start_ = std::min(n, per_process * process_rank);  // a rank past the last example gets none
        end_ = std::min(n, per_process * (process_rank + 1));
        num_batches_ = (per_process + examples_per_batch() - 1) / examples_per_batch();
        reset();
    }

    int examples_per_batch() const { return B_ / kEvalRowsPerExample; }
    int num_batches() const { return num_batches_; }  // the same on every rank
    int start_example() const { return start_; }
    int end_example() const { return end_; }
    void reset() { next_ = start_; }

    // The next batch of this rank's examples (possibly empty, once they are done).
    void next_batch(EvalBatch& b) {
        const size_t BT = (size_t)B_ * (size_t)T_;
        b.inputs.assign(BT, 0);
        b.targets.assign(BT, 0);
        b.mask.assign(BT, 0);
        b.labels.assign((size_t)examples_per_batch(), -1);
        b.examples = 0;
        b.first_example = next_;
        for (int slot = 0; slot < examples_per_batch() && next_ < end_; slot++, next_++) {
            const EvalExample& e = file_.examples[(size_t)next_];
            b.labels[(size_t)slot] = e.label;
            b.examples++;
            for (int c = 0; c < kEvalRowsPerExample; c++) {
                const size_t row = (size_t)(slot * kEvalRowsPerExample + c) * (size_t)T_;
                const size_t ctx = e.context.size();
                const std::vector<uint16_t>& ending = e.endings[(size_t)c];
                for (size_t t = 0; t < ctx; t++) b.inputs[row + t] = e.context[t];
                for (size_t j = 0; j < ending.size(); j++) {
                    b.inputs[row + ctx + j] = ending[j];
                    b.targets[row + ctx + j - 1] = ending[j];
                    b.mask[row + ctx + j - 1] = 1;
                }
            }
        }
    }

    // The picks for a batch from the forward's per-position losses (B, T) (-log p of each target), added to acc
    // (and each example's prediction appended to picks, when given).
    static void score_batch(const EvalBatch& b, const float* losses, int T, EvalAccuracy& acc,
                            std::vector<EvalPrediction>* picks = nullptr) {
        std::vector<std::vector<float>> logprobs(kEvalRowsPerExample);
        for (int slot = 0; slot < b.examples; slot++) {
            for (int c = 0; c < kEvalRowsPerExample; c++) {
                const size_t row = (size_t)(slot * kEvalRowsPerExample + c) * (size_t)T;
                logprobs[(size_t)c].clear();
                for (int t = 0; t < T; t++) {
                    if (b.mask[row + (size_t)t]) logprobs[(size_t)c].push_back(-losses[row + (size_t)t]);
                }
            }
            EvalPrediction p = eval_predict(logprobs);
            acc.add(p, b.labels[(size_t)slot]);
            if (picks) picks->push_back(std::move(p));
        }
    }

private:
    const EvalFile& file_;
    int B_, T_;
    int start_ = 0, end_ = 0, next_ = 0, num_batches_ = 0;
};
