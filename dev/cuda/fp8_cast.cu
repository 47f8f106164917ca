// The FP8 cast of a GEMM operand (llmc/kernels/fp8/cast_transpose.cuh), exactly the engine's kernel: a bf16 (rows,
// cols) tensor to E4M3 or E5M2 bytes, scaled, in its own layout and/or transposed, with its amax. Memory-bound, so
// next to the time it prints the bytes moved and the rate, and the same bytes copied by cudaMemcpy (the copy bound on
// this device): reads 2 bytes an element, writes 1 per output.
//   variant 1: y and yT (both layouts: an activation both the forward and the weight gradient read)
//   variant 2: y only (a weight's forward copy)        variant 3: yT only        variant 4: amax only
//   variant 5: y, yT and the column sums per tile of 64 rows (an output gradient's cast, which takes the bias
//              gradient too)
//   variant 6: variant 5 of the GELU backward's output computed as it reads (fc's output gradient under delayed
//              scaling: fp8_cast_transpose_dgelu), against gelu_backward_inplace then variant 5, the path it replaces:
//              validated byte for byte against that path (E5M2), timed both ways
// Columns a multiple of 8 take the kernel's 64 x 128 tiles (16-byte loads), others its 64 x 64 ones (the dGELU
// cast, v6, always): the checked shapes have both, ragged in rows and columns. Every shape is validated first against llmc/core/fp8.h's reference
// (itself exhaustively tested and equal to cuda_fp8.h's conversion): every byte of every output exact, amax exact,
// outputs poisoned; column sums within 1e-5 of the column's sum of magnitudes of the fp64 sums.
// Build: make -C dev/cuda fp8_cast      Run: ./fp8_cast [-r repeats] [-s "rows,cols;..."] [-c]  (-c: validation only)
#include "common.h"
#include "llmc/kernels/fp8/cast_transpose.cuh"

static_assert(kFloatXIsBF16, "fp8_cast.cu times the engine's bf16 casts (built without -DENABLE_FP32)");

struct Shape {
    int rows, cols;
    const char* name;
};

struct Variant {
    int id;
    const char* name;
    bool y, yT, amax, colsum;
};
static const Variant kVariants[] = {{1, "y+yT+amax", true, true, true, false},
                                    {2, "y+amax", true, false, true, false},
                                    {3, "yT+amax", false, true, true, false},
                                    {4, "amax", false, false, true, false},
                                    {5, "y+yT+sums", true, true, true, true}};

template <Fp8Format F>
static bool run_shape(const Shape& s, const Variant& v, bool time_it, int repeats) {
    const size_t n = (size_t)s.rows * s.cols;
    std::vector<float> xf = random_normal(n, 1.f);
    for (size_t i = 0; i < n; i += 101) xf[i] *= 1e3f;  // some saturate
    std::vector<__nv_bfloat16> xb = round_to_bf16(xf);
    DeviceBuffer<__nv_bfloat16> x(n);
    DeviceBuffer<uint8_t> y(n), yT(n);
    DeviceBuffer<float> scale(1), amax(1), sums((size_t)fp8_cast_colsum_chunks(s.rows) * s.cols);
    cudaCheck(cudaMemcpy(x.ptr, xb.data(), n * 2, cudaMemcpyHostToDevice));
    double amax_ref = 0;
    for (float f : xf) amax_ref = std::max(amax_ref, (double)std::fabs(f));
    const float sc = fp8_scale_from_amax((float)amax_ref, F, 0, 1.f) * 16.f;
    cudaCheck(cudaMemcpy(scale.ptr, &sc, 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(y.ptr, 0xAA, n));
    cudaCheck(cudaMemset(yT.ptr, 0xAA, n));
    cudaCheck(cudaMemset(amax.ptr, 0, 4));
    cudaCheck(cudaMemset(sums.ptr, 0xFF, sums.count * 4));  // NaN
    auto call = [&] {
        fp8_cast_transpose<F>(x.ptr, s.rows, s.cols, scale.ptr, v.y ? y.ptr : nullptr, v.yT ? yT.ptr : nullptr,
                              amax.ptr, 0, v.colsum ? sums.ptr : nullptr);
    };
    call();
    std::vector<uint8_t> hy(n), hyT(n);
    float ha = 0;
    cudaCheck(cudaMemcpy(hy.data(), y.ptr, n, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hyT.data(), yT.ptr, n, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&ha, amax.ptr, 4, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (int r = 0; r < s.rows; r++)
        for (int c = 0; c < s.cols; c++) {
            const uint8_t want = fp8_encode((double)xf[(size_t)r * s.cols + c] * sc, F);
            bad += v.y && hy[(size_t)r * s.cols + c] != want;
            bad += v.yT && hyT[(size_t)c * s.rows + r] != want;
        }
    size_t sums_off = 0;
    if (v.colsum) {
        std::vector<float> hs(sums.count);
        cudaCheck(cudaMemcpy(hs.data(), sums.ptr, hs.size() * 4, cudaMemcpyDeviceToHost));
        for (int c = 0; c < s.cols; c++) {
            double got = 0, want = 0, mag = 0;
            for (size_t k = 0; k < hs.size() / s.cols; k++) got += hs[k * s.cols + c];
            for (int r = 0; r < s.rows; r++) {
                const double e = (double)xf[(size_t)r * s.cols + c];
                want += e, mag += std::fabs(e);
            }
            sums_off += !(std::fabs(got - want) <= 1e-5 * mag);
        }
    }
    const bool ok = bad == 0 && (double)ha == amax_ref && sums_off == 0;
    printf("  %s v%d %-10s %5d x %-5d  %zu bytes off, amax %s, %zu column sums off  %s\n", fp8_name(F), v.id, v.name,
           s.rows, s.cols, bad, (double)ha == amax_ref ? "exact" : "WRONG", sums_off, ok ? "ok" : "FAIL");
    if (!ok || !time_it) return ok;
    const Timing t = benchmark(call, repeats);
    const double bytes = n * (2.0 + v.y + v.yT) + (v.colsum ? sums.count * 4.0 : 0.0);
    DeviceBuffer<char> copy_src((size_t)bytes / 2), copy_dst((size_t)bytes / 2);  // the same bytes read and written
    const Timing c = benchmark([&] { cudaCheck(cudaMemcpyAsync(copy_dst.ptr, copy_src.ptr, (size_t)bytes / 2,
                                                               cudaMemcpyDeviceToDevice)); }, repeats);
    printf("time  %s v%d %-10s %-8s %5d x %-5d  cold %.4f ms  warm %.4f ms  %.0f GB/s cold (copy of the same bytes "
           "%.0f GB/s: %.2f of it)\n", fp8_name(F), v.id, v.name, s.name, s.rows, s.cols, t.cold_ms, t.warm_ms,
           bytes / t.cold_ms * 1e-6, bytes / c.cold_ms * 1e-6, c.cold_ms / t.cold_ms);
    return ok;
}

// Variant 6 (see the top): the fused cast against the GELU backward then the cast, same bytes, both timed.
static bool run_dgelu(const Shape& s, bool time_it, int repeats) {
    const size_t n = (size_t)s.rows * s.cols;
    std::vector<float> gf = random_normal(n, 1e-2f), pf = random_normal(n, 1.5f);
    std::vector<__nv_bfloat16> gb = round_to_bf16(gf), pb = round_to_bf16(pf);
    DeviceBuffer<__nv_bfloat16> grad(n), pre(n), work(n);
    DeviceBuffer<uint8_t> out(4 * n);
    const int chunks = fp8_cast_colsum_chunks(s.rows);
    DeviceBuffer<float> scale(1), amax(2), sums(2 * (size_t)chunks * s.cols);
    cudaCheck(cudaMemcpy(grad.ptr, gb.data(), n * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(pre.ptr, pb.data(), n * 2, cudaMemcpyHostToDevice));
    const float sc = 2048.f;
    cudaCheck(cudaMemcpy(scale.ptr, &sc, 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(out.ptr, 0xAA, 4 * n));
    cudaCheck(cudaMemset(amax.ptr, 0, 8));
    cudaCheck(cudaMemset(sums.ptr, 0xFF, sums.count * 4));
    // what the step runs under current scaling (its amax folded by the GELU backward); in place, so timed on `work`
    // as the repeats leave it (the values shrink; the bytes moved do not)
    auto two_passes = [&] {
        gelu_backward_inplace(work.ptr, pre.ptr, n, 0);
        fp8_cast_transpose<Fp8Format::E5M2>(work.ptr, s.rows, s.cols, scale.ptr, out.ptr, out.ptr + n, amax.ptr, 0,
                                            sums.ptr);
    };
    auto fused = [&] {
        fp8_cast_transpose_dgelu<Fp8Format::E5M2>(grad.ptr, pre.ptr, s.rows, s.cols, scale.ptr, out.ptr + 2 * n,
                                                  out.ptr + 3 * n, amax.ptr + 1, 0, sums.ptr + (size_t)chunks * s.cols);
    };
    cudaCheck(cudaMemcpy(work.ptr, grad.ptr, n * 2, cudaMemcpyDeviceToDevice));
    two_passes(), fused();
    std::vector<uint8_t> h(4 * n);
    std::vector<float> hs(sums.count), ha(2);
    cudaCheck(cudaMemcpy(h.data(), out.ptr, 4 * n, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hs.data(), sums.ptr, hs.size() * 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(ha.data(), amax.ptr, 8, cudaMemcpyDeviceToHost));
    const size_t half = hs.size() / 2;
    const bool ok = memcmp(h.data(), h.data() + 2 * n, 2 * n) == 0 && ha[0] > 0 && ha[0] == ha[1] &&
                    memcmp(hs.data(), hs.data() + half, half * 4) == 0;
    printf("  e5m2 v6 dgelu+y+yT+sums %5d x %-5d  bytes, amax and sums those of gelu_backward + v5: %s\n", s.rows,
           s.cols, ok ? "ok" : "FAIL");
    if (!ok || !time_it) return ok;
    const Timing a = benchmark(two_passes, repeats), b = benchmark(fused, repeats);
    printf("time  e5m2 v6 dgelu %-8s %5d x %-5d  gelu_backward + v5 cold %.4f ms, "
           "fused cold %.4f ms, warm %.4f ms: %.0f GB/s (%.2fx)\n", s.name, s.rows, s.cols, a.cold_ms, b.cold_ms,
           b.warm_ms, n * 6.0 / b.cold_ms * 1e-6, a.cold_ms / b.cold_ms);
    return ok;
}

int main(int argc, char** argv) {
    ShapeArgs args;
    if (!parse_shape_args(argc, argv, "[-r repeats] [-s \"rows,cols;rows,cols\"] [-c]", &args)) return 2;
    print_device();
    // validation: ragged and tile-sized shapes, both formats, every variant
    const std::vector<Shape> checked = {{4, 4, "tiny"}, {100, 36, "ragged"}, {1028, 772, "ragged"}, {512, 3072, "tile"},
                                        {100, 40, "ragged8"}, {1028, 776, "ragged8"}};
    bool ok = true;
    printf("validation against llmc/core/fp8.h (every byte exact, amax exact)\n");
    for (const Shape& s : checked)
        for (const Variant& v : kVariants) {
            ok = run_shape<Fp8Format::E4M3>(s, v, false, 0) && ok;
            ok = run_shape<Fp8Format::E5M2>(s, v, false, 0) && ok;
        }
    for (const Shape& s : checked) ok = (s.rows < 8 || run_dgelu(s, false, 0)) && ok;
    printf("validation: %s\n", ok ? "all passed" : "FAILED");
    if (!ok) return 1;
    if (args.check_only) return 0;
    // d12 and d48 GEMM operands at B*T = 16384 (d12 B16) and 8192 (d48 B8): ln (C), fc activations (4C)
    std::vector<Shape> timed = {{16384, 768, "d12 ln"}, {16384, 3072, "d12 gelu"}, {8192, 1600, "d48 ln"},
                                {8192, 6400, "d48 gelu"}};
    use_shape_args(args, &timed);
    for (const Shape& s : timed)
        for (const Variant& v : kVariants) ok = run_shape<Fp8Format::E4M3>(s, v, true, args.repeats) && ok;
    for (const Shape& s : timed)
        if (s.cols % 8 == 0) ok = run_dgelu(s, true, args.repeats) && ok;
    return ok ? 0 : 1;
}
