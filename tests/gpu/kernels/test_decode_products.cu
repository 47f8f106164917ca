// A decode step's products (decode_matvec, decode_mma) against the CPU reference in double.
//   ./tests/gpu/kernels/test_decode_products [seed]   (tests/gpu/kernels/kernel_checks.cuh: inputs, poison, tolerances)
#include "llmc/kernels/decode/decode_mma.cuh"
#include "tests/gpu/kernels/kernel_checks.cuh"

// Generation's decode products (llmc/kernels/decode/decode_matvec.cuh, llmc/kernels/decode/decode_mma.cuh): out (B, N) = epilogue(in'·Wᵀ + bias),
// in' = LayerNorm(in) rounded to floatX where the kind has one. Kinds: 0 the QKV product (LayerNorm; K and V columns
// also into a cache at each row's len - 1), 1 LayerNorm + GELU, 2 the residual add (product + bias rounded, then
// + residual). Run twice: the second run checks the split-K counters were left at zero.
static void test_decode_product(bool mma, int B, int N, int K, int kind, int splits = 0) {
    const bool ln = kind != 2, qkv = kind == 0;
    const int HS = 64, NH = qkv ? N / (3 * HS) : 0, max_T = 9;
    auto inp = random_vec((size_t)B * K, 1.0f, 0.3f), w = random_vec((size_t)N * K, 1.0f / std::sqrt((float)K));
    auto bias = random_vec(N, 0.5f), res = random_vec((size_t)B * N, 1.0f);
    auto lnw = random_vec(K, 0.2f, 1.0f), lnb = random_vec(K, 0.2f);
    std::vector<int> len(B);
    for (int b = 0; b < B; b++) len[b] = 1 + (int)(rng.uniform() * max_T) % max_T;
    floatX *d_inp = upload(inp), *d_w = upload(w), *d_bias = upload(bias), *d_res = upload(res);
    floatX *d_lnw = upload(lnw), *d_lnb = upload(lnb), *d_out = poisoned((size_t)B * N);
    const size_t cache_n = qkv ? (size_t)B * NH * max_T * HS : 1;
    floatX *d_k = poisoned(cache_n), *d_v = poisoned(cache_n);
    int* d_len;
    cudaCheck(cudaMalloc(&d_len, B * sizeof(int)));
    cudaCheck(cudaMemcpy(d_len, len.data(), B * sizeof(int), cudaMemcpyHostToDevice));
    DecodeMatvec a{d_out, d_inp, ln ? d_lnw : nullptr, ln ? d_lnb : nullptr, d_w, d_bias, kind == 2 ? d_res : nullptr};
    a.gelu = kind == 1, a.B = B, a.N = N, a.K = K;
    if (qkv) a.k_cache = d_k, a.v_cache = d_v, a.len = d_len, a.NH = NH, a.HS = HS, a.max_T = max_T;
    float* d_partials = nullptr;
    unsigned* d_counters = nullptr;
    if (mma) {
        a.splits = splits;
        const int s = splits > 0 ? splits : decode_mma_splits(N, K, ln);
        cudaCheck(cudaMalloc(&d_partials, (size_t)s * B * N * sizeof(float)));
        cudaCheck(cudaMalloc(&d_counters, decode_mma_counters(B, N) * sizeof(unsigned)));
        cudaCheck(cudaMemset(d_counters, 0, decode_mma_counters(B, N) * sizeof(unsigned)));
        a.partials = d_partials, a.counters = d_counters;
    }
    // the reference in double
    std::vector<double> x(inp.begin(), inp.end()), out((size_t)B * N);
    if (ln) {  // rounded to floatX, as the kernels hand the normalised rows to the product
        const std::vector<double> lnw_d(lnw.begin(), lnw.end()), lnb_d(lnb.begin(), lnb.end());
        reference::layernorm_forward<double>(x.data(), nullptr, nullptr, x.data(), lnw_d.data(), lnb_d.data(), 1, B, K);
        for (double& e : x) e = round_to_floatX((float)e);
    }
    for (int b = 0; b < B; b++) {
        for (int n = 0; n < N; n++) {
            double y = bias[n];
            for (int k = 0; k < K; k++) y += x[(size_t)b * K + k] * (double)w[(size_t)n * K + k];
            if (kind == 1) reference::gelu_forward(&y, &y, 1);
            if (kind == 2) y = round_to_floatX((float)y) + (double)res[(size_t)b * N + n];
            out[(size_t)b * N + n] = y;
        }
    }
    char tag[128];
    snprintf(tag, sizeof(tag), "%s B=%d N=%d K=%d %s%s", mma ? "decode_mma" : "decode_matvec", B, N, K,
             kind == 0 ? "LN+QKV+cache" : kind == 1 ? "LN+GELU" : "+residual",
             mma ? (" splits=" + std::to_string(splits > 0 ? splits : decode_mma_splits(N, K, ln))).c_str() : "");
    for (int run = 0; run < 2; run++) {
        cudaCheck(cudaMemset(d_out, 0xFF, (size_t)B * N * sizeof(floatX)));
        if (mma) decode_mma(a, 0);
        else decode_matvec(a, 0);
        cudaCheckLaunch();
        check(std::string(tag) + (run ? " out (again)" : " out"), download(d_out, out.size()), out, kTolSimple);
    }
    if (qkv) {  // the cache rows at len - 1 against the K and V columns of the reference
        const auto k = download(d_k, cache_n), v = download(d_v, cache_n);
        std::vector<float> got;
        std::vector<double> want;
        const int C = NH * HS;
        for (int b = 0; b < B; b++)
            for (int part = 1; part <= 2; part++)
                for (int c = 0; c < C; c++) {
                    const size_t at = (((size_t)b * NH + c / HS) * max_T + len[b] - 1) * HS + c % HS;
                    got.push_back(part == 1 ? k[at] : v[at]);
                    want.push_back(out[(size_t)b * N + part * C + c]);
                }
        check(std::string(tag) + " K/V cache", got, want, kTolSimple);
    }
    for (void* p : {(void*)d_inp, (void*)d_w, (void*)d_bias, (void*)d_res, (void*)d_lnw, (void*)d_lnb, (void*)d_out,
                    (void*)d_k, (void*)d_v, (void*)d_len, (void*)d_partials, (void*)d_counters})
        cudaCheck(cudaFree(p));
}

int main(int argc, char** argv) {
    kernel_tests_begin(argc, argv);
    if (!(kDecodeMatvecAvailable && kDecodeMmaAvailable)) {  // BF16 builds (FP32 builds decode through cuBLASLt)
        printf("decode products: skipped (BF16 builds only)\n");
        return kernel_tests_end();
    }
    test_decode_product(false, 1, 2304, 768, 0);   // the register path
    test_decode_product(false, 2, 3072, 768, 1);
    test_decode_product(false, 11, 768, 3072, 2);  // two row groups, rows staged in shared memory
    test_decode_product(true, 3, 384, 128, 0);     // one 16-row tile
    test_decode_product(true, 64, 2304, 768, 0);   // four
    test_decode_product(true, 17, 3072, 768, 1);
    test_decode_product(true, 40, 768, 3072, 2);   // split K
    test_decode_product(true, 70, 768, 768, 2);    // two row groups, split K
    test_decode_product(true, 64, 200, 192, 2, 3); // a partial column tile, three slices of 64
    test_decode_product(true, 33, 96, 64, 2, 1);
    test_decode_product(true, 5, 4800, 1600, 0);   // d48's QKV at a small batch (whole rows of 1600)
    return kernel_tests_end();
}
