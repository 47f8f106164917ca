// Which cuBLASLt algorithm each GEMM shape runs: timed inside the real workload, recorded in a file, read back so
// that later runs use the same algorithms and therefore give the same bits.
//
// cuBLASLt's heuristic answers a shape with a ranked list of algorithms; the first is a good guess, not always the
// fastest (later answers run some of GPT-2's shapes faster). Timing them in
// isolation misleads: a GEMM timed back to back with itself has its operands in L2 and its own power state, and
// choices made that way made the d12 step slower. So the candidates are timed where they run:
//
//   LLMC_GEMM_TUNE=file    tuning run: the calls of each shape not yet in the file take turns over the
//                          heuristic's first kCandidates answers, each call timed by a pair of CUDA events around
//                          it on its own stream (real operands, caches and clocks). Once every candidate has
//                          kSamples times, the one with the smallest median is kept (the first answer unless
//                          another is kMinGain faster) and the file is rewritten with it. A tuning run mixes
//                          algorithms from call to call, so its own numbers are not reproducible; the runs after
//                          it are.
//   LLMC_GEMM_ALGOS=file   a normal run: each shape in the file runs its recorded algorithm, any other the
//                          heuristic's first (one line says so per shape).
//
// The file (llmc/formats/gemm_algos_file.h) names the device, the cuBLASLt version and the precision, and a run on anything
// else refuses it; per shape it holds the algorithm and the medians that chose it. Tune with one process: several
// tuning into one file would each rewrite it with their own choices (the last rename wins); every rank can then
// read it.
#pragma once

#include <cublasLt.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "llmc/core/cuda_common.h"
#include "llmc/core/options.h"
#include "llmc/formats/gemm_algos_file.h"

namespace matmul_algos {

// The heuristic's preference: the workspace there is, and the operands' smallest alignment where it is under 256
// bytes (align_bytes from matmul.cuh's check_alignment; 0: the default), so no algorithm that needs more is picked.
inline cublasLtMatmulPreference_t preference(size_t workspace_bytes, int align_bytes) {
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                     sizeof(workspace_bytes)));
    const uint32_t align = (uint32_t)align_bytes;
    for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                   CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        if (align) cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, a, &align, sizeof(align)));
    return pref;
}

constexpr int kCandidates = 8;    // the heuristic's first answers that take turns
constexpr int kSamples = 5;       // timed calls per candidate before choosing
constexpr float kMinGain = 0.01f; // another answer must beat the first by this fraction of its median

struct Tuning {  // one shape being tuned
    std::string key;
    std::vector<cublasLtMatmulAlgo_t> candidates;
    std::vector<std::vector<float>> us;  // per candidate
    int turn = 0;
    bool done = false;
    cublasLtMatmulAlgo_t chosen;
};

struct Timed {
    int tuning, candidate;
    cudaEvent_t start, stop;
};

struct State {
    bool init = false;
    std::string tune_path, algos_path;
    GemmAlgosFile file;  // read from the file, plus what this run tuned
    std::vector<std::unique_ptr<Tuning>> tunings;
    std::deque<Timed> in_flight;
    std::vector<cudaEvent_t> spare_events;
};
inline State& state() {
    static State s;
    return s;
}

inline std::string make_header() {
    return std::string("llmc-gemm-algos 1 | ") + device_info().prop.name + " | cuBLASLt " +
           std::to_string(cublasLtGetVersion()) + (kFloatXIsBF16 ? " | bf16" : " | fp32");
}

inline GemmAlgo to_record(const cublasLtMatmulAlgo_t& algo, const std::string& note) {
    static_assert(sizeof(cublasLtMatmulAlgo_t) == 8 * sizeof(uint64_t), "cublasLtMatmulAlgo_t is 64 bytes");
    GemmAlgo record;
    memcpy(record.words, &algo, sizeof(algo));
    record.note = note;
    return record;
}

// FileError (llmc/core/utils.h) as one line and an exit: a bad algorithm file stops the run before it starts.
template <typename F>
inline void or_exit(F&& f) {
    try {
        f();
    } catch (const FileError& e) {
        fprintf(stderr, "error: %s\n", e.what());
        exit(EXIT_FAILURE);
    }
}

inline void save(State& s) { or_exit([&] { write_gemm_algos(s.tune_path, s.file); }); }

inline State& ready() {
    State& s = state();
    if (s.init) return s;
    s.init = true;
    const std::string& tune = engine_options().gemm_tune;
    const std::string& algos = engine_options().gemm_algos;
    if (tune.empty() && algos.empty()) return s;
    const std::string header = make_header();
    s.file.header = header;
    if (!tune.empty()) {
        s.tune_path = tune;
        or_exit([&] { read_gemm_algos(s.tune_path, header, &s.file); });  // tuning adds to what the file has
    } else {
        s.algos_path = algos;
        bool found = false;
        or_exit([&] { found = read_gemm_algos(s.algos_path, header, &s.file); });
        if (!found) {
            fprintf(stderr, "error: LLMC_GEMM_ALGOS: %s does not exist\n", algos.c_str());
            exit(EXIT_FAILURE);
        }
    }
    return s;
}

// True while this process tunes (CUDA Graphs must stay off: a captured call cannot take turns).
inline bool tuning() { return !ready().tune_path.empty(); }

// The recorded algorithm for `key`, if any.
inline bool find_recorded(const std::string& key, cublasLtMatmulAlgo_t* algo) {
    State& s = ready();
    auto it = s.file.algos.find(key);
    if (it == s.file.algos.end()) {
        if (!s.algos_path.empty()) {
            fprintf(stderr, "note: %s has no algorithm for GEMM %s; the heuristic's first runs it\n",
                    s.algos_path.c_str(), key.c_str());
        }
        return false;
    }
    memcpy(algo, it->second.words, sizeof(*algo));
    return true;
}

// Starts tuning `key` over `candidates` (the heuristic's answers, best first); returns its index, or -1 when this
// run does not tune or there is nothing to choose from.
inline int start_tuning(const std::string& key, const cublasLtMatmulAlgo_t* candidates, int n) {
    State& s = ready();
    if (s.tune_path.empty() || n < 1) return -1;
    if (n == 1) {  // nothing to choose; recorded all the same, so the file covers every shape of the run
        s.file.algos[key] = to_record(candidates[0], "the heuristic's only answer");
        save(s);
        return -1;
    }
    auto t = std::make_unique<Tuning>();
    t->key = key;
    t->candidates.assign(candidates, candidates + std::min(n, kCandidates));
    t->us.resize(t->candidates.size());
    s.tunings.push_back(std::move(t));
    return (int)s.tunings.size() - 1;
}

inline float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Picks the fastest candidate of a tuning whose samples are all in, records it and rewrites the file.
inline void choose(State& s, Tuning& t) {
    int best = 0;
    std::vector<float> med(t.candidates.size());
    for (size_t i = 0; i < med.size(); i++) med[i] = median(t.us[i]);
    for (size_t i = 1; i < med.size(); i++)
        if (med[i] < med[best]) best = (int)i;
    if (med[best] > (1.0f - kMinGain) * med[0]) best = 0;
    t.chosen = t.candidates[best];
    t.done = true;
    char note[512];
    int len = snprintf(note, sizeof(note), "heuristic's #%d: %.1f us (first: %.1f us); all:", best, med[best], med[0]);
    for (size_t i = 0; i < med.size() && len < (int)sizeof(note) - 16; i++)
        len += snprintf(note + len, sizeof(note) - len, " %.1f", med[i]);
    s.file.algos[t.key] = to_record(t.chosen, note);
    printf("GEMM tuned %s: %s\n", t.key.c_str(), note);
    save(s);
}

// Collects the times of finished calls, oldest first, up to the first still running.
inline void collect(State& s) {
    while (!s.in_flight.empty()) {
        Timed& x = s.in_flight.front();
        const cudaError_t q = cudaEventQuery(x.stop);
        if (q == cudaErrorNotReady) return;
        cudaCheck(q);
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, x.start, x.stop));
        Tuning& t = *s.tunings[x.tuning];
        if (!t.done) {
            t.us[x.candidate].push_back(ms * 1000.0f);
            bool all = true;
            for (auto& u : t.us) all = all && (int)u.size() >= kSamples;
            if (all) choose(s, t);
        }
        s.spare_events.push_back(x.start);
        s.spare_events.push_back(x.stop);
        s.in_flight.pop_front();
    }
}

inline cudaEvent_t take_event(State& s) {
    if (!s.spare_events.empty()) {
        cudaEvent_t e = s.spare_events.back();
        s.spare_events.pop_back();
        return e;
    }
    cudaEvent_t e;
    cudaCheck(cudaEventCreate(&e));
    return e;
}

// Before a call of a shape under tuning: *algo becomes this call's candidate (the candidates take turns), or the
// chosen one once the tuning is done (*done). Returns true when the call is timed: then `end_timed_call` must
// follow it on the same stream. Calls being captured into a CUDA Graph are not timed.
inline bool begin_call(int tuning, cudaStream_t stream, cublasLtMatmulAlgo_t* algo, bool* done) {
    State& s = state();
    collect(s);
    Tuning& t = *s.tunings[tuning];
    *done = t.done;
    if (t.done) {
        *algo = t.chosen;
        return false;
    }
    cudaStreamCaptureStatus capture;
    cudaCheck(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) return false;
    const int c = t.turn++ % (int)t.candidates.size();
    *algo = t.candidates[c];
    Timed x{tuning, c, take_event(s), take_event(s)};
    cudaCheck(cudaEventRecord(x.start, stream));
    s.in_flight.push_back(x);
    return true;
}
inline void end_timed_call(cudaStream_t stream) {
    cudaCheck(cudaEventRecord(state().in_flight.back().stop, stream));
}

// At the end of a tuning run: the shapes whose candidates are still short of samples (not in the file).
inline int unfinished() {
    State& s = state();
    int n = 0;
    for (auto& t : s.tunings) n += !t->done;
    return n;
}

}  // namespace matmul_algos
