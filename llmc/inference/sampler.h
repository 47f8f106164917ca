// Picking the next token from a row of logits on the host, and printing tokens.
// The rule (llmc/kernels/sampling/sampling_rule.h, shared with the GPU picker): softmax(logits / temperature) over the real
// vocabulary (padded entries V..Vp-1 are never chosen), optionally restricted to the top_k highest logits and then
// to the nucleus (top_p: the highest tokens whose probabilities sum to at least top_p, at least one; as Hugging
// Face's generate applies them, in that order), then inverse-CDF in id order with one uniform number `coin` in
// [0, 1) from the caller's seeded Rng (llmc/core/rand.h), so a seed reproduces a sample exactly. temperature 0 means
// greedy. "Highest" ranks by logit, ties to the lower token id. Sums are double here, fp32 on the GPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/formats/tokenizer_file.h"
#include "llmc/kernels/sampling/sampling_rule.h"

// The highest-ranked among the first vocab_size logits (lowest index on ties).
inline int argmax_token(const float* logits, int vocab_size) {
    unsigned long long best = sampling_rule::rank_floor();
    for (int i = 0; i < vocab_size; i++)
        best = std::max(best, sampling_rule::rank(sampling_rule::key_of(logits[i]), i));
    return sampling_rule::rank_id(best);
}

inline int sample_token(const float* logits, int vocab_size, float temperature, int top_k, float top_p, float coin) {
    const PickParams p{temperature, top_k, top_p};
    if (vocab_size < 1) throw std::invalid_argument("sample_token: vocab_size must be >= 1");
    if (const char* problem = pick_params_problem(p))
        throw std::invalid_argument(std::string("sample_token: ") + problem);
    for (int i = 0; i < vocab_size; i++) {
        if (!std::isfinite(logits[i])) {
            throw std::runtime_error("sample_token: logit " + std::to_string(i) + " is not finite (" +
                                     std::to_string(logits[i]) + ")");
        }
    }
    if (p.greedy()) return argmax_token(logits, vocab_size);

    using sampling_rule::rank;
    using sampling_rule::key_of;
    auto higher = [&](int a, int b) { return rank(key_of(logits[a]), a) > rank(key_of(logits[b]), b); };
    // Candidate ids: all, or the top_k highest, in id order (the CDF runs in id order).
    std::vector<int> ids(vocab_size);
    for (int i = 0; i < vocab_size; i++) ids[i] = i;
    int n = vocab_size;
    if (p.cuts_top_k(vocab_size)) {
        std::partial_sort(ids.begin(), ids.begin() + top_k, ids.end(), higher);
        n = top_k;
        std::sort(ids.begin(), ids.begin() + n);
    }
    // Weights in double, shifted by the max so exp never overflows.
    double max_logit = -INFINITY;
    for (int j = 0; j < n; j++) max_logit = std::max(max_logit, (double)logits[ids[j]]);
    const double inv_temperature = 1.0 / (double)temperature;
    std::vector<double> weight(n);
    double sum = 0.0;
    for (int j = 0; j < n; j++)
        sum += weight[j] = sampling_rule::weight((double)logits[ids[j]], max_logit, inv_temperature);
    if (p.cuts_top_p()) {  // the nucleus: highest first until the kept weight reaches the target
        std::vector<int> order(n);
        for (int j = 0; j < n; j++) order[j] = j;
        auto higher_at = [&](int a, int b) { return higher(ids[a], ids[b]); };
        // the highest 1024 first (a nucleus is usually far smaller than the vocabulary), the rest only if needed;
        // the order is total, so this is the sequence a full sort gives
        const int head = std::min(n, 1024);
        std::partial_sort(order.begin(), order.begin() + head, order.end(), higher_at);
        std::vector<bool> keep(n, false);
        const double target = sampling_rule::nucleus_target(top_p, sum);
        double mass = 0.0;
        for (int r = 0; r < n; r++) {
            if (r == head) std::sort(order.begin() + head, order.end(), higher_at);
            keep[order[r]] = true;
            mass += weight[order[r]];
            if (mass >= target) break;
        }
        sum = 0.0;
        for (int j = 0; j < n; j++) {
            if (!keep[j]) weight[j] = 0.0;
            sum += weight[j];
        }
    }
    sampling_rule::CdfWalk<double> walk(sampling_rule::cdf_target(coin, sum), 0.0);
    for (int j = 0; j < n && !walk.done(); j++) walk.step(ids[j], weight[j]);
    return walk.result();  // never -1: the highest candidate weighs 1
}

// Without top-p (tests).
inline int sample_token(const float* logits, int vocab_size, float temperature, int top_k, float coin) {
    return sample_token(logits, vocab_size, temperature, top_k, 1.0f, coin);
}

// A token's text for the console. Token bytes come from the tokenizer file, so they are printed
// through append_printable (tokenizer_file.h): valid UTF-8 stays as it is, control characters (C0
// except newline and tab, DEL, C1) and bytes that are not valid UTF-8 become \xNN, so a crafted
// tokenizer cannot send terminal escape sequences. EOT -> <|endoftext|>, an id outside the vocabulary
// -> <id N>. This looks at one token alone: a character split across two tokens (common for non-ASCII
// text in GPT-2) shows as \xNN escapes; TokenPrinter below prints such characters whole.
inline std::string printable_token(const TokenizerFile& tok, int id) {
    if (id < 0 || id >= (int)tok.tokens.size()) return "<id " + std::to_string(id) + ">";
    if (id == tok.eot_token) return "<|endoftext|>";
    return printable_bytes(tok.tokens[id]);
}

// Prints a stream of tokens, such as a sample, one token at a time: like printable_token, but the
// bytes of a UTF-8 character split across tokens are held back until the character is complete,
// so it prints as the character. Only complete, valid, non-control characters are ever printed raw.
class TokenPrinter {
public:
    explicit TokenPrinter(const TokenizerFile& tok) : tok_(tok) {}
    // The text this token completes (possibly empty while a character is unfinished).
    std::string next(int id) {
        std::string out;
        if (id < 0 || id >= (int)tok_.tokens.size() || id == tok_.eot_token) {
            out = finish();
            out += printable_token(tok_, id);
            return out;
        }
        pending_ += tok_.tokens[id];
        size_t held = 0;
        append_printable(out, pending_, &held);
        pending_.erase(0, pending_.size() - held);
        return out;
    }
    // The held bytes of an unfinished character, escaped (call at the end of the stream).
    std::string finish() {
        std::string out = printable_bytes(pending_);
        pending_.clear();
        return out;
    }

private:
    const TokenizerFile& tok_;
    std::string pending_;
};
