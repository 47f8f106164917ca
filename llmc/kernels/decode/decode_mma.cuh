// Generation's products for a small batch of decode rows on the tensor cores: the same product as decode_matvec
// (out (B, N) = epilogue(in'·Wᵀ + bias), in' = LayerNorm(in) when LayerNorm weights are given, the epilogue GELU, a
// residual add, or the QKV product's K/V columns into the cache), the same arguments (DecodeMatvec) and the same
// rounding, but as mma.sync m16n8k16 bf16 products with fp32 accumulators, so the rows share each weight load.
// cuBLASLt needs a LayerNorm kernel before two of the four products of a layer and a cache-append kernel.
//   - a block owns kBN output columns and a slice of Ks of the K inputs (K = Ks · splits); its weights, kBN x Ks,
//     are requested by cp.async before the block waits for the kernel before it (PDL), so they arrive while that
//     kernel ends; then the rows (a group of up to 64) of the same K slice;
//   - the LayerNorm runs on the rows in shared memory (each block normalises them itself: then splits = 1);
//   - the warps split the slice's k-steps, each holding the whole (rows x kBN) tile, and add their tiles in
//     shared memory in a fixed order;
//   - with splits > 1 every block leaves its fp32 tile in a workspace, and the last block of each column tile (a
//     counter, which it resets) adds the slices in slice order and runs the epilogue: deterministic, whichever
//     block finishes last. Products with K = 4C (the fc projection) or N = C (attention's projection) would
//     otherwise run on too few blocks.
// Rows past the batch are zeros and never stored. What limits it: every block reads all of its rows from L2 and
// normalises all of them (a warp per row), so it beats cuBLASLt at small batches only (llmc/inference/decode_step.cuh
// chooses by batch; timings: docs/PERFORMANCE.md).
#pragma once

#include <algorithm>

#include "llmc/kernels/decode/decode_matvec.cuh"
#include "llmc/mma/tiles.cuh"

namespace decode_mma_detail {

constexpr int kWarps = 8;         // the products are latency-bound: more warps hide more of it (4 warps were slower)
constexpr int kThreads = kWarps * 32;
constexpr int kGroupRows = 64;     // rows per block (blockIdx.z takes further groups of 64)
constexpr int kBN = 32;            // output columns per block
constexpr int kPad = 8;            // elements after each shared row: a row stride of 16 mod 128 bytes puts the eight
                                   // rows an ldmatrix phase reads in eight bank groups
constexpr int kMaxSliceK = 768;    // the most K columns a block takes without the LayerNorm (shared memory)
constexpr int kLnVectors = 8;      // 16-byte vectors of a row per lane the LayerNorm holds (K <= 2048)

using bf16 = __nv_bfloat16;

// Shared memory: the epilogue's operands (the residual tile, the rows' cache positions), the LayerNorm's weights
// (2K), then the rows' and the weights' slices, which the warps' fp32 tiles overwrite after the products.
__host__ __device__ inline size_t smem_head_bytes(int K) {
    return (size_t)kGroupRows * kBN * 2 + kGroupRows * sizeof(int) + (size_t)2 * K * 2;
}
inline size_t smem_bytes(int mt, int K, int Ks) {
    const size_t tiles = (size_t)(mt * 16 + kBN) * (Ks + kPad) * 2;
    const size_t sums = (size_t)kWarps * mt * 16 * (kBN + 4) * sizeof(float);
    return smem_head_bytes(K) + std::max(tiles, sums);
}

#if !defined(ENABLE_FP32)  // bf16 products (FP32 builds decode through cuBLASLt)
// kMT: 16-row tiles of the group the block computes (its rows rounded up to 16).
template <int kMT>
__global__ void __launch_bounds__(kThreads) mma_kernel(const DecodeMatvec a, int Ks) {
    using namespace flash;
    extern __shared__ __align__(16) uint8_t smem[];
    const int K = a.K, N = a.N, ld = Ks + kPad;
    bf16* res_s = reinterpret_cast<bf16*>(smem);                     // (kGroupRows, kBN): the residual's tile
    int* pos_s = reinterpret_cast<int*>(res_s + kGroupRows * kBN);   // (kGroupRows): cache positions
    bf16* lnw_s = reinterpret_cast<bf16*>(pos_s + kGroupRows);       // (2, K): LayerNorm weight, bias
    bf16* xs = reinterpret_cast<bf16*>(smem + smem_head_bytes(K));  // (kMT·16, ld): the rows' slice
    bf16* ws = xs + kMT * 16 * ld;                                   // (kBN, ld): the weights' slice
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n0 = blockIdx.x * kBN, split = blockIdx.y, k0 = split * Ks, splits = gridDim.y;
    const int row0 = blockIdx.z * kGroupRows, rows = min(kGroupRows, a.B - row0);
    const int chunks = Ks / 8;  // 16-byte vectors per row of the slice

    // The weights depend on no kernel before this one: requested first, in flight during the wait. Every load
    // goes to shared memory or registers before any store, so none waits behind a store it might alias.
    const bf16* W = reinterpret_cast<const bf16*>(a.W);
    for (int n = warp; n < kBN; n += kWarps) {
        const bool valid = n0 + n < N;
        for (int c = lane; c < chunks; c += 32)
            cp_async_16(smem_addr(ws + n * ld + c * 8), W + (valid ? (size_t)(n0 + n) * K + k0 + c * 8 : 0), valid);
    }
    if (a.ln_w) {
        for (int i = threadIdx.x; i < K / 8; i += kThreads) {
            cp_async_16(smem_addr(lnw_s + i * 8), a.ln_w + i * 8, true);
            cp_async_16(smem_addr(lnw_s + K + i * 8), a.ln_b + i * 8, true);
        }
    }
    cp_async_commit();
    // the epilogue's thread layout: column c = lane of the tile, rows warp, warp + 4, ...
    const int n_mine = n0 + lane;
    const float bias = a.bias && n_mine < N ? to_float(a.bias[n_mine]) : 0.f;
    pdl_trigger_and_wait();  // everything below reads what the kernel before wrote

    const bf16* in = reinterpret_cast<const bf16*>(a.in) + (size_t)row0 * K;
    for (int r = warp; r < kMT * 16; r += kWarps) {
        const bool valid = r < rows;
        for (int c = lane; c < chunks; c += 32)
            cp_async_16(smem_addr(xs + r * ld + c * 8), in + (valid ? (size_t)r * K + k0 + c * 8 : 0), valid);
    }
    if (a.residual) {
        const bf16* res = reinterpret_cast<const bf16*>(a.residual) + (size_t)row0 * N + n0;
        for (int i = threadIdx.x; i < rows * kBN / 8; i += kThreads) {
            const int r = i / (kBN / 8), c = i % (kBN / 8);
            const bool valid = n0 + c * 8 < N;  // N % 8 == 0: a vector is inside or outside whole
            cp_async_16(smem_addr(res_s + r * kBN + c * 8), res + (valid ? (size_t)r * N + c * 8 : 0), valid);
        }
    }
    if (a.k_cache && (int)threadIdx.x < rows) pos_s[threadIdx.x] = a.len[row0 + threadIdx.x] - 1;
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    if (a.ln_w) {  // the LayerNorm of the rows (Ks == K): a warp per row, its vectors in registers, the weights read
                   // from shared memory as needed (held in registers they took 90 more and halved the blocks per SM)
        const int4* lw = reinterpret_cast<const int4*>(lnw_s);
        const int4* lb = reinterpret_cast<const int4*>(lnw_s + K);
        for (int r = warp; r < rows; r += kWarps) {
            int4* row = reinterpret_cast<int4*>(xs + r * ld);
            int4 x[kLnVectors] = {};
#pragma unroll
            for (int j = 0; j < kLnVectors; j++)
                if (lane + 32 * j < chunks) x[j] = row[lane + 32 * j];
            decode_matvec_detail::layernorm_vectors<kLnVectors>(
                x, [&](int v, int4& w, int4& b) { w = lw[lane + 32 * v], b = lb[lane + 32 * v]; }, K);
#pragma unroll
            for (int j = 0; j < kLnVectors; j++)
                if (lane + 32 * j < chunks) row[lane + 32 * j] = x[j];
        }
        __syncthreads();
    }

    // the products: warp w takes k-steps w, w + kWarps, ... of the slice, over every row tile and column
    float acc[kMT][kBN / 8][4] = {};
    const uint32_t xs_addr = smem_addr(xs), ws_addr = smem_addr(ws);
    for (int kk = warp; kk < Ks / 16; kk += kWarps) {
        uint32_t b[kBN / 16][4];
#pragma unroll
        for (int nn = 0; nn < kBN / 16; nn++) {  // W rows are the n index: the column fragments of two n-tiles
            const int n = nn * 16 + (lane & 7) + (lane >> 4) * 8, k = kk * 16 + ((lane >> 3) & 1) * 8;
            ldmatrix_x4(b[nn], ws_addr + (uint32_t)(n * ld + k) * 2);
        }
#pragma unroll
        for (int mt = 0; mt < kMT; mt++) {
            uint32_t f[4];
            const int r = mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, k = kk * 16 + (lane >> 4) * 8;
            ldmatrix_x4(f, xs_addr + (uint32_t)(r * ld + k) * 2);
#pragma unroll
            for (int nn = 0; nn < kBN / 16; nn++) mma_16816_pair<kBN / 8>(acc[mt], nn, f, b[nn]);
        }
    }

    // the warps' tiles added in shared memory, warp 0 first (a fixed order)
    __syncthreads();  // every warp is done with xs and ws
    constexpr int kSumLd = kBN + 4;
    float* sums = reinterpret_cast<float*>(xs);  // (kWarps, kMT·16, kSumLd)
#pragma unroll
    for (int mt = 0; mt < kMT; mt++) {
#pragma unroll
        for (int nt = 0; nt < kBN / 8; nt++) {
            const int r = mt * 16 + lane / 4, c = nt * 8 + (lane % 4) * 2;
            float* p = sums + ((size_t)warp * kMT * 16 + r) * kSumLd + c;
            *reinterpret_cast<float2*>(p) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
            *reinterpret_cast<float2*>(p + 8 * kSumLd) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
        }
    }
    __syncthreads();
    constexpr int kRowsPerThread = kMT * 16 / kWarps;  // rows warp, warp + kWarps, ... of column lane
    static_assert(kBN == 32, "the epilogue maps a tile column to each lane");
    float v[kRowsPerThread];
#pragma unroll
    for (int j = 0; j < kRowsPerThread; j++) {
        const int r = warp + j * kWarps;
        v[j] = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; w++) v[j] += sums[((size_t)w * kMT * 16 + r) * kSumLd + lane];
    }
    if (splits > 1) {  // split K: the slice's tile into the workspace; the column tile's last block adds them
#pragma unroll
        for (int j = 0; j < kRowsPerThread; j++) {
            const int r = warp + j * kWarps;
            if (r < rows && n_mine < N) a.partials[((size_t)split * a.B + row0 + r) * N + n_mine] = v[j];
        }
        if (!last_to_arrive(a.counters + (size_t)blockIdx.z * gridDim.x + blockIdx.x, splits)) return;
#pragma unroll
        for (int j = 0; j < kRowsPerThread; j++) {  // every load issued before any store
            const int r = warp + j * kWarps;
            v[j] = 0.f;
            if (r < rows && n_mine < N)
                for (int s = 0; s < splits; s++) v[j] += __ldcg(a.partials + ((size_t)s * a.B + row0 + r) * N + n_mine);
        }
    }
#pragma unroll
    for (int j = 0; j < kRowsPerThread; j++) {
        const int r = warp + j * kWarps;
        if (r >= rows || n_mine >= N) continue;
        const float res = a.residual ? to_float(res_s[r * kBN + lane]) : 0.f;
        decode_matvec_detail::store_column(a, row0 + r, n_mine, v[j], bias, res, a.k_cache ? pos_s[r] : 0);
    }
}
#endif

// The dynamic shared memory a block may opt into on this GPU (227 KB on sm_90, 99 KB on sm_86/89), less the
// kernel's static shared memory (last_to_arrive's flag, padded to the alignment of other kernels' dynamic arrays:
// 128 bytes in some programs).
inline size_t smem_limit() {
    static const size_t limit = [] {
        size_t static_bytes = 0;
#if !defined(ENABLE_FP32)
        cudaFuncAttributes attr;
        cudaCheck(cudaFuncGetAttributes(&attr, mma_kernel<1>));
        static_bytes = attr.sharedSizeBytes;
#endif
        return (size_t)device_info().prop.sharedMemPerBlockOptin - static_bytes;
    }();
    return limit;
}

}  // namespace decode_mma_detail

// BF16 builds (the tensor cores' bf16 products); shapes: N a multiple of 8, K of 64 (every GPT-2 width).
constexpr bool kDecodeMmaAvailable = kFloatXIsBF16;

// The K slices of a product of N columns: 1 with the LayerNorm (a block normalises whole rows); else the fewest
// that give the grid about one block per SM, each slice a multiple of 64 and at most kMaxSliceK wide.
inline int decode_mma_splits(int N, int K, bool layernorm) {
    using namespace decode_mma_detail;
    if (layernorm) return 1;
    const int tiles = (N + kBN - 1) / kBN, steps = K / 64;
    int most = 1;
    for (int s = 1; s <= steps; s++) {
        if (steps % s != 0 || K / s > kMaxSliceK) continue;
        if (tiles * s >= device_sm_count() * 2 / 3) return s;
        most = s;
    }
    return most;  // too few columns for the SMs even in the thinnest slices
}

// Whether a product with the LayerNorm fits one block's shared memory (whole rows of K): else the caller runs the
// LayerNorm as its own kernel (d36 and d48 at large batches; wider models on GPUs with less shared memory).
inline bool decode_mma_fuses_layernorm(int B, int K) {
    using namespace decode_mma_detail;
    const int mt = (std::min(B, kGroupRows) + 15) / 16;
    return K % 64 == 0 && K <= kLnVectors * 32 * 8 && smem_bytes(mt, K, K) <= smem_limit();
}

// The split-K workspace of a product (floats) and its counters (one per column tile and row group).
inline size_t decode_mma_partials(int B, int N, int K, bool layernorm) {
    const int s = decode_mma_splits(N, K, layernorm);
    return s > 1 ? (size_t)s * B * N : 0;
}
inline size_t decode_mma_counters(int B, int N) {
    using namespace decode_mma_detail;
    return (size_t)((N + kBN - 1) / kBN) * ((B + kGroupRows - 1) / kGroupRows);
}

inline void decode_mma(const DecodeMatvec& a, cudaStream_t stream) {
    using namespace decode_mma_detail;
    const bool ln = a.ln_w != nullptr;
    const int splits = a.splits > 0 ? a.splits : decode_mma_splits(a.N, a.K, ln);
    if (!kDecodeMmaAvailable || a.B < 1 || a.N % 8 != 0 || a.K % 64 != 0 || a.K % splits != 0 || (a.K / splits) % 64 != 0 ||
        (ln && (splits != 1 || !decode_mma_fuses_layernorm(a.B, a.K))) || (!ln && a.K / splits > kMaxSliceK) ||
        (splits > 1 && (a.partials == nullptr || a.counters == nullptr)) ||
        (a.k_cache && (a.len == nullptr || a.N != 3 * a.NH * a.HS)) || a.pick.partials) {
        fprintf(stderr, "error: decode_mma: B %d, N %d (a multiple of 8), K %d (of 64), %d K slices (multiples of 64 of at "
                "most %d; a LayerNorm needs one and whole rows in shared memory; more need a workspace), no greedy "
                "pick, bf16 builds only\n", a.B, a.N, a.K, splits, kMaxSliceK);
        exit(EXIT_FAILURE);
    }
#if !defined(ENABLE_FP32)
    {
        const int Ks = a.K / splits, mt = (std::min(a.B, kGroupRows) + 15) / 16;
        auto kernel = mt == 1 ? mma_kernel<1> : mt == 2 ? mma_kernel<2> : mt == 3 ? mma_kernel<3> : mma_kernel<4>;
        const size_t smem = smem_bytes(mt, a.K, Ks);
        if (smem > smem_limit()) {
            fprintf(stderr, "error: decode_mma: %zu bytes of shared memory per block (B %d, K %d in slices of %d), this "
                    "GPU allows %zu\n", smem, a.B, a.K, Ks, smem_limit());
            exit(EXIT_FAILURE);
        }
        if (smem > 48 * 1024)
            cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        const dim3 grid((a.N + kBN - 1) / kBN, splits, (a.B + kGroupRows - 1) / kGroupRows);
        PdlLaunch launch(grid, dim3(kThreads), smem, stream, a.pdl);
        cudaCheck(cudaLaunchKernelEx(&launch.config, kernel, a, Ks));
    }
#endif
}
