// Checkpoints of a GPU run: the checkpointer (llmc/checkpoint/checkpoint.h, shared with the CPU trainer) with the GPU
// model's weights (gpt2_write_model: the device's parameters) and the optimizer's state (AdamW::state_to_host /
// state_from_host, llmc/optimizer/adamw_optimizer.cuh).
//   build the model from model_path(step) (gpt2_build_from_checkpoint), gpt2_allocate, AdamW::init, then
//   checkpoint_restore().
#pragma once

#include <string>
#include <vector>

#include "llmc/checkpoint/checkpoint.h"
#include "llmc/core/rand.h"
#include "llmc/data/dataloader.h"
#include "llmc/model/gpt2.cuh"
#include "llmc/optimizer/adamw_optimizer.cuh"

// Every rank calls it, between steps (with ZeRO-1 the optimizer's state is gathered from the ranks' shards). FP8
// delayed scaling's histories and scales go with it (llmc/model/gpt2_fp8_delayed.cuh).
inline void checkpoint_save(const Checkpointer& ckpt, GPT2& model, AdamW& opt, int step, const RunShape& shape,
                            const Rng& sampler_rng, const DataLoader& train, const DataLoader* val, int rank) {
    std::vector<uint8_t> optimizer_state = opt.state_to_host();
    ckpt.save([&](const std::string& path) { gpt2_write_model(&model, path); }, std::move(optimizer_state), step,
              shape, sampler_rng, train, val, rank, gpt2_fp8_delayed_state(model.fp8_layers, model.stream));
}

// The optimizer's state, FP8 delayed scaling's state, the sampler and this rank's train loader; returns the step to
// continue from.
inline int checkpoint_restore(Checkpointer& ckpt, GPT2* model, AdamW* opt, int step, const RunShape& shape,
                              Rng* sampler_rng, DataLoader* train, int rank) {
    std::vector<uint8_t> fp8_state;
    bool reshaped = false;
    const int resumed = ckpt.restore([&](const std::vector<uint8_t>& bytes, const std::string& path) {
        opt->state_from_host(bytes, path);
    }, step, shape, sampler_rng, train, rank, &fp8_state, &reshaped);
    std::string note;
    const std::string why = gpt2_fp8_delayed_restore(&model->fp8_layers, fp8_state, reshaped, &note);
    if (!why.empty()) file_error(ckpt.state_path(step), "%s", why.c_str());
    if (!note.empty() && rank == 0) printf("note: %s\n", note.c_str());
    return resumed;
}
