// AdamW over a GPT-2 model's whole parameter table, the engine's kernels (llmc/kernels/adamw.cuh): the update is bound by
// memory (28 bytes per parameter in bf16 builds: fp32 master weight, m and v read and written, the bf16 gradient
// read and the bf16 parameter written), so next to the time this prints the rate that makes (the H200's DRAM peak
// is 4.8 TB/s).
//   variant 0: adamw_update, what the engine calls (the chunked kernel for GPT-2's tables)
//   variant 1: the scalar kernel (one grid-stride row of blocks per tensor: tensors of odd sizes)
//   variants 2-7: the chunked kernel: groups of 4 elements per thread (unroll), threads per block, evict-first
//   or plain loads and stores (variant 2 is the engine's choice)
// Validation first, on a table with GPT-2's structure and small sizes plus odd tensors: master weights, m and v
// against the fp64 CPU reference (reference/gpt2.h; rel-L2 <= 1e-5 and the element-wise bound of
// fp32_tolerance on m and v, the weight change within 1e-4 relative), every bf16 parameter one of the two bf16
// neighbours of its master weight (stochastic rounding; parameters poisoned first), and every variant bit-identical
// to variant 1 on every output.
// Build: make -C dev/cuda adamw      Run: ./adamw [-r repeats] [-c]  (-c: validation only)
//   -DADAMW_ENGINE_ONLY: only variant 0 (builds against an older tree's llmc/ to time it in the same call)
#include "common.h"
#include "llmc/gpt2/gpt2_config.h"
#include "llmc/kernels/adamw.cuh"
#include "reference/gpt2.h"

static_assert(kFloatXIsBF16, "adamw.cu is built without -DENABLE_FP32: it times the engine's bf16 update");

struct Table {
    std::vector<size_t> sizes;
    std::vector<float> weight_decay;
    size_t total() const {
        size_t n = 0;
        for (size_t s : sizes) n += s;
        return n;
    }
    AdamWTensorTable device_table() const {
        AdamWTensorTable t{};
        size_t at = 0;
        for (size_t i = 0; i < sizes.size(); i++)
            t.offset[i] = at, t.size[i] = sizes[i], t.weight_decay[i] = weight_decay[i], at += sizes[i];
        return t;
    }
};

static Table gpt2_table(const GPT2Config& c) {
    Table t;
    for (const TensorSpec& s : gpt2_parameter_table(c))
        t.sizes.push_back(s.numel), t.weight_decay.push_back(s.weight_decay ? 0.1f : 0.0f);
    return t;
}

struct Buffers {
    DeviceBuffer<floatX> params, grads;
    DeviceBuffer<float> master, m, v;
    explicit Buffers(size_t n) : params(n), grads(n), master(n), m(n), v(n) {}
};

constexpr float kLr = 3e-4f, kBeta1 = 0.9f, kBeta2 = 0.95f, kEps = 1e-8f, kGradScale = 0.8f;
constexpr int kStep = 7;
constexpr uint64_t kSeed = 1337;

static const char* variant_name(int variant) {
    static const char* names[] = {"adamw_update (engine)", "scalar kernel",       "chunked u1 t256 cs",
                                  "chunked u1 t512 cs",    "chunked u1 t128 cs",  "chunked u1 t256 plain",
                                  "chunked u2 t256 cs",    "chunked u4 t256 cs"};
    return names[variant];
}

static void run_variant(int variant, Buffers& b, const Table& table) {
    const AdamWTensorTable t = table.device_table();
    const int n = (int)table.sizes.size();
    if (variant == 0) {
        adamw_update(b.params.ptr, b.master.ptr, b.grads.ptr, b.m.ptr, b.v.ptr, t, n, kLr, kBeta1, kBeta2, kEps,
                     kGradScale, kStep, kSeed);
        return;
    }
#ifndef ADAMW_ENGINE_ONLY
    const AdamWStep s = adamw_step(kLr, kBeta1, kBeta2, kEps, kGradScale, kStep, kSeed);
    auto chunked = [&](auto kernel, int unroll, int threads) {
        const size_t blocks = adamw_chunk_blocks(t, n, unroll, threads);
        kernel<<<(unsigned)blocks, threads>>>(b.params.ptr, b.master.ptr, b.grads.ptr, b.m.ptr, b.v.ptr, t, n, s);
    };
    switch (variant) {
    case 1:
        adamw_kernel<<<dim3(2 * device_sm_count(), n), 512>>>(b.params.ptr, b.master.ptr, b.grads.ptr, b.m.ptr,
                                                              b.v.ptr, t, s);
        break;
    case 2: chunked(adamw_kernel_chunks<1, 256, true>, 1, 256); break;
    case 3: chunked(adamw_kernel_chunks<1, 512, true>, 1, 512); break;
    case 4: chunked(adamw_kernel_chunks<1, 128, true>, 1, 128); break;
    case 5: chunked(adamw_kernel_chunks<1, 256, false>, 1, 256); break;
    case 6: chunked(adamw_kernel_chunks<2, 256, true>, 2, 256); break;
    case 7: chunked(adamw_kernel_chunks<4, 256, true>, 4, 256); break;
    }
    cudaCheckLaunch();
#endif
}

#ifdef ADAMW_ENGINE_ONLY
constexpr int kVariants = 1;
#else
constexpr int kVariants = 8;
#endif

struct HostState {
    std::vector<float> master, m, v, grads;  // grads as bf16 values
};
static HostState fill(Buffers& b, size_t n) {
    HostState h;
    h.master = random_normal(n, 0.05f), h.m = random_normal(n, 1e-3f), h.v = random_normal(n, 1e-3f);
    for (float& x : h.v) x = x * x;
    h.grads = random_normal(n, 0.01f);
    b.grads.upload(round_to_bf16(h.grads));
    b.master.upload(h.master), b.m.upload(h.m), b.v.upload(h.v);
    b.params.poison();
    return h;
}

// One variant on fresh buffers from h; returns the outputs' bytes (params, master, m, v).
static std::vector<std::vector<uint8_t>> outputs(int variant, Buffers& b, const Table& table, const HostState& h) {
    b.master.upload(h.master), b.m.upload(h.m), b.v.upload(h.v);
    b.params.poison();
    run_variant(variant, b, table);
    cudaCheck(cudaDeviceSynchronize());
    auto bytes = [](const auto& buf) {
        const auto host = buf.download();
        const uint8_t* p = reinterpret_cast<const uint8_t*>(host.data());
        return std::vector<uint8_t>(p, p + buf.bytes());
    };
    return {bytes(b.params), bytes(b.master), bytes(b.m), bytes(b.v)};
}

// variants: how many to run (the chunked kernel needs sizes that are multiples of 4)
static bool validate_table(const char* name, const Table& table, int variants) {
    const size_t n = table.total();
    Buffers b(n);
    const HostState h = fill(b, n);
    printf("  %s: %zu tensors, %zu parameters\n", name, table.sizes.size(), n);
    // fp64 reference from the same (bf16-rounded) gradients
    std::vector<double> p = to_double(h.master), m = to_double(h.m), v = to_double(h.v), g(n);
    for (size_t i = 0; i < n; i++) g[i] = (double)kGradScale * h.grads[i];  // h.grads: rounded to bf16 by fill
    size_t at = 0;
    for (size_t t = 0; t < table.sizes.size(); t++) {
        reference::adamw_update(p.data() + at, g.data() + at, m.data() + at, v.data() + at, table.sizes[t], (double)kLr,
                          (double)kBeta1, (double)kBeta2, (double)kEps, (double)table.weight_decay[t], kStep);
        at += table.sizes[t];
    }
    bool ok = true;
    std::vector<std::vector<uint8_t>> first;
    for (int variant = 0; variant < variants; variant++) {
        const auto out = outputs(variant, b, table, h);
        printf("   %-24s\n", variant_name(variant));
        const float* master = reinterpret_cast<const float*>(out[1].data());
        std::vector<float> delta(n);  // the change, taken in fp32
        std::vector<double> ref_delta(n);
        for (size_t i = 0; i < n; i++) delta[i] = master[i] - h.master[i], ref_delta[i] = p[i] - h.master[i];
        ok &= validate("delta", delta, ref_delta, {1e-4 * rms(ref_delta), FLT_EPSILON, 1e-4});
        std::vector<float> mo(n), vo(n);
        memcpy(mo.data(), out[2].data(), n * 4), memcpy(vo.data(), out[3].data(), n * 4);
        ok &= validate("m", mo, m, fp32_tolerance());
        ok &= validate("v", vo, v, fp32_tolerance());
        // stochastic rounding: each parameter one of the two bf16 neighbours of its master weight
        const __nv_bfloat16* params = reinterpret_cast<const __nv_bfloat16*>(out[0].data());
        size_t bad = 0, up = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t bits;
            memcpy(&bits, &master[i], 4);
            const uint32_t down_bits = bits & 0xFFFF0000u, up_bits = down_bits + 0x10000u;
            float down, upv, got = __bfloat162float(params[i]);
            memcpy(&down, &down_bits, 4), memcpy(&upv, &up_bits, 4);
            if (!(got == down || got == upv)) bad++;
            up += got == upv && upv != down;
        }
        const bool sr_ok = bad == 0 && up > 0;
        printf("    params: %zu not a bf16 neighbour of the master weight, %zu rounded away from zero  %s\n", bad, up,
               sr_ok ? "ok" : "FAIL");
        ok &= sr_ok;
        if (variant == 0) {
            first = out;
        } else {
            bool same = true;
            for (size_t k = 0; k < out.size(); k++) same &= out[k] == first[k];
            printf("    bit-identical to %s: %s\n", variant_name(0), same ? "ok" : "FAIL");
            ok &= same;
        }
    }
    return ok;
}

int main(int argc, char** argv) {
    int repeats = 20;
    bool check_only = false;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-c") check_only = true;
        else if (a == "-r" && i + 1 < argc && positive_int(argv[i + 1])) repeats = positive_int(argv[++i]);
        else { fprintf(stderr, "usage: %s [-r repeats] [-c]\n", argv[0]); return 1; }
    }
    print_device();
    // GPT-2's table at d6 (with a vocabulary of 1000), sizes that leave partial chunks of every variant, and odd
    // sizes (the scalar kernel's path in variant 0; the chunked variants do not take them)
    GPT2Config d6;
    gpt2_preset("d6", &d6, 64, 1000);
    const Table small = gpt2_table(d6);
    const Table partial{{4, 4100, 12, 70004, 8}, {0.1f, 0.0f, 0.1f, 0.1f, 0.0f}};
    const Table odd{{1, 4097, 12, 70001, 3}, {0.1f, 0.0f, 0.1f, 0.1f, 0.0f}};
    printf("validation (fp64 CPU reference, parameters poisoned):\n");
    bool ok = validate_table("d6, V=1000", small, kVariants);
    ok &= validate_table("partial chunks", partial, kVariants);
    ok &= validate_table("odd sizes", odd, std::min(kVariants, 2));
    printf("validation: %s\n", ok ? "all checks passed" : "FAILED");
    if (!ok) return 1;
    if (check_only) return 0;

    printf("\n%-8s %-24s %12s %10s %10s %8s\n", "model", "variant", "parameters", "cold ms", "warm ms", "GB/s");
    for (const char* preset : {"d12", "d48"}) {
        GPT2Config c;
        if (!gpt2_preset(preset, &c)) { fprintf(stderr, "error: unknown preset %s\n", preset); return 1; }
        const Table table = gpt2_table(c);
        const size_t n = table.total();
        Buffers b(n);
        fill(b, n);
        for (int variant = 0; variant < kVariants; variant++) {
            // a step-sized update leaves the state in range for the next: every call is a valid AdamW step
            const Timing tm = benchmark([&] { run_variant(variant, b, table); }, repeats);
            printf("%-8s %-24s %12zu %10.3f %10.3f %8.0f\n", preset, variant_name(variant), n, tm.cold_ms, tm.warm_ms,
                   28.0 * n / (tm.cold_ms * 1e6));
        }
    }
    return 0;
}
