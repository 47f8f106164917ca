// Fuzzes the trainer's flag parser (llmc/app/train/train_args.h): parse_train_args on an argv cut from the input at
// NUL bytes, then resolve_batch_layout. Errors are return values here (ParseStatus::Error, a message).
// Findings: a crash or sanitizer report (signed overflow included), an exception, a leak, an Error without
// a message, or an accepted command line whose values break what the parser promises: B, T >= 1 and
// B*T <= INT_MAX, 0 <= rank < processes, -y 1 and -n N need -o, values in their documented ranges, and a
// batch layout whose tokens per step are not grad_accum_steps * B * T * processes.
#include <cmath>

#include "llmc/app/train/train_args.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_inputs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::vector<std::string> args = fuzz::unpack_argv(data, size, 64);
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    TrainArgs a;
    std::string error;
    const ParseStatus status = parse_train_args((int)argv.size(), argv.data(), &a, &error);
    if (status == ParseStatus::Error) FUZZ_REQUIRE(!error.empty(), "an error without a message");
    if (status != ParseStatus::Ok) return 0;

    FUZZ_REQUIRE(a.B >= 1 && a.T >= 1 && (int64_t)a.B * a.T <= 2147483647, "B=%d T=%d accepted", a.B, a.T);
    FUZZ_REQUIRE(a.num_processes >= 1 && a.process_rank >= 0 && a.process_rank < a.num_processes,
                 "rank %d of %d processes accepted", a.process_rank, a.num_processes);
    FUZZ_REQUIRE(!(a.resume || a.checkpoint_every > 0) || !a.output_dir.empty(), "-y 1 or -n without -o accepted");
    FUZZ_REQUIRE(a.total_batch_size == -1 || a.total_batch_size >= 1, "-d %lld accepted", (long long)a.total_batch_size);
    FUZZ_REQUIRE(a.max_steps >= -1 && (a.val_max_batches == -1 || a.val_max_batches >= 1),
                 "-x/-m out of range accepted");
    FUZZ_REQUIRE(std::isfinite(a.learning_rate) && a.learning_rate >= 0 && a.final_lr_frac >= 0 &&
                     a.final_lr_frac <= 1 && a.weight_decay >= 0 && a.grad_clip >= 0 && a.temperature >= 0 &&
                     std::isfinite(a.weight_decay) && std::isfinite(a.grad_clip) && std::isfinite(a.temperature),
                 "a float flag out of range accepted");
    FUZZ_REQUIRE(a.recompute >= 0 && a.recompute <= 2 && a.gen_tokens >= 1 && a.warmup_steps >= 0 &&
                     a.val_every >= 0 && a.sample_every >= 0 && a.top_k >= 0 && a.checkpoint_every >= 0 &&
                     a.checkpoint_keep >= 0 && a.gpus_per_node >= 1 && a.zero_stage >= 0 && a.zero_stage <= 2 &&
                     a.zero_bucket_mb >= 1,
                 "an integer flag out of range accepted");
    FUZZ_REQUIRE(!a.train_pattern.empty() && !a.val_pattern.empty() && !a.init_from.empty() &&
                     !a.rendezvous_dir.empty(),
                 "an empty path accepted");
    FUZZ_REQUIRE((a.attention == "auto" || a.attention == "flash" || a.attention == "flash-nondet" ||
                  a.attention == "materialized") &&
                     (a.init_method == "mpi" || a.init_method == "fs"),
                 "an unknown -ab or -pi accepted");

    for (int processes : {a.num_processes, 1, 65536}) {
        BatchLayout layout;
        if (!resolve_batch_layout(a, processes, &layout).empty()) continue;
        const int64_t per_micro = (int64_t)a.B * a.T * processes;
        FUZZ_REQUIRE(layout.grad_accum_steps >= 1 && layout.tokens_per_step / per_micro == layout.grad_accum_steps &&
                         layout.tokens_per_step % per_micro == 0,
                     "layout: %lld tokens per step, %d accumulation steps for B*T*processes = %lld",
                     (long long)layout.tokens_per_step, layout.grad_accum_steps, (long long)per_micro);
        FUZZ_REQUIRE(a.total_batch_size != -1 || layout.grad_accum_steps == 1, "-d -1 gave %d accumulation steps",
                     layout.grad_accum_steps);
    }
    static const bool usage_ok = fuzz::is_terminal_safe(train_usage("train_gpt2cu"));
    FUZZ_REQUIRE(usage_ok, "the usage text is not plain text");
    return 0;
}
