// Trainer flags (llmc/app/train/train_args.h): llm.c names and defaults, strict values, clear errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "llmc/app/train/train_args.h"
#include "tests/lib/flag_test_helpers.h"

namespace {

using Parsed = ParsedFlags<TrainArgs>;

Parsed parse(const std::vector<std::string>& flags) { return parse_flags<TrainArgs>(parse_train_args, "train_gpt2cu", flags); }

// The flag must be rejected with a message naming it and containing `expect`.
void expect_rejected(const std::vector<std::string>& flags, const std::string& expect) {
    expect_rejected_flags(parse(flags), flags, expect);
}

}  // namespace

TEST(TrainArgs, DefaultsMatchLlmc) {
    Parsed p = parse({});
    ASSERT_EQ(p.status, ParseStatus::Ok) << p.error;
    const TrainArgs& a = p.args;
    EXPECT_EQ(a.B, 4);
    EXPECT_EQ(a.T, 1024);
    EXPECT_EQ(a.total_batch_size, -1);
    EXPECT_EQ(a.max_steps, -1);
    EXPECT_EQ(a.lr_schedule, LRSchedule::Cosine);
    EXPECT_FLOAT_EQ(a.learning_rate, 3e-4f);
    EXPECT_EQ(a.warmup_steps, 0);
    EXPECT_FLOAT_EQ(a.final_lr_frac, 1.0f);
    EXPECT_FLOAT_EQ(a.weight_decay, 0.0f);
    EXPECT_EQ(a.val_every, 20);
    EXPECT_EQ(a.val_max_batches, 20);
    EXPECT_EQ(a.sample_every, 20);
    EXPECT_EQ(a.gen_tokens, 64);
    EXPECT_EQ(a.checkpoint_every, 0);
    EXPECT_EQ(a.checkpoint_keep, 0);
    EXPECT_FALSE(a.resume);
    EXPECT_FALSE(a.overwrite_output);
    EXPECT_EQ(a.recompute, 1);
    EXPECT_TRUE(a.tf32);
    EXPECT_TRUE(a.master_weights);
    EXPECT_EQ(a.attention, "auto");  // flash wherever the build and head size allow it
    EXPECT_TRUE(a.shuffle);
    EXPECT_TRUE(a.output_dir.empty());
}

TEST(TrainArgs, EveryFlagIsParsed) {
    Parsed p = parse({"-i", "tr_*.bin", "-j", "va_*.bin", "-e", "d24", "-o", "out", "-tok", "tok.bin", "-b", "16",
                      "-t", "512", "-d", "524288", "-x", "100", "-k", "wsd", "-l", "6e-4", "-u", "10", "-q", "0.1",
                      "-c", "0.1", "-gc", "0.5", "-v", "25", "-m", "-1", "-s", "50", "-g", "32", "-st", "0.8", "-sk",
                      "40", "-n", "10", "-nk", "2", "-y", "1", "-ow", "1", "-sh", "0", "-r", "2", "-f", "0", "-w", "0", "-ab", "flash", "-seed", "7", "-pn",
                      "2", "-pr", "1", "-pg", "4", "-pi", "fs", "-pf", "/shared", "-fp8", "2"});
    ASSERT_EQ(p.status, ParseStatus::Ok) << p.error;
    const TrainArgs& a = p.args;
    EXPECT_EQ(a.train_pattern, "tr_*.bin");
    EXPECT_EQ(a.val_pattern, "va_*.bin");
    EXPECT_EQ(a.init_from, "d24");
    EXPECT_EQ(a.output_dir, "out");
    EXPECT_EQ(a.tokenizer_path, "tok.bin");
    EXPECT_EQ(a.B, 16);
    EXPECT_EQ(a.T, 512);
    EXPECT_EQ(a.total_batch_size, 524288);
    EXPECT_EQ(a.max_steps, 100);
    EXPECT_EQ(a.lr_schedule, LRSchedule::WSD);
    EXPECT_FLOAT_EQ(a.learning_rate, 6e-4f);
    EXPECT_EQ(a.warmup_steps, 10);
    EXPECT_FLOAT_EQ(a.final_lr_frac, 0.1f);
    EXPECT_FLOAT_EQ(a.weight_decay, 0.1f);
    EXPECT_FLOAT_EQ(a.grad_clip, 0.5f);
    EXPECT_EQ(a.val_every, 25);
    EXPECT_EQ(a.val_max_batches, -1);
    EXPECT_EQ(a.sample_every, 50);
    EXPECT_EQ(a.gen_tokens, 32);
    EXPECT_FLOAT_EQ(a.temperature, 0.8f);
    EXPECT_EQ(a.top_k, 40);
    EXPECT_EQ(a.checkpoint_every, 10);
    EXPECT_EQ(a.checkpoint_keep, 2);
    EXPECT_TRUE(a.resume);
    EXPECT_TRUE(a.overwrite_output);
    EXPECT_EQ(a.recompute, 2);
    EXPECT_FALSE(a.tf32);
    EXPECT_FALSE(a.master_weights);
    EXPECT_EQ(a.attention, "flash");
    EXPECT_FALSE(a.shuffle);
    EXPECT_EQ(a.seed, 7u);
    EXPECT_EQ(a.num_processes, 2);
    EXPECT_EQ(a.process_rank, 1);
    EXPECT_EQ(a.gpus_per_node, 4);
    EXPECT_EQ(a.init_method, "fs");
    EXPECT_EQ(a.rendezvous_dir, "/shared");
    EXPECT_EQ(a.fp8, 2);
}

TEST(TrainArgs, EachScheduleName) {
    const std::pair<const char*, LRSchedule> names[] = {
        {"cosine", LRSchedule::Cosine}, {"linear", LRSchedule::Linear}, {"constant", LRSchedule::Constant},
        {"wsd", LRSchedule::WSD}};
    for (const auto& [name, want] : names) {
        Parsed p = parse({"-k", name});
        ASSERT_EQ(p.status, ParseStatus::Ok) << name;
        EXPECT_EQ(p.args.lr_schedule, want) << name;
    }
}

TEST(TrainArgs, HelpIsRecognisedAnywhere) {
    EXPECT_EQ(parse({"--help"}).status, ParseStatus::Help);
    EXPECT_EQ(parse({"-h"}).status, ParseStatus::Help);
    EXPECT_EQ(parse({"-b", "8", "--help"}).status, ParseStatus::Help);
    const std::string usage = train_usage("train_gpt2cu");
    for (const char* flag : {"-i ", "-j ", "-e ", "-o ", "-b ", "-t ", "-d ", "-x ", "-k ", "-l ", "-u ", "-q ", "-c ",
                             "-v ", "-m ", "-s ", "-g ", "-st ", "-sk ", "-n ", "-nk ", "-y ", "-ow ", "-r ", "-f ", "-w ",
                             "-h, --help"}) {
        EXPECT_NE(usage.find(std::string("  ") + flag), std::string::npos) << "usage lacks " << flag;
    }
}

// --check takes no value, anywhere on the line; without it the run trains.
TEST(TrainArgs, CheckIsASwitch) {
    EXPECT_FALSE(parse({}).args.check);
    Parsed p = parse({"--check", "-b", "8"});
    ASSERT_EQ(p.status, ParseStatus::Ok) << p.error;
    EXPECT_TRUE(p.args.check);
    EXPECT_EQ(p.args.B, 8);
    EXPECT_TRUE(parse({"-b", "8", "--check"}).args.check);
    EXPECT_NE(train_usage("train_gpt2cu").find("  --check "), std::string::npos);
}

// llm.c's -h 1 turns the HellaSwag eval on; -h alone, last or before another flag, is still help.
TEST(TrainArgs, HellaSwagFlagsAndHelp) {
    EXPECT_EQ(parse({"-h", "-b", "8"}).status, ParseStatus::Help);
    EXPECT_EQ(parse({"-b", "8", "-h"}).status, ParseStatus::Help);
    Parsed p = parse({"-h", "1", "-hf", "hs.bin", "-hp", "picks.tsv", "-x", "0"});
    ASSERT_EQ(p.status, ParseStatus::Ok);
    EXPECT_TRUE(p.args.hellaswag);
    EXPECT_EQ(p.args.hellaswag_path, "hs.bin");
    EXPECT_EQ(p.args.hellaswag_picks, "picks.tsv");
    EXPECT_EQ(p.args.max_steps, 0);
    EXPECT_FALSE(parse({"-h", "0"}).args.hellaswag);
    EXPECT_EQ(parse({}).args.hellaswag_path, "dev/data/hellaswag/hellaswag_val.bin");  // llm.c's default
    expect_rejected({"-h", "2"}, "flag -h: expected 0 or 1 (-h alone prints the usage), got '2'");
    expect_rejected({"-hf", ""}, "flag -hf");
    expect_rejected({"-x", "0", "-y", "1", "-o", "out"}, "flag -x 0 (evaluate only) takes its model from -e");
    const std::string usage = train_usage("train_gpt2cu");
    for (const char* flag : {"-h <0|1>", "-hf <file>", "-hp <file>"}) {
        EXPECT_NE(usage.find(std::string("  ") + flag), std::string::npos) << "usage lacks " << flag;
    }
}

TEST(TrainArgs, UnknownFlagsAndStrayArguments) {
    expect_rejected({"-zz", "1"}, "unknown flag -zz");
    expect_rejected({"model.bin"}, "unexpected argument 'model.bin'");
    expect_rejected({"-b"}, "flag -b needs a value");
}

TEST(TrainArgs, BadNumbersNameTheFlagAndValue) {
    expect_rejected({"-b", "0"}, "flag -b: expected an integer >= 1, got '0'");
    expect_rejected({"-b", "-3"}, "flag -b");
    expect_rejected({"-b", "16x"}, "got '16x'");
    expect_rejected({"-b", ""}, "flag -b");
    expect_rejected({"-b", "99999999999"}, "flag -b");
    expect_rejected({"-t", "1.5"}, "flag -t");
    expect_rejected({"-d", "0"}, "flag -d");
    expect_rejected({"-d", "-2"}, "flag -d");
    expect_rejected({"-x", "-5"}, "flag -x");
    expect_rejected({"-x", "-2"}, "an integer >= 0, or -1");
    expect_rejected({"-l", "abc"}, "flag -l");
    expect_rejected({"-l", "-1e-4"}, "flag -l");
    expect_rejected({"-l", "nan"}, "flag -l");
    expect_rejected({"-l", "inf"}, "flag -l");
    expect_rejected({"-q", "1.5"}, "a number in [0, 1]");
    expect_rejected({"-u", "-1"}, "flag -u");
    expect_rejected({"-c", "-0.1"}, "flag -c");
    expect_rejected({"-m", "0"}, "flag -m");
    expect_rejected({"-g", "0"}, "flag -g");
    expect_rejected({"-st", "-1"}, "flag -st");
    expect_rejected({"-sk", "-1"}, "flag -sk");
    expect_rejected({"-nk", "-1"}, "flag -nk");
}

TEST(TrainArgs, EnumsAndBooleansAreStrict) {
    expect_rejected({"-k", "cos"}, "cosine, linear, constant or wsd");
    expect_rejected({"-y", "2"}, "flag -y: expected 0 or 1");
    expect_rejected({"-y", "yes"}, "flag -y");
    expect_rejected({"-f", "true"}, "flag -f");
    expect_rejected({"-w", "-1"}, "flag -w");
    expect_rejected({"-r", "3"}, "flag -r: expected 0, 1 or 2");
    expect_rejected({"-fp8", "3"}, "flag -fp8: expected 0, 1 or 2");
    expect_rejected({"-pi", "tcp"}, "mpi or fs");
    expect_rejected({"-ab", "cudnn"}, "auto, materialized, flash or flash-nondet");
}

// -z: ZeRO stages 0, 1 and 2 (llmc/optimizer/adamw_optimizer.cuh), default 0; the usage names all three.
TEST(TrainArgs, ZeroStages) {
    EXPECT_EQ(parse({}).args.zero_stage, 0);
    for (int stage : {0, 1, 2}) {
        Parsed p = parse({"-z", std::to_string(stage)});
        ASSERT_EQ(p.status, ParseStatus::Ok) << stage;
        EXPECT_EQ(p.args.zero_stage, stage);
    }
    expect_rejected({"-z", "3"}, "flag -z: expected 0, 1 or 2, got '3'");
    expect_rejected({"-z", "-1"}, "flag -z");
    expect_rejected({"-z", "two"}, "flag -z");
    const std::string usage = train_usage("train_gpt2cu");
    EXPECT_NE(usage.find("  -z <0|1|2>"), std::string::npos);
    EXPECT_NE(usage.find("  -h, --help   print this and exit\n"), std::string::npos) << "usage cut short";
}

TEST(TrainArgs, CrossFlagChecks) {
    expect_rejected({"-pn", "2", "-pr", "2"}, "-pr");
    expect_rejected({"-y", "1"}, "-y 1 needs -o");
    expect_rejected({"-n", "10"}, "-n needs -o");
    EXPECT_EQ(parse({"-y", "1", "-o", "out"}).status, ParseStatus::Ok);
    EXPECT_EQ(parse({"-n", "0"}).status, ParseStatus::Ok);
}

TEST(TrainArgs, LastValueWins) {
    Parsed p = parse({"-b", "8", "-b", "16"});
    ASSERT_EQ(p.status, ParseStatus::Ok);
    EXPECT_EQ(p.args.B, 16);
}

TEST(BatchLayout, GradientAccumulationFromTotalTokens) {
    TrainArgs a;
    a.B = 16;
    a.T = 1024;
    BatchLayout l;
    a.total_batch_size = -1;
    EXPECT_EQ(resolve_batch_layout(a, 1, &l), "");
    EXPECT_EQ(l.grad_accum_steps, 1);
    EXPECT_EQ(l.tokens_per_step, 16 * 1024);
    a.total_batch_size = 524288;  // GPT-2's 0.5M tokens
    EXPECT_EQ(resolve_batch_layout(a, 1, &l), "");
    EXPECT_EQ(l.grad_accum_steps, 32);
    EXPECT_EQ(resolve_batch_layout(a, 8, &l), "");
    EXPECT_EQ(l.grad_accum_steps, 4);
    EXPECT_EQ(l.tokens_per_step, 524288);
    a.total_batch_size = -1;
    EXPECT_EQ(resolve_batch_layout(a, 4, &l), "");
    EXPECT_EQ(l.tokens_per_step, 4 * 16 * 1024);
    EXPECT_EQ(l.grad_accum_steps, 1);
}

TEST(BatchLayout, TotalNotAMultipleIsAnError) {
    TrainArgs a;
    a.B = 16;
    a.T = 1024;
    a.total_batch_size = 16 * 1024 + 1;
    BatchLayout l;
    std::string err = resolve_batch_layout(a, 1, &l);
    EXPECT_NE(err.find("not a multiple of B*T*processes = 16*1024*1 = 16384"), std::string::npos) << err;
    a.total_batch_size = 16 * 1024 * 3;
    err = resolve_batch_layout(a, 2, &l);
    EXPECT_NE(err.find("16*1024*2 = 32768"), std::string::npos) << err;
}

// Regression: -b 1073741824 -t 1073741824 -pn 16 overflowed B*T*processes to 0 and divided by it.
TEST(BatchLayout, HugeBatchIsOneClearErrorNotAnOverflow) {
    expect_rejected({"-b", "1073741824", "-t", "1073741824", "-pn", "16"},
                    "flags -b/-t: B*T = 1073741824*1073741824 = 1152921504606846976 tokens per micro-batch, more "
                    "than 2147483647");
    expect_rejected({"-b", "65536", "-t", "65536"}, "flags -b/-t: B*T = 65536*65536 = 4294967296");
    EXPECT_EQ(parse({"-b", "32768", "-t", "65535"}).status, ParseStatus::Ok);  // 2^31 - 32768 fits
    TrainArgs a;
    a.B = 2147483647;
    a.T = 2147483647;
    BatchLayout l;
    const std::string err = resolve_batch_layout(a, 65536, &l);
    EXPECT_NE(err.find("does not fit in 64 bits"), std::string::npos) << err;
}
