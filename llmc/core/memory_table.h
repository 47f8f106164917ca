// Device memory as tables of named tensors (name, group, elements, element size): the training model, the
// optimizer and generation each describe what they allocate as one, so offsets, sizes and the plan printouts come
// from the same rows. Host-only arithmetic.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "llmc/core/utils.h"

enum class MemoryGroup { Parameters, Gradients, Optimizer, MasterWeights, Activations, Workspace };

// One named buffer of a table; Group is the table's own grouping (MemoryGroup for the trainer's model and optimizer,
// InferenceGroup for generation's, llmc/inference/inference_plan.h).
template <typename Group>
struct NamedBuffer {
    std::string name;
    Group group;
    size_t elems;
    size_t elem_bytes;
    size_t bytes() const { return round_up(elems * elem_bytes, 256); }  // every buffer 256-byte aligned
};
using MemoryTensor = NamedBuffer<MemoryGroup>;

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

// The bytes of one allocation holding the rows `in_block` keeps (every row by default), and each such row's place in
// it, in table order, 256-byte aligned (null: empty rows and the ones left out).
template <typename Row, typename Keep>
inline size_t memory_table_bytes(const std::vector<Row>& table, Keep in_block) {
    size_t n = 0;
    for (const Row& r : table)
        if (in_block(r)) n += r.bytes();
    return n;
}
template <typename Row, typename Keep>
inline std::vector<void*> memory_table_carve(const std::vector<Row>& table, void* block, Keep in_block) {
    std::vector<void*> at(table.size(), nullptr);
    char* p = (char*)block;
    for (size_t i = 0; i < table.size(); i++) {
        if (!in_block(table[i])) continue;
        if (table[i].elems) at[i] = p;
        p += table[i].bytes();
    }
    return at;
}
template <typename Row>
inline size_t memory_table_bytes(const std::vector<Row>& table) {
    return memory_table_bytes(table, [](const Row&) { return true; });
}
template <typename Row>
inline std::vector<void*> memory_table_carve(const std::vector<Row>& table, void* block) {
    return memory_table_carve(table, block, [](const Row&) { return true; });
}
