// GPT-2 training on the CPU: flags -> model + data -> loop (forward, backward with gradient accumulation, clip,
// AdamW) -> validation, samples, checkpoints, logs. fp32 throughout, OpenMP over the cores (llmc/cpu/: blocked,
// vectorised kernels). The GPU trainer's flags, data, checkpoints and logs (train_gpt2.cu; the shared set-up is
// llmc/app/train/trainer_setup.h): a checkpoint written here resumes on the GPU trainer and one written there resumes
// here; the step lines and main.log read the same. Runs are deterministic for any number of threads, and resume
// (-y 1) continues bit for bit.
#include <algorithm>
#include <chrono>
#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "llmc/app/train/logger.h"
#include "llmc/app/train/mfu.h"
#include "llmc/app/train/preflight.h"
#include "llmc/app/train/train_args.h"
#include "llmc/app/train/trainer_setup.h"
#include "llmc/checkpoint/checkpoint.h"
#include "llmc/core/progress_line.h"
#include "llmc/core/version.h"
#include "llmc/cpu/adamw.h"
#include "llmc/cpu/generate.h"
#include "llmc/cpu/gpt2.h"
#include "llmc/data/dataloader.h"
#include "llmc/formats/hf_gpt2.h"
#include "llmc/formats/model_file.h"
#include "llmc/formats/tokenizer_file.h"
#include "llmc/gpt2/gpt2_init.h"
#include "llmc/inference/sampler.h"
#include "llmc/optimizer/schedulers.h"

namespace {

using Model = cpu::GPT2;
using Optimizer = cpu::AdamW;

int thread_count() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// OpenMP's idle threads spin for a while before they sleep (libgomp's default); on a machine shared with other
// work a spinning thread takes the core from the thread still working, and a step took 2-6x longer than with idle
// threads asleep (docs/PERFORMANCE.md). The runtime reads OMP_WAIT_POLICY only when it loads, so unless the user
// set it, the trainer starts itself again once with OMP_WAIT_POLICY=passive (and carries on as it is if it cannot).
void prefer_passive_openmp_threads(char** argv) {
#ifdef _OPENMP
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");  // exec failed: the runtime already runs with its defaults
#else
    (void)argv;
#endif
}

#ifdef _OPENMP
std::string openmp_wait_policy() {
    if (const char* p = getenv("OMP_WAIT_POLICY")) return std::string(p) + " (OMP_WAIT_POLICY)";
    if (const char* c = getenv("GOMP_SPINCOUNT")) return std::string("GOMP_SPINCOUNT=") + c;
    return "the OpenMP runtime's default";
}
#endif

// The GPU trainer's flags with no meaning here: a note naming them, or an error for several processes.
void check_cpu_flags(const TrainArgs& a) {
    if (a.num_processes > 1) trainer_fail("flag -pn: the CPU trainer runs one process (-pn 1); -pn is for GPUs");
    if (a.fp8) trainer_fail("flag -fp8: the CPU trainer has no FP8 training (it is for Hopper GPUs; -fp8 0 here)");
    if (a.fp8_history) trainer_fail("flag -fp8h: the CPU trainer has no FP8 training (it is for Hopper GPUs)");
    std::vector<std::string> seen;
    std::string ignored;
    for (const std::string& f : a.flags_given) {
        if (!gpu_only_flag(f) || std::find(seen.begin(), seen.end(), f) != seen.end()) continue;
        seen.push_back(f);
        ignored += (ignored.empty() ? "" : ", ") + f;
    }
    if (!ignored.empty()) printf("note: flags %s are for the GPU trainer; the CPU trainer ignores them\n", ignored.c_str());
}

// Mean loss over up to max_batches validation batches (all if -1).
float evaluate(Model& model, DataLoader& val, int max_batches, int B, int T) {
    val.reset();
    size_t n = val.num_batches_per_epoch();
    if (max_batches > 0 && (size_t)max_batches < n) n = (size_t)max_batches;
    double sum = 0.0;
    ProgressLine progress("validation", (int)n, true);
    for (size_t i = 0; i < n; i++) {
        val.next_batch();
        sum += cpu::gpt2_forward(&model, val.inputs(), val.targets(), B, T);
        progress.update((int)i + 1);
    }
    return (float)(sum / (double)n);
}

// gen_tokens after <|endoftext|>, one coin per token from the sampler's stream (as the GPU trainer draws them), the
// host sampler's rule (llmc/inference/sampler.h) on each position's logits; printed as the GPU trainer prints them.
void print_sample(Model& model, const TrainArgs& a, Rng& rng, const TokenizerFile* tok, int eot) {
    std::vector<float> coins((size_t)a.gen_tokens);
    for (float& coin : coins) coin = rng.uniform();
    const int V = model.config.vocab_size;
    const std::vector<int> ids = cpu::generate(model, {eot}, a.gen_tokens, [&](const float* logits, int g) {
        return sample_token(logits, V, a.temperature, a.top_k, 1.0f, coins[(size_t)g]);
    });
    printf("generating:\n---\n");
    std::unique_ptr<TokenPrinter> printer = tok ? std::make_unique<TokenPrinter>(*tok) : nullptr;
    for (int next : ids) {
        if (printer) printf("%s", printer->next(next).c_str());  // control bytes escaped, characters kept whole
        else printf("%d ", next);
    }
    if (printer) printf("%s", printer->finish().c_str());
    printf("\n---\n");
    fflush(stdout);
}

// The model's weights: the checkpoint to resume, a random-init preset (-e d12, the GPU trainer's values for the
// seed), or a model file (ours, llm.c's, Hugging Face's). A file is read here (its shape sizes the data's checks);
// a preset's weights are made later, by build_model.
struct ModelInput {
    ModelSource source;
    GPT2Config config;
    std::vector<float> params;  // a file's
};

ModelInput read_model_input(const ModelSource& source) {
    ModelInput in;
    in.source = source;
    if (in.source.kind == ModelSource::Preset) {
        in.config = in.source.preset;
    } else {
        ModelFile f = read_model_any(in.source.path);
        in.config = f.config;
        in.params = std::move(f.params);
    }
    return in;
}

void build_model(Model* model, ModelInput in, uint64_t seed) {
    if (in.source.kind == ModelSource::Preset) in.params = gpt2_random_init(in.config, seed);
    cpu::gpt2_build(model, in.config, std::move(in.params));
}

struct StartupInfo {
    std::string init_desc;
    uint64_t run_id;
    BatchLayout layout;
    int start_step, total_steps;
    double flops_per_token;
};

void print_startup_table(const TrainArgs& a, const Model& model, const Optimizer& opt, const StartupInfo& s,
                         const DataLoader* train, const DataLoader* val, const HellaSwagEval* hs) {
    auto row = [](const std::string& k, const std::string& v) { printf("%s\n", format_table_row(k, v).c_str()); };
    auto num = [](double x) { char b[64]; snprintf(b, sizeof(b), "%.6g", x); return std::string(b); };
    auto str = [](long long x) { return std::to_string(x); };
    const std::string rule = format_table_rule();
    printf("%s\n", rule.c_str());
    print_table_rows(model_table_rows(s.init_desc, model.config));
    row("precision", "fp32 (CPU: no master weights)");
#ifdef _OPENMP
    row("threads", str(thread_count()) + " (OpenMP, OMP_NUM_THREADS)");
    row("idle threads", openmp_wait_policy());
#else
    row("threads", str(thread_count()) + " (built without OpenMP)");
#endif
    row("vectors / GEMM tile", std::string(cpu::kVecName) + " / " + str(cpu::kMR) + " x " +
                                   str(cpu::kNR));
    row("B / T", str(a.B) + " / " + str(a.T));
    print_table_rows(schedule_table_rows(a, s.layout, s.start_step, s.total_steps));
    print_table_rows(data_table_rows(a, train, val, hs));
    row("output", a.output_dir.empty() ? "(none)" : a.output_dir + " (run " + run_id_hex(s.run_id) + ")");
    row("model FLOPs per token", num(s.flops_per_token) + " (6N+6LTC)");
    printf("%s\n", rule.c_str());
    const double P = (double)model.num_parameters * sizeof(float);
    row("parameters + gradients", format_bytes(2 * P));
    row("AdamW m, v", format_bytes((double)(opt.m.size() + opt.v.size()) * sizeof(float)));
    row("activations", format_bytes((double)model.bytes() - 2 * P));
    printf("%s\n", rule.c_str());
    fflush(stdout);
}

struct StepResult {
    float loss, grad_norm, lr;
    double ms;
};

// zero grad -> grad_accum_steps x (forward, backward) -> norm, clip, AdamW; timed by the wall clock.
StepResult train_step(Model& model, Optimizer& opt, DataLoader& train, const TrainArgs& a, const BatchLayout& layout,
                      const LRScheduler& sched, int step) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::gpt2_zero_grad(&model);
    double loss_sum = 0;
    for (int micro = 0; micro < layout.grad_accum_steps; micro++) {
        train.next_batch();
        loss_sum += cpu::gpt2_forward(&model, train.inputs(), train.targets(), a.B, a.T);
        cpu::gpt2_backward(&model, 1.0f / layout.grad_accum_steps);
    }
    StepResult r;
    r.loss = (float)(loss_sum / layout.grad_accum_steps);
    r.lr = sched.lr_at(step);
    r.grad_norm = opt.step(model, r.lr, a.grad_clip, step + 1).grad_norm;
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    check_step_finite(step + 1, r.loss, r.grad_norm);
    return r;
}

// The run as the preflight planned it (layout, resume point, model source, loaders, steps, schedule, samples'
// tokenizer).
int train(const TrainArgs& a, RunPlan plan) {
    const RankData data = rank_data(a, &plan, 0, 1);
    const BatchLayout& layout = plan.layout;
    const int resume_step = plan.resume_step, total_steps = plan.total_steps;
    Checkpointer ckpt{a.output_dir, a.checkpoint_keep};
    prepare_output_dir(a, resume_step, plan.notes, &ckpt, true, [] {});

    // ---- the weights, the data (the plan's)
    ModelInput input = read_model_input(plan.source);
    const GPT2Config c = input.config;
    DataLoader* const train_loader = data.train.get();
    DataLoader* const val_loader = data.val.get();
    HellaSwagEval* const hellaswag = data.hellaswag.get();
    const LRScheduler& sched = plan.schedule;
    const TokenizerFile* const tokenizer = plan.tokenizer.get();
    print_sample_tokenizer_note(a, tokenizer);
    const int eot = plan.eot;
    Rng sampler_rng = make_sampler_rng(a);

    // ---- model and optimizer
    const std::string init_desc = input.source.description;
    Model model;
    build_model(&model, std::move(input), a.seed);
    cpu::gpt2_allocate(&model, a.B, a.T);
    cpu::AdamWSettings opt_settings;  // betas and eps as in GPT-2/GPT-3 training (and llm.c): the defaults
    opt_settings.weight_decay = a.weight_decay;
    Optimizer opt;
    opt.init(model, opt_settings);

    // ---- resume: optimizer state (and the master weights of a BF16 GPU run), data position, sampler
    const RunShape shape{a.B, a.T, 1, layout.grad_accum_steps};
    const int start_step =
        resume_step >= 0 ? ckpt.restore([&](const std::vector<uint8_t>& bytes, const std::string& path) {
            opt.state_from_host(bytes, path, &model);
        }, resume_step, shape, &sampler_rng, train_loader, 0) : 0;
    MainLog log;
    log.open(a.output_dir, resume_step >= 0 ? start_step : -1);

    StartupInfo info{init_desc, ckpt.run_id, layout, start_step, total_steps,
                     gpt2_flops_per_token(c, a.T, AttentionFlops::Causal)};
    print_startup_table(a, model, opt, info, train_loader, val_loader, hellaswag);

    // ---- the loop: checkpoint, validate and sample at the boundaries, then one optimizer step
    double sum_ms = 0;
    int timed_steps = 0;
    for (int step = start_step;; step++) {
        const StepEvents ev = step_events(a, step, start_step, total_steps, val_loader != nullptr, true);
        if (ev.checkpoint) {
            ckpt.save([&](const std::string& path) {
                write_model_file(path, c, model.params.data(), ParamDtype::FP32);
            }, opt.state_to_host(), step, shape, sampler_rng, *train_loader, val_loader, 0);
        }
        if (ev.validate) {
            const float val_loss = evaluate(model, *val_loader, a.val_max_batches, a.B, a.T);
            printf("val loss %.6f (after %d steps)\n", val_loss, step);
            log.log_val(step, val_loss);
        }
        if (ev.hellaswag) {
            const HellaSwagResult hs = hellaswag->run(
                [&](const EvalBatch& b, std::vector<float>& losses) {
                    cpu::gpt2_forward(&model, b.inputs.data(), b.targets.data(), a.B, a.T);
                    cpu::gpt2_last_losses(&model, &losses);
                },
                [](double*, int) {}, true);
            printf("%s\n", HellaSwagEval::report(hs, 1).c_str());
            log.log_eval(step, (float)hs.acc.acc_norm());
        }
        if (ev.sample) print_sample(model, a, sampler_rng, tokenizer, eot);
        if (ev.last) break;

        const StepResult r = train_step(model, opt, *train_loader, a, layout, sched, step);
        StepStats st;
        st.step = step + 1;
        st.total_steps = total_steps;
        st.loss = r.loss;
        st.grad_norm = r.grad_norm;
        st.lr = r.lr;
        st.ms = r.ms;
        st.tokens_per_s = layout.tokens_per_step / (r.ms / 1e3);
        printf("%s\n", format_step_line(st).c_str());  // MFU n/a: no peak rate is known for a CPU
        fflush(stdout);
        log.log_train(step, r.loss);
        if (step > start_step) {  // the first step pays for the page faults of every buffer
            sum_ms += r.ms;
            timed_steps++;
        }
    }
    if (timed_steps > 0) {
        const double ms = sum_ms / timed_steps;
        printf("average over %d steps (first excluded): %.2f ms/step, %.0f tok/s, %.1f GFLOP/s (model FLOPs)\n",
               timed_steps, ms, layout.tokens_per_step / (ms / 1e3),
               info.flops_per_token * layout.tokens_per_step / (ms / 1e3) / 1e9);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    prefer_passive_openmp_threads(argv);
    TrainArgs args;
    std::string error;
    const ParseStatus st = parse_train_args(argc, argv, &args, &error);
    const int done = finish_parse(st, error, argv[0], train_usage(argv[0], Trainer::Cpu),
                                  version_line("train_gpt2", "fp32, CPU"));
    if (done >= 0) return done;
    try {
        check_cpu_flags(args);
        // every input read and checked before the heavy work (llmc/app/train/preflight.h); --check ends here
        RunPlan plan = preflight(args, 1);
        if (args.check) {
            print_preflight(args, plan, {{"precision", "fp32 (CPU)"}});
            return 0;
        }
        return train(args, std::move(plan));
    } catch (const std::exception& e) {
        fflush(stdout);
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
