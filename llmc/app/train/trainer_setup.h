// The trainer's set-up phases and loop decisions that touch no device, shared by the GPU trainer (train_gpt2.cu) and
// the CPU trainer (train_gpt2.cpp) so both start, resume, schedule, validate, sample and checkpoint alike:
// the output directory and the step to resume from, where the weights come from, the flags checked against the
// model, the number of steps, the learning-rate schedule, the samples' tokenizer and start token, the sampler's
// random stream, and which of checkpoint / validation / sample happen at a step boundary.
// Problems are thrown as std::runtime_error with one line naming the flag or file (the trainers print it).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "llmc/app/train/train_args.h"
#include "llmc/checkpoint/checkpoint.h"
#include "llmc/core/rand.h"
#include "llmc/core/startup_table.h"
#include "llmc/core/utils.h"
#include "llmc/data/dataloader.h"
#include "llmc/evaluation/hellaswag_eval.h"
#include "llmc/formats/tokenizer_file.h"
#include "llmc/gpt2/gpt2_config.h"
#include "llmc/optimizer/schedulers.h"

[[noreturn]] inline void trainer_fail(const std::string& msg) { throw std::runtime_error(msg); }

// Where a run in -o starts, read only (the preflight's plan): the newest checkpoint that belongs together (-y 1), else
// -1, a new run, which may not share -o with another run's checkpoints unless -ow 1.
inline int resume_point(const TrainArgs& a, std::vector<std::string>* notes) {
    const int resume_step = a.resume ? latest_checkpoint(a.output_dir, notes) : -1;
    if (a.resume && resume_step < 0) {
        notes->push_back("-y 1 but no complete checkpoint in " + a.output_dir + ": starting from scratch");
    }
    if (resume_step < 0 && !a.output_dir.empty() && !a.overwrite_output) {
        const std::string conflict = fresh_run_conflict(a.output_dir);
        if (!conflict.empty()) trainer_fail(conflict);
    }
    return resume_step;
}

// The output directory (-o) made ready for the run that starts at resume_step (the plan's: resume_point): created,
// crashed writers' temporary files cleaned up, a new run's id, and with -ow 1 another run's checkpoints deleted. Prints
// the notes: the cleaning's, then resume_notes (the plan's), then -ow's. barrier: every process waits for the others
// (several GPUs).
inline void prepare_output_dir(const TrainArgs& a, int resume_step, const std::vector<std::string>& resume_notes,
                               Checkpointer* ckpt, bool main_rank, const std::function<void()>& barrier) {
    std::vector<std::string> notes;
    if (!a.output_dir.empty() && main_rank) {
        ensure_directory(a.output_dir);
        notes = clean_stale_temporaries(a.output_dir);
    }
    notes.insert(notes.end(), resume_notes.begin(), resume_notes.end());
    if (resume_step < 0) {
        ckpt->run_id = new_run_id();
        if (a.overwrite_output) {  // the barriers on every rank alike, whatever each one's view of -o
            barrier();  // every rank has looked at the directory before rank 0 changes it
            const std::string conflict = a.output_dir.empty() ? "" : fresh_run_conflict(a.output_dir);
            if (main_rank && !conflict.empty()) {
                const int removed = remove_all_checkpoints(a.output_dir);
                notes.push_back("-ow 1: deleted " + std::to_string(removed) + " checkpoint files of an earlier run in " +
                                a.output_dir);
            }
            barrier();
        }
    }
    for (const std::string& n : notes) printf("note: %s\n", n.c_str());
}

// Where the weights come from: the checkpoint to resume (resume_step >= 0), a random-init preset (-e d12, with
// positions for max(1024, -t)), or a model file (-e path: ours, llm.c's or Hugging Face's, read_model_any).
struct ModelSource {
    enum Kind { Checkpoint, Preset, File } kind = File;
    std::string path;     // Checkpoint, File
    GPT2Config preset;    // Preset
    std::string description;
};

inline ModelSource model_source(const TrainArgs& a, const Checkpointer& ckpt, int resume_step) {
    ModelSource s;
    if (resume_step >= 0) {
        s.kind = ModelSource::Checkpoint;
        s.path = s.description = ckpt.model_path(resume_step);
    } else if (gpt2_preset(a.init_from, &s.preset, std::max(1024, a.T))) {
        s.kind = ModelSource::Preset;
        s.description = a.init_from + " random init (seed " + std::to_string(a.seed) + ")";
    } else {
        s.kind = ModelSource::File;
        s.path = s.description = a.init_from;
    }
    return s;
}

// Flags that can only be checked against the model's shape.
inline void check_flags_against_model(const TrainArgs& a, const GPT2Config& c) {
    if (a.T > c.max_seq_len) {
        trainer_fail("flag -t: T = " + std::to_string(a.T) + " exceeds the model's max sequence length " +
                     std::to_string(c.max_seq_len));
    }
    if (a.sample_every > 0 && a.gen_tokens >= a.T) {
        trainer_fail("flag -g: " + std::to_string(a.gen_tokens) + " tokens do not fit in T = " + std::to_string(a.T) +
                     " (need -g < -t)");
    }
}

// Optimizer steps of the run: -x, or one epoch of the training data.
// -x N, else one epoch of the training data; -x 0 (evaluate only) reads no training data (train is null).
inline int count_steps(const TrainArgs& a, const DataLoader* train, const BatchLayout& layout) {
    if (a.max_steps != -1) return a.max_steps;
    const int steps = (int)(train->num_batches_per_epoch() / layout.grad_accum_steps);
    if (steps < 1) {
        trainer_fail(a.train_pattern + ": one epoch has " + std::to_string(train->num_batches_per_epoch()) +
                     " micro-batches, fewer than one step's " + std::to_string(layout.grad_accum_steps) +
                     " (lower -d or set -x)");
    }
    return steps;
}

// The training data (-i), unless -x 0 only evaluates the model.
inline std::unique_ptr<DataLoader> open_train_data(const TrainArgs& a, int rank, int world, int vocab_size,
                                                   const BatchLayout& layout) {
    if (a.max_steps == 0) return nullptr;
    return std::make_unique<DataLoader>(a.train_pattern, a.B, a.T, rank, world, a.shuffle, a.seed, vocab_size,
                                        layout.grad_accum_steps);
}

// The validation data (-j), unless -v 0 never validates; never shuffled.
inline std::unique_ptr<DataLoader> open_val_data(const TrainArgs& a, int rank, int world, int vocab_size) {
    if (a.val_every <= 0) return nullptr;
    return std::make_unique<DataLoader>(a.val_pattern, a.B, a.T, rank, world, false, a.seed, vocab_size);
}

using TableRows = std::vector<std::pair<std::string, std::string>>;

// The start-up tables' rows on the model: where it comes from and its shape.
inline TableRows model_table_rows(const std::string& description, const GPT2Config& c) {
    auto str = [](long long x) { return std::to_string(x); };
    return {{"model", description},
            {"L / NH / C", str(c.num_layers) + " / " + str(c.num_heads) + " / " + str(c.channels)},
            {"max T / V / Vp", str(c.max_seq_len) + " / " + str(c.vocab_size) + " / " + str(c.padded_vocab_size)},
            {"parameters", str((long long)gpt2_num_parameters(c))}};
}

// The start-up tables' rows on the optimization: tokens per step, steps, the schedule, decay and clipping.
inline TableRows schedule_table_rows(const TrainArgs& a, const BatchLayout& layout, int start_step, int total_steps) {
    auto num = [](double x) { char b[64]; snprintf(b, sizeof(b), "%.6g", x); return std::string(b); };
    auto str = [](long long x) { return std::to_string(x); };
    return {{"tokens per step", str(layout.tokens_per_step) + " (grad accum " + str(layout.grad_accum_steps) + ")"},
            {"steps", str(start_step) + " -> " + str(total_steps) + (a.max_steps == -1 ? " (one epoch)" : "")},
            {"lr schedule", std::string(lr_schedule_name(a.lr_schedule)) + " max " + num(a.learning_rate) +
                                " warmup " + str(a.warmup_steps) + " final x" + num(a.final_lr_frac)},
            {"weight decay / clip", num(a.weight_decay) + " / " + num(a.grad_clip)}};
}

inline void print_table_rows(const TableRows& rows) {
    for (const auto& [k, v] : rows) printf("%s\n", format_table_row(k, v).c_str());
}

// The start-up table's data rows: training data (or none, -x 0), validation data, the HellaSwag file.
inline TableRows data_table_rows(const TrainArgs& a, const DataLoader* train, const DataLoader* val,
                                 const HellaSwagEval* hs) {
    auto str = [](long long x) { return std::to_string(x); };
    TableRows rows;
    rows.emplace_back("train data", train ? a.train_pattern + " (" + str(train->num_shards()) + " shards, " +
                                                str((long long)train->num_batches_per_epoch()) + " batches)"
                                          : std::string("(not read: -x 0 evaluates only)"));
    if (val) rows.emplace_back("val data", a.val_pattern + " (" + str((long long)val->num_batches_per_epoch()) + " batches)");
    if (hs) {
        rows.emplace_back("HellaSwag", a.hellaswag_path + " (" + str(hs->examples()) + " examples, " +
                                           str(hs->batches()) + " batches per process)");
    }
    return rows;
}

// -h 1: the eval file read and checked against the model's vocabulary and -b/-t, before the run starts.
inline std::unique_ptr<HellaSwagEval> open_hellaswag(const TrainArgs& a, int vocab_size, int rank, int world) {
    if (!a.hellaswag) return nullptr;
    if (access(a.hellaswag_path.c_str(), F_OK) != 0) {
        trainer_fail("flag -h 1: no HellaSwag eval file at " + a.hellaswag_path +
                     " (name one with -hf; data/hellaswag makes it from HellaSwag's JSONL: docs/EVALUATION.md)");
    }
    return std::make_unique<HellaSwagEval>(a.hellaswag_path, a.hellaswag_picks, vocab_size, a.B, a.T, rank, world);
}

inline LRScheduler make_schedule(const TrainArgs& a, int total_steps) {
    LRScheduler sched;
    sched.type = a.lr_schedule;
    sched.max_lr = a.learning_rate;
    sched.warmup_steps = a.warmup_steps;
    sched.total_steps = std::max(total_steps, 1);  // -x 0 (evaluate only) never asks for a rate
    sched.final_lr_frac = a.final_lr_frac;
    const std::string err = sched.invalid_reason();
    if (!err.empty()) trainer_fail("learning-rate schedule: " + err);
    return sched;
}

inline bool flag_given(const TrainArgs& a, const char* flag) {
    return std::find(a.flags_given.begin(), a.flags_given.end(), flag) != a.flags_given.end();
}

// The tokenizer for printing samples (when sampling). The default file missing means samples print token ids, as in
// llm.c (sample_tokenizer_note says so); a -tok file missing, or any tokenizer file that does not read, is an error.
inline std::unique_ptr<TokenizerFile> load_sample_tokenizer(const TrainArgs& a) {
    if (a.sample_every <= 0) return nullptr;
    if (!path_exists(a.tokenizer_path)) {
        if (flag_given(a, "-tok")) {
            trainer_fail("flag -tok: no tokenizer file at " + a.tokenizer_path +
                         " (./tokenizer export -o FILE writes one; without -tok samples print token ids)");
        }
        return nullptr;
    }
    return std::make_unique<TokenizerFile>(read_tokenizer_file(a.tokenizer_path));
}
// The run's note when it samples without a tokenizer (the main process prints it as the run starts).
inline void print_sample_tokenizer_note(const TrainArgs& a, const TokenizerFile* tok) {
    if (a.sample_every > 0 && !tok) {
        printf("note: samples are printed as token ids (no %s: make data writes it, or name one with -tok)\n",
               a.tokenizer_path.c_str());
    }
}

// The token samples start from: <|endoftext|> (the tokenizer's, else GPT-2's 50256), which must be in the model's
// vocabulary when the run samples.
inline int sample_start_token(const TrainArgs& a, const TokenizerFile* tok, const GPT2Config& c) {
    const int eot = tok ? tok->eot_token : 50256;
    if (a.sample_every > 0 && eot >= c.vocab_size) {
        trainer_fail("flag -s: samples start from the end-of-text token " + std::to_string(eot) +
                     ", which is outside the model's vocabulary (V = " + std::to_string(c.vocab_size) + "); use -s 0");
    }
    return eot;
}

// The samples' random stream (one coin per generated token; saved in checkpoints).
inline Rng make_sampler_rng(const TrainArgs& a) { return Rng(mix_seed(a.seed, 0x73616d706c65ull)); }  // "sample"

// What happens at the boundary before step `step` (after `step` updates): the run ends at total_steps; checkpoints
// every -n steps and at the end (not at the step a run starts or resumes from); validation every -v steps and at
// the end; samples every -s steps (not before the first update) and at the end, on the main process.
struct StepEvents {
    bool last = false, checkpoint = false, validate = false, sample = false, hellaswag = false;
};

inline StepEvents step_events(const TrainArgs& a, int step, int start_step, int total_steps, bool have_val,
                              bool main_rank) {
    StepEvents e;
    e.last = step == total_steps;
    e.checkpoint = a.checkpoint_every > 0 && step > start_step && (step % a.checkpoint_every == 0 || e.last);
    e.validate = have_val && (step % a.val_every == 0 || e.last);
    // llm.c: with every validation after the first step, and at the end
    e.hellaswag = a.hellaswag && ((a.val_every > 0 && step > 0 && step % a.val_every == 0) || e.last);
    e.sample = a.sample_every > 0 && main_rank && ((step > 0 && step % a.sample_every == 0) || e.last);
    return e;
}

// A step whose loss or gradient norm is not finite ends the run (one line saying what to change).
inline void check_step_finite(int step, float loss, float grad_norm) {
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
        trainer_fail("step " + std::to_string(step) + ": loss " + std::to_string(loss) + ", grad norm " +
                     std::to_string(grad_norm) + " (diverged: lower -l or raise -u)");
    }
}
