// Everything besides the weights that a training run needs to continue bit-exactly from a checkpoint (the
// file that pairs with a model file: llmc/checkpoint_files.h names them, llmc/checkpoint.cuh writes and reads both).
//
// Run-state file (little-endian):
//   int32 header[256]: [0]=20241121 (magic), [1]=1 (version), [2]=step, [3]=B, [4]=T, [5]=num_processes,
//                      [6]=grad_accum_steps, [7]=sizeof(RngState), [8]=sizeof(DataLoaderState),
//                      [9]=optimizer bytes low 32 bits, [10]=high 32 bits; the rest zero.
//   RngState sampler_rng; DataLoaderState train_loader; DataLoaderState val_loader;
//   optimizer state: an opaque blob from the model (fp32 master weights, AdamW m and v).
// The reader checks every header field and the exact file length.
// The data-loader states are rank 0's; other ranks restore them with their own rank (same positions).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dataloader.h"
#include "file_header.h"
#include "rand.h"
#include "utils.h"

constexpr int kRunStateMagic = 20241121;
constexpr int kRunStateVersion = 1;

struct RunState {
    int step = 0;              // optimizer steps completed
    int B = 0, T = 0, num_processes = 0, grad_accum_steps = 0;
    RngState sampler_rng{};
    DataLoaderState train_loader{};
    DataLoaderState val_loader{};
    std::vector<uint8_t> optimizer_state;
};

inline int64_t run_state_file_bytes(uint64_t optimizer_bytes) {
    return kFileHeaderBytes + (int64_t)sizeof(RngState) + 2 * (int64_t)sizeof(DataLoaderState) +
           (int64_t)optimizer_bytes;
}

inline void write_run_state(const std::string& path, const RunState& s) {
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
    AtomicOutputFile out(path);
    out.write(h, sizeof(h));
    out.write(&s.sampler_rng, sizeof(RngState));
    out.write(&s.train_loader, sizeof(DataLoaderState));
    out.write(&s.val_loader, sizeof(DataLoaderState));
    out.write(s.optimizer_state.data(), s.optimizer_state.size());
    out.commit();
}

inline RunState read_run_state(const std::string& path) {
    InputFile in(path);
    int32_t h[kFileHeaderInts];
    read_file_header(in, h, "run state");
    if (h[0] != kRunStateMagic) file_error(path, "not a run-state file (magic %d, expected %d)", h[0], kRunStateMagic);
    if (h[1] != kRunStateVersion) {
        file_error(path, "unsupported run-state version %d (expected %d)", h[1], kRunStateVersion);
    }
    auto check = [&](const char* name, int32_t value, int32_t lo) {
        if (value < lo) file_error(path, "bad run-state header: %s = %d, must be >= %d", name, value, lo);
    };
    check("step", h[2], 0);
    check("B", h[3], 1);
    check("T", h[4], 1);
    check("num_processes", h[5], 1);
    check("grad_accum_steps", h[6], 1);
    if (h[7] != (int32_t)sizeof(RngState) || h[8] != (int32_t)sizeof(DataLoaderState)) {
        file_error(path, "bad run-state header: record sizes %d/%d, this build expects %d/%d", h[7], h[8],
                   (int)sizeof(RngState), (int)sizeof(DataLoaderState));
    }
    const uint64_t opt_bytes = (uint64_t)(uint32_t)h[9] | ((uint64_t)(uint32_t)h[10] << 32);
    if (opt_bytes > (uint64_t)INT64_MAX / 2) file_error(path, "bad run-state header: optimizer size %llu", (unsigned long long)opt_bytes);
    const int64_t expected = run_state_file_bytes(opt_bytes);
    if (in.size() != expected) {
        file_error(path, "file is %lld bytes but its header (%llu optimizer bytes) implies %lld (%s)",
                   (long long)in.size(), (unsigned long long)opt_bytes, (long long)expected,
                   in.size() < expected ? "truncated" : "trailing bytes");
    }
    for (int i = 11; i < kFileHeaderInts; i++) {
        if (h[i] != 0) file_error(path, "bad run-state header: reserved field %d is %d, must be 0", i, h[i]);
    }
    RunState s;
    s.step = h[2];
    s.B = h[3];
    s.T = h[4];
    s.num_processes = h[5];
    s.grad_accum_steps = h[6];
    in.read(&s.sampler_rng, sizeof(RngState), "sampler RNG state");
    in.read(&s.train_loader, sizeof(DataLoaderState), "train loader state");
    in.read(&s.val_loader, sizeof(DataLoaderState), "val loader state");
    s.optimizer_state.resize((size_t)opt_bytes);
    in.read(s.optimizer_state.data(), s.optimizer_state.size(), "optimizer state");
    return s;
}
