// Device memory as tables of named tensors (name, group, elements, element size): the training model, the
// optimizer and generation each describe what they allocate as one, so offsets, sizes and the plan printouts come
// from the same rows. Host-only arithmetic.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "llmc/core/utils.h"

enum class MemoryGroup { Parameters, Gradients, Optimizer, MasterWeights, Activations, Workspace };

struct MemoryTensor {
    std::string name;
    MemoryGroup group;
    size_t elems;
    size_t elem_bytes;
    size_t bytes() const { return round_up(elems * elem_bytes, 256); }  // every tensor 256-byte aligned
};

struct MemoryPlan {
    size_t parameters = 0, gradients = 0, optimizer = 0, master_weights = 0, activations = 0, workspace = 0;
    size_t total() const { return parameters + gradients + optimizer + master_weights + activations + workspace; }
    MemoryPlan operator+(const MemoryPlan& o) const {
        return {parameters + o.parameters, gradients + o.gradients, optimizer + o.optimizer,
                master_weights + o.master_weights, activations + o.activations, workspace + o.workspace};
    }
};

// The table's bytes by group.
inline MemoryPlan memory_plan_of(const std::vector<MemoryTensor>& table) {
    MemoryPlan p;
    for (const MemoryTensor& t : table) {
        size_t b = t.bytes();
        switch (t.group) {
            case MemoryGroup::Parameters: p.parameters += b; break;
            case MemoryGroup::Gradients: p.gradients += b; break;
            case MemoryGroup::Optimizer: p.optimizer += b; break;
            case MemoryGroup::MasterWeights: p.master_weights += b; break;
            case MemoryGroup::Activations: p.activations += b; break;
            case MemoryGroup::Workspace: p.workspace += b; break;
        }
    }
    return p;
}

// The plan as (label, bytes) rows, in the order every printout shows them (the trainer's start-up table, tests).
inline std::vector<std::pair<std::string, size_t>> memory_plan_rows(const MemoryPlan& p) {
    return {{"memory: parameters", p.parameters},     {"memory: gradients", p.gradients},
            {"memory: optimizer m, v", p.optimizer},  {"memory: master weights", p.master_weights},
            {"memory: activations", p.activations},   {"memory: workspace", p.workspace},
            {"memory: total (plan)", p.total()}};
}


// Each row's place in one allocation of memory_table_bytes(table) at `block`, 256-byte aligned (null: empty rows).
inline size_t memory_table_bytes(const std::vector<MemoryTensor>& table) {
    size_t n = 0;
    for (const MemoryTensor& t : table) n += t.bytes();
    return n;
}
inline std::vector<void*> memory_table_carve(const std::vector<MemoryTensor>& table, void* block) {
    std::vector<void*> at(table.size(), nullptr);
    char* p = (char*)block;
    for (size_t i = 0; i < table.size(); i++) {
        if (table[i].elems) at[i] = p;
        p += table[i].bytes();
    }
    return at;
}
