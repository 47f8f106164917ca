// Reads B x T training batches from token shards (llmc/formats/data_shard.h), for one rank of a
// data-parallel job.
//
// Shards: the files matching a glob pattern, sorted by name. Each shard is cut into global windows of one
// optimizer step's tokens, num_processes*micro_steps*B*T + 1; window k starts at token k times that, so
// consecutive windows share only the one boundary token (the last target of window k is the first input of
// window k+1). A window holds num_processes*micro_steps slots of B*T + 1 tokens: micro-step m of rank r reads
// slot m*num_processes + r (inputs are the first B*T tokens, targets the same shifted by one). Ranks and
// micro-steps therefore see disjoint inputs and together cover the whole window, and which tokens a step
// trains on depends only on the tokens per step: 2 GPUs x 1 micro-step and 1 GPU x 2 micro-steps read the
// same windows in the same order, shuffled or not, which is what lets a run resume on another GPU count.
// The tail of a shard shorter than a full global window is skipped; a shard without one full window is
// an error naming it (lower B, T or the process count, or merge shards).
//
// One epoch visits every window of every shard once. Without shuffling: shards in name order, windows
// in file order. With shuffling: each epoch permutes the shard order and, inside each shard, the window
// order, with llmc/core/rand.h generators derived from (seed, epoch, shard), so every rank (same seed) makes
// the same permutation and results are identical on every platform.
//
// Use: call next_batch() before each step; it loads the next batch into inputs()/targets().
// The first call after construction or reset() loads the first batch of epoch 0.
// get_state()/set_state() save and restore the position for checkpoints, between optimizer steps (after a
// step's last micro-batch): after set_state(s), inputs() holds the same batch as when s was taken and
// next_batch() continues exactly as the original would. A state restores into a loader of another B,
// process count or micro-step count as long as the tokens per step (and T and the shards) are the same.
#pragma once

#include <glob.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/core/utils.h"
#include "llmc/formats/data_shard.h"
#include "llmc/formats/run_state.h"

class DataLoader {
public:
    // vocab_size: tokens >= vocab_size are a FileError naming the shard and offset; -1 = no check.
    // micro_steps: next_batch() calls per window (the trainer's gradient-accumulation steps).
    DataLoader(const std::string& glob_pattern, int B, int T, int process_rank, int num_processes, bool shuffle,
               uint64_t seed, int vocab_size, int micro_steps = 1)
        : pattern_(glob_pattern), B_(B), T_(T), rank_(process_rank), nproc_(num_processes), micro_steps_(micro_steps),
          shuffle_(shuffle), seed_(seed), vocab_size_(vocab_size) {
        if (B < 1 || T < 1 || micro_steps < 1) throw std::invalid_argument("DataLoader: B, T and micro_steps must be positive");
        if (num_processes < 1 || process_rank < 0 || process_rank >= num_processes) {
            throw std::invalid_argument("DataLoader: need 0 <= process_rank < num_processes");
        }
        if (vocab_size == 0 || vocab_size < -1) throw std::invalid_argument("DataLoader: vocab_size must be > 0 or -1");
        stride_ = (int64_t)num_processes * micro_steps * B * T;
        find_shards();
        for (const std::string& path : shards_) {
            const int64_t n = read_shard_header(path);
            const int64_t windows = (n - 1) / stride_;
            if (windows < 1) {
                file_error(path, "has %lld tokens, fewer than one global window of %lld (processes %d x micro-steps %d x B "
                           "%d x T %d + 1: one optimizer step; lower -d, or merge shards)", (long long)n,
                           (long long)(stride_ + 1), num_processes, micro_steps, B, T);
            }
            windows_.push_back(windows);
            total_windows_ += windows;
        }
        const size_t BT = (size_t)B * T;
        buffer_.resize(BT + 1);
        inputs_.resize(BT);
        targets_.resize(BT);
        reset();
    }

    // Back to before the first batch of epoch 0.
    void reset() {
        epoch_ = 0;
        shard_pos_ = 0;
        window_pos_ = 0;
        micro_ = 0;
        started_ = false;
    }

    // Loads the next batch. Returns true when that batch starts a new epoch (not for the very first batch).
    bool next_batch() {
        bool wrapped = false;
        if (!started_) {
            started_ = true;
            micro_ = 0;
        } else if (++micro_ == micro_steps_) {  // the window is done: the next one
            micro_ = 0;
            if (++window_pos_ == windows_[current_shard()]) {
                window_pos_ = 0;
                if (++shard_pos_ == (int64_t)shards_.size()) {
                    shard_pos_ = 0;
                    epoch_++;
                    wrapped = true;
                }
            }
        }
        load();
        return wrapped;
    }

    const int* inputs() const { require_started(); return inputs_.data(); }
    const int* targets() const { require_started(); return targets_.data(); }
    // next_batch() calls per epoch: windows x micro-steps (a training run's steps per epoch are the windows)
    size_t num_batches_per_epoch() const { return (size_t)(total_windows_ * micro_steps_); }
    int epoch() const { return (int)epoch_; }
    size_t num_shards() const { return shards_.size(); }
    const std::vector<std::string>& shard_paths() const { return shards_; }
    // Where the current batch came from (for logs and tests).
    const std::string& current_shard_path() const { return shards_[current_shard()]; }
    int64_t current_token_offset() const { return current_offset_; }

    DataLoaderState get_state() const {
        if (started_ && micro_ != micro_steps_ - 1)
            throw std::logic_error("DataLoader: get_state() between optimizer steps only (after a window's last micro-batch)");
        DataLoaderState s;
        s.epoch = epoch_;
        s.shard_pos = shard_pos_;
        s.window_pos = window_pos_;
        s.started = started_ ? 1 : 0;
        s.seed = seed_;
        s.shuffle = shuffle_ ? 1 : 0;
        s.B = B_;
        s.T = T_;
        s.process_rank = rank_;
        s.num_processes = nproc_;
        s.num_shards = (int64_t)shards_.size();
        s.num_windows = total_windows_;
        s.micro_steps = micro_steps_;
        return s;
    }

    // Restores a position; the seed and shuffle flag are taken from the state so a resumed run
    // continues the same sequence. T, the tokens per window and the shard set must match; B, the process
    // count and the micro-steps may differ (the windows are the same).
    void set_state(const DataLoaderState& s) {
        const bool same_window = s.B >= 1 && s.num_processes >= 1 && s.micro_steps >= 1 && s.B <= stride_ &&
                                 s.num_processes <= stride_ && s.micro_steps <= stride_ &&  // no overflow below
                                 (__int128)s.B * s.num_processes * s.micro_steps * T_ == stride_;
        if (s.T != T_ || !same_window ||
            s.num_shards != (int64_t)shards_.size() || s.num_windows != total_windows_) {
            throw std::invalid_argument(
                pattern_ + ": saved data loader state does not match (T, tokens per step or shards differ)");
        }
        if (s.epoch < 0 || s.shard_pos < 0 || s.shard_pos >= s.num_shards || s.window_pos < 0) {
            throw std::invalid_argument(pattern_ + ": saved data loader state has an invalid position");
        }
        seed_ = s.seed;
        shuffle_ = s.shuffle != 0;
        epoch_ = s.epoch;
        shard_pos_ = s.shard_pos;
        window_pos_ = s.window_pos;
        started_ = s.started != 0;
        micro_ = micro_steps_ - 1;  // saved between steps: the window's last micro-batch is the current one
        order_epoch_ = -1;  // permutations depend on the seed: recompute
        window_order_shard_ = -1;
        if (window_pos_ >= windows_[current_shard()]) {
            throw std::invalid_argument(pattern_ + ": saved data loader state has an invalid position");
        }
        if (started_) load();
    }

private:
    void find_shards() {
        glob_t g;
        int rc = glob(pattern_.c_str(), 0, nullptr, &g);
        if (rc == 0) {
            for (size_t i = 0; i < g.gl_pathc; i++) shards_.push_back(g.gl_pathv[i]);
        }
        globfree(&g);
        if (rc == GLOB_NOMATCH || shards_.empty()) file_error(pattern_, "no data shard matches this pattern");
        if (rc != 0) file_error(pattern_, "cannot expand the pattern (glob error %d)", rc);
        std::sort(shards_.begin(), shards_.end());  // byte order, independent of the locale
    }

    void require_started() const {
        if (!started_) throw std::logic_error("DataLoader: call next_batch() before reading a batch");
    }

    // Shard index (into shards_) at shard_pos_ of the current epoch.
    int64_t current_shard() const {
        if (!shuffle_) return shard_pos_;
        if (order_epoch_ != epoch_) {
            Rng rng(mix_seed(seed_, 2 * (uint64_t)epoch_));
            shard_order_ = random_permutation(rng, shards_.size());
            order_epoch_ = epoch_;
            window_order_shard_ = -1;
        }
        return shard_order_[shard_pos_];
    }

    int64_t current_window() const {
        if (!shuffle_) return window_pos_;
        const int64_t shard = current_shard();
        if (window_order_shard_ != shard || window_order_epoch_ != epoch_) {
            Rng rng(mix_seed(mix_seed(seed_, 2 * (uint64_t)epoch_ + 1), (uint64_t)shard));
            window_order_ = random_permutation(rng, (size_t)windows_[shard]);
            window_order_shard_ = shard;
            window_order_epoch_ = epoch_;
        }
        return window_order_[window_pos_];
    }

    void load() {
        const int64_t shard = current_shard();
        const int64_t window = current_window();
        if (open_shard_ != shard) {
            reader_.reset();
            reader_ = std::make_unique<ShardReader>(shards_[shard]);
            open_shard_ = shard;
        }
        const int64_t BT = (int64_t)B_ * T_;
        current_offset_ = window * stride_ + ((int64_t)micro_ * nproc_ + rank_) * BT;
        reader_->read(current_offset_, BT + 1, buffer_.data());
        if (vocab_size_ > 0) {
            for (int64_t i = 0; i <= BT; i++) {
                if (buffer_[i] >= vocab_size_) {
                    file_error(shards_[shard], "token %d at token offset %lld is >= vocab_size %d", buffer_[i],
                               (long long)(current_offset_ + i), vocab_size_);
                }
            }
        }
        for (int64_t i = 0; i < BT; i++) {
            inputs_[i] = buffer_[i];
            targets_[i] = buffer_[i + 1];
        }
    }

    std::string pattern_;
    int B_, T_, rank_, nproc_, micro_steps_;
    bool shuffle_;
    uint64_t seed_;
    int vocab_size_;
    int64_t stride_ = 0;  // tokens between global windows: num_processes * micro_steps * B * T

    std::vector<std::string> shards_;
    std::vector<int64_t> windows_;  // full global windows per shard
    int64_t total_windows_ = 0;

    int64_t epoch_ = 0, shard_pos_ = 0, window_pos_ = 0;
    int micro_ = 0;  // slot of the current window: micro_ * nproc_ + rank_
    bool started_ = false;
    int64_t current_offset_ = 0;

    // Permutation caches (recomputed from seed, epoch, shard; never part of the state).
    mutable std::vector<int64_t> shard_order_, window_order_;
    mutable int64_t order_epoch_ = -1, window_order_shard_ = -1, window_order_epoch_ = -1;

    std::unique_ptr<ShardReader> reader_;
    int64_t open_shard_ = -1;
    std::vector<uint16_t> buffer_;
    std::vector<int> inputs_, targets_;
};
