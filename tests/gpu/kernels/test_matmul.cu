// The GEMMs (cuBLASLt with fused epilogues; the GELU backward) and the column sums against the CPU reference in double.
//   ./tests/gpu/kernels/test_matmul [seed]   (tests/gpu/kernels/kernel_checks.cuh: inputs, poison, tolerances)
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/matmul/matmul.cuh"
#include "tests/gpu/kernels/kernel_checks.cuh"

// Bias-gradient column sums on their own: the 16-byte path (cols a multiple of the vector) and the scalar
// fallback (odd width), with a row count that leaves a partial last chunk.
static void test_column_sum(int rows, int cols, float scale) {
    auto x = random_vec((size_t)rows * cols, 1.0f), out0 = random_vec(cols, 1.0f);
    floatX *d_x = upload(x), *d_out = upload(out0);
    float* d_scratch;
    cudaCheck(cudaMalloc(&d_scratch, column_sum_scratch_floats(rows, cols) * 4));
    column_sum_accumulate(d_out, d_x, rows, cols, scale, d_scratch);
    std::vector<double> ref(cols);
    for (int j = 0; j < cols; j++) {
        double acc = 0.0;
        for (int i = 0; i < rows; i++) acc += x[(size_t)i * cols + j];
        ref[j] = out0[j] + scale * acc;
    }
    char tag[96];
    snprintf(tag, sizeof(tag), "column sum rows=%d cols=%d scale=%g (+=)", rows, cols, scale);
    check(tag, download(d_out, cols), ref, kTolSimple);
    cudaFree(d_x); cudaFree(d_out); cudaFree(d_scratch);
}

// Linear layer, optionally followed by GELU (fused into the cuBLASLt epilogue or as separate kernels).
static void test_matmul(int N, int C, int OC, bool gelu, bool fuse, float scale) {
    auto inp = random_vec((size_t)N * C, 1.0f), w = random_vec((size_t)OC * C, 1.0f / std::sqrt((float)C));
    auto bias = random_vec(OC, 0.5f), dout = random_vec((size_t)N * OC, 1.0f);
    auto dw0 = random_vec((size_t)OC * C, 1.0f), db0 = random_vec(OC, 1.0f);
    floatX *d_inp = upload(inp), *d_w = upload(w), *d_bias = upload(bias), *d_out = poisoned((size_t)N * OC);
    floatX* d_pre = gelu ? poisoned((size_t)N * OC) : nullptr;
    float* d_scratch;
    cudaCheck(cudaMalloc(&d_scratch, column_sum_scratch_floats(N, OC) * 4));
    matmul_forward(d_out, d_inp, d_w, d_bias, N, C, OC, d_pre, fuse);
    std::vector<double> inp_d = dbl(inp), w_d = dbl(w), b_d = dbl(bias), pre((size_t)N * OC), out((size_t)N * OC);
    reference::matmul_forward(pre.data(), inp_d.data(), w_d.data(), b_d.data(), 1, N, C, OC);
    char tag[128];
    snprintf(tag, sizeof(tag), "matmul N=%d C=%d OC=%d%s scale=%g", N, C, OC,
             gelu ? (fuse ? " +gelu(fused)" : " +gelu") : "", scale);
    if (gelu) {
        // Fused: GELU of the fp32 accumulator; unfused: of the stored pre-activation. Either is within one
        // output rounding of GELU(exact pre-activation).
        reference::gelu_forward(out.data(), pre.data(), pre.size());
        check(std::string(tag) + " pre_gelu", download(d_pre, pre.size()), pre, kTolSimple);
    } else {
        out = pre;
    }
    check(std::string(tag) + " out", download(d_out, out.size()), out, kTolSimple);
    // Backward of the linear part (the GELU derivative path is test_matmul_dgelu):
    // dinp = scale · dout · W (overwritten), dweight += scale · doutᵀ · inp, dbias += scale · Σ dout.
    floatX *d_dout = upload(dout), *d_dinp = poisoned((size_t)N * C), *d_dw = upload(dw0), *d_db = upload(db0);
    matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, d_scratch, nullptr, false, scale);
    std::vector<double> dout_d = dbl(dout), dinp((size_t)N * C, 0.0), dw(dw0.size(), 0.0), db(OC, 0.0);
    reference::matmul_backward(dinp.data(), dw.data(), db.data(), dout_d.data(), inp_d.data(), w_d.data(), 1, N, C, OC);
    for (double& x : dinp) x *= scale;
    for (size_t i = 0; i < dw.size(); i++) dw[i] = dw0[i] + scale * dw[i];
    for (int i = 0; i < OC; i++) db[i] = db0[i] + scale * db[i];
    check(std::string(tag) + " dinp", download(d_dinp, dinp.size()), dinp, kTolSimple);
    check(std::string(tag) + " dweight (+=)", download(d_dw, dw.size()), dw, kTolSimple);
    check(std::string(tag) + " dbias (+=)", download(d_db, OC), db, kTolSimple);
    cudaFree(d_inp); cudaFree(d_w); cudaFree(d_bias); cudaFree(d_out); cudaFree(d_pre); cudaFree(d_scratch);
    cudaFree(d_dout); cudaFree(d_dinp); cudaFree(d_dw); cudaFree(d_db);
}

// dinp = (dout · W) ∘ gelu'(pre): the backward GEMM with the GELU derivative fused into its epilogue (or not).
static void test_matmul_dgelu(int N, int C, int OC, bool fuse) {
    // Layer: out (N x OC) = gelu_in (N x C) · Wᵀ, where gelu_in = gelu(pre). dinp is d(pre) (N x C).
    auto pre = random_vec((size_t)N * C, 1.5f), w = random_vec((size_t)OC * C, 1.0f / std::sqrt((float)C));
    auto dout = random_vec((size_t)N * OC, 1.0f), act = random_vec((size_t)N * C, 1.0f);
    floatX *d_pre = upload(pre), *d_w = upload(w), *d_dout = upload(dout), *d_act = upload(act);
    floatX *d_dinp = poisoned((size_t)N * C), *d_dw;
    cudaCheck(cudaMalloc(&d_dw, (size_t)OC * C * sizeof(floatX)));
    cudaCheck(cudaMemset(d_dw, 0, (size_t)OC * C * sizeof(floatX)));
    float* d_scratch;
    cudaCheck(cudaMalloc(&d_scratch, column_sum_scratch_floats(N, OC) * 4));
    matmul_backward(d_dinp, d_dw, nullptr, d_dout, d_act, d_w, N, C, OC, d_scratch, d_pre, fuse, 1.0f);
    std::vector<double> dgelu_out((size_t)N * C, 0.0), dw((size_t)OC * C, 0.0), dinp((size_t)N * C, 0.0);
    auto dout_d = dbl(dout), w_d = dbl(w), act_d = dbl(act), pre_d = dbl(pre);
    reference::matmul_backward(dgelu_out.data(), dw.data(), (double*)nullptr, dout_d.data(), act_d.data(), w_d.data(), 1, N, C,
                    OC);
    reference::gelu_backward(dinp.data(), pre_d.data(), dgelu_out.data(), dinp.size());
    char tag[96];
    snprintf(tag, sizeof(tag), "matmul backward N=%d C=%d OC=%d dgelu%s", N, C, OC, fuse ? "(fused)" : "");
    check(std::string(tag) + " dinp", download(d_dinp, dinp.size()), dinp, kTolSimple);
    check(std::string(tag) + " dweight", download(d_dw, dw.size()), dw, kTolSimple);
    cudaFree(d_pre); cudaFree(d_w); cudaFree(d_dout); cudaFree(d_act); cudaFree(d_dinp); cudaFree(d_dw);
    cudaFree(d_scratch);
}

int main(int argc, char** argv) {
    kernel_tests_begin(argc, argv);
    matmul_init();
    for (bool fuse : {false, true}) {
        if (fuse && !kFloatXIsBF16) continue;  // FP32 builds never fuse GELU (exactness)
        test_matmul(3 * 37, 96, 384, true, fuse, 0.5f);
        test_matmul_dgelu(3 * 37, 384, 96, fuse);
    }
    test_matmul(3 * 37, 96, 288, false, false, 0.25f);
    test_matmul(256, 768, 2304, false, false, 1.0f);
    test_matmul(4096, 64, 768, false, false, 0.5f);  // long reduction for the GEMM-fused bias gradient
    test_column_sum(1000, 768, 0.5f);   // vector path, last chunk partial
    test_column_sum(77, 1001, 1.0f);    // scalar fallback
    return kernel_tests_end();
}
