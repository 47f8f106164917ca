// FP8 casts (llmc/kernels/fp8/cast_transpose.cuh) against llmc/core/fp8.h's reference (itself checked exhaustively by
// tests/unit/test_fp8.cpp and equal to cuda_fp8.h's host conversion): every byte of y and of its transpose yT equal
// to fp8_encode(x * scale), in both formats, at tile-sized and ragged shapes (multiples of 4, not of 64), with
// saturating values and scales from the amax; amax exactly max |x|, a NaN in x making it NaN; each output optional;
// the column sums a cast takes beside it (the bias gradient) against the fp64 sums; a value that is not finite making
// the overflow descale NaN (delayed scaling's casts), else untouched. fp8_transpose: every byte moved.
// Current scaling's two passes (the kernels that fold an amax as they write: test_fp8_producers.cu).
// FP8 GEMMs (llmc/kernels/matmul/matmul_fp8.cuh, BF16 builds) against the fp64 product of the dequantized operands
// (what the GEMM is given: decode(code) / scale), with bias, both accumulation modes, the three format pairs a
// training step uses: rel-L2 <= 6e-3 with promoted accumulation (the bf16 output's rounding), <= 1e-2 with fast.
// The grouped cast (llmc/kernels/fp8/cast_group.cuh): each tensor's y, yT, scale, descale and folded amax those of
// its own fp8_cast_transpose_current, bit for bit, at a layer's four weight shapes and ragged ones.
// Delayed scaling's update (llmc/kernels/fp8/scaling.cuh) over 40 steps of random amaxes (zeros and NaNs among
// them) for 37 tensors of both formats: rings, scales and descales bit for bit those of the host's fp8_update_one.
//   ./tests/gpu/kernels/test_fp8 [seed]   (tests/gpu/kernels/kernel_checks.cuh: inputs, poison, tolerances)
#include <array>

#include "llmc/kernels/column_sum.cuh"
#include "llmc/kernels/fp8/cast_group.cuh"
#include "llmc/kernels/fp8/cast_transpose.cuh"
#include "llmc/kernels/fp8/scaling.cuh"
#include "llmc/kernels/matmul/matmul_fp8.cuh"
#include "tests/gpu/kernels/kernel_checks.cuh"

// The column sums a cast takes beside it (a linear layer's bias gradient): every tile's partial within fp32's
// rounding of the fp64 sum of its rows (1e-5 of the sum of magnitudes), and bit for bit the fp32 sum in the kernel's
// order (a thread's rows ty, ty + 16, ty + 32, ty + 48, then the 16 thread rows in turn: the order every tile width
// keeps, so the bias gradients do not change with it); every entry written (poisoned before); column_sum_finish
// adding them in order to a bf16 output within its rounding (2^-8 relative).
static void check_colsum(const std::vector<float>& x, int rows, int cols, const float* d_part, const char* what) {
    const int chunks = fp8_cast_colsum_chunks(rows);
    std::vector<float> part((size_t)chunks * cols);
    cudaCheck(cudaMemcpy(part.data(), d_part, part.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<double> ref(cols, 0.0), mag(cols, 0.0);
    size_t bad = 0;
    for (int k = 0; k < chunks; k++)
        for (int c = 0; c < cols; c++) {
            double s = 0, a = 0;
            for (int r = 64 * k; r < std::min(rows, 64 * k + 64); r++) {
                s += x[(size_t)r * cols + c], a += std::fabs(x[(size_t)r * cols + c]);
            }
            ref[c] += s, mag[c] += a;
            bad += !(std::fabs(part[(size_t)k * cols + c] - s) <= 1e-5 * a);
            float ordered = 0.f;
            for (int ty = 0; ty < 16; ty++) {
                float t = 0.f;
                for (int r = 64 * k + ty; r < std::min(rows, 64 * k + 64); r += 16) t += x[(size_t)r * cols + c];
                ordered += t;
            }
            bad += part[(size_t)k * cols + c] != ordered;
        }
    floatX* d_out = upload(std::vector<float>(cols, 0.25f));
    column_sum_finish(d_out, d_part, chunks, cols, 1.0f, 0);
    const std::vector<float> out = download(d_out, cols);
    for (int c = 0; c < cols; c++) {
        const double want = 0.25 + ref[c];
        bad += !(std::fabs(out[c] - want) <= std::ldexp(std::fabs(want), -8) + 1e-5 * mag[c]);
    }
    char tag[128];
    snprintf(tag, sizeof(tag), "fp8 %s: column sums %dx%d (%d tiles of rows), then finished into bf16", what, rows,
             cols, chunks);
    check_exact(tag, bad == 0);
    if (bad) printf("  %zu sums off\n", bad);
    cudaFree(d_out);
}

template <Fp8Format F>
// inf: one value infinite (saturated). The overflow descale (0.5 before) must turn NaN exactly when a value is not
// finite (a NaN or inf), as delayed scaling's casts report an overflow in their own step.
static void test_cast(int rows, int cols, bool with_y, bool with_yT, bool nan, bool colsum = false, bool inf = false) {
    std::vector<float> x = random_vec((size_t)rows * cols, 1.0f);
    for (size_t i = 0; i < x.size(); i += 97) x[i] = round_to_floatX(x[i] * 3e4f);  // some over E4M3's range
    if (nan) x[x.size() / 2] = NAN;
    if (inf) x[x.size() / 3 + 1] = -INFINITY;
    double amax_ref = 0;
    for (float v : x) amax_ref = std::max(amax_ref, (double)std::fabs(v));
    const bool finite = !nan && !inf;
    const float scale = finite ? fp8_scale_from_amax((float)amax_ref, F, 1, 1.f) * 64.f : 1.f;  // 64: some saturate
    floatX* d_x = upload(x);
    float *d_scale = upload_fp32({scale}), *d_amax = upload_fp32({0.f}), *d_descale = upload_fp32({0.5f});
    uint8_t *d_y = nullptr, *d_yT = nullptr;
    const size_t n = x.size();
    if (with_y) cudaCheck(cudaMalloc(&d_y, n)), cudaCheck(cudaMemset(d_y, 0xAA, n));
    if (with_yT) cudaCheck(cudaMalloc(&d_yT, n)), cudaCheck(cudaMemset(d_yT, 0xAA, n));
    float* d_part = colsum ? upload_fp32(std::vector<float>((size_t)fp8_cast_colsum_chunks(rows) * cols, NAN))
                           : nullptr;
    const bool casts = with_y || with_yT;  // the amax alone has no descale to mark
    fp8_cast_transpose<F>(d_x, rows, cols, d_scale, d_y, d_yT, d_amax, 0, d_part, casts ? d_descale : nullptr);
    cudaCheck(cudaDeviceSynchronize());
    if (colsum) check_colsum(x, rows, cols, d_part, fp8_name(F));
    std::vector<uint8_t> y(n), yT(n);
    if (with_y) cudaCheck(cudaMemcpy(y.data(), d_y, n, cudaMemcpyDeviceToHost));
    if (with_yT) cudaCheck(cudaMemcpy(yT.data(), d_yT, n, cudaMemcpyDeviceToHost));
    float amax = 0, descale = 0;
    cudaCheck(cudaMemcpy(&amax, d_amax, 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&descale, d_descale, 4, cudaMemcpyDeviceToHost));
    size_t bad_y = 0, bad_yT = 0, saturated = 0;
    const uint8_t max_code = F == Fp8Format::E4M3 ? 0x7E : 0x7B;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const double v = (double)x[(size_t)r * cols + c] * scale;
            const uint8_t want = fp8_encode(v, F);
            saturated += (want & 0x7F) == max_code;
            auto same = [&](uint8_t got) { return std::isnan(v) ? std::isnan(fp8_decode(got, F)) : got == want; };
            bad_y += with_y && !same(y[(size_t)r * cols + c]);
            bad_yT += with_yT && !same(yT[(size_t)c * rows + r]);
        }
    char tag[128];
    snprintf(tag, sizeof(tag), "fp8 %s cast %dx%d%s%s%s%s (%zu saturated)", fp8_name(F), rows, cols,
             with_y ? " y" : "", with_yT ? " yT" : "", nan ? " with a NaN" : "", inf ? " with an inf" : "", saturated);
    check_exact(tag, bad_y == 0 && bad_yT == 0 && (nan || saturated > 0));
    if (bad_y || bad_yT) printf("  %zu bytes of y and %zu of yT differ from the reference\n", bad_y, bad_yT);
    snprintf(tag, sizeof(tag), "fp8 %s amax %dx%d%s", fp8_name(F), rows, cols, nan ? " (NaN)" : "");
    check_exact(tag, nan ? std::isnan(amax) : (double)amax == amax_ref);
    if (casts) {
        snprintf(tag, sizeof(tag), "fp8 %s cast %dx%d: overflow descale %s", fp8_name(F), rows, cols,
                 finite ? "untouched" : "NaN");
        check_exact(tag, finite ? descale == 0.5f : std::isnan(descale));
    }
    cudaFree(d_descale);
    cudaFree(d_x), cudaFree(d_scale), cudaFree(d_amax), cudaFree(d_y), cudaFree(d_yT), cudaFree(d_part);
}

// The two tile widths give the same bytes: x at an address aligned to 8 values takes the 64 x 128 tiles, the same
// x 4 values further on (aligned to 4 only) the 64 x 64 ones; y, yT, amax and the column sums bit for bit the same.
static void test_cast_widths(int rows, int cols) {
    const size_t n = (size_t)rows * cols;
    std::vector<float> x = random_vec(n, 1.0f), padded(n + 4, 0.f);
    std::copy(x.begin(), x.end(), padded.begin() + 4);
    floatX *d_x = upload(x), *d_padded = upload(padded);
    float* d_scale = upload_fp32({16.f});
    const int chunks = fp8_cast_colsum_chunks(rows);
    float* d_stats = upload_fp32(std::vector<float>(2 + 2 * (size_t)chunks * cols, 0.f));  // two amaxes, two sums
    uint8_t* d_bytes;
    cudaCheck(cudaMalloc(&d_bytes, 4 * n)), cudaCheck(cudaMemset(d_bytes, 0xAA, 4 * n));
    fp8_cast_transpose<Fp8Format::E5M2>(d_x, rows, cols, d_scale, d_bytes, d_bytes + n, d_stats, 0, d_stats + 2);
    fp8_cast_transpose<Fp8Format::E5M2>(d_padded + 4, rows, cols, d_scale, d_bytes + 2 * n, d_bytes + 3 * n,
                                        d_stats + 1, 0, d_stats + 2 + (size_t)chunks * cols);
    const std::vector<float> stats = download(d_stats, 2 + 2 * (size_t)chunks * cols);
    std::vector<uint8_t> bytes(4 * n);
    cudaCheck(cudaMemcpy(bytes.data(), d_bytes, 4 * n, cudaMemcpyDeviceToHost));
    const size_t half = (size_t)chunks * cols;
    char tag[112];
    snprintf(tag, sizeof(tag), "fp8 cast %dx%d: 64 x 128 tiles and 64 x 64 ones, the same y, yT, amax, sums", rows,
             cols);
    check_exact(tag, memcmp(bytes.data(), bytes.data() + 2 * n, 2 * n) == 0 && stats[0] == stats[1] &&
                         stats[0] > 0 && memcmp(stats.data() + 2, stats.data() + 2 + half, half * 4) == 0);
    cudaFree(d_x), cudaFree(d_padded), cudaFree(d_scale), cudaFree(d_stats), cudaFree(d_bytes);
}

// The grouped cast against one cast per tensor (itself checked against the reference above): the same bytes (y, yT),
// scale, descale and folded amax for every tensor, each with its own scale source (window values 4x apart, so every
// tensor's scale differs, as delayed scaling's weights take theirs); the 64 poisoned bytes after each tensor's y and
// yT in the group's output still poisoned (no tile writes past its tensor).
static void test_cast_group(const std::vector<std::array<int, 2>>& shapes) {
    constexpr size_t kGap = 64;
    const int n = (int)shapes.size();
    size_t total = 0, bytes_total = 0;
    std::vector<size_t> at, byte_at;
    for (const auto& s : shapes) {
        at.push_back(total), byte_at.push_back(bytes_total);
        total += (size_t)s[0] * s[1], bytes_total += 2 * (size_t)s[0] * s[1] + kGap;
    }
    std::vector<float> x = random_vec(total, 0.02f), windows(n);
    for (int i = 0; i < n; i++) windows[i] = 0.01f * (float)(1 << (2 * i));
    floatX* d_x = upload(x);
    float* d_windows = upload_fp32(windows);
    std::vector<float> stats0(6 * (size_t)n, -1.f);  // scale, descale, amax (folded: from 0): the group's, then single
    for (int i = 0; i < 2 * n; i++) stats0[3 * i + 2] = 0.f;
    float* d_stats = upload_fp32(stats0);
    uint8_t* d_bytes;  // the group's outputs, then the single casts'
    cudaCheck(cudaMalloc(&d_bytes, 2 * bytes_total)), cudaCheck(cudaMemset(d_bytes, 0xAA, 2 * bytes_total));
    std::vector<Fp8CastJob> jobs(n);
    for (int i = 0; i < n; i++) {
        Fp8CastJob& j = jobs[i];
        const size_t nn = (size_t)shapes[i][0] * shapes[i][1];
        j.x = d_x + at[i], j.rows = shapes[i][0], j.cols = shapes[i][1], j.amax = d_windows + i;
        j.scale_out = d_stats + 3 * i, j.descale_out = d_stats + 3 * i + 1, j.fold_amax = d_stats + 3 * i + 2;
        j.y = d_bytes + byte_at[i], j.yT = j.y + nn;
        float* single = d_stats + 3 * (n + i);
        uint8_t* y1 = d_bytes + bytes_total + byte_at[i];
        fp8_cast_transpose_current<Fp8Format::E4M3>(j.x, j.rows, j.cols, j.amax, 0, single, single + 1, y1, y1 + nn,
                                                    0, nullptr, single + 2);
    }
    fp8_cast_transpose_current_group<Fp8Format::E4M3>(jobs.data(), n, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<uint8_t> bytes(2 * bytes_total);
    cudaCheck(cudaMemcpy(bytes.data(), d_bytes, 2 * bytes_total, cudaMemcpyDeviceToHost));
    const std::vector<float> stats = download(d_stats, 6 * (size_t)n);
    bool ok = memcmp(bytes.data(), bytes.data() + bytes_total, bytes_total) == 0 &&
              memcmp(stats.data(), stats.data() + 3 * n, 3 * n * sizeof(float)) == 0;
    for (int i = 0; i < n; i++) {
        const size_t end = byte_at[i] + 2 * (size_t)shapes[i][0] * shapes[i][1];
        for (size_t k = 0; k < kGap; k++) ok = ok && bytes[end + k] == 0xAA;
        ok = ok && stats[3 * i + 2] > 0 && (i == 0 || stats[3 * i] != stats[3 * (i - 1)]);
    }
    char tag[128];
    snprintf(tag, sizeof(tag), "fp8 grouped cast of %d tensors (%dx%d first): y, yT, scales, amax as one cast each", n,
             shapes[0][0], shapes[0][1]);
    check_exact(tag, ok);
    cudaFree(d_x), cudaFree(d_windows), cudaFree(d_stats), cudaFree(d_bytes);
}

// fp8_transpose: yT every byte of y transposed (random bytes, NaN codes among them: bytes are moved, not read).
static void test_transpose(int rows, int cols) {
    const size_t n = (size_t)rows * cols;
    std::vector<uint8_t> y(n), yT(n);
    for (auto& v : y) v = (uint8_t)(rng.next_u32() & 0xFF);
    uint8_t *d_y, *d_yT;
    cudaCheck(cudaMalloc(&d_y, n)), cudaCheck(cudaMalloc(&d_yT, n)), cudaCheck(cudaMemset(d_yT, 0xAA, n));
    cudaCheck(cudaMemcpy(d_y, y.data(), n, cudaMemcpyHostToDevice));
    fp8_transpose(d_y, rows, cols, d_yT, 0);
    cudaCheck(cudaMemcpy(yT.data(), d_yT, n, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) bad += yT[(size_t)c * rows + r] != y[(size_t)r * cols + c];
    char tag[96];
    snprintf(tag, sizeof(tag), "fp8 transpose %dx%d", rows, cols);
    check_exact(tag, bad == 0);
    if (bad) printf("  %zu bytes of yT differ\n", bad);
    cudaFree(d_y), cudaFree(d_yT);
}

// Current scaling's two passes (fp8_amax, then fp8_cast_transpose_current): the scale the cast took from the amax,
// written out with its inverse, equals the host's fp8_scale_from_amax, and every byte of y and yT its fp8_encode.
template <Fp8Format F>
static void test_cast_current(int rows, int cols, float std) {
    std::vector<float> x = random_vec((size_t)rows * cols, std);
    double amax_ref = 0;
    for (float v : x) amax_ref = std::max(amax_ref, (double)std::fabs(v));
    const float scale = fp8_scale_from_amax((float)amax_ref, F, 0, 1.f);
    const size_t n = x.size();
    floatX* d_x = upload(x);
    float* d_stats = upload_fp32({0.f, -1.f, -1.f});  // amax, scale, descale
    uint8_t *d_y, *d_yT;
    cudaCheck(cudaMalloc(&d_y, n)), cudaCheck(cudaMemset(d_y, 0xAA, n));
    cudaCheck(cudaMalloc(&d_yT, n)), cudaCheck(cudaMemset(d_yT, 0xAA, n));
    fp8_amax(d_x, rows, cols, d_stats, 0);
    fp8_cast_transpose_current<F>(d_x, rows, cols, d_stats, 0, d_stats + 1, d_stats + 2, d_y, d_yT, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<uint8_t> y(n), yT(n);
    cudaCheck(cudaMemcpy(y.data(), d_y, n, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(yT.data(), d_yT, n, cudaMemcpyDeviceToHost));
    float stats[3];
    cudaCheck(cudaMemcpy(stats, d_stats, sizeof(stats), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const uint8_t want = fp8_encode((double)x[(size_t)r * cols + c] * scale, F);
            bad += (y[(size_t)r * cols + c] != want) + (yT[(size_t)c * rows + r] != want);
        }
    char tag[128];
    snprintf(tag, sizeof(tag), "fp8 %s current scaling %dx%d std %g: scale 2^%d", fp8_name(F), rows, cols, std,
             (int)std::lround(std::log2((double)scale)));
    check_exact(tag, bad == 0 && stats[0] == (float)amax_ref && stats[1] == scale && stats[2] == 1.f / scale);
    if (bad) printf("  %zu bytes differ from the reference\n", bad);
    if (stats[1] != scale) printf("  scale %g, the host's %g (amax %g vs %g)\n", stats[1], scale, stats[0], amax_ref);
    cudaFree(d_x), cudaFree(d_stats), cudaFree(d_y), cudaFree(d_yT);
}

// rows x K random values (std) quantized to format F with the scale their amax gives: the codes, the dequantized
// values (decode / scale: what the GEMM multiplies) and 1 / scale.
template <Fp8Format F>
static void quantized(int rows, int K, float std, std::vector<uint8_t>* codes, std::vector<double>* deq,
                      float* descale) {
    const std::vector<float> x = random_vec((size_t)rows * K, std);
    double amax = 0;
    for (float v : x) amax = std::max(amax, (double)std::fabs(v));
    const float scale = fp8_scale_from_amax((float)amax, F, 0, 1.f);
    codes->resize(x.size()), deq->resize(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        (*codes)[i] = fp8_encode((double)x[i] * scale, F);
        (*deq)[i] = fp8_decode((*codes)[i], F) / scale;
    }
    *descale = 1.f / scale;
}

// offset: bytes every operand starts past its allocation (16: aligned to 16 bytes only, which the heuristic is told);
// accumulate: C starts as random values the product is added to (the weight gradient's +=)
template <Fp8Format FA, Fp8Format FB>
static void test_gemm(int M, int N, int K, bool with_bias, bool fast, int offset = 0, bool accumulate = false) {
    std::vector<uint8_t> a, b;
    std::vector<double> da, db;
    float a_descale, b_descale;
    quantized<FA>(M, K, 1.0f, &a, &da, &a_descale);
    quantized<FB>(N, K, 0.05f, &b, &db, &b_descale);
    const std::vector<float> bias = random_vec(N, 0.5f);
    std::vector<float> c0 = random_vec((size_t)M * N, 0.5f);
    for (float& v : c0) v = round_to_floatX(v);
    const std::vector<double> ref =
        gemm_reference(da, db, M, N, K, with_bias ? &bias : nullptr, accumulate ? &c0 : nullptr);
    uint8_t *d_a, *d_b;
    cudaCheck(cudaMalloc(&d_a, a.size() + offset));
    cudaCheck(cudaMalloc(&d_b, b.size() + offset));
    cudaCheck(cudaMemcpy(d_a + offset, a.data(), a.size(), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_b + offset, b.data(), b.size(), cudaMemcpyHostToDevice));
    float* d_descale = upload_fp32({a_descale, 0.f, 0.f, 0.f, b_descale});  // each in its own 16 bytes
    floatX* d_bias = upload(bias);
    const int c_off = offset / (int)sizeof(floatX);
    floatX* d_c = poisoned((size_t)M * N + c_off);
    if (accumulate) {
        floatX* d_c0 = upload(c0);
        cudaCheck(cudaMemcpy(d_c + c_off, d_c0, c0.size() * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaFree(d_c0);
    }
    matmul_fp8(d_c + c_off, d_a + offset, FA, d_descale, d_b + offset, FB, d_descale + kFp8DescaleStride, with_bias ? d_bias : nullptr,
               M, N, K, fast, 0, accumulate);
    char tag[128];
    snprintf(tag, sizeof(tag), "fp8 GEMM %s x %s M%d N%d K%d%s%s%s%s", fp8_name(FA), fp8_name(FB), M, N, K,
             with_bias ? " +bias" : "", fast ? " fast-accum" : "", offset ? " 16B-aligned" : "",
             accumulate ? " C +=" : "");
    const std::vector<float> got = download(d_c + c_off, (size_t)M * N);
    check(tag, got, ref, fast ? 1e-2 : 6e-3);
    // and element by element: a whole bf16 ulp of |ref| + 1e-2 of the output's RMS (a lost K chunk or bias fails)
    double ss = 0;
    for (double r : ref) ss += r * r;
    const double rms = std::sqrt(ss / ref.size());
    size_t off = 0;
    for (size_t i = 0; i < ref.size(); i++)
        off += !(std::fabs(got[i] - ref[i]) <= std::fabs(ref[i]) / 128 + 1e-2 * rms);
    snprintf(tag + strlen(tag), sizeof(tag) - strlen(tag), ": element-wise");
    check_exact(tag, off == 0);
    if (off) printf("  %zu of %zu elements off by more than 2^-7 |ref| + 1e-2 RMS\n", off, ref.size());
    cudaFree(d_a), cudaFree(d_b), cudaFree(d_descale), cudaFree(d_bias), cudaFree(d_c);
}

static void test_gemms() {
    if (!kFloatXIsBF16) {
        printf("fp8 GEMMs: BF16 builds only (FP8 training is; their output is bf16)\n");
        return;
    }
    if (!matmul_fp8_supported(64, 64, 64, Fp8Format::E4M3, Fp8Format::E4M3, false)) {
        check_exact("fp8 GEMMs: cuBLASLt has FP8 GEMMs on this device (compute capability 8.9 or 9.0+)", false);
        return;
    }
    printf("fp8 GEMMs: E5M2 x E5M2 %s by cuBLASLt here (no training GEMM needs it)\n",
           matmul_fp8_supported(64, 64, 64, Fp8Format::E5M2, Fp8Format::E5M2, false) ? "taken" : "refused");
    for (bool fast : {false, true}) {
        test_gemm<Fp8Format::E4M3, Fp8Format::E4M3>(64, 64, 64, false, fast);
        test_gemm<Fp8Format::E4M3, Fp8Format::E4M3>(256, 2304, 768, true, fast);   // forward: inp x W
        test_gemm<Fp8Format::E5M2, Fp8Format::E4M3>(256, 768, 3072, false, fast);  // input gradient: dout x W^T
        test_gemm<Fp8Format::E5M2, Fp8Format::E4M3>(768, 256, 1024, false, fast);  // weight gradient: dout^T x inp^T
        test_gemm<Fp8Format::E4M3, Fp8Format::E5M2>(128, 512, 2048, true, fast);
        test_gemm<Fp8Format::E4M3, Fp8Format::E4M3>(192, 1600, 1600, true, fast, 16);  // 16-byte aligned operands
        test_gemm<Fp8Format::E5M2, Fp8Format::E4M3>(768, 256, 1024, false, fast, 0, true);  // dW += (micro-steps)
    }
}

static void test_scaling() {
    const int tensors = 37, H = 16, steps = 40;
    std::vector<float> hist((size_t)tensors * H, 0.f), scale(tensors, 1.f), amax(tensors);
    std::vector<float> descale((size_t)tensors * kFp8DescaleStride, 1.f);  // strided; the padding stays as it is
    std::vector<uint8_t> formats(tensors);
    for (int t = 0; t < tensors; t++) formats[t] = (uint8_t)(t % 3 == 0 ? Fp8Format::E5M2 : Fp8Format::E4M3);
    Fp8Scaling s;
    s.tensors = tensors, s.history = H, s.margin = 1;
    s.amax_history = upload_fp32(hist), s.scale = upload_fp32(scale), s.descale = upload_fp32(descale);
    s.amax = upload_fp32(amax);
    uint8_t* d_formats;
    cudaCheck(cudaMalloc(&d_formats, tensors));
    cudaCheck(cudaMemcpy(d_formats, formats.data(), tensors, cudaMemcpyHostToDevice));
    s.formats = d_formats;
    for (int step = 0; step < steps; step++) {
        for (int t = 0; t < tensors; t++) {
            const uint32_t r = rng.next_u32();
            amax[t] = r % 17 == 0 ? 0.f : r % 23 == 0 ? NAN : std::ldexp(1.f + rng.uniform(), (int)(r % 40) - 20);
        }
        cudaCheck(cudaMemcpy(s.amax, amax.data(), tensors * 4, cudaMemcpyHostToDevice));
        fp8_update_scales(s, step, 0);
        for (int t = 0; t < tensors; t++)
            fp8_update_one(hist.data() + (size_t)t * H, H, step, &amax[t], (Fp8Format)formats[t], 1, &scale[t],
                           &descale[(size_t)t * kFp8DescaleStride]);
    }
    cudaCheck(cudaDeviceSynchronize());
    auto same = [](const std::vector<float>& host, const float* dev) {
        std::vector<float> d(host.size());
        cudaCheck(cudaMemcpy(d.data(), dev, d.size() * 4, cudaMemcpyDeviceToHost));
        return memcmp(d.data(), host.data(), d.size() * 4) == 0;
    };
    check_exact("fp8 delayed scaling: 40 steps x 37 tensors, rings bit for bit the host's", same(hist, s.amax_history));
    check_exact("fp8 delayed scaling: scales and descales bit for bit, amax zeroed",
                same(scale, s.scale) && same(descale, s.descale) && same(std::vector<float>(tensors, 0.f), s.amax));
    cudaFree(s.amax_history), cudaFree(s.scale), cudaFree(s.descale), cudaFree(s.amax), cudaFree(d_formats);
}

int main(int argc, char** argv) {
    kernel_tests_begin(argc, argv);
    // columns a multiple of 8 take the cast's 64 x 128 tiles, others its 64 x 64 ones: both, ragged and whole
    const int shapes[][2] = {{64, 64},   {4, 4},      {100, 36}, {1028, 772},
                             {512, 3072}, {2048, 768}, {100, 40}, {1028, 776}};
    for (const auto& s : shapes) {
        test_cast<Fp8Format::E4M3>(s[0], s[1], true, true, false);
        test_cast<Fp8Format::E5M2>(s[0], s[1], true, true, false, /*colsum=*/true);  // as output gradients are
    }
    test_cast<Fp8Format::E5M2>(1028, 772, true, false, false, true);
    test_cast<Fp8Format::E4M3>(192, 128, true, false, false);
    test_cast<Fp8Format::E4M3>(192, 128, false, true, false);
    test_cast<Fp8Format::E5M2>(192, 128, false, false, false);  // amax alone
    test_cast<Fp8Format::E4M3>(64, 128, true, true, true);
    test_cast<Fp8Format::E5M2>(256, 192, true, true, false, false, /*inf=*/true);
    test_cast<Fp8Format::E4M3>(128, 64, false, true, false, false, /*inf=*/true);
    test_cast<Fp8Format::E4M3>(64, 132, true, true, true);  // the 64 x 64 tiles: a NaN, an inf
    test_cast<Fp8Format::E5M2>(128, 68, true, true, false, false, /*inf=*/true);
    test_cast_widths(1028, 776);
    test_cast_widths(2048, 768);
    test_cast_group({{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}});  // d12's four weights
    test_cast_group({{4800, 1600}, {1600, 1600}, {6400, 1600}, {1600, 6400}});  // d48's
    test_cast_group({{100, 40}, {1028, 776}, {4, 8}});  // ragged tiles, three tensors
    test_cast_group({{192, 136}});
    for (const auto& s : shapes) test_transpose(s[0], s[1]);
    test_cast_current<Fp8Format::E4M3>(256, 768, 1.0f);
    test_cast_current<Fp8Format::E4M3>(128, 3072, 0.02f);  // weights' size: the scale far above 1
    test_cast_current<Fp8Format::E5M2>(512, 256, 1e-5f);   // gradients': E5M2 would underflow unscaled
    test_scaling();
    test_gemms();  // last: a GEMM cuBLASLt refuses ends the program
    return kernel_tests_end();
}
