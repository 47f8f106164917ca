// Everything besides the weights that a training run needs to continue bit-exactly from a checkpoint (the
// file that pairs with a model file: llmc/checkpoint/checkpoint_files.h names them, llmc/checkpoint/checkpoint.cuh writes and reads both).
//
// Run-state file (little-endian):
//   int32 header[256]: [0]=20241121 (magic), [1]=3 (version), [2]=step, [3]=B, [4]=T, [5]=num_processes,
//                      [6]=grad_accum_steps, [7]=sizeof(RngState), [8]=sizeof(DataLoaderState),
//                      [9]=optimizer bytes low 32 bits, [10]=high 32 bits,
//                      [11..12]=run id (low, high 32 bits): the run that wrote it, the same across its resumes,
//                      [13..14]=hash of the model file it pairs with (file_hash64, low, high),
//                      [15]=bytes of the FP8 section (version 3; 0: none, as in every file of a run without
//                      -fp8h, whose files are byte for byte what they were before the section existed); the rest zero.
//                      Version 1 files (no run id or model hash; both read as 0) are still read.
//                      Version 3: the data loaders' windows hold one optimizer step (all ranks and micro-steps;
//                      llmc/data/dataloader.h) and their records end with micro_steps; versions 1 and 2 had one window
//                      per micro-step and records without it (read with micro_steps 1: the same windows when
//                      grad_accum_steps is 1; the trainer refuses to resume them otherwise).
//   RngState sampler_rng; DataLoaderState train_loader; DataLoaderState val_loader;
//   optimizer state: an opaque blob from the model (fp32 master weights, AdamW m and v);
//   FP8 section: an opaque blob, FP8 delayed scaling's amax histories and scales (llmc/model/gpt2_fp8_delayed.cuh).
// The reader checks every header field and the exact file length.
// The data-loader states are rank 0's; other ranks restore them with their own rank (same positions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/core/utils.h"
#include "llmc/formats/file_header.h"

// A data loader's position (llmc/data/dataloader.h), as the run state records it: plain data (memcpy). The
// shape fields guard against restoring into a loader built with different settings.
struct DataLoaderState {
    int64_t epoch;
    int64_t shard_pos;    // index into this epoch's shard order
    int64_t window_pos;   // index into the current shard's window order
    int64_t started;      // 0 = no batch loaded yet (fresh or reset)
    uint64_t seed;
    int64_t shuffle;
    int64_t B, T, process_rank, num_processes, num_shards, num_windows;
    int64_t micro_steps;  // gradient-accumulation steps per window (run-state version 3; 1 before)
};

constexpr int kRunStateMagic = 20241121;
constexpr int kRunStateVersion = 3;
constexpr int64_t kDataLoaderStateV2Bytes = (int64_t)offsetof(DataLoaderState, micro_steps);  // versions 1, 2

struct RunState {
    int step = 0;              // optimizer steps completed
    int B = 0, T = 0, num_processes = 0, grad_accum_steps = 0;
    uint64_t run_id = 0;       // 0: unknown (a version 1 file)
    uint64_t model_hash = 0;   // file_hash64 of the paired model file; 0: unknown (a version 1 file)
    RngState sampler_rng{};
    DataLoaderState train_loader{};
    DataLoaderState val_loader{};
    std::vector<uint8_t> optimizer_state;
    std::vector<uint8_t> fp8_state;  // empty: none
    int version = kRunStateVersion;  // of the file it was read from (written files are always the current one)
};

inline int64_t data_loader_record_bytes(int version) {
    return version >= 3 ? (int64_t)sizeof(DataLoaderState) : kDataLoaderStateV2Bytes;
}
inline int64_t run_state_file_bytes(uint64_t optimizer_bytes, int version = kRunStateVersion,
                                    int64_t fp8_bytes = 0) {
    return kFileHeaderBytes + (int64_t)sizeof(RngState) + 2 * data_loader_record_bytes(version) +
           (int64_t)optimizer_bytes + fp8_bytes;
}

inline void write_run_state(const std::string& path, const RunState& s) {
    // the reader rejects both as 0 (unknown), so a file written with one would never be read back
    if (s.run_id == 0 || s.model_hash == 0) file_error(path, "cannot write a run state without a run id and model hash");
    if (s.fp8_state.size() > (size_t)INT32_MAX) file_error(path, "FP8 section of %zu bytes", s.fp8_state.size());
    int32_t h[kFileHeaderInts] = {};
    const uint64_t opt_bytes = s.optimizer_state.size();
    h[0] = kRunStateMagic;
    h[1] = kRunStateVersion;
    h[2] = s.step;
    h[3] = s.B;
    h[4] = s.T;
    h[5] = s.num_processes;
    h[6] = s.grad_accum_steps;
    h[7] = (int32_t)sizeof(RngState);
    h[8] = (int32_t)sizeof(DataLoaderState);
    h[9] = (int32_t)(uint32_t)(opt_bytes & 0xffffffffu);
    h[10] = (int32_t)(uint32_t)(opt_bytes >> 32);
    h[11] = (int32_t)(uint32_t)(s.run_id & 0xffffffffu);
    h[12] = (int32_t)(uint32_t)(s.run_id >> 32);
    h[13] = (int32_t)(uint32_t)(s.model_hash & 0xffffffffu);
    h[14] = (int32_t)(uint32_t)(s.model_hash >> 32);
    h[15] = (int32_t)s.fp8_state.size();
    AtomicOutputFile out(path);
    out.write(h, sizeof(h));
    out.write(&s.sampler_rng, sizeof(RngState));
    out.write(&s.train_loader, sizeof(DataLoaderState));
    out.write(&s.val_loader, sizeof(DataLoaderState));
    out.write(s.optimizer_state.data(), s.optimizer_state.size());
    out.write(s.fp8_state.data(), s.fp8_state.size());
    out.commit();
}

// The validated header of an open run-state file (the file's length included): every field but the records
// and the blobs, whose sizes go to *optimizer_bytes and *fp8_bytes.
inline RunState read_run_state_header(InputFile& in, uint64_t* optimizer_bytes, int64_t* fp8_bytes = nullptr) {
    const std::string& path = in.path();
    int32_t h[kFileHeaderInts];
    read_file_header(in, h, "run state");
    if (h[0] != kRunStateMagic) file_error(path, "not a run-state file (magic %d, expected %d)", h[0], kRunStateMagic);
    if (h[1] < 1 || h[1] > kRunStateVersion) {
        file_error(path, "unsupported run-state version %d (expected 1 to %d)", h[1], kRunStateVersion);
    }
    auto check = [&](const char* name, int32_t value, int32_t lo) {
        if (value < lo) file_error(path, "bad run-state header: %s = %d, must be >= %d", name, value, lo);
    };
    check("step", h[2], 0);
    check("B", h[3], 1);
    check("T", h[4], 1);
    check("num_processes", h[5], 1);
    check("grad_accum_steps", h[6], 1);
    if (h[7] != (int32_t)sizeof(RngState) || h[8] != (int32_t)data_loader_record_bytes(h[1])) {
        file_error(path, "bad run-state header: record sizes %d/%d, this build expects %d/%d for version %d", h[7], h[8],
                   (int)sizeof(RngState), (int)data_loader_record_bytes(h[1]), h[1]);
    }
    auto u64 = [&](int lo) { return (uint64_t)(uint32_t)h[lo] | ((uint64_t)(uint32_t)h[lo + 1] << 32); };
    const uint64_t opt_bytes = u64(9);
    if (opt_bytes > (uint64_t)INT64_MAX / 2) file_error(path, "bad run-state header: optimizer size %llu", (unsigned long long)opt_bytes);
    const int64_t fp8 = h[1] >= 3 ? h[15] : 0;
    if (fp8 < 0) file_error(path, "bad run-state header: FP8 section of %lld bytes", (long long)fp8);
    const int64_t expected = run_state_file_bytes(opt_bytes, h[1], fp8);
    if (in.size() != expected) {
        file_error(path, "file is %lld bytes but its header (%llu optimizer bytes, %lld FP8) implies %lld (%s)",
                   (long long)in.size(), (unsigned long long)opt_bytes, (long long)fp8, (long long)expected,
                   in.size() < expected ? "truncated" : "trailing bytes");
    }
    const int first_reserved = h[1] == 1 ? 11 : h[1] == 2 ? 15 : 16;
    for (int i = first_reserved; i < kFileHeaderInts; i++) {
        if (h[i] != 0) file_error(path, "bad run-state header: reserved field %d is %d, must be 0", i, h[i]);
    }
    RunState s;
    s.version = h[1];
    s.step = h[2];
    s.B = h[3];
    s.T = h[4];
    s.num_processes = h[5];
    s.grad_accum_steps = h[6];
    if (h[1] >= 2) {
        s.run_id = u64(11);
        s.model_hash = u64(13);
        if (s.run_id == 0 || s.model_hash == 0) file_error(path, "bad run-state header: run id or model hash is 0");
    }
    *optimizer_bytes = opt_bytes;
    if (fp8_bytes) *fp8_bytes = fp8;
    return s;
}

// Only the header (cheap: for telling which run and which model file a checkpoint belongs to).
inline RunState read_run_state_header(const std::string& path) {
    InputFile in(path);
    uint64_t optimizer_bytes = 0;
    return read_run_state_header(in, &optimizer_bytes);
}

inline RunState read_run_state(const std::string& path) {
    InputFile in(path);
    uint64_t opt_bytes = 0;
    int64_t fp8_bytes = 0;
    RunState s = read_run_state_header(in, &opt_bytes, &fp8_bytes);
    in.read(&s.sampler_rng, sizeof(RngState), "sampler RNG state");
    const size_t record = (size_t)data_loader_record_bytes(s.version);  // a shorter record before version 3
    in.read(&s.train_loader, record, "train loader state");
    in.read(&s.val_loader, record, "val loader state");
    if (s.version < 3) s.train_loader.micro_steps = s.val_loader.micro_steps = 1;
    s.optimizer_state.resize((size_t)opt_bytes);
    in.read(s.optimizer_state.data(), s.optimizer_state.size(), "optimizer state");
    s.fp8_state.resize((size_t)fp8_bytes);
    in.read(s.fp8_state.data(), s.fp8_state.size(), "FP8 section");
    return s;
}
