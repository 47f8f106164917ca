// serve_gpt2cu's flags (llmc/app/serve/serve_args.h): defaults, every flag, generate_gpt2cu's names for what they
// share, strict values with one-line errors naming the flag, --version, and the API's model id from -e.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "llmc/app/serve/serve_args.h"
#include "tests/lib/flag_test_helpers.h"

namespace {

using Parsed = ParsedFlags<ServeArgs>;
Parsed parse(const std::vector<std::string>& flags) { return parse_flags<ServeArgs>(parse_serve_args, "serve_gpt2cu", flags); }
void expect_rejected(const std::vector<std::string>& flags, const std::string& expect) {
    expect_rejected_flags(parse(flags), flags, expect);
}

TEST(ServeArgs, DefaultsAndEveryFlag) {
    Parsed p = parse({"-e", "out/model_00000200.bin"});
    ASSERT_EQ(p.status, ParseStatus::Ok) << p.error;
    EXPECT_EQ(p.args.host, "127.0.0.1");  // loopback unless asked
    EXPECT_EQ(p.args.port, 8000);
    EXPECT_EQ(p.args.max_batch, 16);
    EXPECT_EQ(p.args.max_context, 0);
    EXPECT_EQ(p.args.max_queue, 64);
    EXPECT_EQ(p.args.steps_in_flight, 2);
    EXPECT_EQ(p.args.prefill_chunk, 512);
    EXPECT_EQ(p.args.prefill_wait, 16);  // while 32 or more sequences decode (llmc/serving/scheduler.h)
    EXPECT_EQ(p.args.new_tokens, 16);
    EXPECT_EQ(p.args.temperature, 1.0f);
    EXPECT_FALSE(p.args.has_seed);
    EXPECT_EQ(p.args.model_name, "model_00000200");
    EXPECT_EQ(p.args.vocab_dir, "data/cache/gpt2");

    p = parse({"-e", "hf/gpt2/", "--host", "0.0.0.0", "--port", "0", "--max-batch", "64", "--max-context", "512",
               "--max-queue", "0", "--prefill-budget", "128", "--prefill-rows", "4", "--prefill-wait", "6", "--steps-in-flight", "1", "--prefill-chunk", "0", "--max-body", "4096", "--model-name", "gpt2-small",
               "-g", "32", "-st", "0", "-sk", "40", "-sp", "0.9", "-seed", "7", "--vocab-dir", "v"});
    ASSERT_EQ(p.status, ParseStatus::Ok) << p.error;
    EXPECT_EQ(p.args.host, "0.0.0.0");
    EXPECT_EQ(p.args.port, 0);
    EXPECT_EQ(p.args.max_batch, 64);
    EXPECT_EQ(p.args.max_context, 512);
    EXPECT_EQ(p.args.max_queue, 0);
    EXPECT_EQ(p.args.prefill_budget, 128);
    EXPECT_EQ(p.args.prefill_rows, 4);
    EXPECT_EQ(p.args.prefill_wait, 6);
    EXPECT_EQ(p.args.steps_in_flight, 1);
    EXPECT_EQ(p.args.prefill_chunk, 0);
    EXPECT_EQ(p.args.max_body, 4096);
    EXPECT_EQ(p.args.model_name, "gpt2-small");
    EXPECT_EQ(p.args.new_tokens, 32);
    EXPECT_EQ(p.args.temperature, 0.0f);
    EXPECT_EQ(p.args.top_k, 40);
    EXPECT_FLOAT_EQ(p.args.top_p, 0.9f);
    EXPECT_TRUE(p.args.has_seed);
    EXPECT_EQ(p.args.seed, 7u);
    EXPECT_EQ(p.args.vocab_dir, "v");
    EXPECT_EQ(parse({"-e", "hf/gpt2/"}).args.model_name, "gpt2");
    EXPECT_EQ(parse({"-e", "m.safetensors"}).args.model_name, "m");

    EXPECT_EQ(parse({"--help"}).status, ParseStatus::Help);
    EXPECT_EQ(parse({"--version"}).status, ParseStatus::Version);
    EXPECT_NE(serve_usage("serve_gpt2cu").find("--max-batch"), std::string::npos);
}

TEST(ServeArgs, BadValuesOneLineNamingTheFlag) {
    expect_rejected({}, "flag -e: a model is required");
    expect_rejected({"-e"}, "flag -e: needs a value");
    expect_rejected({"-e", "m", "--port", "65536"}, "flag --port");
    expect_rejected({"-e", "m", "--port", "x"}, "flag --port");
    expect_rejected({"-e", "m", "--max-batch", "0"}, "flag --max-batch");
    expect_rejected({"-e", "m", "--max-context", "1"}, "flag --max-context");
    expect_rejected({"-e", "m", "--max-queue", "-1"}, "flag --max-queue");
    expect_rejected({"-e", "m", "--prefill-budget", "0"}, "flag --prefill-budget");
    expect_rejected({"-e", "m", "--prefill-rows", "0"}, "flag --prefill-rows");
    expect_rejected({"-e", "m", "--prefill-wait", "-1"}, "flag --prefill-wait");
    expect_rejected({"-e", "m", "--prefill-wait", "1001"}, "flag --prefill-wait");
    expect_rejected({"-e", "m", "--steps-in-flight", "3"}, "flag --steps-in-flight");
    expect_rejected({"-e", "m", "--prefill-chunk", "-1"}, "flag --prefill-chunk");
    expect_rejected({"-e", "m", "--max-body", "10"}, "flag --max-body");
    expect_rejected({"-e", "m", "-g", "0"}, "flag -g");
    expect_rejected({"-e", "m", "-n", "8"}, "flag -n: the number of new tokens is -g");
    expect_rejected({"-e", "m", "-st", "2.5"}, "flag -st");
    expect_rejected({"-e", "m", "-sk", "-1"}, "flag -sk");
    expect_rejected({"-e", "m", "-sp", "0"}, "flag -sp");
    expect_rejected({"-e", "m", "-seed", "-3"}, "flag -seed");
    expect_rejected({"-e", "m", "--host", ""}, "flag --host");
    expect_rejected({"-e", "m", "--bogus", "1"}, "unknown flag --bogus");
}

}  // namespace
