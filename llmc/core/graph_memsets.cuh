// A captured graph's small memset nodes turned into kernel nodes that write the same bytes.
//
// cuBLASLt's Hopper GEMMs (nvjet) zero a 4-byte counter with a memset before every call, so a d12 training step's
// graph has ~90 memset nodes. In a replay a memset node costs about 5 us between its neighbours' kernels (the
// switch into and out of it; more while the copy engines move the exchange's buckets), where a kernel node after a
// kernel starts about 1 us after it. A one-block kernel that writes the counter keeps the same order (it takes the
// memset node's edges) and the same bytes. Large memsets (the gradients' zeroing) stay: bandwidth-bound, one each.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "llmc/core/cuda_common.h"

namespace graph_memsets_detail {

// height rows of width elements of element_size bytes at dst, pitch bytes apart, set to value (its low bytes).
__global__ void memset_kernel(char* dst, size_t pitch, unsigned int value, unsigned int element_size, size_t width,
                              size_t height) {
    const size_t n = width * height;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        char* p = dst + (i / width) * pitch + (i % width) * element_size;
        if (element_size == 4) *reinterpret_cast<unsigned int*>(p) = value;
        else if (element_size == 2) *reinterpret_cast<unsigned short*>(p) = (unsigned short)value;
        else *p = (char)value;
    }
}

inline std::vector<cudaGraphNode_t> nodes_of(cudaGraph_t graph) {
    size_t n = 0;
    cudaCheck(cudaGraphGetNodes(graph, nullptr, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    if (n) cudaCheck(cudaGraphGetNodes(graph, nodes.data(), &n));
    return nodes;
}

}  // namespace graph_memsets_detail

// Replaces every memset node of at most max_bytes in `graph` (before it is instantiated) by a kernel node with the
// same dependencies and dependents, launched at `priority` (the capturing stream's, for a graph instantiated with
// node priorities). Returns how many were replaced.
inline int graph_memsets_to_kernels(cudaGraph_t graph, int priority, size_t max_bytes = 1u << 20) {
    using namespace graph_memsets_detail;
    int replaced = 0;
    for (cudaGraphNode_t node : nodes_of(graph)) {
        cudaGraphNodeType type;
        cudaCheck(cudaGraphNodeGetType(node, &type));
        if (type != cudaGraphNodeTypeMemset) continue;
        cudaMemsetParams p;
        cudaCheck(cudaGraphMemsetNodeGetParams(node, &p));
        const size_t count = p.width * p.height, bytes = count * p.elementSize;
        if (bytes == 0 || bytes > max_bytes) continue;
        size_t n_in = 0, n_out = 0;
        cudaCheck(cudaGraphNodeGetDependencies(node, nullptr, nullptr, &n_in));
        cudaCheck(cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &n_out));
        std::vector<cudaGraphNode_t> in(n_in), out(n_out);
        std::vector<cudaGraphEdgeData> in_edges(n_in), out_edges(n_out);
        if (n_in) cudaCheck(cudaGraphNodeGetDependencies(node, in.data(), in_edges.data(), &n_in));
        if (n_out) cudaCheck(cudaGraphNodeGetDependentNodes(node, out.data(), out_edges.data(), &n_out));

        char* dst = (char*)p.dst;
        size_t pitch = p.height > 1 ? p.pitch : p.width * p.elementSize, width = p.width, height = p.height;
        unsigned int value = p.value, element_size = p.elementSize;
        void* args[] = {&dst, &pitch, &value, &element_size, &width, &height};
        cudaKernelNodeParams k = {};
        k.func = (void*)memset_kernel;
        k.blockDim = dim3(256);
        k.gridDim = dim3((unsigned)std::min<size_t>((count + 255) / 256, 1024));
        k.kernelParams = args;
        cudaGraphNode_t kernel;
        cudaCheck(cudaGraphAddKernelNode(&kernel, graph, nullptr, 0, &k));
        cudaKernelNodeAttrValue prio = {};
        prio.priority = priority;
        cudaCheck(cudaGraphKernelNodeSetAttribute(kernel, cudaKernelNodeAttributePriority, &prio));
        // the memset's edges, same data (a memset node's edges are plain dependencies), onto the kernel
        for (size_t i = 0; i < n_in; i++) cudaCheck(cudaGraphAddDependencies(graph, &in[i], &kernel, &in_edges[i], 1));
        for (size_t i = 0; i < n_out; i++)
            cudaCheck(cudaGraphAddDependencies(graph, &kernel, &out[i], &out_edges[i], 1));
        cudaCheck(cudaGraphDestroyNode(node));
        replaced++;
    }
    return replaced;
}
