// The optimizer's kernels: the global norm, AdamW (every variant agreeing), the clipping scale; against the CPU reference in double.
//   ./tests/gpu/kernels/test_optimizer [seed]   (tests/gpu/kernels/kernel_checks.cuh: inputs, poison, tolerances)
#include "llmc/kernels/adamw.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "tests/gpu/kernels/kernel_checks.cuh"

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
        reference::adamw_update(p.data() + o, g.data() + o, md.data() + o, vd.data() + o, sizes[i], (double)lr, (double)b1,
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

int main(int argc, char** argv) {
    kernel_tests_begin(argc, argv);
    test_global_norm(1000003);
    test_global_norm(8 * 99991);  // whole packs only
    test_adamw({1000, 37, 4099});
    test_adamw({1000, 36, 4100});
    test_adamw_kernels_agree();
    test_clip_scale();
    return kernel_tests_end();
}
