// Greedy generation both ways at batch 1: the persistent decode step (llmc/inference/persistent_step.cuh) against the
// per-layer kernels (decode_matvec), on one model, in lockstep. P prompts of random tokens, N new tokens each; at
// every position both engines' logits come to the host and each takes its argmax (ties to the lower id, as the
// sampling rule does). The tokens must agree; where a sequence's first differ, the per-layer step's top two logits
// must be a near-tie there, and the sequence stops (the prefixes part). A near-tie: the gap between the per-layer
// step's top two within z sigma, sigma how far the two steps move the gap between two logits at that position
// (sqrt(2) * RMS over the vocabulary of the difference of their logits: two orders of summation through L bf16
// layers move every logit a little), z = sqrt(2 ln N) the largest deviation N Gaussian draws reach, N the positions
// the run may compare (prompts x new tokens: 4.4 at 64 x 256); or within 2 bf16 steps of the top logit
// (bf16_near_tie), where the noise is smaller still. The control (-c) showed today's own two paths parting 4 bf16
// steps and 3.0 sigma from a tie at d36 (docs/DECODE.md): a fixed 2-step or 3-sigma rule fails them too.
// Also the logits' rel-L2 between the two steps at every position (<= 2e-2, test_decode's bound between two bf16
// orders of summation), which bounds sigma.
// The model: GPT-2's random init at a preset depth, or a checkpoint (-m: ours, llm.c's or a Hugging Face GPT-2).
// -c, the control: two of today's paths instead (cuBLASLt's step against decode_matvec), for how far two orders of
// summation move the tokens on the same model. -f: the persistent step's products by FFMA
// (LLMC_DECODE_TILES=0's path) instead of on the tensor cores.
//   make -C dev/cuda decode_paths && ./dev/cuda/decode_paths [-e 12|24|36|48 | -m model.bin] [-p prompts (64)]
//   [-g new tokens (256)] [-t prompt tokens (64)] [-c | -f]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common.h"
#include "llmc/core/rand.h"
#include "llmc/formats/hf_gpt2.h"
#include "llmc/gpt2/gpt2_init.h"
#include "llmc/inference/engine.cuh"
#include "llmc/inference/generate.cuh"

namespace {

struct Tally {
    int identical = 0, near = 0, not_near = 0;
    double worst_gap = 0, worst_sigmas = 0, worst_rel_l2 = 0, sum_rel_l2 = 0;
    long long positions = 0;
    std::vector<int> diverged_at;
};

}  // namespace

int main(int argc, char** argv) {
    int depth = 12, prompts = 64, new_tokens = 256, prompt_T = 64;
    std::string model_path;
    bool control = false, ffma = false;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if ((a == "-c" && !ffma) || (a == "-f" && !control)) {
            (a == "-c" ? control : ffma) = true;
        } else if (a == "-m" && i + 1 < argc) {
            model_path = argv[++i];
        } else if ((a == "-e" || a == "-p" || a == "-g" || a == "-t") && i + 1 < argc) {
            const int v = positive_int(argv[++i]);
            if (v == 0 || (a == "-e" && v != 12 && v != 24 && v != 36 && v != 48) || (a == "-g" && v < 2)) {
                fprintf(stderr, "error: %s %s: -e takes 12, 24, 36 or 48; -p, -t a positive count; -g 2 or more\n",
                        a.c_str(), argv[i]);
                return 1;
            }
            (a == "-e" ? depth : a == "-p" ? prompts : a == "-g" ? new_tokens : prompt_T) = v;
        } else {
            fprintf(stderr, "usage: %s [-e 12|24|36|48 | -m model.bin] [-p prompts] [-g new tokens] [-t prompt tokens] "
                    "[-c | -f]\n", argv[0]);
            return 1;
        }
    }
    print_device();
    GPT2Config c;
    std::vector<float> params;
    if (model_path.empty()) {
        gpt2_preset("d" + std::to_string(depth), &c);
        params = gpt2_random_init(c, 42);
    } else {
        ModelFile f = read_model_any(model_path);  // stops with one line naming the file if it is not a model
        c = f.config, params = std::move(f.params);
    }
    if (prompt_T + new_tokens - 1 > c.max_seq_len) {
        fprintf(stderr, "error: -t %d and -g %d: %d positions, over the model's context of %d\n", prompt_T, new_tokens,
                prompt_T + new_tokens - 1, c.max_seq_len);
        return 1;
    }
    std::string why;
    if (!persistent_step_supported(c, 1, &why)) {
        printf("the persistent decode step does not take this model here (%s): nothing to compare\n", why.c_str());
        return 0;
    }
    const int V = c.vocab_size, Vp = c.padded_vocab_size;
    const InferenceShape shape = generation_shape(c, 1, prompt_T, new_tokens);
    InferenceOptions persistent_o, matvec_o;
    persistent_o.decode.products = control ? DecodeProducts::Cublas : DecodeProducts::Persistent;
    persistent_o.decode.persistent_tiles = !ffma;
    const char* name = control ? "cuBLASLt's step" : ffma ? "persistent (FFMA)" : "persistent (tensor cores)";
    matvec_o.decode.products = DecodeProducts::Matvec;
    InferenceEngine persistent, matvec;
    inference_engine_upload(&persistent, c, std::move(params), shape, persistent_o);
    inference_engine_borrow(&matvec, c, persistent.step.params, shape, matvec_o);  // the same weights, no copy
    printf("%s: %d prompts of %d random tokens, %d new tokens each, greedy, batch 1: %s against "
           "decode_matvec\n", model_path.empty() ? ("GPT-2 d" + std::to_string(depth) + "'s random init").c_str()
                                                 : model_path.c_str(), prompts, prompt_T, new_tokens, name);

    Rng rng(7);
    Tally t;
    const double z = std::sqrt(2 * std::log((double)prompts * new_tokens));
    std::vector<float> lp(Vp), lm(Vp);
    // one engine at a time (each waited for): the two streams share cuBLASLt's one workspace (matmul.cuh)
    auto prefill = [&](const std::vector<int>& prompt) {
        inference_prefill(&persistent, {prompt}, 0), inference_logits_to_host(&persistent, 0, lp.data());
        inference_prefill(&matvec, {prompt}, 0), inference_logits_to_host(&matvec, 0, lm.data());
    };
    auto step = [&](int token) {
        inference_decode_step(&persistent, {token}), inference_logits_to_host(&persistent, 0, lp.data());
        inference_decode_step(&matvec, {token}), inference_logits_to_host(&matvec, 0, lm.data());
    };
    for (int p = 0; p < prompts; p++) {
        std::vector<int> prompt(prompt_T);
        for (int& x : prompt) x = (int)(rng.next_u32() % (uint32_t)V);
        prefill(prompt);
        int g = 0;
        for (;; g++) {  // token g + 1 from the logits of the position before it
            if (g > 0) {  // the prefill's logits are one path's (cuBLASLt): compare the steps'
                const double r = compare(lp.data(), lm.data(), (size_t)V).rel_l2;
                t.worst_rel_l2 = std::max(t.worst_rel_l2, r), t.sum_rel_l2 += r, t.positions++;
            }
            const int a = argmax(lp, V), b = argmax(lm, V);
            if (a != b) {
                double sq = 0;  // sigma: the spread of (lp - lm)[i] - (lp - lm)[j] over pairs of logits
                for (int i = 0; i < V; i++) sq += ((double)lp[i] - lm[i]) * ((double)lp[i] - lm[i]);
                const double gap = (double)lm[b] - lm[a], sigma = std::sqrt(2 * sq / V);
                const bool near = gap <= z * sigma || bf16_near_tie(lm[b], lm[a]);
                (near ? t.near : t.not_near)++;
                t.worst_gap = std::max(t.worst_gap, gap), t.diverged_at.push_back(g + 1);
                if (sigma > 0) t.worst_sigmas = std::max(t.worst_sigmas, gap / sigma);
                if (!near)
                    printf("  prompt %d, token %d: %s %d, decode_matvec %d, its top two %.4f apart (%.1f sigma, "
                           "sigma %.4f, the bound %.2f sigma): NOT a near-tie\n", p, g + 1, name, a, b, gap,
                           gap / sigma, sigma, z);
                break;
            }
            if (g + 1 == new_tokens) {
                t.identical++;
                break;
            }
            step(a);
        }
    }
    inference_engine_free(&matvec);
    inference_engine_free(&persistent);

    std::sort(t.diverged_at.begin(), t.diverged_at.end());
    printf("  identical over all %d tokens: %d of %d sequences\n", new_tokens, t.identical, prompts);
    printf("  first difference at a near-tie (<= %.2f sigma or 2 bf16 steps): %d (largest gap %.4f, largest %.2f "
           "sigma; at tokens", z, t.near, t.worst_gap, t.worst_sigmas);
    for (size_t i = 0; i < t.diverged_at.size() && i < 16; i++) printf(" %d", t.diverged_at[i]);
    printf("%s), not at a near-tie: %d\n", t.diverged_at.size() > 16 ? " ..." : "", t.not_near);
    printf("  logits rel-L2 between the steps over %lld positions: worst %.3e (<= 2e-2), mean %.3e\n", t.positions,
           t.worst_rel_l2, t.positions ? t.sum_rel_l2 / t.positions : 0.0);
    const bool ok = t.not_near == 0 && t.worst_rel_l2 <= 2e-2;
    printf("decode_paths: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
