// The batch-1 decode step as one persistent kernel (llmc/kernels/decode/decode_persistent.cuh), checked
// and timed on its own: a GPT-2 of the given depth with random weights (GPT-2's init scales; the padded vocabulary's
// rows zero) and a KV cache of random keys and values for the positions before the new token. Checked before it is
// timed, every buffer poisoned first:
//   - every phase of every layer (QKV row, attention output, both residuals, GELU output) and the logits against
//     an fp64 CPU forward that rounds to bf16 where the kernel does, each phase fed the kernel's own output of the
//     phase before (rel-L2 <= 5e-3, bf16_tolerance: the phases one by one);
//   - the logits against that forward running free (rel-L2 <= 2e-2, test_decode's bound between two bf16 orders of
//     summation: rounding differences compound over the layers of a random network);
//   - the new position's K and V in the cache equal to the QKV row's, bit for bit;
//   - the fused greedy pick equal to the argmax of the kernel's own logits, and to the reference's but for a
//     near-tie (its logits within 2 bf16 steps);
//   - a second launch bit-identical to the first (logits and token), and three replays of the step captured as a
//     CUDA Graph (the kernel leaves its counters zero for the next launch);
//   - generation's pick (store_pick's outputs): the next token, the new token's row and the length advanced.
// Then ms a step (median of cold-L2 graph replays, dev/cuda/common.h) and the bytes read (weights and KV cache) over
// that time against the device's peak, the same launch without parts of it, and its timeline (decode_timeline.h: each
// phase's wait, staging, products and end on every block, in one launch checked to give the same logits). Last, both
// ways on one model: today's step (the engine's decode_forward, as generate_gpt2cu replays it) and the persistent one
// on GPT-2's random init after a prefill, checked against each other and timed in the same call.
//   make -C dev/cuda decode_step && ./dev/cuda/decode_step [-e 12|24|36|48] [-t positions before the token (255)]
//   [-r repeats (20)] [-m 0: the products by FFMA; 1, the default: on the tensor cores (Step::tiles)]
//   [-q: checked, timed and its timeline, without the diagnostics and both ways (a variant's quick measurement)]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common.h"
#include "decode_timeline.h"
#include "llmc/gpt2/gpt2_init.h"
#include "llmc/inference/decode_traffic.h"
#include "llmc/inference/engine.cuh"
#include "llmc/inference/generate.cuh"
#include "llmc/kernels/decode/decode_persistent.cuh"

namespace dp = decode_persistent;
using dp::bf16;

// Uniform values in [offset - scale, offset + scale) from a hash of (seed, index): fast at 1.5B parameters.
__global__ void fill_kernel(bf16* p, size_t n, uint64_t seed, float offset, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed * 0x9E3779B97F4A7C15ull + i;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const float u = (float)(z >> 40) * (1.0f / 16777216.0f);
        p[i] = __float2bfloat16(offset + scale * (2.f * u - 1.f));
    }
}

// Where each tensor sits in one bf16 buffer (llm.c's order does not matter here: only the step reads them).
struct Layout {
    size_t wte, wpe, lnfw, lnfb, total;
    struct Layer {
        size_t ln1w, ln1b, qkvw, qkvb, attw, attb, ln2w, ln2b, fcw, fcb, fcpw, fcpb;
    };
    std::vector<Layer> layers;
};
Layout layout_of(const GPT2Config& c) {
    const size_t C = c.channels, Vp = c.padded_vocab_size;
    Layout l{};
    size_t at = 0;
    auto take = [&](size_t n) { const size_t a = at; at += (n + 63) / 64 * 64; return a; };  // 128-byte aligned
    l.wte = take(Vp * C), l.wpe = take((size_t)c.max_seq_len * C), l.lnfw = take(C), l.lnfb = take(C);
    for (int i = 0; i < c.num_layers; i++) {
        Layout::Layer y;
        y.ln1w = take(C), y.ln1b = take(C), y.qkvw = take(3 * C * C), y.qkvb = take(3 * C), y.attw = take(C * C);
        y.attb = take(C), y.ln2w = take(C), y.ln2b = take(C), y.fcw = take(4 * C * C), y.fcb = take(4 * C);
        y.fcpw = take(4 * C * C), y.fcpb = take(C);
        l.layers.push_back(y);
    }
    l.total = at;
    return l;
}

// ------------------------------------------------------------------------------------------ fp64 reference
struct Host {
    std::vector<uint16_t> w, k, v;  // weights, caches (L, NH, max_T, HS)
    double at(size_t i) const { return bf16_bits_to_float(w[i]); }
};
double rb(double v) { return round_to_bf16((float)v); }
std::vector<double> layernorm(const std::vector<double>& x, const Host& h, size_t w, size_t b) {
    const size_t C = x.size();
    double m = 0, var = 0;
    for (double v : x) m += v;
    m /= C;
    for (double v : x) var += (v - m) * (v - m);
    const double s = 1.0 / std::sqrt(var / C + kLayerNormEps);
    std::vector<double> y(C);
    for (size_t c = 0; c < C; c++) y[c] = rb((x[c] - m) * s * h.at(w + c) + h.at(b + c));
    return y;
}
std::vector<double> matvec(const Host& h, size_t W, size_t bias, bool has_bias, int N, const std::vector<double>& x) {
    std::vector<double> y(N);
    const int K = (int)x.size();
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += h.at(W + (size_t)n * K + k) * x[k];
        y[n] = s + (has_bias ? h.at(bias + n) : 0.0);
    }
    return y;
}
double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

struct Activations {  // per layer, as the kernel writes them
    std::vector<std::vector<double>> qkv, atty, res2, fch, res3;
    std::vector<double> logits;
};
// The step in fp64, rounding to bf16 where the kernel does. With `fed` (the kernel's own activations), every phase
// takes the kernel's output of the phase before as its input, so each phase is checked alone and rounding
// differences do not compound over the layers; without, the reference runs free.
Activations reference_step(const GPT2Config& c, const Layout& L, Host& h, int token, int pos, const Activations* fed) {
    const int C = c.channels, NH = c.num_heads, HS = C / NH, maxT = c.max_seq_len;
    Activations a;
    std::vector<double> res(C);
    for (int i = 0; i < C; i++) res[i] = rb(h.at(L.wte + (size_t)token * C + i) + h.at(L.wpe + (size_t)pos * C + i));
    for (int l = 0; l < c.num_layers; l++) {
        const Layout::Layer& y = L.layers[l];
        std::vector<double> qkv = matvec(h, y.qkvw, y.qkvb, true, 3 * C, layernorm(res, h, y.ln1w, y.ln1b));
        for (double& v : qkv) v = rb(v);
        a.qkv.push_back(qkv);
        const std::vector<double>& q = fed ? fed->qkv[l] : qkv;
        const size_t cache = (size_t)l * NH * maxT * HS;
        for (int i = 0; i < C; i++) {  // the new position into the cache (as bf16 bits: exact, the values are)
            const size_t at = cache + ((size_t)(i / HS) * maxT + pos) * HS + i % HS;
            h.k[at] = float_to_bf16_bits((float)q[C + i]), h.v[at] = float_to_bf16_bits((float)q[2 * C + i]);
        }
        std::vector<double> atty(C);
        for (int hd = 0; hd < NH; hd++) {
            std::vector<double> s(pos + 1);
            double mx = -INFINITY, sum = 0;
            for (int t = 0; t <= pos; t++) {
                double d = 0;
                for (int e = 0; e < HS; e++)
                    d += q[hd * HS + e] * bf16_bits_to_float(h.k[cache + ((size_t)hd * maxT + t) * HS + e]);
                s[t] = d / std::sqrt((double)HS), mx = std::max(mx, s[t]);
            }
            for (double& v : s) sum += (v = std::exp(v - mx));
            for (int e = 0; e < HS; e++) {
                double o = 0;
                for (int t = 0; t <= pos; t++)
                    o += s[t] * bf16_bits_to_float(h.v[cache + ((size_t)hd * maxT + t) * HS + e]);
                atty[hd * HS + e] = rb(o / sum);
            }
        }
        a.atty.push_back(atty);
        std::vector<double> res2 = matvec(h, y.attw, y.attb, true, C, fed ? fed->atty[l] : atty);
        for (int i = 0; i < C; i++) res2[i] = rb(rb(res2[i]) + res[i]);
        a.res2.push_back(res2);
        const std::vector<double>& r2 = fed ? fed->res2[l] : res2;
        std::vector<double> fch = matvec(h, y.fcw, y.fcb, true, 4 * C, layernorm(r2, h, y.ln2w, y.ln2b));
        for (double& v : fch) v = rb(gelu(v));
        a.fch.push_back(fch);
        std::vector<double> res3 = matvec(h, y.fcpw, y.fcpb, true, C, fed ? fed->fch[l] : fch);
        for (int i = 0; i < C; i++) res3[i] = rb(rb(res3[i]) + r2[i]);
        a.res3.push_back(res3);
        res = fed ? fed->res3[l] : res3;
    }
    a.logits = matvec(h, L.wte, 0, false, c.padded_vocab_size, layernorm(res, h, L.lnfw, L.lnfb));
    for (double& v : a.logits) v = rb(v);
    return a;
}

// Today's step (llmc/inference/decode_step.cuh, as generate_gpt2cu runs it at batch 1) and the persistent one (as
// the engine sets it up, llmc/inference/persistent_step.cuh) on the same model (GPT-2's random init) and the same
// cache (a prefill of `before` random tokens), one after the other in this call: the logits and every layer's new
// K and V against each other (rel-L2 <= 2e-2, test_decode's bound for two bf16 steps running free over the layers;
// the same argmax but for a near-tie), then both timed, neither with its pick (a graph replay must not advance the
// lengths).
bool both_ways(const GPT2Config& c, int before, int repeats, int sms, bool tiles) {
    const int C = c.channels, HS = C / c.num_heads, Vp = c.padded_vocab_size;
    InferenceEngine e;
    InferenceOptions o;
    o.decode.persistent_auto = false;  // today's per-layer step, which Auto would replace from C 1280 on
    InferenceShape shape = generation_shape(c, 1, before, 1);
    inference_engine_upload(&e, c, gpt2_random_init(c, 42), shape, o);
    Rng rng(5);
    std::vector<int> prompt(before);
    for (int& t : prompt) t = (int)(rng.next_u32() % (uint32_t)c.vocab_size);
    const int token = (int)(rng.next_u32() % (uint32_t)c.vocab_size), pos = before;
    inference_prefill(&e, {prompt}, 0);
    inference_decode_step(&e, {token});  // today's step: the logits, the new position's K and V
    cudaCheck(cudaStreamSynchronize(e.stream));
    std::vector<bf16> today(Vp), kv_today(2 * (size_t)c.num_layers * C), kv_new(kv_today.size());
    cudaCheck(cudaMemcpy(today.data(), e.step.s.logits, Vp * sizeof(bf16), cudaMemcpyDeviceToHost));
    auto kv_rows = [&](std::vector<bf16>& out) {  // every layer's K and V at pos, head after head
        for (int l = 0; l < c.num_layers; l++)
            for (int kv = 0; kv < 2; kv++)
                cudaCheck(cudaMemcpy2D(out.data() + (size_t)(l * 2 + kv) * C, HS * sizeof(bf16),
                                       (kv ? e.cache.v_layer(l) : e.cache.k_layer(l)) + (size_t)pos * HS,
                                       (size_t)e.cache.max_T * HS * sizeof(bf16), HS * sizeof(bf16), c.num_heads,
                                       cudaMemcpyDeviceToHost));
    };
    kv_rows(kv_today);

    // the persistent step as the engine sets it up (llmc/inference/persistent_step.cuh), its logits apart
    DeviceBuffer<bf16> acts(persistent_activation_elems(c)), logits(Vp);
    DeviceBuffer<char> phases(persistent_phase_count(c) * sizeof(dp::Phase));
    DeviceBuffer<unsigned> counters(persistent_phase_count(c));
    DeviceBuffer<unsigned long long> picks(sms);
    const PersistentStep ps = persistent_step_set_up(c, e.step.params, e.cache, acts.ptr, logits.ptr, phases.ptr,
                                                     counters.ptr, picks.ptr, e.stream, tiles);
    auto persistent = [&] {
        persistent_step_launch(ps, c, e.step.params, e.cache, e.step.s.tokens, nullptr, nullptr, nullptr, 0, 0);
    };
    logits.poison();
    persistent();
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<bf16> mine = logits.download();
    kv_rows(kv_new);
    const ErrorStats el = compare_by(
        (size_t)Vp, [&](size_t i) { return (double)as_float(mine[i]); },
        [&](size_t i) { return (double)as_float(today[i]); });
    const ErrorStats ek = compare_by(
        kv_today.size(), [&](size_t i) { return (double)as_float(kv_new[i]); },
        [&](size_t i) { return (double)as_float(kv_today[i]); });
    const int a_today = argmax(today, c.vocab_size), a_mine = argmax(mine, c.vocab_size);
    const bool near_tie = bf16_near_tie(as_float(today[a_today]), as_float(today[a_mine]));
    printf("\nboth ways, GPT-2 d%d's random init, a %d-token prompt prefilled, the token at position %d:\n",
           c.num_layers, before, pos);
    printf("  persistent against today's step: logits rel-L2 %.3e (<= 2e-2), K and V at the position rel-L2 %.3e "
           "(<= 2e-2), argmax %d against %d%s\n", el.rel_l2, ek.rel_l2, a_mine, a_today,
           a_mine == a_today ? "" : near_tie ? " (a near-tie)" : " (NOT a near-tie)");
    const bool ok = el.rel_l2 <= 2e-2 && ek.rel_l2 <= 2e-2 && (a_mine == a_today || near_tie);

    // today's step as generate_gpt2cu replays it: the decode step's kernels captured as one graph
    cudaCheck(cudaStreamSynchronize(e.stream));
    cudaCheck(cudaStreamBeginCapture(e.stream, cudaStreamCaptureModeThreadLocal));
    decode_forward(e.step);
    cudaGraphExec_t graph = end_capture_instantiate(e.stream);
    auto today_step = [&] { cudaCheck(cudaGraphLaunch(graph, 0)); };  // benchmark() times the legacy stream
    const Timing tt = benchmark(today_step, repeats), tp = benchmark(persistent, repeats);
    cudaCheck(cudaGraphExecDestroy(graph));
    const DecodeTraffic traffic = decode_traffic(c, sizeof(bf16));
    const double bytes = traffic.weight_bytes + traffic.kv_bytes_per_position * (pos + 1);
    const double peak = device_peak_memory_bandwidth();
    auto line = [&](const char* what, double ms) {
        printf("  %-44s %.4f ms a token (cold L2, median of %d), %.2f TB/s, %.0f%% of %.2f TB/s\n", what, ms,
               repeats, bytes / (ms * 1e9), 100.0 * bytes / (ms * 1e-3) / peak, peak / 1e12);
    };
    line("today's step (decode_forward, graph)", tt.cold_ms);
    line("the persistent step", tp.cold_ms);
    printf("  persistent / today: %.3fx the speed\n", tt.cold_ms / tp.cold_ms);
    inference_engine_free(&e);
    return ok;
}

int main(int argc, char** argv) {
    int depth = 12, before = 255, repeats = 20;
    bool tiles = true, quick = false;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-m" && i + 1 < argc && (std::string(argv[i + 1]) == "0" || std::string(argv[i + 1]) == "1")) {
            tiles = std::string(argv[++i]) == "1";
        } else if (a == "-q") {
            quick = true;
        } else if ((a == "-e" || a == "-t" || a == "-r") && i + 1 < argc) {
            const int v = positive_int(argv[++i]);
            if (v == 0 || (a == "-e" && v != 12 && v != 24 && v != 36 && v != 48) || (a == "-t" && v >= 1024)) {
                fprintf(stderr, "error: %s %s: -e takes 12, 24, 36 or 48, -t a count below 1024, -r a positive count\n",
                        a.c_str(), argv[i]);
                return 1;
            }
            (a == "-e" ? depth : a == "-t" ? before : repeats) = v;
        } else {
            fprintf(stderr, "usage: %s [-e 12|24|36|48] [-t positions before the token] [-r repeats] [-m 0|1 (the "
                    "products by FFMA | on the tensor cores)] [-q (no diagnostics, not both ways)]\n", argv[0]);
            return 1;
        }
    }
    print_device();
    if (!hopper::hopper_available()) {
        printf("the persistent decode step needs an sm_90a build on an H100/H200: nothing to run here\n");
        return 0;
    }
    GPT2Config c;
    gpt2_preset("d" + std::to_string(depth), &c);
    const int C = c.channels, NH = c.num_heads, HS = C / NH, maxT = c.max_seq_len, Lr = c.num_layers, pos = before;
    const int token = 31373 % c.vocab_size;
    const Layout L = layout_of(c);

    // weights: GPT-2's init scales (matrices and embeddings std 0.02 as uniform +-0.035, LayerNorm weights near 1)
    DeviceBuffer<bf16> w(L.total), kc((size_t)Lr * NH * maxT * HS), vc((size_t)Lr * NH * maxT * HS);
    uint64_t seed = 1;
    auto fill = [&](bf16* p, size_t n, float offset, float scale) {
        fill_kernel<<<1024, 256>>>(p, n, seed++, offset, scale);
        cudaCheckLaunch();
    };
    fill(w.ptr, L.total, 0.f, 0.035f);
    for (const auto& y : L.layers) {
        fill(w.ptr + y.ln1w, C, 1.f, 0.1f), fill(w.ptr + y.ln2w, C, 1.f, 0.1f);
        fill(w.ptr + y.ln1b, C, 0.f, 0.02f), fill(w.ptr + y.ln2b, C, 0.f, 0.02f), fill(w.ptr + y.attb, C, 0.f, 0.02f);
        fill(w.ptr + y.qkvb, 3 * C, 0.f, 0.02f), fill(w.ptr + y.fcb, 4 * C, 0.f, 0.02f);
        fill(w.ptr + y.fcpb, C, 0.f, 0.02f);
    }
    fill(w.ptr + L.lnfw, C, 1.f, 0.1f), fill(w.ptr + L.lnfb, C, 0.f, 0.02f);
    const size_t pad = (size_t)(c.padded_vocab_size - c.vocab_size) * C;
    cudaCheck(cudaMemset(w.ptr + L.wte + (size_t)c.vocab_size * C, 0, pad * sizeof(bf16)));
    fill(kc.ptr, kc.count, 0.f, 1.f), fill(vc.ptr, vc.count, 0.f, 1.f);

    // activations, per layer; the phases
    DeviceBuffer<bf16> qkv((size_t)Lr * 3 * C), atty((size_t)Lr * C), res2((size_t)Lr * C), fch((size_t)Lr * 4 * C),
        res3((size_t)Lr * C), logits(c.padded_vocab_size);
    const int splits = dp::attention_splits(NH, maxT);
    DeviceBuffer<float> partials((size_t)NH * std::max(splits, 1) * dp::kUnitFloats);
    std::vector<dp::Phase> phases;
    const bf16* W = w.ptr;
    for (int l = 0; l < Lr; l++) {
        const Layout::Layer& y = L.layers[l];
        bf16* kl = kc.ptr + (size_t)l * NH * maxT * HS;
        bf16* vl = vc.ptr + (size_t)l * NH * maxT * HS;
        const bf16* in = l == 0 ? nullptr : res3.ptr + (size_t)(l - 1) * C;
        bf16* q = qkv.ptr + (size_t)l * 3 * C;
        phases.push_back({dp::Kind::Product, dp::Epilogue::Qkv, W + y.qkvw, W + y.qkvb, 3 * C, C, W + y.ln1w,
                          W + y.ln1b, in, nullptr, q, kl, vl});
        phases.push_back({dp::Kind::Attention, dp::Epilogue::Plain, nullptr, nullptr, 0, 0, nullptr, nullptr, q,
                          nullptr, nullptr, kl, vl, partials.ptr});
        phases.push_back({dp::Kind::Product, dp::Epilogue::Residual, W + y.attw, W + y.attb, C, C, nullptr, nullptr,
                          atty.ptr + (size_t)l * C, in, res2.ptr + (size_t)l * C, nullptr, nullptr, partials.ptr});
        phases.push_back({dp::Kind::Product, dp::Epilogue::Gelu, W + y.fcw, W + y.fcb, 4 * C, C, W + y.ln2w, W + y.ln2b,
                          res2.ptr + (size_t)l * C, nullptr, fch.ptr + (size_t)l * 4 * C, nullptr, nullptr});
        phases.push_back({dp::Kind::Product, dp::Epilogue::Residual, W + y.fcpw, W + y.fcpb, C, 4 * C, nullptr, nullptr,
                          fch.ptr + (size_t)l * 4 * C, res2.ptr + (size_t)l * C, res3.ptr + (size_t)l * C, nullptr,
                          nullptr});
    }
    phases.push_back({dp::Kind::Product, dp::Epilogue::Logits, W + L.wte, nullptr, c.padded_vocab_size, C, W + L.lnfw,
                      W + L.lnfb, res3.ptr + (size_t)(Lr - 1) * C, nullptr, logits.ptr, nullptr, nullptr});
    for (dp::Phase& ph : phases) dp::with_tiles(ph);
    DeviceBuffer<char> d_phases(phases.size() * sizeof(dp::Phase));
    cudaCheck(cudaMemcpy(d_phases.ptr, phases.data(), d_phases.bytes(), cudaMemcpyHostToDevice));
    int dev, sms;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    DeviceBuffer<unsigned> done(phases.size());
    DeviceBuffer<unsigned long long> pick(sms);
    DeviceBuffer<int> d_token(1), token_out(1), d_len(1);
    cudaCheck(cudaMemset(done.ptr, 0, done.bytes()));
    d_token.upload({token}), d_len.upload({pos + 1});
    dp::Step s{reinterpret_cast<const dp::Phase*>(d_phases.ptr), (int)phases.size(), W + L.wte, W + L.wpe, C, NH, HS,
               maxT, c.vocab_size, d_token.ptr, d_len.ptr, done.ptr, pick.ptr, token_out.ptr};
    s.attn_splits = splits, s.tiles = tiles;
    for (const dp::Phase& ph : phases) {  // the kernel's limits (every GPT-2 shape is within them)
        const bool rows = ph.bias || ph.epilogue == dp::Epilogue::Residual;
        if (ph.kind == dp::Kind::Product && ((rows && (ph.N + sms - 1) / sms > dp::kMaxBlockRows) ||
                                             ph.K > 8 * dp::kInVec * dp::kConsumers || ph.K % 8 != 0)) {
            fprintf(stderr, "error: a %d x %d product is past the kernel's limits on %d SMs\n", ph.N, ph.K, sms);
            return 1;
        }
    }
    if (HS != dp::kHeadSize || C > 8 * dp::kConsumers || splits == 0) {
        fprintf(stderr, "error: the kernel takes heads of 64, C up to %d and contexts up to %d, not HS %d, C %d, "
                "context %d\n", 8 * dp::kConsumers, dp::kMaxSplits * dp::kChunkKeys, HS, C, maxT);
        return 1;
    }
    const int x_floats = dp::x_floats_for(C);
    const size_t smem = dp::smem_bytes(x_floats, tiles);
    dp::prepare(x_floats);
    auto launch = [&] { dp::launch(s, x_floats, sms, 0); };

    // ---- check
    for (auto* b : {&qkv, &atty, &res2, &fch, &res3, &logits}) b->poison();
    token_out.poison();
    Host h;
    {
        std::vector<bf16> t = w.download();
        h.w.resize(t.size()), memcpy(h.w.data(), t.data(), t.size() * 2);
        t = kc.download(), h.k.resize(t.size()), memcpy(h.k.data(), t.data(), t.size() * 2);
        t = vc.download(), h.v.resize(t.size()), memcpy(h.v.data(), t.data(), t.size() * 2);
    }
    launch();
    cudaCheck(cudaDeviceSynchronize());
    printf("d%d, C %d, %d phases on %d SMs, %.0f KB of shared memory a block, attention in %d chunks a head (at most "
           "%d), the products on %s; the token at position %d\n", depth, C, (int)phases.size(), sms, smem / 1024.0,
           dp::splits_at(pos, splits), splits, tiles ? "the tensor cores" : "FFMA", pos);
    const std::vector<bf16> g_qkv = qkv.download(), g_atty = atty.download(), g_res2 = res2.download(),
                            g_fch = fch.download(), g_res3 = res3.download(), g_logits = logits.download();
    Activations gpu;  // the kernel's activations, per layer, as doubles
    auto layer_of = [](const std::vector<bf16>& all, int l, size_t n) {
        std::vector<double> v(n);
        for (size_t i = 0; i < n; i++) v[i] = as_float(all[(size_t)l * n + i]);
        return v;
    };
    for (int l = 0; l < Lr; l++) {
        gpu.qkv.push_back(layer_of(g_qkv, l, 3 * C)), gpu.atty.push_back(layer_of(g_atty, l, C));
        gpu.res2.push_back(layer_of(g_res2, l, C)), gpu.fch.push_back(layer_of(g_fch, l, 4 * C));
        gpu.res3.push_back(layer_of(g_res3, l, C));
    }
    bool ok = true;
    const Activations fed = reference_step(c, L, h, token, pos, &gpu);
    printf("  each phase on the kernel's own inputs (rel-L2 <= 5e-3), every layer; shown: the first and the last\n");
    double worst = 0;
    for (int l = 0; l < Lr; l++) {
        const bool print = l == 0 || l == Lr - 1;
        if (print) printf("  layer %d:\n", l);
        auto check = [&](const char* what, const std::vector<double>& mine, const std::vector<double>& r) {
            const ErrorStats e = compare(mine.data(), r.data(), r.size());
            worst = std::max(worst, e.rel_l2);
            if (print || !(e.rel_l2 <= 5e-3)) ok &= validate(what, to_float(mine), r, bf16_tolerance(rms(r)));
        };
        check("qkv", gpu.qkv[l], fed.qkv[l]), check("atty", gpu.atty[l], fed.atty[l]);
        check("res2", gpu.res2[l], fed.res2[l]), check("fch", gpu.fch[l], fed.fch[l]);
        check("res3", gpu.res3[l], fed.res3[l]);
    }
    printf("  every phase of every layer: largest rel-L2 %.3e\n  logits:\n", worst);
    ok &= validate("logits", g_logits, fed.logits, bf16_tolerance(rms(fed.logits)));
    const Activations ref = reference_step(c, L, h, token, pos, nullptr);
    const ErrorStats free = compare_by(
        ref.logits.size(), [&](size_t i) { return (double)as_float(g_logits[i]); },
        [&](size_t i) { return ref.logits[i]; });
    const ErrorStats drift = compare(gpu.res3[Lr - 1].data(), ref.res3[Lr - 1].data(), (size_t)C);
    printf("  the reference running free: last residual rel-L2 %.3e, logits rel-L2 %.3e (<= 2e-2, test_decode's bound "
           "for two bf16 orders of summation)\n", drift.rel_l2, free.rel_l2);
    ok &= free.rel_l2 <= 2e-2;
    {  // the new position's K and V in the cache: the QKV row's, bit for bit
        const std::vector<bf16> gk = kc.download(), gv = vc.download();
        int wrong = 0;
        for (int l = 0; l < Lr; l++)
            for (int i = 0; i < C; i++) {
                const size_t at = (size_t)l * NH * maxT * HS + ((size_t)(i / HS) * maxT + pos) * HS + i % HS;
                wrong += as_float(gk[at]) != as_float(g_qkv[(size_t)l * 3 * C + C + i]);
                wrong += as_float(gv[at]) != as_float(g_qkv[(size_t)l * 3 * C + 2 * C + i]);
            }
        printf("  cache at position %d: %d of %d values differ from the QKV rows (must be 0)\n", pos, wrong,
               2 * Lr * C);
        ok &= wrong == 0;
    }
    const int picked = token_out.download()[0], own = argmax(g_logits, c.vocab_size);
    const int theirs = argmax(ref.logits, c.vocab_size);
    const double gap = ref.logits[theirs] - ref.logits[own];
    const bool near_tie = bf16_near_tie(ref.logits[theirs], ref.logits[own]);
    printf("  greedy: fused pick %d, argmax of its logits %d, of the reference's %d (gap %.3g%s)\n", picked, own,
           theirs, gap, own == theirs ? "" : near_tie ? ": a near-tie" : ": NOT a near-tie");
    ok &= picked == own && (own == theirs || near_tie);
    launch();
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<bf16> again = logits.download();
    const bool same = memcmp(again.data(), g_logits.data(), again.size() * 2) == 0 && token_out.download()[0] == picked;
    printf("  a second launch: %s\n", same ? "bit-identical logits and token" : "DIFFERENT (must be identical)");
    ok &= same;
    // the step as a CUDA Graph replays it (the counters left zero by each launch), then with generation's pick
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    dp::launch(s, x_floats, sms, stream);
    cudaGraph_t graph_def;
    cudaCheck(cudaStreamEndCapture(stream, &graph_def));
    cudaGraphExec_t graph;
    cudaCheck(cudaGraphInstantiate(&graph, graph_def, 0));
    cudaCheck(cudaGraphDestroy(graph_def));
    logits.poison();
    for (int i = 0; i < 3; i++) cudaCheck(cudaGraphLaunch(graph, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    const std::vector<bf16> replay_logits = logits.download();
    const bool replayed = memcmp(replay_logits.data(), g_logits.data(), g_logits.size() * sizeof(bf16)) == 0;
    printf("  three graph replays: %s\n", replayed ? "bit-identical logits" : "DIFFERENT (must be identical)");
    ok &= replayed;
    {
        DeviceBuffer<int> prompt_len(1), next(1), out(4);
        prompt_len.upload({pos}), next.poison(), out.poison();
        dp::Step g = s;
        g.token_out = nullptr, g.prompt_len = prompt_len.ptr, g.next_tokens = next.ptr, g.tokens_out = out.ptr;
        g.max_new = 4;
        dp::launch(g, x_floats, sms, 0);
        cudaCheck(cudaDeviceSynchronize());
        const int len_after = d_len.download()[0], nt = next.download()[0], t1 = out.download()[1];
        const bool pick_ok = len_after == pos + 2 && nt == picked && t1 == picked;
        printf("  generation's pick: next token %d, new token 1 %d, length %d -> %d: %s\n", nt, t1, pos + 1,
               len_after, pick_ok ? "ok" : "WRONG (the token, and the length advanced by one)");
        ok &= pick_ok;
        d_len.upload({pos + 1});
    }
    if (!ok) {
        printf("decode_step: FAIL\n");
        return 1;
    }

    // ---- time: graph replays, as a generation loop would run it
    auto replay = [&] { cudaCheck(cudaGraphLaunch(graph, 0)); };
    const Timing t = benchmark(replay, repeats);
    const DecodeTraffic traffic = decode_traffic(c, sizeof(bf16));
    const double bytes = traffic.weight_bytes + traffic.kv_bytes_per_position * (pos + 1);
    const double peak = device_peak_memory_bandwidth();
    printf("persistent step d%d batch 1, %d positions: %.4f ms (cold L2, median of %d; warm %.4f), %.1f MB read, "
           "%.2f TB/s, %.0f%% of the device's %.2f TB/s\n", depth, pos + 1, t.cold_ms, repeats, t.warm_ms, bytes / 1e6,
           bytes / (t.cold_ms * 1e9), 100.0 * bytes / (t.cold_ms * 1e-3) / peak, peak / 1e12);
    // where the time goes: the same launch without parts of it (results wrong, not checked)
    const unsigned three = dp::kSkipAttention | dp::kSkipWaits | dp::kSkipLayerNorm;
    const char* parts[] = {"without attention", "without waits between phases", "without LayerNorms",
                           "without all three", "without staging the input", "without products (pages unread)",
                           "without all three and staging", "without all five (the skeleton)"};
    const unsigned masks[] = {dp::kSkipAttention, dp::kSkipWaits,      dp::kSkipLayerNorm,
                              three,              dp::kSkipStaging,    dp::kSkipProducts,
                              three | dp::kSkipStaging, three | dp::kSkipStaging | dp::kSkipProducts};
    for (int i = 0; i < (quick ? 0 : 8); i++) {
        s.diagnose = masks[i];
        const Timing d = benchmark(launch, repeats);  // plain launches: the graph holds the full step
        printf("  diagnostic, %-33s %.4f ms (%+.4f)\n", parts[i], d.cold_ms, d.cold_ms - t.cold_ms);
    }
    s.diagnose = 0;
    {  // the same step with its timeline: the logits unchanged (checked), then where each phase's time goes
        DeviceBuffer<unsigned long long> timeline((size_t)sms * phases.size() * dp::kTimelineMarks + (size_t)sms * 4);
        timeline.poison(), logits.poison();
        s.timeline = timeline.ptr;
        flush_l2();  // cold, as the step's timings
        launch();
        cudaCheck(cudaDeviceSynchronize());
        s.timeline = nullptr;
        const std::vector<bf16> got = logits.download();
        const bool same = memcmp(got.data(), g_logits.data(), got.size() * sizeof(bf16)) == 0;
        const bool read = decode_timeline::print(timeline.download(), phases, sms, C);
        if (!same || !read)
            printf("  the timeline's launch: %s\n",
                   !same ? "LOGITS DIFFER (must be identical)" : "A STAMP MISSING OR OUT OF ORDER");
        ok &= same && read;
    }
    cudaCheck(cudaGraphExecDestroy(graph)), cudaCheck(cudaStreamDestroy(stream));
    if (!ok) {
        printf("decode_step: FAIL\n");
        return 1;
    }
    if (!quick && !both_ways(c, before, repeats, sms, tiles)) {
        printf("decode_step: FAIL\n");
        return 1;
    }
    printf("decode_step: PASS\n");
    return 0;
}
