// The trainers' HellaSwag eval (-h 1, -hf, -hp), shared by train_gpt2cu and train_gpt2, as llm.c runs it: the eval
// file read and checked once at start (every token below the model's vocabulary, every row within T), this rank's
// examples run through a forward that returns each position's loss, the counts summed over the ranks, llm.c's
// console line ("HellaSwag: 2534/10042 = 0.252340") and main.log line ("s:<step> eval:<acc_norm>").
// The forward is the caller's (GPU or CPU); the rule is eval_scoring.h's and the batches eval_loader.h's.
// -hp FILE writes each example's four scores and picks (TSV) so another implementation can be compared item by item
// (tests/gpu/check_hellaswag_hf.py); with several processes each rank writes its own examples to FILE.rank<r>.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "llmc/core/progress_line.h"
#include "llmc/core/utils.h"
#include "llmc/evaluation/eval_loader.h"
#include "llmc/evaluation/eval_scoring.h"
#include "llmc/formats/eval_file.h"

struct HellaSwagResult {
    EvalAccuracy acc;  // over every rank's examples
    int batches = 0;   // per rank
    double seconds = 0;
};

class HellaSwagEval {
public:
    HellaSwagEval(const std::string& path, const std::string& picks_path, int vocab_size, int B, int T, int rank,
                  int world)
        : file_(read_eval_file(path, vocab_size)), loader_(file_, path, B, T, rank, world), T_(T),
          picks_path_(world > 1 && !picks_path.empty() ? picks_path + ".rank" + std::to_string(rank) : picks_path) {}
    HellaSwagEval(const HellaSwagEval&) = delete;  // the loader reads file_ in place
    HellaSwagEval& operator=(const HellaSwagEval&) = delete;

    int examples() const { return (int)file_.examples.size(); }
    int batches() const { return loader_.num_batches(); }

    // forward(batch, losses): losses (B*T) = -log p of each target of the batch's rows.
    // sum_over_ranks(values, n): the n doubles summed over the ranks, in place (identity with one process).
    // progress: a batch counter on stderr when it is a terminal (progress_line.h).
    template <class Forward, class SumOverRanks>
    HellaSwagResult run(Forward&& forward, SumOverRanks&& sum_over_ranks, bool progress) {
        const auto t0 = std::chrono::steady_clock::now();
        const bool want_picks = !picks_path_.empty();
        loader_.reset();
        EvalAccuracy local;
        std::vector<EvalPrediction> picks;
        std::vector<int> pick_index, pick_label;
        std::vector<float> losses;
        EvalBatch b;
        HellaSwagResult r;
        r.batches = loader_.num_batches();
        ProgressLine line("HellaSwag", r.batches, progress);
        for (int i = 0; i < r.batches; i++) {
            loader_.next_batch(b);
            forward(b, losses);
            const size_t before = picks.size();
            EvalLoader::score_batch(b, losses.data(), T_, local, want_picks ? &picks : nullptr);
            for (size_t k = before; k < picks.size(); k++) {
                pick_index.push_back(b.first_example + (int)(k - before));
                pick_label.push_back(b.labels[k - before]);
            }
            line.update(i + 1);
        }
        line.finish();
        if (want_picks) write_picks(picks, pick_index, pick_label);
        double counts[3] = {(double)local.total, (double)local.correct, (double)local.correct_norm};
        sum_over_ranks(counts, 3);
        r.acc.total = (int64_t)counts[0];
        r.acc.correct = (int64_t)counts[1];
        r.acc.correct_norm = (int64_t)counts[2];
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return r;
    }

    // llm.c's line, then what it was measured over.
    static std::string report(const HellaSwagResult& r, int world) {
        char buf[320];
        snprintf(buf, sizeof(buf),
                 "HellaSwag: %lld/%lld = %f\n  (acc_norm: mean log-prob per ending token; by the sum: %.6f; %d "
                 "batches on each of %d process%s, %.1f s)",
                 (long long)r.acc.correct_norm, (long long)r.acc.total, r.acc.acc_norm(), r.acc.acc(), r.batches, world,
                 world == 1 ? "" : "es", r.seconds);
        return buf;
    }

private:
    // example, label, pick (acc_norm), pick by the sum, each ending's mean log-prob and token count
    void write_picks(const std::vector<EvalPrediction>& picks, const std::vector<int>& index,
                     const std::vector<int>& label) const {
        AtomicOutputFile out(picks_path_);
        std::string text = "example\tlabel\tpick\tpick_sum\tmean0\tmean1\tmean2\tmean3\ttokens0\ttokens1\ttokens2\ttokens3\n";
        char buf[64];
        for (size_t k = 0; k < picks.size(); k++) {
            const EvalPrediction& p = picks[k];
            text += std::to_string(index[k]) + "\t" + std::to_string(label[k]) + "\t" + std::to_string(p.pred_norm) +
                    "\t" + std::to_string(p.pred);
            for (const EndingScore& e : p.endings) {
                snprintf(buf, sizeof(buf), "\t%.9g", (double)e.mean_logprob);
                text += buf;
            }
            for (const EndingScore& e : p.endings) text += "\t" + std::to_string(e.tokens);
            text += "\n";
        }
        out.write(text.data(), text.size());
        out.commit();
    }

    EvalFile file_;
    EvalLoader loader_;
    int T_;
    std::string picks_path_;
};
