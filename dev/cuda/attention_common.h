// What the attention dev programs (attention_forward.cu, attention_backward.cu) share on top of common.h: problem
// shapes and their parsing, the causal FLOP count, the engine's materialized-backend scratch, the fp32 flash
// variants' K/V tile load, the results table, and the driver that validates every variant on a fixed list of
// shapes and then benchmarks the chosen ones (a program only declares its variants).
#pragma once

#include <functional>

#include "common.h"
#include "llmc/kernels/attention/attention_materialized.cuh"

// The fp32 teaching variants call the engine's floatX code (the materialized backend) as fp32.
static_assert(!kFloatXIsBF16, "dev/cuda programs are built with -DENABLE_FP32 (see dev/cuda/Makefile)");

// ------------------------------------------------------------------------------------------ shapes
struct AttentionShape {
    int B, NH, T, HS;
};

// "B,NH,T,HS;B,NH,T,HS;..." appended to *out; false on anything else.
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

// Causal attention forward FLOPs as PyTorch's SDPA baseline counts them (half of the dense 4·B·NH·T²·HS);
// a backward is 2.5x that, forward + backward 3.5x.
inline double attention_forward_flops(int B, int NH, int T, int HS) { return 2.0 * B * NH * (double)T * T * HS; }

// ------------------------------------------------------------------------------------------ kernels' helpers
// Memory of the engine's materialized attention (llmc/kernels/attention/attention_materialized.cuh), sized as the engine sizes
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

// ------------------------------------------------------------------------------------------ command line
struct Options {
    std::vector<int> variants;          // to benchmark; empty = all
    int block_size = 0;                 // 0 = sweep each variant's sizes
    std::vector<AttentionShape> shapes; // benchmark shapes
    int repeats = 50;
    bool validate_only = false;
    bool small_checks = false;          // -cs: validate at the small shapes only (for compute-sanitizer runs)
};

inline void usage_and_exit(const char* prog, const char* variants_help, const char* problem) {
    if (problem) fprintf(stderr, "error: %s\n", problem);
    fprintf(stderr,
            "usage: %s [V] [-v V[,V...]] [-k block] [-s \"B,NH,T,HS;...\"] [-b B -n NH -t T -d HS] [-r repeats] [-c|-cs]\n"
            "  validates the chosen variants at a fixed list of shapes, then benchmarks them\n"
            "  V, -v  variants to validate and benchmark (default: all but opt-in ones, timed at the first shape, the\n"
            "         engine's at every shape): %s\n"
            "  -k  block size (default: sweep)      -s  benchmark shapes (default 8,12,1024,64)\n"
            "  -b -n -t -d  one benchmark shape     -r  timed repeats (default 50)\n"
            "  -c  check only (validate, no benchmark)   -cs  check only, at the three smallest shapes (sanitizers)\n",
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
        if (a == "-cs") { o.validate_only = o.small_checks = true; continue; }
        if (!a.empty() && a[0] != '-') {  // llm.c style: a bare number picks the variant (`./attention_forward 4`)
            const int x = positive_int(a);
            if (x < 1) usage_and_exit(argv[0], variants_help, ("expected a variant number, got " + a).c_str());
            o.variants.push_back(x);
            continue;
        }
        if (i + 1 >= argc) usage_and_exit(argv[0], variants_help, ("missing value after " + a).c_str());
        const char* v = argv[++i];
        const int n = positive_int(v);
        if (a == "-v") {
            if (!parse_positive_list(v, &o.variants)) usage_and_exit(argv[0], variants_help, "bad variant list");
        } else if (a == "-s") {
            if (!parse_shapes(v, &o.shapes)) usage_and_exit(argv[0], variants_help, "bad -s shape list");
        } else if (n < 1) {
            usage_and_exit(argv[0], variants_help, ("expected a positive integer after " + a).c_str());
        } else if (a == "-k") o.block_size = n;
        else if (a == "-r") o.repeats = n;
        else if (a == "-b") { one.B = n; have_one = true; }
        else if (a == "-n") { one.NH = n; have_one = true; }
        else if (a == "-t") { one.T = n; have_one = true; }
        else if (a == "-d") { one.HS = n; have_one = true; }
        else usage_and_exit(argv[0], variants_help, ("unknown option " + a).c_str());
    }
    if (have_one || o.shapes.empty()) o.shapes.push_back(one);
    return o;
}

// ------------------------------------------------------------------------------------------ results table
// One row of the results table, plus a machine-readable line that scripts/bench/bench_attention.sh picks up.
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
    // what trains (on Hopper and before it, and the non-deterministic option): benchmarked at every shape; the
    // rest at the first only (unless -v)
    std::vector<int> engine_variants;
    std::vector<Variant> variants;
    // Variants run only when -v names them (not yet validated on a GPU: kept out of the default check).
    std::vector<int> opt_in;
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

// Validates the chosen variants (-v, else all but prog.opt_in) at every block size on a fixed list of shapes (T = 1;
// T not a multiple of any tile; HS 64 and 128; B·NH large (192) and small (1)), stops at any failure, then
// benchmarks them (not with -c). Returns the exit code: 1 if any check failed.
template <typename Variant>
int run_attention_program(int argc, char** argv, const AttentionProgram<Variant>& prog) {
    const Options opt = parse_options(argc, argv, prog.variants_help);
    print_device();
    std::vector<AttentionShape> checks = {
        {2, 3, 1, 64}, {2, 4, 77, 64}, {1, 2, 333, 128}, {16, 12, 130, 64}, {1, 1, 1024, 64}, {2, 2, 515, 128},
        {1, 2, 129, 64}, {1, 2, 257, 128},  // one query past a whole number of 128-row blocks (padded_T's last rows)
    };
    if (opt.small_checks) checks.resize(3);  // still T = 1, a T no tile divides, and both head sizes
    // -v: exactly the variants it names, validated and timed; without it, every variant but the opt-in ones
    auto selected = [&](const Variant& v) {
        if (!opt.variants.empty()) return wants(opt.variants, v.id);
        return std::find(prog.opt_in.begin(), prog.opt_in.end(), v.id) == prog.opt_in.end();
    };
    int failures = 0, total = 0;
    printf("validation against the fp64 CPU reference (fp32 variants: rel-L2 <= 1e-5; bf16: <= 5e-3)\n");
    for (const AttentionShape& s : checks)
        for (const Variant& v : prog.variants)
            for (int block : v.blocks) {
                if (!selected(v)) continue;
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
            if (!selected(v)) continue;
            // without -v, the slow teaching variants run at the first shape only
            if (opt.variants.empty() && si > 0 &&
                std::find(prog.engine_variants.begin(), prog.engine_variants.end(), v.id) == prog.engine_variants.end())
                continue;
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
