// Checkpoint files in an output directory (llmc/checkpoint/checkpoint_files.h): names, pairs that belong together, whose run
// they are, keeping the newest, and what crashed writers leave behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "llmc/checkpoint/checkpoint_files.h"
#include "tests/lib/file_test_helpers.h"

namespace {

constexpr uint64_t kRunA = 0xaaaa0000aaaa0001ull, kRunB = 0xbbbb0000bbbb0002ull;

void touch(const std::string& path) { write_bytes(path, {1, 2, 3}); }

// A checkpoint of `run` at `step` as the trainer writes it: model bytes, then a state holding their fingerprint.
void write_pair(const std::string& dir, int step, uint64_t run, unsigned char model_byte) {
    write_bytes(checkpoint_model_path(dir, step), std::vector<unsigned char>(100, model_byte));
    RunState s;
    s.step = step;
    s.B = s.T = s.num_processes = s.grad_accum_steps = 1;
    s.run_id = run;
    s.model_hash = file_hash64(checkpoint_model_path(dir, step));
    write_run_state(checkpoint_state_path(dir, step), s);
}

bool contains(const std::vector<std::string>& notes, const std::string& text) {
    return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) { return n.find(text) != n.npos; });
}

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

TEST(CheckpointFiles, FileFingerprint) {
    const std::string a = scratch_path("fp_a.bin"), b = scratch_path("fp_b.bin"), e = scratch_path("fp_e.bin");
    std::vector<unsigned char> bytes(1000003);
    for (size_t i = 0; i < bytes.size(); i++) bytes[i] = (unsigned char)(i * 7 + (i >> 9));
    write_bytes(a, bytes);
    bytes[777777] ^= 1;
    write_bytes(b, bytes);
    write_bytes(e, {});
    EXPECT_EQ(file_hash64(a), file_hash64(a));
    EXPECT_NE(file_hash64(a), file_hash64(b));
    EXPECT_NE(file_hash64(e), 0u);
    EXPECT_FILE_ERROR([&] { file_hash64(scratch_path("fp_missing.bin")); }, scratch_path("fp_missing.bin"), "cannot open");
}

TEST(CheckpointFiles, LatestConsistentPairAndKeepLastK) {
    const std::string dir = scratch_path("ckpt");
    std::vector<std::string> notes;
    EXPECT_EQ(latest_checkpoint(dir, &notes), -1);  // missing directory: none
    ensure_directory(dir);
    ensure_directory(dir);  // idempotent
    EXPECT_EQ(latest_checkpoint(dir, &notes), -1);
    for (int s : {10, 20, 30, 40}) write_pair(dir, s, kRunA, (unsigned char)s);
    touch(checkpoint_model_path(dir, 50));           // model written, state not yet: incomplete
    touch(checkpoint_state_path(dir, 60));           // state without a model: incomplete
    touch(checkpoint_model_path(dir, 70) + ".tmp.99");  // half-written temporary
    EXPECT_EQ(list_complete_checkpoints(dir), (std::vector<int>{10, 20, 30, 40}));
    EXPECT_EQ(latest_checkpoint(dir, &notes), 40);
    EXPECT_TRUE(notes.empty());

    remove_old_checkpoints(dir, 0, kRunA);  // keep all
    EXPECT_EQ(list_complete_checkpoints(dir).size(), 4u);
    remove_old_checkpoints(dir, 2, kRunA);
    EXPECT_EQ(list_complete_checkpoints(dir), (std::vector<int>{30, 40}));
    EXPECT_FALSE(file_exists(checkpoint_model_path(dir, 10)));
    EXPECT_FALSE(file_exists(checkpoint_state_path(dir, 20)));
    EXPECT_TRUE(file_exists(checkpoint_model_path(dir, 50)));  // incomplete pairs are not counted or touched
    remove_old_checkpoints(dir, 5, kRunA);
    EXPECT_EQ(list_complete_checkpoints(dir), (std::vector<int>{30, 40}));
}

// Regression: -nk sorted another run's steps together with this run's and could delete the checkpoint just written.
TEST(CheckpointFiles, KeepNewestDeletesOnlyThisRunsCheckpoints) {
    const std::string dir = scratch_path("two_runs");
    ensure_directory(dir);
    for (int s : {100, 200, 300}) write_pair(dir, s, kRunA, 1);
    write_pair(dir, 20, kRunB, 2);  // a new run, just saved its first checkpoint
    remove_old_checkpoints(dir, 1, kRunB);
    EXPECT_EQ(list_complete_checkpoints(dir), (std::vector<int>{20, 100, 200, 300}));
    write_pair(dir, 40, kRunB, 3);
    remove_old_checkpoints(dir, 1, kRunB);
    EXPECT_EQ(list_complete_checkpoints(dir), (std::vector<int>{40, 100, 200, 300}));
}

// Regression: a crash between writing a model file and its state left another run's state beside it, and the
// mixed pair loaded. The state's fingerprint of its model file rules it out.
TEST(CheckpointFiles, APairFromTwoRunsIsNotACheckpoint) {
    const std::string dir = scratch_path("mixed");
    ensure_directory(dir);
    write_pair(dir, 100, kRunA, 1);
    write_pair(dir, 200, kRunA, 2);
    write_bytes(checkpoint_model_path(dir, 200), std::vector<unsigned char>(100, 9));  // run B's model, then a crash
    std::vector<std::string> notes;
    EXPECT_EQ(latest_checkpoint(dir, &notes), 100);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_TRUE(contains(notes, "skipping checkpoint 200: " + dir + "/model_00000200.bin is not the model file its "
                                "state was written with")) << notes[0];
    touch(checkpoint_state_path(dir, 300));  // an unreadable state
    write_bytes(checkpoint_model_path(dir, 300), {1});
    notes.clear();
    EXPECT_EQ(latest_checkpoint(dir, &notes), 100);
    EXPECT_TRUE(contains(notes, "skipping checkpoint 300: " + dir + "/state_00000300.bin"));
}

TEST(CheckpointFiles, StaleTemporariesOfCrashedWriters) {
    const std::string dir = scratch_path("tmp_files");
    ensure_directory(dir);
    const std::string dead = dir + "/model_00000040.bin.tmp.999999999";  // above any pid_max: no such process
    const std::string alive = dir + "/state_00000040.bin.tmp." + std::to_string((long)getpid());
    const std::string other = dir + "/notes.tmp.txt";
    for (const std::string& p : {dead, alive, other}) touch(p);
    const std::vector<std::string> notes = clean_stale_temporaries(dir);
    EXPECT_FALSE(file_exists(dead));
    EXPECT_TRUE(file_exists(alive));
    EXPECT_TRUE(file_exists(other));
    ASSERT_EQ(notes.size(), 2u);
    EXPECT_TRUE(contains(notes, "removed " + dead + ", left by a writer that crashed (process 999999999 is gone)"));
    EXPECT_TRUE(contains(notes, "leaving " + alive + ": process"));
}

// A writer killed in the middle of a checkpoint (a rank the watchdog stops, kill -9) leaves a temporary file and
// never a truncated checkpoint: -y 1 resumes the pair before, and the next run removes the temporary, also while
// the killed writer is still an unreaped zombie.
TEST(CheckpointFiles, AWriterKilledMidWriteLeavesOnlyATemporary) {
    const std::string dir = scratch_path("killed_writer");
    ensure_directory(dir);
    write_pair(dir, 2, kRunA, 2);
    write_bytes(checkpoint_model_path(dir, 3), std::vector<unsigned char>(100, 3));  // the model of step 3 is in place
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    const pid_t writer = fork();
    if (writer == 0) {  // writes half of step 3's state, then waits to be killed
        AtomicOutputFile out(checkpoint_state_path(dir, 3));
        out.write("half", 4);
        if (write(ready[1], "x", 1) != 1) _exit(2);
        for (;;) pause();
    }
    char c;
    ASSERT_EQ(read(ready[0], &c, 1), 1);
    close(ready[0]);
    close(ready[1]);
    ASSERT_EQ(kill(writer, SIGKILL), 0);
    const std::string tmp = checkpoint_state_path(dir, 3) + ".tmp." + std::to_string((long)writer);
    EXPECT_TRUE(file_exists(tmp));
    EXPECT_FALSE(file_exists(checkpoint_state_path(dir, 3)));
    std::vector<std::string> notes;
    EXPECT_EQ(latest_checkpoint(dir, &notes), 2);
    EXPECT_TRUE(notes.empty());
    for (int i = 0; i < 500 && process_alive(writer); i++) usleep(10000);  // a zombie until reaped below
    notes = clean_stale_temporaries(dir);
    EXPECT_FALSE(file_exists(tmp));
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_TRUE(contains(notes, "removed " + tmp + ", left by a writer that crashed")) << notes[0];
    int status = 0;
    waitpid(writer, &status, 0);
    EXPECT_EQ(latest_checkpoint(dir, &notes), 2);
}

// Regression: a fresh run into a directory holding another run's checkpoints mixed its files with them.
TEST(CheckpointFiles, AFreshRunMayNotStartAmongAnotherRunsCheckpoints) {
    const std::string dir = scratch_path("fresh");
    EXPECT_EQ(fresh_run_conflict(dir), "");  // missing: fine
    ensure_directory(dir);
    touch(dir + "/main.log");
    touch(checkpoint_model_path(dir, 5));  // an orphan model file is not a checkpoint
    EXPECT_EQ(fresh_run_conflict(dir), "");
    write_pair(dir, 100, kRunA, 1);
    write_pair(dir, 300, kRunA, 1);
    EXPECT_EQ(fresh_run_conflict(dir), "flag -o " + dir + ": holds checkpoints of another run (steps 100..300); "
                                       "resume it with -y 1, write to another -o, or delete them and start over with "
                                       "-ow 1");
    EXPECT_NE(new_run_id(), new_run_id());
    EXPECT_EQ(run_id_hex(0x00ab), "00000000000000ab");
}

TEST(CheckpointFiles, RemoveAllForAFreshRun) {
    const std::string dir = scratch_path("overwrite");
    ensure_directory(dir);
    write_pair(dir, 10, kRunA, 1);
    touch(checkpoint_model_path(dir, 20));
    touch(dir + "/main.log");
    EXPECT_EQ(remove_all_checkpoints(dir), 3);
    EXPECT_TRUE(list_directory(dir) == std::vector<std::string>{"main.log"});
}

TEST(CheckpointFiles, DirectoryErrors) {
    const std::string file = scratch_path("plainfile");
    touch(file);
    EXPECT_FILE_ERROR([&] { ensure_directory(file); }, file, "not a directory");
    EXPECT_FILE_ERROR([&] { list_complete_checkpoints(file); }, file, "cannot list directory");
}

// Where a run may write, told before it writes anything: the checks make nothing.
TEST(CheckpointFiles, WritableBeforeWriting) {
    const std::string file = scratch_path("a_plain_file"), dir = scratch_path("a_dir");
    touch(file);
    ensure_directory(dir);
    EXPECT_EQ(directory_unwritable_reason(dir), "");
    EXPECT_EQ(directory_unwritable_reason(dir + "/"), "");
    EXPECT_EQ(directory_unwritable_reason(dir + "/new"), "");  // one level is made later
    EXPECT_FALSE(path_exists(dir + "/new"));
    EXPECT_EQ(directory_unwritable_reason(file), "exists and is not a directory");
    EXPECT_NE(directory_unwritable_reason(file + "/x").find("part of its path is a file"), std::string::npos);
    EXPECT_NE(directory_unwritable_reason(dir + "/no/new").find("nor does the directory it would be made in"),
              std::string::npos);
    EXPECT_EQ(file_unwritable_reason(dir + "/picks.tsv"), "");
    EXPECT_EQ(file_unwritable_reason(dir), "is a directory");
    EXPECT_EQ(file_unwritable_reason(dir + "/no/picks.tsv"), "its directory " + dir + "/no does not exist");
}
