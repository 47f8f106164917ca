// Generation's decode step: one new token per sequence (embedding at its position, per layer the cache append and
// decode attention over the KV cache, the classifier on that position only), on the engine's own B-row scratch.
// Fixed pointers and shapes, so it is captured once as a CUDA Graph and replayed (run_as_graph,
// llmc/core/captured_graph.cuh: about 100 launches per step at d12 become one).
#pragma once

#include <algorithm>

#include "llmc/core/captured_graph.cuh"
#include "llmc/inference/kv_cache.cuh"
#include "llmc/inference/persistent_step.cuh"
#include "llmc/kernels/attention/attention_decode.cuh"
#include "llmc/kernels/decode/decode_matvec.cuh"
#include "llmc/kernels/decode/decode_mma.cuh"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/matmul/matmul.cuh"
#include "llmc/model/gpt2_params.cuh"

// Batches up to kDecodeMatvecMaxB run the products as decode_matvec, up to kDecodeMmaMaxB as decode_mma (both BF16
// builds), larger ones (and FP32 builds) by cuBLASLt with LayerNorm kernels: where each stops paying, the fp32 FMAs
// of more rows (decode_matvec) or every block normalising all its rows (decode_mma) cost more than the launches
// they save (the crossovers are in docs/PERFORMANCE.md).
constexpr int kDecodeMatvecMaxB = 2;
constexpr int kDecodeMmaMaxB = 16;

// How a decode step runs the layers' products.
enum class DecodeProducts {
    Auto,    // by batch, as above
    Matvec,  // decode_matvec: LayerNorms and the cache append fused in; the classifier too (with the greedy pick)
    Mma,     // decode_mma: the same fusions on the tensor cores; the classifier by cuBLASLt
    Cublas,  // cuBLASLt, with the LayerNorm kernels; attention_decode appends the new K and V
    // the whole step as one persistent kernel (llmc/inference/persistent_step.cuh): batch 1, Hopper, BF16; Auto's
    // choice at batch 1 for the wider models (persistent_auto_takes), and a server's for its lone busy slot's steps;
    // other row counts take Auto's choice
    Persistent,
};
inline DecodeProducts decode_products_for(int B, DecodeProducts asked) {
    if (asked == DecodeProducts::Persistent && B != 1) asked = DecodeProducts::Auto;
    if (asked != DecodeProducts::Auto) return asked;
    return kDecodeMatvecAvailable && B <= kDecodeMatvecMaxB ? DecodeProducts::Matvec
           : kDecodeMmaAvailable && B <= kDecodeMmaMaxB     ? DecodeProducts::Mma
                                                            : DecodeProducts::Cublas;
}

// The step's choices (tests force each; generate_gpt2cu's LLMC_DECODE_* switches too).
struct DecodeSettings {
    DecodeProducts products = DecodeProducts::Auto;
    DecodeAttentionKernel attention = DecodeAttentionKernel::Auto;  // split or per head, by B·NH
    int matvec_rows = kDecodeMaxRows;  // rows per decode_matvec block (tests lower it)
    int matvec_classifier_groups = 1;  // the classifier as decode_matvec while the batch is at most this many row
                                       // groups (it reads all of wte once per group), else cuBLASLt
    bool persistent_auto = true;       // Auto may take the persistent step (LLMC_DECODE_PERSISTENT=0: never)
    bool persistent_tiles = true;      // the persistent step's products on the tensor cores (LLMC_DECODE_TILES=0: FFMA)
};

// The B-row buffers of one step (the engine's plan: llmc/inference/inference_plan.h).
struct DecodeScratch {
    floatX *x, *ln, *qkv, *atty, *residual2, *residual3, *fch, *fch_gelu, *scratch, *lnf, *logits;  // (B, ·)
    float *mean, *rstd;
    int* tokens;                      // (B): the step's input
    void* attention_workspace;        // attention_decode's partials and counts
    float* mma_partials = nullptr;    // decode_mma's split-K workspace and counters
    unsigned* mma_counters = nullptr;
};

// Everything a step reads: the model, the cache, the scratch, the choices (products resolved), the stream.
struct DecodeStep {
    GPT2Config config;
    GPT2Params params;
    KVCache* cache = nullptr;
    DecodeScratch s{};
    DecodeSettings settings;
    bool fuse_gelu = kFloatXIsBF16;
    cudaStream_t stream = nullptr;
    int rows = 0;  // the step's rows: the cache's first `rows` sequences (0: all B; decode_step_rows makes one)
    // A prompt chunk's rows (decode_chunk_step): row b is a position of cache sequence seq[b], its length (that
    // position + 1) in cache->len[b]; every row's K and V go into the cache before any row attends, and only the last
    // row's logits are computed. Null: row b is sequence b (a decode step).
    const int* seq = nullptr;
    PersistentStep persistent;  // products Persistent: the kernel's phases, counters and ranks
    // products Persistent: the sequence it steps, read on the device (a server's lone busy slot; null: sequence 0)
    const int* persistent_row = nullptr;
    int batch() const { return rows > 0 ? rows : cache->B; }
};

// The same step over the cache's first `rows` sequences only (a server whose busy slots are the low ones), its
// products chosen for that many rows (asked: the engine's setting before it was resolved for B). The scratch is the
// B-row step's; the attention workspace pointer is shifted so its counts stay the B-row step's (attention_decode.cuh).
// The products' workspaces must be sized for every row count used (inference_plan: row_buckets).
inline DecodeStep decode_step_rows(const DecodeStep& full, int rows, DecodeProducts asked) {
    DecodeStep d = full;
    const KVCache& c = *full.cache;
    d.rows = rows;
    d.settings.products = decode_products_for(rows, asked);
    d.s.attention_workspace = attention_decode_workspace_rows(full.s.attention_workspace, c.B, rows, c.NH, c.max_T, c.HS);
    return d;
}

namespace decode_step_detail {

// x (b, :) = wte (token[b], :) + wpe (len[b]-1, :), the new token at its position.
__global__ void embed_kernel(floatX* __restrict__ x, const int* __restrict__ tokens, const int* __restrict__ len,
                             const floatX* __restrict__ wte, const floatX* __restrict__ wpe, int B, int C) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * C) return;
    const int b = idx / C, c = idx % C;
    x[idx] = from_float<floatX>(to_float(wte[(size_t)tokens[b] * C + c]) + to_float(wpe[(size_t)(len[b] - 1) * C + c]));
}

// Per layer 4 fused products + decode attention (decode_matvec or decode_mma); true if the greedy pick was folded
// into the classifier (given `pick`, where the classifier runs as decode_matvec).
inline bool fused_layers(const DecodeStep& d, const DecodeGreedyPick* pick) {
    const GPT2Config& c = d.config;
    const GPT2Params& p = d.params;
    const DecodeScratch& s = d.s;
    const KVCache& cache = *d.cache;
    const int B = d.batch(), C = c.channels, NH = c.num_heads, HS = C / NH, Vp = c.padded_vocab_size;
    const bool matvec = d.settings.products == DecodeProducts::Matvec;
    // each product and attention kernel starts while the kernel before it ends (see decode_matvec)
    auto product = [&](DecodeMatvec a) {
        a.B = B, a.rows = d.settings.matvec_rows, a.pdl = true;
        if (matvec) return decode_matvec(a, d.stream);
        if (a.ln_w && !decode_mma_fuses_layernorm(B, a.K)) {  // rows too wide for one block: LayerNorm first
            layernorm_forward(s.ln, s.mean, s.rstd, a.in, a.ln_w, a.ln_b, B, a.K, d.stream, /*pdl=*/true);
            a.in = s.ln, a.ln_w = a.ln_b = nullptr;
        }
        a.partials = s.mma_partials, a.counters = s.mma_counters;
        decode_mma(a, d.stream);
    };
    const floatX* residual = s.x;
    for (int l = 0; l < c.num_layers; l++) {
        DecodeMatvec qkv{s.qkv, residual, p(LN1W, l), p(LN1B, l), p(QKVW, l), p(QKVB, l)};
        qkv.k_cache = cache.k_layer(l), qkv.v_cache = cache.v_layer(l), qkv.len = cache.len;
        qkv.NH = NH, qkv.HS = HS, qkv.max_T = cache.max_T, qkv.N = 3 * C, qkv.K = C;
        product(qkv);
        cudaCheck(attention_decode(s.atty, s.qkv, cache.k_layer(l), cache.v_layer(l), cache.len, B, NH, cache.max_T, HS,
                                   s.attention_workspace, d.stream, (size_t)3 * C, /*pdl=*/true,
                                   /*new_kv=*/(const floatX*)nullptr, d.settings.attention));  // appended already
        DecodeMatvec proj{s.residual2, s.atty, nullptr, nullptr, p(ATTPROJW, l), p(ATTPROJB, l), residual};
        proj.N = C, proj.K = C;
        product(proj);
        DecodeMatvec fc{s.fch_gelu, s.residual2, p(LN2W, l), p(LN2B, l), p(FCW, l), p(FCB, l)};
        fc.gelu = true, fc.N = 4 * C, fc.K = C;
        product(fc);
        DecodeMatvec fcproj{s.residual3, s.fch_gelu, nullptr, nullptr, p(FCPROJW, l), p(FCPROJB, l), s.residual2};
        fcproj.N = C, fcproj.K = 4 * C;
        product(fcproj);
        residual = s.residual3;
    }
    if (matvec && B <= d.settings.matvec_rows * d.settings.matvec_classifier_groups) {
        DecodeMatvec logits{s.logits, residual, p(LNFW), p(LNFB), p(WTE)};
        logits.B = B, logits.N = Vp, logits.K = C, logits.rows = d.settings.matvec_rows;
        logits.pdl = true;
        if (pick) logits.pick = *pick;
        decode_matvec(logits, d.stream);
        return pick != nullptr;
    }
    layernorm_forward(s.lnf, s.mean, s.rstd, residual, p(LNFW), p(LNFB), B, C, d.stream, /*pdl=*/true);
    matmul_forward(s.logits, s.lnf, p(WTE), nullptr, B, C, Vp, nullptr, false, d.stream);
    return false;
}

// The cuBLASLt products with the LayerNorm kernels. Our kernels here are launched as programmatic dependents (PDL):
// each starts while the kernel before it (often a cuBLASLt product) ends, and waits for its output inside.
inline void cublas_layers(const DecodeStep& d) {
    const GPT2Config& c = d.config;
    const GPT2Params& p = d.params;
    const DecodeScratch& s = d.s;
    const KVCache& cache = *d.cache;
    const int B = d.batch(), C = c.channels, NH = c.num_heads, HS = C / NH, L = c.num_layers;
    cudaStream_t st = d.stream;
    layernorm_forward(s.ln, s.mean, s.rstd, s.x, p(LN1W), p(LN1B), B, C, st, /*pdl=*/true);
    const floatX* residual = s.x;
    for (int l = 0; l < L; l++) {
        matmul_forward(s.qkv, s.ln, p(QKVW, l), p(QKVB, l), B, C, 3 * C, nullptr, false, st);
        if (d.seq) {  // a chunk: all rows' K and V in first, then each row attends up to its own position
            cudaCheck(decode_attention::copy_kv(cache.k_layer(l), cache.v_layer(l), (const floatX*)s.qkv + C,
                                                (size_t)3 * C, cache.len, B, 1, NH, HS, cache.max_T, st,
                                                /*pdl=*/true, d.seq));
            cudaCheck(attention_decode(s.atty, s.qkv, cache.k_layer(l), cache.v_layer(l), cache.len, B, NH,
                                       cache.max_T, HS, nullptr, st, (size_t)3 * C, /*pdl=*/true,
                                       (const floatX*)nullptr, DecodeAttentionKernel::PerHead, d.seq));
        } else {  // the new token's K and V go from the QKV row into the cache inside attention_decode
            cudaCheck(attention_decode(s.atty, s.qkv, cache.k_layer(l), cache.v_layer(l), cache.len, B, NH,
                                       cache.max_T, HS, s.attention_workspace, st, (size_t)3 * C, /*pdl=*/true,
                                       (const floatX*)s.qkv + C, d.settings.attention));
        }
        matmul_forward(s.scratch, s.atty, p(ATTPROJW, l), p(ATTPROJB, l), B, C, C, nullptr, false, st);
        fused_residual_layernorm_forward(s.residual2, s.ln, s.mean, s.rstd, residual, s.scratch, p(LN2W, l),
                                         p(LN2B, l), B, C, st, /*pdl=*/true);
        matmul_forward(s.fch_gelu, s.ln, p(FCW, l), p(FCB, l), B, C, 4 * C, s.fch, d.fuse_gelu, st);
        matmul_forward(s.scratch, s.fch_gelu, p(FCPROJW, l), p(FCPROJB, l), B, 4 * C, C, nullptr, false, st);
        const bool last = l + 1 == L;
        fused_residual_layernorm_forward(s.residual3, last ? s.lnf : s.ln, s.mean, s.rstd, s.residual2, s.scratch,
                                         last ? p(LNFW) : p(LN1W, l + 1), last ? p(LNFB) : p(LN1B, l + 1), B, C, st,
                                         /*pdl=*/true);
        residual = s.residual3;  // the next layer reads it for its residual2, then overwrites it with its residual3
    }
    const int first = d.seq ? B - 1 : 0;  // a chunk: its last position's logits only
    matmul_forward(s.logits, s.lnf + (size_t)first * C, p(WTE), nullptr, B - first, C, c.padded_vocab_size, nullptr,
                   false, st);
}

}  // namespace decode_step_detail

// Every kernel of one decode step, reading the tokens (s.tokens) and lengths (cache->len, already advanced to
// include the new token) on the device; leaves logits (B, Vp). pick (the loop's, when greedy): folded into the
// classifier where that runs as decode_matvec; returns whether it was (else the caller picks).
inline bool decode_forward(const DecodeStep& d, const DecodeGreedyPick* pick = nullptr) {
    const int B = d.batch(), C = d.config.channels;
    if (d.settings.products == DecodeProducts::Persistent) {  // the embedding, the layers and the pick in one kernel
        if (d.seq || !d.persistent.phases) {  // a prompt chunk (cuBLASLt, as chunks run), or no phases: Auto's
            DecodeStep m = d;
            m.settings.products = d.seq ? DecodeProducts::Cublas : decode_products_for(d.batch(), DecodeProducts::Auto);
            return decode_forward(m, pick);
        }
        persistent_step_launch(d.persistent, d.config, d.params, *d.cache, d.s.tokens,
                               pick ? pick->prompt_len : nullptr, pick ? pick->next_tokens : nullptr,
                               pick ? pick->tokens_out : nullptr, pick ? pick->max_new : 0, d.stream,
                               d.persistent_row);
        return pick != nullptr;
    }
    decode_step_detail::embed_kernel<<<(B * C + 255) / 256, 256, 0, d.stream>>>(d.s.x, d.s.tokens, d.cache->len,
                                                                               d.params(WTE), d.params(WPE), B, C);
    cudaCheckLaunch();
    if (d.settings.products != DecodeProducts::Cublas) return decode_step_detail::fused_layers(d, pick);
    decode_step_detail::cublas_layers(d);
    return false;
}
