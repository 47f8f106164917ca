// GPT-2 training on one or more GPUs: flags -> model + data -> loop (forward, backward with gradient
// accumulation, all-reduce, clip, AdamW) -> validation, samples, checkpoints, logs.
// Flags are llm.c's (see --help). Checkpoints resume bit-exactly (-y 1): the weights, optimizer state,
// data position and sampler RNG are saved, and every other random stream is derived from (seed, step).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/app/train/logger.h"
#include "llmc/app/train/mfu.h"
#include "llmc/app/train/preflight.h"
#include "llmc/app/train/step_trace.h"
#include "llmc/app/train/train_args.h"
#include "llmc/app/train/trainer_setup.h"
#include "llmc/checkpoint/checkpoint.cuh"
#include "llmc/core/options.h"
#include "llmc/core/progress_line.h"
#include "llmc/core/version.h"
#include "llmc/data/dataloader.h"
#include "llmc/distributed/multi_gpu.cuh"
#include "llmc/formats/tokenizer_file.h"
#include "llmc/inference/generate.cuh"
#include "llmc/inference/sampler.h"
#include "llmc/model/gpt2.cuh"
#include "llmc/model/gpt2_step.cuh"
#include "llmc/optimizer/adamw_optimizer.cuh"
#include "llmc/optimizer/model_and_optimizer.cuh"
#include "llmc/optimizer/schedulers.h"

namespace {

// What the device can do, from its properties (no table of product names: llmc/app/train/mfu.h).
struct DeviceSummary {
    std::string name;
    int cc_major = 0, cc_minor = 0, sm_count = 0, clock_khz = 0;
    size_t total_memory = 0;
    double peak_flops = 0;
    bool peak_assumed = false;
};

DeviceSummary query_device(int device, MathMode mode) {
    DeviceSummary d;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    d.name = prop.name;
    d.total_memory = prop.totalGlobalMem;
    // cudaDeviceProp::clockRate is gone in CUDA 13; the attribute still reports the peak clock in kHz.
    cudaCheck(cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device));
    cudaCheck(cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, device));
    cudaCheck(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, device));
    d.peak_flops = peak_flops(d.cc_major, d.cc_minor, d.sm_count, d.clock_khz, mode);
    d.peak_assumed = peak_rate_per_sm(d.cc_major, d.cc_minor, mode).assumed;
    return d;
}

size_t device_memory_in_use() {
    size_t free_bytes = 0, total_bytes = 0;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total_bytes));
    return total_bytes - free_bytes;
}

// Mean loss over up to max_batches validation batches (all if -1), averaged over ranks. The forward waits for
// parameters still being gathered (-z 1) through the optimizer's listener.
float evaluate(GPT2& model, AdamW& opt, DataLoader& val, int max_batches, int B, int T, MultiGpu& mg) {
    val.reset();
    size_t n = val.num_batches_per_epoch();
    if (max_batches > 0 && (size_t)max_batches < n) n = (size_t)max_batches;
    double sum = 0.0;
    ProgressLine progress("validation", (int)n, mg.rank == 0);
    for (size_t i = 0; i < n; i++) {
        val.next_batch();
        sum += gpt2_forward(&model, val.inputs(), val.targets(), B, T, opt.listener());
        progress.update((int)i + 1);
    }
    return multi_gpu_mean(mg, (float)(sum / (double)n));
}

// HellaSwag (-h 1) over this rank's examples, the counts summed over the ranks. The forward waits for gathered
// parameters (-z 1, 2) through the optimizer's listener, as the validation does; every rank runs the same batches.
HellaSwagResult evaluate_hellaswag(GPT2& model, AdamW& opt, HellaSwagEval& hs, int B, int T, MultiGpu& mg) {
    return hs.run(
        [&](const EvalBatch& b, std::vector<float>& losses) {
            gpt2_forward(&model, b.inputs.data(), b.targets.data(), B, T, opt.listener());
            gpt2_last_losses(&model, &losses);
        },
        [&](double* v, int n) {  // counts below 2^24: exact as floats
            for (int i = 0; i < n; i++) v[i] = (double)multi_gpu_sum(mg, (float)v[i]);
        },
        mg.rank == 0);
}

// Generates gen_tokens after <|endoftext|> and prints them, one coin per token from the sampler's stream (saved in
// checkpoints). generate() (llmc/inference/generate.cuh), as generate_gpt2cu runs it, on an engine that reads the
// model's parameters in place and has its own small KV cache and scratch.
void print_sample(GPT2& model, const TrainArgs& a, Rng& rng, const TokenizerFile* tok, int eot) {
    GenerateRequest request;
    request.prompts = {{eot}};
    request.max_new = a.gen_tokens;
    request.coins.resize((size_t)a.gen_tokens);
    for (float& coin : request.coins) coin = rng.uniform();
    request.pad_token = eot;
    InferenceOptions options;
    options.pick = PickParams{a.temperature, a.top_k, 1.f};
    options.attention = attention_backend_name(model.backend);
    options.fuse_gelu = model.fuse_gelu;
    // a sample is a few dozen tokens between steps: the per-layer kernels (tested on borrowed training weights), not
    // Auto's cooperative kernel over every SM (LLMC_DECODE_PERSISTENT is generation's and the server's switch)
    options.decode.persistent_auto = false;
    cudaCheck(cudaStreamSynchronize(model.stream));  // the parameters are final; the engine reads them on its stream
    InferenceEngine engine;
    inference_engine_borrow(&engine, model.config, model.params, generation_shape(model.config, 1, 1, a.gen_tokens),
                            options);
    const std::vector<int> ids = generate(&engine, request).tokens[0];
    inference_engine_free(&engine);
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

// ---------------------------------------------------------------- set-up phases
// One process per GPU; ranks other than 0 print nothing (errors still reach stderr).
MultiGpu start_processes(const TrainArgs& a, int* argc, char*** argv) {
    MultiGpuOptions mo;
    mo.num_processes = a.num_processes;
    mo.process_rank = a.process_rank;
    mo.gpus_per_node = a.gpus_per_node;
    mo.init_method = a.init_method;
    mo.rendezvous_dir = a.rendezvous_dir;
    mo.rank_timeout_s = engine_options().rank_timeout_s;
    MultiGpu mg = multi_gpu_init(mo, argc, argv);
    if (mg.rank != 0 && !freopen("/dev/null", "w", stdout)) {
        trainer_fail("cannot silence stdout on rank " + std::to_string(mg.rank));
    }
    return mg;
}

// The model's weights from the plan's source: a random-init preset (-e d12), or a file (the checkpoint to resume, or
// -e path).
void build_model(GPT2* model, const ModelSource& src, uint64_t seed) {
    if (src.kind == ModelSource::Preset) gpt2_build_random(model, src.preset, seed);
    else gpt2_build_from_checkpoint(model, src.path);
}

struct StartupInfo {
    std::string init_desc;
    uint64_t run_id;
    AttentionBackend backend;
    BatchLayout layout;
    int world, start_step, total_steps;
    MathMode math;
    DeviceSummary dev;
    double flops_per_token;       // 6N + 6LTC (llm.c's count, the MFU figure scripts read)
    double flops_per_token_full;  // 6N + 12LTC (nanoGPT's)
};

void print_startup_table(const TrainArgs& a, const GPT2& model, const AdamW& opt, const StartupInfo& s,
                         const DataLoader* train, const DataLoader* val, const HellaSwagEval* hs) {
    auto row = [](const std::string& k, const std::string& v) { printf("%s\n", format_table_row(k, v).c_str()); };
    auto num = [](double x) { char b[64]; snprintf(b, sizeof(b), "%.6g", x); return std::string(b); };
    auto str = [](long long x) { return std::to_string(x); };
    const std::string rule = format_table_rule();
    printf("%s\n", rule.c_str());
    print_table_rows(model_table_rows(s.init_desc, model.config));
    row("precision", std::string(PRECISION_NAME) + (kFloatXIsBF16 ? (a.master_weights ? " + fp32 master weights"
                                                                                      : ", no master weights")
                                                                 : (a.tf32 ? " (TF32 matmuls)" : " (no TF32)")));
    row("attention / recompute", attention_backend_description(s.backend) + " / " + str(a.recompute));
    row("matmuls", gpt2_matmuls_description(model));
    row("B / T / processes", str(a.B) + " / " + str(a.T) + " / " + str(s.world));
    row("forward + backward",
        model.use_graphs ? (s.world == 1 ? "one CUDA Graph per micro-step (from the second; -cg 0: off)"
                                         : "CUDA Graphs between the exchange's calls (from the second micro-step; "
                                           "-cg 0: off)")
        : matmul_algos::tuning() ? "kernels queued one by one (GEMM tuning run)"
                                 : "kernels queued one by one");
    row("ZeRO stage", opt.zero_description());
    if (s.world > 1) row("gradient exchange", opt.exchange_description((size_t)a.zero_bucket_mb));
    print_table_rows(schedule_table_rows(a, s.layout, s.start_step, s.total_steps));
    print_table_rows(data_table_rows(a, train, val, hs));
    row("LLMC_* switches", engine_options().description());
    row("output", a.output_dir.empty() ? "(none)" : a.output_dir + " (run " + run_id_hex(s.run_id) + ")");
    printf("%s\n", rule.c_str());
    const DeviceSummary& d = s.dev;
    char devdesc[256];
    snprintf(devdesc, sizeof(devdesc), "%s (sm_%d%d, %d SMs, %.0f MHz)", d.name.c_str(), d.cc_major, d.cc_minor,
             d.sm_count, d.clock_khz / 1e3);
    row("device", devdesc);
    row("device memory", format_bytes((double)d.total_memory));
    row("peak " + std::string(s.math == MathMode::BF16 ? "bf16" : s.math == MathMode::TF32 ? "tf32" : "fp32") +
            " FLOP/s",
        d.peak_flops > 0 ? num(d.peak_flops / 1e12) + " TFLOP/s" + (d.peak_assumed ? " (assumed arch)" : "")
                         : "unknown (MFU not reported)");
    row("model FLOPs per token", num(s.flops_per_token) + " (6N+6LTC; 6N+12LTC " + num(s.flops_per_token_full) + ")");
    printf("%s\n", rule.c_str());
    for (const auto& [label, bytes] : memory_plan_rows(model.plan + opt.plan)) row(label, format_bytes((double)bytes));
    printf("%s\n", rule.c_str());
    fflush(stdout);
}

// ---------------------------------------------------------------- one optimizer step
struct StepResult {
    float loss, grad_norm, lr;
    double ms;
};

// zero grad -> grad_accum_steps × (forward, backward; the last backward's buckets exchanged under it, every
// backward's with -z 2) -> the optimizer's step (norm, clip, AdamW; -z 1, 2: then the parameters' all-gather, which
// the next forward waits for bucket by bucket), timed on the compute stream from the previous step's end to the end
// of the update.
StepResult train_step(GPT2& model, AdamW& opt, DataLoader& train, const TrainArgs& a, const BatchLayout& layout,
                      const LRScheduler& sched, MultiGpu& mg, int step) {
    cudaCheck(cudaStreamSynchronize(model.stream));  // not the device: a -z 1 all-gather may still be running
    const auto t0 = std::chrono::steady_clock::now();
    gpt2_zero_grad(&model);
    double loss_sum = 0;
    GradExchange* exchange = opt.listener();
    for (int micro = 0; micro < layout.grad_accum_steps; micro++) {
        train.next_batch();
        // one GPU: no exchange, one CUDA Graph (-cg 1); several: graphs between the exchange's calls, the forward
        // waits for gathered parameters and only the last micro-step's backward sends its gradients (-z 2: every one's)
        const bool last_micro = micro == layout.grad_accum_steps - 1;
        loss_sum += gpt2_forward_backward(&model, train.inputs(), train.targets(), a.B, a.T,
                                          1.0f / layout.grad_accum_steps, exchange,
                                          exchange ? opt.backward_listener(last_micro) : nullptr);
    }
    StepResult r;
    // No host wait from here to the end of the update: the ranks' mean loss is queued before the step (after it, the
    // collective would queue behind the parameters' all-gather), the norm and clipping stay on the device, and both
    // come back to pinned memory with the update.
    multi_gpu_mean_begin(mg, (float)(loss_sum / layout.grad_accum_steps));
    r.lr = sched.lr_at(step);
    opt.step(r.lr, a.grad_clip, step + 1, mix_seed(a.seed, (uint64_t)step + 1));
    multi_gpu_mean_fetch(mg, model.stream);
    cudaCheck(cudaStreamSynchronize(model.stream));
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.loss = multi_gpu_mean_value(mg);
    r.grad_norm = opt.result().grad_norm;
    check_step_finite(step + 1, r.loss, r.grad_norm);
    return r;
}

// ---------------------------------------------------------------- the run
// The run as the preflight planned it (layout, resume point, model source, loaders, steps, schedule, samples'
// tokenizer); what belongs to a rank is opened once the processes exist.
int train(const TrainArgs& a, RunPlan plan, int* argc, char*** argv) {
    MultiGpu mg = start_processes(a, argc, argv);
    const bool main_rank = mg.rank == 0;
    const RankData data = rank_data(a, &plan, mg.rank, mg.world);
    const BatchLayout& layout = plan.layout;
    const int resume_step = plan.resume_step, total_steps = plan.total_steps;
    Checkpointer ckpt{a.output_dir, a.checkpoint_keep};
    prepare_output_dir(a, resume_step, plan.notes, &ckpt, main_rank, [&] { multi_gpu_barrier(mg); });

    // ---- model
    GPT2 model;
    build_model(&model, plan.source, a.seed);
    const std::string& init_desc = plan.source.description;
    const GPT2Config& c = model.config;
    std::string note;
    const AttentionBackend backend = resolve_attention_backend(a.attention, c.channels, c.num_heads, &note);
    if (!note.empty()) printf("note: %s\n", note.c_str());
    matmul_set_tf32(a.tf32);
    if (a.fp8) {  // the build and the shape were checked before any CUDA call (main); the device here
        int cc_major = 0;
        cudaCheck(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, mg.local_device));
        const std::string why = gpt2_fp8_problem(c.channels, a.B * a.T, cc_major);
        if (!why.empty()) trainer_fail("flag -fp8: " + why);
        model.fp8 = a.fp8;
        if (a.fp8_history > 0 && mg.world > 1) trainer_fail("flag -fp8h: " + fp8_history_multi_gpu_problem());
        model.fp8_history = a.fp8_history;
        model.fp8_micro_steps = layout.grad_accum_steps;
    }
    // A GEMM tuning run (LLMC_GEMM_TUNE) times each call as queued, which a replayed graph would not do; SMs left to
    // NCCL (LLMC_COMM_SMS) change the persistent kernels' grids while a collective runs, which a graph would freeze.
    model.use_graphs = a.cuda_graph && !matmul_algos::tuning() && !(mg.world > 1 && engine_options().comm_sms > 0);
    AdamWSettings opt_settings;  // betas and eps as in GPT-2/GPT-3 training (and llm.c): the defaults
    opt_settings.weight_decay = a.weight_decay;
    opt_settings.master_weights = a.master_weights;
    opt_settings.zero_stage = a.zero_stage;
    opt_settings.bucket_bytes = (size_t)a.zero_bucket_mb << 20;
    if (a.zero_stage == 2 && mg.world == 1) printf("note: -z 2 with one process: nothing to exchange, runs as -z 1\n");
    AdamW opt;
    model_and_optimizer_init(&model, &opt, &mg, ModelAllocation{a.B, a.T, a.recompute, backend}, opt_settings);

    // ---- data, schedule, samples (the plan's)
    DataLoader* const train_loader = data.train.get();
    DataLoader* const val_loader = data.val.get();
    HellaSwagEval* const hellaswag = data.hellaswag.get();
    const LRScheduler& sched = plan.schedule;
    const TokenizerFile* const tokenizer = main_rank ? plan.tokenizer.get() : nullptr;
    if (main_rank) print_sample_tokenizer_note(a, tokenizer);
    const int eot = plan.eot;
    Rng sampler_rng = make_sampler_rng(a);

    // ---- resume: optimizer state, data position, sampler
    const RunShape shape{a.B, a.T, mg.world, layout.grad_accum_steps};
    const int start_step =
        resume_step >= 0
            ? checkpoint_restore(ckpt, &model, &opt, resume_step, shape, &sampler_rng, train_loader, mg.rank)
            : 0;
    MainLog log;
    if (main_rank) log.open(a.output_dir, resume_step >= 0 ? start_step : -1);

    StartupInfo info;
    info.init_desc = init_desc;
    info.run_id = ckpt.run_id;
    info.backend = backend;
    info.layout = layout;
    info.world = mg.world;
    info.start_step = start_step;
    info.total_steps = total_steps;
    info.math = kFloatXIsBF16 ? MathMode::BF16 : (a.tf32 ? MathMode::TF32 : MathMode::FP32);
    info.dev = query_device(mg.local_device, info.math);
    info.flops_per_token = gpt2_flops_per_token(c, a.T, AttentionFlops::Causal);
    info.flops_per_token_full = gpt2_flops_per_token(c, a.T, AttentionFlops::Full);
    print_startup_table(a, model, opt, info, train_loader, val_loader, hellaswag);

    // ---- the loop: checkpoint, validate and sample at the boundaries, then one optimizer step
    double sum_ms = 0;
    int timed_steps = 0;
    StepTrace trace;  // LLMC_TRACE
    trace.init(mg.rank);
    for (int step = start_step;; step++) {
        multi_gpu_progress(mg, step);  // `step` steps completed: what the watchdog's line names if a peer is lost
        const StepEvents ev = step_events(a, step, start_step, total_steps, val_loader != nullptr, main_rank);
        if (ev.checkpoint || ev.sample || ev.last) opt.sync();  // the parameters' all-gather has landed
        if (ev.checkpoint) {
            multi_gpu_barrier(mg);
            checkpoint_save(ckpt, model, opt, step, shape, sampler_rng, *train_loader, val_loader, mg.rank);
            multi_gpu_barrier(mg);
        }
        if (ev.validate) {
            const float val_loss = evaluate(model, opt, *val_loader, a.val_max_batches, a.B, a.T, mg);
            printf("val loss %.6f (after %d steps)\n", val_loss, step);
            log.log_val(step, val_loss);
        }
        if (ev.hellaswag) {
            const HellaSwagResult hs = evaluate_hellaswag(model, opt, *hellaswag, a.B, a.T, mg);
            printf("%s\n", HellaSwagEval::report(hs, mg.world).c_str());
            log.log_eval(step, (float)hs.acc.acc_norm());
        }
        if (ev.sample) {
            print_sample(model, a, sampler_rng, tokenizer, eot);
        }
        if (ev.last) break;

        multi_gpu_progress(mg, step);  // the work between steps counts as progress (LLMC_RANK_TIMEOUT_S)
        trace.before(step + 1);
        const StepResult r = train_step(model, opt, *train_loader, a, layout, sched, mg, step);
        trace.after(step + 1, [&] { opt.sync(); });
        StepStats st;
        st.step = step + 1;
        st.total_steps = total_steps;
        st.loss = r.loss;
        st.grad_norm = r.grad_norm;
        st.lr = r.lr;
        st.ms = r.ms;
        st.tokens_per_s = layout.tokens_per_step / (r.ms / 1e3);
        const double tokens_per_device = (double)layout.tokens_per_step / mg.world;
        if (info.dev.peak_flops > 0) {
            st.mfu = model_flops_utilization(info.flops_per_token, tokens_per_device, r.ms / 1e3, info.dev.peak_flops);
            st.mfu_full =
                model_flops_utilization(info.flops_per_token_full, tokens_per_device, r.ms / 1e3, info.dev.peak_flops);
        }
        printf("%s\n", format_step_line(st).c_str());
        fflush(stdout);
        log.log_train(step, r.loss);
        if (step > start_step) {  // the first step pays for cuBLAS plans and caches
            sum_ms += r.ms;
            timed_steps++;
        }
        if (step == start_step) {
            printf("device memory in use after the first step: %s (cudaMemGetInfo: everything on the device, "
                   "CUDA context included)\n", format_bytes((double)device_memory_in_use()).c_str());
        }
    }
    if (timed_steps > 0) {
        const double ms = sum_ms / timed_steps;
        printf("average over %d steps (first excluded): %.2f ms/step, %.0f tok/s\n", timed_steps, ms,
               layout.tokens_per_step / (ms / 1e3));
    }
    printf("device memory in use at the end: %s\n", format_bytes((double)device_memory_in_use()).c_str());
    if (model.use_graphs) {
        int graphs = 0, replays = 0;
        gpt2_graph_counts(&model, &graphs, &replays);
        printf("forward + backward: %d CUDA Graph%s captured, %d replays\n", graphs, graphs == 1 ? "" : "s", replays);
    }
    if (matmul_algos::tuning()) {
        const int left = matmul_algos::unfinished();
        const char* path = matmul_algos::state().tune_path.c_str();
        if (left) printf("GEMM tuning: %d shapes still short of samples (not written; run more steps), the rest in %s\n",
                         left, path);
        else printf("GEMM tuning: every shape written to %s\n", path);
    }
    model_and_optimizer_free(&model, &opt);
    multi_gpu_free(mg);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    TrainArgs args;
    std::string error;
    const ParseStatus st = parse_train_args(argc, argv, &args, &error);
    const int done =
        finish_parse(st, error, argv[0], train_usage(argv[0]), version_line("train_gpt2cu", PRECISION_NAME));
    if (done >= 0) return done;
    try {
        // every input read and checked on the host before any CUDA call (llmc/app/train/preflight.h); --check ends here
        RunPlan plan = preflight(args, expected_processes(args), gpt2_shape_problem);
        if (args.fp8 && !gpt2_fp8_problem(plan.config.channels, args.B * args.T, -1).empty())
            trainer_fail("flag -fp8: " + gpt2_fp8_problem(plan.config.channels, args.B * args.T, -1));
        if (args.fp8_history > 0 && !args.fp8) trainer_fail("flag -fp8h: delayed scaling needs -fp8 1 or 2");
        if (args.fp8_history > 0 && engine_options().fp8_blocks)
            trainer_fail("flag -fp8h: LLMC_FP8_BLOCKS=1 scales each block by its own amax (no history): drop -fp8h");
        if (args.fp8_history > 0 && expected_processes(args) > 1)
            trainer_fail("flag -fp8h: " + fp8_history_multi_gpu_problem());
        if (args.check) {
            print_preflight(args, plan, {{"precision", PRECISION_NAME}, {"LLMC_* switches", engine_options().description()}});
            return 0;
        }
        require_cuda_device(argv[0]);
        return train(args, std::move(plan), &argc, &argv);
    } catch (const std::exception& e) {
        fflush(stdout);
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
