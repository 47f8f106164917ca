// Attention, every backend, forward and backward, against the CPU reference in double; and the amax each folds in
// (what -fp8 1 casts attproj's input and qkv's output gradient with) exactly max |out| and max |dqkv| as stored.
//   ./tests/gpu/kernels/test_attention [seed]   (tests/gpu/kernels/kernel_checks.cuh: inputs, poison, tolerances)
#include "llmc/kernels/attention/attention.cuh"
#include "tests/gpu/kernels/kernel_checks.cuh"

static void test_attention(AttentionBackend backend, int B, int T, int NH, int HS) {
    const int C = NH * HS;
    auto qkv = random_vec((size_t)B * T * 3 * C, 1.0f), dout = random_vec((size_t)B * T * C, 1.0f);
    floatX *d_qkv = upload(qkv), *d_out = poisoned((size_t)B * T * C), *d_dout = upload(dout);
    floatX* d_dqkv = poisoned((size_t)B * T * 3 * C);
    void *saved, *ws;
    cudaCheck(cudaMalloc(&saved, attention_saved_bytes(backend, B, T, NH)));
    cudaCheck(cudaMalloc(&ws, attention_workspace_bytes(backend, B, T, C, NH)));
    cudaCheck(cudaMemset(saved, 0xFF, attention_saved_bytes(backend, B, T, NH)));
    cudaCheck(cudaMemset(ws, 0xFF, attention_workspace_bytes(backend, B, T, C, NH)));
    float* d_amax = upload_fp32({0.f, 0.f});
    // the qkv bias gradient's partial sums beside the amax where the backend takes them (the FP8 step's case)
    float* d_bias_partials = nullptr;
    if (attention_backward_sums_qkv_bias(backend, HS))
        cudaCheck(cudaMalloc(&d_bias_partials, (size_t)attention_qkv_bias_partial_rows(B, T) * 3 * C * sizeof(float)));
    attention_forward(backend, d_out, saved, d_qkv, ws, B, T, C, NH, 0, d_amax);
    attention_backward(backend, d_dqkv, d_dout, d_qkv, d_out, saved, ws, B, T, C, NH, 0, d_bias_partials,
                       d_amax + 1);
    std::vector<double> qkv_d = dbl(qkv), dout_d = dbl(dout), out((size_t)B * T * C), dqkv(qkv.size(), 0.0);
    std::vector<double> lse((size_t)B * NH * T);
    reference::attention_forward(out.data(), lse.data(), qkv_d.data(), B, T, C, NH);
    reference::attention_backward(dqkv.data(), dout_d.data(), qkv_d.data(), B, T, C, NH);
    char tag[96];
    snprintf(tag, sizeof(tag), "attention %s B=%d T=%d NH=%d HS=%d", attention_backend_name(backend), B, T, NH, HS);
    const std::vector<float> got_out = download(d_out, out.size());
    check(std::string(tag) + " out", got_out, out, kTolChain);
    const std::vector<float> got_dqkv = download(d_dqkv, dqkv.size());
    float amax[2] = {-1.f, -1.f}, want[2] = {0.f, 0.f};
    cudaCheck(cudaMemcpy(amax, d_amax, sizeof(amax), cudaMemcpyDeviceToHost));
    for (float v : got_out) want[0] = std::max(want[0], std::fabs(v));
    for (float v : got_dqkv) want[1] = std::max(want[1], std::fabs(v));
    check_exact(std::string(tag) + " amax of out and of dqkv", amax[0] == want[0] && amax[1] == want[1]);
    if (is_flash(backend)) {
        check(std::string(tag) + " lse", download((const float*)saved, lse.size()), lse, kTolSimple);
    }
    check(std::string(tag) + " dqkv", got_dqkv, dqkv, kTolAttnBwd);
    cudaFree(d_qkv); cudaFree(d_out); cudaFree(d_dout); cudaFree(d_dqkv); cudaFree(saved); cudaFree(ws);
    cudaFree(d_amax); cudaFree(d_bias_partials);
}

int main(int argc, char** argv) {
    kernel_tests_begin(argc, argv);
    matmul_init();
    test_attention(AttentionBackend::Materialized, 2, 37, 3, 32);
    test_attention(AttentionBackend::Materialized, 2, 128, 4, 64);
    std::string why;
    if (attention_backend_supported(AttentionBackend::Flash, 256, 4, &why)) {
        test_attention(AttentionBackend::Flash, 2, 37, 4, 64);
        test_attention(AttentionBackend::Flash, 2, 128, 4, 64);
        test_attention(AttentionBackend::Flash, 1, 300, 2, 128);
        test_attention(AttentionBackend::FlashNondeterministic, 2, 37, 4, 64);
        test_attention(AttentionBackend::FlashNondeterministic, 2, 300, 4, 64);
    } else {
        printf("flash attention: skipped (%s)\n", why.c_str());
    }
    return kernel_tests_end();
}
