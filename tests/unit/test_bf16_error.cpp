// PyTorch's bf16 error record (reference/bf16_error.h): what test_gpt2cu's BF16 bounds are derived from.
#include <gtest/gtest.h>

#include "reference/bf16_error.h"
#include "tests/lib/file_test_helpers.h"

namespace {

const char* kNames[] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                        "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

std::string record(int steps, const std::string& extra = "") {
    std::string s = "# comment\ngpt2_bf16_error 1\nsteps " + std::to_string(steps) + "\n";
    s += "logits_rel_l2 1.17e-02 3.5e-03\nloss_abs 2.0e-04 8.0e-04\n";
    for (int i = 0; i < 16; i++) s += std::string("grad_rel_l2 ") + kNames[i] + " " + std::to_string(0.01 * (i + 1)) + " 0.005\n";
    for (int i = 0; i < steps; i++) s += "trajectory_abs " + std::to_string(i) + " 2.4e-02 1.0e-03\n";
    return s + extra;
}

std::string write_record(const std::string& name, const std::string& text) {
    const std::string path = scratch_path(name);
    write_bytes(path, std::vector<unsigned char>(text.begin(), text.end()));
    return path;
}

}  // namespace

TEST(Bf16Error, ReadsBothColumnsAndTheWorse) {
    const PyTorchBf16Error e = read_pytorch_bf16_error(write_record("ok.txt", record(3)));
    EXPECT_DOUBLE_EQ(e.logits_rel_l2.all_bf16, (double)1.17e-02f);
    EXPECT_DOUBLE_EQ(e.logits_rel_l2.worst(), (double)1.17e-02f);
    EXPECT_DOUBLE_EQ(e.loss_abs.worst(), (double)8.0e-04f);
    EXPECT_DOUBLE_EQ(e.grad_rel_l2[15].all_bf16, (double)0.16f);
    ASSERT_EQ(e.trajectory_abs.size(), 3u);
    EXPECT_DOUBLE_EQ(e.trajectory_abs[2].worst(), (double)2.4e-02f);
}

TEST(Bf16Error, MalformedRecordsAreOneLineErrors) {
    struct Case { std::string text, problem; };
    std::string cut = record(2);
    cut.erase(cut.rfind("trajectory_abs"));  // the last step's line is missing
    std::string swapped = record(2);
    swapped.replace(swapped.find("grad_rel_l2 wpe"), 15, "grad_rel_l2 wtf");
    const Case cases[] = {
        {"", "empty"},
        {"gpt2_bf16_error 2\n", "not a bf16 error record"},
        {record(2, "trajectory_abs 2 1 1\n"), "expected trajectory step 2"},
        {record(2, "logits_rel_l2 1 1\n"), "unexpected or repeated line 'logits_rel_l2'"},
        {swapped, "line 7: expected the gradient of wpe"},
        {cut, "incomplete"},
        {"gpt2_bf16_error 1\nlogits_rel_l2 -1 0\n", "errors cannot be negative"},
        {"gpt2_bf16_error 1\nlogits_rel_l2 1e39 0\n", "outside the float range"},
        {"gpt2_bf16_error 1\nlogits_rel_l2 0.1\n", "expected two values"},
        {std::string("gpt2_bf16_error 1\nsteps 1\x1b[2J\n"), "control character"},
    };
    int i = 0;
    for (const Case& c : cases) {
        const std::string path = write_record("bad" + std::to_string(i++) + ".txt", c.text);
        EXPECT_FILE_ERROR([&] { read_pytorch_bf16_error(path); }, path, c.problem);
    }
}
