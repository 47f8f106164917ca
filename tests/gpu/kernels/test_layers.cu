// The encoder, LayerNorm and the fused classifier against the CPU reference in double.
//   ./tests/gpu/kernels/test_layers [seed]   (tests/gpu/kernels/kernel_checks.cuh: inputs, poison, tolerances)
#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/fused_classifier.cuh"
#include "llmc/kernels/layernorm_backward.cuh"
#include "tests/gpu/kernels/kernel_checks.cuh"

// ---------------------------------------------------------------- tests
static void test_encoder(int B, int T, int C, int V) {
    std::vector<int> tokens(B * T);
    for (int& t : tokens) t = (int)rng.below(V / 4);  // many repeats: the sort + segmented sum matters
    auto wte = random_vec((size_t)V * C, 1.0f), wpe = random_vec((size_t)T * C, 1.0f);
    auto dout = random_vec((size_t)B * T * C, 1.0f);
    auto dwte0 = random_vec((size_t)V * C, 1.0f), dwpe0 = random_vec((size_t)T * C, 1.0f);
    int* d_tokens;
    cudaCheck(cudaMalloc(&d_tokens, tokens.size() * sizeof(int)));
    cudaCheck(cudaMemcpy(d_tokens, tokens.data(), tokens.size() * sizeof(int), cudaMemcpyHostToDevice));
    floatX *d_wte = upload(wte), *d_wpe = upload(wpe), *d_out = poisoned((size_t)B * T * C);
    floatX *d_dout = upload(dout), *d_dwte = upload(dwte0), *d_dwpe = upload(dwpe0);
    void* scratch;
    cudaCheck(cudaMalloc(&scratch, encoder_backward_scratch_bytes(B * T, V)));
    EncoderBackwardScratch s = encoder_backward_scratch_at(scratch, B * T, V);
    encoder_forward(d_out, d_tokens, d_wte, d_wpe, B, T, C);
    encoder_backward(d_dwte, d_dwpe, d_dout, d_tokens, B, T, C, V, s);
    std::vector<double> out((size_t)B * T * C), dwte = dbl(dwte0), dwpe = dbl(dwpe0);
    auto wte_d = dbl(wte), wpe_d = dbl(wpe), dout_d = dbl(dout);
    reference::encoder_forward(out.data(), tokens.data(), wte_d.data(), wpe_d.data(), B, T, C);
    reference::encoder_backward(dwte.data(), dwpe.data(), dout_d.data(), tokens.data(), B, T, C);
    char tag[96];
    snprintf(tag, sizeof(tag), "encoder B=%d T=%d C=%d V=%d", B, T, C, V);
    check(std::string(tag) + " out", download(d_out, out.size()), out, kTolSimple);
    check(std::string(tag) + " dwte (+=)", download(d_dwte, dwte.size()), dwte, kTolSimple);
    check(std::string(tag) + " dwpe (+=)", download(d_dwpe, dwpe.size()), dwpe, kTolSimple);
    cudaFree(d_tokens); cudaFree(d_wte); cudaFree(d_wpe); cudaFree(d_out); cudaFree(d_dout); cudaFree(d_dwte);
    cudaFree(d_dwpe); cudaFree(scratch);
}

static void test_layernorm(int N, int C) {
    auto a = random_vec((size_t)N * C, 1.0f, 0.3f), b = random_vec((size_t)N * C, 1.0f);
    auto w = random_vec(C, 0.2f, 1.0f), bias = random_vec(C, 0.2f);
    auto dout = random_vec((size_t)N * C, 1.0f), dinp0 = random_vec((size_t)N * C, 1.0f);
    auto dw0 = random_vec(C, 1.0f), db0 = random_vec(C, 1.0f), dsum0 = random_vec(C, 1.0f);
    floatX *d_a = upload(a), *d_b = upload(b), *d_w = upload(w), *d_bias = upload(bias);
    floatX *d_res = poisoned((size_t)N * C), *d_out = poisoned((size_t)N * C);
    float *d_mean, *d_rstd, *d_scratch;
    cudaCheck(cudaMalloc(&d_mean, N * 4));
    cudaCheck(cudaMalloc(&d_rstd, N * 4));
    cudaCheck(cudaMemset(d_mean, 0xFF, N * 4));
    cudaCheck(cudaMemset(d_rstd, 0xFF, N * 4));
    cudaCheck(cudaMalloc(&d_scratch, layernorm_backward_scratch_floats(N, C) * 4));
    fused_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C);
    // Reference: the residual as the GPU stores it (rounded), then LayerNorm in double.
    std::vector<float> res(a.size());
    for (size_t i = 0; i < a.size(); i++) res[i] = round_to_floatX(a[i] + b[i]);
    std::vector<double> res_d = dbl(res), w_d = dbl(w), b_d = dbl(bias), out((size_t)N * C), mean(N), rstd(N);
    reference::layernorm_forward(out.data(), mean.data(), rstd.data(), res_d.data(), w_d.data(), b_d.data(), 1, N, C);
    char tag[96];
    snprintf(tag, sizeof(tag), "layernorm N=%d C=%d", N, C);
    std::vector<double> res_ref(a.size());
    for (size_t i = 0; i < a.size(); i++) res_ref[i] = (double)a[i] + b[i];
    check(std::string(tag) + " residual", download(d_res, res.size()), res_ref, kTolSimple);
    check(std::string(tag) + " out", download(d_out, out.size()), out, kTolSimple);
    check(std::string(tag) + " mean", download(d_mean, N), mean, 1e-5);
    check(std::string(tag) + " rstd", download(d_rstd, N), rstd, 1e-5);
    floatX *d_dout = upload(dout), *d_dinp = upload(dinp0), *d_dw = upload(dw0), *d_db = upload(db0);
    floatX* d_dsum = upload(dsum0);
    // Twice: without and with the row sum of dinp (the upstream projection's bias gradient).
    layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_res, d_w, d_mean, d_rstd, N, C, d_scratch);
    layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_res, d_w, d_mean, d_rstd, N, C, d_scratch, 0, d_dsum);
    std::vector<double> dinp = dbl(dinp0), dw = dbl(dw0), db = dbl(db0), dout_d = dbl(dout), dsum = dbl(dsum0);
    for (int rep = 0; rep < 2; rep++) {
        reference::layernorm_backward(dinp.data(), dw.data(), db.data(), dout_d.data(), res_d.data(), w_d.data(), mean.data(),
                           rstd.data(), 1, N, C);
    }
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) dsum[c] += dinp[(size_t)n * C + c];
    check(std::string(tag) + " dinp (+= twice)", download(d_dinp, dinp.size()), dinp, kTolSimple);
    check(std::string(tag) + " dweight (+= twice)", download(d_dw, C), dw, kTolSimple);
    check(std::string(tag) + " dbias (+= twice)", download(d_db, C), db, kTolSimple);
    check(std::string(tag) + " row sum of dinp (+=)", download(d_dsum, C), dsum, kTolSimple);
    cudaFree(d_dsum);
    cudaFree(d_a); cudaFree(d_b); cudaFree(d_w); cudaFree(d_bias); cudaFree(d_res); cudaFree(d_out); cudaFree(d_mean);
    cudaFree(d_rstd); cudaFree(d_scratch); cudaFree(d_dout); cudaFree(d_dinp); cudaFree(d_dw); cudaFree(d_db);
}

// Every kernel that runs rows of Vp on this device (llmc/kernels/fused_classifier.cuh), each against the reference; where
// both run and the resident one holds the row in one chunk, their outputs must be the same bits.
static void test_classifier(int N, int V, int Vp) {
    auto logits = random_vec((size_t)N * Vp, 2.0f);
    std::vector<int> targets(N);
    for (int& t : targets) t = (int)rng.below(V);
    targets[0] = V - 1;  // the last real column
    int* d_targets;
    cudaCheck(cudaMalloc(&d_targets, N * sizeof(int)));
    cudaCheck(cudaMemcpy(d_targets, targets.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    const float dloss = 1.0f / N;
    std::vector<double> logits_d = dbl(logits), probs(logits.size()), losses(N), dlogits(logits.size(), 0.0);
    std::vector<double> dlosses(N, (double)dloss);
    reference::crossentropy_softmax_forward(losses.data(), probs.data(), logits_d.data(), targets.data(), 1, N, V, Vp);
    reference::crossentropy_softmax_backward(dlogits.data(), dlosses.data(), probs.data(), targets.data(), 1, N, V, Vp);
    std::vector<std::vector<float>> outputs;  // per kernel run: losses then dlogits
    for (ClassifierKernel kernel : {ClassifierKernel::Resident, ClassifierKernel::Pipelined}) {
        if (kernel == ClassifierKernel::Pipelined && !fused_classifier_pipelined_fits(Vp)) continue;
        floatX* d_logits = upload(logits);
        float* d_losses;
        cudaCheck(cudaMalloc(&d_losses, N * 4));
        cudaCheck(cudaMemset(d_losses, 0xFF, N * 4));
        fused_classifier(d_logits, d_losses, d_targets, N, V, Vp, dloss, 0, kernel);
        char tag[96];
        snprintf(tag, sizeof(tag), "fused classifier %s N=%d V=%d Vp=%d",
                 kernel == ClassifierKernel::Pipelined ? "pipelined" : "resident", N, V, Vp);
        std::vector<float> got_losses = download(d_losses, N), got = download(d_logits, dlogits.size());
        check(std::string(tag) + " losses", got_losses, losses, 1e-5);
        check(std::string(tag) + " dlogits (padding must be 0)", got, dlogits, kTolSimple);
        got.insert(got.end(), got_losses.begin(), got_losses.end());
        outputs.push_back(std::move(got));
        cudaFree(d_logits); cudaFree(d_losses);
    }
    if (outputs.size() == 2) {  // the pipelined kernel fits: the resident one holds the row in one chunk too
        checks++;
        const bool same = memcmp(outputs[0].data(), outputs[1].data(), outputs[0].size() * sizeof(float)) == 0;
        failures += !same;
        printf("%-52s %s\n", "fused classifier: both kernels give the same bits", same ? "OK" : "FAIL");
    }
    cudaFree(d_targets);
}

int main(int argc, char** argv) {
    kernel_tests_begin(argc, argv);
    test_encoder(3, 37, 96, 301);
    test_encoder(4, 64, 768, 1000);
    test_layernorm(3 * 37, 96);
    test_layernorm(257, 768);
    test_layernorm(2048, 1600);  // d48 width: more shared memory than the default 48 KB, many partial rows
    test_classifier(3 * 37, 1000, 1024);
    test_classifier(8, 50257, 50304);
    test_classifier(5, 20001, 20096);  // 4 packs per thread
    test_classifier(3, 70001, 70016);  // longer than 8 packs per thread (bf16): chunks, re-read for the write pass
    return kernel_tests_end();
}
