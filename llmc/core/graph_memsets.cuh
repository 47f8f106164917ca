// A captured graph's small memset nodes turned into kernel nodes that write the same bytes.
//
// cuBLASLt's Hopper GEMMs (nvjet) zero a 4-byte counter with a memset before every call, so a training step's graph
// holds a memset node before most GEMMs. In a replay the switch into and out of a memset node leaves the SMs idle
// longer than a kernel node after a kernel does (longer still while the copy engines move the exchange's buckets;
// docs/PERFORMANCE.md). A small kernel that writes the same bytes (one block for a counter) keeps the order (it takes
// the memset node's edges). Left as they are: large memsets (the gradients' zeroing: bandwidth-bound,
// one each), and any memset a kernel of this device could not stand in for (memory of another device or not device
// memory, addresses not aligned to the element size).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
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

// A memset node's edges carry no data (ports and programmatic edges join kernel nodes only), so they are read and
// made without it; CUDA 13 added an edge-data argument to these calls.
inline std::vector<cudaGraphNode_t> neighbours(cudaGraphNode_t node, bool dependencies) {
    size_t n = 0;
    std::vector<cudaGraphNode_t> out;
    for (int pass = 0; pass < 2; pass++) {  // the count, then the nodes
        cudaGraphNode_t* to = pass ? out.data() : nullptr;
#if CUDART_VERSION >= 13000
        if (dependencies) cudaCheck(cudaGraphNodeGetDependencies(node, to, nullptr, &n));
        else cudaCheck(cudaGraphNodeGetDependentNodes(node, to, nullptr, &n));
#else
        if (dependencies) cudaCheck(cudaGraphNodeGetDependencies(node, to, &n));
        else cudaCheck(cudaGraphNodeGetDependentNodes(node, to, &n));
#endif
        if (pass == 0) out.resize(n);
        if (n == 0) break;
    }
    return out;
}
inline void add_edge(cudaGraph_t graph, cudaGraphNode_t from, cudaGraphNode_t to) {
#if CUDART_VERSION >= 13000
    cudaCheck(cudaGraphAddDependencies(graph, &from, &to, nullptr, 1));
#else
    cudaCheck(cudaGraphAddDependencies(graph, &from, &to, 1));
#endif
}

// Whether a kernel of the current device can write what the memset writes, with element_size-byte stores.
inline bool kernel_can_write(const cudaMemsetParams& p) {
    const uintptr_t e = p.elementSize;
    if ((uintptr_t)p.dst % e != 0 || (p.height > 1 && p.pitch % e != 0)) return false;
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p.dst) != cudaSuccess) {
        (void)cudaGetLastError();  // e.g. an address a graph allocates: leave the memset to the driver
        return false;
    }
    int device = -1;
    cudaCheck(cudaGetDevice(&device));
    return a.type == cudaMemoryTypeDevice && a.device == device;
}

}  // namespace graph_memsets_detail

// Replaces every memset node of at most max_bytes in `graph` (before it is instantiated; top-level nodes) by a kernel
// node with the same dependencies and dependents, launched at `priority` (the capturing stream's, for a graph
// instantiated with node priorities). Returns how many were replaced.
inline int graph_memsets_to_kernels(cudaGraph_t graph, int priority, size_t max_bytes = 1u << 20) {
    using namespace graph_memsets_detail;
    int replaced = 0;
    for (cudaGraphNode_t node : nodes_of(graph)) {
        cudaGraphNodeType type;
        cudaCheck(cudaGraphNodeGetType(node, &type));
        if (type != cudaGraphNodeTypeMemset) continue;
        cudaMemsetParams p;
        cudaCheck(cudaGraphMemsetNodeGetParams(node, &p));
        const size_t bytes = p.width * p.height * p.elementSize;
        if (bytes == 0 || bytes > max_bytes || !kernel_can_write(p)) continue;
        const std::vector<cudaGraphNode_t> in = neighbours(node, true), out = neighbours(node, false);

        char* dst = (char*)p.dst;
        size_t pitch = p.height > 1 ? p.pitch : p.width * p.elementSize, width = p.width, height = p.height;
        unsigned int value = p.value, element_size = p.elementSize;
        // bytes and halves as 4-byte words where every row allows it (cudaMemsetAsync's memsets are bytes)
        if (element_size < 4 && (uintptr_t)dst % 4 == 0 && pitch % 4 == 0 && (width * element_size) % 4 == 0) {
            value = element_size == 1 ? (value & 0xFFu) * 0x01010101u : (value & 0xFFFFu) * 0x00010001u;
            width = width * element_size / 4, element_size = 4;
        }
        void* args[] = {&dst, &pitch, &value, &element_size, &width, &height};
        cudaKernelNodeParams k = {};
        k.func = (void*)memset_kernel;
        k.blockDim = dim3(256);
        k.gridDim = dim3((unsigned)std::min<size_t>((width * height + 255) / 256, 1024));
        k.kernelParams = args;  // copied by the call
        cudaGraphNode_t kernel;
        cudaCheck(cudaGraphAddKernelNode(&kernel, graph, nullptr, 0, &k));
        cudaKernelNodeAttrValue prio = {};
        prio.priority = priority;
        cudaCheck(cudaGraphKernelNodeSetAttribute(kernel, cudaKernelNodeAttributePriority, &prio));
        for (cudaGraphNode_t from : in) add_edge(graph, from, kernel);
        for (cudaGraphNode_t to : out) add_edge(graph, kernel, to);
        cudaCheck(cudaGraphDestroyNode(node));
        replaced++;
    }
    return replaced;
}
