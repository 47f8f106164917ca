// Work captured once as a CUDA Graph and replayed, the one way the engine does it (the trainer's step segments,
// llmc/model/gpt2_step.cuh; generation's decode steps and prefills, llmc/inference/): capture on a created stream
// (the legacy stream cannot be captured), then instantiate with the kernels' stream priorities kept and cuBLASLt's
// small memsets turned into kernel nodes (graph_memsets.cuh: a kernel after a kernel starts sooner than a memset).
#pragma once

#include <cuda_runtime.h>

#include "llmc/core/cuda_common.h"
#include "llmc/core/graph_memsets.cuh"

// The work captured on `stream` since cudaStreamBeginCapture, instantiated (null when nothing was captured).
inline cudaGraphExec_t end_capture_instantiate(cudaStream_t stream) {
    cudaGraph_t graph;
    cudaCheck(cudaStreamEndCapture(stream, &graph));
    int priority = 0;
    cudaCheck(cudaStreamGetPriority(stream, &priority));
    graph_memsets_to_kernels(graph, priority);
    size_t nodes = 0;
    cudaCheck(cudaGraphGetNodes(graph, nullptr, &nodes));
    cudaGraphExec_t exec = nullptr;
    if (nodes > 0) cudaCheck(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority));
    cudaCheck(cudaGraphDestroy(graph));
    return exec;
}

// A piece of work with fixed pointers and shapes, run as a graph: body() runs plainly on the first call (cuBLASLt
// picks and caches its plans, kernels load, outside any capture), is captured on the second and replayed from then on.
struct CapturedGraph {
    cudaGraphExec_t exec = nullptr;
    bool warm = false;
};
template <typename Body>
inline void run_as_graph(cudaStream_t stream, CapturedGraph* g, Body&& body) {
    if (!g->warm) {
        body();
        g->warm = true;
        return;
    }
    if (!g->exec) {
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        body();
        g->exec = end_capture_instantiate(stream);
        if (!g->exec) return;  // nothing was captured: nothing to launch
    }
    cudaCheck(cudaGraphLaunch(g->exec, stream));
}
inline void captured_graph_free(CapturedGraph* g) {
    if (g->exec) cudaCheck(cudaGraphExecDestroy(g->exec));
    *g = CapturedGraph{};
}
