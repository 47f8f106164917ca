// Generation flags and prompts (llmc/app/generate/generate_args.h): defaults, strict values, one-line errors naming the flag,
// the file and line, or the prompt.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "llmc/app/generate/generate_args.h"
#include "tests/lib/file_test_helpers.h"
#include "tests/lib/flag_test_helpers.h"

namespace {

using Parsed = ParsedFlags<GenerateArgs>;

Parsed parse(const std::vector<std::string>& flags) { return parse_flags<GenerateArgs>(parse_generate_args, "generate_gpt2cu", flags); }

// The flag must be rejected with a message naming it and containing `expect`.
void expect_rejected(const std::vector<std::string>& flags, const std::string& expect) {
    expect_rejected_flags(parse(flags), flags, expect);
}

void write_text(const std::string& path, const std::string& text) {
    write_bytes(path, std::vector<unsigned char>(text.begin(), text.end()));
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const FileError& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST(GenerateArgs, DefaultsAndEveryFlag) {
    Parsed p = parse({"-e", "model.bin", "-p", "Hello"});
    ASSERT_EQ(p.status, ParseStatus::Ok) << p.error;
    EXPECT_EQ(p.args.model, "model.bin");
    EXPECT_EQ(p.args.prompt, "Hello");
    EXPECT_EQ(p.args.new_tokens, 256);
    EXPECT_EQ(p.args.temperature, 1.0f);
    EXPECT_EQ(p.args.top_k, 0);
    EXPECT_EQ(p.args.top_p, 1.0f);
    EXPECT_EQ(p.args.seed, 1337u);
    EXPECT_EQ(p.args.vocab_dir, "data/cache/gpt2");

    p = parse({"-e", "hf_dir", "-pf", "prompts.txt", "-g", "64", "-st", "0", "-sk", "40", "-sp", "0.9", "-seed", "7",
               "--vocab-dir", "v", "--ids", "out.txt"});
    ASSERT_EQ(p.status, ParseStatus::Ok) << p.error;
    EXPECT_EQ(p.args.prompt_file, "prompts.txt");
    EXPECT_EQ(p.args.new_tokens, 64);
    EXPECT_EQ(p.args.temperature, 0.0f);
    EXPECT_EQ(p.args.top_k, 40);
    EXPECT_FLOAT_EQ(p.args.top_p, 0.9f);
    EXPECT_EQ(p.args.seed, 7u);
    EXPECT_EQ(p.args.vocab_dir, "v");
    EXPECT_EQ(p.args.ids_file, "out.txt");
    EXPECT_EQ(parse({"-h"}).status, ParseStatus::Help);
    EXPECT_EQ(parse({"-e", "m", "--version"}).status, ParseStatus::Version);
    EXPECT_NE(generate_usage("generate_gpt2cu").find("-sp <float>"), std::string::npos);
}

TEST(GenerateArgs, BadFlagsAreOneLineNamingTheFlag) {
    expect_rejected({"-p", "x"}, "flag -e: a model is required");
    expect_rejected({"-e", "m"}, "flag -p or -pf: a prompt is required");
    expect_rejected({"-e", "m", "-p", "x", "-pf", "f"}, "give one of them, not both");
    expect_rejected({"-e", "m", "-p", ""}, "flag -p: expected a prompt (it is empty)");
    expect_rejected({"-e", "m", "-p", "x", "-g", "0"}, "flag -g: expected an integer >= 1, got '0'");
    expect_rejected({"-e", "m", "-p", "x", "-g", "12x"}, "flag -g");
    expect_rejected({"-e", "m", "-p", "x", "-n", "8"}, "flag -n: the number of new tokens is -g (as in the trainers");
    expect_rejected({"-e", "m", "-p", "x", "-st", "-1"}, "flag -st: expected a number >= 0");
    expect_rejected({"-e", "m", "-p", "x", "-st", "nan"}, "flag -st");
    expect_rejected({"-e", "m", "-p", "x", "-sk", "-3"}, "flag -sk");
    expect_rejected({"-e", "m", "-p", "x", "-sp", "0"}, "flag -sp: expected a number in (0, 1]");
    expect_rejected({"-e", "m", "-p", "x", "-sp", "1.5"}, "flag -sp");
    expect_rejected({"-e", "m", "-p", "x", "-seed", "-1"}, "flag -seed");
    expect_rejected({"-e", "m", "-p", "x", "-q", "1"}, "unknown flag -q");
    expect_rejected({"-e", "m", "-p"}, "flag -p: needs a value");
}

TEST(GenerateArgs, PromptFileLines) {
    GenerateArgs a;
    a.prompt_file = scratch_path("prompts.txt");
    write_text(a.prompt_file, "Once upon a time\r\nThe meaning of life is\nHello");  // CRLF, LF, no final end
    EXPECT_EQ(read_prompt_texts(a), (std::vector<std::string>{"Once upon a time", "The meaning of life is", "Hello"}));
    write_text(a.prompt_file, "one\n");
    EXPECT_EQ(read_prompt_texts(a), (std::vector<std::string>{"one"}));

    write_text(a.prompt_file, "");
    EXPECT_NE(error_of([&] { read_prompt_texts(a); }).find(a.prompt_file + ": is empty"), std::string::npos);
    write_text(a.prompt_file, "a\n\nb\n");
    EXPECT_NE(error_of([&] { read_prompt_texts(a); }).find("line 2 is empty"), std::string::npos);
    write_text(a.prompt_file, std::string("a\nb\0c\n", 6));
    EXPECT_NE(error_of([&] { read_prompt_texts(a); }).find("line 2 holds a NUL byte"), std::string::npos);
    a.prompt_file = scratch_path("missing.txt");
    EXPECT_NE(error_of([&] { read_prompt_texts(a); }).find("missing.txt"), std::string::npos);

    GenerateArgs single;
    single.prompt = "Hi";
    single.has_prompt = true;
    EXPECT_EQ(read_prompt_texts(single), (std::vector<std::string>{"Hi"}));
}

TEST(GenerateArgs, PromptsAgainstTheModel) {
    auto where = [](size_t i) { return "prompts.txt line " + std::to_string(i + 1); };
    // V = 100, context 8: room for min(-g, 8 - longest prompt) new tokens
    EXPECT_EQ(check_prompts({{1, 2, 3}, {4}}, 100, 8, 256, where), 5);
    EXPECT_EQ(check_prompts({{1, 2, 3}, {4}}, 100, 8, 2, where), 2);
    EXPECT_NE(error_of([&] { check_prompts({{1}, {}}, 100, 8, 4, where); }).find("prompts.txt line 2: the prompt encodes to no tokens"),
              std::string::npos);
    EXPECT_NE(error_of([&] { check_prompts({{1, 100}}, 100, 8, 4, where); }).find("token id 100 is outside the model's vocabulary (V = 100)"),
              std::string::npos);
    EXPECT_NE(error_of([&] { check_prompts({{1, -1}}, 100, 8, 4, where); }).find("token id -1"), std::string::npos);
    EXPECT_NE(error_of([&] { check_prompts({{1, 2, 3, 4, 5, 6, 7, 8}}, 100, 8, 4, where); })
                  .find("line 1: the prompt is 8 tokens, the model's context is 8: no room for a new token"),
              std::string::npos);
}
