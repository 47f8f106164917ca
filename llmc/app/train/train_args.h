// Command-line flags of train_gpt2cu, named and defaulted like llm.c's train_gpt2.cu so its users
// feel at home. Every flag takes one value ("-b 16"); "-h" or "--help" alone prints the usage, "-h 1" turns on
// the HellaSwag eval as in llm.c.
// Parsing is strict: an unknown flag, a missing value, text where a number belongs, or a value out of
// range is an error whose message names the flag, the value and what was expected.
// Checks that need the model or the process count (T <= maxT, -d a multiple of B*T*processes) are in
// resolve_batch_layout() and in the trainer.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llmc/core/flag_parse.h"
#include "llmc/optimizer/schedulers.h"

struct TrainArgs {
    // data and model
    std::string train_pattern = "data/tinyshakespeare/tiny_shakespeare_train.bin";  // -i
    std::string val_pattern = "data/tinyshakespeare/tiny_shakespeare_val.bin";      // -j
    std::string init_from = "d12";       // -e: model file, HF GPT-2 directory / .safetensors, or d6|d12|d24|d36|d48
    std::string output_dir;              // -o: checkpoints and main.log; empty = write nothing
    std::string tokenizer_path = "gpt2_tokenizer.bin";  // -tok: for decoding samples (missing = print ids)
    // batch
    int B = 4;                           // -b micro-batch size per process
    int T = 1024;                        // -t sequence length
    int64_t total_batch_size = -1;       // -d tokens per optimizer step over all processes; -1 = B*T*processes
    int max_steps = -1;                  // -x optimizer steps; -1 = one epoch of the training data; 0 = evaluate only
    bool shuffle = true;                 // -sh shuffle the training windows each epoch (val never is)
    // optimizer
    LRSchedule lr_schedule = LRSchedule::Cosine;  // -k
    float learning_rate = 3e-4f;         // -l
    int warmup_steps = 0;                // -u
    float final_lr_frac = 1.0f;          // -q final lr = learning_rate * final_lr_frac
    float weight_decay = 0.0f;           // -c applied to the matrices only (gpt2_parameter_table)
    float grad_clip = 1.0f;              // -gc clip the global gradient norm to this (0 = off)
    // evaluation and sampling
    int val_every = 20;                  // -v (0 = never)
    int val_max_batches = 20;            // -m (-1 = the whole validation set)
    int sample_every = 20;               // -s (0 = never)
    int gen_tokens = 64;                 // -g
    float temperature = 1.0f;            // -st (0 = greedy)
    int top_k = 0;                       // -sk (0 = whole vocabulary)
    bool hellaswag = false;              // -h 1: HellaSwag accuracy with every validation (llm.c's flag)
    std::string hellaswag_path = "dev/data/hellaswag/hellaswag_val.bin";  // -hf: llm.c's default path
    std::string hellaswag_picks;         // -hp: each example's scores and pick to this file (TSV); empty = none
    // checkpoints
    int checkpoint_every = 0;            // -n (0 = never; with N > 0 the last step is saved too)
    int checkpoint_keep = 0;             // -nk keep this run's newest K checkpoints (0 = keep all)
    bool resume = false;                 // -y 1: continue from the newest complete checkpoint in -o
    bool overwrite_output = false;       // -ow 1: a fresh run may delete another run's checkpoints in -o
    // memory and numerics
    int recompute = 1;                   // -r 0 none, 1 recompute GELU in backward, 2 also LayerNorm
    bool tf32 = true;                    // -f TF32 tensor cores for fp32 matmuls (FP32 builds)
    bool master_weights = true;          // -w keep fp32 master weights (BF16 builds)
    bool cuda_graph = true;              // -cg replay each forward+backward from CUDA Graphs
    int fp8 = 0;                         // -fp8 1: the blocks' linear layers in FP8 (BF16 builds, Hopper); 2: the
                                         // lm_head's forward too
    int fp8_history = 0;                 // -fp8h H: delayed scaling over H micro-steps where it fuses; 0: none
    std::string attention = "auto";  // -ab auto (flash where the build and head size allow it) | flash | flash-nondet | materialized
    uint64_t seed = 42;                  // -seed weight init, data shuffling, sampling, stochastic rounding
    // multi-GPU (one process per GPU)
    int num_processes = 1;               // -pn
    int process_rank = 0;                // -pr
    int gpus_per_node = 8;               // -pg  local device = rank % gpus_per_node
    std::string init_method = "mpi";     // -pi mpi | fs (file rendezvous in -pf)
    std::string rendezvous_dir = "/tmp"; // -pf
    int zero_stage = 0;                  // -z 0 | 1 | 2: ZeRO-1 shards master weights and AdamW moments over the
                                         // ranks, ZeRO-2 the gradients too
    int zero_bucket_mb = 25;             // -zb  MB of bf16 gradients per exchanged bucket (several GPUs)
    bool check = false;                  // --check: check every input, print the start-up table's host rows, exit
    std::vector<std::string> flags_given;  // every flag on the command line, in order (the CPU trainer's notes)
};

// Which trainer a usage text and the flag checks are for: train_gpt2cu (GPUs) or train_gpt2 (the CPU, which has no
// use for the flags of the GPU's memory, numerics, kernels and processes: gpu_only_flag).
enum class Trainer { Gpu, Cpu };

inline bool gpu_only_flag(const std::string& flag) {
    for (const char* f : {"-r", "-f", "-w", "-cg", "-fp8", "-fp8h", "-ab", "-pn", "-pr", "-pg", "-pi", "-pf", "-z",
                          "-zb"})
        if (flag == f) return true;
    return false;
}

inline std::string train_usage(const std::string& program, Trainer trainer = Trainer::Gpu) {
    const TrainArgs d;
    const bool gpu = trainer == Trainer::Gpu;
    std::string out;
    auto text = [&](const char* s) {
        out += s;
        out += '\n';
    };
    auto line = [&](const char* fmt, auto... args) {
        char buf[512];
        snprintf(buf, sizeof(buf), fmt, args...);
        text(buf);
    };
    line("usage: %s [flag value]...", program.c_str());
    text("data and model");
    line("  -i <glob>    train token shards (default %s)", d.train_pattern.c_str());
    line("  -j <glob>    validation token shards (default %s)", d.val_pattern.c_str());
    text("  -e <s>       init from a model file, a Hugging Face GPT-2 directory or .safetensors file,");
    text("               or d6|d12|d24|d36|d48 for random init (max sequence length max(1024, -t))");
    line("               (default %s)", d.init_from.c_str());
    text("  -o <dir>     output dir for main.log and checkpoints (default: none)");
    line("  -tok <file>  tokenizer .bin for printing samples (default %s)", d.tokenizer_path.c_str());
    text("batch");
    line("  -b <int>     micro-batch size%s (default %d)", gpu ? " per GPU" : "", d.B);
    line("  -t <int>     sequence length (default %d)", d.T);
    if (gpu) text("  -d <int>     total tokens per step, a multiple of B*T*processes; -1 = B*T*processes (default -1)");
    else text("  -d <int>     total tokens per step, a multiple of B*T (gradient accumulation); -1 = B*T (default -1)");
    text("  -x <int>     number of steps; -1 = one epoch, 0 = only evaluate the model (-v, -h) (default -1)");
    text("  -sh <0|1>    shuffle the training windows every epoch (default 1)");
    text("optimizer");
    text("  -k <s>       lr schedule cosine|linear|constant|wsd (default cosine)");
    line("  -l <float>   learning rate (default %g)", d.learning_rate);
    line("  -u <int>     warmup steps (default %d)", d.warmup_steps);
    line("  -q <float>   final lr as a fraction of -l, in [0,1] (default %g)", d.final_lr_frac);
    line("  -c <float>   weight decay on matrices (default %g)", d.weight_decay);
    line("  -gc <float>  clip the gradient norm to this, 0 = off (default %g)", d.grad_clip);
    text("evaluation and sampling");
    line("  -v <int>     val loss every N steps, 0 = never (default %d)", d.val_every);
    line("  -m <int>     max val batches, -1 = all (default %d)", d.val_max_batches);
    line("  -s <int>     sample every N steps, 0 = never (default %d)", d.sample_every);
    line("  -g <int>     tokens to generate (default %d)", d.gen_tokens);
    line("  -st <float>  sampling temperature, 0 = greedy (default %g)", d.temperature);
    line("  -sk <int>    sample from the top k tokens, 0 = all (default %d)", d.top_k);
    text("  -h <0|1>     HellaSwag accuracy (acc_norm) at every validation and at the end (default 0)");
    line("  -hf <file>   HellaSwag eval file, llm.c's format (default %s)", d.hellaswag_path.c_str());
    text("  -hp <file>   write each HellaSwag example's four scores and pick to this file (TSV; with several");
    text("               processes one file per rank, FILE.rank<r>) (default: none)");
    text("checkpoints");
    line("  -n <int>     checkpoint every N steps (and at the end), 0 = never (default %d)", d.checkpoint_every);
    line("  -nk <int>    keep only this run's newest K checkpoints, 0 = keep all (default %d)", d.checkpoint_keep);
    text("  -y <0|1>     resume from the newest complete checkpoint in -o (default 0)");
    text("  -ow <0|1>    a fresh run in an -o holding another run's checkpoints deletes them; without it,");
    text("               such a run stops with an error (default 0)");
    if (gpu) {
        text("memory and numerics");
        line("  -r <0|1|2>   recompute in backward: 0 none, 1 GELU, 2 GELU + LayerNorm (default %d)", d.recompute);
        line("  -f <0|1>     TF32 matmuls in FP32 builds (default %d)", d.tf32 ? 1 : 0);
        line("  -w <0|1>     fp32 master weights in BF16 builds (default %d)", d.master_weights ? 1 : 0);
        text("  -cg <0|1>    replay forward+backward from CUDA Graphs from the second micro-step on (several GPUs:");
        text("               graphs between the exchange's calls); same kernels and bits, without the gaps of");
        line("               queuing them one by one (default %d)", d.cuda_graph ? 1 : 0);
        text("  -fp8 <0|1|2> 1: the four linear layers of every block in FP8 (E4M3 weights and activations,");
        text("               E5M2 gradients, per-tensor current scaling; docs/FP8.md); 2: the lm_head's forward");
        text("               too. BF16 builds on H100/H200, B*T and C multiples of 16; experimental");
        line("               (default %d)", d.fp8);
        text("  -fp8h <H>    with -fp8: delayed scaling from an amax history of H micro-steps (the weights': H");
        text("               steps) for the weights, qkv's, fc's and fcproj's inputs and fc's output gradient, which");
        text("               their producers then write in FP8 (no amax pass, no bf16 copy); the first micro-step");
        text("               measures them. One process;");
        line("               0 = current scaling everywhere (default %d)", d.fp8_history);
        text("  -ab <s>      attention backend auto|flash|flash-nondet|materialized; auto = flash in BF16");
        line("               builds with head size 64 or 128, else materialized (default %s). flash runs the",
             d.attention.c_str());
        text("               Hopper TMA/wgmma kernels on H100/H200 (sm_90a builds), mma.sync elsewhere; all");
        text("               but flash-nondet are deterministic. flash-nondet: flash with unordered dQ");
        text("               additions in the Hopper backward at head size 64 (faster at T >= 4096 only)");
        line("  -seed <int>  seed for init, data order, sampling, rounding (default %llu)", (unsigned long long)d.seed);
        text("multi-GPU (one process per GPU)");
        text("  -pn <int>    number of processes (default 1; with MPI taken from mpirun)");
        text("  -pr <int>    this process's rank (default 0)");
        line("  -pg <int>    GPUs per node (default %d)", d.gpus_per_node);
        line("  -pi <s>      NCCL rendezvous: mpi | fs (default %s)", d.init_method.c_str());
        line("  -pf <dir>    shared directory for -pi fs (default %s)", d.rendezvous_dir.c_str());
        text("  -z <0|1|2>   ZeRO stage: 1 keeps fp32 master weights and AdamW moments for this rank's shard");
        text("               only (gradients reduce-scattered, parameters all-gathered); 2 also keeps only the");
        text("               shard of the gradients (reduce-scattered on every micro-step, also with -d);");
        line("               with one process 2 runs as 1 (default %d)", d.zero_stage);
        line("  -zb <int>    several GPUs: MB of bf16 gradients per bucket exchanged under the backward (default %d)",
             d.zero_bucket_mb);
    } else {
        text("numerics");
        line("  -seed <int>  seed for init, data order, sampling (default %llu)", (unsigned long long)d.seed);
        text("  (fp32 throughout, OpenMP threads: OMP_NUM_THREADS. The GPU trainer's -r -f -w -cg -ab -pn -pr -pg");
        text("   -pi -pf -z -zb are accepted and ignored, with a note; -pn above 1 is an error)");
    }
    text("  --check      check every input (shards and each token, model, output dir, eval and tokenizer");
    text("               files), print the start-up table's rows that need no device, and exit; trains nothing");
    text("  -h, --help   print this and exit");
    text("  --version    print the program, the commit it was built from and its precision, and exit");
    return out;
}

// Parses argv[1..argc). On Error, *error holds one line naming the flag and the problem.
inline ParseStatus parse_train_args(int argc, const char* const* argv, TrainArgs* a, std::string* error) {
    using namespace flag_parse;
    constexpr int64_t kIntMax = 2147483647;
    for (int i = 1; i < argc; i++) {
        const std::string flag = argv[i];
        if (flag == "--help") return ParseStatus::Help;
        if (flag == "--version") return ParseStatus::Version;
        if (flag == "--check") {
            a->check = true;
            continue;
        }
        // "-h" alone (or before another flag) is help; "-h 0|1" is llm.c's HellaSwag switch
        if (flag == "-h" && (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] != '\0'))) return ParseStatus::Help;
        if (flag.size() < 2 || flag[0] != '-') {
            *error = "unexpected argument '" + flag + "' (flags look like -b 16)";
            return ParseStatus::Error;
        }
        if (i + 1 >= argc) {
            *error = "flag " + flag + " needs a value";
            return ParseStatus::Error;
        }
        const std::string v = argv[++i];
        a->flags_given.push_back(flag);
        auto fail = [&](const char* expected) {
            *error = "flag " + flag + ": expected " + expected + ", got '" + v + "'";
            return ParseStatus::Error;
        };
        auto get_int = [&](int* dst, int64_t lo, int64_t hi) {
            int64_t x;
            if (!parse_int64(v, lo, hi, &x)) return false;
            *dst = (int)x;
            return true;
        };
        auto get_bool = [&](bool* dst) {
            if (v == "0") *dst = false;
            else if (v == "1") *dst = true;
            else return false;
            return true;
        };
        auto get_positive_or_minus_one = [&](int* dst) {
            int64_t x;
            if (!parse_int64(v, -1, kIntMax, &x) || x == 0) return false;
            *dst = (int)x;
            return true;
        };

        if (flag == "-i") { if (v.empty()) return fail("a file pattern"); a->train_pattern = v; }
        else if (flag == "-j") { if (v.empty()) return fail("a file pattern"); a->val_pattern = v; }
        else if (flag == "-e") { if (v.empty()) return fail("a model file, HF GPT-2 model or d6..d48"); a->init_from = v; }
        else if (flag == "-o") { a->output_dir = v; }
        else if (flag == "-tok") { a->tokenizer_path = v; }
        else if (flag == "-b") { if (!get_int(&a->B, 1, kIntMax)) return fail("an integer >= 1"); }
        else if (flag == "-t") { if (!get_int(&a->T, 1, kIntMax)) return fail("an integer >= 1"); }
        else if (flag == "-d") {
            int64_t x;
            if (!parse_int64(v, -1, INT64_MAX, &x) || x == 0) return fail("an integer >= 1, or -1");
            a->total_batch_size = x;
        }
        else if (flag == "-x") { if (!get_int(&a->max_steps, -1, kIntMax)) return fail("an integer >= 0, or -1 (one epoch)"); }
        else if (flag == "-k") { if (!parse_lr_schedule(v, &a->lr_schedule)) return fail("cosine, linear, constant or wsd"); }
        else if (flag == "-l") { if (!parse_float(v, 0.0, 1e9, &a->learning_rate)) return fail("a number >= 0"); }
        else if (flag == "-u") { if (!get_int(&a->warmup_steps, 0, kIntMax)) return fail("an integer >= 0"); }
        else if (flag == "-q") { if (!parse_float(v, 0.0, 1.0, &a->final_lr_frac)) return fail("a number in [0, 1]"); }
        else if (flag == "-c") { if (!parse_float(v, 0.0, 1e9, &a->weight_decay)) return fail("a number >= 0"); }
        else if (flag == "-gc") { if (!parse_float(v, 0.0, 1e9, &a->grad_clip)) return fail("a number >= 0"); }
        else if (flag == "-v") { if (!get_int(&a->val_every, 0, kIntMax)) return fail("an integer >= 0"); }
        else if (flag == "-m") { if (!get_positive_or_minus_one(&a->val_max_batches)) return fail("an integer >= 1, or -1 (all)"); }
        else if (flag == "-s") { if (!get_int(&a->sample_every, 0, kIntMax)) return fail("an integer >= 0"); }
        else if (flag == "-g") { if (!get_int(&a->gen_tokens, 1, kIntMax)) return fail("an integer >= 1"); }
        else if (flag == "-st") { if (!parse_float(v, 0.0, 1e6, &a->temperature)) return fail("a number >= 0"); }
        else if (flag == "-sk") { if (!get_int(&a->top_k, 0, kIntMax)) return fail("an integer >= 0"); }
        else if (flag == "-h") { if (!get_bool(&a->hellaswag)) return fail("0 or 1 (-h alone prints the usage)"); }
        else if (flag == "-hf") { if (v.empty()) return fail("a file"); a->hellaswag_path = v; }
        else if (flag == "-hp") { if (v.empty()) return fail("a file"); a->hellaswag_picks = v; }
        else if (flag == "-n") { if (!get_int(&a->checkpoint_every, 0, kIntMax)) return fail("an integer >= 0"); }
        else if (flag == "-nk") { if (!get_int(&a->checkpoint_keep, 0, kIntMax)) return fail("an integer >= 0"); }
        else if (flag == "-y") { if (!get_bool(&a->resume)) return fail("0 or 1"); }
        else if (flag == "-ow") { if (!get_bool(&a->overwrite_output)) return fail("0 or 1"); }
        else if (flag == "-sh") { if (!get_bool(&a->shuffle)) return fail("0 or 1"); }
        else if (flag == "-r") { if (!get_int(&a->recompute, 0, 2)) return fail("0, 1 or 2"); }
        else if (flag == "-f") { if (!get_bool(&a->tf32)) return fail("0 or 1"); }
        else if (flag == "-w") { if (!get_bool(&a->master_weights)) return fail("0 or 1"); }
        else if (flag == "-cg") { if (!get_bool(&a->cuda_graph)) return fail("0 or 1"); }
        else if (flag == "-fp8") { if (!get_int(&a->fp8, 0, 2)) return fail("0, 1 or 2"); }
        else if (flag == "-fp8h") { if (!get_int(&a->fp8_history, 0, 1024)) return fail("0 to 1024"); }
        else if (flag == "-ab") {
            if (v != "auto" && v != "materialized" && v != "flash" && v != "flash-nondet")
                return fail("auto, materialized, flash or flash-nondet");
            a->attention = v;
        }
        else if (flag == "-seed") {
            int64_t x;
            if (!parse_int64(v, 0, INT64_MAX, &x)) return fail("an integer >= 0");
            a->seed = (uint64_t)x;
        }
        else if (flag == "-pn") { if (!get_int(&a->num_processes, 1, 65536)) return fail("an integer >= 1"); }
        else if (flag == "-pr") { if (!get_int(&a->process_rank, 0, 65535)) return fail("an integer >= 0"); }
        else if (flag == "-pg") { if (!get_int(&a->gpus_per_node, 1, 1024)) return fail("an integer >= 1"); }
        else if (flag == "-pi") { if (v != "mpi" && v != "fs") return fail("mpi or fs"); a->init_method = v; }
        else if (flag == "-pf") { if (v.empty()) return fail("a directory"); a->rendezvous_dir = v; }
        else if (flag == "-z") { if (!get_int(&a->zero_stage, 0, 2)) return fail("0, 1 or 2"); }
        else if (flag == "-zb") { if (!get_int(&a->zero_bucket_mb, 1, 65536)) return fail("an integer from 1 to 65536"); }
        else {
            *error = "unknown flag " + flag;
            return ParseStatus::Error;
        }
    }
    // Checked products: B*T indexes int tensors in the kernels; B*T*processes counts tokens per micro-step.
    const int64_t tokens_per_micro_batch = (int64_t)a->B * a->T;  // < 2^62: both are ints
    if (tokens_per_micro_batch > kIntMax) {
        *error = "flags -b/-t: B*T = " + std::to_string(a->B) + "*" + std::to_string(a->T) + " = " +
                 std::to_string(tokens_per_micro_batch) + " tokens per micro-batch, more than " +
                 std::to_string(kIntMax);
        return ParseStatus::Error;
    }
    if (a->process_rank >= a->num_processes) {
        *error = "flag -pr: rank " + std::to_string(a->process_rank) + " is not below -pn " +
                 std::to_string(a->num_processes);
        return ParseStatus::Error;
    }
    if (a->resume && a->output_dir.empty()) {
        *error = "flag -y 1 needs -o <dir> (checkpoints are read from the output dir)";
        return ParseStatus::Error;
    }
    if (a->max_steps == 0 && a->resume) {
        *error = "flag -x 0 (evaluate only) takes its model from -e (e.g. -e out/model_00005000.bin), not -y 1";
        return ParseStatus::Error;
    }
    if (a->checkpoint_every > 0 && a->output_dir.empty()) {
        *error = "flag -n needs -o <dir> (checkpoints are written to the output dir)";
        return ParseStatus::Error;
    }
    return ParseStatus::Ok;
}

// How a step's tokens split into micro-batches. total_batch_size -1 means one micro-batch per process.
struct BatchLayout {
    int64_t tokens_per_step = 0;     // over all processes
    int grad_accum_steps = 0;        // micro-batches per process per step
};

// Empty string on success, else why -d does not fit B, T and the process count.
inline std::string resolve_batch_layout(const TrainArgs& a, int num_processes, BatchLayout* out) {
    int64_t per_micro = 0;
    if (a.B < 1 || a.T < 1 || num_processes < 1 ||
        __builtin_mul_overflow((int64_t)a.B * a.T, (int64_t)num_processes, &per_micro)) {
        return "flags -b/-t: B*T*processes = " + std::to_string(a.B) + "*" + std::to_string(a.T) + "*" +
               std::to_string(num_processes) + " tokens per micro-step does not fit in 64 bits";
    }
    const int64_t total = a.total_batch_size == -1 ? per_micro : a.total_batch_size;
    if (total % per_micro != 0) {
        return "flag -d: " + std::to_string(total) + " tokens per step is not a multiple of B*T*processes = " +
               std::to_string(a.B) + "*" + std::to_string(a.T) + "*" + std::to_string(num_processes) + " = " +
               std::to_string(per_micro);
    }
    if (total / per_micro > 2147483647) return "flag -d: too many micro-batches per step";
    out->tokens_per_step = total;
    out->grad_accum_steps = (int)(total / per_micro);
    return "";
}
