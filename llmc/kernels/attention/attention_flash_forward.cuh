// Flash attention forward on bf16 tensor cores (FlashAttention-2 loop order): the tile configuration, the kernel
// and its launcher template. Which configurations are compiled is up to the includer: the engine's defaults in
// attention_flash.cuh, the sweep in dev/cuda/attention_flash_configs.cuh.
//
// One thread block per (query tile of Br rows, b, h); each warp owns 16·kMT query rows. K/V tiles of Bc keys stream
// through shared memory with cp.async (two stages, the next tile loads while this one computes); S = Q·Kᵀ and
// O += P·V run as mma.sync m16n8k16 bf16 with fp32 accumulators, operands fetched by ldmatrix from XOR-swizzled
// shared memory; the running max m and sum l stay in registers; tiles above the diagonal are never visited.
// Layouts: qkv (B, T, 3, NH, HS) bf16 in, out (B, T, NH·HS) bf16 and lse (B, NH, T) fp32 (natural log) out.
#pragma once

#include <cmath>

#include "llmc/core/cuda_common.h"
#include "llmc/mma/tiles.cuh"

namespace flash {

// HS_ head size, Br_ query rows per block, Bc_ keys per tile, kMinBlocks_ blocks per SM that __launch_bounds__
// asks for (it caps the registers per thread), kMT_ 16-row m-tiles per warp: with 2, every K/V operand fragment
// read from shared memory feeds two MMAs (half the ldmatrix traffic per FLOP) at the price of twice the
// accumulator registers. Warps = Br / (16·kMT).
template <int HS_, int Br_, int Bc_, int kMinBlocks_, int kMT_ = 1>
struct ForwardConfig {
    static constexpr int HS = HS_, Br = Br_, Bc = Bc_, kMinBlocks = kMinBlocks_, kMT = kMT_;
    static constexpr int kWarpRows = 16 * kMT;
    static constexpr int kWarps = Br / kWarpRows;
    static constexpr int kThreads = 32 * kWarps;
    static_assert(Br % kWarpRows == 0 && Bc % 16 == 0 && HS % 16 == 0, "tiles are made of 16x16 mma operands");

    // Shared memory: the Q tile (also where each warp stages its output rows at the end), then two stages of K,
    // then two of V (stage s at k[0] + s * kKVStageBytes: the loads and fragment reads step by the stage's bytes).
    struct Layout {
        SwizzledTile<Br, HS> q;
        SwizzledTile<Bc, HS> k[2], v[2];
    };
    static constexpr uint32_t kKVStageBytes = tile_bytes<Bc, HS>();
    static constexpr size_t kSmemBytes = sizeof(Layout);
    static_assert(sizeof(SwizzledTile<Bc, HS>) == kKVStageBytes, "stages are whole tiles, back to back");
};

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    forward_kernel(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ qkv, int T, int NH) {
    constexpr int HS = Cfg::HS, Br = Cfg::Br, Bc = Cfg::Bc, kMT = Cfg::kMT;
    extern __shared__ __align__(128) unsigned char flash_smem[];
    const auto& L = shared_layout<typename Cfg::Layout>(flash_smem);
    const uint32_t sQ = L.q.addr(), sK = L.k[0].addr(), sV = L.v[0].addr();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int q_tile = gridDim.x - 1 - blockIdx.x;  // longest rows (most K/V tiles) start first
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int C = NH * HS;
    const size_t stride = 3 * (size_t)C;
    const bf16* Qg = qkv + (size_t)b * T * stride + h * HS;
    const bf16* Kg = Qg + C;
    const bf16* Vg = Qg + 2 * C;
    const int q0 = q_tile * Br;
    const int warp_row0 = warp * Cfg::kWarpRows;  // first row of this warp inside the tile
    const float scale_log2 = kLog2e / sqrtf((float)HS);

    // Keys this tile can see: [0, min(T, q0 + Br)).
    const int kv_len = min(T, q0 + Br);
    const int num_kv = (kv_len + Bc - 1) / Bc;

    load_tile_async<Br, HS, Cfg::kThreads>(sQ, Qg, stride, q0, T);
    load_tile_async<Bc, HS, Cfg::kThreads>(sK, Kg, stride, 0, T);
    load_tile_async<Bc, HS, Cfg::kThreads>(sV, Vg, stride, 0, T);
    cp_async_commit();

    uint32_t qf[kMT][HS / 16][4];
    float o[kMT][HS / 8][4];
    float m[kMT][2], l[kMT][2];  // running row max (log2 domain) and sum (this thread's columns until the end)
    int rows[kMT][2];            // the query rows this thread holds: g and g + 8 of each m-tile
#pragma unroll
    for (int mt = 0; mt < kMT; mt++) {
#pragma unroll
        for (int i = 0; i < HS / 8; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            m[mt][r] = -INFINITY;
            l[mt][r] = 0.f;
            rows[mt][r] = q0 + warp_row0 + mt * 16 + g + 8 * r;
        }
    }

    for (int j = 0; j < num_kv; j++) {
        const int stage = j & 1;
        pipeline_step<Bc, HS, Cfg::kThreads>(sK, sV, stage, j + 1 < num_kv, Kg, stride, Vg, stride, (j + 1) * Bc, T,
                                             [] {});
        if (j == 0) {
#pragma unroll
            for (int mt = 0; mt < kMT; mt++)
#pragma unroll
                for (int kk = 0; kk < HS / 16; kk++) load_a_frag<HS>(qf[mt][kk], sQ, warp_row0 + mt * 16, kk, lane);
        }
        const uint32_t tK = sK + stage * Cfg::kKVStageBytes, tV = sV + stage * Cfg::kKVStageBytes;
        const int k0 = j * Bc;

        // S = Q Kᵀ
        float s[kMT][Bc / 8][4];
#pragma unroll
        for (int mt = 0; mt < kMT; mt++)
#pragma unroll
            for (int n = 0; n < Bc / 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) {
#pragma unroll
            for (int nn = 0; nn < Bc / 16; nn++) {
                uint32_t bfr[4];
                load_b_frag_rows_n<HS>(bfr, tK, nn * 16, kk, lane);
#pragma unroll
                for (int mt = 0; mt < kMT; mt++) mma_16816_pair(s[mt], nn, qf[mt][kk], bfr);
            }
        }

        // Scale into the log2 domain; mask the future (and keys past T) only on tiles that reach it.
        const bool needs_mask = k0 + Bc - 1 > q0 + warp_row0 || k0 + Bc > T;
#pragma unroll
        for (int mt = 0; mt < kMT; mt++) {
#pragma unroll
            for (int n = 0; n < Bc / 8; n++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float v = s[mt][n][e] * scale_log2;
                    if (needs_mask) {
                        int key = k0 + 8 * n + 2 * t + (e & 1);
                        if (key > rows[mt][e >> 1] || key >= T) v = -INFINITY;
                    }
                    s[mt][n][e] = v;
                }
            }
        }

        // Online softmax: new max, rescale what was accumulated, P = exp2(S - m).
#pragma unroll
        for (int mt = 0; mt < kMT; mt++) {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = m[mt][r];
#pragma unroll
                for (int n = 0; n < Bc / 8; n++) mx = fmaxf(mx, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float base = mx == -INFINITY ? 0.f : mx;  // a row with nothing visible yet stays all-zero
                const float alpha = exp2f(m[mt][r] - base);
                m[mt][r] = mx;
                float sum = 0.f;
#pragma unroll
                for (int n = 0; n < Bc / 8; n++) {
                    s[mt][n][2 * r] = exp2f(s[mt][n][2 * r] - base);
                    s[mt][n][2 * r + 1] = exp2f(s[mt][n][2 * r + 1] - base);
                    sum += s[mt][n][2 * r] + s[mt][n][2 * r + 1];
                }
                l[mt][r] = l[mt][r] * alpha + sum;
#pragma unroll
                for (int dn = 0; dn < HS / 8; dn++) {
                    o[mt][dn][2 * r] *= alpha;
                    o[mt][dn][2 * r + 1] *= alpha;
                }
            }
        }

        // O += P V  (P goes from accumulator layout straight into A-operand registers)
#pragma unroll
        for (int kk = 0; kk < Bc / 16; kk++) {
            uint32_t a[kMT][4];
#pragma unroll
            for (int mt = 0; mt < kMT; mt++) accumulators_to_a_frag(a[mt], s[mt], kk);
#pragma unroll
            for (int nn = 0; nn < HS / 16; nn++) {
                uint32_t bfr[4];
                load_b_frag_rows_k<HS>(bfr, tV, kk * 16, nn, lane);
#pragma unroll
                for (int mt = 0; mt < kMT; mt++) mma_16816_pair(o[mt], nn, a[mt], bfr);
            }
        }
        __syncthreads();  // this stage is refilled by the next iteration's copy
    }

    // Final normalisation, LSE, and the store (through this warp's rows of the Q tile).
#pragma unroll
    for (int mt = 0; mt < kMT; mt++) {
        float inv[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 1);
            l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 2);
            inv[r] = 1.f / l[mt][r];
            if (t == 0 && rows[mt][r] < T)
                lse[((size_t)b * NH + h) * T + rows[mt][r]] = (m[mt][r] + log2f(l[mt][r])) * kLn2;
        }
#pragma unroll
        for (int dn = 0; dn < HS / 8; dn++) {
            o[mt][dn][0] *= inv[0];
            o[mt][dn][1] *= inv[0];
            o[mt][dn][2] *= inv[1];
            o[mt][dn][3] *= inv[1];
        }
        store_warp_rows<HS>(o[mt], 1.f, sQ, warp_row0 + mt * 16, out + (size_t)b * T * C + h * HS, C,
                            q0 + warp_row0 + mt * 16, T, lane);
    }
}

template <class Cfg>
inline cudaError_t launch_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, cudaStream_t stream) {
    auto kernel = forward_kernel<Cfg>;
    static const cudaError_t err = allow_smem(kernel, Cfg::kSmemBytes);
    if (err != cudaSuccess) return err;
    dim3 grid((T + Cfg::Br - 1) / Cfg::Br, B * NH);
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(out, lse, qkv, T, NH);
    return cudaGetLastError();
}

}  // namespace flash
