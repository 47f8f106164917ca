// Checks the CPU trainer's engine (llmc/cpu/: what train_gpt2 runs, built with its flags) against PyTorch and the
// CPU reference (reference/gpt2.h):
//   ./tests/cpu/test_cpu_engine <prefix>     e.g. tests/fixtures/tiny (reads <prefix>_model.bin, _debug_state.bin,
//                                        _trajectory.txt)
// - PyTorch's batch: logits rel-L2 <= 1e-5, loss within 1e-5, every gradient tensor rel-L2 <= 1e-4, the wte padding
//   rows' gradient exactly 0; its 10-step AdamW trajectory within 1e-4 per step, and the reference's as well;
// - the trainer's path (data loader over a shard, shuffled, 2 micro-steps per step, loss scale 1/2): 10 steps
//   against the reference within 1e-4 per step;
// - the kernels at shapes the fixture does not reach: the GEMM at tile edges with every operand layout against
//   double, attention across its 64-row blocks against the reference, KV-cache generation against the forward;
// - determinism: 1 thread and several give the same bits; the optimizer's state round trip (its own layout and
//   the GPU's with master weights).
// Prints every measured error and the largest loss differences; exit 0 only if all pass.
#include <unistd.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "llmc/core/rand.h"
#include "llmc/cpu/adamw.h"
#include "llmc/cpu/attention.h"
#include "llmc/cpu/generate.h"
#include "llmc/cpu/gpt2.h"
#include "llmc/cpu/matmul.h"
#include "llmc/data/dataloader.h"
#include "llmc/formats/data_shard.h"
#include "llmc/formats/model_file.h"
#include "reference/compare.h"
#include "reference/debug_state.h"
#include "reference/gpt2.h"
#include "reference/reference_trajectory.h"

constexpr double kLogitsTol = 1e-5;      // rel-L2
constexpr double kLossTol = 1e-5;        // absolute
constexpr double kGradTol = 1e-4;        // rel-L2 per tensor
constexpr double kTrajectoryTol = 1e-4;  // absolute, per step
constexpr double kKernelTol = 1e-5;      // rel-L2, single kernels against double or the reference

namespace {

int passed = 0, failed = 0;
bool check(bool ok, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
bool check(bool ok, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("  %s\n", ok ? "OK" : "FAIL");
    ok ? passed++ : failed++;
    return ok;
}

void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}
int max_threads() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// ------------------------------------------------------------------------------------------------ PyTorch's batch
void check_against_pytorch(const std::string& prefix, double* max_traj_torch, double* max_traj_ref) {
    ModelFile f = read_model_file(prefix + "_model.bin");
    const GPT2Config c = f.config;
    const DebugState ref = read_debug_state(prefix + "_debug_state.bin", c);
    const ReferenceTrajectory traj = read_reference_trajectory(prefix + "_trajectory.txt");
    const int B = ref.B, T = ref.T, V = c.vocab_size, Vp = c.padded_vocab_size;
    cpu::GPT2 m;
    cpu::gpt2_build(&m, c, f.params);

    cpu::gpt2_forward(&m, ref.inputs.data(), nullptr, B, T);
    const float* logits = m.act(cpu::LOGITS);
    ErrorStats e = compare_by(ref.logits.size(), [&](size_t i) { return logits[(i / V) * Vp + i % V]; },
                              [&](size_t i) { return ref.logits[i]; });
    check(e.rel_l2 <= kLogitsTol, "logits      rel-L2 %.3e  max-abs %.3e  (tol %.0e)", e.rel_l2, e.max_abs, kLogitsTol);
    const float loss = cpu::gpt2_forward(&m, ref.inputs.data(), ref.targets.data(), B, T);
    check(std::fabs(loss - ref.loss) <= kLossTol, "loss        engine %.7f  torch %.7f  |diff| %.3e  (tol %.0e)", loss,
          ref.loss, std::fabs(loss - ref.loss), kLossTol);
    cpu::gpt2_zero_grad(&m);
    cpu::gpt2_backward(&m, 1.0f);
    const auto table = gpt2_parameter_table(c);
    for (int i = 0; i < kNumParameterTensors; i++) {
        const ErrorStats g = compare(m.grad(i), ref.grads.data() + m.offsets[i], table[i].numel);
        check(g.rel_l2 <= kGradTol, "  grad %-9s rel-L2 %.3e  max-abs %.3e", table[i].name, g.rel_l2, g.max_abs);
    }
    double pad = 0;
    for (size_t k = (size_t)V * c.channels; k < (size_t)Vp * c.channels; k++) pad = std::max(pad, (double)std::fabs(m.grad(WTE)[k]));
    check(pad == 0.0, "  wte padding rows' gradient max-abs %.3e (must be 0)", pad);

    // 10 AdamW steps on the batch: engine, reference, PyTorch
    cpu::GPT2 trainee;
    cpu::gpt2_build(&trainee, c, f.params);
    cpu::AdamW opt;
    cpu::AdamWSettings s;
    s.beta1 = traj.beta1, s.beta2 = traj.beta2, s.eps = traj.eps, s.weight_decay = traj.weight_decay;
    opt.init(trainee, s);
    reference::GPT2 oracle;
    reference::gpt2_build(&oracle, c, f.params.data());
    reference::AdamWSettings rs;
    rs.lr = traj.lr, rs.beta1 = traj.beta1, rs.beta2 = traj.beta2, rs.eps = traj.eps, rs.weight_decay = traj.weight_decay;
    for (size_t step = 0; step < traj.losses.size(); step++) {
        const float l = cpu::gpt2_forward(&trainee, ref.inputs.data(), ref.targets.data(), B, T);
        cpu::gpt2_zero_grad(&trainee);
        cpu::gpt2_backward(&trainee, 1.0f);
        opt.step(trainee, traj.lr, 0.0f, (int)step + 1);
        const float lr_ = reference::gpt2_forward(&oracle, ref.inputs.data(), ref.targets.data(), B, T);
        reference::gpt2_zero_grad(&oracle);
        reference::gpt2_backward(&oracle);
        reference::gpt2_update(&oracle, rs, (int)step + 1);
        const double dt = std::fabs((double)l - traj.losses[step]), dr = std::fabs((double)l - lr_);
        *max_traj_torch = std::max(*max_traj_torch, dt);
        *max_traj_ref = std::max(*max_traj_ref, dr);
        check(dt <= kTrajectoryTol && dr <= kTrajectoryTol,
              "  AdamW step %2zu  engine %.7f  torch %.7f (|diff| %.2e)  reference %.7f (|diff| %.2e)", step, l,
              traj.losses[step], dt, lr_, dr);
    }
}

// ------------------------------------------------------------------------------------------------ the trainer's path
// A shard of random tokens, B=2 T=32, 2 micro-steps per step (loss scale 1/2), shuffled windows: the engine as
// train_gpt2 steps it (no clipping: the reference has none) against the reference, whose summed gradient is halved.
void check_training_path(const std::string& prefix, double* max_diff) {
    ModelFile f = read_model_file(prefix + "_model.bin");
    const GPT2Config c = f.config;
    const int B = 2, T = 32, accum = 2, steps = 10;
    const std::string shard = "/tmp/test_cpu_engine_" + std::to_string(getpid()) + ".bin";
    {
        Rng rng(99);
        std::vector<uint16_t> tokens(4 * accum * B * T + 1);
        for (uint16_t& t : tokens) t = (uint16_t)(rng.next_u64() % (uint64_t)c.vocab_size);
        write_shard(shard, tokens.data(), (int64_t)tokens.size());
    }
    DataLoader a(shard, B, T, 0, 1, true, 7, c.vocab_size, accum), b(shard, B, T, 0, 1, true, 7, c.vocab_size, accum);
    cpu::GPT2 m;
    cpu::gpt2_build(&m, c, f.params);
    cpu::AdamWSettings s;
    s.weight_decay = 0.1f;
    cpu::AdamW opt;
    opt.init(m, s);
    reference::GPT2 r;
    reference::gpt2_build(&r, c, f.params.data());
    reference::AdamWSettings rs;
    rs.lr = 1e-3f, rs.weight_decay = 0.1f;
    for (int step = 0; step < steps; step++) {
        double le = 0, lr_ = 0;
        cpu::gpt2_zero_grad(&m);
        reference::gpt2_zero_grad(&r);
        for (int micro = 0; micro < accum; micro++) {
            a.next_batch();
            b.next_batch();
            le += cpu::gpt2_forward(&m, a.inputs(), a.targets(), B, T);
            cpu::gpt2_backward(&m, 1.0f / accum);
            lr_ += reference::gpt2_forward(&r, b.inputs(), b.targets(), B, T);
            reference::gpt2_backward(&r);
        }
        for (float& g : r.grads) g *= 1.0f / accum;
        opt.step(m, 1e-3f, 0.0f, step + 1);
        reference::gpt2_update(&r, rs, step + 1);
        le /= accum, lr_ /= accum;
        *max_diff = std::max(*max_diff, std::fabs(le - lr_));
        check(std::fabs(le - lr_) <= kTrajectoryTol, "  trainer path step %2d  engine %.7f  reference %.7f  |diff| %.2e",
              step, le, lr_, std::fabs(le - lr_));
    }
    remove(shard.c_str());
}

// ------------------------------------------------------------------------------------------------ kernels
void check_gemm() {
    Rng rng(5);
    const int shapes[][3] = {{1, 1, 1}, {7, 13, 19}, {6, 64, 128}, {25, 70, 300}, {97, 129, 5}, {300, 17, 260}};
    double worst = 0;
    for (const auto& sh : shapes) {
        const int M = sh[0], N = sh[1], K = sh[2];
        std::vector<float> a((size_t)M * K), bm((size_t)K * N), c0((size_t)M * N);
        for (float& x : a) x = rng.normal();
        for (float& x : bm) x = rng.normal();
        for (float& x : c0) x = rng.normal();
        for (int layout = 0; layout < 4; layout++) {  // A row- or column-major, B row- or column-major
            const bool at = layout & 1, bt = layout & 2;
            std::vector<float> as(a.size()), bs(bm.size());
            for (int i = 0; i < M; i++)
                for (int k = 0; k < K; k++) as[at ? (size_t)k * M + i : (size_t)i * K + k] = a[(size_t)i * K + k];
            for (int k = 0; k < K; k++)
                for (int j = 0; j < N; j++) bs[bt ? (size_t)j * K + k : (size_t)k * N + j] = bm[(size_t)k * N + j];
            const cpu::MatView A = at ? cpu::MatView{as.data(), 1, (size_t)M}
                                             : cpu::MatView{as.data(), (size_t)K, 1};
            const cpu::MatView Bv = bt ? cpu::MatView{bs.data(), 1, (size_t)K}
                                              : cpu::MatView{bs.data(), (size_t)N, 1};
            for (int acc = 0; acc < 2; acc++) {
                std::vector<float> c = c0;
                cpu::gemm(M, N, K, A, Bv, c.data(), (size_t)N, acc == 1);
                std::vector<double> want((size_t)M * N);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double s = acc ? c0[(size_t)i * N + j] : 0.0;
                        for (int k = 0; k < K; k++) s += (double)a[(size_t)i * K + k] * bm[(size_t)k * N + j];
                        want[(size_t)i * N + j] = s;
                    }
                worst = std::max(worst, compare(c.data(), want.data(), want.size()).rel_l2);
            }
        }
    }
    check(worst <= kKernelTol, "gemm: 6 shapes x 4 operand layouts x (= and +=) vs double: worst rel-L2 %.3e (tol %.0e)",
          worst, kKernelTol);
}

void check_attention() {
    const int B = 2, T = 130, C = 48, NH = 3;  // 3 blocks of query rows (64, 64, 2)
    Rng rng(11);
    std::vector<float> qkv((size_t)B * T * 3 * C), dout((size_t)B * T * C);
    for (float& x : qkv) x = 1.5f * rng.normal();
    for (float& x : dout) x = rng.normal();
    std::vector<float> out((size_t)B * T * C), lse((size_t)B * NH * T), dqkv(qkv.size());
    std::vector<float> rout(out.size()), rlse(lse.size()), rdqkv(qkv.size(), 0.0f);
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), lse.data(), B, T, C, NH);
    reference::attention_forward(rout.data(), rlse.data(), qkv.data(), B, T, C, NH);
    reference::attention_backward(rdqkv.data(), dout.data(), qkv.data(), B, T, C, NH);
    const ErrorStats eo = compare(out.data(), rout.data(), out.size()), el = compare(lse.data(), rlse.data(), lse.size()),
                     ed = compare(dqkv.data(), rdqkv.data(), dqkv.size());
    check(eo.rel_l2 <= kKernelTol && el.rel_l2 <= kKernelTol && ed.rel_l2 <= 10 * kKernelTol,
          "attention B=%d T=%d C=%d NH=%d vs reference: out rel-L2 %.3e, lse %.3e, dqkv %.3e (tol %.0e, dqkv %.0e)", B,
          T, C, NH, eo.rel_l2, el.rel_l2, ed.rel_l2, kKernelTol, 10 * kKernelTol);
}

// The logits generate() sees at each position equal the forward's on the same tokens.
void check_generate(const std::string& prefix) {
    ModelFile f = read_model_file(prefix + "_model.bin");
    cpu::GPT2 m;
    cpu::gpt2_build(&m, f.config, f.params);
    const int V = f.config.vocab_size, Vp = f.config.padded_vocab_size, T = 40;
    Rng rng(3);
    std::vector<int> seq(T);
    for (int& t : seq) t = (int)(rng.next_u64() % (uint64_t)V);
    cpu::gpt2_forward(&m, seq.data(), nullptr, 1, T);
    std::vector<float> full(m.act(cpu::LOGITS), m.act(cpu::LOGITS) + (size_t)T * Vp);
    double worst = 0;
    const std::vector<int> prompt(seq.begin(), seq.begin() + 5);
    const std::vector<int> got = cpu::generate(m, prompt, T - 4, [&](const float* logits, int g) {
        const int pos = 4 + g;  // the logits after token pos
        worst = std::max(worst, compare(logits, full.data() + (size_t)pos * Vp, (size_t)V).rel_l2);
        return pos + 1 < T ? seq[pos + 1] : 0;
    });
    check(worst <= kKernelTol && (int)got.size() == T - 4,
          "generate (KV cache, prompt 5, 36 new) vs the forward's logits: worst rel-L2 %.3e (tol %.0e)", worst,
          kKernelTol);
}

// ------------------------------------------------------------------------------------------------ determinism, state
void check_threads_and_state(const std::string& prefix) {
    ModelFile f = read_model_file(prefix + "_model.bin");
    const DebugState ref = read_debug_state(prefix + "_debug_state.bin", f.config);
    const int threads = max_threads();
    std::vector<float> grads[2];
    float losses[2];
    for (int run = 0; run < 2; run++) {
        set_threads(run == 0 ? 1 : std::max(3, threads));
        cpu::GPT2 m;
        cpu::gpt2_build(&m, f.config, f.params);
        losses[run] = cpu::gpt2_forward(&m, ref.inputs.data(), ref.targets.data(), ref.B, ref.T);
        cpu::gpt2_backward(&m, 1.0f);
        grads[run] = m.grads;
    }
    set_threads(threads);
    check(losses[0] == losses[1] && grads[0] == grads[1],
          "1 thread and %d threads: the same loss and gradient bits", std::max(3, threads));

    cpu::GPT2 m;
    cpu::gpt2_build(&m, f.config, f.params);
    cpu::AdamW opt;
    opt.init(m, {});
    for (size_t i = 0; i < opt.m.size(); i++) opt.m[i] = (float)i, opt.v[i] = 0.5f * i;
    const std::vector<uint8_t> bytes = opt.state_to_host();
    cpu::AdamW back;
    back.init(m, {});
    back.state_from_host(bytes, "state", &m);
    bool ok = back.m == opt.m && back.v == opt.v && bytes.size() == 2 * m.num_parameters * sizeof(float);
    std::vector<uint8_t> gpu(3 * m.num_parameters * sizeof(float));  // [master][m][v]
    std::vector<float> master(m.num_parameters, 0.25f);
    memcpy(gpu.data(), master.data(), master.size() * sizeof(float));
    memcpy(gpu.data() + master.size() * sizeof(float), bytes.data(), bytes.size());
    back.state_from_host(gpu, "gpu_state", &m);
    ok = ok && m.params == master && back.m == opt.m && back.v == opt.v;
    bool refused = false;
    try {
        back.state_from_host(std::vector<uint8_t>(12), "short_state", &m);
    } catch (const FileError& e) {
        refused = std::string(e.what()).find("short_state") != std::string::npos;
    }
    check(ok && refused, "optimizer state: [m][v] round trip, [master][m][v] sets the weights, a wrong size is refused "
                         "naming the file");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <reference prefix>   e.g. %s tests/fixtures/tiny\n", argv[0], argv[0]);
        return 1;
    }
    const std::string prefix = argv[1];
    printf("test_cpu_engine: the CPU trainer's engine (%s, %d threads) vs PyTorch and the CPU reference, fixture %s\n",
           cpu::kVecName, max_threads(), prefix.c_str());
    try {
        double traj_torch = 0, traj_ref = 0, path = 0;
        check_against_pytorch(prefix, &traj_torch, &traj_ref);
        check_training_path(prefix, &path);
        check_gemm();
        check_attention();
        check_generate(prefix);
        check_threads_and_state(prefix);
        printf("largest loss differences over 10 steps: vs PyTorch %.3e, vs the reference %.3e (its batch), %.3e "
               "(the trainer's path)\n", traj_torch, traj_ref, path);
    } catch (const std::exception& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    printf("test_cpu_engine: %d checks passed, %d failed -> %s\n", passed, failed, failed == 0 ? "PASS" : "FAIL");
    return failed == 0 ? 0 : 1;
}
