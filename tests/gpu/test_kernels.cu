// Every engine kernel module against the CPU reference (reference/gpt2_cpu.h, namespace cpu) computed in
// double from the same inputs the GPU sees (rounded to floatX first), on fresh random inputs at awkward shapes
// (odd T, B*T not a multiple of any tile). GPU outputs that are overwritten are poisoned with NaN (0xFF bytes) before each run;
// outputs that accumulate start from random values, so the accumulation itself is checked.
// Prints rel-L2 and max-abs per output and the tolerance; exit code 0/1.
//   ./test_kernels [seed]
// Tolerances: FP32 builds 1e-5 (1e-4 where an output is a long chain of fp32 GEMMs and softmax);
// BF16 builds: the inputs are exact, outputs are rounded to bf16 (relative step 2^-8), so a single
// rounded output has rel-L2 ~2e-3: 6e-3 for one-step kernels, 2e-2 where bf16 intermediates feed further
// products (attention: S, P, dP stored in bf16), 4e-2 for the attention backward (two such stages).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/core/bf16.h"
#include "llmc/core/graph_memsets.cuh"
#include "llmc/core/rand.h"
#include "llmc/kernels/adamw.cuh"
#include "llmc/kernels/attention/attention.cuh"
#include "llmc/kernels/decode/decode_mma.cuh"
#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/fused_classifier.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/matmul/matmul.cuh"
#include "reference/compare.h"
#include "reference/gpt2_cpu.h"

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

static void check(const std::string& what, const std::vector<float>& gpu, const std::vector<double>& ref, double tol) {
    const ErrorStats e = compare(gpu.data(), ref.data(), ref.size());
    const bool ok = e.rel_l2 <= tol;  // NaN fails
    checks++;
    failures += !ok;
    printf("%-52s rel-L2 %.3e  max-abs %.3e  (tol %.0e)  %s\n", what.c_str(), e.rel_l2, e.max_abs, tol, ok ? "OK" : "FAIL");
}

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
    cpu::encoder_forward(out.data(), tokens.data(), wte_d.data(), wpe_d.data(), B, T, C);
    cpu::encoder_backward(dwte.data(), dwpe.data(), dout_d.data(), tokens.data(), B, T, C);
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
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), res_d.data(), w_d.data(), b_d.data(), 1, N, C);
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
        cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout_d.data(), res_d.data(), w_d.data(), mean.data(),
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
    cpu::matmul_forward(pre.data(), inp_d.data(), w_d.data(), b_d.data(), 1, N, C, OC);
    char tag[128];
    snprintf(tag, sizeof(tag), "matmul N=%d C=%d OC=%d%s scale=%g", N, C, OC,
             gelu ? (fuse ? " +gelu(fused)" : " +gelu") : "", scale);
    if (gelu) {
        // Fused: GELU of the fp32 accumulator; unfused: of the stored pre-activation. Either is within one
        // output rounding of GELU(exact pre-activation).
        cpu::gelu_forward(out.data(), pre.data(), pre.size());
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
    cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout_d.data(), inp_d.data(), w_d.data(), 1, N, C, OC);
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
    cpu::matmul_backward(dgelu_out.data(), dw.data(), (double*)nullptr, dout_d.data(), act_d.data(), w_d.data(), 1, N, C,
                    OC);
    cpu::gelu_backward(dinp.data(), pre_d.data(), dgelu_out.data(), dinp.size());
    char tag[96];
    snprintf(tag, sizeof(tag), "matmul backward N=%d C=%d OC=%d dgelu%s", N, C, OC, fuse ? "(fused)" : "");
    check(std::string(tag) + " dinp", download(d_dinp, dinp.size()), dinp, kTolSimple);
    check(std::string(tag) + " dweight", download(d_dw, dw.size()), dw, kTolSimple);
    cudaFree(d_pre); cudaFree(d_w); cudaFree(d_dout); cudaFree(d_act); cudaFree(d_dinp); cudaFree(d_dw);
    cudaFree(d_scratch);
}

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
    attention_forward(backend, d_out, saved, d_qkv, ws, B, T, C, NH);
    attention_backward(backend, d_dqkv, d_dout, d_qkv, d_out, saved, ws, B, T, C, NH);
    std::vector<double> qkv_d = dbl(qkv), dout_d = dbl(dout), out((size_t)B * T * C), dqkv(qkv.size(), 0.0);
    std::vector<double> lse((size_t)B * NH * T);
    cpu::attention_forward(out.data(), lse.data(), qkv_d.data(), B, T, C, NH);
    cpu::attention_backward(dqkv.data(), dout_d.data(), qkv_d.data(), B, T, C, NH);
    char tag[96];
    snprintf(tag, sizeof(tag), "attention %s B=%d T=%d NH=%d HS=%d", attention_backend_name(backend), B, T, NH, HS);
    check(std::string(tag) + " out", download(d_out, out.size()), out, kTolChain);
    if (is_flash(backend)) {
        check(std::string(tag) + " lse", download((const float*)saved, lse.size()), lse, kTolSimple);
    }
    check(std::string(tag) + " dqkv", download(d_dqkv, dqkv.size()), dqkv, kTolAttnBwd);
    cudaFree(d_qkv); cudaFree(d_out); cudaFree(d_dout); cudaFree(d_dqkv); cudaFree(saved); cudaFree(ws);
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
    cpu::crossentropy_softmax_forward(losses.data(), probs.data(), logits_d.data(), targets.data(), 1, N, V, Vp);
    cpu::crossentropy_softmax_backward(dlogits.data(), dlosses.data(), probs.data(), targets.data(), 1, N, V, Vp);
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

static void test_global_norm(size_t n) {
    auto x = random_vec(n, 0.01f);
    floatX* d_x = upload(x);
    float* d_scratch;
    cudaCheck(cudaMalloc(&d_scratch, global_norm_scratch_floats() * 4));
    float norm = global_norm(d_x, n, d_scratch);
    double ref = 0;
    for (float v : x) ref += (double)v * v;
    char tag[96];
    snprintf(tag, sizeof(tag), "global norm n=%zu", n);
    check(tag, {norm}, {std::sqrt(ref)}, 1e-5);
    // from the second element: not 16-byte aligned, so element by element
    const float unaligned = global_norm(d_x + 1, n - 1, d_scratch);
    snprintf(tag, sizeof(tag), "global norm n=%zu, unaligned start", n - 1);
    check(tag, {unaligned}, {std::sqrt(ref - (double)x[0] * x[0])}, 1e-5);
    float again = global_norm(d_x, n, d_scratch);
    checks++;
    bool same = memcmp(&norm, &again, 4) == 0;
    failures += !same;
    printf("%-52s %s\n", "global norm repeat is bit-identical", same ? "OK" : "FAIL");
    cudaFree(d_x); cudaFree(d_scratch);
}

// sizes: tensors of odd sizes take the scalar kernel, multiples of 4 the chunked 4-wide one (llmc/kernels/adamw.cuh).
static void test_adamw(const size_t (&sizes)[3]) {
    const int num = 3;
    const float wd[num] = {0.1f, 0.0f, 0.1f};
    size_t total = 0;
    AdamWTensorTable table;
    for (int i = 0; i < num; i++) {
        table.offset[i] = total;
        table.size[i] = sizes[i];
        table.weight_decay[i] = wd[i];
        total += sizes[i];
    }
    std::vector<float> master(total);
    rng.fill_normal(master.data(), total, 0.0f, 1.0f);
    std::vector<float> params(total);
    for (size_t i = 0; i < total; i++) params[i] = round_to_floatX(master[i]);
    if (!kFloatXIsBF16) master = params;
    auto grads = random_vec(total, 1.0f);
    std::vector<float> m(total), v(total);
    rng.fill_normal(m.data(), total, 0.0f, 0.1f);
    for (float& x : v) x = 0.01f * rng.uniform();
    floatX *d_params = upload(params), *d_grads = upload(grads);
    float *d_master = kFloatXIsBF16 ? upload_fp32(master) : nullptr, *d_m = upload_fp32(m), *d_v = upload_fp32(v);
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, grad_scale = 0.5f;
    const int step = 3;
    adamw_update(d_params, d_master, d_grads, d_m, d_v, table, num, lr, b1, b2, eps, grad_scale, step, 42);
    std::vector<double> p = dbl(master), md = dbl(m), vd = dbl(v), g(total);
    for (size_t i = 0; i < total; i++) g[i] = grad_scale * (double)grads[i];
    for (int i = 0; i < num; i++) {
        const size_t o = table.offset[i];
        cpu::adamw_update(p.data() + o, g.data() + o, md.data() + o, vd.data() + o, sizes[i], (double)lr, (double)b1,
                     (double)b2, (double)eps, (double)wd[i], step);
    }
    std::vector<double> dp(total), ref_delta(total);
    std::vector<float> got_master = kFloatXIsBF16 ? download(d_master, total) : download(d_params, total);
    for (size_t i = 0; i < total; i++) {
        dp[i] = (double)got_master[i] - master[i];
        ref_delta[i] = p[i] - master[i];
    }
    check("adamw update (new - old weights)", std::vector<float>(dp.begin(), dp.end()), ref_delta, 1e-4);
    check("adamw m", download(d_m, total), md, 1e-5);
    check("adamw v", download(d_v, total), vd, 1e-5);
    if (kFloatXIsBF16) {
        // Stochastic rounding: each bf16 param is one of the two bf16 neighbours of its master weight.
        std::vector<float> got = download(d_params, total);
        size_t bad = 0, up = 0;
        for (size_t i = 0; i < total; i++) {
            uint32_t bits;
            memcpy(&bits, &got_master[i], 4);
            uint32_t down_bits = bits & 0xFFFF0000u, up_bits = down_bits + 0x10000u;
            float down, upv;
            memcpy(&down, &down_bits, 4);
            memcpy(&upv, &up_bits, 4);
            if (got[i] != down && got[i] != upv) bad++;
            up += got[i] == upv && upv != down;
        }
        checks++;
        failures += bad != 0;
        printf("%-52s %zu not a bf16 neighbour, %zu of %zu rounded away from zero  %s\n",
               "adamw stochastic rounding", bad, up, total, bad == 0 && up > 0 ? "OK" : "FAIL");
        if (up == 0) failures++;
    }
    cudaFree(d_params); cudaFree(d_grads); cudaFree(d_master); cudaFree(d_m); cudaFree(d_v);
}

// The scalar and the chunked 4-wide AdamW kernels give the same bits for every output (same math, same rounding streams).
static void test_adamw_kernels_agree() {
    const size_t n = 4 * 3001;
    AdamWTensorTable table;
    table.offset[0] = 0, table.size[0] = 2000, table.weight_decay[0] = 0.1f;
    table.offset[1] = 2000, table.size[1] = n - 2000, table.weight_decay[1] = 0.0f;
    auto params = random_vec(n, 1.0f), grads = random_vec(n, 1.0f), m = random_vec(n, 0.1f);
    std::vector<float> master(n), v(n);
    for (size_t i = 0; i < n; i++) master[i] = params[i] + 1e-3f * rng.uniform(), v[i] = 0.01f * rng.uniform();
    const AdamWStep st = adamw_step(1e-2f, 0.9f, 0.95f, 1e-8f, 0.7f, 5, 7);
    std::vector<std::vector<float>> results[2];
    for (int kernel = 0; kernel < 2; kernel++) {
        floatX *d_params = upload(params), *d_grads = upload(grads);
        const bool use_master = kFloatXIsBF16;
        float *d_master = use_master ? upload_fp32(master) : nullptr, *d_m = upload_fp32(m), *d_v = upload_fp32(v);
        // tensor 0 is one partial chunk of 4096, tensor 1 two whole chunks and a partial one
        constexpr int kUnroll = 4, kThreads = 256;
        const unsigned blocks = (unsigned)adamw_chunk_blocks(table, 2, kUnroll, kThreads);  // 1 + 3
        if (kernel == 0) adamw_kernel<<<dim3(3, 2), 128>>>(d_params, d_master, d_grads, d_m, d_v, table, st);
        else adamw_kernel_chunks<kUnroll, kThreads><<<blocks, kThreads>>>(d_params, d_master, d_grads, d_m, d_v, table, 2, st);
        cudaCheckLaunch();
        results[kernel] = {download(d_params, n), download(d_m, n), download(d_v, n)};
        if (use_master) results[kernel].push_back(download(d_master, n));
        cudaFree(d_params); cudaFree(d_grads); cudaFree(d_master); cudaFree(d_m); cudaFree(d_v);
    }
    size_t differ = 0;
    for (size_t a = 0; a < results[0].size(); a++)
        for (size_t i = 0; i < n; i++) differ += memcmp(&results[0][a][i], &results[1][a][i], 4) != 0;
    checks++;
    failures += differ != 0;
    printf("%-52s %zu values differ  %s\n", "adamw scalar vs chunked 4-wide kernel, bitwise", differ, differ == 0 ? "OK" : "FAIL");

    // the gradient scale read from the device (clipping computed there) gives the host scale's bits, both kernels
    float* d_scale;
    cudaCheck(cudaMalloc(&d_scale, sizeof(float)));
    cudaCheck(cudaMemcpy(d_scale, &st.grad_scale, sizeof(float), cudaMemcpyHostToDevice));
    AdamWStep from_device = adamw_step(1e-2f, 0.9f, 0.95f, 1e-8f, 1.0f, 5, 7);
    from_device.grad_scale_at = d_scale;
    differ = 0;
    for (int kernel = 0; kernel < 2; kernel++) {
        floatX *d_params = upload(params), *d_grads = upload(grads);
        const bool use_master = kFloatXIsBF16;
        float *d_master = use_master ? upload_fp32(master) : nullptr, *d_m = upload_fp32(m), *d_v = upload_fp32(v);
        if (kernel == 0) adamw_kernel<<<dim3(3, 2), 128>>>(d_params, d_master, d_grads, d_m, d_v, table, from_device);
        else adamw_update(d_params, d_master, d_grads, d_m, d_v, table, 2, from_device);
        cudaCheckLaunch();
        std::vector<std::vector<float>> got = {download(d_params, n), download(d_m, n), download(d_v, n)};
        if (use_master) got.push_back(download(d_master, n));
        for (size_t a = 0; a < got.size(); a++)
            for (size_t i = 0; i < n; i++) differ += memcmp(&got[a][i], &results[0][a][i], 4) != 0;
        cudaFree(d_params); cudaFree(d_grads); cudaFree(d_master); cudaFree(d_m); cudaFree(d_v);
    }
    cudaFree(d_scale);
    checks++;
    failures += differ != 0;
    printf("%-52s %zu values differ  %s\n", "adamw with the scale on the device, bitwise", differ, differ == 0 ? "OK" : "FAIL");
}

// clip_scale on the device: the norm and factor the host computed before it (sqrtf of the ranks' summed squares,
// grad_clip / norm above the clip, else 1), bit for bit (NaN as NaN), over 2^17 random positive floats of every
// magnitude (subnormals included) against clips of 0, a subnormal, 0.5, 1 and random ones; then the kernel itself
// writes both floats.
__global__ void clip_sweep_kernel(const float* values, const float* clips, int n, int squared, float* norms,
                                  float* scales) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        clip_norm_and_scale(values[i], squared != 0, clips[i], &norms[i], &scales[i]);
}
static void test_clip_scale() {
    const int n = 1 << 17;
    std::vector<float> values(n), clips(n);
    const float fixed_clips[] = {0.0f, 1e-39f, 0.5f, 1.0f};
    for (int i = 0; i < n; i++) {
        uint32_t bits = rng.next_u32() & 0x7FFFFFFFu;  // positive, any exponent
        if ((bits >> 23) == 0xFF) bits &= ~(1u << 30);                           // finite
        memcpy(&values[i], &bits, 4);
        clips[i] = i % 8 < 4 ? fixed_clips[i % 4] : values[(i * 7919) % n] * (float)rng.uniform();
    }
    values[0] = NAN, values[1] = 0.0f, values[2] = 1e-39f, values[3] = 1.0f;  // and the clip itself
    values[4] = 1e-20f, values[5] = 1e-30f;  // squares below FLT_MIN
    int wrong = 0;
    float *d_values = upload_fp32(values), *d_clips = upload_fp32(clips), *d_norms, *d_scales;
    cudaCheck(cudaMalloc(&d_norms, n * sizeof(float)));
    cudaCheck(cudaMalloc(&d_scales, n * sizeof(float)));
    auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || memcmp(&a, &b, 4) == 0; };
    for (int squared = 0; squared < 2; squared++) {
        clip_sweep_kernel<<<64, 256>>>(d_values, d_clips, n, squared, d_norms, d_scales);
        cudaCheckLaunch();
        const std::vector<float> norms = download(d_norms, n), scales = download(d_scales, n);
        for (int i = 0; i < n; i++) {
            const float norm = squared ? sqrtf(values[i]) : values[i];
            const float scale = (clips[i] > 0 && norm > clips[i]) ? clips[i] / norm : 1.0f;
            if (same(norms[i], norm) && same(scales[i], scale)) continue;
            if (wrong++ < 4)
                printf("  clip_scale(%a%s, clip %a): device %a %a, host %a %a\n", values[i], squared ? " squared" : "",
                       clips[i], norms[i], scales[i], norm, scale);
        }
    }
    // the kernel: both floats written (poisoned first), the squared square of a ZeRO shard's norm
    float state[2];
    cudaCheck(cudaMemset(d_norms, 0xFF, 2 * sizeof(float)));
    clip_scale(d_values + 3, /*squared=*/true, 0.5f, d_norms, 0);
    cudaCheck(cudaMemcpy(state, d_norms, sizeof(state), cudaMemcpyDeviceToHost));
    wrong += !(state[0] == 1.0f && state[1] == 0.5f);
    cudaFree(d_values); cudaFree(d_clips); cudaFree(d_norms); cudaFree(d_scales);
    checks++;
    failures += wrong != 0;
    printf("%-52s %d of %d cases differ  %s\n", "clip_scale vs the host's norm and factor, bitwise", wrong, 2 * n + 1,
           wrong == 0 ? "OK" : "FAIL");
}

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
        cpu::layernorm_forward<double>(x.data(), nullptr, nullptr, x.data(), lnw_d.data(), lnb_d.data(), 1, B, K);
        for (double& e : x) e = round_to_floatX((float)e);
    }
    for (int b = 0; b < B; b++) {
        for (int n = 0; n < N; n++) {
            double y = bias[n];
            for (int k = 0; k < K; k++) y += x[(size_t)b * K + k] * (double)w[(size_t)n * K + k];
            if (kind == 1) cpu::gelu_forward(&y, &y, 1);
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

// graph_memsets_to_kernels: a graph's small memset nodes (1-, 2- and 4-byte elements, aligned or not, 2D with a pitch,
// one with two dependents) become kernel nodes that write the same bytes in the same place of the order: a kernel
// fills the buffer before the chain of memsets (the second overlaps the first, so their order shows), two kernels copy
// it after, and the result must equal the bytes the memset graph gives, byte for byte, with as many edges as before;
// a memset above the size limit stays a memset node. Then a captured GEMM (cuBLASLt
// zeroes counters with memsets) replayed after the conversion gives the eager call's bits.
__global__ void fill_words_kernel(unsigned int* p, unsigned int value, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = value ^ (unsigned int)i;
}
__global__ void copy_words_kernel(unsigned int* dst, const unsigned int* src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
static int count_nodes(cudaGraph_t g, cudaGraphNodeType want) {
    int n = 0;
    for (cudaGraphNode_t node : graph_memsets_detail::nodes_of(g)) {
        cudaGraphNodeType t;
        cudaCheck(cudaGraphNodeGetType(node, &t));
        n += t == want;
    }
    return n;
}
static size_t edge_count(cudaGraph_t g) {
    size_t n = 0;
#if CUDART_VERSION >= 13000
    cudaCheck(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
#else
    cudaCheck(cudaGraphGetEdges(g, nullptr, nullptr, &n));
#endif
    return n;
}
static void check_exact(const std::string& what, bool ok) {
    checks++;
    failures += !ok;
    printf("%-52s %s\n", what.c_str(), ok ? "OK" : "FAIL");
}
static void test_graph_memsets() {
    constexpr size_t kWords = 1 << 16;  // 256 KB; the large memset below is 64 KB, over a 60 KB limit
    unsigned int *buf, *out_a, *out_b;
    cudaCheck(cudaMalloc(&buf, kWords * 4));
    cudaCheck(cudaMalloc(&out_a, kWords * 4));
    cudaCheck(cudaMalloc(&out_b, kWords * 4));
    // fill -> memsets -> two copies: each memset's bytes show only if it runs after the fill and before the copies
    // and before the copy after it; the graph is built node by node (2- and 4-byte memsets cannot be captured).
    auto build = [&](cudaGraph_t* g) {
        cudaCheck(cudaGraphCreate(g, 0));
        cudaGraphNode_t prev = nullptr;
        auto add_kernel = [&](void* func, void** args) {
            cudaKernelNodeParams k = {};
            k.func = func, k.gridDim = dim3(64), k.blockDim = dim3(256), k.kernelParams = args;
            cudaGraphNode_t n;
            cudaCheck(cudaGraphAddKernelNode(&n, *g, prev ? &prev : nullptr, prev ? 1 : 0, &k));
            return n;
        };
        auto add_memset = [&](size_t offset_bytes, unsigned int value, unsigned int element_size, size_t width,
                              size_t height, size_t pitch) {
            cudaMemsetParams m = {};
            m.dst = (char*)buf + offset_bytes, m.value = value, m.elementSize = element_size;
            m.width = width, m.height = height, m.pitch = pitch;
            cudaGraphNode_t n;
            cudaCheck(cudaGraphAddMemsetNode(&n, *g, prev ? &prev : nullptr, prev ? 1 : 0, &m));
            return n;
        };
        static unsigned int fill_value = 0xA5A5A5A5u;
        static size_t words = kWords;
        void* fill_args[] = {&buf, &fill_value, &words};
        prev = add_kernel((void*)fill_words_kernel, fill_args);
        prev = add_memset(13, 0x5A, 1, 101, 1, 0);               // bytes, unaligned start and length
        prev = add_memset(100, 0xBEEF, 2, 37, 1, 0);              // 2-byte elements over the last 14 of those
        prev = add_memset(256, 0x3C, 1, 64, 1, 0);                // bytes written as words
        prev = add_memset(512, 0x1234, 2, 16, 1, 0);              // halves written as words
        prev = add_memset(8192, 0x01234567u, 4, 9, 5, 64);        // 4-byte, 2D: 5 rows of 9, 64 bytes apart
        prev = add_memset(16384, 0u, 4, 4096 * 4, 1, 0);          // 64 KB of zeros: over the limit, stays
        const cudaGraphNode_t last = add_memset(4, 0u, 4, 1, 1, 0);  // a counter, then two readers
        static size_t words_copy = kWords;
        void* copy_a[] = {&out_a, &buf, &words_copy};
        void* copy_b[] = {&out_b, &buf, &words_copy};
        prev = last;
        add_kernel((void*)copy_words_kernel, copy_a);
        prev = last;
        add_kernel((void*)copy_words_kernel, copy_b);
    };
    auto run = [&](cudaGraph_t g, std::vector<unsigned int>* a, std::vector<unsigned int>* b) {
        cudaGraphExec_t e;
        cudaCheck(cudaMemset(out_a, 0xFF, kWords * 4));
        cudaCheck(cudaMemset(out_b, 0xFF, kWords * 4));
        cudaCheck(cudaGraphInstantiate(&e, g, cudaGraphInstantiateFlagUseNodePriority));
        cudaCheck(cudaGraphLaunch(e, 0));
        cudaCheck(cudaDeviceSynchronize());
        cudaCheck(cudaGraphExecDestroy(e));
        a->resize(kWords), b->resize(kWords);
        cudaCheck(cudaMemcpy(a->data(), out_a, kWords * 4, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(b->data(), out_b, kWords * 4, cudaMemcpyDeviceToHost));
    };
    cudaGraph_t with_memsets, converted;
    build(&with_memsets);
    build(&converted);
    const int replaced = graph_memsets_to_kernels(converted, 0, 60u << 10);
    std::vector<unsigned int> ref_a, ref_b, a, b;
    run(with_memsets, &ref_a, &ref_b);
    run(converted, &a, &b);
    // what the memsets wrote, independently of the GPU: the fill, then each memset's bytes
    std::vector<unsigned int> want(kWords);
    for (size_t i = 0; i < kWords; i++) want[i] = 0xA5A5A5A5u ^ (unsigned int)i;
    unsigned char* w = reinterpret_cast<unsigned char*>(want.data());
    for (size_t i = 0; i < 101; i++) w[13 + i] = 0x5A;
    for (size_t i = 0; i < 37; i++) w[100 + 2 * i] = 0xEF, w[100 + 2 * i + 1] = 0xBE;
    for (size_t i = 0; i < 64; i++) w[256 + i] = 0x3C;
    for (size_t i = 0; i < 16; i++) w[512 + 2 * i] = 0x34, w[512 + 2 * i + 1] = 0x12;
    for (size_t r = 0; r < 5; r++)
        for (size_t i = 0; i < 9; i++) memcpy(w + 8192 + r * 64 + 4 * i, "\x67\x45\x23\x01", 4);
    memset(w + 16384, 0, 4096 * 4 * 4);
    memset(w + 4, 0, 4);
    check_exact("graph memsets: the memset graph writes the expected bytes", ref_a == want && ref_b == want);
    check_exact("graph memsets: 6 replaced, the large one kept, the same number of edges",
                replaced == 6 && count_nodes(converted, cudaGraphNodeTypeMemset) == 1 &&
                    edge_count(converted) == edge_count(with_memsets));
    check_exact("graph memsets: as kernels, the same bytes (both readers)", a == want && b == want);
    cudaCheck(cudaGraphDestroy(with_memsets));
    cudaCheck(cudaGraphDestroy(converted));

    // a captured GEMM (forward with bias and its backward) at d12's shape: eager bits == converted graph's bits
    const int N = 16384, C = 768, OC = 2304;
    auto inp = random_vec((size_t)N * C, 1.0f), wt = random_vec((size_t)OC * C, 0.03f), bias = random_vec(OC, 0.5f);
    auto dout = random_vec((size_t)N * OC, 1.0f);
    floatX *d_inp = upload(inp), *d_w = upload(wt), *d_bias = upload(bias), *d_dout = upload(dout);
    floatX *d_out = poisoned((size_t)N * OC), *d_dinp = poisoned((size_t)N * C), *d_dw = upload(wt);
    floatX* d_db = upload(bias);
    float* d_scratch;
    cudaCheck(cudaMalloc(&d_scratch, column_sum_scratch_floats(N, OC) * 4));
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto gemms = [&] {
        matmul_forward(d_out, d_inp, d_w, d_bias, N, C, OC, nullptr, false, s);
        matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, d_scratch, nullptr, false, 0.5f, s);
    };
    auto reset = [&] {
        cudaCheck(cudaMemcpy(d_dw, d_w, (size_t)OC * C * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(d_db, d_bias, OC * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemset(d_out, 0xFF, (size_t)N * OC * sizeof(floatX)));
        cudaCheck(cudaMemset(d_dinp, 0xFF, (size_t)N * C * sizeof(floatX)));
    };
    auto bits = [&] {
        cudaCheck(cudaDeviceSynchronize());
        std::vector<floatX> v((size_t)N * OC + (size_t)N * C + (size_t)OC * C + OC);
        floatX* p = v.data();
        for (auto [d, n] : {std::pair<floatX*, size_t>{d_out, (size_t)N * OC}, {d_dinp, (size_t)N * C},
                            {d_dw, (size_t)OC * C}, {d_db, (size_t)OC}}) {
            cudaCheck(cudaMemcpy(p, d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
            p += n;
        }
        return v;
    };
    reset();
    gemms();  // the plans are made outside the capture
    reset();
    gemms();
    const std::vector<floatX> eager = bits();
    reset();
    cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    gemms();
    cudaGraph_t g;
    cudaCheck(cudaStreamEndCapture(s, &g));
    // what cuBLASLt's memsets write (its counters), poisoned before the replay: the kernels that replace the memsets
    // must write them again before each GEMM
    std::vector<cudaMemsetParams> targets;
    for (cudaGraphNode_t node : graph_memsets_detail::nodes_of(g)) {
        cudaGraphNodeType t;
        cudaCheck(cudaGraphNodeGetType(node, &t));
        if (t != cudaGraphNodeTypeMemset) continue;
        targets.emplace_back();
        cudaCheck(cudaGraphMemsetNodeGetParams(node, &targets.back()));
    }
    const int gemm_memsets = graph_memsets_to_kernels(g, 0);
    cudaGraphExec_t e;
    cudaCheck(cudaGraphInstantiate(&e, g, cudaGraphInstantiateFlagUseNodePriority));
    for (const cudaMemsetParams& m : targets)
        cudaCheck(cudaMemset2D(m.dst, m.height > 1 ? m.pitch : m.width * m.elementSize, 0xFF, m.width * m.elementSize,
                               m.height));
    cudaCheck(cudaGraphLaunch(e, s));
    const std::vector<floatX> replayed = bits();
    char tag[128];
    snprintf(tag, sizeof(tag), "graph memsets: GEMMs replayed (%d memsets as kernels)", gemm_memsets);
    check_exact(tag, count_nodes(g, cudaGraphNodeTypeMemset) == 0 &&
                         memcmp(eager.data(), replayed.data(), eager.size() * sizeof(floatX)) == 0);
    cudaCheck(cudaGraphExecDestroy(e));
    cudaCheck(cudaGraphDestroy(g));
    cudaCheck(cudaStreamDestroy(s));
    for (void* p : {(void*)buf, (void*)out_a, (void*)out_b, (void*)d_inp, (void*)d_w, (void*)d_bias, (void*)d_dout,
                    (void*)d_out, (void*)d_dinp, (void*)d_dw, (void*)d_db, (void*)d_scratch})
        cudaCheck(cudaFree(p));
}

int main(int argc, char** argv) {
    require_cuda_device(argv[0]);
    const uint64_t seed = argc > 1 ? strtoull(argv[1], nullptr, 10) : 1;
    rng.reseed(seed);
    printf("device: %s, precision %s, seed %llu\n", device_info().prop.name, PRECISION_NAME, (unsigned long long)seed);
    matmul_init();
    test_encoder(3, 37, 96, 301);
    test_encoder(4, 64, 768, 1000);
    test_layernorm(3 * 37, 96);
    test_layernorm(257, 768);
    test_layernorm(2048, 1600);  // d48 width: more shared memory than the default 48 KB, many partial rows
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
    if (kDecodeMatvecAvailable && kDecodeMmaAvailable) {  // BF16 builds (FP32 builds decode through cuBLASLt)
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
    } else {
        printf("decode products: skipped (BF16 builds only)\n");
    }
    test_classifier(3 * 37, 1000, 1024);
    test_classifier(8, 50257, 50304);
    test_classifier(5, 20001, 20096);  // 4 packs per thread
    test_classifier(3, 70001, 70016);  // longer than 8 packs per thread (bf16): chunks, re-read for the write pass
    test_global_norm(1000003);
    test_global_norm(8 * 99991);  // whole packs only
    test_adamw({1000, 37, 4099});
    test_adamw({1000, 36, 4100});
    test_adamw_kernels_agree();
    test_clip_scale();
    test_graph_memsets();
    printf("%s: %d of %d checks failed\n", failures ? "FAIL" : "PASS", failures, checks);
    return failures ? 1 : 0;
}
