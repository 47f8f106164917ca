// Decode attention (llmc/kernels/attention/attention_decode.cuh): one new token per sequence against its KV cache, by both kernels
// (the cache split over blocks and the partials merged through their log-sum-exp; a block per sequence x head).
// Validated against an fp64 CPU reference on fresh random caches with different lengths per sequence (1, 2, not a
// multiple of the chunk, exactly a chunk, long), with the new token's K and V in the cache or appended by the call
// (then its cache positions are poisoned before, and the whole cache is compared bit for bit after), outputs and
// partials poisoned, each shape run twice (bit-identical; the merge's counts reset); then timed at generation's
// shapes, with the bytes of cache read per second. Also rows mapped to cache sequences (seq), several rows of one
// sequence at consecutive lengths, as a server's prompt chunk attends (its K and V in the cache before the call). -c (the check only) runs in make test on GPU machines.
// Build: make -C dev/cuda attention_decode      Run: ./attention_decode [-c]
#include "common.h"
#include "llmc/kernels/attention/attention_decode.cuh"

namespace {

struct DecodeShape {
    int B, NH, max_T, HS;
    std::vector<int> len;  // per row, 1..max_T
    std::vector<int> seq = {};  // row b reads cache sequence seq[b] (empty: b)
    int seq_of(int b) const { return seq.empty() ? b : seq[b]; }
};

// out (b, h) = softmax(q·Kᵀ / sqrt(HS)) V over positions 0 .. len[b]-1, in double.
std::vector<double> expected(const DecodeShape& s, const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v) {
    std::vector<double> out((size_t)s.B * s.NH * s.HS, 0.0);
    const double scale = 1.0 / std::sqrt((double)s.HS);
#pragma omp parallel for
    for (int bh = 0; bh < s.B * s.NH; bh++) {
        const int n = s.len[bh / s.NH];
        const size_t kv = (size_t)s.seq_of(bh / s.NH) * s.NH + bh % s.NH;  // the row's sequence's head
        std::vector<double> w(n);
        double mx = -INFINITY;
        for (int t = 0; t < n; t++) {
            double dot = 0;
            for (int d = 0; d < s.HS; d++) dot += (double)q[(size_t)bh * s.HS + d] * k[(kv * s.max_T + t) * s.HS + d];
            w[t] = dot * scale;
            mx = std::max(mx, w[t]);
        }
        double sum = 0;
        for (int t = 0; t < n; t++) sum += w[t] = std::exp(w[t] - mx);
        for (int t = 0; t < n; t++)
            for (int d = 0; d < s.HS; d++)
                out[(size_t)bh * s.HS + d] += w[t] / sum * v[(kv * s.max_T + t) * s.HS + d];
    }
    return out;
}

// The engine's call: q, and with append the new token's K and V, read from (B, 3, NH, HS) rows as the QKV
// projection writes them; with append the cache holds garbage at len[b] - 1 until the call writes the new rows.
struct Problem {
    DecodeShape s;
    DecodeAttentionKernel kernel;
    bool append;
    DeviceBuffer<__nv_bfloat16> qkv, k, v, out;
    DeviceBuffer<int> len, seq;
    DeviceBuffer<char> workspace;
    std::vector<float> hq, hk, hv;
    std::vector<__nv_bfloat16> k16, v16;  // the whole cache, the new rows included
    Problem(const DecodeShape& shape, DecodeAttentionKernel which, bool append_new)
        : s(shape), kernel(which), append(append_new) {
        const size_t rows = (size_t)s.B * s.NH, C = (size_t)s.NH * s.HS;
        hq = random_normal(rows * s.HS);
        hk = random_normal(rows * s.max_T * s.HS);
        hv = random_normal(rows * s.max_T * s.HS);
        const std::vector<__nv_bfloat16> q16 = round_to_bf16(hq);
        k16 = round_to_bf16(hk);
        v16 = round_to_bf16(hv);
        std::vector<__nv_bfloat16> hqkv(s.B * 3 * C);
        for (int b = 0; b < s.B; b++)
            for (size_t i = 0; i < C; i++) {  // i = h·HS + d
                const size_t h = i / s.HS, d = i % s.HS, at = ((b * s.NH + h) * s.max_T + s.len[b] - 1) * s.HS + d;
                hqkv[b * 3 * C + i] = q16[b * C + i];
                hqkv[b * 3 * C + C + i] = k16[at];
                hqkv[b * 3 * C + 2 * C + i] = v16[at];
            }
        qkv.resize(hqkv.size());
        qkv.upload(hqkv);
        k.resize(k16.size());
        v.resize(v16.size());
        out.resize(rows * s.HS);
        len.resize(s.B);
        len.upload(s.len);
        if (!s.seq.empty()) seq.resize(s.B), seq.upload(s.seq);
        workspace.resize(attention_decode_workspace_bytes(s.B, s.NH, s.max_T, s.HS));
        cudaCheck(attention_decode_workspace_init(workspace.ptr, s.B, s.NH, s.max_T, s.HS));
        reset_cache();
    }
    // the cache as the call expects it: with append, the new positions poisoned (NaN)
    void reset_cache() {
        std::vector<__nv_bfloat16> hk_in = k16, hv_in = v16;
        if (append)
            for (int bh = 0; bh < s.B * s.NH; bh++)
                for (int d = 0; d < s.HS; d++) {
                    const size_t at = ((size_t)bh * s.max_T + s.len[bh / s.NH] - 1) * s.HS + d;
                    hk_in[at] = hv_in[at] = __ushort_as_bfloat16(0xFFFF);
                }
        k.upload(hk_in);
        v.upload(hv_in);
    }
    void run() {
        const size_t C = (size_t)s.NH * s.HS;
        cudaCheck(attention_decode(out.ptr, qkv.ptr, k.ptr, v.ptr, len.ptr, s.B, s.NH, s.max_T, s.HS, workspace.ptr, 0,
                                   3 * C, false, append ? qkv.ptr + C : nullptr, kernel, s.seq.empty() ? nullptr : seq.ptr));
    }
};

const char* kernel_name(DecodeAttentionKernel k) { return k == DecodeAttentionKernel::PerHead ? "per head" : "split"; }

bool check(const DecodeShape& s, DecodeAttentionKernel kernel, bool append) {
    printf("  %-8s%s B%d NH%d max_T %d HS%d lengths", kernel_name(kernel), append ? " +append" : "        ", s.B, s.NH,
           s.max_T, s.HS);
    for (size_t i = 0; i < s.len.size() && i < 6; i++) printf(" %d", s.len[i]);
    printf("%s%s\n", s.len.size() > 6 ? " ..." : "", s.seq.empty() ? "" : ", rows mapped to sequences");
    Problem p(s, kernel, append);
    p.workspace.poison();
    cudaCheck(attention_decode_workspace_init(p.workspace.ptr, s.B, s.NH, s.max_T, s.HS));
    const std::vector<double> ref = expected(s, p.hq, p.hk, p.hv);
    bool ok = true;
    std::vector<__nv_bfloat16> first;
    for (int call = 0; call < 2; call++) {  // the second call checks that the first left the counts at zero
        p.out.poison();
        p.reset_cache();
        p.run();
        cudaCheck(cudaDeviceSynchronize());
        const std::vector<__nv_bfloat16> out = p.out.download();
        ok = validate(call == 0 ? "out" : "out, 2nd call", out, ref, bf16_tolerance(rms(ref))) && ok;
        if (call == 0) first = out;
        else if (memcmp(first.data(), out.data(), out.size() * sizeof(out[0])) != 0) {
            printf("    the 2nd call differs from the 1st (not deterministic)\n");
            ok = false;
        }
        // the cache after the call: every position as before, the new ones = the new rows
        if (memcmp(p.k.download().data(), p.k16.data(), p.k.bytes()) != 0 ||
            memcmp(p.v.download().data(), p.v16.data(), p.v.bytes()) != 0) {
            printf("    the cache after the call is not the cache with the new token's K and V\n");
            ok = false;
        }
    }
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    bool check_only = false;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-c") check_only = true;
        else {
            fprintf(stderr, "usage: %s [-c]   (-c: validate only)\n", argv[0]);
            return a == "-h" ? 0 : 1;
        }
    }
    print_device();
    const std::vector<DecodeShape> checks = {
        {1, 1, 8, 64, {1}},
        {3, 2, 300, 64, {1, 65, 300}},
        {4, 12, 1024, 64, {64, 63, 1000, 1024}},
        {2, 3, 515, 128, {515, 129}},
        {6, 25, 1024, 128, {1024, 1, 700, 64, 65, 999}},  // a large grid: the 4-warp split kernel at HS 128
        {1, 25, 1024, 64, {777}},
        {40, 12, 320, 64, {}},  // batch 40 of d12: Auto's per-head grid (with lengths 1 .. 320 below)
        // rows of a prompt chunk: several rows of one sequence at consecutive lengths, beside other sequences' rows
        {8, 12, 300, 64, {100, 101, 102, 103, 7, 1, 2, 300}, {3, 3, 3, 3, 0, 5, 5, 1}},
        {5, 4, 515, 128, {1, 2, 3, 515, 64}, {1, 1, 1, 4, 0}},
    };
    int failures = 0, count = 0;
    printf("validation against the fp64 CPU reference (bf16 inputs; rel-L2 <= 5e-3), both kernels, the new token's K "
           "and V in the cache or appended by the call\n");
    for (DecodeShape s : checks) {
        if (s.len.empty())
            for (int b = 0; b < s.B; b++) s.len.push_back(b == 0 ? 1 : b == 1 ? 2 : 1 + (b * 97) % s.max_T);
        for (DecodeAttentionKernel kernel : {DecodeAttentionKernel::Split, DecodeAttentionKernel::PerHead})
            for (bool append : {false, true}) {
                if (append && !s.seq.empty()) continue;  // rows sharing a sequence: appended before the call
                failures += check(s, kernel, append) ? 0 : 1;
                count++;
            }
    }
    if (failures) {
        printf("VALIDATION FAILED: %d of %d checks\n", failures, count);
        return 1;
    }
    printf("validation: all %d checks passed\n", count);
    if (check_only) return 0;

    printf("\nbenchmark: median of 50 calls, the new K and V appended by the call (as the cuBLASLt decode path runs "
           "it); cache GB/s = 2·B·NH·len·HS·2 bytes / warm time; max_T = max(len, 320)\n");
    for (int B : {1, 8, 16, 32, 64}) {
        for (int len : {128, 320, 512, 1024}) {
            for (int NH_HS : {12 * 64, 25 * 64}) {  // d12 (12 heads), d48 (25 heads) at HS 64
                DecodeShape s{B, NH_HS / 64, std::max(len, 320), 64, std::vector<int>(B, len)};
                Problem p(s, DecodeAttentionKernel::Split, true);
                for (DecodeAttentionKernel kernel : {DecodeAttentionKernel::Split, DecodeAttentionKernel::PerHead}) {
                    p.kernel = kernel;
                    const Timing t = benchmark([&] { p.run(); }, 50);
                    const double bytes = 2.0 * B * s.NH * len * 64 * 2;
                    const bool automatic = attention_decode_per_head(B, s.NH, DecodeAttentionKernel::Auto) ==
                                           (kernel == DecodeAttentionKernel::PerHead);
                    printf("decode B%-3d NH%-3d len %-5d HS64 %-8s cold %.4f ms  warm %.4f ms  %7.1f GB/s%s\n", B, s.NH,
                           len, kernel_name(kernel), t.cold_ms, t.warm_ms, bytes / (t.warm_ms * 1e6),
                           automatic ? "  (Auto)" : "");
                }
            }
        }
    }
    return 0;
}
