// Decode attention (llmc/attention_decode.cuh): one new token per sequence against its KV cache, the cache length
// split over blocks and the partials merged through their log-sum-exp. Validated against an fp64 CPU reference on
// fresh random caches with different lengths per sequence (1, not a multiple of the chunk, exactly a chunk, long),
// outputs and partials poisoned, each shape run twice (bit-identical; the merge's counts reset); then timed at generation's shapes, with the bytes of cache read per second.
// -c (the check only) runs in make test on GPU machines.
// Build: make -C dev/cuda attention_decode      Run: ./attention_decode [-c]
#include "common.h"
#include "llmc/attention_decode.cuh"

namespace {

struct DecodeShape {
    int B, NH, max_T, HS;
    std::vector<int> len;  // per sequence, 1..max_T
};

// out (b, h) = softmax(q·Kᵀ / sqrt(HS)) V over positions 0 .. len[b]-1, in double.
std::vector<double> reference(const DecodeShape& s, const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v) {
    std::vector<double> out((size_t)s.B * s.NH * s.HS, 0.0);
    const double scale = 1.0 / std::sqrt((double)s.HS);
#pragma omp parallel for
    for (int bh = 0; bh < s.B * s.NH; bh++) {
        const int n = s.len[bh / s.NH];
        std::vector<double> w(n);
        double mx = -INFINITY;
        for (int t = 0; t < n; t++) {
            double dot = 0;
            for (int d = 0; d < s.HS; d++) dot += (double)q[(size_t)bh * s.HS + d] * k[((size_t)bh * s.max_T + t) * s.HS + d];
            w[t] = dot * scale;
            mx = std::max(mx, w[t]);
        }
        double sum = 0;
        for (int t = 0; t < n; t++) sum += w[t] = std::exp(w[t] - mx);
        for (int t = 0; t < n; t++)
            for (int d = 0; d < s.HS; d++)
                out[(size_t)bh * s.HS + d] += w[t] / sum * v[((size_t)bh * s.max_T + t) * s.HS + d];
    }
    return out;
}

struct Problem {
    DecodeShape s;
    DeviceBuffer<__nv_bfloat16> q, k, v, out;
    DeviceBuffer<int> len;
    DeviceBuffer<char> workspace;
    std::vector<float> hq, hk, hv;
    explicit Problem(const DecodeShape& shape) : s(shape) {
        const size_t rows = (size_t)s.B * s.NH;
        hq = random_normal(rows * s.HS);
        hk = random_normal(rows * s.max_T * s.HS);
        hv = random_normal(rows * s.max_T * s.HS);
        q.resize(hq.size());
        k.resize(hk.size());
        v.resize(hv.size());
        q.upload(round_to_bf16(hq));
        k.upload(round_to_bf16(hk));
        v.upload(round_to_bf16(hv));
        out.resize(rows * s.HS);
        len.resize(s.B);
        len.upload(s.len);
        workspace.resize(attention_decode_workspace_bytes(s.B, s.NH, s.max_T, s.HS));
        cudaCheck(attention_decode_workspace_init(workspace.ptr, s.B, s.NH, s.max_T, s.HS));
    }
    void run() {
        cudaCheck(attention_decode(out.ptr, q.ptr, k.ptr, v.ptr, len.ptr, s.B, s.NH, s.max_T, s.HS, workspace.ptr));
    }
};

bool check(const DecodeShape& s) {
    printf("  B%d NH%d max_T %d HS%d lengths", s.B, s.NH, s.max_T, s.HS);
    for (size_t i = 0; i < s.len.size() && i < 6; i++) printf(" %d", s.len[i]);
    printf("%s\n", s.len.size() > 6 ? " ..." : "");
    Problem p(s);
    p.workspace.poison();
    cudaCheck(attention_decode_workspace_init(p.workspace.ptr, s.B, s.NH, s.max_T, s.HS));
    const std::vector<double> ref = reference(s, p.hq, p.hk, p.hv);
    bool ok = true;
    std::vector<__nv_bfloat16> first;
    for (int call = 0; call < 2; call++) {  // the second call checks that the first left the counts at zero
        p.out.poison();
        p.run();
        cudaCheck(cudaDeviceSynchronize());
        const std::vector<__nv_bfloat16> out = p.out.download();
        ok = validate(call == 0 ? "out" : "out, 2nd call", out, ref, bf16_tolerance(rms(ref))) && ok;
        if (call == 0) first = out;
        else if (memcmp(first.data(), out.data(), out.size() * sizeof(out[0])) != 0) {
            printf("    the 2nd call differs from the 1st (not deterministic)\n");
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
        {6, 25, 1024, 128, {1024, 1, 700, 64, 65, 999}},  // a large grid: the 4-warp kernel at HS 128
        {1, 25, 1024, 64, {777}},
    };
    int failures = 0;
    printf("validation against the fp64 CPU reference (bf16 inputs; rel-L2 <= 5e-3)\n");
    for (const DecodeShape& s : checks) failures += check(s) ? 0 : 1;
    if (failures) {
        printf("VALIDATION FAILED: %d of %zu checks\n", failures, checks.size());
        return 1;
    }
    printf("validation: all %zu checks passed\n", checks.size());
    if (check_only) return 0;

    printf("\nbenchmark: median of 50 calls; cache GB/s = 2·B·NH·len·HS·2 bytes / warm time\n");
    for (int B : {1, 8, 64}) {
        for (int len : {128, 320, 1024}) {
            for (int NH_HS : {12 * 64, 25 * 64}) {  // d12 (12 heads), d48 (25 heads) at HS 64
                DecodeShape s{B, NH_HS / 64, 1024, 64, std::vector<int>(B, len)};
                Problem p(s);
                const Timing t = benchmark([&] { p.run(); }, 50);
                const double bytes = 2.0 * B * s.NH * len * 64 * 2;
                printf("decode B%-3d NH%-3d len %-5d HS64  cold %.4f ms  warm %.4f ms  %7.1f GB/s\n", B, s.NH, len,
                       t.cold_ms, t.warm_ms, bytes / (t.warm_ms * 1e6));
            }
        }
    }
    return 0;
}
