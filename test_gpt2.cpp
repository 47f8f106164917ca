// Checks the CPU reference GPT-2 (reference/gpt2.h) against PyTorch (scripts/reference/train_gpt2.py):
//   ./test_gpt2 <prefix>     e.g. tests/fixtures/tiny  ->  reads <prefix>_model.bin, _model_bf16.bin,
//                            _debug_state.bin, _trajectory.txt
// Checks: logits rel-L2 <= 1e-5; mean loss within 1e-5; every gradient tensor rel-L2 <= 1e-4 (and the wte
// padding rows' gradient exactly 0); every loss of the AdamW trajectory within 1e-4; the bf16 model file
// equals the fp32 one rounded to bf16. Then, in double (as dev/cuda programs use them), what PyTorch does not
// cover: attention_forward's log-sum-exp output, attention_backward against central finite differences, and
// matmul_forward's tile edges (the fixture's shapes are all multiples of the tile).
// Prints every measured error; exit 0 only if all pass.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/core/bf16.h"
#include "llmc/core/rand.h"
#include "llmc/core/version.h"
#include "llmc/formats/model_file.h"
#include "reference/compare.h"
#include "reference/debug_state.h"
#include "reference/gpt2.h"
#include "reference/reference_trajectory.h"

constexpr double kLogitsTol = 1e-5;      // rel-L2
constexpr double kLossTol = 1e-5;        // absolute
constexpr double kGradTol = 1e-4;        // rel-L2 per tensor
constexpr double kTrajectoryTol = 1e-4;  // absolute, per step
constexpr double kDoubleTol = 1e-12;     // max-abs, double-precision identities (matmul edges, attention)
constexpr double kFiniteDiffTol = 1e-7;  // rel-L2, attention_backward<double> vs central differences

struct Tally {
    int passed = 0, failed = 0;
    // NaN-safe: a NaN error fails.
    void check(bool ok) { ok ? passed++ : failed++; }
};

// max that keeps a NaN (std::max would drop it), so a NaN error fails the check.
static double nan_max(double a, double b) { return (b > a || std::isnan(b)) ? b : a; }


static const char* verdict(bool ok) { return ok ? "OK" : "FAIL"; }


// matmul_forward<double> at shapes that are not multiples of its tile, vs plain dot products in the same
// order (equal up to how the compiler contracts multiply-adds), with and without bias; outputs poisoned first.
void check_matmul_edges(Tally* tally) {
    Rng rng(7);
    int mismatches = 0, checked = 0;
    double max_err = 0;
    const int shapes[][4] = {{1, 7, 5, 10}, {2, 3, 9, 7}, {1, 4, 3, 4}, {3, 5, 1, 13}};  // B T C OC
    for (const auto& sh : shapes) {
        const int B = sh[0], T = sh[1], C = sh[2], OC = sh[3], N = B * T;
        std::vector<double> x((size_t)N * C), w((size_t)OC * C), b(OC), out((size_t)N * OC);
        for (double& v : x) v = rng.normal_double();
        for (double& v : w) v = rng.normal_double();
        for (double& v : b) v = rng.normal_double();
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            std::fill(out.begin(), out.end(), NAN);
            reference::matmul_forward<double>(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, B, T, C, OC);
            for (int n = 0; n < N; n++)
                for (int j = 0; j < OC; j++) {
                    double sum = with_bias ? b[j] : 0.0;
                    for (int i = 0; i < C; i++) sum += x[(size_t)n * C + i] * w[(size_t)j * C + i];
                    const double err = std::fabs(out[(size_t)n * OC + j] - sum);
                    max_err = nan_max(max_err, err);
                    mismatches += !(err <= kDoubleTol);
                    checked++;
                }
        }
    }
    bool ok = mismatches == 0;
    tally->check(ok);
    printf("matmul_forward<double> tile edges: %d of %d outputs off plain dot products, max-abs %.3e (tol %.0e)  %s\n",
           mismatches, checked, max_err, kDoubleTol, verdict(ok));
}

// attention_forward/backward<double> on random packed QKV (scores of several units, so softmax is peaked).
void check_attention_double(Tally* tally) {
    const int B = 2, T = 17, C = 24, NH = 3, HS = C / NH;
    const size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C;
    Rng rng(20240601);
    std::vector<double> inp(n_inp), w(n_out), out(n_out, NAN), lse((size_t)B * NH * T, NAN);
    for (double& x : inp) x = 2.0 * rng.normal_double();
    for (double& x : w) x = rng.normal_double();
    reference::attention_forward<double>(out.data(), lse.data(), inp.data(), B, T, C, NH);

    // P = exp(S - lse) must sum to 1 over t2 <= t and reproduce out = P·V
    double sum_err = 0, out_err = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double* q = &inp[((size_t)b * T + t) * 3 * C + h * HS];
                const double L = lse[((size_t)b * NH + h) * T + t];
                double psum = 0;
                std::vector<double> o(HS, 0.0);
                for (int t2 = 0; t2 <= t; t2++) {
                    const double* k = &inp[((size_t)b * T + t2) * 3 * C + C + h * HS];
                    const double* v = k + C;
                    double s = 0;
                    for (int d = 0; d < HS; d++) s += q[d] * k[d];
                    double p = std::exp(s / std::sqrt((double)HS) - L);
                    psum += p;
                    for (int d = 0; d < HS; d++) o[d] += p * v[d];
                }
                sum_err = nan_max(sum_err, std::fabs(psum - 1.0));
                for (int d = 0; d < HS; d++)
                    out_err = nan_max(out_err, std::fabs(o[d] - out[((size_t)b * T + t) * C + h * HS + d]));
            }
    bool ok = sum_err <= kDoubleTol && out_err <= kDoubleTol;  // NaN fails
    tally->check(ok);
    printf("attention<double> B=%d T=%d C=%d NH=%d: |sum exp(S-lse) - 1| max %.3e, |P·V - out| max %.3e "
           "(tol %.0e)  %s\n", B, T, C, NH, sum_err, out_err, kDoubleTol, verdict(ok));

    // d(sum(out * w))/d(inp) by attention_backward vs central differences on every input element
    std::vector<double> dinp(n_inp, 0.0), fd(n_inp);
    reference::attention_backward<double>(dinp.data(), w.data(), inp.data(), B, T, C, NH);
    auto objective = [&](std::vector<double>& x) {
        reference::attention_forward<double>(out.data(), (double*)nullptr, x.data(), B, T, C, NH);
        double f = 0;
        for (size_t i = 0; i < n_out; i++) f += out[i] * w[i];
        return f;
    };
    const double h = 1e-5;
    for (size_t i = 0; i < n_inp; i++) {
        const double x0 = inp[i];
        inp[i] = x0 + h;
        const double fp = objective(inp);
        inp[i] = x0 - h;
        const double fm = objective(inp);
        inp[i] = x0;
        fd[i] = (fp - fm) / (2 * h);
    }
    const ErrorStats e = compare(dinp.data(), fd.data(), n_inp);
    ok = e.rel_l2 <= kFiniteDiffTol;
    tally->check(ok);
    printf("attention_backward<double> vs central differences (h=%g, %zu inputs): rel-L2 %.3e  max-abs %.3e "
           "(tol rel-L2 %.0e)  %s\n", h, n_inp, e.rel_l2, e.max_abs, kFiniteDiffTol, verdict(ok));
}

int run(const std::string& prefix) {
    Tally tally;
    reference::GPT2 model;
    reference::gpt2_build_from_checkpoint(&model, prefix + "_model.bin");
    const GPT2Config& c = model.config;
    DebugState ref = read_debug_state(prefix + "_debug_state.bin", c);
    ReferenceTrajectory traj = read_reference_trajectory(prefix + "_trajectory.txt");
    const int B = ref.B, T = ref.T, V = c.vocab_size, Vp = c.padded_vocab_size;
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("test_gpt2: CPU reference vs PyTorch, fixture %s\n", prefix.c_str());
    printf("model: L=%d NH=%d C=%d V=%d Vp=%d maxT=%d, %zu parameters (padded); batch B=%d T=%d; %d thread(s)\n",
           c.num_layers, c.num_heads, c.channels, V, Vp, c.max_seq_len, gpt2_num_parameters(c), B, T, threads);

    // ---- forward: activations poisoned first, so anything left unwritten shows up as NaN
    reference::gpt2_allocate(&model, B, T);
    std::fill(model.acts.begin(), model.acts.end(), NAN);
    const float loss = reference::gpt2_forward(&model, ref.inputs.data(), ref.targets.data(), B, T);
    const float* logits = model.act(reference::ACT_LOGITS);
    ErrorStats e = compare_by(ref.logits.size(), [&](size_t i) { return logits[(i / V) * Vp + i % V]; },
                              [&](size_t i) { return ref.logits[i]; });
    bool ok = e.rel_l2 <= kLogitsTol;
    tally.check(ok);
    printf("logits      rel-L2 %.3e  max-abs %.3e  (tol rel-L2 %.0e)  %s\n", e.rel_l2, e.max_abs, kLogitsTol,
           verdict(ok));
    const double loss_err = std::fabs((double)loss - (double)ref.loss);
    ok = loss_err <= kLossTol;
    tally.check(ok);
    printf("loss        cpu %.7f  torch %.7f  |diff| %.3e  (tol %.0e)  %s\n", loss, ref.loss, loss_err, kLossTol,
           verdict(ok));

    // ---- backward
    reference::gpt2_zero_grad(&model);
    reference::gpt2_backward(&model);
    auto table = gpt2_parameter_table(c);
    printf("gradients (tol rel-L2 %.0e per tensor):\n", kGradTol);
    for (int i = 0; i < kNumParameterTensors; i++) {
        const size_t off = model.param_offsets[i];
        const float* g = model.grads.data() + off;
        ErrorStats ge = compare(g, ref.grads.data() + off, table[i].numel);
        ok = ge.rel_l2 <= kGradTol;
        tally.check(ok);
        printf("  %-9s rel-L2 %.3e  max-abs %.3e  |ref| %.3e  %s\n", table[i].name, ge.rel_l2, ge.max_abs,
               ge.ref_norm, verdict(ok));
    }
    // the padded vocabulary rows never see a gradient
    double pad_max = 0;
    for (size_t k = (size_t)V * c.channels; k < (size_t)Vp * c.channels; k++) {
        pad_max = nan_max(pad_max, std::fabs((double)model.grads[model.param_offsets[WTE] + k]));
    }
    ok = pad_max == 0.0;
    tally.check(ok);
    printf("  wte rows %d..%d (padding) max-abs gradient %.3e (must be 0)  %s\n", V, Vp - 1, pad_max, verdict(ok));

    // ---- the bf16 checkpoint is the fp32 one rounded to nearest even
    {
        ModelFile bf = read_model_file(prefix + "_model_bf16.bin");
        size_t mismatches = 0;
        const bool same_shape = bf.dtype == ParamDtype::BF16 && bf.config.num_layers == c.num_layers &&
                                bf.config.num_heads == c.num_heads && bf.config.channels == c.channels &&
                                bf.config.vocab_size == V && bf.config.padded_vocab_size == Vp &&
                                bf.config.max_seq_len == c.max_seq_len && bf.params.size() == model.params.size();
        if (same_shape) {
            for (size_t k = 0; k < bf.params.size(); k++) {
                float want = bf16_bits_to_float(float_to_bf16_bits(model.params[k]));
                if (!(bf.params[k] == want)) mismatches++;
            }
        }
        ok = same_shape && mismatches == 0;
        tally.check(ok);
        printf("bf16 model  %s; %zu of %zu values differ from round-to-nearest-even of the fp32 model  %s\n",
               same_shape ? "same config" : "DIFFERENT config or dtype", mismatches, bf.params.size(), verdict(ok));
    }

    // ---- AdamW trajectory from the checkpoint, fresh optimizer state
    reference::GPT2 trainee;
    reference::gpt2_build_from_checkpoint(&trainee, prefix + "_model.bin");
    reference::AdamWSettings opt;
    opt.lr = traj.lr;
    opt.beta1 = traj.beta1;
    opt.beta2 = traj.beta2;
    opt.eps = traj.eps;
    opt.weight_decay = traj.weight_decay;
    printf("AdamW trajectory: %zu steps, lr %g beta1 %g beta2 %g eps %g weight_decay %g (tol |diff| %.0e):\n",
           traj.losses.size(), opt.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, kTrajectoryTol);
    for (size_t step = 0; step < traj.losses.size(); step++) {
        float l = reference::gpt2_forward(&trainee, ref.inputs.data(), ref.targets.data(), B, T);
        reference::gpt2_zero_grad(&trainee);
        reference::gpt2_backward(&trainee);
        reference::gpt2_update(&trainee, opt, (int)step + 1);
        double d = std::fabs((double)l - (double)traj.losses[step]);
        ok = d <= kTrajectoryTol;
        tally.check(ok);
        printf("  step %2zu  cpu %.7f  torch %.7f  |diff| %.3e  %s\n", step, l, traj.losses[step], d, verdict(ok));
    }

    check_matmul_edges(&tally);
    check_attention_double(&tally);

    printf("test_gpt2: %d checks passed, %d failed -> %s\n", tally.passed, tally.failed,
           tally.failed == 0 ? "PASS" : "FAIL");
    return tally.failed == 0 ? 0 : 1;
}

static const char* kUsage =
    "usage: test_gpt2 PREFIX    (e.g. tests/fixtures/tiny, the committed fixture)\n"
    "  checks the CPU reference GPT-2 against what PyTorch wrote at PREFIX (scripts/reference/train_gpt2.py): logits, loss,\n"
    "  every gradient, 10 AdamW steps; exit 0 when every check passes\n"
    "  -h, --help   this;  --version: the program and the commit it was built from\n";

int main(int argc, char** argv) {
    if (argc == 2) exit_on_help_or_version(argv[1], kUsage, "test_gpt2");
    if (argc != 2) {
        fprintf(stderr, "error: one reference prefix expected (%s --help)\n", argv[0]);
        return 1;
    }
    try {
        return run(argv[1]);
    } catch (const FileError& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
