// Everything a training run reads and writes, opened and checked before any heavy work, for both trainers: in
// train_gpt2cu before any CUDA call, so a bad configuration fails in one line, on any machine, GPU or not, instead
// of hours in (`--check` stops here and prints what it found). In order: the batch layout for the processes, the
// output directory (writable, the checkpoint -y 1 resumes and its shape, no other run's checkpoints), the model's
// shape (a preset, or the file's header and length: no parameter is read), the flags against it, every train and
// validation shard (header, length, windows, and every token below the model's vocabulary: read once, the shards
// in parallel), the HellaSwag file (-h 1) and where -hp writes, the samples' tokenizer.
// Read only: nothing is created, cleaned or deleted here (prepare_output_dir does that when the run starts).
// What the checks find is the run's plan: the trainer builds from it and computes none of it again; only what belongs
// to a rank is opened again once the processes have started (rank_data).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "llmc/app/train/trainer_setup.h"
#include "llmc/formats/data_shard.h"
#include "llmc/formats/hf_gpt2.h"
#include "llmc/formats/run_state.h"

// What the checks found: the run as it starts.
struct RunPlan {
    int processes = 1;
    BatchLayout layout;             // for `processes`
    int resume_step = -1;           // the checkpoint -y 1 resumes, or -1
    std::vector<std::string> notes;  // on the resume point (--check prints them; so does the run as it starts)
    ModelSource source;
    GPT2Config config;
    std::unique_ptr<DataLoader> train, val;    // rank 0's; null for -x 0, -v 0
    std::unique_ptr<HellaSwagEval> hellaswag;  // rank 0's; null without -h 1
    int total_steps = 0;
    LRScheduler schedule;
    std::unique_ptr<TokenizerFile> tokenizer;  // the samples' (null: they print token ids)
    int eot = 50256;                           // the token samples start from
    int64_t train_tokens = 0, val_tokens = 0;
    int max_token = -1;  // the largest id in the data read
};

namespace preflight_detail {

// Every token of every shard below vocab_size, the shards read in parallel; the first bad shard in name order is
// the error. Returns the tokens and raises *max_token to the largest id.
inline int64_t scan_shards(const std::vector<std::string>& paths, int vocab_size, int* max_token) {
    std::vector<ShardTokenScan> scans(paths.size());
    std::vector<std::exception_ptr> errors(paths.size());
    std::atomic<size_t> next{0};
    auto worker = [&] {
        for (size_t i; (i = next++) < paths.size();) {
            try {
                scans[i] = scan_shard_tokens(paths[i], vocab_size);
            } catch (...) {
                errors[i] = std::current_exception();
            }
        }
    };
    const size_t threads = std::min<size_t>({paths.size(), std::max(1u, std::thread::hardware_concurrency()), 8});
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; t++) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
    int64_t tokens = 0;
    for (size_t i = 0; i < paths.size(); i++) {
        if (errors[i]) std::rethrow_exception(errors[i]);
        const ShardTokenScan& s = scans[i];
        if (s.first_over >= 0) {
            file_error(paths[i], "token %d at token offset %lld is >= vocab_size %d (the model's vocabulary)",
                       s.first_over_id, (long long)s.first_over, vocab_size);
        }
        tokens += s.num_tokens;
        *max_token = std::max(*max_token, s.max_token);
    }
    return tokens;
}

// A problem with the file a flag names, said with the flag: a default path the user never typed still tells which
// flag changes it.
template <class Check>
inline auto naming_flag(const char* flag, Check&& check) -> decltype(check()) {
    try {
        return check();
    } catch (const FileError& e) {
        throw FileError(std::string(e.what()) + " (flag " + flag + ")");
    }
}

inline void require_writable(const std::string& flag, const std::string& path, const std::string& why) {
    if (!why.empty()) trainer_fail("flag " + flag + " " + path + ": " + why);
}

}  // namespace preflight_detail

// The processes a GPU run will have, known before MPI starts: mpirun's count (its launchers export it), else -pn.
inline int expected_processes(const TrainArgs& a) {
    if (a.init_method == "mpi") {
        for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
            const char* v = getenv(var);
            int64_t n = 0;
            if (v && flag_parse::parse_int64(v, 1, 65536, &n)) return (int)n;
        }
    }
    return a.num_processes;
}

// What an engine cannot run, for a model's shape ("" when it can): the GPU engine's limits (gpt2_shape_problem), none
// for the CPU trainer.
using ShapeLimits = std::function<std::string(const GPT2Config&)>;

// Every check, for a run of `processes` processes (1 on the CPU; expected_processes on GPUs): the run's plan.
inline RunPlan preflight(const TrainArgs& a, int processes, const ShapeLimits& limits = nullptr) {
    using namespace preflight_detail;
    RunPlan p;
    p.processes = processes;
    const std::string layout_error = resolve_batch_layout(a, processes, &p.layout);
    if (!layout_error.empty()) trainer_fail(layout_error);

    // ---- where it writes, and where it starts
    if (!a.output_dir.empty()) require_writable("-o", a.output_dir, directory_unwritable_reason(a.output_dir));
    if (!a.hellaswag_picks.empty()) require_writable("-hp", a.hellaswag_picks, file_unwritable_reason(a.hellaswag_picks));
    if (processes > 1 && a.init_method == "fs") {
        const std::string why = path_exists(a.rendezvous_dir) ? directory_unwritable_reason(a.rendezvous_dir)
                                                               : "does not exist (every process must see it)";
        require_writable("-pf", a.rendezvous_dir, why);
    }
    p.resume_step = resume_point(a, &p.notes);
    const Checkpointer ckpt{a.output_dir, a.checkpoint_keep};
    if (p.resume_step >= 0) {
        const std::string state = ckpt.state_path(p.resume_step);
        check_resume_shape(state, read_run_state_header(state),
                           RunShape{a.B, a.T, processes, p.layout.grad_accum_steps});
    }

    // ---- the model's shape, and the flags that depend on it
    p.source = model_source(a, ckpt, p.resume_step);
    const char* model_flag = p.source.kind == ModelSource::Checkpoint ? "-y 1" : "-e";
    p.config = p.source.kind == ModelSource::Preset
                   ? p.source.preset
                   : naming_flag(model_flag, [&] { return read_model_config_any(p.source.path); });
    const int V = p.config.vocab_size;
    check_flags_against_model(a, p.config);
    const std::string shape_problem = limits ? limits(p.config) : "";
    if (!shape_problem.empty()) {
        trainer_fail(std::string("flag ") + model_flag + " " + p.source.description + ": " + shape_problem);
    }

    // ---- the data, every token of it
    naming_flag("-i", [&] {
        p.train = open_train_data(a, 0, processes, V, p.layout);
        if (p.train) p.train_tokens = scan_shards(p.train->shard_paths(), V, &p.max_token);
    });
    naming_flag("-j", [&] {
        p.val = open_val_data(a, 0, processes, V);
        if (p.val) p.val_tokens = scan_shards(p.val->shard_paths(), V, &p.max_token);
    });
    p.total_steps = count_steps(a, p.train.get(), p.layout);
    p.schedule = make_schedule(a, p.total_steps);
    p.hellaswag = open_hellaswag(a, V, 0, processes);

    // ---- the samples
    p.tokenizer = naming_flag("-tok", [&] { return load_sample_tokenizer(a); });
    p.eot = sample_start_token(a, p.tokenizer.get(), p.config);
    return p;
}

// A rank's data once the processes have started: rank 0 takes the plan's loaders, any other rank opens its own share
// (the one part of the set-up that runs again, since the plan was made before the ranks existed).
struct RankData {
    std::unique_ptr<DataLoader> train, val;
    std::unique_ptr<HellaSwagEval> hellaswag;
};
inline RankData rank_data(const TrainArgs& a, RunPlan* plan, int rank, int world) {
    if (world != plan->processes) {
        trainer_fail(std::to_string(world) + " processes started, but the checks before they started expected " +
                     std::to_string(plan->processes) + " (-pn, or mpirun's OMPI_COMM_WORLD_SIZE / PMI_SIZE)");
    }
    RankData d;
    if (rank == 0) {
        d.train = std::move(plan->train), d.val = std::move(plan->val), d.hellaswag = std::move(plan->hellaswag);
        return d;
    }
    const int V = plan->config.vocab_size;
    d.train = open_train_data(a, rank, world, V, plan->layout);
    d.val = open_val_data(a, rank, world, V);
    d.hellaswag = open_hellaswag(a, V, rank, world);
    return d;
}

// What --check prints: the start-up table's rows that need no device, and what the checks read.
inline TableRows preflight_table_rows(const TrainArgs& a, const RunPlan& p) {
    auto str = [](long long x) { return std::to_string(x); };
    TableRows rows = model_table_rows(p.source.description, p.config);
    rows.emplace_back("B / T / processes", str(a.B) + " / " + str(a.T) + " / " + str(p.processes));
    for (const auto& r : schedule_table_rows(a, p.layout, std::max(p.resume_step, 0), p.total_steps)) rows.push_back(r);
    for (const auto& r : data_table_rows(a, p.train.get(), p.val.get(), p.hellaswag.get())) rows.push_back(r);
    if (p.train || p.val) {
        rows.emplace_back("tokens train / val", str(p.train_tokens) + " / " + str(p.val_tokens) + ", largest id " +
                                                    str(p.max_token));
    }
    if (a.sample_every > 0) rows.emplace_back("samples", p.tokenizer ? "decoded by " + a.tokenizer_path : "token ids");
    rows.emplace_back("output", a.output_dir.empty() ? "(none)"
                                : a.output_dir + (path_exists(a.output_dir) ? " (writable)" : " (to be made)") +
                                      (p.resume_step >= 0 ? ", resumes step " + str(p.resume_step) : ""));
    return rows;
}

// --check: the notes, the table, and one closing line (stdout); nothing is written.
inline void print_preflight(const TrainArgs& a, const RunPlan& p, const TableRows& extra_rows) {
    for (const std::string& n : p.notes) printf("note: %s\n", n.c_str());
    const std::string rule = format_table_rule();
    printf("%s\n", rule.c_str());
    print_table_rows(preflight_table_rows(a, p));
    print_table_rows(extra_rows);
    printf("%s\n", rule.c_str());
    printf("check: every input reads and fits; nothing was written (drop --check to train)\n");
    fflush(stdout);
}
