// LayerNorm forward (with the residual add the engine fuses into it) and backward (dinp accumulated, dweight, dbias
// and the row sum of dinp), exactly the engine's kernels (llmc/kernels/layernorm.cuh, layernorm_backward.cuh): both
// are memory-bound, so next to the time this prints the bytes they must move and the rate that makes (the H200's
// DRAM peak is 4.8 TB/s).
//   forward:  reads a and b, writes residual = a + b and out (4 rows of C per row, + mean and rstd)
//   backward: reads dout and inp, reads and writes dinp (4 rows of C per row), then a small ordered reduction
// Every shape is validated against the fp64 CPU reference (reference/gpt2.h), written outputs poisoned,
// before anything is timed: rel-L2 <= 5e-3 and the element-wise bound of bf16_tolerance.
// The digest line (FNV-1a over the bytes of the outputs at the first timed shape) lets two builds be compared bit
// for bit: same inputs, same digest.
// Then the forward as FP8 training writes qkv's and fc's inputs (E4M3 y and its transpose yT for the weight gradient):
// current scaling (bf16 out with its amax, then fp8_cast_transpose_current) against delayed scaling (y written by
// the LayerNorm with the scale known before, then fp8_transpose); given current scaling's scale, the delayed path's
// y and yT must be the same bytes (checked at every timed shape before it is timed).
// Build: make -C dev/cuda layernorm      Run: ./layernorm [-r repeats] [-s "N,C;N,C"] [-c]  (-c: validation only)
#include "common.h"
#include "llmc/kernels/fp8/cast_transpose.cuh"
#include "llmc/kernels/layernorm_backward.cuh"
#include "reference/gpt2.h"

struct Shape {
    int N, C;
    const char* name;
};

struct LayerNormBuffers {
    DeviceBuffer<floatX> a, b, w, bias, residual, out, dout, dinp, dw, db, dsum;
    DeviceBuffer<float> mean, rstd, scratch;
    LayerNormBuffers(int N, int C)
        : a((size_t)N * C), b((size_t)N * C), w(C), bias(C), residual((size_t)N * C), out((size_t)N * C),
          dout((size_t)N * C), dinp((size_t)N * C), dw(C), db(C), dsum(C), mean(N), rstd(N),
          scratch(layernorm_backward_scratch_floats(N, C)) {}
    void forward(int N, int C) {
        fused_residual_layernorm_forward(residual.ptr, out.ptr, mean.ptr, rstd.ptr, a.ptr, b.ptr, w.ptr, bias.ptr, N,
                                         C);
    }
    void backward(int N, int C) {
        layernorm_backward(dinp.ptr, dw.ptr, db.ptr, dout.ptr, residual.ptr, w.ptr, mean.ptr, rstd.ptr, N, C,
                           scratch.ptr, 0, dsum.ptr);
    }
};

static_assert(kFloatXIsBF16, "layernorm.cu is built without -DENABLE_FP32: it times the engine's bf16 kernels");

// Fresh random inputs, rounded to bf16 as the device holds them, uploaded into buf.
struct HostInputs {
    std::vector<float> a, b, w, bias, dout, dinp0, dw0, db0, dsum0;
};
static HostInputs fill(LayerNormBuffers& buf, int N, int C) {
    HostInputs h;
    h.a = random_normal((size_t)N * C), h.b = random_normal((size_t)N * C, 0.5f);
    h.w = random_normal(C, 0.2f), h.bias = random_normal(C, 0.2f);
    for (float& x : h.w) x += 1.0f;
    h.dout = random_normal((size_t)N * C), h.dinp0 = random_normal((size_t)N * C);
    h.dw0 = random_normal(C), h.db0 = random_normal(C), h.dsum0 = random_normal(C);
    buf.a.upload(round_to_bf16(h.a)), buf.b.upload(round_to_bf16(h.b)), buf.w.upload(round_to_bf16(h.w));
    buf.bias.upload(round_to_bf16(h.bias)), buf.dout.upload(round_to_bf16(h.dout));
    buf.dinp.upload(round_to_bf16(h.dinp0)), buf.dw.upload(round_to_bf16(h.dw0)), buf.db.upload(round_to_bf16(h.db0));
    buf.dsum.upload(round_to_bf16(h.dsum0));
    return h;
}

// Forward then backward on fresh inputs against fp64. What the passes write is poisoned first; what they accumulate
// into (dinp, dweight, dbias, the row sum) starts from random values, so a missed update fails too.
static bool validate_shape(const Shape& sh) {
    const int N = sh.N, C = sh.C;
    printf("  %s N=%d C=%d\n", sh.name, N, C);
    LayerNormBuffers buf(N, C);
    const HostInputs h = fill(buf, N, C);
    buf.residual.poison(), buf.out.poison(), buf.mean.poison(), buf.rstd.poison(), buf.scratch.poison();
    buf.forward(N, C);
    buf.backward(N, C);
    cudaCheck(cudaDeviceSynchronize());

    // the residual as the device rounds it is what both passes normalise
    std::vector<double> res((size_t)N * C), res_exact((size_t)N * C);
    for (size_t i = 0; i < res.size(); i++) {
        res_exact[i] = (double)h.a[i] + h.b[i];
        res[i] = round_to_bf16(h.a[i] + h.b[i]);
    }
    const std::vector<double> wd = to_double(h.w), bd = to_double(h.bias), doutd = to_double(h.dout);
    std::vector<double> out((size_t)N * C), mean(N), rstd(N);
    reference::layernorm_forward(out.data(), mean.data(), rstd.data(), res.data(), wd.data(), bd.data(), 1, N, C);
    std::vector<double> dinp = to_double(h.dinp0), dw = to_double(h.dw0), db = to_double(h.db0);
    std::vector<double> dsum = to_double(h.dsum0);
    reference::layernorm_backward(dinp.data(), dw.data(), db.data(), doutd.data(), res.data(), wd.data(), mean.data(),
                            rstd.data(), 1, N, C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) dsum[c] += dinp[(size_t)n * C + c];

    bool ok = true;
    auto check = [&](const char* what, const std::vector<double>& ref, auto out_vec) {
        ok &= validate(what, out_vec, ref, bf16_tolerance(rms(ref)));
    };
    check("resid", res_exact, buf.residual.download());
    check("out", out, buf.out.download());
    check("mean", mean, buf.mean.download());
    check("rstd", rstd, buf.rstd.download());
    check("dinp", dinp, buf.dinp.download());
    check("dw", dw, buf.dw.download());
    check("db", db, buf.db.download());
    check("dsum", dsum, buf.dsum.download());
    return ok;
}

static uint64_t fnv1a(uint64_t h, const void* data, size_t bytes) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static uint64_t digest(std::initializer_list<const DeviceBuffer<floatX>*> tensors) {
    uint64_t h = 1469598103934665603ull;
    for (const DeviceBuffer<floatX>* t : tensors) {
        const std::vector<floatX> v = t->download();
        h = fnv1a(h, v.data(), v.size() * sizeof(floatX));
    }
    return h;
}

// qkv's (fc's) FP8 input both ways, for the training shapes (C a multiple of 16; rows of 4).
static void fp8_operand_table(const std::vector<Shape>& timed, int repeats) {
    printf("\n%-16s %6s %5s | %10s %8s | %10s %8s | %s\n", "FP8 input", "N", "C", "current", "GB/s", "delayed", "GB/s",
           "same bytes");
    for (const Shape& sh : timed) {
        const int N = sh.N, C = sh.C;
        if (N % 16 != 0 || C % 16 != 0) continue;
        const size_t n = (size_t)N * C;
        LayerNormBuffers buf(N, C);
        fill(buf, N, C);
        DeviceBuffer<uint8_t> y(n), yT(n), y2(n), yT2(n);
        DeviceBuffer<float> stats(8);  // amax, scale, descale (current); amax, scale, descale (delayed)
        cudaCheck(cudaMemset(stats.ptr, 0, stats.bytes()));
        auto current = [&] {
            cudaCheck(cudaMemsetAsync(stats.ptr, 0, 4));
            fused_residual_layernorm_forward(buf.residual.ptr, buf.out.ptr, buf.mean.ptr, buf.rstd.ptr, buf.a.ptr,
                                             buf.b.ptr, buf.w.ptr, buf.bias.ptr, N, C, 0, false, stats.ptr);
            fp8_cast_transpose_current<Fp8Format::E4M3>(buf.out.ptr, N, C, stats.ptr, 0, stats.ptr + 1, stats.ptr + 2,
                                                        y.ptr, yT.ptr, 0);
        };
        auto delayed = [&] {
            cudaCheck(cudaMemsetAsync(stats.ptr + 4, 0, 4));
            fused_residual_layernorm_forward(buf.residual.ptr, nullptr, buf.mean.ptr, buf.rstd.ptr, buf.a.ptr,
                                             buf.b.ptr, buf.w.ptr, buf.bias.ptr, N, C, 0, false, stats.ptr + 4,
                                             {y2.ptr, stats.ptr + 5, stats.ptr + 6});
            fp8_transpose(y2.ptr, N, C, yT2.ptr, 0);
        };
        y.poison(), yT.poison(), y2.poison(), yT2.poison();
        current();
        cudaCheck(cudaMemcpy(stats.ptr + 5, stats.ptr + 1, 8, cudaMemcpyDeviceToDevice));  // its scale, descale
        delayed();
        const bool same = y.download() == y2.download() && yT.download() == yT2.download();
        const Timing a = benchmark(current, repeats), b = benchmark(delayed, repeats);
        // bytes: a, b read, residual written; current: out written and read, y and yT; delayed: y, read and yT
        const double io = 3.0 * n * sizeof(floatX), bytes_a = io + 2.0 * n * sizeof(floatX) + 2.0 * n,
                     bytes_b = io + 3.0 * n;
        printf("%-16s %6d %5d | %8.2fus %8.0f | %8.2fus %8.0f | %s\n", sh.name, N, C, 1e3 * a.cold_ms,
               bytes_a / (a.cold_ms * 1e6), 1e3 * b.cold_ms, bytes_b / (b.cold_ms * 1e6), same ? "yes" : "NO");
        if (!same) exit(EXIT_FAILURE);
    }
}

int main(int argc, char** argv) {
    std::vector<Shape> timed = {{16384, 768, "d12 B16"},  {32768, 768, "d12 B32"}, {16384, 1024, "d24 B16"},
                                {16384, 1280, "d36 B16"}, {8192, 1600, "d48 B8"},   {64, 768, "d12 decode B64"}};
    ShapeArgs args;
    if (!parse_shape_args(argc, argv, "[-r repeats] [-s \"N,C;N,C\"] [-c]", &args)) return 1;
    use_shape_args(args, &timed);
    const int repeats = args.repeats;
    const bool check_only = args.check_only;
    for (const Shape& sh : timed) check_layernorm_channels(sh.C);
    print_device();

    // odd row counts (partial blocks of rows and of the backward's row chunks), every packs-per-lane instance
    // the GPT-2 widths use and the widest one, one-wave grids (weights loaded early) and many waves
    const std::vector<Shape> checks = {{1, 8, "one row"},        {37, 96, "odd"},       {257, 768, "d12"},
                                       {64, 768, "decode"},      {1000, 1024, "d24"},   {999, 1280, "d36"},
                                       {2048, 1600, "d48"},      {300, 4096, "widest"}, {16384, 768, "d12 B16"}};
    int failed = 0;
    printf("validation (fp64 CPU reference, outputs poisoned):\n");
    for (const Shape& sh : checks) failed += validate_shape(sh) ? 0 : 1;
    printf("validation: %d of %zu shapes failed\n", failed, checks.size());
    if (failed) return 1;
    if (check_only) return 0;

    printf("\n%-16s %6s %5s | %10s %10s %8s | %10s %10s %8s\n", "shape", "N", "C", "fwd cold", "fwd warm", "GB/s",
           "bwd cold", "bwd warm", "GB/s");
    for (size_t s = 0; s < timed.size(); s++) {
        const Shape& sh = timed[s];
        LayerNormBuffers buf(sh.N, sh.C);
        fill(buf, sh.N, sh.C);
        buf.forward(sh.N, sh.C);
        buf.backward(sh.N, sh.C);
        cudaCheck(cudaDeviceSynchronize());
        if (s == 0) {
            printf("digest of %s, forward + one backward: rows (out, residual, dinp) %016llx, column sums (dweight, "
                   "dbias, row sum of dinp) %016llx\n", sh.name,
                   (unsigned long long)digest({&buf.out, &buf.residual, &buf.dinp}),
                   (unsigned long long)digest({&buf.dw, &buf.db, &buf.dsum}));
        }
        const Timing fwd = benchmark([&] { buf.forward(sh.N, sh.C); }, repeats);
        const Timing bwd = benchmark([&] { buf.backward(sh.N, sh.C); }, repeats);
        const double bytes = 4.0 * sh.N * sh.C * sizeof(floatX);
        printf("%-16s %6d %5d | %8.2fus %8.2fus %8.0f | %8.2fus %8.2fus %8.0f\n", sh.name, sh.N, sh.C,
               1e3 * fwd.cold_ms, 1e3 * fwd.warm_ms, bytes / (fwd.cold_ms * 1e6), 1e3 * bwd.cold_ms,
               1e3 * bwd.warm_ms, bytes / (bwd.cold_ms * 1e6));
    }
    fp8_operand_table(timed, repeats);
    return 0;
}
