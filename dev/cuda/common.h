// The harness every dev/cuda program shares: device buffers, seeded random inputs, validation against a
// higher-precision reference, timing, causal-attention FLOP counting, the command line, and the driver that
// validates every variant and then benchmarks them (a program only declares its variants).
// Error checks (cudaCheck, cudaCheckLaunch) are the engine's, from llmc/cuda_common.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "llmc/attention_materialized.cuh"
#include "llmc/bf16.h"
#include "llmc/cuda_common.h"
#include "llmc/rand.h"

// The fp32 teaching variants call the engine's floatX code (the materialized backend) as fp32.
static_assert(!kFloatXIsBF16, "dev/cuda programs are built with -DENABLE_FP32 (see dev/cuda/Makefile)");

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
// returns the bf16 copy for the device.
inline std::vector<__nv_bfloat16> round_to_bf16(std::vector<float>& v) {
    std::vector<__nv_bfloat16> out(v.size());
    for (size_t i = 0; i < v.size(); i++) {
        uint16_t bits = float_to_bf16_bits(v[i]);
        v[i] = bf16_bits_to_float(bits);
        __nv_bfloat16_raw raw;
        raw.x = bits;
        out[i] = raw;
    }
    return out;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
inline std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

inline float as_float(float x) { return x; }
inline float as_float(__nv_bfloat16 x) {
    __nv_bfloat16_raw raw = x;
    return bf16_bits_to_float(raw.x);
}

// ------------------------------------------------------------------------------------------ validation
// Tolerances for one comparison: element-wise |ref - out| <= atol + |ref| * eps, and rel-L2 <= max_rel_l2.
struct Tolerance {
    double atol, eps, max_rel_l2;
};
inline Tolerance fp32_tolerance() { return {1e-5, FLT_EPSILON, 1e-5}; }
// bf16: eps ~ 0.079 as in the design note; atol scaled to the tensor's RMS (gradients vary in size). A correct
// bf16 kernel shows rel-L2 ~2.5e-3, but its error has a heavy tail: D = rowsum(dO∘O) is formed from the bf16 O
// (as in FlashAttention-2), and for a row whose softmax sits on one key that error lands on one dK/dQ element
// (seen: 1.5e-2 with RMS(dK) ~0.2, once in 1.6M elements). So the element-wise bound (1e-1·RMS) only catches
// gross errors and rel-L2 <= 5e-3 is the precision criterion; + 1e-5 for all-zero references (T = 1).
inline Tolerance bf16_tolerance(double ref_rms) { return {1e-1 * ref_rms + 1e-5, 0.079, 5e-3}; }

inline double rms(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return v.empty() ? 0 : std::sqrt(s / v.size());
}

// Compares `out` with the fp64 reference; prints one line (and up to 10 mismatches); returns pass/fail.
// Elements where the reference is not finite (masked) are skipped; NaN in `out` (unwritten) is a mismatch.
template <typename T>
bool validate(const char* what, const std::vector<T>& out, const std::vector<double>& ref, const Tolerance& tol) {
    if (out.size() != ref.size()) {
        printf("    %-6s FAIL: %zu elements, reference has %zu\n", what, out.size(), ref.size());
        return false;
    }
    double err2 = 0, ref2 = 0, max_abs = 0;
    int mismatches = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(ref[i])) continue;
        double o = as_float(out[i]);
        double diff = std::fabs(o - ref[i]);
        if (std::isnan(diff)) diff = INFINITY;
        err2 += diff * diff;
        ref2 += ref[i] * ref[i];
        max_abs = std::max(max_abs, diff);
        if (!(diff <= tol.atol + std::fabs(ref[i]) * tol.eps)) {
            if (mismatches < 10) printf("      mismatch at %zu: ref %.7g out %.7g\n", i, ref[i], o);
            mismatches++;
        }
    }
    double rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
    bool ok = mismatches == 0 && rel_l2 <= tol.max_rel_l2;
    printf("    %-6s rel-L2 %.3e (<= %.0e)  max-abs %.3e  mismatches %d  %s\n", what, rel_l2, tol.max_rel_l2, max_abs,
           mismatches, ok ? "ok" : "FAIL");
    return ok;
}

// ------------------------------------------------------------------------------------------ timing
struct Timing {
    double cold_ms;  // median, L2 overwritten before every call (the design note's scheme)
    double warm_ms;  // median, back-to-back calls on the same buffers (what the SDPA baseline script measures)
};

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// The fp32 flash variants' key/value tile: rows [k0, k0 + Bc) of one head's K and V, read from the packed qkv
// rows (`base` points at the head's Q, `stride` elements per token, K at +C, V at +2C) by `threads` threads into
// shared memory; rows past T become zeros. Callers synchronise around it.
template <int Bc, int HS>
__device__ void load_kv_tile_fp32(float (&Ks)[Bc][HS], float (&Vs)[Bc][HS], const float* base, size_t stride, int C,
                                  int k0, int T, int tid, int threads) {
    for (int idx = tid; idx < Bc * HS; idx += threads) {
        const int r = idx / HS, d = idx % HS, key = k0 + r;
        Ks[r][d] = key < T ? base[(size_t)key * stride + C + d] : 0.f;
        Vs[r][d] = key < T ? base[(size_t)key * stride + 2 * C + d] : 0.f;
    }
}

// Times fn() `repeats` times each way with CUDA events after a warm-up.
template <typename F>
Timing benchmark(F&& fn, int repeats) {
    static DeviceBuffer<char> flush;
    if (!flush.ptr) {
        int dev, l2 = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
        flush.resize((size_t)std::max(l2, 1 << 20) * 2);
    }
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
        cudaCheck(cudaMemsetAsync(flush.ptr, i & 0xFF, flush.bytes()));  // L2 overwritten: a cold call
        cold.push_back(timed_ms());
    }
    for (int i = 0; i < repeats; i++) warm.push_back(timed_ms());
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    return {median(cold), median(warm)};
}

// Causal attention forward FLOPs as PyTorch's SDPA baseline counts them (half of the dense 4·B·NH·T²·HS);
// a backward is 2.5x that, forward + backward 3.5x.
inline double attention_forward_flops(int B, int NH, int T, int HS) { return 2.0 * B * NH * (double)T * T * HS; }

struct AttentionShape {
    int B, NH, T, HS;
};

// ------------------------------------------------------------------------------------------ engine backend
// Memory of the engine's materialized attention (llmc/attention_materialized.cuh), sized as the engine sizes
// it: P (saved by the forward for the backward) and the workspace both passes share.
struct MaterializedScratch {
    DeviceBuffer<floatX> att, workspace;
    static size_t bytes(const AttentionShape& s) {
        return attention_materialized_saved_bytes(s.B, s.T, s.NH) +
               attention_materialized_workspace_bytes(s.B, s.T, s.NH * s.HS, s.NH);
    }
    void allocate(const AttentionShape& s) {
        att.resize(attention_materialized_saved_bytes(s.B, s.T, s.NH) / sizeof(floatX));
        workspace.resize(attention_materialized_workspace_bytes(s.B, s.T, s.NH * s.HS, s.NH) / sizeof(floatX));
    }
};

// ------------------------------------------------------------------------------------------ command line

struct Options {
    std::vector<int> variants;          // to benchmark; empty = all
    int block_size = 0;                 // 0 = sweep each variant's sizes
    std::vector<AttentionShape> shapes; // benchmark shapes
    int repeats = 50;
    bool validate_only = false;
};

inline bool parse_shapes(const char* s, std::vector<AttentionShape>* out) {
    std::string str(s);
    size_t at = 0;
    while (at < str.size()) {
        size_t end = str.find(';', at);
        if (end == std::string::npos) end = str.size();
        AttentionShape sh;
        if (sscanf(str.substr(at, end - at).c_str(), "%d,%d,%d,%d", &sh.B, &sh.NH, &sh.T, &sh.HS) != 4 || sh.B < 1 ||
            sh.NH < 1 || sh.T < 1 || sh.HS < 1)
            return false;
        out->push_back(sh);
        at = end + 1;
    }
    return !out->empty();
}

inline void usage_and_exit(const char* prog, const char* variants_help, const char* problem) {
    if (problem) fprintf(stderr, "error: %s\n", problem);
    fprintf(stderr,
            "usage: %s [V] [-v V[,V...]] [-k block] [-s \"B,NH,T,HS;...\"] [-b B -n NH -t T -d HS] [-r repeats] [-c]\n"
            "  validates every variant at a fixed list of shapes, then benchmarks the chosen variants\n"
            "  V, -v  variants to benchmark (default: all at the first shape, the bf16 flash variant at every shape): %s\n"
            "  -k  block size (default: sweep)      -s  benchmark shapes (default 8,12,1024,64)\n"
            "  -b -n -t -d  one benchmark shape     -r  timed repeats (default 50)\n"
            "  -c  check only (validate, no benchmark)\n",
            prog, variants_help);
    exit(problem ? EXIT_FAILURE : EXIT_SUCCESS);
}

inline Options parse_options(int argc, char** argv, const char* variants_help) {
    Options o;
    AttentionShape one = {8, 12, 1024, 64};
    bool have_one = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") usage_and_exit(argv[0], variants_help, nullptr);
        if (a == "-c") { o.validate_only = true; continue; }
        if (!a.empty() && a[0] != '-') {  // llm.c style: a bare number picks the variant (`./attention_forward 4`)
            const int x = atoi(a.c_str());
            if (x < 1 || a.find_first_not_of("0123456789") != std::string::npos) {
                usage_and_exit(argv[0], variants_help, ("expected a variant number, got " + a).c_str());
            }
            o.variants.push_back(x);
            continue;
        }
        if (i + 1 >= argc) usage_and_exit(argv[0], variants_help, ("missing value after " + a).c_str());
        const char* v = argv[++i];
        char* end = nullptr;
        long n = strtol(v, &end, 10);
        bool is_int = end && *end == '\0' && n > 0;
        if (a == "-v") {
            std::string s(v);
            size_t at = 0;
            while (at < s.size()) {
                size_t e = s.find(',', at);
                if (e == std::string::npos) e = s.size();
                int x = atoi(s.substr(at, e - at).c_str());
                if (x < 1) usage_and_exit(argv[0], variants_help, "bad variant list");
                o.variants.push_back(x);
                at = e + 1;
            }
        } else if (a == "-s") {
            if (!parse_shapes(v, &o.shapes)) usage_and_exit(argv[0], variants_help, "bad -s shape list");
        } else if (!is_int) {
            usage_and_exit(argv[0], variants_help, ("expected a positive integer after " + a).c_str());
        } else if (a == "-k") o.block_size = (int)n;
        else if (a == "-r") o.repeats = (int)n;
        else if (a == "-b") { one.B = (int)n; have_one = true; }
        else if (a == "-n") { one.NH = (int)n; have_one = true; }
        else if (a == "-t") { one.T = (int)n; have_one = true; }
        else if (a == "-d") { one.HS = (int)n; have_one = true; }
        else usage_and_exit(argv[0], variants_help, ("unknown option " + a).c_str());
    }
    if (have_one || o.shapes.empty()) o.shapes.push_back(one);
    return o;
}

inline bool wants(const Options& o, int variant) {
    return o.variants.empty() || std::find(o.variants.begin(), o.variants.end(), variant) != o.variants.end();
}

inline void print_device() {
    int dev;
    cudaDeviceProp p;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&p, dev));
    printf("device: %s, %d SMs, compute capability %d.%d, L2 %d MB\n", p.name, p.multiProcessorCount, p.major, p.minor,
           p.l2CacheSize >> 20);
}

// One row of the results table, plus a machine-readable line that scripts/bench_attention.sh picks up.
inline void print_result(const char* pass, int variant, const char* name, int block, const AttentionShape& s,
                         double flops, const Timing& t) {
    printf("%-7s %2d %-22s %5d  B%-3d NH%-3d T%-6d HS%-4d %9.4f %9.4f %8.1f\n", pass, variant, name, block, s.B, s.NH, s.T,
           s.HS, t.cold_ms, t.warm_ms, flops / (t.warm_ms * 1e9));
    fflush(stdout);
}
inline void print_table_header() {
    printf("%-7s %2s %-22s %5s  %-30s %9s %9s %8s\n", "pass", "v", "variant", "block", "shape", "cold_ms", "warm_ms",
           "TFLOP/s");
}

// ------------------------------------------------------------------------------------------ the driver
// What an attention dev program declares. `Variant` has at least: int id; const char* name; std::vector<int>
// blocks (the block sizes, or configurations, it is validated and swept at).
template <typename Variant>
struct AttentionProgram {
    const char* pass = "";           // first column of the skip lines ("fwd", "bwd")
    const char* variants_help = "";  // the -v list of the usage text
    const char* flops_note = "";     // how TFLOP/s counts, appended to the benchmark headline
    int engine_variant = 0;          // what trains: benchmarked at every shape; the rest at the first only (unless -v)
    std::vector<Variant> variants;
    // Runs one variant at one block size on fresh inputs, poisoned outputs, and validates it.
    std::function<bool(const Variant&, int block, const AttentionShape&)> validate_variant;
    // Further checks after the variant checks, one count each (e.g. determinism).
    std::vector<std::function<bool()>> extra_checks;
    // Scratch a variant needs at a shape (0 if little): over kMaxScratchBytes it is not benchmarked there.
    std::function<size_t(const Variant&, const AttentionShape&)> scratch_bytes;
    // Times one variant at one block size and prints its result row(s) with print_result.
    std::function<void(const Variant&, int block, const AttentionShape&, int repeats)> time_variant;
};

constexpr size_t kMaxScratchBytes = 16ull << 30;

// Validates every variant at every block size on a fixed list of shapes (T = 1; T not a multiple of any tile;
// HS 64 and 128; B·NH large (192) and small (1)), stops at any failure, then benchmarks. Returns the exit code.
template <typename Variant>
int run_attention_program(int argc, char** argv, const AttentionProgram<Variant>& prog) {
    const Options opt = parse_options(argc, argv, prog.variants_help);
    print_device();
    const std::vector<AttentionShape> checks = {
        {2, 3, 1, 64}, {2, 4, 77, 64}, {1, 2, 333, 128}, {16, 12, 130, 64}, {1, 1, 1024, 64}, {2, 2, 515, 128},
    };
    int failures = 0, total = 0;
    printf("validation against the fp64 CPU reference (fp32 variants: rel-L2 <= 1e-5; bf16: <= 5e-3)\n");
    for (const AttentionShape& s : checks)
        for (const Variant& v : prog.variants)
            for (int block : v.blocks) {
                printf("  v%d %-22s block %3d  B%d NH%d T%d HS%d\n", v.id, v.name, block, s.B, s.NH, s.T, s.HS);
                total++;
                if (!prog.validate_variant(v, block, s)) failures++;
            }
    for (const auto& extra : prog.extra_checks) {
        total++;
        if (!extra()) failures++;
    }
    if (failures) {
        printf("VALIDATION FAILED: %d of %d checks\n", failures, total);
        return 1;
    }
    printf("validation: all %d checks passed\n", total);
    if (opt.validate_only) return 0;

    printf("\nbenchmark: median of %d calls; cold = L2 flushed before each call, warm = back-to-back (as the SDPA "
           "script); TFLOP/s from warm%s\n", opt.repeats, prog.flops_note);
    print_table_header();
    for (size_t si = 0; si < opt.shapes.size(); si++) {
        const AttentionShape& s = opt.shapes[si];
        for (const Variant& v : prog.variants) {
            if (!wants(opt, v.id)) continue;
            // without -v, the slow teaching variants run at the first shape only
            if (opt.variants.empty() && si > 0 && v.id != prog.engine_variant) continue;
            const size_t scratch = prog.scratch_bytes ? prog.scratch_bytes(v, s) : 0;
            if (scratch > kMaxScratchBytes) {
                printf("%-7s %2d %-24s skipped: T×T buffers need %.1f GB\n", prog.pass, v.id, v.name, scratch / 1e9);
                continue;
            }
            const std::vector<int> blocks = opt.block_size ? std::vector<int>{opt.block_size} : v.blocks;
            for (int block : blocks) {
                if (std::find(v.blocks.begin(), v.blocks.end(), block) == v.blocks.end()) continue;
                prog.time_variant(v, block, s, opt.repeats);
            }
        }
    }
    return 0;
}
