// Generation's KV cache and decode step (issue 16), on top of the model of gpt2.cuh, in the build's precision
// (floatX: a bf16 cache in BF16 builds, fp32 in FP32 builds).
//
// Tested by tests/test_decode.cu (each decode step's logits against gpt2_forward's at the same position for the
// same prefix); generate_gpt2cu's path and train_gpt2cu's samples.
//
//   KVCache cache = kv_cache_allocate(m, B, max_T);
//   gpt2_forward(m, prompts padded with EOT, nullptr, B, Tp);    // the prefill, the trainer's forward
//   kv_cache_fill(m, &cache, Tp, prompt_lengths);                 // K, V of every layer into the cache
//   ... logits of position len-1 from the prefill; then per new token:
//   gpt2_decode_step(m, &cache, new_tokens);                      // one token per sequence; len += 1
//   gpt2_logits_to_host(m, b, 0, logits);
// or, replaying the step's kernels as one CUDA Graph (m->stream must be a created stream, not the legacy one):
//   DecodeGraph g;  gpt2_decode_step_graph(m, &cache, new_tokens, &g);  ...  decode_graph_free(&g);
// or with the whole loop on the GPU (what generate_gpt2cu and train_gpt2cu's samples run): each step's kernels end
// with the token picker (llmc/kernels/sampling.cuh: greedy or temperature/top-k/top-p with coins drawn up front), which
// feeds the next step's input, so the host only launches steps and reads tokens from mapped memory, steps ahead:
//   DecodeLoop loop = decode_loop_create(cache, pick, coins, max_new, /*graph=*/true);  // before the prefill
//   decode_loop_begin(m, &cache, &loop);  // after the prefill and kv_cache_fill: the first token
//   decode_loop_step(m, &cache, &loop);  ...  loop.tokens[g * B + b] once the step's work is done
//   decode_loop_free(&loop);
// The cache is (L, B, NH, max_T, HS) floatX for K and for V: one head's keys are contiguous, as decode attention
// (llmc/kernels/attention_decode.cuh) reads them. Positions at or past a sequence's length hold stale values that nothing
// reads (the prefill writes the padded positions too; decode overwrites them one by one). The decode step reuses
// the model's activation buffers (layer 0's slices, B rows), so it must not run between a forward and its backward.
#pragma once

#include <vector>

#include "llmc/kernels/attention_decode.cuh"
#include "llmc/kernels/decode_matvec.cuh"
#include "llmc/kernels/mma/decode_mma.cuh"
#include "llmc/model/gpt2_step.cuh"
#include "llmc/kernels/sampling.cuh"

// Batches up to kDecodeMatvecMaxB run the products as decode_matvec, up to kDecodeMmaMaxB as decode_mma (both BF16
// builds), larger ones (and FP32 builds) by cuBLASLt with LayerNorm kernels (attention_decode appends the new K
// and V to the cache there). decode_matvec against cuBLASLt per d12 step on an H200 (generate_gpt2cu, prompt 64,
// 256 new; tree 28f4da9, before PDL): B 1 0.408–0.420 vs 0.465 ms, B 2 0.441–0.469 vs 0.469, B 4 0.53–0.59 vs
// 0.47, B 8 0.72–0.87 vs 0.48: the fp32 FMAs of several rows cost more than the kernels they save. decode_mma
// against cuBLASLt (prompt 64, 128 new, H200, docs/PERFORMANCE.md): B 4 0.318 vs 0.437 ms, B 8 0.34–0.35 vs 0.458,
// B 16 0.396 vs 0.472, B 32 0.557 vs 0.495, B 64 0.79–0.88 vs 0.555: every block normalises and reads all of its
// rows, which costs more than it saves from 32 rows on.
constexpr int kDecodeMatvecMaxB = 2;
constexpr int kDecodeMmaMaxB = 16;

// How a decode step runs the layers' products (kv_cache_allocate chooses; tests force each).
enum class DecodeProducts {
    Matvec,  // decode_matvec: LayerNorms and the cache append fused in; the classifier too (with the greedy pick)
    Mma,     // decode_mma: the same fusions on the tensor cores; the classifier by cuBLASLt
    Cublas,  // cuBLASLt, with the LayerNorm kernels; attention_decode appends the new K and V
};

struct KVCache {
    int B = 0, max_T = 0, L = 0, NH = 0, HS = 0;
    floatX* k = nullptr;  // (L, B, NH, max_T, HS)
    floatX* v = nullptr;
    int* len = nullptr;          // device: tokens in the cache per sequence
    void* workspace = nullptr;   // decode attention's partials
    DecodeProducts products = DecodeProducts::Cublas;  // kv_cache_allocate sets it from B (tests force each)
    DecodeAttentionKernel attention = DecodeAttentionKernel::Auto;  // split or per head, by B·NH (tests force each)
    float* mma_partials = nullptr;  // decode_mma's split-K workspace and counters (BF16 builds)
    unsigned* mma_counters = nullptr;
    int matvec_rows = kDecodeMaxRows;  // rows per decode_matvec block (tests lower it)
    int matvec_classifier_groups = 1;  // the classifier as decode_matvec when the batch is at most this many row
                                       // groups (it reads its 77 MB once per group; tests raise it), else cuBLASLt
    std::vector<int> host_len;
    size_t layer_elements() const { return (size_t)B * NH * max_T * HS; }
};

namespace gpt2_decode_detail {

// x (b, :) = wte (token[b], :) + wpe (len[b]-1, :), the new token at its position.
__global__ void embed_kernel(floatX* __restrict__ x, const int* __restrict__ tokens, const int* __restrict__ len,
                             const floatX* __restrict__ wte, const floatX* __restrict__ wpe, int B, int C) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * C) return;
    const int b = idx / C, c = idx % C;
    x[idx] = from_float<floatX>(to_float(wte[(size_t)tokens[b] * C + c]) + to_float(wpe[(size_t)(len[b] - 1) * C + c]));
}

}  // namespace gpt2_decode_detail

// The cached path needs head sizes decode attention handles (64 or 128: every GPT-2 size).
inline bool kv_cache_supported(const GPT2Config& c) {
    const int HS = c.channels / c.num_heads;
    return c.channels % c.num_heads == 0 && (HS == 64 || HS == 128);
}

inline KVCache kv_cache_allocate(GPT2* m, int B, int max_T) {
    const GPT2Config& c = m->config;
    KVCache cache;
    cache.B = B;
    cache.max_T = max_T;
    cache.L = c.num_layers;
    cache.NH = c.num_heads;
    cache.HS = c.channels / c.num_heads;
    if (B > m->B || max_T > c.max_seq_len || (cache.HS != 64 && cache.HS != 128)) {
        fprintf(stderr, "error: kv_cache_allocate: B %d (model allocated for %d), max_T %d (context %d), HS %d (64 or 128)\n",
                B, m->B, max_T, c.max_seq_len, cache.HS);
        exit(EXIT_FAILURE);
    }
    const size_t bytes = cache.layer_elements() * cache.L * sizeof(floatX);
    cudaCheck(cudaMalloc(&cache.k, bytes));
    cudaCheck(cudaMalloc(&cache.v, bytes));
    cudaCheck(cudaMalloc(&cache.len, B * sizeof(int)));
    cudaCheck(cudaMalloc(&cache.workspace, attention_decode_workspace_bytes(B, cache.NH, max_T, cache.HS)));
    cudaCheck(attention_decode_workspace_init(cache.workspace, B, cache.NH, max_T, cache.HS, m->stream));
    cache.host_len.assign(B, 0);
    cache.products = kDecodeMatvecAvailable && B <= kDecodeMatvecMaxB ? DecodeProducts::Matvec
                     : kDecodeMmaAvailable && B <= kDecodeMmaMaxB     ? DecodeProducts::Mma
                                                                      : DecodeProducts::Cublas;
    if (kDecodeMmaAvailable) {  // the largest workspace of the layers' four products (tests force Mma at any B)
        const int C = c.channels;
        const bool ln = decode_mma_fuses_layernorm(B, C);
        const size_t partials = std::max({decode_mma_partials(B, 3 * C, C, ln), decode_mma_partials(B, C, C, false),
                                          decode_mma_partials(B, 4 * C, C, ln), decode_mma_partials(B, C, 4 * C, false)});
        const size_t counters = decode_mma_counters(B, 4 * C);
        cudaCheck(cudaMalloc(&cache.mma_partials, std::max<size_t>(partials, 1) * sizeof(float)));
        cudaCheck(cudaMalloc(&cache.mma_counters, counters * sizeof(unsigned)));
        cudaCheck(cudaMemset(cache.mma_counters, 0, counters * sizeof(unsigned)));
    }
    return cache;
}

inline void kv_cache_free(KVCache* cache) {
    cudaCheck(cudaFree(cache->k));
    cudaCheck(cudaFree(cache->v));
    cudaCheck(cudaFree(cache->len));
    cudaCheck(cudaFree(cache->workspace));
    cudaCheck(cudaFree(cache->mma_partials));
    cudaCheck(cudaFree(cache->mma_counters));
    *cache = KVCache{};
}

// After gpt2_forward(m, tokens, nullptr, B, T): every layer's K and V of positions 0..T-1 into the cache; the
// sequences' lengths are `lengths` (each <= T: the prompt, without its padding).
inline void kv_cache_fill(GPT2* m, KVCache* cache, int T, const std::vector<int>& lengths) {
    using namespace gpt2_detail;
    const int C = cache->NH * cache->HS, B = cache->B;
    const size_t ld = (size_t)m->B * m->T;  // the forward's per-layer stride (allocated size)
    for (int l = 0; l < cache->L; l++) {
        const floatX* qkv = buf<floatX>(m, mem::Qkv) + l * ld * 3 * C;
        cudaCheck(decode_attention::copy_kv(cache->k + l * cache->layer_elements(), cache->v + l * cache->layer_elements(),
                                            qkv + C, (size_t)3 * C, nullptr, B, T, cache->NH, cache->HS, cache->max_T,
                                            m->stream));
    }
    cache->host_len = lengths;
    cudaCheck(cudaMemcpyAsync(cache->len, lengths.data(), B * sizeof(int), cudaMemcpyHostToDevice, m->stream));
}

// The host half of a decode step: checks the new tokens (B host ids), advances the lengths, and uploads both.
inline void decode_upload(GPT2* m, KVCache* cache, const std::vector<int>& tokens) {
    using namespace gpt2_detail;
    const GPT2Config& c = m->config;
    const int B = cache->B;
    for (int b = 0; b < B; b++) {
        if (tokens[b] < 0 || tokens[b] >= c.vocab_size || cache->host_len[b] >= cache->max_T) {
            fprintf(stderr, "error: gpt2_decode_step: token %d of sequence %d (V %d), or the cache is full (%d of %d)\n",
                    tokens[b], b, c.vocab_size, cache->host_len[b], cache->max_T);
            exit(EXIT_FAILURE);
        }
        cache->host_len[b]++;
    }
    cudaCheck(cudaMemcpyAsync(buf<int>(m, mem::Inputs), tokens.data(), B * sizeof(int), cudaMemcpyHostToDevice,
                              m->stream));
    // from pageable memory: each copy is staged before the call returns, so the vectors may change afterwards
    cudaCheck(cudaMemcpyAsync(cache->len, cache->host_len.data(), B * sizeof(int), cudaMemcpyHostToDevice, m->stream));
}

// The device half: every kernel of one decode step, reading the tokens and lengths decode_upload left on the
// device; fixed pointers and shapes, so it can be captured once and replayed. pick (the loop's, when greedy): folded
// into the classifier where that runs as decode_matvec; returns whether it was (else the caller picks).
inline bool decode_forward(GPT2* m, KVCache* cache, const DecodeGreedyPick* pick = nullptr) {
    using namespace gpt2_detail;
    const GPT2Config& c = m->config;
    const int B = cache->B, C = c.channels, NH = c.num_heads, HS = C / NH, L = c.num_layers, Vp = c.padded_vocab_size;
    cudaStream_t s = m->stream;
    floatX* x = buf<floatX>(m, mem::Encoded);
    floatX* ln = buf<floatX>(m, mem::Ln1);
    floatX* qkv = buf<floatX>(m, mem::Qkv);
    floatX* atty = buf<floatX>(m, mem::Atty);
    floatX* residual2 = buf<floatX>(m, mem::Residual2);
    floatX* residual3 = buf<floatX>(m, mem::Residual3);
    floatX* fch = buf<floatX>(m, mem::Fch);
    floatX* fch_gelu = buf<floatX>(m, mem::FchGelu);
    floatX* scratch = buf<floatX>(m, mem::ScratchBTC);
    float* mean = buf<float>(m, mem::Ln1Mean);
    float* rstd = buf<float>(m, mem::Ln1Rstd);
    gpt2_decode_detail::embed_kernel<<<(B * C + 255) / 256, 256, 0, s>>>(x, buf<int>(m, mem::Inputs), cache->len,
                                                                         m->params(WTE), m->params(WPE), B, C);
    cudaCheckLaunch();
    if (cache->products != DecodeProducts::Cublas) {  // per layer: 4 products + decode attention
        // each product and attention kernel starts while the kernel before it ends (see decode_matvec)
        auto product = [&](DecodeMatvec a) {
            a.B = B, a.rows = cache->matvec_rows, a.pdl = true;
            if (cache->products == DecodeProducts::Matvec) return decode_matvec(a, s);
            if (a.ln_w && !decode_mma_fuses_layernorm(B, a.K)) {  // rows too wide for one block: LayerNorm first
                layernorm_forward(ln, mean, rstd, a.in, a.ln_w, a.ln_b, B, a.K, s, /*pdl=*/true);
                a.in = ln, a.ln_w = a.ln_b = nullptr;
            }
            a.partials = cache->mma_partials, a.counters = cache->mma_counters;
            decode_mma(a, s);
        };
        const floatX* residual = x;
        for (int l = 0; l < L; l++) {
            floatX* k_cache = cache->k + l * cache->layer_elements();
            floatX* v_cache = cache->v + l * cache->layer_elements();
            DecodeMatvec qkv_mv{qkv, residual, m->params(LN1W, l), m->params(LN1B, l), m->params(QKVW, l), m->params(QKVB, l)};
            qkv_mv.k_cache = k_cache, qkv_mv.v_cache = v_cache, qkv_mv.len = cache->len;
            qkv_mv.NH = NH, qkv_mv.HS = HS, qkv_mv.max_T = cache->max_T, qkv_mv.N = 3 * C, qkv_mv.K = C;
            product(qkv_mv);
            cudaCheck(attention_decode(atty, qkv, k_cache, v_cache, cache->len, B, NH, cache->max_T, HS,
                                       cache->workspace, s, (size_t)3 * C, /*pdl=*/true,
                                       /*new_kv=*/(const floatX*)nullptr, cache->attention));  // appended already
            DecodeMatvec proj{residual2, atty, nullptr, nullptr, m->params(ATTPROJW, l), m->params(ATTPROJB, l), residual};
            proj.N = C, proj.K = C;
            product(proj);
            DecodeMatvec fc{fch_gelu, residual2, m->params(LN2W, l), m->params(LN2B, l), m->params(FCW, l), m->params(FCB, l)};
            fc.gelu = true, fc.N = 4 * C, fc.K = C;
            product(fc);
            DecodeMatvec fcproj{residual3, fch_gelu, nullptr, nullptr, m->params(FCPROJW, l), m->params(FCPROJB, l), residual2};
            fcproj.N = C, fcproj.K = 4 * C;
            product(fcproj);
            residual = residual3;
        }
        if (cache->products == DecodeProducts::Matvec && B <= cache->matvec_rows * cache->matvec_classifier_groups) {
            DecodeMatvec logits{buf<floatX>(m, mem::Logits), residual, m->params(LNFW), m->params(LNFB), m->params(WTE)};
            logits.B = B, logits.N = Vp, logits.K = C, logits.rows = cache->matvec_rows;
            logits.pdl = true;
            if (pick) logits.pick = *pick;
            decode_matvec(logits, s);
            return pick != nullptr;
        }
        layernorm_forward(buf<floatX>(m, mem::Lnf), mean, rstd, residual, m->params(LNFW), m->params(LNFB), B, C, s,
                          /*pdl=*/true);
        matmul_forward(buf<floatX>(m, mem::Logits), buf<floatX>(m, mem::Lnf), m->params(WTE), nullptr, B, C, Vp,
                       nullptr, false, s);
        return false;
    }
    // Our kernels here are launched as programmatic dependents (PDL): each starts while the kernel before it
    // (often a cuBLASLt product) ends, and waits for its output inside.
    layernorm_forward(ln, mean, rstd, x, m->params(LN1W), m->params(LN1B), B, C, s, /*pdl=*/true);
    const floatX* residual = x;
    for (int l = 0; l < L; l++) {
        matmul_forward(qkv, ln, m->params(QKVW, l), m->params(QKVB, l), B, C, 3 * C, nullptr, false, s);
        floatX* k_cache = cache->k + l * cache->layer_elements();
        floatX* v_cache = cache->v + l * cache->layer_elements();
        // the new token's K and V go from the QKV row into the cache inside attention_decode
        cudaCheck(attention_decode(atty, qkv, k_cache, v_cache, cache->len, B, NH, cache->max_T, HS, cache->workspace,
                                   s, (size_t)3 * C, /*pdl=*/true, (const floatX*)qkv + C, cache->attention));
        matmul_forward(scratch, atty, m->params(ATTPROJW, l), m->params(ATTPROJB, l), B, C, C, nullptr, false, s);
        fused_residual_layernorm_forward(residual2, ln, mean, rstd, residual, scratch, m->params(LN2W, l),
                                         m->params(LN2B, l), B, C, s, /*pdl=*/true);
        matmul_forward(fch_gelu, ln, m->params(FCW, l), m->params(FCB, l), B, C, 4 * C, fch, m->fuse_gelu, s);
        matmul_forward(scratch, fch_gelu, m->params(FCPROJW, l), m->params(FCPROJB, l), B, 4 * C, C, nullptr, false, s);
        const bool last = l + 1 == L;
        floatX* next_ln = last ? buf<floatX>(m, mem::Lnf) : ln;
        fused_residual_layernorm_forward(residual3, next_ln, mean, rstd, residual2, scratch,
                                         last ? m->params(LNFW) : m->params(LN1W, l + 1),
                                         last ? m->params(LNFB) : m->params(LN1B, l + 1), B, C, s, /*pdl=*/true);
        residual = residual3;  // the next layer reads it for its residual2, then overwrites it with its residual3
    }
    matmul_forward(buf<floatX>(m, mem::Logits), buf<floatX>(m, mem::Lnf), m->params(WTE), nullptr, B, C, Vp, nullptr,
                   false, s);
    return false;
}

inline void decode_mark_logits(GPT2* m, int B) {
    m->last_B = B;
    m->last_T = 1;
    m->logits_valid = true;
    m->dlogits_ready = false;
}

// One new token per sequence (tokens: B host ids), appended at position len[b]; the logits of that position end in
// the model's logits buffer (read with gpt2_logits_to_host(m, b, 0, ...)).
inline void gpt2_decode_step(GPT2* m, KVCache* cache, const std::vector<int>& tokens) {
    decode_upload(m, cache, tokens);
    decode_forward(m, cache);
    decode_mark_logits(m, cache->B);
}

// The same step with its kernels captured as a CUDA Graph on the first call and replayed after: about 100 launches
// per step at d12 become one. The first call runs the kernels plainly first (cuBLASLt picks and caches its plans
// outside the capture).
struct DecodeGraph {
    cudaGraphExec_t exec = nullptr;
    bool warm = false;
};
// body() plainly on the first call, captured on the second, replayed from then on.
template <typename Body>
inline void run_as_graph(GPT2* m, DecodeGraph* g, Body&& body) {
    if (!g->warm) {
        body();
        g->warm = true;
        return;
    }
    if (!g->exec) {
        if (m->stream == 0) {
            fprintf(stderr, "error: decode step as a CUDA Graph: the model's stream is the legacy default stream\n");
            exit(EXIT_FAILURE);
        }
        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(m->stream, cudaStreamCaptureModeThreadLocal));
        body();
        cudaCheck(cudaStreamEndCapture(m->stream, &graph));
        cudaCheck(cudaGraphInstantiate(&g->exec, graph, 0));
        cudaCheck(cudaGraphDestroy(graph));
    }
    cudaCheck(cudaGraphLaunch(g->exec, m->stream));
}
inline void gpt2_decode_step_graph(GPT2* m, KVCache* cache, const std::vector<int>& tokens, DecodeGraph* g) {
    decode_upload(m, cache, tokens);
    run_as_graph(m, g, [&] { decode_forward(m, cache); });
    decode_mark_logits(m, cache->B);
}
inline void decode_graph_free(DecodeGraph* g) {
    if (g->exec) cudaCheck(cudaGraphExecDestroy(g->exec));
    *g = DecodeGraph{};
}

// ---- the loop on the GPU
struct DecodeLoop {
    int B = 0, max_new = 0;
    bool graph = false;
    PickParams pick;
    float* coins = nullptr;     // device (max_new, B)
    int* prompt_len = nullptr;  // device (B)
    int* tokens = nullptr;      // host, mapped (max_new, B): tokens[g * B + b] = sequence b's g-th new token
    int* tokens_device = nullptr;
    DecodeGraph step_graph;
    // greedy: the pick folded into the classifier (DecodeGreedyPick) where it runs as decode_matvec
    unsigned long long* pick_partials = nullptr;
    unsigned* pick_count = nullptr;
};

// Allocations and the coins, before the timed work: coins (max_new, B), sequence b's g-th coin at [g * B + b]
// (unused when greedy: may be empty). graph: steps replayed as a CUDA Graph (m->stream a created stream).
inline DecodeLoop decode_loop_create(const KVCache& cache, const PickParams& pick, const std::vector<float>& coins,
                                     int max_new, bool graph) {
    const int B = cache.B;
    if (max_new < 1 || (!pick.greedy() && coins.size() != (size_t)max_new * B)) {
        fprintf(stderr, "error: decode_loop_create: max_new >= 1 (%d), and %d coins when sampling (%zu)\n", max_new,
                max_new * B, coins.size());
        exit(EXIT_FAILURE);
    }
    DecodeLoop loop;
    loop.B = B, loop.max_new = max_new, loop.graph = graph, loop.pick = pick;
    cudaCheck(cudaMalloc(&loop.coins, (size_t)max_new * B * sizeof(float)));
    if (!coins.empty())
        cudaCheck(cudaMemcpy(loop.coins, coins.data(), coins.size() * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMalloc(&loop.prompt_len, B * sizeof(int)));
    cudaCheck(cudaHostAlloc(&loop.tokens, (size_t)max_new * B * sizeof(int), cudaHostAllocMapped));
    cudaCheck(cudaHostGetDevicePointer(&loop.tokens_device, loop.tokens, 0));
    for (size_t i = 0; i < (size_t)max_new * B; i++) loop.tokens[i] = -1;
    if (pick.greedy() && kDecodeMatvecAvailable) {
        cudaCheck(cudaMalloc(&loop.pick_partials, decode_greedy_pick_partials(B) * sizeof(unsigned long long)));
        cudaCheck(cudaMalloc(&loop.pick_count, B * sizeof(unsigned)));  // one per row group: at most B
        cudaCheck(cudaMemset(loop.pick_count, 0, B * sizeof(unsigned)));
    }
    return loop;
}

// After the prefill (gpt2_forward over B x Tp) and kv_cache_fill: picks every sequence's first new token from the
// prefill's logits at its last prompt position.
inline void decode_loop_begin(GPT2* m, KVCache* cache, DecodeLoop* loop) {
    using namespace gpt2_detail;
    const GPT2Config& c = m->config;
    const int B = cache->B;
    if (!m->logits_valid || m->last_B != B || loop->B != B) {
        fprintf(stderr, "error: decode_loop_begin: needs the prefill's logits for the loop's %d sequences\n", loop->B);
        exit(EXIT_FAILURE);
    }
    cudaCheck(cudaMemcpyAsync(loop->prompt_len, cache->host_len.data(), B * sizeof(int), cudaMemcpyHostToDevice,
                              m->stream));
    pick_tokens(buf<floatX>(m, mem::Logits), c.padded_vocab_size, m->last_T, B, c.vocab_size, loop->pick,
                loop->coins, loop->prompt_len, cache->len, buf<int>(m, mem::Inputs), loop->tokens_device,
                loop->max_new, m->stream);
    for (int& n : cache->host_len) n++;
}

// One decode step for every sequence, its input the token the last pick chose; ends with the next pick.
inline void decode_loop_step(GPT2* m, KVCache* cache, DecodeLoop* loop) {
    using namespace gpt2_detail;
    const GPT2Config& c = m->config;
    for (int b = 0; b < cache->B; b++) {
        if (cache->host_len[b] > cache->max_T) {
            fprintf(stderr, "error: decode_loop_step: sequence %d would hold %d tokens, the cache %d\n", b,
                    cache->host_len[b], cache->max_T);
            exit(EXIT_FAILURE);
        }
        cache->host_len[b]++;
    }
    DecodeGreedyPick fused{loop->pick_partials, loop->pick_count, c.vocab_size, loop->prompt_len, cache->len,
                           buf<int>(m, mem::Inputs), loop->tokens_device, loop->max_new, cache->B};
    auto body = [&] {
        if (decode_forward(m, cache, loop->pick_partials ? &fused : nullptr)) return;
        pick_tokens(buf<floatX>(m, mem::Logits), c.padded_vocab_size, 1, cache->B, c.vocab_size, loop->pick,
                    loop->coins, loop->prompt_len, cache->len, buf<int>(m, mem::Inputs), loop->tokens_device,
                    loop->max_new, m->stream, /*pdl=*/true);
    };
    if (loop->graph) run_as_graph(m, &loop->step_graph, body);
    else body();
    decode_mark_logits(m, cache->B);
}

inline void decode_loop_free(DecodeLoop* loop) {
    decode_graph_free(&loop->step_graph);
    cudaCheck(cudaFree(loop->pick_partials));
    cudaCheck(cudaFree(loop->pick_count));
    cudaCheck(cudaFree(loop->coins));
    cudaCheck(cudaFree(loop->prompt_len));
    cudaCheck(cudaFreeHost(loop->tokens));
    *loop = DecodeLoop{};
}

