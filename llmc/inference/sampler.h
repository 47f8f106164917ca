// Picking the next token from a row of logits, and printing tokens.
// Sampling: softmax(logits / temperature) over the real vocabulary (padded entries V..Vp-1 are never
// chosen), optionally restricted to the top_k largest logits and then to the nucleus (top_p: the most likely
// tokens whose probabilities sum to at least top_p, at least one; as Hugging Face's generate applies them, in that
// order), then inverse-CDF with one uniform number `coin` in [0, 1) from the caller's seeded Rng (llmc/core/rand.h),
// so a seed reproduces a sample exactly. temperature 0 means greedy (argmax). Ties go to the lower token id.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/formats/tokenizer_file.h"

// Index of the largest logit among the first vocab_size (lowest index on ties).
inline int argmax_token(const float* logits, int vocab_size) {
    int best = 0;
    for (int i = 1; i < vocab_size; i++) {
        if (logits[i] > logits[best]) best = i;
    }
    return best;
}

inline int sample_token(const float* logits, int vocab_size, float temperature, int top_k, float top_p, float coin) {
    if (vocab_size < 1) throw std::invalid_argument("sample_token: vocab_size must be >= 1");
    if (!(temperature >= 0.0f)) throw std::invalid_argument("sample_token: temperature must be >= 0");
    if (!(top_p > 0.0f && top_p <= 1.0f)) throw std::invalid_argument("sample_token: top_p must be in (0, 1]");
    for (int i = 0; i < vocab_size; i++) {
        if (!std::isfinite(logits[i])) {
            throw std::runtime_error("sample_token: logit " + std::to_string(i) + " is not finite (" +
                                     std::to_string(logits[i]) + ")");
        }
    }
    if (temperature == 0.0f || top_k == 1) return argmax_token(logits, vocab_size);

    // Candidate ids: all, or the top_k by logit (stable order: larger logit first, then lower id).
    std::vector<int> ids(vocab_size);
    for (int i = 0; i < vocab_size; i++) ids[i] = i;
    int n = vocab_size;
    if (top_k > 0 && top_k < vocab_size) {
        auto larger = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
        std::partial_sort(ids.begin(), ids.begin() + top_k, ids.end(), larger);
        n = top_k;
        std::sort(ids.begin(), ids.begin() + n);  // id order, so the CDF does not depend on sort internals
    }
    // Softmax in double, shifted by the max so exp never overflows.
    double max_logit = -INFINITY;
    for (int j = 0; j < n; j++) max_logit = std::max(max_logit, (double)logits[ids[j]]);
    std::vector<double> weight(n);
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        weight[j] = std::exp(((double)logits[ids[j]] - max_logit) / temperature);
        sum += weight[j];
    }
    if (top_p < 1.0f) {  // the nucleus: by probability, largest first (lower id on ties), until the sum reaches top_p
        std::vector<int> order(n);
        for (int j = 0; j < n; j++) order[j] = j;
        auto heavier = [&](int a, int b) { return weight[a] > weight[b] || (weight[a] == weight[b] && ids[a] < ids[b]); };
        // the heaviest 1024 first (a nucleus is usually far smaller than the vocabulary), the rest only if needed;
        // the order is total, so this is the same sequence a full sort gives
        const int head = std::min(n, 1024);
        std::partial_sort(order.begin(), order.begin() + head, order.end(), heavier);
        std::vector<bool> keep(n, false);
        double mass = 0.0;
        for (int r = 0; r < n; r++) {
            if (r == head) std::sort(order.begin() + head, order.end(), heavier);
            keep[order[r]] = true;
            mass += weight[order[r]];
            if (mass >= (double)top_p * sum) break;
        }
        sum = 0.0;
        for (int j = 0; j < n; j++) {
            if (!keep[j]) weight[j] = 0.0;
            sum += weight[j];
        }
    }
    const double target = (double)coin * sum;
    double cdf = 0.0;
    for (int j = 0; j < n; j++) {
        cdf += weight[j];
        if (target < cdf) return ids[j];
    }
    // coin ~ 1 with rounding: the last candidate with non-zero weight.
    for (int j = n - 1; j >= 0; j--) {
        if (weight[j] > 0.0) return ids[j];
    }
    return ids[n - 1];
}

// Without top-p (the trainer's samples).
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
