// Checkpoints of a training run: save and restore side by side.
//
// A checkpoint is a model file and a run-state file (llmc/training/checkpoint_files.h names them and tells which pairs
// belong together). save() writes the weights first and the run state last, each atomically; the state records
// the model file's fingerprint and the run's id. Restoring is two steps because the model must be built before
// it is allocated: gpt2_build_from_checkpoint(model_path(step)), gpt2_allocate, then restore(), which also takes
// the run's id over, so a resumed run keeps managing its own checkpoints (-nk).
//
// Optimizer state inside the run-state file, opaque to the file format, laid out here:
//   [fp32 master weights (BF16 builds that keep them)] [AdamW m (fp32)] [AdamW v (fp32)]
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/training/checkpoint_files.h"
#include "llmc/training/dataloader.h"
#include "llmc/model/gpt2.cuh"
#include "llmc/core/rand.h"
#include "llmc/formats/run_state.h"

// ---------------------------------------------------------------- optimizer state bytes
inline size_t gpt2_optimizer_state_bytes(const GPT2* m) {
    const size_t master = m->memory.size() && m->memory[mem::Master] ? m->num_parameters : 0;
    return (master + 2 * m->num_parameters) * sizeof(float);
}

// Copies the optimizer state off the device (gpt2_optimizer_state_bytes bytes), for saving. With ZeRO-1 each rank
// holds a shard only: the trainer gathers the ranks' shards into this same flat layout instead (so a state file
// does not depend on the number of GPUs that wrote it).
inline std::vector<uint8_t> gpt2_optimizer_state_to_host(GPT2* m) {
    if (m->zero.on) {
        fprintf(stderr, "error: gpt2_optimizer_state_to_host: with ZeRO-1 the state is gathered from every rank\n");
        exit(EXIT_FAILURE);
    }
    std::vector<uint8_t> out(gpt2_optimizer_state_bytes(m));
    uint8_t* dst = out.data();
    const size_t bytes = m->num_parameters * sizeof(float);
    for (mem::Id id : {mem::Master, mem::AdamM, mem::AdamV}) {
        if (!m->memory[id]) continue;  // no master weights
        cudaCheck(cudaMemcpy(dst, m->memory[id], bytes, cudaMemcpyDeviceToHost));
        dst += bytes;
    }
    return out;
}

// Puts a saved optimizer state back on the device, for resuming; the size must match this model.
inline void gpt2_optimizer_state_from_host(GPT2* m, const std::vector<uint8_t>& state, const std::string& path) {
    if (state.size() != gpt2_optimizer_state_bytes(m)) {
        file_error(path, "optimizer state is %zu bytes, this model needs %zu (different model or -w?)", state.size(),
                   gpt2_optimizer_state_bytes(m));
    }
    const uint8_t* src = state.data();
    const size_t bytes = m->num_parameters * sizeof(float);
    for (mem::Id id : {mem::Master, mem::AdamM, mem::AdamV}) {
        if (!m->memory[id]) continue;
        if (m->zero.on) {  // this rank's shard of the flat array (any number of ranks may have written it)
            const std::vector<float> shard = zero_shard_from_flat(m->zero.plan, m->zero.num_ranks, m->zero.rank,
                                                                  reinterpret_cast<const float*>(src), 0.0f);
            cudaCheck(cudaMemcpy(m->memory[id], shard.data(), shard.size() * sizeof(float), cudaMemcpyHostToDevice));
        } else {
            cudaCheck(cudaMemcpy(m->memory[id], src, bytes, cudaMemcpyHostToDevice));
        }
        src += bytes;
    }
}

// ---------------------------------------------------------------- save and restore
// The batch shape of a run. Its data order depends only on T and the tokens per step (llmc/training/dataloader.h), so a
// run resumes with another B, process count or accumulation as long as those two are the same; bit-exactly only
// with the same shape (the sums of the gradients are then added in another order).
struct RunShape {
    int B = 0, T = 0, num_processes = 0, grad_accum_steps = 0;
    long long tokens_per_step() const { return (long long)B * T * num_processes * grad_accum_steps; }
};

struct Checkpointer {
    std::string dir;       // the run's output directory (-o)
    int keep = 0;          // -nk: keep this run's newest `keep` checkpoints (0 = all)
    uint64_t run_id = 0;   // new_run_id() for a fresh run; restore() takes the resumed run's

    std::string model_path(int step) const { return checkpoint_model_path(dir, step); }
    std::string state_path(int step) const { return checkpoint_state_path(dir, step); }

    // The newest checkpoint whose files belong together, or -1 (notes say why newer ones were skipped).
    int latest(std::vector<std::string>* notes) const { return latest_checkpoint(dir, notes); }

    // Writes the checkpoint after `step` optimizer steps (rank 0 only: the state holds rank 0's positions).
    // optimizer_state: gpt2_optimizer_state_to_host's bytes, or with ZeRO-1 the ranks' shards gathered in that layout.
    void save(GPT2& model, int step, const RunShape& shape, const Rng& sampler_rng, const DataLoader& train,
              const DataLoader* val, std::vector<uint8_t> optimizer_state) const {
        gpt2_write_model(&model, model_path(step));
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
        if (optimizer_state.size() != gpt2_optimizer_state_bytes(&model)) {
            fprintf(stderr, "error: checkpoint save: optimizer state of %zu bytes, the model's is %zu\n",
                    optimizer_state.size(), gpt2_optimizer_state_bytes(&model));
            exit(EXIT_FAILURE);
        }
        s.optimizer_state = std::move(optimizer_state);
        write_run_state(state_path(step), s);
        remove_old_checkpoints(dir, keep, run_id);
        printf("saved checkpoint %s (+ state)\n", model_path(step).c_str());
    }

    // Restores everything but the weights (already loaded from model_path(step)) into an allocated model, the
    // sampler and this rank's train loader; returns the step to continue from. The shape must match the run's.
    int restore(GPT2* model, int step, const RunShape& shape, Rng* sampler_rng, DataLoader* train, int rank) {
        const std::string path = state_path(step);
        RunState s = read_run_state(path);
        const RunShape saved{s.B, s.T, s.num_processes, s.grad_accum_steps};
        if (saved.T != shape.T || saved.tokens_per_step() != shape.tokens_per_step()) {
            file_error(path, "was written with T=%d and %lld tokens per step (B=%d x processes=%d x grad_accum=%d); "
                       "this run has T=%d and %lld (B=%d x processes=%d x grad_accum=%d): resume with the same -t and "
                       "-d", s.T, saved.tokens_per_step(), s.B, s.num_processes, s.grad_accum_steps, shape.T,
                       shape.tokens_per_step(), shape.B, shape.num_processes, shape.grad_accum_steps);
        }
        const bool reshaped = saved.B != shape.B || saved.num_processes != shape.num_processes ||
                              saved.grad_accum_steps != shape.grad_accum_steps;
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
        gpt2_optimizer_state_from_host(model, s.optimizer_state, path);
        run_id = s.run_id ? s.run_id : new_run_id();  // a version 1 state has none: this run's checkpoints get one
        sampler_rng->set_state(s.sampler_rng);
        s.train_loader.process_rank = rank;  // rank 0's position; every rank is at the same one
        train->set_state(s.train_loader);
        return s.step;
    }
};
