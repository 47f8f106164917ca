// The training model and its optimizer, put together in the one order they need and taken apart in reverse, so no
// trainer sequences them: the gradients laid out as the optimizer's ZeRO stage wants (GPT2::grad_layout), the model's
// device memory sized with the optimizer's share reserved (out of memory names the largest B that fits beside it),
// the optimizer's master copy made from the model's fp32 host parameters, which are then released, and with -z 2 the
// layers' gradient slices pointed into the optimizer's slots. The optimizer reads the model; only this file edits it
// for the optimizer's sake.
//   GPT2 model;  gpt2_build_random(&model, config, seed);   // or gpt2_build_from_checkpoint
//   AdamW opt;   model_and_optimizer_init(&model, &opt, &mg, ModelAllocation{B, T, recompute, backend}, settings);
//   ...
//   model_and_optimizer_free(&model, &opt);
#pragma once

#include "llmc/model/gpt2.cuh"
#include "llmc/optimizer/adamw_optimizer.cuh"

// How the model's activations are laid out (gpt2_allocate's arguments).
struct ModelAllocation {
    int B = 1, T = 1, recompute = 1;
    AttentionBackend backend = AttentionBackend::Materialized;
};

// model: built (its weights on the host: gpt2_build_random or gpt2_build_from_checkpoint), not yet allocated.
inline void model_and_optimizer_init(GPT2* model, AdamW* opt, MultiGpu* mg, const ModelAllocation& alloc,
                                     const AdamWSettings& settings) {
    const GPT2Config& c = model->config;
    model->grad_layout = adamw_model_grad_layout(c, settings, mg->world);  // -z 2: wte's, wpe's and lnf's only
    gpt2_allocate(model, alloc.B, alloc.T, alloc.recompute, alloc.backend, adamw_device_bytes(c, settings, mg->world));
    opt->init(model, mg, settings);
    model->grads.slices = opt->grad_slices;  // -z 2: the layers' gradients live in the optimizer's slots
    gpt2_release_host_params(model);
}

inline void model_and_optimizer_free(GPT2* model, AdamW* opt) {
    model->grads.slices.clear();  // they point into the optimizer's memory
    opt->free();
    gpt2_free(model);
}
