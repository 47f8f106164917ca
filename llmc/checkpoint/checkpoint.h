// Checkpoints of a training run: save and restore side by side, for either trainer (train_gpt2.cu on GPUs,
// train_gpt2.cpp on the CPU: llmc/checkpoint/checkpoint.cuh adapts this to the GPU's model and optimizer).
//
// A checkpoint is a model file and a run-state file (llmc/checkpoint/checkpoint_files.h names them and tells which pairs
// belong together). save() writes the weights first and the run state last, each atomically; the state records
// the model file's fingerprint and the run's id. Restoring is two steps because the model must be built before
// its optimizer: build the model from model_path(step), make the optimizer, then restore(), which also takes the
// run's id over, so a resumed run keeps managing its own checkpoints (-nk).
// The optimizer state inside the run-state file is opaque to the file format: the optimizer writes and reads it,
// in one layout for every trainer: [fp32 master weights (a BF16 GPU run with -w 1)] [AdamW m] [AdamW v], each fp32
// in the parameter table's order. A run without master weights (FP32 builds, the CPU) writes [m][v]. The CPU trainer
// reads both (a file's master weights replace the bf16 model file's weights); a GPU run with master weights reads
// [m][v] too (its master copy then starts from the model file, fp32 when the CPU or an FP32 build wrote it).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "llmc/checkpoint/checkpoint_files.h"
#include "llmc/core/rand.h"
#include "llmc/data/dataloader.h"
#include "llmc/formats/run_state.h"

// The batch shape of a run. Its data order depends only on T and the tokens per step (llmc/data/dataloader.h), so a
// run resumes with another B, process count or accumulation as long as those two are the same; bit-exactly only
// with the same shape (the sums of the gradients are then added in another order).
struct RunShape {
    int B = 0, T = 0, num_processes = 0, grad_accum_steps = 0;
    long long tokens_per_step() const { return (long long)B * T * num_processes * grad_accum_steps; }
};

// The shape a run state was written with, which must have this run's T and tokens per step (the data windows).
inline RunShape check_resume_shape(const std::string& path, const RunState& s, const RunShape& shape) {
    const RunShape saved{s.B, s.T, s.num_processes, s.grad_accum_steps};
    if (saved.T != shape.T || saved.tokens_per_step() != shape.tokens_per_step()) {
        file_error(path, "was written with T=%d and %lld tokens per step (B=%d x processes=%d x grad_accum=%d); "
                   "this run has T=%d and %lld (B=%d x processes=%d x grad_accum=%d): resume with the same -t and "
                   "-d", s.T, saved.tokens_per_step(), s.B, s.num_processes, s.grad_accum_steps, shape.T,
                   shape.tokens_per_step(), shape.B, shape.num_processes, shape.grad_accum_steps);
    }
    return saved;
}

struct Checkpointer {
    std::string dir;       // the run's output directory (-o)
    int keep = 0;          // -nk: keep this run's newest `keep` checkpoints (0 = all)
    uint64_t run_id = 0;   // new_run_id() for a fresh run; restore() takes the resumed run's

    std::string model_path(int step) const { return checkpoint_model_path(dir, step); }
    std::string state_path(int step) const { return checkpoint_state_path(dir, step); }

    // The newest checkpoint whose files belong together, or -1 (notes say why newer ones were skipped).
    int latest(std::vector<std::string>* notes) const { return latest_checkpoint(dir, notes); }

    // Writes the checkpoint after `step` optimizer steps: write_model(path) writes the weights, optimizer_state is
    // the optimizer's state in the layout above. Every rank calls it, between steps, after making its
    // optimizer_state (with ZeRO-1 a collective); rank 0 writes (the state holds rank 0's positions).
    template <typename WriteModel>
    void save(WriteModel&& write_model, std::vector<uint8_t> optimizer_state, int step, const RunShape& shape,
              const Rng& sampler_rng, const DataLoader& train, const DataLoader* val, int rank,
              std::vector<uint8_t> fp8_state = {}) const {
        if (rank != 0) return;
        write_model(model_path(step));
        RunState s;
        s.step = step;
        s.run_id = run_id;
        s.model_hash = file_hash64(model_path(step));  // from the page cache: the bytes just written
        s.B = shape.B;
        s.T = shape.T;
        s.num_processes = shape.num_processes;
        s.grad_accum_steps = shape.grad_accum_steps;
        s.sampler_rng = sampler_rng.get_state();
        s.train_loader = train.get_state();
        if (val) s.val_loader = val->get_state();
        s.optimizer_state = std::move(optimizer_state);
        s.fp8_state = std::move(fp8_state);
        write_run_state(state_path(step), s);
        remove_old_checkpoints(dir, keep, run_id);
        printf("saved checkpoint %s (+ state)\n", model_path(step).c_str());
    }

    // Restores everything but the weights (already loaded from model_path(step)): load_optimizer(bytes, path) puts
    // the optimizer's state back; then the sampler and this rank's train loader. Returns the step to continue
    // from. The shape must match the run's (T and the tokens per step). fp8_state: the FP8 section (a trainer
    // without FP8 passes none, and a file with one is refused in one line); reshaped: whether the run lays the batch
    // out otherwise than the checkpoint's (B, processes, accumulation).
    template <typename LoadOptimizer>
    int restore(LoadOptimizer&& load_optimizer, int step, const RunShape& shape, Rng* sampler_rng, DataLoader* train,
                int rank, std::vector<uint8_t>* fp8_state = nullptr, bool* reshaped_out = nullptr) {
        const std::string path = state_path(step);
        RunState s = read_run_state(path);
        if (!fp8_state && !s.fp8_state.empty())
            file_error(path, "holds FP8 amax histories (a train_gpt2cu run with -fp8h), which this trainer cannot use");
        if (fp8_state) *fp8_state = s.fp8_state;
        const RunShape saved = check_resume_shape(path, s, shape);
        const bool reshaped = saved.B != shape.B || saved.num_processes != shape.num_processes ||
                              saved.grad_accum_steps != shape.grad_accum_steps;
        if (reshaped_out) *reshaped_out = reshaped;
        if (s.version < 3 && s.grad_accum_steps > 1) {
            file_error(path, "run-state version %d with gradient accumulation (%d) counts its data windows per "
                       "micro-step, this build per step: resume it with the build that wrote it, or start a new run "
                       "from its model file (-e)", s.version, s.grad_accum_steps);
        }
        if (reshaped && rank == 0) {
            printf("note: resuming a run of B=%d x %d processes x grad_accum %d as B=%d x %d x %d: the same data "
                   "windows in the same order; the gradients' sums are added in another order, so the losses "
                   "continue within rounding, not bit for bit\n", s.B, s.num_processes, s.grad_accum_steps, shape.B,
                   shape.num_processes, shape.grad_accum_steps);
        }
        load_optimizer(s.optimizer_state, path);
        run_id = s.run_id ? s.run_id : new_run_id();  // a version 1 state has none: this run's checkpoints get one
        sampler_rng->set_state(s.sampler_rng);
        s.train_loader.process_rank = rank;  // rank 0's position; every rank is at the same one
        train->set_state(s.train_loader);
        return s.step;
    }
};
