// Reference trajectory text file (reference/reference_trajectory.h).
#include <gtest/gtest.h>

#include "reference/reference_trajectory.h"
#include "tests/lib/file_test_helpers.h"

namespace {

ReferenceTrajectory sample_trajectory() {
    ReferenceTrajectory t;
    t.lr = 1e-3f;
    t.beta1 = 0.9f;
    t.beta2 = 0.95f;
    t.eps = 1e-8f;
    t.weight_decay = 0.1f;
    t.losses = {7.44236040f, 6.81224203f, 6.29927349f, 0.1f / 3.0f};
    return t;
}

std::string text_of(const std::vector<unsigned char>& b) { return std::string(b.begin(), b.end()); }

// Writes a valid file, replaces `from` by `to` in its text (must occur), returns the new file's path.
std::string edited(const std::string& name, const std::string& from, const std::string& to) {
    std::string path = scratch_path(name);
    write_reference_trajectory(path, sample_trajectory());
    std::string s = text_of(read_bytes(path));
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << "'" << from << "' not in:\n" << s;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    write_bytes(path, std::vector<unsigned char>(s.begin(), s.end()));
    return path;
}

}  // namespace

TEST(ReferenceTrajectory, RoundTripIsExact) {
    std::string path = scratch_path("t.txt");
    ReferenceTrajectory t = sample_trajectory();
    write_reference_trajectory(path, t);
    ReferenceTrajectory r = read_reference_trajectory(path);
    EXPECT_EQ(r.lr, t.lr);
    EXPECT_EQ(r.beta1, t.beta1);
    EXPECT_EQ(r.beta2, t.beta2);
    EXPECT_EQ(r.eps, t.eps);
    EXPECT_EQ(r.weight_decay, t.weight_decay);
    ASSERT_EQ(r.losses.size(), t.losses.size());
    for (size_t i = 0; i < t.losses.size(); i++) EXPECT_EQ(r.losses[i], t.losses[i]) << i;  // bit-exact floats
}

TEST(ReferenceTrajectory, ReadsTheCommittedFixture) {
    ReferenceTrajectory r = read_reference_trajectory("tests/fixtures/tiny_trajectory.txt");
    EXPECT_EQ(r.losses.size(), 10u);
    EXPECT_GT(r.lr, 0.0f);
}

TEST(ReferenceTrajectory, MissingFile) {
    std::string path = scratch_path("absent.txt");
    EXPECT_FILE_ERROR([&] { read_reference_trajectory(path); }, path, "cannot open");
}

TEST(ReferenceTrajectory, WrongFormatName) {
    std::string path = edited("name.txt", "gpt2_reference_trajectory 1", "gpt2_something 1");
    EXPECT_FILE_ERROR([&] { read_reference_trajectory(path); }, path, "not a reference trajectory");
}

TEST(ReferenceTrajectory, WrongVersion) {
    std::string path = edited("version.txt", "gpt2_reference_trajectory 1", "gpt2_reference_trajectory 7");
    EXPECT_FILE_ERROR([&] { read_reference_trajectory(path); }, path, "unsupported trajectory version 7");
}

TEST(ReferenceTrajectory, EveryOptimizerSettingRequired) {
    for (const char* key : {"lr ", "beta1 ", "beta2 ", "eps ", "weight_decay "}) {
        std::string path = edited(std::string("missing_") + key, std::string("\n") + key, "\n# ");
        std::string name(key);
        name.pop_back();
        EXPECT_FILE_ERROR([&] { read_reference_trajectory(path); }, path, "missing '" + name + "'");
    }
}

TEST(ReferenceTrajectory, BadNumbers) {
    std::string p1 = edited("nan.txt", "lr 0.00100000005", "lr nan");
    EXPECT_FILE_ERROR([&] { read_reference_trajectory(p1); }, p1, "line 6: lr: 'nan' is not a finite number");
    std::string p2 = edited("junk.txt", "beta2 0.949999988", "beta2 0.95x");
    EXPECT_FILE_ERROR([&] { read_reference_trajectory(p2); }, p2, "is not a finite number");
    std::string p3 = edited("range.txt", "beta1 0.899999976", "beta1 1.5");
    EXPECT_FILE_ERROR([&] { read_reference_trajectory(p3); }, p3, "optimizer settings out of range");
    std::string p4 = edited("steps.txt", "steps 4", "steps four");
    EXPECT_FILE_ERROR([&] { read_reference_trajectory(p4); }, p4, "is not an integer");
}

TEST(ReferenceTrajectory, LossLines) {
    std::string p1 = edited("truncated.txt", "loss 3 ", "# loss 3 ");
    EXPECT_FILE_ERROR([&] { read_reference_trajectory(p1); }, p1, "has 3 loss lines but steps = 4");
    std::string p2 = edited("order.txt", "loss 1 ", "loss 2 ");
    EXPECT_FILE_ERROR([&] { read_reference_trajectory(p2); }, p2, "expected step 1");
    std::string p3 = edited("extra.txt", "steps 4", "steps 3");
    EXPECT_FILE_ERROR([&] { read_reference_trajectory(p3); }, p3, "loss for step 3 but steps = 3");
    std::string p4 = edited("unknown.txt", "\neps ", "\nepsilon ");
    EXPECT_FILE_ERROR([&] { read_reference_trajectory(p4); }, p4, "unknown key 'epsilon'");
}

TEST(ReferenceTrajectory, EmptyFile) {
    std::string path = scratch_path("empty.txt");
    write_bytes(path, {});
    EXPECT_FILE_ERROR([&] { read_reference_trajectory(path); }, path, "empty");
}

// Edits of a valid file that must be rejected: (file name, text replaced, replacement, expected problem).
struct BadEdit {
    const char* name;
    std::string from, to, problem;
};

void expect_rejected(const std::vector<BadEdit>& edits) {
    for (const BadEdit& e : edits) {
        std::string path = edited(e.name, e.from, e.to);
        EXPECT_FILE_ERROR([&] { read_reference_trajectory(path); }, path, e.problem);
    }
}

// A value beyond float's range must not become inf (or 0) on the way from the double strtod returns.
TEST(ReferenceTrajectory, ValuesOutsideFloatRange) {
    expect_rejected({
        {"overflow.txt", "loss 2 6.29927349", "loss 2 1e39", "line 13: loss: '1e39' is outside the float range"},
        {"overflow_neg.txt", "lr 0.00100000005", "lr -3.5e38", "lr: '-3.5e38' is outside the float range"},
        {"underflow.txt", "eps 9.99999994e-09", "eps 1e-50", "eps: '1e-50' is outside the float range"},
        {"double_overflow.txt", "beta1 0.899999976", "beta1 1e400", "beta1: '1e400' is outside the float range"},
    });
    // The largest float (written with 9 digits, so a little above FLT_MAX) is fine.
    std::string ok = edited("max.txt", "loss 2 6.29927349", "loss 2 3.40282347e38");
    EXPECT_EQ(read_reference_trajectory(ok).losses[2], 3.40282347e38f);
}

// A NUL (or any control byte) must not silently end a number or a line: the file is ASCII text.
TEST(ReferenceTrajectory, ControlBytesAreRejected) {
    expect_rejected({
        {"nul.txt", "loss 1 6.81224203", std::string("loss 1 6.8\0" "1224203", 17), "line 12, column 11: byte 0x00 (NUL)"},
        {"nul_end.txt", "steps 4", std::string("steps 4\0", 8), "line 5, column 8: byte 0x00 (NUL)"},
        {"esc.txt", "\neps ", "\n\x1b[2Jeps ", "byte 0x1B is not text"},
        {"high.txt", "\neps ", "\n\xc2\x9b" "eps ", "byte 0xC2 is not ASCII"},
    });
    // Comments may hold any UTF-8 text, blank lines may hold tabs, CRLF line ends are fine.
    std::string ok = edited("comment.txt", "\neps ", "\n# caf\xc3\xa9 \t\r\n\t\r\neps ");
    EXPECT_EQ(read_reference_trajectory(ok).losses.size(), 4u);
}
