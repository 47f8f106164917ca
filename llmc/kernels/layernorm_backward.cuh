// LayerNorm's backward (the forward: llmc/kernels/layernorm.cuh): dinp accumulates (it is the residual stream's
// gradient); dweight/dbias are reduced over rows deterministically: fixed chunks of rows into fp32 partials, then one
// ordered sum per channel. No atomics. It can fold max |dinp| (the updated, stored values) into an FP8 amax
// (llmc/kernels/fp8/amax.cuh): the residual gradient is fcproj's and attproj's output gradient.
#pragma once

#include "llmc/kernels/layernorm.cuh"

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
