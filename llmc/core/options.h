// The engine's LLMC_* environment switches, read once. None is needed for a normal run: they pick another kernel
// for an A/B comparison or a fallback, record or replay GEMM algorithms, or print a diagnostic. A value the switch
// does not take stops the program in one line naming the variable.
//
//   LLMC_NO_HOPPER=1          the pre-Hopper kernels (mma.sync attention, cuBLASLt GELU backward) on an H100/H200
//   LLMC_HOPPER_DGELU=0       the GELU kernel and cuBLASLt's DGELU/BGRADB epilogues instead of the Hopper kernel
//   LLMC_GEMM_TUNE=FILE       time cuBLASLt's candidate algorithms inside the real step and record the fastest
//   LLMC_GEMM_ALGOS=FILE      replay the recorded algorithms (bit-reproducible runs)
//   LLMC_PRINT_MEMORY_MAP=1   print every model buffer's device address range (to read sanitizer reports)
//   LLMC_FP8_CHECK_AMAX=1     -fp8: every amax a producer folded in is taken again by a pass of its own and the two
//                             compared, bit for bit, after each micro-step (the wiring's check; slower)
//   LLMC_FP8_FAST_ACCUM=LIST  -fp8: the FP8 GEMMs that take cuBLASLt's fast accumulation, a comma list of fwd, dgrad,
//                             wgrad, or none (default fwd: the forwards, the lm_head's included); the others promote
//   LLMC_FP8_GRADS=e4m3       -fp8: the output gradients in E4M3 instead of E5M2 (comparisons of the recipe)
//   LLMC_FP8_BLOCKS=1         -fp8: the blocks' linears with a scale per block (1x128, weights 128x128; E4M3
//                             gradients; promoted accumulation; not with -fp8h), llmc/model/gpt2_fp8_blocks.cuh
//   LLMC_FP8_RECAST=1         -fp8: attproj's and fcproj's input transposes cast again in the backward (from atty
//                             and fch, with the forward's scale: the same bytes) instead of kept per layer: less
//                             memory (5 C bytes a row a layer), one more read of those inputs
//   LLMC_DECODE_ATTENTION=split|head   decode attention's kernel, forced (comparisons)
//   LLMC_DECODE_CUBLAS=1      a decode step's products by cuBLASLt, forced (comparisons)
//   LLMC_DECODE_PERSISTENT=1  batch-1 decode steps (generation at batch 1, a server's steps of one busy slot) as
//                             one persistent kernel (Hopper, BF16; llmc/inference/persistent_step.cuh,
//                             docs/DECODE.md), forced; 0: never. Unset, Auto takes it for the wider models
//                             (C >= 1024), where it measured ahead, unless LLMC_DECODE_ATTENTION is set
//   LLMC_DECODE_TILES=0       the persistent step's products by FFMA (decode_persistent_products.cuh) instead of on
//                             the tensor cores (mma.sync, a page a tile of 16 rows; decode_persistent_tiles.cuh)
//   LLMC_TRACE=PREFIX         the trainer records every kernel, copy and collective of one step (and the step
//                             before it) with CUPTI: PREFIX.rank<R>.json (Chrome trace) and a summary line per rank
//   LLMC_TRACE_STEP=N         the step LLMC_TRACE records (default 6)
//   LLMC_COMM_SMS=N           several GPUs: NCCL's blocks per collective, and the SMs the persistent kernels leave
//                             free while a collective is in flight (docs/MULTI_GPU.md; -1: NCCL's own choice and
//                             every SM for compute)
//   LLMC_NCCL_CTA_POLICY=efficiency   several GPUs: NCCL's CTA policy (NCCL_CTA_POLICY_EFFICIENCY: the fewest blocks
//                             that keep its bandwidth, for overlap with compute; default: NCCL's own choice)
//   LLMC_PEER_COPY=0          several GPUs on one host: NCCL moves the layers' buckets too, instead of the copy
//                             engines (llmc/distributed/peer_copy.cuh; for comparisons)
//   LLMC_RANK_TIMEOUT_S=N     several GPUs: a rank that has made no progress for N seconds stops the run (a peer on
//                             another host lost without NCCL noticing; llmc/distributed/rank_watchdog.h); 0: off
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

struct EngineOptions {
    static constexpr int kCommSmsDefault = -1;
    bool no_hopper = false;
    bool hopper_dgelu = true;
    std::string gemm_tune, gemm_algos;
    bool print_memory_map = false;
    bool fp8_check_amax = false;
    bool fp8_fast_fwd = true, fp8_fast_dgrad = false, fp8_fast_wgrad = false;
    bool fp8_grads_e4m3 = false;
    bool fp8_blocks = false;
    bool fp8_recast = false;
    std::string decode_attention;  // "", "split" or "head"
    bool decode_cublas = false;
    int decode_persistent = -1;  // LLMC_DECODE_PERSISTENT: -1 unset (Auto's choice), 0 never, 1 forced
    bool decode_tiles = true;
    std::string trace;
    int trace_step = 6;
    int comm_sms = -1;
    std::string nccl_cta_policy;  // "" or "efficiency"
    int rank_timeout_s = 0;
    bool peer_copy = true;

    // The switches that are set, as (name, value), for the start-up tables.
    std::vector<std::pair<std::string, std::string>> set() const {
        std::vector<std::pair<std::string, std::string>> out;
        if (no_hopper) out.push_back({"LLMC_NO_HOPPER", "1"});
        if (!hopper_dgelu) out.push_back({"LLMC_HOPPER_DGELU", "0"});
        if (!gemm_tune.empty()) out.push_back({"LLMC_GEMM_TUNE", gemm_tune});
        if (!gemm_algos.empty()) out.push_back({"LLMC_GEMM_ALGOS", gemm_algos});
        if (print_memory_map) out.push_back({"LLMC_PRINT_MEMORY_MAP", "1"});
        if (fp8_check_amax) out.push_back({"LLMC_FP8_CHECK_AMAX", "1"});
        if (!fp8_fast_fwd || fp8_fast_dgrad || fp8_fast_wgrad) {
            std::string list = std::string(fp8_fast_fwd ? ",fwd" : "") + (fp8_fast_dgrad ? ",dgrad" : "") +
                               (fp8_fast_wgrad ? ",wgrad" : "");
            out.push_back({"LLMC_FP8_FAST_ACCUM", list.empty() ? "none" : list.substr(1)});
        }
        if (fp8_grads_e4m3) out.push_back({"LLMC_FP8_GRADS", "e4m3"});
        if (fp8_blocks) out.push_back({"LLMC_FP8_BLOCKS", "1"});
        if (fp8_recast) out.push_back({"LLMC_FP8_RECAST", "1"});
        if (!decode_attention.empty()) out.push_back({"LLMC_DECODE_ATTENTION", decode_attention});
        if (decode_cublas) out.push_back({"LLMC_DECODE_CUBLAS", "1"});
        if (decode_persistent >= 0) out.push_back({"LLMC_DECODE_PERSISTENT", std::to_string(decode_persistent)});
        if (!decode_tiles) out.push_back({"LLMC_DECODE_TILES", "0"});
        if (!trace.empty()) out.push_back({"LLMC_TRACE", trace + " (step " + std::to_string(trace_step) + ")"});
        if (comm_sms != kCommSmsDefault) out.push_back({"LLMC_COMM_SMS", std::to_string(comm_sms)});
        if (!nccl_cta_policy.empty()) out.push_back({"LLMC_NCCL_CTA_POLICY", nccl_cta_policy});
        if (!peer_copy) out.push_back({"LLMC_PEER_COPY", "0"});
        if (rank_timeout_s > 0) out.push_back({"LLMC_RANK_TIMEOUT_S", std::to_string(rank_timeout_s)});
        return out;
    }
    // One line for a start-up table: "none", or "NAME=value, ...".
    std::string description() const {
        std::string s;
        for (const auto& [name, value] : set()) s += (s.empty() ? "" : ", ") + name + "=" + value;
        return s.empty() ? "none" : s;
    }
};

namespace options_detail {

[[noreturn]] inline void bad(const char* name, const char* value, const char* wanted) {
    fprintf(stderr, "error: environment variable %s=%s: expected %s\n", name, value, wanted);
    exit(EXIT_FAILURE);
}
// An on/off switch: unset or empty gives `unset`; otherwise 0 or 1.
inline bool flag(const char* name, bool unset) {
    const char* v = getenv(name);
    if (!v || !*v) return unset;
    if (std::string(v) == "0") return false;
    if (std::string(v) == "1") return true;
    bad(name, v, "0 or 1");
}
// An integer in [lo, hi]; unset or empty gives `unset`.
inline int integer(const char* name, int unset, int lo, int hi) {
    const char* v = getenv(name);
    if (!v || !*v) return unset;
    char* end = nullptr;
    const long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) bad(name, v, ("an integer from " + std::to_string(lo) + " to " + std::to_string(hi)).c_str());
    return (int)x;
}
inline std::string text(const char* name) {
    const char* v = getenv(name);
    return v ? v : "";
}
// Whole seconds, 0 to a week; unset or empty gives 0.
inline int seconds(const char* name) {
    const std::string v = text(name);
    if (v.empty()) return 0;
    if (v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) > 7 * 24 * 3600)
        bad(name, v.c_str(), "whole seconds from 0 (off) to 604800");
    return std::stoi(v);
}

inline EngineOptions read() {
    EngineOptions o;
    o.no_hopper = flag("LLMC_NO_HOPPER", false);
    o.hopper_dgelu = flag("LLMC_HOPPER_DGELU", true);
    o.gemm_tune = text("LLMC_GEMM_TUNE");
    o.gemm_algos = text("LLMC_GEMM_ALGOS");
    if (!o.gemm_tune.empty() && !o.gemm_algos.empty()) {
        fprintf(stderr, "error: LLMC_GEMM_TUNE and LLMC_GEMM_ALGOS are both set: tune into one file or read one\n");
        exit(EXIT_FAILURE);
    }
    o.print_memory_map = flag("LLMC_PRINT_MEMORY_MAP", false);
    o.fp8_check_amax = flag("LLMC_FP8_CHECK_AMAX", false);
    const std::string fast = text("LLMC_FP8_FAST_ACCUM");
    if (!fast.empty()) {
        o.fp8_fast_fwd = false;
        if (fast != "none") {
            size_t at = 0;
            while (at <= fast.size()) {
                const size_t comma = std::min(fast.find(',', at), fast.size());
                const std::string gemm = fast.substr(at, comma - at);
                if (gemm == "fwd") o.fp8_fast_fwd = true;
                else if (gemm == "dgrad") o.fp8_fast_dgrad = true;
                else if (gemm == "wgrad") o.fp8_fast_wgrad = true;
                else bad("LLMC_FP8_FAST_ACCUM", fast.c_str(), "none or a comma list of fwd, dgrad and wgrad");
                at = comma + 1;
            }
        }
    }
    const std::string grads = text("LLMC_FP8_GRADS");
    if (!grads.empty() && grads != "e4m3" && grads != "e5m2") bad("LLMC_FP8_GRADS", grads.c_str(), "e5m2 or e4m3");
    o.fp8_grads_e4m3 = grads == "e4m3";
    o.fp8_blocks = flag("LLMC_FP8_BLOCKS", false);
    o.fp8_recast = flag("LLMC_FP8_RECAST", false);
    if (o.fp8_blocks && o.fp8_recast) {
        fprintf(stderr, "error: LLMC_FP8_RECAST=1 and LLMC_FP8_BLOCKS=1 do not go together (blocks keep their yT)\n");
        exit(EXIT_FAILURE);
    }
    o.decode_attention = text("LLMC_DECODE_ATTENTION");
    if (!o.decode_attention.empty() && o.decode_attention != "split" && o.decode_attention != "head")
        bad("LLMC_DECODE_ATTENTION", o.decode_attention.c_str(), "split or head");
    o.decode_cublas = flag("LLMC_DECODE_CUBLAS", false);
    o.decode_persistent = text("LLMC_DECODE_PERSISTENT").empty() ? -1 : flag("LLMC_DECODE_PERSISTENT", false);
    o.decode_tiles = flag("LLMC_DECODE_TILES", true);
    o.trace = text("LLMC_TRACE");
    o.trace_step = integer("LLMC_TRACE_STEP", o.trace_step, 2, 1 << 30);
    o.comm_sms = integer("LLMC_COMM_SMS", EngineOptions::kCommSmsDefault, -1, 64);
    o.nccl_cta_policy = text("LLMC_NCCL_CTA_POLICY");
    if (!o.nccl_cta_policy.empty() && o.nccl_cta_policy != "efficiency" && o.nccl_cta_policy != "default")
        bad("LLMC_NCCL_CTA_POLICY", o.nccl_cta_policy.c_str(), "efficiency or default");
    if (o.nccl_cta_policy == "default") o.nccl_cta_policy.clear();
    o.rank_timeout_s = seconds("LLMC_RANK_TIMEOUT_S");
    o.peer_copy = flag("LLMC_PEER_COPY", true);
    return o;
}

}  // namespace options_detail

// The switches, read from the environment on the first call.
inline const EngineOptions& engine_options() {
    static const EngineOptions o = options_detail::read();
    return o;
}
