// The blocks' linear layers in FP8 (llmc/model/gpt2_fp8.cuh), each of qkv, attproj, fc and fcproj of two layers,
// forward and backward in a step's order (every forward, then the backwards last layer first), against fp64 products of
// the operands quantized on the host by llmc/core/fp8.h with the scales current scaling gives (max |x| ->
// fp8_scale_from_amax): so the layouts (y, yT, K-major), the slots, the scales and descales, the accumulation into dW
// and the bias sums are all checked, and the only differences left are the GEMMs' accumulation order and the bf16
// outputs' rounding. Tolerances as test_fp8.cu's GEMMs: rel-L2 <= 1e-2 for the forward (fast accumulation), 6e-3 for
// both gradients (promoted), 6e-3 for the bias sums; dW and dbias start from random values (they accumulate), dinp is
// poisoned, and so are the inputs once the forwards ran (the backward reads the transposes they kept). The lm_head's
// forward (-fp8 2) likewise. Delayed scaling's state machine (-fp8h) on the device, in any build: the update after a
// micro-step and the reset at a forward's start, against the rings and scales kept here. BF16 builds on FP8 tensor
// cores; elsewhere (FP32 builds, older GPUs) it checks instead that -fp8 1 is refused there, with the reason.
// With LLMC_FP8_BLOCKS=1 (make test runs it both ways) the same layers with a scale per block: the references quantize
// by blocks on the host (W in 128x128, inp and dout in 1x128 along C / OC for the forward and the input gradient and
// along the rows for the weight gradient; E4M3 gradients; fcproj given fc's output and casting its GELU), every GEMM
// promoted (6e-3), at C 192 and B*T 208 (partial blocks along K both ways) with room for 256 rows. With
// LLMC_FP8_RECAST=1 (make test runs that too) attproj's and fcproj's backwards cast their inputs again: the same
// references, their inputs left unpoisoned.
#include <algorithm>
#include <cmath>

#include "llmc/core/fp8.h"
#include "llmc/model/gpt2_fp8.cuh"
#include "llmc/model/gpt2_fp8_delayed.cuh"
#include "tests/gpu/kernels/fp8_block_reference.cuh"
#include "tests/gpu/kernels/kernel_checks.cuh"

namespace {

// x quantized to F with current scaling: what the GEMM multiplies (decode / scale), as doubles.
std::vector<double> dequantized(const std::vector<float>& x, Fp8Format F) {
    double amax = 0;
    for (float v : x) amax = std::max(amax, (double)std::fabs(v));
    const float scale = fp8_scale_from_amax((float)amax, F, 0, 1.f);
    std::vector<double> d(x.size());
    for (size_t i = 0; i < x.size(); i++) d[i] = fp8_decode(fp8_encode((double)x[i] * scale, F), F) / scale;
    return d;
}

// One linear of one layer: its inputs, the fp64 references, its device buffers.
struct Case {
    int l = 0, N = 0, in = 0, out = 0;
    Fp8Linear k = kFp8Qkv;
    bool pre_gelu = false;  // the forward is given the GELU's input (fcproj under LLMC_FP8_BLOCKS)
    std::vector<float> W, inp, bias, dout;
    std::vector<double> ref_out, ref_dinp, ref_dW, ref_db;
    floatX *d_inp = nullptr, *d_bias = nullptr, *d_dout = nullptr, *d_out = nullptr, *d_dinp = nullptr;
    floatX *d_dW = nullptr, *d_db = nullptr;
};

Case make_case(const GPT2Params& p, int C, int l, Fp8Linear k, int N) {
    using namespace gpt2_fp8_detail;
    Case t;
    const Dims d = dims(C, k);
    t.l = l, t.k = k, t.N = N, t.in = d.in, t.out = d.out;
    const int in = d.in, out = d.out;
    // W as the model holds it (random parameters): read back to quantize it here
    t.W = download(p(d.weight, l), (size_t)out * in);
    t.inp = random_vec((size_t)N * in, 1.0f), t.bias = random_vec(out, 0.1f);
    // LLMC_FP8_BLOCKS: fcproj's forward is given fc's output and casts gelu of it (its own block cast's GELU path),
    // so the references multiply gelu(inp) as gelu_forward stores it (tanh in float here and there: a last-bit
    // difference moves an FP8 rounding at most, well inside the tolerance)
    t.pre_gelu = engine_options().fp8_blocks && k == kFp8FcProj;
    std::vector<float> linear_in = t.inp;
    if (t.pre_gelu)
        for (float& v : linear_in)
            v = round_to_floatX(0.5f * v * (1.f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v))));
    t.dout = random_vec((size_t)N * out, 1e-4f);  // a gradient's size: E5M2 needs the scale
    const std::vector<float> dW0 = random_vec((size_t)out * in, 1e-3f), db0 = random_vec(out, 1e-3f);
    const bool blocks = engine_options().fp8_blocks;
    const Fp8Format G = blocks ? Fp8Format::E4M3 : Fp8Format::E5M2;
    std::vector<double> qW, qi, qd, qiT, qdT;  // qiT, qdT: the weight gradient's operands (the same under per tensor)
    if (blocks) {
        qW = fp8_block_dequantized(t.W, out, in, Fp8Granularity::k128x128, Fp8Format::E4M3);
        qi = fp8_block_dequantized(linear_in, N, in, Fp8Granularity::k1x128, Fp8Format::E4M3);
        qiT = fp8_block_dequantized_transposed(linear_in, N, in, Fp8Format::E4M3);
        qd = fp8_block_dequantized(t.dout, N, out, Fp8Granularity::k1x128, G);
        qdT = fp8_block_dequantized_transposed(t.dout, N, out, G);
    } else {
        qW = dequantized(t.W, Fp8Format::E4M3), qi = dequantized(t.inp, Fp8Format::E4M3), qd = dequantized(t.dout, G);
        qiT = qi, qdT = qd;
    }
    t.ref_out.resize((size_t)N * out), t.ref_dinp.resize((size_t)N * in), t.ref_dW.resize((size_t)out * in);
    t.ref_db.resize(out);
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < out; o++) {
            double acc = t.bias[o];
            for (int i = 0; i < in; i++) acc += qi[(size_t)n * in + i] * qW[(size_t)o * in + i];
            t.ref_out[(size_t)n * out + o] = acc;
        }
        for (int i = 0; i < in; i++) {
            double acc = 0;
            for (int o = 0; o < out; o++) acc += qd[(size_t)n * out + o] * qW[(size_t)o * in + i];
            t.ref_dinp[(size_t)n * in + i] = acc;
        }
    }
#pragma omp parallel for
    for (int o = 0; o < out; o++) {
        double db = db0[o];
        for (int n = 0; n < N; n++) db += t.dout[(size_t)n * out + o];
        t.ref_db[o] = db;
        for (int i = 0; i < in; i++) {
            double acc = dW0[(size_t)o * in + i];
            for (int n = 0; n < N; n++) acc += qdT[(size_t)n * out + o] * qiT[(size_t)n * in + i];
            t.ref_dW[(size_t)o * in + i] = acc;
        }
    }
    t.d_inp = upload(t.inp), t.d_bias = upload(t.bias), t.d_dout = upload(t.dout);
    t.d_out = poisoned((size_t)N * out), t.d_dinp = poisoned((size_t)N * in);
    t.d_dW = upload(dW0), t.d_db = upload(db0);
    return t;
}

void check_case(const Fp8Layers& f, const Case& t) {
    static const char* const kNames[] = {"qkv", "attproj", "fc", "fcproj"};
    auto name = [&](const char* what) {
        char tag[96];
        snprintf(tag, sizeof(tag), "fp8 linear L%d %s N%d %s", t.l, kNames[t.k], t.N, what);
        return std::string(tag);
    };
    const bool blocks = f.blocks();  // every GEMM promoted; no per-tensor scales to check
    check(name(blocks ? "out (blocks)" : "out (fast accum)"), download(t.d_out, t.ref_out.size()), t.ref_out,
          blocks ? 6e-3 : 1e-2);
    check(name("dinp"), download(t.d_dinp, t.ref_dinp.size()), t.ref_dinp, 6e-3);
    check(name("dW (+=)"), download(t.d_dW, t.ref_dW.size()), t.ref_dW, 6e-3);
    check(name("dbias (+=)"), download(t.d_db, t.ref_db.size()), t.ref_db, 6e-3);
    if (blocks) return;
    // the scales the casts took: current scaling, so each the host's for the same tensor
    auto host_scale = [](const std::vector<float>& x, Fp8Format F) {
        float amax = 0;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        return fp8_scale_from_amax(amax, F, 0, 1.f);
    };
    float got[3];
    const Fp8Operand ops[3] = {kFp8Inp, kFp8Weight, kFp8Dout};
    for (int j = 0; j < 3; j++)
        cudaCheck(cudaMemcpy(&got[j], f.scale(f.slot(t.l, t.k, ops[j])), sizeof(float), cudaMemcpyDeviceToHost));
    check_exact(name("scales of inp, W, dout"), got[0] == host_scale(t.inp, Fp8Format::E4M3) &&
                                                    got[1] == host_scale(t.W, Fp8Format::E4M3) &&
                                                    got[2] == host_scale(t.dout, Fp8Format::E5M2));
}

void free_case(Case& t) {
    for (floatX* d : {t.d_inp, t.d_bias, t.d_dout, t.d_out, t.d_dinp, t.d_dW, t.d_db}) cudaFree(d);
}

// The lm_head's forward in FP8 (-fp8 2): logits = q(lnf) · q(wte)ᵀ, rel-L2 <= 1e-2 (fast accumulation), and the
// scales the two casts took the host's.
void check_lm_head(const Fp8Layers& f, const GPT2Params& p, int N) {
    const int C = f.C, Vp = f.Vp;
    const std::vector<float> lnf = random_vec((size_t)N * C, 1.0f), wte = download(p(WTE), (size_t)Vp * C);
    const std::vector<double> ql = dequantized(lnf, Fp8Format::E4M3), qw = dequantized(wte, Fp8Format::E4M3);
    std::vector<double> ref((size_t)N * Vp);
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        for (int v = 0; v < Vp; v++) {
            double acc = 0;
            for (int c = 0; c < C; c++) acc += ql[(size_t)n * C + c] * qw[(size_t)v * C + c];
            ref[(size_t)n * Vp + v] = acc;
        }
    floatX *d_lnf = upload(lnf), *d_logits = poisoned((size_t)N * Vp);
    gpt2_fp8_lm_head_forward(f, d_logits, d_lnf, p(WTE), N, 0, /*lnf_amax_taken=*/false);
    char tag[96];
    snprintf(tag, sizeof(tag), "fp8 lm_head N%d Vp%d C%d logits (fast accum)", N, Vp, C);
    check(tag, download(d_logits, ref.size()), ref, 1e-2);
    float got[2];
    cudaCheck(cudaMemcpy(&got[0], f.scale(f.lm_head_slot(kFp8Inp)), 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&got[1], f.scale(f.lm_head_slot(kFp8Weight)), 4, cudaMemcpyDeviceToHost));
    float amax_l = 0, amax_w = 0;
    for (float v : lnf) amax_l = std::max(amax_l, std::fabs(v));
    for (float v : wte) amax_w = std::max(amax_w, std::fabs(v));
    check_exact("fp8 lm_head: scales of lnf and wte", got[0] == fp8_scale_from_amax(amax_l, Fp8Format::E4M3, 0, 1.f) &&
                                                         got[1] == fp8_scale_from_amax(amax_w, Fp8Format::E4M3, 0, 1.f));
    cudaFree(d_lnf), cudaFree(d_logits);
}

}  // namespace

// Delayed scaling's operand table (llmc/model/gpt2_fp8.cuh): over 3 layers, each delayed operand a slot of its own,
// in its layer, the one its name says (fcproj's input, fc's output gradient, qkv's and fc's inputs, the four
// weights), E5M2 only for the gradient.
static void test_delayed_table() {
    const int L = 3;
    Fp8Layers shape;
    shape.L = L;
    std::vector<size_t> seen;
    bool ok = true;
    for (int t = 0; t < kFp8DelayedPerLayer * L; t++) {
        const int l = t / kFp8DelayedPerLayer, j = t % kFp8DelayedPerLayer;
        const size_t want = j == 0   ? shape.slot(l, kFp8FcProj, kFp8Inp)
                            : j == 1 ? shape.slot(l, kFp8Fc, kFp8Dout)
                            : j == 2 ? shape.slot(l, kFp8Qkv, kFp8Inp)
                            : j == 3 ? shape.slot(l, kFp8Fc, kFp8Inp)
                                     : shape.slot(l, (Fp8Linear)(j - 4), kFp8Weight);
        ok = ok && gpt2_fp8_delayed_slot(t) == want &&
             gpt2_fp8_delayed_format(t) == (j == 1 ? Fp8Format::E5M2 : Fp8Format::E4M3) &&
             std::find(seen.begin(), seen.end(), want) == seen.end();
        seen.push_back(want);
    }
    check_exact("fp8 delayed scaling's operands: 8 a layer, each its own slot and format", ok);
}

// Delayed scaling's update kernel and a forward's reset (llmc/model/gpt2_fp8_delayed.cuh) against rings kept here:
// 2 layers, H 3, G 2 micro-steps a step, 9 updates. An activation's or gradient's amax goes in at micro-step % H and
// sets its scale from the ring's max; a weight's, only when it was cast (its amax not 0: here at each step's first
// micro-step but the third step's), at its step % H, setting its window; every amax zeroed, the counter advanced; a
// weight amax that is not finite makes its copy's descale NaN, leaving every other descale as it was.
static void test_delayed_update() {
    const int L = 2, H = 3, G = 2, ops = kFp8DelayedPerLayer * L, updates = 9;
    Fp8Layers f;
    gpt2_fp8_allocate(&f, L, 64, 16);
    gpt2_fp8_delayed_allocate(&f, H, G);
    std::vector<float> ring((size_t)ops * H, 0.f), scale(ops, 0.f), descale(ops, 0.f), window(ops, 0.f);
    auto put = [](float* d, float v) { cudaCheck(cudaMemcpy(d, &v, sizeof(v), cudaMemcpyHostToDevice)); };
    auto get = [](const float* d) {
        float v;
        cudaCheck(cudaMemcpy(&v, d, sizeof(v), cudaMemcpyDeviceToHost));
        return v;
    };
    bool rings = true, scales = true, zeroed = true;
    for (int i = 0; i < updates; i++) {
        const bool cast = i % G == 0 && i / G != 2;
        for (int t = 0; t < ops; t++) {
            const bool weight = gpt2_fp8_delayed_is_weight(t);
            // amaxes that rise and fall, so entries leave the window as the ring turns
            const float a = weight ? (cast ? 0.25f + 0.5f * (float)((i * 7 + t) % 5) : 0.f)
                                   : std::ldexp(1.f + 0.125f * (float)(t % 8), (i * 3 + t) % 7 - 3);
            put(f.amax(gpt2_fp8_delayed_slot(t)), a);
            if (weight) {
                if (a != 0.f) ring[(size_t)t * H + (i / G) % H] = a;
            } else {
                ring[(size_t)t * H + i % H] = a;
            }
            float m = 0.f;
            for (int h = 0; h < H; h++) m = std::max(m, ring[(size_t)t * H + h]);
            if (weight) window[t] = m;
            else {
                scale[t] = fp8_scale_from_amax(m, gpt2_fp8_delayed_format(t), 0, scale[t]);
                descale[t] = (float)(1.0 / (double)scale[t]);
            }
        }
        gpt2_fp8_delayed_update(f, 0);
        std::vector<float> got_ring(ring.size()), got_window(ops);
        cudaCheck(cudaMemcpy(got_ring.data(), f.delayed.history, ring.size() * sizeof(float), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(got_window.data(), f.delayed.window, ops * sizeof(float), cudaMemcpyDeviceToHost));
        rings = rings && got_ring == ring;
        for (int t = 0; t < ops; t++) {
            const size_t s = gpt2_fp8_delayed_slot(t);
            zeroed = zeroed && get(f.amax(s)) == 0.f;
            if (gpt2_fp8_delayed_is_weight(t)) rings = rings && got_window[t] == window[t];
            else scales = scales && get(f.scale(s)) == scale[t] && get(f.descale(s)) == descale[t];
        }
    }
    long long counter = -1;
    cudaCheck(cudaMemcpy(&counter, f.delayed.counter, sizeof(counter), cudaMemcpyDeviceToHost));
    check_exact("fp8 delayed update: rings (weights' once a step, when cast) and weights' windows, 9 updates", rings);
    check_exact("fp8 delayed update: activations' and gradients' scales and descales from their windows", scales);
    check_exact("fp8 delayed update: every amax zeroed, the counter at 9", zeroed && counter == updates);
    // an inf weight amax (its copy saturated): that descale NaN, the others as they were
    const int inf_t = kFp8DelayedPerLayer + kFp8DelayedFirstWeight + 1;
    for (int t = 0; t < ops; t++)
        if (gpt2_fp8_delayed_is_weight(t)) put(f.descale(gpt2_fp8_delayed_slot(t)), 0.5f);
    put(f.amax(gpt2_fp8_delayed_slot(inf_t)), INFINITY);
    gpt2_fp8_delayed_update(f, 0);
    bool marked = true;
    for (int t = 0; t < ops; t++) {
        if (!gpt2_fp8_delayed_is_weight(t)) continue;
        const float d = get(f.descale(gpt2_fp8_delayed_slot(t)));
        marked = marked && (t == inf_t ? std::isnan(d) : d == 0.5f);
    }
    check_exact("fp8 delayed update: an inf weight amax makes its descale NaN, and only its", marked);
    // a forward's start: every amax zeroed but the blocks' weights' (cast between two updates), the delayed
    // activations' descales back to 1 / scale (an evaluation's overflow must not reach training)
    for (size_t s = 0; s < f.slots(); s++) put(f.amax(s), 3.f);
    for (int t = 0; t < ops; t++)
        if (!gpt2_fp8_delayed_is_weight(t)) put(f.descale(gpt2_fp8_delayed_slot(t)), NAN);
    gpt2_fp8_begin_forward(f, 0);
    bool reset = true;
    for (size_t s = 0; s < f.slots(); s++) {
        const bool block_weight = s < (size_t)L * kFp8Linears * kFp8Operands && s % kFp8Operands == kFp8Weight;
        reset = reset && get(f.amax(s)) == (block_weight ? 3.f : 0.f);
    }
    for (int t = 0; t < ops; t++) {
        if (gpt2_fp8_delayed_is_weight(t)) continue;
        const float sc = get(f.scale(gpt2_fp8_delayed_slot(t)));
        reset = reset && sc > 0.f && get(f.descale(gpt2_fp8_delayed_slot(t))) == (float)(1.0 / (double)sc);
    }
    check_exact("fp8 delayed forward start: amaxes zeroed but the weights', activations' descales 1 / scale", reset);
    gpt2_fp8_free(&f);
}

int main(int argc, char** argv) {
    kernel_tests_begin(argc, argv);
    if (!engine_options().fp8_blocks) {  // delayed scaling: refused with block scales
        test_delayed_table();
        test_delayed_update();
    }
    const std::string why = gpt2_fp8_problem(64, 16, device_info().prop.major);
    if (!kFloatXIsBF16 || device_info().prop.major < 9) {
        check_exact("fp8 linear layers refused here: " + why, !why.empty());
        return kernel_tests_end();
    }
    check_exact("fp8 linear layers: C 64, B*T 16 on this device taken", why.empty());
    check_exact("fp8 linear layers: B*T 24 refused", !gpt2_fp8_problem(64, 24, 9).empty());
    check_exact("fp8 linear layers: C 72 refused", !gpt2_fp8_problem(72, 16, 9).empty());
    GPT2Config c;
    c.max_seq_len = 64, c.vocab_size = 100, c.padded_vocab_size = padded_vocab(100);
    const bool blocks = engine_options().fp8_blocks;
    c.num_layers = 2, c.num_heads = 4, c.channels = blocks ? 192 : 64;  // blocks: C 1.5 blocks, as d48's 12.5
    const std::vector<float> params = random_vec(gpt2_num_parameters(c), 0.02f);
    floatX* d_params = upload(params);
    const GPT2Params p(c, d_params);
    const int N = 208;  // B*T: a multiple of 16, not of the GEMMs' tiles (blocks: 1.625 of 128 rows)
    Fp8Layers f;
    // the lm_head's too (-fp8 2); blocks: room for more rows than run (the kept grids' bands as at an evaluation)
    gpt2_fp8_allocate(&f, c.num_layers, c.channels, blocks ? 256 : N, c.padded_vocab_size);
    // as a step runs them: every layer's forwards (weights cast as each layer begins), then the backwards from the
    // last layer to the first, so one layer's casts must not touch another's weights, slots or scales
    std::vector<Case> cases;
    for (int l = 0; l < c.num_layers; l++)
        for (int k = 0; k < kFp8Linears; k++) cases.push_back(make_case(p, c.channels, l, (Fp8Linear)k, N));
    float* reduce;
    cudaCheck(cudaMalloc(&reduce, column_sum_scratch_floats(N, 4 * c.channels) * sizeof(float)));
    gpt2_fp8_begin_forward(f, 0);
    for (Case& t : cases) {
        if (t.k == kFp8Qkv) gpt2_fp8_cast_weights(f, p, t.l, 0);
        gpt2_fp8_forward(f, t.l, t.k, t.d_out, t.d_inp, t.d_bias, N, 0, false, t.pre_gelu);
    }
    // the backward reads the transposes the forwards kept, never inp: poisoned here, the gradients must not see it
    // (but LLMC_FP8_RECAST's attproj and fcproj, which cast their inp again: given it, the same references hold)
    for (Case& t : cases)
        if (!(f.recast && gpt2_fp8_detail::recast_input(t.k)))
            cudaCheck(cudaMemset(t.d_inp, 0xFF, (size_t)t.N * t.in * sizeof(floatX)));
    for (auto t = cases.rbegin(); t != cases.rend(); ++t)
        gpt2_fp8_backward(f, t->l, t->k, t->d_dinp, t->d_dW, t->d_db, t->d_dout, N, reduce, 0, false, nullptr,
                          t->d_inp, t->pre_gelu);
    for (Case& t : cases) check_case(f, t), free_case(t);
    check_lm_head(f, p, N);
    cudaFree(reduce);
    gpt2_fp8_free(&f);
    cudaFree(d_params);
    return kernel_tests_end();
}
