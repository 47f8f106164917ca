// Generation's memory as one table of named buffers: parameters (bf16, or none when borrowed from the trainer),
// the KV cache, the prefill's scratch (one layer's activations, which every layer reuses), the decode step's
// scratch (B rows), the on-GPU loop's buffers and, for a server, its picks' and steps' buffers (device, and mapped
// host memory); no gradients, optimizer state or per-layer activations. Offsets
// into the engine's one device allocation, the plan's printout and tests/unit/test_inference_plan.cpp all read this
// table. Host-only: the sizes the kernels define (some depend on the GPU) come in as InferenceKernelSizes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "llmc/core/memory_table.h"
#include "llmc/core/startup_table.h"  // format_bytes, format_table_row: the trainer's plan prints the same way
#include "llmc/core/utils.h"
#include "llmc/gpt2/gpt2_config.h"
#include "llmc/kernels/sampling/sampling_rule.h"  // PickParams, the picks' per-row settings

// What one generation run holds at once.
struct InferenceShape {
    int B = 1;                // sequences generated together
    int max_T = 0;            // positions a sequence reaches (prompt + new tokens): the KV cache's length
    int prefill_T = 0;        // positions one prefill covers (the longest prompt; recompute: the padded sequence)
    int prefill_B = 0;        // sequences one prefill covers (0: B; a server prefills one slot at a time: 1)
    int max_new = 0;          // new tokens per sequence: the coins and the token rows
    bool cached = true;       // the KV cache and decode step (head size 64 or 128), else recompute per token
    bool owns_params = true;  // false: a view of parameters that live elsewhere (the trainer's)
    bool row_buckets = false; // decode steps also over the first 1, 2, 4, ... rows (a server: its busy slots only)
    bool slot_prefill = false; // prompts prefilled into chosen slots, with logits rows of their own (a server)
    int server_steps = 0;     // a server's decode steps that can be in flight, each with its own upload and results
    int prefill_rows() const { return prefill_B > 0 ? prefill_B : B; }
};

// The row counts a server's decode steps run with (row_buckets): 1, 2, 4, ... below B, then B; none otherwise.
inline std::vector<int> decode_row_buckets(const InferenceShape& s) {
    std::vector<int> rows;
    if (!s.row_buckets || !s.cached) return rows;
    for (int r = 1; r < s.B; r *= 2) rows.push_back(r);
    rows.push_back(s.B);
    return rows;
}

// Sizes the kernels define, for this shape on this GPU; bytes unless the name says otherwise.
struct InferenceKernelSizes {
    size_t elem_bytes = 2;            // floatX
    std::string precision = "bf16";
    size_t attention_saved = 0;       // the prefill attention's saved tensor for one layer (LSE, or P)
    size_t attention_workspace = 0;   // the prefill attention forward's workspace
    size_t decode_attention_workspace = 0;
    size_t mma_partial_floats = 0;    // decode_mma's split-K partials (0: the products are not decode_mma)
    size_t mma_counters = 0;
    size_t pick_partials = 0;         // the classifier's folded greedy pick (unsigned long long each; 0: none)
    // the persistent decode step (llmc/inference/persistent_step.cuh; 0: the step is not persistent): its phase list
    // (bytes), a counter per phase, a greedy rank per block, and its activations (floatX elements)
    size_t persistent_phase_bytes = 0, persistent_counters = 0, persistent_picks = 0, persistent_activations = 0;
    size_t cublaslt_workspace = 0;    // allocated once per process by matmul_init
};

enum class InferenceGroup { Parameters, KVCache, Prefill, Decode, Classifier, Server, Workspace, HostMapped };

inline const char* inference_group_name(InferenceGroup g) {
    switch (g) {
        case InferenceGroup::Parameters: return "parameters";
        case InferenceGroup::KVCache: return "KV cache";
        case InferenceGroup::Prefill: return "prefill (one layer)";
        case InferenceGroup::Decode: return "decode step";
        case InferenceGroup::Classifier: return "classifier";
        case InferenceGroup::Server: return "server's picks and steps";
        case InferenceGroup::Workspace: return "workspace";
        case InferenceGroup::HostMapped: return "host (mapped)";
    }
    return "?";
}

using InferenceBuffer = NamedBuffer<InferenceGroup>;
// Whether a buffer is in the engine's device allocation (cuBLASLt's workspace is matmul_init's; host memory is not
// device memory).
inline bool inference_in_block(const InferenceBuffer& b) {
    return b.group != InferenceGroup::Workspace && b.group != InferenceGroup::HostMapped;
}

// Rows of the table (the order of this enum is the order of the table). The prefill's and the decode step's layer
// buffers come in the same order (LayerRows).
namespace infer {
enum Id {
    Params,
    KCache, VCache,
    PrefillInputs, Encoded, Ln, LnMean, LnRstd, Qkv, Atty, Residual2, Residual3, Fch, FchGelu, Projection, AttSaved,
    AttWorkspace, PrefillSlots, PrefillLengths,
    Tokens, DecodeX, DecodeLn, DecodeMean, DecodeRstd, DecodeQkv, DecodeAtty, DecodeResidual2, DecodeResidual3,
    DecodeFch, DecodeFchGelu, DecodeProjection, DecodeAttWorkspace, MmaPartials, MmaCounters, Coins, PromptLen,
    PickPartials, PickCount, PersistentPhases, PersistentCounters, PersistentPicks, PersistentActivations,
    Lengths, Lnf, Logits, PrefillLnf, PrefillLogits,
    ServeParams, ServeCoins, ServePicks, ServeScratch, ServeUploads,
    CublasLt, NewTokens, ServeParamsHost, ServeCoinsHost, ServePicksHost, ServeUploadsHost, ServeResultsHost,
    ServeLogitsHost,
    Count
};
}  // namespace infer

// The buffers one layer of the forward writes, for `rows` positions, from row `first` of the table on in the order of
// the enum: the layer's input, ln, LayerNorm mean and rstd, qkv, atty, residual2, residual3, fch, fch_gelu and the
// projections' output (before the residual add).
inline void layer_rows(std::vector<InferenceBuffer>& t, int first, InferenceGroup g, size_t rows, size_t C, size_t X,
                       const char* input, const char* ln) {
    const size_t F = sizeof(float);
    const InferenceBuffer rows_of[] = {{input, g, rows * C, X},          {ln, g, rows * C, X},
                                       {"LayerNorm mean", g, rows, F},   {"LayerNorm rstd", g, rows, F},
                                       {"qkv", g, rows * 3 * C, X},      {"atty", g, rows * C, X},
                                       {"residual2", g, rows * C, X},    {"residual3", g, rows * C, X},
                                       {"fch (pre-GELU)", g, rows * 4 * C, X}, {"fch_gelu", g, rows * 4 * C, X},
                                       {"projection output", g, rows * C, X}};
    for (const InferenceBuffer& b : rows_of) t[first++] = b;
}

// A server's decode step's upload, per step in flight: each row's length (its position + 1), pick settings and coin,
// then the lone busy slot (the persistent step's sequence, when it runs).
inline size_t serve_upload_bytes(int B) {
    return (size_t)B * (sizeof(int) + sizeof(PickParams) + sizeof(float)) + sizeof(int);
}
// A per-step row's stride: each step's part 256-byte aligned.
inline size_t serve_step_stride(size_t bytes) { return round_up(bytes, 256); }
// The prompts' picks' pinned rows come in sets: two for whole prefills in flight (begun, their first tokens not yet
// read), one for the calls that wait for theirs (a chunk's, the warm-up's). Each set's part 256-byte aligned.
constexpr int kServePickSets = 3;

inline std::vector<InferenceBuffer> inference_memory_table(const GPT2Config& c, const InferenceShape& s,
                                                           const InferenceKernelSizes& k) {
    using G = InferenceGroup;
    const size_t C = c.channels, Vp = c.padded_vocab_size, L = c.num_layers, B = s.B;
    const size_t BT = (size_t)s.prefill_rows() * s.prefill_T, X = k.elem_bytes, F = sizeof(float), I = sizeof(int);
    const size_t cache = s.cached ? L * B * C * (size_t)s.max_T : 0;  // (L, B, NH, max_T, HS)
    const size_t D = s.cached ? B : 0;                               // the decode step's rows
    const size_t loop = s.cached ? (size_t)s.max_new * B : 0;
    std::vector<InferenceBuffer> t(infer::Count);
    t[infer::Params] = {s.owns_params ? "parameters (" + k.precision + ")" : std::string("parameters (borrowed)"),
                        G::Parameters, s.owns_params ? gpt2_num_parameters(c) : 0, X};
    t[infer::KCache] = {"K (L,B,NH,max_T,HS)", G::KVCache, cache, X};
    t[infer::VCache] = {"V (L,B,NH,max_T,HS)", G::KVCache, cache, X};
    // every layer writes the same buffers (stride 0); ln1, ln2 and lnf share one, each dead when the next is made
    t[infer::PrefillInputs] = {"inputs (B, T)", G::Prefill, BT, I};
    layer_rows(t, infer::Encoded, G::Prefill, BT, C, X, "encoded", "ln1 / ln2 / lnf");
    t[infer::AttSaved] = {"attention LSE / P", G::Prefill, k.attention_saved, 1};
    t[infer::AttWorkspace] = {"attention workspace", G::Prefill, k.attention_workspace, 1};
    const size_t P = s.slot_prefill ? s.prefill_rows() : 0;  // a server's prompts: their slots and lengths
    t[infer::PrefillSlots] = {"prompts' slots (P)", G::Prefill, P, I};
    t[infer::PrefillLengths] = {"prompts' lengths (P)", G::Prefill, P, I};
    t[infer::Tokens] = {"tokens (B)", G::Decode, D, I};  // the step's input, the last pick's output
    layer_rows(t, infer::DecodeX, G::Decode, D, C, X, "x", "ln1 / ln2");
    t[infer::DecodeAttWorkspace] = {"attention partials", G::Decode, s.cached ? k.decode_attention_workspace : 0, 1};
    t[infer::MmaPartials] = {"decode_mma partials", G::Decode, s.cached ? k.mma_partial_floats : 0, F};
    t[infer::MmaCounters] = {"decode_mma counters", G::Decode, s.cached ? k.mma_counters : 0, sizeof(unsigned)};
    t[infer::Coins] = {"coins (max_new, B)", G::Decode, loop, F};
    t[infer::PromptLen] = {"prompt lengths", G::Decode, D, I};
    t[infer::PickPartials] = {"greedy pick partials", G::Decode, s.cached ? k.pick_partials : 0,
                              sizeof(unsigned long long)};
    t[infer::PickCount] = {"greedy pick counts", G::Decode, k.pick_partials && s.cached ? B : 0, sizeof(unsigned)};
    const bool persistent = s.cached && k.persistent_counters > 0;
    t[infer::PersistentPhases] = {"persistent step: phases", G::Decode, persistent ? k.persistent_phase_bytes : 0, 1};
    t[infer::PersistentCounters] = {"persistent step: counters", G::Decode, persistent ? k.persistent_counters : 0,
                                    sizeof(unsigned)};
    t[infer::PersistentPicks] = {"persistent step: greedy ranks", G::Decode, persistent ? k.persistent_picks : 0,
                                 sizeof(unsigned long long)};
    t[infer::PersistentActivations] = {"persistent step: activations (L, 10 C)", G::Decode,
                                       persistent ? k.persistent_activations : 0, X};
    // the prefill's last positions, then each decode step's one
    t[infer::Lengths] = {"lengths (B)", G::Classifier, B, I};
    t[infer::Lnf] = {"lnf (B, C)", G::Classifier, B * C, X};
    t[infer::Logits] = {"logits (B, Vp)", G::Classifier, B * Vp, X};
    // a server's prompts' last positions: rows of their own, so a prefill leaves a decode step's logits alone
    t[infer::PrefillLnf] = {"prompts' lnf (P, C)", G::Classifier, P * C, X};
    t[infer::PrefillLogits] = {"prompts' logits (P, Vp)", G::Classifier, P * Vp, X};
    // a server (GpuServeEngine): the prompts' picks (P rows), the pickers' shared scratch, and per step in flight its
    // upload (lengths, pick settings, coins), the picks it writes into mapped host memory and the logits it copies out
    const size_t SP = s.server_steps > 0 ? P : 0, SB = s.server_steps > 0 ? B : 0, steps = s.server_steps;
    const size_t PP = sizeof(PickParams);
    t[infer::ServeParams] = {"prompts' pick settings (P)", G::Server, SP, PP};
    t[infer::ServeCoins] = {"prompts' coins (P)", G::Server, SP, F};
    t[infer::ServePicks] = {"prompts' picks (2P)", G::Server, 2 * SP, I};
    t[infer::ServeScratch] = {"pickers' scratch", G::Server, steps ? std::max(SB, SP) : 0, I};
    t[infer::ServeUploads] = {"steps' uploads", G::Server, steps * serve_step_stride(serve_upload_bytes((int)SB)), 1};
    t[infer::CublasLt] = {"cuBLASLt workspace", G::Workspace, k.cublaslt_workspace, 1};
    t[infer::NewTokens] = {"new tokens (max_new,B)", G::HostMapped, loop, I};
    const size_t sets = s.server_steps > 0 ? kServePickSets : 0;
    t[infer::ServeParamsHost] = {"server: prompts' pick settings", G::HostMapped, sets * serve_step_stride(SP * PP), 1};
    t[infer::ServeCoinsHost] = {"server: prompts' coins", G::HostMapped, sets * serve_step_stride(SP * F), 1};
    t[infer::ServePicksHost] = {"server: prompts' picks", G::HostMapped, sets * serve_step_stride(2 * SP * I), 1};
    t[infer::ServeUploadsHost] = {"server: steps' uploads", G::HostMapped,
                                  steps * serve_step_stride(serve_upload_bytes((int)SB)), 1};
    t[infer::ServeResultsHost] = {"server: steps' picks", G::HostMapped, steps * serve_step_stride(2 * SB * I), 1};
    t[infer::ServeLogitsHost] = {"server: steps' logits", G::HostMapped, steps * serve_step_stride(SB * Vp * X), 1};
    return t;
}

// Bytes per group, in the order of InferenceGroup, and the device total (the engine's block + cuBLASLt's).
struct InferencePlan {
    std::vector<size_t> group_bytes = std::vector<size_t>((int)InferenceGroup::HostMapped + 1, 0);
    size_t block = 0;  // the engine's one device allocation
    size_t device_total() const { return block + group_bytes[(int)InferenceGroup::Workspace]; }
};

inline InferencePlan inference_plan_of(const std::vector<InferenceBuffer>& table) {
    InferencePlan p;
    for (const InferenceBuffer& b : table) {
        p.group_bytes[(int)b.group] += b.bytes();
        if (inference_in_block(b)) p.block += b.bytes();
    }
    return p;
}

// The plan as the start-up table prints it: a row per group with its total (with `buffers`, each followed by its
// buffers, empty ones left out), then the device total.
inline std::vector<std::string> inference_plan_lines(const std::vector<InferenceBuffer>& table, bool buffers) {
    const InferencePlan plan = inference_plan_of(table);
    std::vector<std::string> lines;
    for (int g = 0; g < (int)plan.group_bytes.size(); g++) {
        const bool borrowed = g == (int)InferenceGroup::Parameters && plan.group_bytes[g] == 0;
        if (plan.group_bytes[g] == 0 && !borrowed) continue;
        lines.push_back(format_table_row(inference_group_name((InferenceGroup)g),
                                         borrowed ? "none: borrowed" : format_bytes((double)plan.group_bytes[g])));
        for (const InferenceBuffer& b : table)
            if (buffers && (int)b.group == g && b.bytes() > 0)
                lines.push_back(format_table_row("  " + b.name, format_bytes((double)b.bytes())));
    }
    lines.push_back(format_table_row("total on the device", format_bytes((double)plan.device_total())));
    return lines;
}
