// What generate_gpt2cu and serve_gpt2cu do before the GPU, written once: the model (-e: ours, llm.c's or a Hugging
// Face GPT-2) read and checked on the host, and the engine's options: the token picker, the decode step from the
// LLMC_DECODE_* switches (read here; a bad value stops the program before the GPU), the set-up report on stderr
// (stdout carries the text). The engine then uploads the parameters (inference_engine_upload, GpuServeEngine).
#pragma once

#include <cstdio>
#include <string>
#include <utility>

#include "llmc/core/options.h"
#include "llmc/formats/hf_gpt2.h"
#include "llmc/inference/engine.cuh"

struct HostModel {
    ModelFile file;            // fp32 parameters in table order, until the engine uploads them
    InferenceOptions options;  // what the engine is made with
};

inline HostModel load_host_model(const std::string& path, const PickParams& pick) {
    const EngineOptions& o = engine_options();
    HostModel m;
    m.options.pick = pick;
    if (o.decode_cublas) m.options.decode.products = DecodeProducts::Cublas;
    if (o.decode_persistent == 1) m.options.decode.products = DecodeProducts::Persistent;
    if (o.decode_persistent == 0) m.options.decode.persistent_auto = false;
    m.options.decode.persistent_tiles = o.decode_tiles;
    m.options.decode.attention = o.decode_attention == "split"  ? DecodeAttentionKernel::Split
                                 : o.decode_attention == "head" ? DecodeAttentionKernel::PerHead
                                                                : DecodeAttentionKernel::Auto;
    m.options.report = stderr;
    m.file = read_model_any(path);
    return m;
}
