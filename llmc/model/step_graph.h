// A training micro-step (forward with the loss, then backward) replayed from CUDA Graphs, for one key (B, T, the loss
// scale, which passes have a listener). With no listener it is one graph (one launch instead of one per kernel). With listeners
// (several GPUs: the exchange queues copies, waits and collectives between the kernels, on other streams and on host
// state that changes every step) the kernels are captured in segments: a graph ends at each listener call that may
// queue work, the call runs eagerly between two graph launches, and calls that queue nothing are made again, in
// order, at replay (their host state). llmc/model/gpt2_step.cuh records and replays them.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "llmc/core/captured_graph.cuh"
#include "llmc/core/cuda_common.h"

// The listeners' calls the passes make, in the order they make them.
enum class StepHook : uint8_t { ParametersNeeded, QkvReady, LayerBegins, GradientsReady };

struct StepGraphCall {
    StepHook hook;
    int layer;
    const floatX* qkv;  // QkvReady's
    int segment;        // the graph launched just before the call (-1: the call was made inside the capture)
};

struct StepGraph {
    int B = 0, T = 0;
    float loss_scale = 0.0f;
    bool forward_listens = false, backward_listens = false;
    bool casts_fp8_weights = false;           // the forward casts the FP8 weight copies (the first after an update)
    bool fp8_calibrated = false;              // FP8 delayed scaling has its histories (else its first micro-step)
    bool seen = false;                        // an eager run with this key has set up every plan and lazy state
    bool captured = false;
    std::vector<cudaGraphExec_t> segments;    // null where a segment captured nothing
    std::vector<StepGraphCall> calls;
    int replays = 0;                          // one per micro-step from the third with this key

    bool same_key(int b, int t, float scale, bool fwd, bool bwd, bool casts, bool calibrated) const {
        return B == b && T == t && loss_scale == scale && forward_listens == fwd && backward_listens == bwd &&
               casts_fp8_weights == casts && fp8_calibrated == calibrated;
    }
};

// keys kept at once: a step with accumulation has two (the backward listens or not), three in FP8 runs (the first
// micro-step casts the weights), one more with delayed scaling (the run's first micro-step, current scaling)
constexpr size_t kMaxStepGraphs = 6;

inline void step_graph_free(StepGraph* g) {
    for (cudaGraphExec_t e : g->segments)
        if (e) cudaCheck(cudaGraphExecDestroy(e));
    *g = StepGraph{};
}
