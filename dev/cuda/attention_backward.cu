// Causal self-attention backward: dqkv (B, T, 3, NH, HS) from dout (B, T, NH·HS), the input qkv and the
// forward's out and LSE.
//   1  materialised: the engine's backend, llmc/kernels/attention/attention_materialized.cuh, built in fp32
//      (this directory builds with -DENABLE_FP32): dP = dO·Vᵀ, dV = Pᵀ·dO, softmax backward in place (a warp
//      per row), dQ = dS·K, dK = dSᵀ·Q, all strided-batched cuBLASLt GEMMs; P comes from the engine's forward,
//      run before and not timed, as training saves it; "block" = threads per block of its permute/softmax kernels
//   2  FlashAttention-2 backward, fp32: D = rowsum(dO∘O); a dQ kernel (a quad of threads per query row, K/V
//      tiles streamed) and a dK/dV kernel (a quad per key row, Q/dO/LSE/D tiles streamed); P recomputed from
//      Q, K and LSE; no atomics
//   3  the same on bf16 tensor cores: llmc/kernels/attention/attention_flash*.cuh (what the engine trains with); its "block"
//      column is a tile configuration of attention_flash_configs.cuh, 0 = the default
//   4  Hopper (llmc/kernels/attention/attention_hopper_backward.cuh), TMA + wgmma, the deterministic two-kernel split of 2 and 3:
//      a dK/dV kernel (one block per 128 keys) and a dQ kernel (one per 128 queries) that recomputes S and dP;
//      the engine's default on Hopper, run as the engine runs it: each block also writes the column sums of its
//      dq, dk, dv tiles (the qkv bias gradient's partial rows), checked against the column sums of dqkv
//   5  Hopper, one fused kernel (FlashAttention-3's scheme): dQ partial sums added by TMA reduce-adds into an fp32
//      accumulator in a fixed order (a semaphore per query tile; attention_hopper_backward_ordered.cuh): deterministic
//   6  the same with unordered reduce-adds: faster where the ordering waits, not bit-reproducible
//      (4-6 need an sm_90a build on a compute-capability 9.0 GPU, else they are skipped)
// Every variant is validated against the fp64 CPU reference (reference/gpt2.h) at several shapes first.
// The benchmark also times forward + backward with the engine's flash kernels (variant 3), as PyTorch's
// SDPA baseline does.
// Build: make -C dev/cuda attention_backward     Run: ./attention_backward [-v 3] [-s "8,12,1024,64;..."]
#include "attention_common.h"
#include "attention_flash_configs.cuh"
#include "attention_hopper_backward_ordered.cuh"
#include "llmc/kernels/attention/attention_hopper_backward.cuh"
#include "llmc/kernels/attention/attention_materialized.cuh"
#include "reference/gpt2.h"

// ------------------------------------------------------------------------------------------ variant 2
// D[b,h,t] = dO[b,t,h,:]·O[b,t,h,:], one thread per row.
__global__ void rowdot_kernel(float* D, const float* dout, const float* out, int B, int T, int NH, int HS) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;  // over (b, h, t)
    if (idx >= B * NH * T) return;
    const int t = idx % T, h = (idx / T) % NH, b = idx / (T * NH);
    const size_t at = ((size_t)b * T + t) * NH * HS + (size_t)h * HS;
    float s = 0.f;
    for (int d = 0; d < HS; d++) s += dout[at + d] * out[at + d];
    D[idx] = s;
}

__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// dQ: a quad per query row (thread `part` owns dims part, part+4, ...); K/V tiles of 32 keys in shared memory.
template <int HS, int Br>
__global__ void __launch_bounds__(4 * Br) flash2_dq_fp32_kernel(float* dinp, const float* dout, const float* lse,
                                                                const float* D, const float* qkv, int T, int NH) {
    constexpr int Bc = 32, P = HS / 4;
    __shared__ float Ks[Bc][HS], Vs[Bc][HS];
    const int tid = threadIdx.x, part = tid & 3;
    const int q_tile = gridDim.x - 1 - blockIdx.x;
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const float* base = qkv + (size_t)b * T * stride + h * HS;
    const int q0 = q_tile * Br, row = q0 + tid / 4;
    const float scale = 1.f / sqrtf((float)HS);
    const size_t stat = ((size_t)b * NH + h) * T + row;
    const float lse2 = row < T ? lse[stat] * kLog2e : INFINITY, Drow = row < T ? D[stat] : 0.f;

    float q[P], dO[P], dq[P];
#pragma unroll
    for (int i = 0; i < P; i++) {
        q[i] = row < T ? base[(size_t)row * stride + part + 4 * i] * scale * kLog2e : 0.f;
        dO[i] = row < T ? dout[((size_t)b * T + row) * C + h * HS + part + 4 * i] : 0.f;
        dq[i] = 0.f;
    }
    const int kv_len = min(T, q0 + Br), num_kv = (kv_len + Bc - 1) / Bc;
    for (int j = 0; j < num_kv; j++) {
        __syncthreads();
        load_kv_tile_fp32<Bc, HS>(Ks, Vs, base, stride, C, j * Bc, T, tid, 4 * Br);
        __syncthreads();
        for (int y = 0; y < Bc; y++) {
            float s = 0.f, dp = 0.f;
#pragma unroll
            for (int i = 0; i < P; i++) {
                s += q[i] * Ks[y][part + 4 * i];
                dp += dO[i] * Vs[y][part + 4 * i];
            }
            s = quad_sum(s);
            dp = quad_sum(dp);
            const int key = j * Bc + y;
            const float p = key <= row ? exp2f(s - lse2) : 0.f;
            const float dS = p * (dp - Drow);
#pragma unroll
            for (int i = 0; i < P; i++) dq[i] += dS * Ks[y][part + 4 * i];
        }
    }
    if (row < T) {
#pragma unroll
        for (int i = 0; i < P; i++) dinp[(size_t)b * T * stride + (size_t)row * stride + h * HS + part + 4 * i] = dq[i] * scale;
    }
}

// dK, dV: a quad per key row; tiles of 32 queries (Q, dO, LSE, D) in shared memory, from the diagonal on.
template <int HS, int Bc>
__global__ void __launch_bounds__(4 * Bc) flash2_dkv_fp32_kernel(float* dinp, const float* dout, const float* lse,
                                                                 const float* D, const float* qkv, int T, int NH) {
    constexpr int Br = 32, P = HS / 4;
    __shared__ float Qs[Br][HS], dOs[Br][HS], Ls[Br], Ds[Br];
    const int tid = threadIdx.x, part = tid & 3;
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const float* base = qkv + (size_t)b * T * stride + h * HS;
    const int k0 = blockIdx.x * Bc, key = k0 + tid / 4;
    const float scale = 1.f / sqrtf((float)HS);
    const size_t stat0 = ((size_t)b * NH + h) * T;

    float k[P], v[P], dk[P], dv[P];
#pragma unroll
    for (int i = 0; i < P; i++) {
        k[i] = key < T ? base[(size_t)key * stride + C + part + 4 * i] * scale * kLog2e : 0.f;
        v[i] = key < T ? base[(size_t)key * stride + 2 * C + part + 4 * i] : 0.f;
        dk[i] = dv[i] = 0.f;
    }
    const int num_q = (T + Br - 1) / Br;
    for (int i0 = k0 / Br; i0 < num_q; i0++) {
        __syncthreads();
        for (int idx = tid; idx < Br * HS; idx += 4 * Bc) {
            const int r = idx / HS, d = idx % HS, row = i0 * Br + r;
            Qs[r][d] = row < T ? base[(size_t)row * stride + d] : 0.f;
            dOs[r][d] = row < T ? dout[((size_t)b * T + row) * C + h * HS + d] : 0.f;
        }
        for (int r = tid; r < Br; r += 4 * Bc) {
            const int row = i0 * Br + r;
            Ls[r] = row < T ? lse[stat0 + row] * kLog2e : INFINITY;
            Ds[r] = row < T ? D[stat0 + row] : 0.f;
        }
        __syncthreads();
        for (int y = 0; y < Br; y++) {
            float s = 0.f, dp = 0.f;
#pragma unroll
            for (int i = 0; i < P; i++) {
                s += k[i] * Qs[y][part + 4 * i];
                dp += v[i] * dOs[y][part + 4 * i];
            }
            s = quad_sum(s);
            dp = quad_sum(dp);
            const int row = i0 * Br + y;
            const float p = row >= key ? exp2f(s - Ls[y]) : 0.f;  // rows past T: Ls = +inf, p = 0
            const float dS = p * (dp - Ds[y]);
#pragma unroll
            for (int i = 0; i < P; i++) {
                dv[i] += p * dOs[y][part + 4 * i];
                dk[i] += dS * Qs[y][part + 4 * i];
            }
        }
    }
    if (key < T) {
        float* dst = dinp + (size_t)b * T * stride + (size_t)key * stride + h * HS;
#pragma unroll
        for (int i = 0; i < P; i++) {
            dst[C + part + 4 * i] = dk[i] * scale;
            dst[2 * C + part + 4 * i] = dv[i];
        }
    }
}

// ------------------------------------------------------------------------------------------ variants
struct Variant {
    int id;
    const char* name;
    bool bf16;
    std::vector<int> blocks;
};
static const std::vector<Variant> kVariants = {
    {1, "materialized-cublas", false, {32, 64, 128, 256, 512}},
    {2, "flash2-fp32", false, {32, 64}},
    {3, "flash2-bf16-mma", true, {0, 1, 2, 3, 4}},  // "block" = flash config, 0 = default
    {4, "hopper-two-kernels", true, {0}},          // sm_90a: dK/dV kernel + dQ kernel (deterministic)
    {5, "hopper-fused-ordered", true, {0}},        // sm_90a: one kernel, dQ reduce-adds in a fixed order
    {6, "hopper-fused-unordered", true, {0}},      // sm_90a: one kernel, unordered dQ reduce-adds (not deterministic)
};

struct Problem {
    AttentionShape s;
    DeviceBuffer<float> qkv32, dinp32, dout32, out32, lse, D;
    DeviceBuffer<__nv_bfloat16> qkv16, dinp16, dout16, out16;
    DeviceBuffer<float> hopper_ws;  // variants 4-6: dQ accumulator, D, semaphores
    DeviceBuffer<float> bias_partials;  // variant 4: partial column sums of dqkv
    MaterializedScratch mat;
    size_t n_inp() const { return (size_t)s.B * s.T * 3 * s.NH * s.HS; }
    size_t n_out() const { return (size_t)s.B * s.T * s.NH * s.HS; }
    size_t n_rows() const { return (size_t)s.B * s.NH * s.T; }
    Problem(const AttentionShape& shape, const Variant& v) : s(shape) {
        lse.resize(n_rows());
        D.resize(n_rows());
        if (v.bf16) {
            qkv16.resize(n_inp()); dinp16.resize(n_inp()); dout16.resize(n_out()); out16.resize(n_out());
        } else {
            qkv32.resize(n_inp()); dinp32.resize(n_inp()); dout32.resize(n_out()); out32.resize(n_out());
        }
        if (v.id == 1) mat.allocate(s);
        if (v.id >= 4) hopper_ws.resize((attention_hopper_backward_workspace_bytes(s.B, s.T, s.NH, s.HS) + 3) / 4);
        if (v.id == 4) bias_partials.resize((size_t)flash_hopper::backward_bias_partial_rows(s.B, s.T) * 3 * s.NH * s.HS);
    }
    void forward16(int block) {  // out16, lse from qkv16 with the engine's flash forward
        cudaCheck(attention_flash_forward_config(out16.ptr, lse.ptr, qkv16.ptr, s.B, s.T, s.NH, s.HS, 0, block));
    }
    // out32 and P (saved for variant 1) from qkv32 with the engine's materialized forward; the workspace is then
    // poisoned, since training lends it to other layers between the passes.
    void forward_materialized(int block) {
        attention_materialized_forward(out32.ptr, mat.att.ptr, qkv32.ptr, mat.workspace.ptr, s.B, s.T, s.NH * s.HS,
                                       s.NH, 0, block);
        mat.workspace.poison();
    }
};

template <int HS>
void run_flash2_fp32(int block, Problem& p) {
    const AttentionShape& s = p.s;
    const int rows = s.B * s.NH * s.T;
    rowdot_kernel<<<(rows + 255) / 256, 256>>>(p.D.ptr, p.dout32.ptr, p.out32.ptr, s.B, s.T, s.NH, s.HS);
    cudaCheckLaunch();
    dim3 grid((s.T + block - 1) / block, s.B * s.NH);
    if (block == 32) {
        flash2_dq_fp32_kernel<HS, 32><<<grid, 128>>>(p.dinp32.ptr, p.dout32.ptr, p.lse.ptr, p.D.ptr, p.qkv32.ptr, s.T, s.NH);
        cudaCheckLaunch();
        flash2_dkv_fp32_kernel<HS, 32><<<grid, 128>>>(p.dinp32.ptr, p.dout32.ptr, p.lse.ptr, p.D.ptr, p.qkv32.ptr, s.T, s.NH);
    } else {
        flash2_dq_fp32_kernel<HS, 64><<<grid, 256>>>(p.dinp32.ptr, p.dout32.ptr, p.lse.ptr, p.D.ptr, p.qkv32.ptr, s.T, s.NH);
        cudaCheckLaunch();
        flash2_dkv_fp32_kernel<HS, 64><<<grid, 256>>>(p.dinp32.ptr, p.dout32.ptr, p.lse.ptr, p.D.ptr, p.qkv32.ptr, s.T, s.NH);
    }
    cudaCheckLaunch();
}

void run_backward(int variant, int block, Problem& p) {
    const AttentionShape& s = p.s;
    switch (variant) {
        case 1:
            attention_materialized_backward(p.dinp32.ptr, p.dout32.ptr, p.qkv32.ptr, p.mat.att.ptr,
                                            p.mat.workspace.ptr, s.B, s.T, s.NH * s.HS, s.NH, 0, block);
            break;
        case 2:
            if (s.HS == 64) run_flash2_fp32<64>(block, p);
            else if (s.HS == 128) run_flash2_fp32<128>(block, p);
            else { fprintf(stderr, "error: head size %d: the dev variants are built for 64 and 128\n", s.HS); exit(1); }
            break;
        case 3:
            cudaCheck(attention_flash_backward_config(p.dinp16.ptr, p.dout16.ptr, p.out16.ptr, p.lse.ptr, p.qkv16.ptr,
                                                      s.B, s.T, s.NH, s.HS, p.D.ptr, 0, block));
            break;
        case 4:
        case 5:
        case 6: {
            if (!hopper::hopper_available()) {
                fprintf(stderr, "error: variant %d needs an sm_90a build on a compute-capability 9.0 GPU\n", variant);
                exit(1);
            }
            using flash_hopper::DqMode;
            if (variant == 5) {
                cudaCheck(attention_hopper_backward_ordered(p.dinp16.ptr, p.dout16.ptr, p.out16.ptr, p.lse.ptr,
                                                            p.qkv16.ptr, s.B, s.T, s.NH, s.HS, p.hopper_ws.ptr));
                break;
            }
            const DqMode mode = variant == 4 ? DqMode::TwoKernels : DqMode::Unordered;
            cudaCheck(attention_hopper_backward(p.dinp16.ptr, p.dout16.ptr, p.out16.ptr, p.lse.ptr, p.qkv16.ptr, s.B,
                                                s.T, s.NH, s.HS, p.hopper_ws.ptr, 0, mode,
                                                variant == 4 ? p.bias_partials.ptr : nullptr));
            break;
        }
    }
}

// Splits (B, T, 3, NH, HS) into its Q, K or V part.
template <typename T>
std::vector<T> part_of(const std::vector<T>& x, const AttentionShape& s, int which) {
    const size_t C = (size_t)s.NH * s.HS;
    std::vector<T> out((size_t)s.B * s.T * C);
    for (size_t bt = 0; bt < (size_t)s.B * s.T; bt++)
        for (size_t c = 0; c < C; c++) out[bt * C + c] = x[bt * 3 * C + which * C + c];
    return out;
}

// Variant 4's partial rows, summed in fp64, against the column sums (fp64) of the dqkv it stored: the same bf16
// values in another order, so each column within 1e-5 of its sum of magnitudes (the partial rows are fp32 sums of
// 64 rows by the tensor cores); NaN (a partial row or column left poisoned) fails. The k columns sum to ~0 (the
// softmax does not see a bias on the keys), so the bound is relative to magnitudes, not to the sum.
bool check_bias_sums(Problem& p) {
    const AttentionShape& s = p.s;
    const size_t C3 = 3 * (size_t)s.NH * s.HS, rows = (size_t)flash_hopper::backward_bias_partial_rows(s.B, s.T);
    const std::vector<float> partials = p.bias_partials.download();
    const std::vector<__nv_bfloat16> dqkv = p.dinp16.download();
    std::vector<double> got(C3, 0.0), want(C3, 0.0), mag(C3, 0.0);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < C3; c++) got[c] += partials[r * C3 + c];
    for (size_t bt = 0; bt < (size_t)s.B * s.T; bt++)
        for (size_t c = 0; c < C3; c++) {
            const double x = as_float(dqkv[bt * C3 + c]);
            want[c] += x, mag[c] += std::fabs(x);
        }
    size_t bad = 0;
    double worst = 0.0;
    for (size_t c = 0; c < C3; c++) {
        const double err = std::fabs(got[c] - want[c]), bound = 1e-5 * mag[c] + 1e-6;
        if (!(err <= bound)) bad++;
        if (std::isfinite(err)) worst = std::max(worst, err / bound);
    }
    printf("    %-6s %zu partial rows: %zu of %zu columns off the column sums of dqkv (worst at %.2f of the bound)  %s\n",
           "bias", rows, bad, C3, worst, bad == 0 ? "ok" : "FAIL");
    return bad == 0;
}

bool check(const Variant& v, int block, const AttentionShape& s) {
    if (v.id >= 4 && !hopper::hopper_available()) {
        printf("    skipped: needs an sm_90a build on a compute-capability 9.0 GPU\n");
        return true;
    }
    Problem p(s, v);
    const int C = s.NH * s.HS;
    std::vector<float> inp = random_normal(p.n_inp()), dout = random_normal(p.n_out());
    std::vector<double> dinp_ref(p.n_inp(), 0.0);
    if (v.bf16) {
        p.qkv16.upload(round_to_bf16(inp));
        p.dout16.upload(round_to_bf16(dout));
        p.forward16(0);  // out and LSE as training produces them
    } else {
        // out and LSE from the fp64 reference forward, rounded to fp32
        std::vector<double> inp_d = to_double(inp), out_d(p.n_out()), lse_d(p.n_rows());
        reference::attention_forward<double>(out_d.data(), lse_d.data(), inp_d.data(), s.B, s.T, C, s.NH);
        p.qkv32.upload(inp);
        p.dout32.upload(dout);
        p.out32.upload(to_float(out_d));
        p.lse.upload(to_float(lse_d));
        if (v.id == 1) {  // P as the engine's forward saves it (variant 1 reads neither out nor LSE)
            p.mat.att.poison();
            p.forward_materialized(block);
        }
    }
    std::vector<double> inp_d = to_double(inp), dout_d = to_double(dout);
    reference::attention_backward<double>(dinp_ref.data(), dout_d.data(), inp_d.data(), s.B, s.T, C, s.NH);

    if (v.bf16) p.dinp16.poison(); else p.dinp32.poison();
    p.D.poison();
    if (v.id >= 4) p.hopper_ws.poison();  // the ordered mode's first contributor must store, not add
    if (v.id == 4) p.bias_partials.poison();  // every partial row and column must be written
    run_backward(v.id, block, p);
    cudaCheck(cudaDeviceSynchronize());

    bool ok = true;
    const char* names[3] = {"dQ", "dK", "dV"};
    for (int which = 0; which < 3; which++) {
        std::vector<double> ref = part_of(dinp_ref, s, which);
        const double r = rms(ref);
        if (v.bf16) ok &= validate(names[which], part_of(p.dinp16.download(), s, which), ref, bf16_tolerance(r));
        else ok &= validate(names[which], part_of(p.dinp32.download(), s, which), ref,
                            Tolerance{1e-5 * std::max(1.0, r), FLT_EPSILON, 1e-5});
    }
    if (v.id == 4) ok &= check_bias_sums(p);
    return ok;
}

// Determinism: each deterministic bf16 backward (3, and on Hopper 4 and 5) twice on the same inputs must agree bit
// for bit; the workspace is poisoned in between, so nothing left over from the first run can help the second.
bool check_determinism() {
    const AttentionShape s = {4, 12, 1000, 64};
    bool all_same = true;
    for (int id : {3, 4, 5}) {
        if (id >= 4 && !hopper::hopper_available()) continue;
        const Variant& v = kVariants[id - 1];
        Problem p(s, v);
        std::vector<float> inp = random_normal(p.n_inp()), dout = random_normal(p.n_out());
        p.qkv16.upload(round_to_bf16(inp));
        p.dout16.upload(round_to_bf16(dout));
        p.forward16(0);
        run_backward(id, 0, p);
        std::vector<__nv_bfloat16> first = p.dinp16.download();
        std::vector<float> first_sums;  // variant 4's column sums
        if (id == 4) first_sums = p.bias_partials.download();
        p.dinp16.poison();
        if (id >= 4) p.hopper_ws.poison();
        if (id == 4) p.bias_partials.poison();
        run_backward(id, 0, p);
        std::vector<__nv_bfloat16> second = p.dinp16.download();
        std::vector<float> second_sums;
        if (id == 4) second_sums = p.bias_partials.download();
        const bool same = memcmp(first.data(), second.data(), first.size() * sizeof(__nv_bfloat16)) == 0 &&
                          memcmp(first_sums.data(), second_sums.data(), first_sums.size() * sizeof(float)) == 0;
        printf("  v%d determinism (two runs, B4 NH12 T1000 HS64): %s\n", id, same ? "bit-identical" : "DIFFERENT");
        all_same &= same;
    }
    return all_same;
}

void time_variant(const Variant& v, int block, const AttentionShape& s, int repeats) {
    const double fwd_flops = attention_forward_flops(s.B, s.NH, s.T, s.HS);
    Problem p(s, v);
    std::vector<float> inp = random_normal(p.n_inp()), dout = random_normal(p.n_out());
    if (v.id >= 4 && !hopper::hopper_available()) return;
    if (v.bf16) {
        p.qkv16.upload(round_to_bf16(inp));
        p.dout16.upload(round_to_bf16(dout));
        p.forward16(0);
    } else {
        p.qkv32.upload(inp);
        p.dout32.upload(dout);
        std::vector<float> out = random_normal(p.n_out()), lse(p.n_rows(), (float)std::log((double)s.T));
        p.out32.upload(out);  // timing only: values do not change the work done
        p.lse.upload(lse);
        if (v.id == 1) p.forward_materialized(block);
    }
    Timing t = benchmark([&] { run_backward(v.id, block, p); }, repeats);
    print_result("bwd", v.id, v.name, block, s, 2.5 * fwd_flops, t);
    if (v.bf16) {
        Timing tf = benchmark([&] {
            p.forward16(0);
            run_backward(v.id, block, p);
        }, repeats);
        print_result("fwdbwd", v.id, v.name, block, s, 3.5 * fwd_flops, tf);
    }
}

int main(int argc, char** argv) {
    AttentionProgram<Variant> prog;
    prog.pass = "bwd";
    prog.variants_help = "1 materialized, 2 flash2 fp32, 3 flash2 bf16, 4 hopper two kernels, 5 hopper fused ordered, "
                         "6 hopper fused unordered";
    prog.flops_note = "; bwd FLOPs = 2.5x fwd, fwd+bwd = 3.5x fwd (fwd = causal 2*B*NH*T*T*HS)";
    prog.engine_variants = {3, 4, 6};  // mma.sync; on Hopper the default and -ab flash-nondet
    prog.variants = kVariants;
    prog.validate_variant = check;
    prog.extra_checks = {check_determinism};
    prog.scratch_bytes = [](const Variant& v, const AttentionShape& s) {
        return v.id == 1 ? MaterializedScratch::bytes(s) : 0;
    };
    prog.time_variant = time_variant;
    return run_attention_program(argc, argv, prog);
}
