// What the kernel tests (tests/gpu/kernels/test_*.cu, one program per kernel family) share: every engine kernel
// against the CPU reference (reference/gpt2.h, namespace reference) computed in double from the same inputs the GPU sees
// (rounded to floatX first), on fresh random inputs at awkward shapes (odd T, B*T not a multiple of any tile). GPU
// outputs that are overwritten are poisoned with NaN (0xFF bytes) before each run; outputs that accumulate start from
// random values, so the accumulation itself is checked. Each program prints rel-L2 and max-abs per output and the
// tolerance, then "PASS|FAIL: N of M checks failed"; exit code 0/1.
//   ./tests/gpu/kernels/test_<family> [seed]
// Tolerances: FP32 builds 1e-5 (1e-4 where an output is a long chain of fp32 GEMMs and softmax);
// BF16 builds: the inputs are exact, outputs are rounded to bf16 (relative step 2^-8), so a single
// rounded output has rel-L2 ~2e-3: 6e-3 for one-step kernels, 2e-2 where bf16 intermediates feed further
// products (attention: S, P, dP stored in bf16), 4e-2 for the attention backward (two such stages).
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/core/bf16.h"
#include "llmc/core/cuda_common.h"
#include "llmc/core/rand.h"
#include "reference/compare.h"
#include "reference/gpt2.h"


#if defined(ENABLE_FP32)
constexpr double kTolSimple = 1e-5, kTolChain = 1e-4, kTolAttnBwd = 1e-4;
#else
constexpr double kTolSimple = 6e-3, kTolChain = 2e-2, kTolAttnBwd = 4e-2;
#endif

static int failures = 0, checks = 0;
static Rng rng(1);

// ---------------------------------------------------------------- host <-> device in floatX
static float round_to_floatX(float x) { return kFloatXIsBF16 ? round_to_bf16(x) : x; }
static std::vector<float> random_vec(size_t n, float std, float mean = 0.0f) {
    std::vector<float> v(n);
    rng.fill_normal(v.data(), n, mean, std);
    for (float& x : v) x = round_to_floatX(x);  // the GPU and the reference see the same values
    return v;
}
static floatX* upload(const std::vector<float>& v) {
    floatX* d;
    cudaCheck(cudaMalloc(&d, std::max<size_t>(v.size(), 1) * sizeof(floatX)));
    host_floats_to_device(d, v.data(), v.size());
    return d;
}
static float* upload_fp32(const std::vector<float>& v) {
    float* d;
    cudaCheck(cudaMalloc(&d, std::max<size_t>(v.size(), 1) * sizeof(float)));
    cudaCheck(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
static floatX* poisoned(size_t n) {
    floatX* d;
    cudaCheck(cudaMalloc(&d, std::max<size_t>(n, 1) * sizeof(floatX)));
    cudaCheck(cudaMemset(d, 0xFF, n * sizeof(floatX)));
    return d;
}
// A device tensor (floatX or fp32) as host floats, after the work queued before it has finished.
template <typename T>
static std::vector<float> download(const T* d, size_t n) {
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> v(n);
    device_to_host_floats(v.data(), d, n);
    return v;
}
static std::vector<double> dbl(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// The fp64 reference of a GEMM on K-major operands: C (M, N) = A (M, K) · B (N, K)ᵀ, plus bias (N) and C0 (M, N)
// where given (the FP8 GEMMs' tests, on the operands as the device sees them).
inline std::vector<double> gemm_reference(const std::vector<double>& a, const std::vector<double>& b, int M, int N,
                                          int K, const std::vector<float>* bias, const std::vector<float>* c0) {
    std::vector<double> ref((size_t)M * N);
#pragma omp parallel for
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = (bias ? (*bias)[n] : 0.0) + (c0 ? (*c0)[(size_t)m * N + n] : 0.0);
            for (int k = 0; k < K; k++) acc += a[(size_t)m * K + k] * b[(size_t)n * K + k];
            ref[(size_t)m * N + n] = acc;
        }
    return ref;
}

static void check(const std::string& what, const std::vector<float>& gpu, const std::vector<double>& ref, double tol) {
    const ErrorStats e = compare(gpu.data(), ref.data(), ref.size());
    const bool ok = e.rel_l2 <= tol;  // NaN fails
    checks++;
    failures += !ok;
    printf("%-52s rel-L2 %.3e  max-abs %.3e  (tol %.0e)  %s\n", what.c_str(), e.rel_l2, e.max_abs, tol, ok ? "OK" : "FAIL");
}
static void check_exact(const std::string& what, bool ok) {
    checks++;
    failures += !ok;
    printf("%-52s %s\n", what.c_str(), ok ? "OK" : "FAIL");
}

// A program's start (the device, the seed from argv[1], the RNG) and its summary line and exit code.
static void kernel_tests_begin(int argc, char** argv) {
    require_cuda_device(argv[0]);
    const uint64_t seed = argc > 1 ? strtoull(argv[1], nullptr, 10) : 1;
    rng.reseed(seed);
    printf("device: %s, precision %s, seed %llu\n", device_info().prop.name, PRECISION_NAME, (unsigned long long)seed);
}
static int kernel_tests_end() {
    printf("%s: %d of %d checks failed\n", failures ? "FAIL" : "PASS", failures, checks);
    return failures ? 1 : 0;
}
