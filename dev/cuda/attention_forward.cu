// Causal self-attention forward, from the CPU algorithm on the GPU to flash attention on bf16 tensor cores.
// Input qkv (B, T, 3, NH, HS) as the QKV projection writes it; output (B, T, NH·HS); scale 1/sqrt(HS).
//   1  naive: one thread per (b, t, h) query row, online softmax, fp32
//   2  materialised (S and P exist as T×T matrices): the engine's backend, llmc/kernels/attention/attention_materialized.cuh, built
//      in fp32 (this directory builds with -DENABLE_FP32): permute, cuBLASLt S = Q·Kᵀ, causal softmax with the
//      scale folded in (a warp per row), cuBLASLt P·V, unpermute; "block" = threads per block of its
//      permute/softmax kernels
//   3  minimal flash (FlashAttention-1 loop order): a block per (b, h), one thread per query row, O/m/l in device
//      memory, fp32; made causal (tiles above the diagonal skipped, diagonal masked) and correct for any T
//   4  FlashAttention-2 loop order, fp32: a block per (query tile, b, h), a quad of threads per query row,
//      K/V tiles in shared memory, m/l/O in registers, one normalisation at the end, LSE saved
//   5  bf16 tensor cores: llmc/kernels/attention/attention_flash*.cuh (what the engine trains with): mma.sync m16n8k16, ldmatrix,
//      cp.async double buffering, fp32 accumulation
//      (the "block" column of variant 5 is a tile configuration of attention_flash_configs.cuh; 0 = the default)
//   6  Hopper (llmc/kernels/attention/attention_hopper_forward.cuh): TMA loads into a ring of stages on mbarriers, a producer warpgroup
//      and two consumer warpgroups (setmaxnreg), S = Q·Kᵀ and O += P·V with wgmma (P from registers), output by TMA
//      stores; needs an sm_90a build on a compute-capability 9.0 GPU, otherwise skipped
// Every variant is validated against the fp64 CPU reference (reference/gpt2.h) at several shapes before any is
// benchmarked.
// Build: make -C dev/cuda attention_forward     Run: ./attention_forward [-v 5] [-s "8,12,1024,64;..."]
#include "attention_common.h"
#include "attention_flash_configs.cuh"
#include "llmc/kernels/attention/attention_hopper_forward.cuh"
#include "llmc/kernels/attention/attention_materialized.cuh"
#include "reference/gpt2.h"

// ------------------------------------------------------------------------------------------ variant 1
template <int HS>
__global__ void naive_kernel(float* out, float* lse, const float* qkv, int B, int T, int NH) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive threads: heads of one token
    if (idx >= B * T * NH) return;
    const int h = idx % NH, t = (idx / NH) % T, b = idx / (NH * T);
    const int C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const float* base = qkv + (size_t)b * T * stride + h * HS;
    const float scale = 1.f / sqrtf((float)HS);
    float q[HS], o[HS];
#pragma unroll
    for (int d = 0; d < HS; d++) {
        q[d] = base[(size_t)t * stride + d] * scale;
        o[d] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    for (int t2 = 0; t2 <= t; t2++) {
        const float* k = base + (size_t)t2 * stride + C;
        const float* v = k + C;
        float s = 0.f;
#pragma unroll
        for (int d = 0; d < HS; d++) s += q[d] * k[d];
        if (s > m) {  // new running max: rescale what has been accumulated
            const float alpha = expf(m - s);
            l *= alpha;
#pragma unroll
            for (int d = 0; d < HS; d++) o[d] *= alpha;
            m = s;
        }
        const float p = expf(s - m);
        l += p;
#pragma unroll
        for (int d = 0; d < HS; d++) o[d] += p * v[d];
    }
    float* dst = out + ((size_t)b * T + t) * C + h * HS;
#pragma unroll
    for (int d = 0; d < HS; d++) dst[d] = o[d] / l;
    lse[((size_t)b * NH + h) * T + t] = m + logf(l);
}

// ------------------------------------------------------------------------------------------ variant 3
// Br = Bc = blockDim.x. Shared: Q_i (Br × HS+1, padded: each thread walks its own row), K_j, V_j (Bc × HS,
// read by all threads at the same address: broadcast), S (Br × Bc+1).
template <int HS>
__global__ void minimal_flash_kernel(float* out, float* lse, float* m_buf, float* l_buf, const float* qkv, int T,
                                     int NH) {
    const int Bc = blockDim.x, Br = Bc, tx = threadIdx.x;
    extern __shared__ float smem[];
    float* Qi = smem;
    float* Kj = Qi + Br * (HS + 1);
    float* Vj = Kj + Bc * HS;
    float* S = Vj + Bc * HS;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH;
    const int C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const float* base = qkv + (size_t)b * T * stride + h * HS;
    float* O = out + (size_t)b * T * C + h * HS;
    float* m = m_buf + ((size_t)b * NH + h) * T;
    float* l = l_buf + ((size_t)b * NH + h) * T;
    const float scale = 1.f / sqrtf((float)HS);

    for (int r = tx; r < T; r += Bc) {
        m[r] = -INFINITY;
        l[r] = 0.f;
        for (int d = 0; d < HS; d++) O[(size_t)r * C + d] = 0.f;
    }
    const int Tc = (T + Bc - 1) / Bc;
    for (int j = 0; j < Tc; j++) {
        __syncthreads();
        const int key_row = j * Bc + tx;
        for (int d = 0; d < HS; d++) {
            Kj[tx * HS + d] = key_row < T ? base[(size_t)key_row * stride + C + d] : 0.f;
            Vj[tx * HS + d] = key_row < T ? base[(size_t)key_row * stride + 2 * C + d] : 0.f;
        }
        __syncthreads();
        // causal: query tiles before j see none of these keys
        for (int i = j; i < Tc; i++) {
            const int row = i * Br + tx;
            if (row >= T) continue;
            float* q = Qi + tx * (HS + 1);
            float* s = S + tx * (Bc + 1);
            for (int d = 0; d < HS; d++) q[d] = base[(size_t)row * stride + d];
            const float m_prev = m[row], l_prev = l[row];
            float row_m = -INFINITY;
            for (int y = 0; y < Bc; y++) {
                const int key = j * Bc + y;
                float v = -INFINITY;
                if (key <= row) {  // also < T, since row < T
                    v = 0.f;
                    for (int d = 0; d < HS; d++) v += q[d] * Kj[y * HS + d];
                    v *= scale;
                }
                s[y] = v;
                row_m = fmaxf(row_m, v);
            }
            float row_l = 0.f;
            for (int y = 0; y < Bc; y++) {
                s[y] = s[y] == -INFINITY ? 0.f : expf(s[y] - row_m);
                row_l += s[y];
            }
            const float m_new = fmaxf(m_prev, row_m);
            const float a_prev = expf(m_prev - m_new), a_cur = expf(row_m - m_new);
            const float l_new = a_prev * l_prev + a_cur * row_l;
            for (int d = 0; d < HS; d++) {
                float pv = 0.f;
                for (int y = 0; y < Bc; y++) pv += s[y] * Vj[y * HS + d];
                float* o = O + (size_t)row * C + d;
                *o = (l_prev * a_prev * *o + a_cur * pv) / l_new;
            }
            m[row] = m_new;
            l[row] = l_new;
        }
    }
    __syncthreads();
    for (int r = tx; r < T; r += Bc) lse[((size_t)b * NH + h) * T + r] = m[r] + logf(l[r]);
}

// ------------------------------------------------------------------------------------------ variant 4
// A quad of threads per query row; thread `part` of the quad owns dimensions part, part+4, ... (so the quad's
// shared-memory reads hit consecutive banks). Scores go through a quad shuffle reduction.
template <int HS, int Br>
__global__ void __launch_bounds__(4 * Br) flash2_fp32_kernel(float* out, float* lse, const float* qkv, int T, int NH) {
    constexpr int Bc = 32, P = HS / 4;
    __shared__ float Ks[Bc][HS], Vs[Bc][HS];
    const int tid = threadIdx.x, part = tid & 3;
    const int q_tile = gridDim.x - 1 - blockIdx.x;  // longest rows first
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const float* base = qkv + (size_t)b * T * stride + h * HS;
    const int q0 = q_tile * Br, row = q0 + tid / 4;
    const float scale_log2 = kLog2e / sqrtf((float)HS);

    float q[P], o[P];
#pragma unroll
    for (int i = 0; i < P; i++) {
        q[i] = row < T ? base[(size_t)row * stride + part + 4 * i] * scale_log2 : 0.f;
        o[i] = 0.f;
    }
    float m = -INFINITY, l = 0.f;  // log2 domain
    const int kv_len = min(T, q0 + Br), num_kv = (kv_len + Bc - 1) / Bc;
    for (int j = 0; j < num_kv; j++) {
        __syncthreads();
        load_kv_tile_fp32<Bc, HS>(Ks, Vs, base, stride, C, j * Bc, T, tid, 4 * Br);
        __syncthreads();
        float s[Bc];
        float mx = m;
#pragma unroll
        for (int y = 0; y < Bc; y++) {
            float v = 0.f;
#pragma unroll
            for (int i = 0; i < P; i++) v += q[i] * Ks[y][part + 4 * i];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            const int key = j * Bc + y;
            s[y] = (key <= row && key < T) ? v : -INFINITY;
            mx = fmaxf(mx, s[y]);
        }
        const float base_m = mx == -INFINITY ? 0.f : mx;
        const float alpha = exp2f(m - base_m);
        l *= alpha;
#pragma unroll
        for (int i = 0; i < P; i++) o[i] *= alpha;
#pragma unroll
        for (int y = 0; y < Bc; y++) {
            const float p = exp2f(s[y] - base_m);
            l += p;
#pragma unroll
            for (int i = 0; i < P; i++) o[i] += p * Vs[y][part + 4 * i];
        }
        m = mx;
    }
    if (row < T) {
        float* dst = out + ((size_t)b * T + row) * C + h * HS;
        const float inv = 1.f / l;
#pragma unroll
        for (int i = 0; i < P; i++) dst[part + 4 * i] = o[i] * inv;
        if (part == 0) lse[((size_t)b * NH + h) * T + row] = (m + log2f(l)) * kLn2;
    }
}

// ------------------------------------------------------------------------------------------ variants table
struct Variant {
    int id;
    const char* name;
    bool bf16;
    bool has_lse;
    std::vector<int> blocks;
};
static const std::vector<Variant> kVariants = {
    {1, "naive", false, true, {32, 64, 128, 256}},  // 512 threads x ~140 registers do not fit
    {2, "materialized-cublas", false, false, {32, 64, 128, 256, 512}},
    {3, "minimal-flash-fa1", false, true, {32, 64}},
    {4, "flash2-fp32", false, true, {32, 64, 128}},
    {5, "flash2-bf16-mma", true, true, {0, 1, 2, 3, 4, 5, 6}},  // "block" = flash config, 0 = default
    {6, "hopper-wgmma-tma", true, true, {0}},
};

// Device state for one shape; fp32 variants read qkv32 and write out32, the bf16 variant qkv16/out16.
struct Problem {
    AttentionShape s;
    DeviceBuffer<float> qkv32, out32, lse, m, l;
    DeviceBuffer<__nv_bfloat16> qkv16, out16;
    MaterializedScratch mat;
    size_t n_inp() const { return (size_t)s.B * s.T * 3 * s.NH * s.HS; }
    size_t n_out() const { return (size_t)s.B * s.T * s.NH * s.HS; }
    size_t n_rows() const { return (size_t)s.B * s.NH * s.T; }
    explicit Problem(const AttentionShape& shape, const Variant& v) : s(shape) {
        lse.resize(n_rows());
        if (v.bf16) {
            qkv16.resize(n_inp());
            out16.resize(n_out());
        } else {
            qkv32.resize(n_inp());
            out32.resize(n_out());
        }
        if (v.id == 2) mat.allocate(s);
        if (v.id == 3) { m.resize(n_rows()); l.resize(n_rows()); }
    }
};

template <int HS>
void run_fp32(int variant, int block, Problem& p) {
    const AttentionShape& s = p.s;
    switch (variant) {
        case 1: {
            int n = s.B * s.T * s.NH;
            naive_kernel<HS><<<(n + block - 1) / block, block>>>(p.out32.ptr, p.lse.ptr, p.qkv32.ptr, s.B, s.T, s.NH);
            cudaCheckLaunch();
            break;
        }
        case 2:
            attention_materialized_forward(p.out32.ptr, p.mat.att.ptr, p.qkv32.ptr, p.mat.workspace.ptr, s.B, s.T,
                                           s.NH * s.HS, s.NH, 0, block);
            break;
        case 3: {
            size_t smem = sizeof(float) * (block * (HS + 1) + 2 * block * HS + block * (block + 1));
            static bool raised = false;
            if (!raised) {
                cudaCheck(cudaFuncSetAttribute(minimal_flash_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)(sizeof(float) * (64 * (HS + 1) + 2 * 64 * HS + 64 * 65))));
                raised = true;
            }
            minimal_flash_kernel<HS><<<s.B * s.NH, block, smem>>>(p.out32.ptr, p.lse.ptr, p.m.ptr, p.l.ptr,
                                                                  p.qkv32.ptr, s.T, s.NH);
            cudaCheckLaunch();
            break;
        }
        case 4: {
            dim3 grid((s.T + block - 1) / block, s.B * s.NH);
            if (block == 32) flash2_fp32_kernel<HS, 32><<<grid, 128>>>(p.out32.ptr, p.lse.ptr, p.qkv32.ptr, s.T, s.NH);
            else if (block == 64) flash2_fp32_kernel<HS, 64><<<grid, 256>>>(p.out32.ptr, p.lse.ptr, p.qkv32.ptr, s.T, s.NH);
            else flash2_fp32_kernel<HS, 128><<<grid, 512>>>(p.out32.ptr, p.lse.ptr, p.qkv32.ptr, s.T, s.NH);
            cudaCheckLaunch();
            break;
        }
    }
}

void run_variant(int variant, int block, Problem& p) {
    if (variant == 6) {
        cudaCheck(attention_hopper_forward(p.out16.ptr, p.lse.ptr, p.qkv16.ptr, p.s.B, p.s.T, p.s.NH, p.s.HS));
        return;
    }
    if (variant == 5) {
        cudaCheck(attention_flash_forward_config(p.out16.ptr, p.lse.ptr, p.qkv16.ptr, p.s.B, p.s.T, p.s.NH, p.s.HS, 0,
                                                block));
        return;
    }
    if (p.s.HS == 64) run_fp32<64>(variant, block, p);
    else if (p.s.HS == 128) run_fp32<128>(variant, block, p);
    else { fprintf(stderr, "error: head size %d: the dev variants are built for 64 and 128\n", p.s.HS); exit(1); }
}

// Fresh inputs, fp64 reference on the same (bf16-rounded where the kernel is bf16) values, poisoned outputs.
bool check(const Variant& v, int block, const AttentionShape& s) {
    if (v.id == 6 && !hopper::hopper_available()) {
        printf("    skipped: needs an sm_90a build on a compute-capability 9.0 GPU\n");
        return true;
    }
    Problem p(s, v);
    std::vector<float> inp = random_normal(p.n_inp());
    if (v.bf16) p.qkv16.upload(round_to_bf16(inp));
    else p.qkv32.upload(inp);
    std::vector<double> inp_d = to_double(inp), out_ref(p.n_out()), lse_ref(p.n_rows());
    reference::attention_forward<double>(out_ref.data(), lse_ref.data(), inp_d.data(), s.B, s.T, s.NH * s.HS, s.NH);

    p.lse.poison();
    if (v.bf16) p.out16.poison(); else p.out32.poison();
    if (v.id == 2) { p.mat.att.poison(); p.mat.workspace.poison(); }
    run_variant(v.id, block, p);
    cudaCheck(cudaDeviceSynchronize());

    bool ok = v.bf16 ? validate("out", p.out16.download(), out_ref, bf16_tolerance(rms(out_ref)))
                     : validate("out", p.out32.download(), out_ref, fp32_tolerance());
    if (v.has_lse) ok &= validate("lse", p.lse.download(), lse_ref, Tolerance{1e-4, 1e-5, 1e-5});
    return ok;
}

void time_variant(const Variant& v, int block, const AttentionShape& s, int repeats) {
    if (v.id == 6 && !hopper::hopper_available()) return;
    Problem p(s, v);
    std::vector<float> inp = random_normal(p.n_inp());
    if (v.bf16) p.qkv16.upload(round_to_bf16(inp)); else p.qkv32.upload(inp);
    Timing t = benchmark([&] { run_variant(v.id, block, p); }, repeats);
    print_result("fwd", v.id, v.name, block, s, attention_forward_flops(s.B, s.NH, s.T, s.HS), t);
}

int main(int argc, char** argv) {
    AttentionProgram<Variant> prog;
    prog.pass = "fwd";
    prog.variants_help = "1 naive, 2 materialized, 3 minimal flash, 4 flash2 fp32, 5 flash2 bf16, 6 hopper";
    prog.flops_note = ", causal FLOPs 2*B*NH*T*T*HS";
    prog.engine_variants = {5, 6};  // mma.sync; Hopper
    prog.variants = kVariants;
    prog.validate_variant = check;
    prog.scratch_bytes = [](const Variant& v, const AttentionShape& s) {
        return v.id == 2 ? MaterializedScratch::bytes(s) : 0;
    };
    prog.time_variant = time_variant;
    return run_attention_program(argc, argv, prog);
}
