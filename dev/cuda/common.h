// The harness every dev/cuda program shares, whatever kernel it studies: device buffers, seeded random inputs,
// bf16 rounding, validation against a higher-precision reference, timing, and the generic command-line pieces.
// What only the attention programs share (shapes, FLOPs, the validate-then-benchmark driver) is attention_common.h.
// Error checks (cudaCheck, cudaCheckLaunch) are the engine's, from llmc/core/cuda_common.h; the error statistics are
// the tests', from reference/compare.h, so a dev program and a test measure a kernel the same way.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/core/bf16.h"
#include "llmc/core/cuda_common.h"
#include "llmc/core/rand.h"
#include "reference/compare.h"

// ------------------------------------------------------------------------------------------ device memory
template <typename T>
struct DeviceBuffer {
    T* ptr = nullptr;
    size_t count = 0;
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t n) { resize(n); }
    ~DeviceBuffer() { if (ptr) cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void resize(size_t n) {
        if (ptr) cudaCheck(cudaFree(ptr));
        ptr = nullptr;
        count = n;
        if (n) cudaCheck(cudaMalloc(&ptr, n * sizeof(T)));
    }
    size_t bytes() const { return count * sizeof(T); }
    void upload(const std::vector<T>& host) {
        if (host.size() != count) { fprintf(stderr, "error: upload of %zu elements into %zu\n", host.size(), count); exit(1); }
        cudaCheck(cudaMemcpy(ptr, host.data(), bytes(), cudaMemcpyHostToDevice));
    }
    std::vector<T> download() const {
        std::vector<T> host(count);
        cudaCheck(cudaMemcpy(host.data(), ptr, bytes(), cudaMemcpyDeviceToHost));
        return host;
    }
    // All bytes 0xFF: NaN in fp32 and in bf16, so an element a kernel fails to write fails validation.
    void poison() { cudaCheck(cudaMemset(ptr, 0xFF, bytes())); }
};

// ------------------------------------------------------------------------------------------ inputs
// Fresh standard-normal values for every check: each call takes the next seed.
inline std::vector<float> random_normal(size_t n, float std = 1.f) {
    static uint64_t next_seed = 1234;
    Rng rng(next_seed++);
    std::vector<float> v(n);
    rng.fill_normal(v.data(), n, 0.f, std);
    return v;
}

// Rounds in place to the nearest bf16 (so a bf16 kernel and the fp64 reference see identical inputs) and
// returns the bf16 copy for the device. The rounding is the engine's (llmc/core/bf16.h), as checkpoints use it.
inline std::vector<__nv_bfloat16> round_to_bf16(std::vector<float>& v) {
    std::vector<uint16_t> bits(v.size());
    floats_to_bf16_bits(v.data(), bits.data(), v.size());
    bf16_bits_to_floats(bits.data(), v.data(), v.size());
    static_assert(sizeof(__nv_bfloat16) == sizeof(uint16_t), "__nv_bfloat16 is the same 16 bits");
    std::vector<__nv_bfloat16> out(v.size());
    if (!bits.empty()) memcpy(static_cast<void*>(out.data()), bits.data(), bits.size() * sizeof(uint16_t));
    return out;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
inline std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

inline float as_float(float x) { return x; }
inline float as_float(__nv_bfloat16 x) {
    __nv_bfloat16_raw raw = x;
    return bf16_bits_to_float(raw.x);
}

// The greedy pick over ids below V: the first maximum (by value, then the lowest id), as the sampling rule takes it.
template <typename T>
int argmax(const std::vector<T>& logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if ((double)as_float(logits[i]) > (double)as_float(logits[best])) best = i;
    return best;
}
// A near-tie between a top logit and another: within 2 bf16 steps of the top one, where two bf16 orders of summation
// may pick either.
inline bool bf16_near_tie(double top, double other) {
    return top - other <= 2 * std::ldexp(1.0, std::ilogb(std::fabs(top)) - 7);
}

// ------------------------------------------------------------------------------------------ validation
// Tolerances for one comparison: element-wise |ref - out| <= atol + |ref| * eps, and rel-L2 <= max_rel_l2.
struct Tolerance {
    double atol, eps, max_rel_l2;
};
inline Tolerance fp32_tolerance() { return {1e-5, FLT_EPSILON, 1e-5}; }
// bf16: element-wise eps 0.079 and atol 0.1·RMS of the tensor (gradients vary in size), + 1e-5 for all-zero
// references (T = 1). A correct bf16 kernel shows rel-L2 ~2.5e-3, but its error has a heavy tail: in the attention
// backward D = rowsum(dO∘O) is formed from the bf16 O (as in FlashAttention-2), and for a row whose softmax sits
// on one key that error lands on one dK/dQ element (seen: 1.5e-2 with RMS(dK) ~0.2, once in 1.6M elements). So
// the element-wise bound only catches gross errors, and rel-L2 <= 5e-3 is the precision criterion.
inline Tolerance bf16_tolerance(double ref_rms) { return {1e-1 * ref_rms + 1e-5, 0.079, 5e-3}; }

inline double rms(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return v.empty() ? 0 : std::sqrt(s / v.size());
}

// Compares `out` with the fp64 reference; prints one line (and up to 10 mismatches); returns pass/fail.
// Elements where the reference is not finite (masked) are skipped; NaN in `out` (unwritten) is a mismatch and
// makes rel-L2 and max-abs NaN.
template <typename T>
bool validate(const char* what, const std::vector<T>& out, const std::vector<double>& ref, const Tolerance& tol) {
    if (out.size() != ref.size()) {
        printf("    %-6s FAIL: %zu elements, reference has %zu\n", what, out.size(), ref.size());
        return false;
    }
    // rel-L2 and max-abs as every test computes them; a skipped element counts as 0 on both sides.
    const ErrorStats err = compare_by(
        ref.size(), [&](size_t i) { return std::isfinite(ref[i]) ? (double)as_float(out[i]) : 0.0; },
        [&](size_t i) { return std::isfinite(ref[i]) ? ref[i] : 0.0; });
    int mismatches = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(ref[i])) continue;
        const double o = as_float(out[i]);
        if (!(std::fabs(o - ref[i]) <= tol.atol + std::fabs(ref[i]) * tol.eps)) {
            if (mismatches < 10) printf("      mismatch at %zu: ref %.7g out %.7g\n", i, ref[i], o);
            mismatches++;
        }
    }
    const bool ok = mismatches == 0 && err.rel_l2 <= tol.max_rel_l2;
    printf("    %-6s rel-L2 %.3e (<= %.0e)  max-abs %.3e  mismatches %d  %s\n", what, err.rel_l2, tol.max_rel_l2,
           err.max_abs, mismatches, ok ? "ok" : "FAIL");
    return ok;
}

// ------------------------------------------------------------------------------------------ timing
struct Timing {
    double cold_ms;  // median, L2 overwritten before every call: inputs come from device memory, as in training
    double warm_ms;  // median, back-to-back calls on the same buffers (what the SDPA baseline script measures)
};

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Overwrites the L2 cache (a buffer twice its size, filled with `salt`), so the next call on the stream reads its
// inputs from device memory.
inline void flush_l2(int salt = 0) {
    static DeviceBuffer<char> flush;
    if (!flush.ptr) {
        int dev, l2 = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
        flush.resize((size_t)std::max(l2, 1 << 20) * 2);
    }
    cudaCheck(cudaMemsetAsync(flush.ptr, salt & 0xFF, flush.bytes()));
}

// Times fn() `repeats` times each way with CUDA events after a warm-up.
template <typename F>
Timing benchmark(F&& fn, int repeats) {
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    for (int i = 0; i < 3; i++) fn();
    cudaCheck(cudaDeviceSynchronize());
    auto timed_ms = [&] {
        cudaCheck(cudaEventRecord(start));
        fn();
        cudaCheck(cudaEventRecord(stop));
        cudaCheck(cudaEventSynchronize(stop));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, start, stop));
        return (double)ms;
    };
    std::vector<double> cold, warm;
    for (int i = 0; i < repeats; i++) {
        flush_l2(i);  // a cold call
        cold.push_back(timed_ms());
    }
    for (int i = 0; i < repeats; i++) warm.push_back(timed_ms());
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    return {median(cold), median(warm)};
}

inline void print_device() {
    int dev;
    cudaDeviceProp p;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&p, dev));
    printf("device: %s, %d SMs, compute capability %d.%d, L2 %d MB\n", p.name, p.multiProcessorCount, p.major, p.minor,
           p.l2CacheSize >> 20);
}

// ------------------------------------------------------------------------------------------ command line
// The value of a whole positive decimal number, or 0 for anything else (empty, a sign, a suffix, too long), so
// callers reject it.
inline int positive_int(const std::string& s) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return 0;
    return atoi(s.c_str());
}

// "1,3,5" appended to *out as {1, 3, 5}; false if any item is not a positive number.
inline bool parse_positive_list(const std::string& s, std::vector<int>* out) {
    size_t at = 0;
    while (at <= s.size()) {
        size_t end = s.find(',', at);
        if (end == std::string::npos) end = s.size();
        const int x = positive_int(s.substr(at, end - at));
        if (x < 1) return false;
        out->push_back(x);
        at = end + 1;
    }
    return true;
}

// The command line of the programs that time one kernel family at a list of two-number shapes:
//   -c (validation only), -r <repeats>, -s "a,b;a,b" (the timed shapes, replacing the defaults).
// Returns false after printing what was wrong (with `usage`, e.g. "[-r repeats] [-s \"N,C;N,C\"] [-c]").
struct ShapeArgs {
    int repeats = 50;
    bool check_only = false;
    std::vector<std::array<int, 2>> shapes;  // from -s; empty: the program's defaults
};
inline bool parse_shape_args(int argc, char** argv, const char* usage, ShapeArgs* a) {
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        if (arg == "-c") {
            a->check_only = true;
        } else if (arg == "-r" && i + 1 < argc) {
            a->repeats = positive_int(argv[++i]);
            if (a->repeats < 1) { fprintf(stderr, "error: -r takes a positive number of repeats\n"); return false; }
        } else if (arg == "-s" && i + 1 < argc) {
            std::vector<int> v;
            std::string list = argv[++i];
            for (char& ch : list) if (ch == ';') ch = ',';
            if (!parse_positive_list(list, &v) || v.size() % 2 != 0) {
                fprintf(stderr, "error: -s takes pairs of positive numbers: %s\n", usage);
                return false;
            }
            for (size_t k = 0; k < v.size(); k += 2) a->shapes.push_back({v[k], v[k + 1]});
        } else {
            fprintf(stderr, "usage: %s %s\n", argv[0], usage);
            return false;
        }
    }
    return true;
}

// The -s shapes, if any, replace the program's default `timed` list of {a, b, name} shapes.
template <typename Shape>
inline void use_shape_args(const ShapeArgs& a, std::vector<Shape>* timed) {
    if (a.shapes.empty()) return;
    timed->clear();
    for (const auto& sh : a.shapes) timed->push_back({sh[0], sh[1], "custom"});
}

// Whether `id` is among the chosen ones; nothing chosen means all.
inline bool wants(const std::vector<int>& chosen, int id) {
    return chosen.empty() || std::find(chosen.begin(), chosen.end(), id) != chosen.end();
}
