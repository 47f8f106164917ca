// LayerNorm over the channel dimension, eps kLayerNormEps (gpt2_config.h), with mean and 1/std saved for backward.
// fused_residual_layernorm_forward adds the residual stream and normalises in one kernel (the block's
// output leaves the residual add and goes straight into the next LayerNorm).
// Backward: dinp accumulates (it is the residual stream's gradient); dweight/dbias are reduced over rows
// deterministically: fixed chunks of rows into fp32 partials, then one ordered sum per channel. No atomics.
// Both can fold max |output| (the stored values) into an FP8 amax (llmc/kernels/fp8/amax.cuh), so an FP8 GEMM that
// reads the output needs no amax pass of its own: the forward's out (qkv's and fc's inputs), the backward's updated
// dinp (the residual gradient, fcproj's and attproj's output gradient).
#pragma once

#include <type_traits>

#include "llmc/core/cuda_common.h"
#include "llmc/gpt2/gpt2_config.h"
#include "llmc/kernels/fp8/amax.cuh"

// One warp per row, 128-bit packs (C is a multiple of x128::size), the row held in registers: every load of the
// row is issued at once, so a row costs one memory latency, not one per pass. kPacks: packs per lane the kernel
// holds (C <= kPacks · 32 · x128::size; layernorm_packs picks the instance). kWeightsEarly: the weights and biases
// are loaded with the row (generation's decode step runs a few rows, where latency is all there is, and a pass that
// re-reads the row costs a latency); else they are read in the last pass, from L1/L2, where every
// row finds them: the registers they would hold cost occupancy on a training batch (212 registers at 8 packs).
// `residual_a`/`residual_b` non-null: residual_out = a + b is written and normalised. kAmax: max |out| folded into
// out_amax, per warp (a warp is a row, and leaves early past the last row); a compile-time choice, so that runs
// without FP8 run the kernel they ran before it could.
constexpr int kLayerNormForwardThreads = 256;
template <int kPacks, bool kWeightsEarly, bool kAmax>
__global__ void __launch_bounds__(kLayerNormForwardThreads)
    layernorm_forward_kernel(floatX* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                             floatX* residual_out, const floatX* inp, const floatX* residual_a,
                             const floatX* residual_b, const floatX* __restrict__ weight,
                             const floatX* __restrict__ bias, int N, int C, float* out_amax) {
    pdl_trigger_and_wait();  // launched as a programmatic dependent (pdl): everything below reads its output
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (row >= N) return;
    const int packs = C / x128::size;
    const size_t base = (size_t)row * C;
    x128 v[kPacks], w[kWeightsEarly ? kPacks : 1], b[kWeightsEarly ? kPacks : 1];
#pragma unroll
    for (int i = 0; i < kPacks; i++) {
        const int c = (lane + i * kWarpSize) * x128::size;
        if (c < C) {
            if (residual_a) {
                // The stored (rounded) sum is what we normalise, so the backward sees the same input.
                const x128 ra = load128cs(residual_a + base + c), rb = load128cs(residual_b + base + c);
                for (int k = 0; k < x128::size; k++) v[i][k] = from_float<floatX>(to_float(ra[k]) + to_float(rb[k]));
            } else {
                v[i] = load128cs(inp + base + c);
            }
            if constexpr (kWeightsEarly) w[i] = load128(weight + c), b[i] = load128(bias + c);
        }
    }
    if (residual_a) {
#pragma unroll
        for (int i = 0; i < kPacks; i++)
            if (lane + i * kWarpSize < packs) store128(residual_out + base + (lane + i * kWarpSize) * x128::size, v[i]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPacks; i++)
        if (lane + i * kWarpSize < packs)
            for (int k = 0; k < x128::size; k++) sum += to_float(v[i][k]);
    const float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
#pragma unroll
    for (int i = 0; i < kPacks; i++)
        if (lane + i * kWarpSize < packs)
            for (int k = 0; k < x128::size; k++) {
                const float d = to_float(v[i][k]) - m;
                var += d * d;
            }
    const float s = rsqrtf(warp_reduce_sum(var) / C + (float)kLayerNormEps);
    unsigned int mx = 0;
#pragma unroll
    for (int i = 0; i < kPacks; i++) {
        if (lane + i * kWarpSize < packs) {
            const int c = (lane + i * kWarpSize) * x128::size;
            const x128 wi = kWeightsEarly ? w[kWeightsEarly ? i : 0] : load128(weight + c);
            const x128 bi = kWeightsEarly ? b[kWeightsEarly ? i : 0] : load128(bias + c);
            x128 o;
            for (int k = 0; k < x128::size; k++) {
                o[k] = from_float<floatX>((to_float(v[i][k]) - m) * s * to_float(wi[k]) + to_float(bi[k]));
                if constexpr (kAmax) mx = max(mx, amax_bits(to_float(o[k])));
            }
            store128(out + base + c, o);
        }
    }
    if constexpr (kAmax) fold_warp_amax(mx, out_amax);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// The most channels a warp holds in registers: 16 packs per lane (4096 bf16, 2048 fp32; GPT-2 goes to 1600).
constexpr int kLayerNormMaxChannels = 16 * kWarpSize * x128::size;

inline void check_layernorm_channels(int C) {
    if (C % x128::size != 0 || C > kLayerNormMaxChannels) {
        fprintf(stderr, "error: layernorm: C = %d must be a multiple of %d, at most %d\n", C, x128::size,
                kLayerNormMaxChannels);
        exit(EXIT_FAILURE);
    }
}

// Calls f(std::integral_constant<int, P>()) with P the packs per lane a row of C channels needs, rounded up to an
// instance (1 to 8 exactly, then 12 and 16): registers not needed are occupancy lost. GPT-2 in bf16 needs 1 to 7;
// the 12 and 16 instances (fp32 above 1024 channels, bf16 above 2048) spill a few hundred bytes.
template <typename F>
inline void layernorm_packs(int C, F&& f) {
    const int per_lane = ceil_div(C / x128::size, kWarpSize);
    switch (per_lane) {
        case 1: f(std::integral_constant<int, 1>()); break;
        case 2: f(std::integral_constant<int, 2>()); break;
        case 3: f(std::integral_constant<int, 3>()); break;
        case 4: f(std::integral_constant<int, 4>()); break;
        case 5: f(std::integral_constant<int, 5>()); break;
        case 6: f(std::integral_constant<int, 6>()); break;
        case 7: f(std::integral_constant<int, 7>()); break;
        case 8: f(std::integral_constant<int, 8>()); break;
        default:
            if (per_lane <= 12) f(std::integral_constant<int, 12>());
            else f(std::integral_constant<int, 16>());
    }
}

// pdl: launched as a programmatic dependent of the kernel before it (generation's decode step, where a few rows
// make the launch the larger part). The weights come early when the rows fill at most one wave of blocks.
inline void launch_layernorm_forward(floatX* out, float* mean, float* rstd, floatX* residual_out, const floatX* inp,
                                     const floatX* a, const floatX* b, const floatX* weight, const floatX* bias, int N,
                                     int C, cudaStream_t stream, bool pdl, float* out_amax) {
    const int rows_per_block = kLayerNormForwardThreads / kWarpSize, blocks = ceil_div(N, rows_per_block);
    const bool weights_early = blocks <= device_sm_count();
    PdlLaunch launch(dim3(blocks), dim3(kLayerNormForwardThreads), 0, stream, pdl);
    auto launch_with = [&](auto amax) {
        layernorm_packs(C, [&](auto packs) {
            constexpr int kPacks = decltype(packs)::value;
            constexpr bool kAmax = decltype(amax)::value;
            auto kernel = weights_early ? layernorm_forward_kernel<kPacks, true, kAmax>
                                        : layernorm_forward_kernel<kPacks, false, kAmax>;
            cudaCheck(cudaLaunchKernelEx(&launch.config, kernel, out, mean, rstd, residual_out, inp, a, b, weight,
                                         bias, N, C, out_amax));
        });
    };
    if (out_amax) launch_with(std::true_type());
    else launch_with(std::false_type());
}

// out_amax (null: none): *out_amax = max(*out_amax, max |out|).
inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C, cudaStream_t stream = 0, bool pdl = false,
                              float* out_amax = nullptr) {
    check_layernorm_channels(C);
    launch_layernorm_forward(out, mean, rstd, nullptr, inp, nullptr, nullptr, weight, bias, N, C, stream, pdl,
                             out_amax);
}

// residual_out = a + b; out = LayerNorm(residual_out).
inline void fused_residual_layernorm_forward(floatX* residual_out, floatX* out, float* mean, float* rstd,
                                             const floatX* a, const floatX* b, const floatX* weight,
                                             const floatX* bias, int N, int C, cudaStream_t stream = 0,
                                             bool pdl = false, float* out_amax = nullptr) {
    check_layernorm_channels(C);
    launch_layernorm_forward(out, mean, rstd, residual_out, nullptr, a, b, weight, bias, N, C, stream, pdl,
                             out_amax);
}

// ---------------------------------------------------------------- backward
// One kernel reads dout and inp once and produces everything: dinp += ∂loss/∂inp per row (128-bit packs), and per
// block the column sums over its rows of dout·norm (→ dweight), dout (→ dbias) and, optionally, of the updated dinp
// itself. That last sum is the bias gradient of the linear layer whose output feeds this residual stream (attproj
// for ln2, fcproj for the next ln1 or lnf), so that layer's backward has no bias pass of its own.
// A team of threads is as wide as a row: thread i owns pack i (x128::size channels) of every row, so a column's
// sums live in one thread's registers, added in row order (no per-warp slice of shared sums, which held the former
// warp-per-row kernel to 2 blocks of 4 warps per SM at 1600 channels, and no shared read-modify-write per element).
// A block holds kLayerNormBackwardTeams teams and kLayerNormRowsPerBlock consecutive rows; team t takes rows t,
// t + teams, ... kRows at a time, through a ring of kStages stages in shared memory: each thread copies its own
// packs (cp.async) and reads only those, so the ring needs no barrier, and the copies of the next kStages - 1
// groups are in flight while one is computed. The two row sums the update needs (of dnorm and dnorm·norm) are added
// per warp, then over the team's warps in order through shared memory: one barrier per group, on the team's own
// named barrier. The teams' column sums are added in team order and the block writes one row of partials; a second
// kernel adds the rows in a fixed order. No atomics: results repeat bit for bit, on any GPU (the split into blocks
// and teams depends on N and C only).
// 64 rows per block: fewer leave more partial rows, whose ordered sum costs what their bytes cost; more leave too
// few blocks for the SMs at d48 (dev/cuda/layernorm; the timings are in docs/PERFORMANCE.md).
constexpr int kLayerNormRowsPerBlock = 64;  // N/64 partial rows to add at the end
constexpr int kLayerNormBackwardRows = 2, kLayerNormBackwardStages = 3, kLayerNormBackwardTeams = 2;
constexpr int kLayerNormBackwardMaxThreads = 512;  // registers: at most 128 per thread
static_assert(kLayerNormMaxChannels / x128::size <= kLayerNormBackwardMaxThreads, "the widest row fits one team");
inline int layernorm_num_chunks(int N) { return ceil_div(N, kLayerNormRowsPerBlock); }
inline size_t layernorm_backward_scratch_floats(int N, int C) { return (size_t)layernorm_num_chunks(N) * 3 * C; }
template <int kRows, int kStages>
inline size_t layernorm_backward_smem_bytes(int threads) {
    return (size_t)kStages * 3 * kRows * threads * sizeof(x128) + 2 * kLayerNormRowsPerBlock * sizeof(float);
}

// partials[block][0][c] = Σ dout·norm, [1][c] = Σ dout, [2][c] = Σ dinp (after the update; only if sum_dinp).
// kTeams teams of one row's width each take every kTeams-th row of the block (more warps per block without more
// partial rows); each team syncs on its own named barrier, and the teams' column sums are added in team order.
template <int kRows, int kStages, int kTeams, bool kAmax>
__global__ void __launch_bounds__(kLayerNormBackwardMaxThreads)
    layernorm_backward_kernel(floatX* __restrict__ dinp, float* __restrict__ partials, const floatX* __restrict__ dout,
                              const floatX* __restrict__ inp, const floatX* __restrict__ weight,
                              const float* __restrict__ mean, const float* __restrict__ rstd, int N, int C,
                              bool sum_dinp, float* dinp_amax) {
    constexpr int kSums = 2 * kRows;  // per row: Σ dnorm, Σ dnorm·norm
    static_assert(kTeams == 1 || kTeams == 2, "one team syncs with __syncthreads, two on barriers 1 and 2");
    static_assert(kStages * 3 * kRows * kTeams * sizeof(x128) >= (kTeams - 1) * 3 * x128::size * sizeof(float),
                  "the teams' column sums fit in the ring");
    // [2][warp][kSums]: two buffers, so one barrier per group (the next group writes the other one)
    __shared__ float warp_sums[2][kLayerNormBackwardMaxThreads / kWarpSize][kSums];
    extern __shared__ __align__(16) unsigned char ln_smem[];  // ring [kStages][3][kRows][threads], then mean, rstd
    const int threads = blockDim.x, width = threads / kTeams, team = threadIdx.x / width;
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int team_warps = width / kWarpSize, first_warp = team * team_warps;
    const int packs = C / x128::size, pk = threadIdx.x % width;
    const bool owner = pk < packs;  // the last warp may reach past the row
    const int c = pk * x128::size;
    x128* ring = reinterpret_cast<x128*>(ln_smem);
    float* row_mean = reinterpret_cast<float*>(ring + (size_t)kStages * 3 * kRows * threads);
    float* row_rstd = row_mean + kLayerNormRowsPerBlock;
    const int r0 = blockIdx.x * kLayerNormRowsPerBlock, rows = min(N - r0, kLayerNormRowsPerBlock);
    // this team's rows: team, team + kTeams, ...; group g holds its rows g·kRows .. g·kRows + kRows - 1
    const int team_rows = rows > team ? (rows - team + kTeams - 1) / kTeams : 0;
    const int groups = ((rows + kTeams - 1) / kTeams + kRows - 1) / kRows;  // the same for every team
    auto row_of = [&](int i) { return i * kTeams + team; };  // block row of the team's i-th row
    // this thread's pack of array a (0 dout, 1 inp, 2 dinp) of row r of the group in stage st
    auto slot = [&](int st, int a, int r) { return ring + ((st * 3 + a) * kRows + r) * threads + threadIdx.x; };
    auto issue = [&](int group) {  // always commits, so the group count stays in step
        asm volatile("" ::: "memory");  // the reads of the stage it refills stay before it (cp.async names no memory)
        if (group < groups) {
            for (int r = 0; r < kRows; r++) {
                const int i = group * kRows + r;
                const bool valid = owner && i < team_rows;  // else zero-filled
                const size_t at = valid ? (size_t)(r0 + row_of(i)) * C + c : 0;
                const int st = group % kStages;
                cp_async_16(smem_addr(slot(st, 0, r)), dout + at, valid);
                cp_async_16(smem_addr(slot(st, 1, r)), inp + at, valid);
                cp_async_16(smem_addr(slot(st, 2, r)), dinp + at, valid);
            }
        }
        cp_async_commit();
    };
    for (int g = 0; g < kStages - 1; g++) issue(g);
    for (int i = threadIdx.x; i < 2 * kLayerNormRowsPerBlock; i += threads) {
        const int r = i % kLayerNormRowsPerBlock;
        const float v = r < rows ? (i < kLayerNormRowsPerBlock ? mean : rstd)[r0 + r] : 0.0f;
        row_mean[i] = v;  // row_rstd follows row_mean
    }
    float w[x128::size];  // fp32 once, not converted per element
    if (owner) {
        const x128 wp = load128(weight + c);
        for (int k = 0; k < x128::size; k++) w[k] = to_float(wp[k]);
    } else {
        for (int k = 0; k < x128::size; k++) w[k] = 0.0f;
    }
    float sum_dw[x128::size], sum_db[x128::size], sum_dg[x128::size];
    for (int k = 0; k < x128::size; k++) sum_dw[k] = sum_db[k] = sum_dg[k] = 0.0f;
    unsigned int dinp_max = 0;  // max |stored dinp| (amax_bits)
    __syncthreads();  // row_mean, row_rstd
#pragma unroll 1
    for (int g = 0; g < groups; g++) {
        issue(g + kStages - 1);  // into the stage of group g - 1, which this thread has finished with
        cp_async_wait<kStages - 1>();  // this thread's copies of group g have landed
        asm volatile("" ::: "memory");  // and its reads of them stay after the wait
        const int st = g % kStages;
        // dout and norm in fp32 stay in registers across the barrier: the update needs nothing converted twice
        float d[kRows][x128::size], norm[kRows][x128::size], part[kSums];
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const x128 dp = *slot(st, 0, r), xp = *slot(st, 1, r);
            const int br = row_of(max(0, min(g * kRows + r, team_rows - 1)));  // past the team's rows: any row
            const float m = row_mean[br], s = row_rstd[br];
            float a = 0.0f, b = 0.0f;
            for (int k = 0; k < x128::size; k++) {
                d[r][k] = to_float(dp[k]);
                norm[r][k] = (to_float(xp[k]) - m) * s;
                const float dnorm = d[r][k] * w[k];
                a += dnorm;
                b += dnorm * norm[r][k];
            }
            part[2 * r] = warp_reduce_sum(a), part[2 * r + 1] = warp_reduce_sum(b);
        }
        const int buffer = g % 2;
        if (lane == 0) {
#pragma unroll
            for (int j = 0; j < kSums; j++) warp_sums[buffer][warp][j] = part[j];
        }
        if (kTeams == 1) __syncthreads();
        else if (team == 0) named_barrier_sync<1>(width);
        else named_barrier_sync<2>(width);
#pragma unroll
        for (int j = 0; j < kSums; j++) part[j] = 0.0f;
        for (int wp = first_warp; wp < first_warp + team_warps; wp++) {
#pragma unroll
            for (int j = 0; j < kSums; j++) part[j] += warp_sums[buffer][wp][j];
        }
        if (!owner) continue;
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const int i = g * kRows + r;
            if (i >= team_rows) break;
            const int row = r0 + row_of(i);
            x128 gr = *slot(st, 2, r);
            const float s = row_rstd[row - r0];
            const float dnorm_mean = part[2 * r] / C, dnorm_norm_mean = part[2 * r + 1] / C;
            for (int k = 0; k < x128::size; k++) {
                const float update = (d[r][k] * w[k] - dnorm_mean - norm[r][k] * dnorm_norm_mean) * s;
                gr[k] = from_float<floatX>(to_float(gr[k]) + update);
                sum_dw[k] += d[r][k] * norm[r][k];
                sum_db[k] += d[r][k];
                sum_dg[k] += to_float(gr[k]);
                if constexpr (kAmax) dinp_max = max(dinp_max, amax_bits(to_float(gr[k])));
            }
            store128(dinp + (size_t)row * C + c, gr);
        }
    }
    cp_async_wait<0>();  // no copy outlives the block (the trailing groups are empty)
    if constexpr (kAmax) fold_warp_amax(dinp_max, dinp_amax);  // every warp is whole here
    if constexpr (kTeams > 1) {  // teams 1.. leave their sums in the ring; team 0 adds them in team order
        __syncthreads();  // every team is done with the ring
        float* spill = reinterpret_cast<float*>(ring);  // [team - 1][3][x128::size][width]
        if (team > 0) {
            for (int k = 0; k < x128::size; k++) {
                float* at = spill + ((size_t)((team - 1) * 3) * x128::size + k) * width + pk;
                at[0] = sum_dw[k], at[x128::size * width] = sum_db[k], at[2 * x128::size * width] = sum_dg[k];
            }
        }
        __syncthreads();
        if (team > 0) return;
        for (int t = 1; t < kTeams; t++) {
            for (int k = 0; k < x128::size; k++) {
                const float* at = spill + ((size_t)((t - 1) * 3) * x128::size + k) * width + pk;
                sum_dw[k] += at[0], sum_db[k] += at[x128::size * width], sum_dg[k] += at[2 * x128::size * width];
            }
        }
    }
    if (!owner) return;
    float* out = partials + (size_t)blockIdx.x * 3 * C + c;
    for (int k = 0; k < x128::size; k++) {
        out[k] = sum_dw[k], out[C + k] = sum_db[k];
        if (sum_dinp) out[2 * C + k] = sum_dg[k];
    }
}

// Adds the blocks' partial rows in a fixed order (ordered_column_sum), a block per 32 columns of the [3][C] rows.
__global__ void __launch_bounds__(kWarpSize * kColumnSumSplit)
    layernorm_backward_finish_kernel(floatX* dweight, floatX* dbias, floatX* dinp_sum, const float* partials,
                                     int num_chunks, int C) {
    const int i = blockIdx.x * kWarpSize + threadIdx.x;  // index into one [3][C] row
    const int used = dinp_sum ? 3 * C : 2 * C;
    const float acc = ordered_column_sum(partials, num_chunks, (size_t)3 * C, i, i < used);
    if (threadIdx.y != 0 || i >= used) return;
    floatX* out = i < C ? dweight + i : i < 2 * C ? dbias + (i - C) : dinp_sum + (i - 2 * C);
    *out = from_float<floatX>(to_float(*out) + acc);
}

// The teams fall back to one where a block of them would exceed kLayerNormBackwardMaxThreads (rows above 2048 bf16).
template <int kRows, int kStages, int kTeams, bool kAmax>
inline void launch_layernorm_backward(floatX* dinp, float* scratch, const floatX* dout, const floatX* inp,
                                      const floatX* weight, const float* mean, const float* rstd, int N, int C,
                                      bool sum_dinp, float* dinp_amax, cudaStream_t stream) {
    const int width = ceil_div(C / x128::size, kWarpSize) * kWarpSize;
    if (kTeams > 1 && kTeams * width > kLayerNormBackwardMaxThreads) {  // a wide row: one team
        launch_layernorm_backward<kRows, kStages, 1, kAmax>(dinp, scratch, dout, inp, weight, mean, rstd, N, C,
                                                            sum_dinp, dinp_amax, stream);
        return;
    }
    const int threads = kTeams * width;
    const size_t smem = layernorm_backward_smem_bytes<kRows, kStages>(threads);
    auto kernel = layernorm_backward_kernel<kRows, kStages, kTeams, kAmax>;
    static size_t smem_allowed = 48 * 1024;  // the default; raised once when a wider model needs more
    if (smem > smem_allowed) {
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_allowed = smem;
    }
    kernel<<<layernorm_num_chunks(N), threads, smem, stream>>>(dinp, scratch, dout, inp, weight, mean, rstd, N, C,
                                                               sum_dinp, dinp_amax);
    cudaCheckLaunch();
}

// dinp, dweight, dbias accumulate; so does dinp_sum (C entries: += Σ_rows of dinp after the update) when given,
// and dinp_amax (max |dinp| after the update). scratch: layernorm_backward_scratch_floats(N, C) floats.
inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                               const floatX* weight, const float* mean, const float* rstd, int N, int C,
                               float* scratch, cudaStream_t stream = 0, floatX* dinp_sum = nullptr,
                               float* dinp_amax = nullptr) {
    check_layernorm_channels(C);
    const bool sum_dinp = dinp_sum != nullptr;
    constexpr int kR = kLayerNormBackwardRows, kS = kLayerNormBackwardStages, kT = kLayerNormBackwardTeams;
    auto launch = dinp_amax ? launch_layernorm_backward<kR, kS, kT, true>
                            : launch_layernorm_backward<kR, kS, kT, false>;
    launch(dinp, scratch, dout, inp, weight, mean, rstd, N, C, sum_dinp, dinp_amax, stream);
    const int used = sum_dinp ? 3 * C : 2 * C;
    layernorm_backward_finish_kernel<<<ceil_div(used, kWarpSize), dim3(kWarpSize, kColumnSumSplit), 0, stream>>>(
        dweight, dbias, dinp_sum, scratch, layernorm_num_chunks(N), C);
    cudaCheckLaunch();
}
