// The multiple-choice scoring rule (HellaSwag), on the host: from the log-probabilities of each ending's tokens
// (given the context and the ending's earlier tokens, as a GPU or CPU forward produces them) to the prediction
// and the running accuracy. The same rule as llm.c:
//   - acc_norm, the number llm.c reports (its EvalLoader's evalloader_stat_losses in llmc/dataloader.h, and
//     pred_norm in dev/data/hellaswag.py): the ending with the highest MEAN log-probability per token (the lowest
//     average loss over the ending's tokens). This is the rule implemented for the trainer's eval.
//   - acc (hellaswag.py's pred): the highest SUM of log-probabilities; kept alongside for comparison.
// Sums are float, in token order, and the mean is that sum / count, as evalloader_stat_losses computes them, and
// the first ending wins a tie (its `b == 0 || average_loss < min_loss`; torch's argmin also takes the first), so
// the same losses give llm.c's prediction bit for bit. A loss is -log p: negating is exact in float, so ranking
// means of log-probabilities and ranking means of losses pick the same ending.
// Not lm-evaluation-harness's acc_norm: the harness divides the summed log-likelihood by the ending's length in
// CHARACTERS (`completion_len = len(choice)`) and renders HellaSwag differently (activity label, ctx_a + ctx_b
// capitalised, preprocessing); the eval file holds tokens only. docs/EVALUATION.md.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

struct EndingScore {
    float sum_logprob = 0.0f;   // over the ending's tokens, in order
    float mean_logprob = 0.0f;  // sum_logprob / tokens
    int tokens = 0;
};

struct EvalPrediction {
    int pred = -1;       // highest sum (hellaswag.py's acc)
    int pred_norm = -1;  // highest mean (llm.c's acc_norm)
    std::vector<EndingScore> endings;
};

inline EndingScore eval_ending_score(const float* logprobs, int tokens) {
    if (tokens < 1) throw std::invalid_argument("eval_ending_score: an ending needs at least one token");
    EndingScore s;
    s.tokens = tokens;
    for (int t = 0; t < tokens; t++) s.sum_logprob += logprobs[t];
    s.mean_logprob = s.sum_logprob / (float)tokens;
    return s;
}

// ending_logprobs[c][t]: log p(token t of ending c | context, ending c's tokens before t).
inline EvalPrediction eval_predict(const std::vector<std::vector<float>>& ending_logprobs) {
    if (ending_logprobs.empty()) throw std::invalid_argument("eval_predict: no endings");
    EvalPrediction p;
    for (size_t c = 0; c < ending_logprobs.size(); c++) {
        const EndingScore s = eval_ending_score(ending_logprobs[c].data(), (int)ending_logprobs[c].size());
        // `c == 0 ||` first, as llm.c: a NaN score at ending 0 stays the pick, a NaN later never wins.
        if (c == 0 || s.sum_logprob > p.endings[(size_t)p.pred].sum_logprob) p.pred = (int)c;
        if (c == 0 || s.mean_logprob > p.endings[(size_t)p.pred_norm].mean_logprob) p.pred_norm = (int)c;
        p.endings.push_back(s);
    }
    return p;
}

// The running accuracy over the examples seen; merge() adds another rank's counts.
struct EvalAccuracy {
    int64_t total = 0, correct = 0, correct_norm = 0;
    void add(const EvalPrediction& p, int label) {
        total++;
        correct += p.pred == label;
        correct_norm += p.pred_norm == label;
    }
    void merge(const EvalAccuracy& o) {
        total += o.total;
        correct += o.correct;
        correct_norm += o.correct_norm;
    }
    double acc() const { return total ? (double)correct / (double)total : 0.0; }
    double acc_norm() const { return total ? (double)correct_norm / (double)total : 0.0; }
};
