// Checkpoint files in an output directory (llmc/checkpoint_files.h): names, complete pairs, keeping the newest.
#include <gtest/gtest.h>

#include "llmc/checkpoint_files.h"
#include "tests/file_test_helpers.h"

namespace {

void touch(const std::string& path) { write_bytes(path, {1, 2, 3}); }

}  // namespace

TEST(CheckpointFiles, Names) {
    EXPECT_EQ(checkpoint_model_path("out", 5), "out/model_00000005.bin");
    EXPECT_EQ(checkpoint_state_path("out", 12345678), "out/state_12345678.bin");
    EXPECT_EQ(checkpoint_step_of("model_00000042.bin", "model"), 42);
    EXPECT_EQ(checkpoint_step_of("state_00000042.bin", "model"), -1);
    EXPECT_EQ(checkpoint_step_of("model_0000042.bin", "model"), -1);
    EXPECT_EQ(checkpoint_step_of("model_00000042.bin.tmp.123", "model"), -1);
    EXPECT_EQ(checkpoint_step_of("model_0000004x.bin", "model"), -1);
}

TEST(CheckpointFiles, LatestCompletePairAndKeepLastK) {
    const std::string dir = scratch_path("ckpt");
    EXPECT_EQ(latest_checkpoint(dir), -1);  // missing directory: none
    ensure_directory(dir);
    ensure_directory(dir);  // idempotent
    EXPECT_EQ(latest_checkpoint(dir), -1);
    for (int s : {10, 20, 30, 40}) {
        touch(checkpoint_model_path(dir, s));
        touch(checkpoint_state_path(dir, s));
    }
    touch(checkpoint_model_path(dir, 50));           // model written, state not yet: incomplete
    touch(checkpoint_state_path(dir, 60));           // state without a model: incomplete
    touch(checkpoint_model_path(dir, 70) + ".tmp.99");  // half-written temporary
    EXPECT_EQ(list_complete_checkpoints(dir), (std::vector<int>{10, 20, 30, 40}));
    EXPECT_EQ(latest_checkpoint(dir), 40);

    remove_old_checkpoints(dir, 0);  // keep all
    EXPECT_EQ(list_complete_checkpoints(dir).size(), 4u);
    remove_old_checkpoints(dir, 2);
    EXPECT_EQ(list_complete_checkpoints(dir), (std::vector<int>{30, 40}));
    EXPECT_FALSE(file_exists(checkpoint_model_path(dir, 10)));
    EXPECT_FALSE(file_exists(checkpoint_state_path(dir, 20)));
    EXPECT_TRUE(file_exists(checkpoint_model_path(dir, 50)));  // incomplete pairs are not counted or touched
    remove_old_checkpoints(dir, 5);
    EXPECT_EQ(list_complete_checkpoints(dir), (std::vector<int>{30, 40}));
}

TEST(CheckpointFiles, DirectoryErrors) {
    const std::string file = scratch_path("plainfile");
    touch(file);
    EXPECT_FILE_ERROR([&] { ensure_directory(file); }, file, "not a directory");
    EXPECT_FILE_ERROR([&] { list_complete_checkpoints(file); }, file, "cannot list directory");
}
