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

#include "llmc/dataloader.h"
#include "llmc/gpt2.cuh"
#include "llmc/logger.h"
#include "llmc/mfu.h"
#include "llmc/multi_gpu.cuh"
#include "llmc/run_state.h"
#include "llmc/sampler.h"
#include "llmc/schedulers.h"
#include "llmc/tokenizer_file.h"
#include "llmc/train_args.h"

namespace {

// AdamW settings as in GPT-2/GPT-3 training (and llm.c); the learning rate comes from the schedule.
constexpr float kBeta1 = 0.9f, kBeta2 = 0.95f, kEps = 1e-8f;

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }

// What the device can do, from its properties (no table of product names: llmc/mfu.h).
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

// Mean loss over up to max_batches validation batches (all if -1), averaged over ranks.
float evaluate(GPT2& model, DataLoader& val, int max_batches, int B, int T, MultiGpu& mg) {
    val.reset();
    size_t n = val.num_batches_per_epoch();
    if (max_batches > 0 && (size_t)max_batches < n) n = (size_t)max_batches;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        val.next_batch();
        sum += gpt2_forward(&model, val.inputs(), val.targets(), B, T);
    }
    return multi_gpu_mean(mg, (float)(sum / (double)n));
}

// Generates gen_tokens after <|endoftext|> and prints them. Runs batch 1 at one fixed length Tg (a multiple
// of 64, so the matmul plans are built once); causal attention means the filler after position t cannot
// affect the logits at t.
void print_sample(GPT2& model, const TrainArgs& a, Rng& rng, const TokenizerFile* tok, int eot) {
    const GPT2Config& c = model.config;
    const int Tg = std::min(a.T, (a.gen_tokens + 1 + 63) / 64 * 64);  // > gen_tokens, since gen_tokens < T
    std::vector<int> tokens((size_t)Tg, eot);
    std::vector<float> logits(c.padded_vocab_size);
    printf("generating:\n---\n");
    for (int t = 1; t <= a.gen_tokens; t++) {
        gpt2_forward(&model, tokens.data(), nullptr, 1, Tg);
        gpt2_copy_logits(&model, 0, t - 1, logits.data());
        const int next = sample_token(logits.data(), c.vocab_size, a.temperature, a.top_k, rng.uniform());
        tokens[t] = next;
        if (tok) printf("%s", printable_token(*tok, next).c_str());
        else printf("%d ", next);
        fflush(stdout);
    }
    printf("\n---\n");
}

struct Checkpointer {
    std::string dir;
    int keep = 0;
    // Weights first, run state last (each atomic): the state file marks a complete pair.
    void save(GPT2& model, int step, const BatchLayout& layout, const TrainArgs& a, int nproc, const Rng& sampler_rng,
              const DataLoader& train, const DataLoader* val) {
        const std::string model_path = checkpoint_model_path(dir, step);
        gpt2_write_model(&model, model_path);
        RunState s;
        s.step = step;
        s.B = a.B;
        s.T = a.T;
        s.num_processes = nproc;
        s.grad_accum_steps = layout.grad_accum_steps;
        s.sampler_rng = sampler_rng.get_state();
        s.train_loader = train.get_state();
        if (val) s.val_loader = val->get_state();
        s.optimizer_state.resize(gpt2_optimizer_state_bytes(&model));
        gpt2_read_optimizer_state(&model, s.optimizer_state.data());
        write_run_state(checkpoint_state_path(dir, step), s);
        remove_old_checkpoints(dir, keep);
        printf("saved checkpoint %s (+ state)\n", model_path.c_str());
    }
};

int train(const TrainArgs& a, int* argc, char*** argv) {
    MultiGpuOptions mo;
    mo.num_processes = a.num_processes;
    mo.process_rank = a.process_rank;
    mo.gpus_per_node = a.gpus_per_node;
    mo.init_method = a.init_method;
    mo.rendezvous_dir = a.rendezvous_dir;
    MultiGpu mg = multi_gpu_init(mo, argc, argv);
    const bool main_rank = mg.rank == 0;
    if (!main_rank) {  // only rank 0 prints; errors still reach stderr
        if (!freopen("/dev/null", "w", stdout)) fail("cannot silence stdout on rank " + std::to_string(mg.rank));
    }

    BatchLayout layout;
    std::string err = resolve_batch_layout(a, mg.world, &layout);
    if (!err.empty()) fail(err);

    // "auto" is resolved once the model shape is known (below).
    AttentionBackend backend = AttentionBackend::Flash;
    if (a.attention != "auto" && !parse_attention_backend(a.attention, &backend)) {
        fail("flag -ab: unknown attention backend " + a.attention);
    }

    // ---- resume point
    int resume_step = -1;
    if (a.resume) {
        resume_step = latest_checkpoint(a.output_dir);
        if (resume_step < 0) printf("note: -y 1 but no complete checkpoint in %s: starting from scratch\n", a.output_dir.c_str());
    }
    if (!a.output_dir.empty() && main_rank) ensure_directory(a.output_dir);

    // ---- model
    GPT2 model;
    GPT2Config preset;
    std::string init_desc;
    if (resume_step >= 0) {
        init_desc = checkpoint_model_path(a.output_dir, resume_step);
        gpt2_build_from_checkpoint(&model, init_desc);
    } else if (gpt2_preset(a.init_from, &preset, std::max(1024, a.T))) {  // positions for T > 1024 too
        init_desc = a.init_from + " random init (seed " + std::to_string(a.seed) + ")";
        gpt2_build_random(&model, preset, a.seed);
    } else {
        init_desc = a.init_from;
        gpt2_build_from_checkpoint(&model, a.init_from);
    }
    const GPT2Config& c = model.config;
    if (a.T > c.max_seq_len) {
        fail("flag -t: T = " + std::to_string(a.T) + " exceeds the model's max sequence length " + std::to_string(c.max_seq_len));
    }
    if (a.sample_every > 0 && a.gen_tokens >= a.T) {
        fail("flag -g: " + std::to_string(a.gen_tokens) + " tokens do not fit in T = " + std::to_string(a.T) + " (need -g < -t)");
    }
    std::string why;
    if (a.attention == "auto" && !attention_backend_supported(backend, c.channels, c.num_heads, &why)) {
        backend = AttentionBackend::Materialized;  // flash cannot run this build or shape: fall back, and say so
        printf("note: attention backend auto -> materialized (%s)\n", why.c_str());
    }
    if (!attention_backend_supported(backend, c.channels, c.num_heads, &why)) fail("flag -ab: " + why);

    const MathMode math = kFloatXIsBF16 ? MathMode::BF16 : (a.tf32 ? MathMode::TF32 : MathMode::FP32);
    matmul_set_tf32(a.tf32);
    model.use_master_weights = a.master_weights;
    gpt2_allocate(&model, a.B, a.T, a.recompute, backend);  // out of memory: exits naming the largest B that fits
    const MemoryPlan plan = model.plan;

    // ---- data
    DataLoader train_loader(a.train_pattern, a.B, a.T, mg.rank, mg.world, a.shuffle, a.seed, c.vocab_size);
    std::unique_ptr<DataLoader> val_loader;
    if (a.val_every > 0) {
        val_loader = std::make_unique<DataLoader>(a.val_pattern, a.B, a.T, mg.rank, mg.world, false, a.seed, c.vocab_size);
    }
    int total_steps = a.max_steps;
    if (total_steps == -1) {
        total_steps = (int)(train_loader.num_batches_per_epoch() / layout.grad_accum_steps);
        if (total_steps < 1) {
            fail(a.train_pattern + ": one epoch has " + std::to_string(train_loader.num_batches_per_epoch()) +
                 " micro-batches, fewer than one step's " + std::to_string(layout.grad_accum_steps) + " (lower -d or set -x)");
        }
    }
    LRScheduler sched;
    sched.type = a.lr_schedule;
    sched.max_lr = a.learning_rate;
    sched.warmup_steps = a.warmup_steps;
    sched.total_steps = total_steps;
    sched.final_lr_frac = a.final_lr_frac;
    if (!(err = sched.invalid_reason()).empty()) fail("learning-rate schedule: " + err);

    std::unique_ptr<TokenizerFile> tokenizer;
    if (a.sample_every > 0 && main_rank) {
        try {
            tokenizer = std::make_unique<TokenizerFile>(read_tokenizer_file(a.tokenizer_path));
        } catch (const FileError& e) {
            printf("note: samples are printed as token ids (%s)\n", e.what());
        }
    }
    const int eot = tokenizer ? tokenizer->eot_token : 50256;
    if (eot >= c.vocab_size) fail("end-of-text token " + std::to_string(eot) + " is outside the model's vocabulary");
    Rng sampler_rng(mix_seed(a.seed, 0x73616d706c65ull));  // "sample"

    // ---- restore the run state
    int start_step = 0;
    if (resume_step >= 0) {
        const std::string state_path = checkpoint_state_path(a.output_dir, resume_step);
        RunState s = read_run_state(state_path);
        if (s.B != a.B || s.T != a.T || s.num_processes != mg.world || s.grad_accum_steps != layout.grad_accum_steps) {
            file_error(state_path, "was written with B=%d T=%d processes=%d grad_accum=%d; this run has B=%d T=%d "
                       "processes=%d grad_accum=%d (resume with the same -b -t -d and process count)",
                       s.B, s.T, s.num_processes, s.grad_accum_steps, a.B, a.T, mg.world, layout.grad_accum_steps);
        }
        if (s.optimizer_state.size() != gpt2_optimizer_state_bytes(&model)) {
            file_error(state_path, "optimizer state is %zu bytes, this model needs %zu (different model or -w?)",
                       s.optimizer_state.size(), gpt2_optimizer_state_bytes(&model));
        }
        gpt2_write_optimizer_state(&model, s.optimizer_state.data());
        sampler_rng.set_state(s.sampler_rng);
        s.train_loader.process_rank = mg.rank;  // rank 0's position; every rank is at the same one
        train_loader.set_state(s.train_loader);
        start_step = s.step;
    }
    MainLog log;
    if (main_rank) log.open(a.output_dir, resume_step >= 0 ? start_step : -1);

    // ---- start-up table
    const DeviceSummary dev = query_device(mg.local_device, math);
    const double flops_per_token = gpt2_flops_per_token(c, a.T);
    auto row = [](const std::string& k, const std::string& v) { printf("%s\n", format_table_row(k, v).c_str()); };
    auto num = [](double x) { char b[64]; snprintf(b, sizeof(b), "%.6g", x); return std::string(b); };
    printf("%s\n", format_table_rule().c_str());
    row("model", init_desc);
    row("L / NH / C", std::to_string(c.num_layers) + " / " + std::to_string(c.num_heads) + " / " + std::to_string(c.channels));
    row("max T / V / Vp", std::to_string(c.max_seq_len) + " / " + std::to_string(c.vocab_size) + " / " + std::to_string(c.padded_vocab_size));
    row("parameters", std::to_string(gpt2_num_parameters(c)));
    row("precision", std::string(PRECISION_NAME) + (kFloatXIsBF16 ? (a.master_weights ? " + fp32 master weights" : ", no master weights")
                                                                 : (a.tf32 ? " (TF32 matmuls)" : " (no TF32)")));
    row("attention / recompute", std::string(attention_backend_name(backend)) + " / " + std::to_string(a.recompute));
    row("B / T / processes", std::to_string(a.B) + " / " + std::to_string(a.T) + " / " + std::to_string(mg.world));
    row("tokens per step", std::to_string(layout.tokens_per_step) + " (grad accum " + std::to_string(layout.grad_accum_steps) + ")");
    row("steps", std::to_string(start_step) + " -> " + std::to_string(total_steps) +
                     (a.max_steps == -1 ? " (one epoch)" : ""));
    row("lr schedule", std::string(lr_schedule_name(a.lr_schedule)) + " max " + num(a.learning_rate) + " warmup " +
                           std::to_string(a.warmup_steps) + " final x" + num(a.final_lr_frac));
    row("weight decay / clip", num(a.weight_decay) + " / " + num(a.grad_clip));
    row("train data", a.train_pattern + " (" + std::to_string(train_loader.num_shards()) + " shards, " +
                          std::to_string(train_loader.num_batches_per_epoch()) + " batches)");
    if (val_loader) row("val data", a.val_pattern + " (" + std::to_string(val_loader->num_batches_per_epoch()) + " batches)");
    row("output", a.output_dir.empty() ? "(none)" : a.output_dir);
    printf("%s\n", format_table_rule().c_str());
    char devdesc[256];
    snprintf(devdesc, sizeof(devdesc), "%s (sm_%d%d, %d SMs, %.0f MHz)", dev.name.c_str(), dev.cc_major, dev.cc_minor,
             dev.sm_count, dev.clock_khz / 1e3);
    row("device", devdesc);
    row("device memory", format_bytes((double)dev.total_memory));
    row("peak " + std::string(math == MathMode::BF16 ? "bf16" : math == MathMode::TF32 ? "tf32" : "fp32") + " FLOP/s",
        dev.peak_flops > 0 ? num(dev.peak_flops / 1e12) + " TFLOP/s" + (dev.peak_assumed ? " (assumed arch)" : "")
                           : "unknown (MFU not reported)");
    row("model FLOPs per token", num(flops_per_token));
    printf("%s\n", format_table_rule().c_str());
    row("memory: parameters", format_bytes((double)plan.parameters));
    row("memory: gradients", format_bytes((double)plan.gradients));
    row("memory: optimizer m, v", format_bytes((double)plan.optimizer));
    row("memory: master weights", format_bytes((double)plan.master_weights));
    row("memory: activations", format_bytes((double)plan.activations));
    row("memory: workspace", format_bytes((double)plan.workspace));
    row("memory: total (plan)", format_bytes((double)plan.total()));
    printf("%s\n", format_table_rule().c_str());
    fflush(stdout);

    // ---- training loop
    Checkpointer ckpt{a.output_dir, a.checkpoint_keep};
    double sum_ms = 0;
    int timed_steps = 0;
    for (int step = start_step;; step++) {
        const bool last = step == total_steps;
        if (a.checkpoint_every > 0 && step > start_step && (step % a.checkpoint_every == 0 || last)) {
            multi_gpu_barrier(mg);
            if (main_rank) ckpt.save(model, step, layout, a, mg.world, sampler_rng, train_loader, val_loader.get());
            multi_gpu_barrier(mg);
        }
        if (val_loader && (step % a.val_every == 0 || last)) {
            const float val_loss = evaluate(model, *val_loader, a.val_max_batches, a.B, a.T, mg);
            printf("val loss %.6f (after %d steps)\n", val_loss, step);
            log.log_val(step, val_loss);
        }
        if (a.sample_every > 0 && main_rank && ((step > 0 && step % a.sample_every == 0) || last)) {
            print_sample(model, a, sampler_rng, tokenizer.get(), eot);
        }
        if (last) break;

        cudaCheck(cudaDeviceSynchronize());
        const auto t0 = std::chrono::steady_clock::now();
        gpt2_zero_grad(&model);
        double loss_sum = 0;
        for (int micro = 0; micro < layout.grad_accum_steps; micro++) {
            train_loader.next_batch();
            loss_sum += gpt2_forward(&model, train_loader.inputs(), train_loader.targets(), a.B, a.T);
            gpt2_backward(&model, train_loader.inputs(), train_loader.targets(), 1.0f / layout.grad_accum_steps);
        }
        multi_gpu_average(mg, gpt2_grads(&model), gpt2_num_parameters(&model));
        const float loss = multi_gpu_mean(mg, (float)(loss_sum / layout.grad_accum_steps));
        const float norm = gpt2_grad_norm(&model);
        const float grad_scale = (a.grad_clip > 0 && norm > a.grad_clip) ? a.grad_clip / norm : 1.0f;
        const float lr = sched.lr_at(step);
        const AdamWParams opt{lr, kBeta1, kBeta2, kEps, a.weight_decay};
        gpt2_update(&model, opt, grad_scale, step + 1, mix_seed(a.seed, (uint64_t)step + 1));
        cudaCheck(cudaDeviceSynchronize());
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

        if (!std::isfinite(loss) || !std::isfinite(norm)) {
            fail("step " + std::to_string(step + 1) + ": loss " + std::to_string(loss) + ", grad norm " +
                 std::to_string(norm) + " (diverged: lower -l or raise -u)");
        }
        StepStats st;
        st.step = step + 1;
        st.total_steps = total_steps;
        st.loss = loss;
        st.grad_norm = norm;
        st.lr = lr;
        st.ms = ms;
        st.tokens_per_s = layout.tokens_per_step / (ms / 1e3);
        st.mfu = dev.peak_flops > 0
                     ? model_flops_utilization(flops_per_token, (double)layout.tokens_per_step / mg.world, ms / 1e3, dev.peak_flops)
                     : -1;
        printf("%s\n", format_step_line(st).c_str());
        fflush(stdout);
        log.log_train(step, loss);
        if (step > start_step) {  // the first step pays for cuBLAS plans and caches
            sum_ms += ms;
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
    gpt2_free(&model);
    multi_gpu_free(mg);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    TrainArgs args;
    std::string error;
    const ParseStatus st = parse_train_args(argc, argv, &args, &error);
    if (st == ParseStatus::Help) {
        printf("%s", train_usage(argv[0]).c_str());
        return 0;
    }
    if (st == ParseStatus::Error) {
        fprintf(stderr, "%s", train_usage(argv[0]).c_str());
        fprintf(stderr, "error: %s\n", error.c_str());
        return 1;
    }
    try {
        return train(args, &argc, &argv);
    } catch (const std::exception& e) {
        fflush(stdout);
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
