// GPU test of the token picker (llmc/kernels/sampling/sampling.cuh) against the host sampler (llmc/inference/sampler.h), which is the rule:
// for bf16 and fp32 logits, GPT-2's vocabulary (50257 in rows of 50304) and a small one (1000 in 1024), rows of
// random logits and rows of a few repeated values (many ties), greedy, temperature, top-k, top-p and both, each
// with 64 fresh coins per row. The GPU's token must equal the host's for the same coin, or — fp32 sums against the
// host's double — lie between the host's tokens for the coin moved by 1e-5 either way (the CDF runs in id order:
// a coin on a CDF boundary); such boundary cases must stay rare (<= 1%). Greedy must be exact (lowest id among equal maxima). The whole run twice
// gives identical tokens. Outputs start poisoned (-1); len must advance by one and next_tokens equal the output.
// The server's per-row picker (each row its own rule and coin) likewise, with its non-finite flags.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/inference/sampler.h"
#include "llmc/kernels/sampling/sampling.cuh"

namespace {

int failures = 0;
long long picks = 0, boundary = 0;   // pick_tokens' (every run twice)
long long row_picks = 0, row_boundary = 0;  // pick_tokens_per_row's (once)

template <typename T> T to_t(float x);
template <> float to_t<float>(float x) { return x; }
template <> __nv_bfloat16 to_t<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <typename T> float from_t(T x);
template <> float from_t<float>(float x) { return x; }
template <> float from_t<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

// Whether the GPU's token for this row, rule and coin is the host sampler's, or (sampling only) lies between the
// host's tokens for the coin moved by 1e-5 either way (the CDF runs in id order: a coin on a boundary; *on_boundary).
bool host_agrees(const std::vector<float>& row, int V, const PickParams& p, float coin, int got, bool* on_boundary) {
    *on_boundary = false;
    if (got == sample_token(row.data(), V, p.temperature, p.top_k, p.top_p, coin)) return true;
    if (p.greedy()) return false;
    const int lo = sample_token(row.data(), V, p.temperature, p.top_k, p.top_p, std::max(0.f, coin - 1e-5f));
    const int hi = sample_token(row.data(), V, p.temperature, p.top_k, p.top_p, std::min(0.99999994f, coin + 1e-5f));
    return *on_boundary = lo <= got && got <= hi;
}

// Runs every configuration on `rows` rows of V logits (stride Vp); returns the GPU's tokens in order.
template <typename T>
std::vector<int> run(const char* name, int V, int Vp, bool ties, uint64_t seed) {
    const int R = 4, coins_per_row = 64;
    Rng rng(seed);
    std::vector<T> logits((size_t)R * Vp, to_t<T>(0.f));
    std::vector<std::vector<float>> host(R, std::vector<float>(V));
    for (int r = 0; r < R; r++)
        for (int i = 0; i < V; i++) {
            const float x = ties ? (float)(int)(rng.uniform() * 6) : 3.f * rng.normal();
            logits[(size_t)r * Vp + i] = to_t<T>(x);
            host[r][i] = from_t<T>(logits[(size_t)r * Vp + i]);
        }
    T* d_logits;
    float* d_coins;
    int *d_prompt, *d_len, *d_next, *d_out;
    cudaCheck(cudaMalloc(&d_logits, logits.size() * sizeof(T)));
    cudaCheck(cudaMemcpy(d_logits, logits.data(), logits.size() * sizeof(T), cudaMemcpyHostToDevice));
    cudaCheck(cudaMalloc(&d_coins, (size_t)coins_per_row * R * sizeof(float)));
    cudaCheck(cudaMalloc(&d_prompt, R * sizeof(int)));
    cudaCheck(cudaMalloc(&d_len, R * sizeof(int)));
    cudaCheck(cudaMalloc(&d_next, R * sizeof(int)));
    cudaCheck(cudaMalloc(&d_out, (size_t)coins_per_row * R * sizeof(int)));
    cudaCheck(cudaMemset(d_prompt, 0, R * sizeof(int)));

    struct Config { float temperature; int top_k; float top_p; };
    const std::vector<Config> configs = {{0.f, 0, 1.f},  {1.f, 1, 1.f},   {1.f, 0, 1.f},   {0.7f, 40, 1.f},
                                         {1.f, 0, 0.9f}, {0.8f, 50, 0.95f}, {1.3f, V - 1, 0.5f}, {1.f, 3, 1.f},
                                         {0.5f, 0, 0.3f}, {1.f, V, 1.f}};
    std::vector<int> all;
    for (const Config& cf : configs) {
        PickParams p;
        p.temperature = cf.temperature, p.top_k = cf.top_k, p.top_p = cf.top_p;
        std::vector<float> coins((size_t)coins_per_row * R);
        for (float& x : coins) x = (float)rng.uniform();
        cudaCheck(cudaMemcpy(d_coins, coins.data(), coins.size() * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemset(d_out, 0xff, (size_t)coins_per_row * R * sizeof(int)));  // poison: -1
        for (int g = 0; g < coins_per_row; g++) {  // len = g: the g-th coin of each row
            const std::vector<int> len(R, g);
            cudaCheck(cudaMemcpy(d_len, len.data(), R * sizeof(int), cudaMemcpyHostToDevice));
            pick_tokens<T>(d_logits, Vp, 1, R, V, p, d_coins, d_prompt, d_len, d_next, d_out, coins_per_row, 0);
            std::vector<int> len_after(R), next(R);
            cudaCheck(cudaMemcpy(len_after.data(), d_len, R * sizeof(int), cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(next.data(), d_next, R * sizeof(int), cudaMemcpyDeviceToHost));
            std::vector<int> out(R);
            cudaCheck(cudaMemcpy(out.data(), d_out + (size_t)g * R, R * sizeof(int), cudaMemcpyDeviceToHost));
            for (int r = 0; r < R; r++) {
                const float coin = coins[(size_t)g * R + r];
                picks++;
                all.push_back(out[r]);
                bool on_boundary = false;
                const bool ok = next[r] == out[r] && len_after[r] == g + 1 &&
                                host_agrees(host[r], V, p, coin, out[r], &on_boundary);
                boundary += on_boundary;
                if (!ok) {
                    if (failures < 12)
                        printf("FAIL %s T=%.1f k=%d p=%.2f row %d coin %.7f: GPU %d (next %d, len %d), host %d\n", name,
                               cf.temperature, cf.top_k, cf.top_p, r, coin, out[r], next[r], len_after[r],
                               sample_token(host[r].data(), V, cf.temperature, cf.top_k, cf.top_p, coin));
                    failures++;
                }
            }
        }
    }
    cudaCheck(cudaFree(d_logits));
    cudaCheck(cudaFree(d_coins));
    cudaCheck(cudaFree(d_prompt));
    cudaCheck(cudaFree(d_len));
    cudaCheck(cudaFree(d_next));
    cudaCheck(cudaFree(d_out));
    return all;
}

// The server's picker (pick_tokens_per_row): every row its own rule and coin, one launch per round; each row's token
// against the host's with that row's rule and coin (the same boundary allowance), and the non-finite flag: row 3
// holds a NaN and row 5 an inf (flagged, whatever their picks), the others none (0, over a poisoned start). The next
// step's inputs (over -1s) are the picks, a valid id on the flagged rows; the bookkeeping scratch starts as garbage;
// odd rounds write the results into mapped host memory, as the server's step does, launched as PDL dependents.
template <typename T>
void check_per_row(const char* name, int V, int Vp, uint64_t seed) {
    const long long f0 = failures;
    const int R = 10, rounds = 32;
    const PickParams rules[R] = {{0.f, 0, 1.f},   {1.f, 0, 1.f},  {0.7f, 40, 1.f},   {1.f, 0, 0.9f}, {0.8f, 50, 0.95f},
                                 {1.f, 1, 1.f},   {1.3f, 3, 1.f}, {0.5f, 0, 0.3f}, {1.f, V, 1.f},  {0.9f, 0, 1.f}};
    Rng rng(seed);
    std::vector<T> logits((size_t)R * Vp, to_t<T>(0.f));
    std::vector<std::vector<float>> host(R, std::vector<float>(V));
    for (int r = 0; r < R; r++)
        for (int i = 0; i < V; i++) {
            logits[(size_t)r * Vp + i] = to_t<T>(3.f * rng.normal());
            host[r][i] = from_t<T>(logits[(size_t)r * Vp + i]);
        }
    logits[(size_t)3 * Vp + V / 2] = to_t<T>(NAN);
    logits[(size_t)5 * Vp + 7] = to_t<T>(INFINITY);
    T* d_logits;
    PickParams* d_rules;
    float* d_coins;
    int *d_result, *d_scratch;
    cudaCheck(cudaMalloc(&d_logits, logits.size() * sizeof(T)));
    cudaCheck(cudaMemcpy(d_logits, logits.data(), logits.size() * sizeof(T), cudaMemcpyHostToDevice));
    cudaCheck(cudaMalloc(&d_rules, R * sizeof(PickParams)));
    cudaCheck(cudaMemcpy(d_rules, rules, R * sizeof(PickParams), cudaMemcpyHostToDevice));
    cudaCheck(cudaMalloc(&d_coins, R * sizeof(float)));
    cudaCheck(cudaMalloc(&d_result, 2 * R * sizeof(int)));
    cudaCheck(cudaMalloc(&d_scratch, R * sizeof(int)));
    cudaCheck(cudaMemset(d_scratch, 0x55, R * sizeof(int)));
    int *d_next, *h_result, *h_result_mapped;
    cudaCheck(cudaMalloc(&d_next, R * sizeof(int)));
    cudaCheck(cudaMallocHost(&h_result, 2 * R * sizeof(int)));
    cudaCheck(cudaHostGetDevicePointer((void**)&h_result_mapped, h_result, 0));
    for (int round = 0; round < rounds; round++) {
        const bool mapped = round % 2 == 1;
        std::vector<float> coins(R);
        for (float& x : coins) x = (float)rng.uniform();
        cudaCheck(cudaMemcpy(d_coins, coins.data(), R * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemset(d_result, 0x7f, 2 * R * sizeof(int)));  // poison
        std::fill(h_result, h_result + 2 * R, 0x7f7f7f7f);
        cudaCheck(cudaMemset(d_next, 0xff, R * sizeof(int)));
        int* out = mapped ? h_result_mapped : d_result;
        pick_tokens_per_row<T>(d_logits, Vp, R, V, d_rules, true, d_coins, out, out + R, d_scratch, 0, d_next,
                               /*pdl=*/mapped);
        std::vector<int> result(2 * R), next(R);
        cudaCheck(cudaDeviceSynchronize());
        if (mapped) std::copy(h_result, h_result + 2 * R, result.begin());
        else cudaCheck(cudaMemcpy(result.data(), d_result, 2 * R * sizeof(int), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(next.data(), d_next, R * sizeof(int), cudaMemcpyDeviceToHost));
        for (int r = 0; r < R; r++) {
            const bool bad_row = r == 3 || r == 5;
            if (next[r] < 0 || next[r] >= V || (!bad_row && next[r] != result[r])) {
                if (failures < 12) printf("FAIL %s per row: row %d next input %d, pick %d\n", name, r, next[r], result[r]);
                failures++;
            }
            if (result[R + r] != (bad_row ? 1 : 0)) {
                if (failures < 12) printf("FAIL %s per row: row %d non-finite flag %d\n", name, r, result[R + r]);
                failures++;
            }
            if (bad_row) continue;
            const PickParams& p = rules[r];
            const int got = result[r];
            row_picks++;
            bool on_boundary = false;
            const bool ok = host_agrees(host[r], V, p, coins[r], got, &on_boundary);
            row_boundary += on_boundary;
            if (!ok) {
                if (failures < 12)
                    printf("FAIL %s per row: row %d T=%.1f k=%d p=%.2f coin %.7f: GPU %d, host %d\n", name, r,
                           p.temperature, p.top_k, p.top_p, coins[r], got,
                           sample_token(host[r].data(), V, p.temperature, p.top_k, p.top_p, coins[r]));
                failures++;
            }
        }
    }
    cudaCheck(cudaFree(d_logits));
    cudaCheck(cudaFree(d_rules));
    cudaCheck(cudaFree(d_coins));
    cudaCheck(cudaFree(d_result));
    cudaCheck(cudaFree(d_scratch));
    cudaCheck(cudaFree(d_next));
    cudaCheck(cudaFreeHost(h_result));
    printf("%-5s V %5d per row: %d rows x %d rounds, %s\n", name, V, R, rounds, failures == f0 ? "OK" : "FAIL");
}

template <typename T>
void check(const char* name, int V, int Vp, bool ties, uint64_t seed) {
    const long long f0 = failures;
    const std::vector<int> first = run<T>(name, V, Vp, ties, seed);
    const std::vector<int> second = run<T>(name, V, Vp, ties, seed);
    if (first != second) {
        printf("FAIL %s V %d: two runs with the same coins differ\n", name, V);
        failures++;
    }
    printf("%-5s V %5d %-6s: %zu picks, %s\n", name, V, ties ? "ties" : "random", first.size(),
           failures == f0 ? "OK" : "FAIL");
}

}  // namespace

int main() {
    require_cuda_device("test_sampling");
    check<__nv_bfloat16>("bf16", 50257, 50304, false, 1);
    check<__nv_bfloat16>("bf16", 50257, 50304, true, 2);
    check<__nv_bfloat16>("bf16", 1000, 1024, false, 3);
    check<__nv_bfloat16>("bf16", 1000, 1024, true, 4);
    check<float>("fp32", 50257, 50304, false, 5);
    check<float>("fp32", 1000, 1024, true, 6);
    check_per_row<__nv_bfloat16>("bf16", 50257, 50304, 7);
    check_per_row<float>("fp32", 1000, 1024, 8);
    const bool rare = boundary * 100 <= picks && row_boundary * 100 <= row_picks;
    printf("test_sampling: %lld picks (each run twice, identical), %lld on a CDF boundary (<= 1%%); per row %lld picks, "
           "%lld on a boundary; %d failures: %s\n",
           picks / 2, boundary / 2, row_picks, row_boundary, failures, failures == 0 && rare ? "PASS" : "FAIL");
    return failures == 0 && rare ? 0 : 1;
}
