// The forward of a linear layer, from one thread per output to tensor cores: C = A·Bᵀ (+ bias), exactly as the
// engine's matmul_forward calls it: A = inp (M x K, row-major), B = weight (N x K, row-major, as nn.Linear),
// bias (N, or null), C = out (M x N, row-major); bf16 inputs and output, fp32 accumulation.
//   1  naive: one thread per output element, the dot product straight from global memory (fp32 accumulate)
//   2  shared-memory tiled: a 32x32 output tile per block; 32-wide K slices of A and B staged in shared memory
//      and reused by the whole block (each element read from global once per tile, not once per output)
//   3  register-tiled: a 128x128 tile per block, 8x8 outputs per thread from 16-deep shared slices (kept in fp32,
//      transposed so a thread's A and B values are float4 reads); 16-byte global loads prefetched into registers
//      during the compute; fp32 FMA. Reuse moves into registers: 64 FMA per 4 float4 shared-memory reads
//   4  tensor cores: mma.sync m16n8k16 bf16 -> fp32, ldmatrix from XOR-swizzled shared tiles (no bank conflicts),
//      3-stage cp.async pipeline; 128x128x64 block tile, 8 warps of 64x32; output staged through shared memory
//      for 16-byte stores. PTX wrappers and the swizzle are the flash kernels' (llmc/mma/tiles.cuh)
//   5  Hopper: TMA loads + wgmma, warp-specialised (matmul_hopper_forward.cuh); needs an sm_90a build on a
//      compute-capability 9.0 GPU, otherwise reported as not available and skipped (an error only with -v 5)
//   6  cuBLASLt as the engine calls it (llmc/kernels/matmul/matmul.cuh matmul_forward): the yardstick
//   7  FP8: the operands cast to E4M3 with per-tensor scales from their amax (llmc/kernels/fp8/cast_transpose.cuh,
//      once per shape: dev/cuda/fp8_cast times the cast), then cuBLASLt's FP8 GEMM with promoted accumulation and a
//      bf16 output (llmc/kernels/matmul/matmul_fp8.cuh); validated against the fp64 product of the dequantized
//      operands (what it is given), with the same bounds; K a multiple of 16, FP8 tensor cores (compute capability
//      8.9 or 9.0+). Its "vs v6" is what FP8 buys a GEMM
//   8  FP8 with a scale per block (the quality candidate, docs/FP8.md): A cast in 1x128 blocks along K, B (the
//      weight) in 128x128 blocks (llmc/kernels/fp8/block_cast.cuh, once per shape), cuBLASLt's VEC128_32F x
//      BLK128x128_32F GEMM; validated like 7 against the fp64 product of its dequantized operands; Hopper only.
//      Its "vs v6" beside 7's is what the finer scales cost
// Variants 3 and 4 launch blocks in groups of 8 block rows, so the blocks running at once share their B (weight)
// tiles through L2 (the d12 classifier's weight is 77 MB: more than L2).
// Rule for every variant: M, N >= 1, K >= 8 and K % 8 == 0 (rows of 16 bytes, for the 16-byte loads, cp.async and
// TMA; every GPT-2 K is a multiple of 64); variants 1 and 2 would take any K.
// What each bought (H200, bf16, warm TFLOP/s at d12 fc 16384x3072x768 / 8192^3; docs/PERFORMANCE.md has every shape):
//   1 0.5 (every output re-reads its row and column from DRAM/L2)   2 7.2 (tiles reused from shared memory: 14x)
//   3 42.0 / 42.8 (register reuse: 6x; 63% of the fp32 FMA peak, ~67 TFLOP/s: CUDA cores are the ceiling now)
//   4 319 / 337 (tensor cores: 7.6x; mma.sync feeds them from registers, about half of Hopper's rate)
//   5 548 / 684 (wgmma from shared memory fed by TMA, warp-specialised: 1.7x / 2.0x; 0.96x cuBLASLt over the engine's
//     shapes, above it on the classifier)      6 cuBLASLt 607 / 682
// Every variant is validated against the fp64 CPU reference (reference/gpt2.h) at several shapes, with and
// without bias, before any is benchmarked.
// Build: make -C dev/cuda matmul_forward (built WITHOUT -DENABLE_FP32: floatX is bf16, so variant 6 is the engine's
// bf16 cuBLASLt call)     Run: ./matmul_forward [-v 4] [-c] [-r repeats] [-s "M,N,K[,0];..."]
#include "common.h"
#include "llmc/kernels/fp8/block_cast.cuh"
#include "llmc/kernels/fp8/cast_transpose.cuh"
#include "llmc/kernels/matmul/matmul.cuh"
#include "llmc/kernels/matmul/matmul_fp8.cuh"
#include "llmc/mma/tiles.cuh"
#include "matmul_hopper_forward.cuh"
#include "reference/gpt2.h"

static_assert(kFloatXIsBF16, "matmul_forward.cu is built without -DENABLE_FP32: variant 6 is the bf16 engine GEMM");

using bf16 = __nv_bfloat16;

// ------------------------------------------------------------------------------------------ shared by kernels
// Block `blockIdx.x` of a tiles_m x tiles_n grid -> (tile row, tile column), grouped by 8 tile rows: the blocks
// running at once cover few B tiles (re-read from L2, not DRAM). A bijection for any tiles_m, tiles_n.
__device__ __forceinline__ void grouped_tile(int tiles_m, int tiles_n, int* tm, int* tn) {
    constexpr int kGroup = 8;
    const int pid = blockIdx.x, per_group = kGroup * tiles_n;
    const int first_m = (pid / per_group) * kGroup;
    const int group_m = min(tiles_m - first_m, kGroup);
    const int in_group = pid % per_group;
    *tm = first_m + in_group % group_m;
    *tn = in_group / group_m;
}

__device__ __forceinline__ float bias_at(const bf16* bias, int col, int N) {
    return bias && col < N ? __bfloat162float(bias[col]) : 0.f;
}

// ------------------------------------------------------------------------------------------ variant 1
// threadIdx.x runs along N (coalesced stores); the warp shares its A row (broadcast) and reads 32 B rows.
__global__ void naive_kernel(bf16* out, const bf16* A, const bf16* B, const bf16* bias, int M, int N, int K) {
    const int tiles_n = (N + 31) / 32;
    const int n = (blockIdx.x % tiles_n) * 32 + threadIdx.x;
    const int m = (blockIdx.x / tiles_n) * 8 + threadIdx.y;
    if (m >= M || n >= N) return;
    const bf16* a = A + (size_t)m * K;
    const bf16* b = B + (size_t)n * K;
    float acc = 0.f;
    for (int k = 0; k < K; k++) acc += __bfloat162float(a[k]) * __bfloat162float(b[k]);
    out[(size_t)m * N + n] = __float2bfloat16(acc + bias_at(bias, n, N));
}

// ------------------------------------------------------------------------------------------ variant 2
// 32x32 threads, one output each. A thread loads one element of each tile (coalesced along K); the B tile is
// padded to 33 columns so a warp reading Bs[tx][kk] (32 rows, one column) hits 32 banks; As[ty][kk] is a broadcast.
constexpr int kTile2 = 32;
__global__ void __launch_bounds__(kTile2 * kTile2)
    smem_tiled_kernel(bf16* out, const bf16* A, const bf16* B, const bf16* bias, int M, int N, int K) {
    __shared__ float As[kTile2][kTile2 + 1], Bs[kTile2][kTile2 + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tiles_n = (N + kTile2 - 1) / kTile2;
    const int m0 = (blockIdx.x / tiles_n) * kTile2, n0 = (blockIdx.x % tiles_n) * kTile2;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += kTile2) {
        const int k = k0 + tx;
        As[ty][tx] = m0 + ty < M && k < K ? __bfloat162float(A[(size_t)(m0 + ty) * K + k]) : 0.f;
        Bs[ty][tx] = n0 + ty < N && k < K ? __bfloat162float(B[(size_t)(n0 + ty) * K + k]) : 0.f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTile2; kk++) acc += As[ty][kk] * Bs[tx][kk];
        __syncthreads();
    }
    const int m = m0 + ty, n = n0 + tx;
    if (m < M && n < N) out[(size_t)m * N + n] = __float2bfloat16(acc + bias_at(bias, n, N));
}

// ------------------------------------------------------------------------------------------ variant 3
// 256 threads as 16 x 16; thread (ty, tx) owns rows {ty*4 + i, 64 + ty*4 + i} and columns {tx*4 + j, 64 + tx*4 + j}
// (i, j < 4): split in two halves so that 8 neighbouring threads read 128 contiguous bytes of Bs (no conflicts).
// Shared slices are K-major (As[k][m]) in fp32. Loading: thread t copies 8 consecutive K values (16 bytes) of
// row t/2 of each tile; the transposing stores are 2-way bank-conflicted (once per 256 FMA, accepted).
constexpr int kBM3 = 128, kBN3 = 128, kBK3 = 16, kThreads3 = 256;
__global__ void __launch_bounds__(kThreads3)
    register_tiled_kernel(bf16* out, const bf16* A, const bf16* B, const bf16* bias, int M, int N, int K) {
    static_assert(kBM3 * kBK3 / 8 == kThreads3 && kBN3 * kBK3 / 8 == kThreads3, "one 16-byte load per thread");
    __shared__ __align__(16) float As[kBK3][kBM3 + 4];
    __shared__ __align__(16) float Bs[kBK3][kBN3 + 4];
    int tm, tn;
    grouped_tile((M + kBM3 - 1) / kBM3, (N + kBN3 - 1) / kBN3, &tm, &tn);
    const int m0 = tm * kBM3, n0 = tn * kBN3;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int lrow = tid / 2, lk = (tid % 2) * 8;  // this thread's 16-byte piece of each tile
    const bool a_row_ok = m0 + lrow < M, b_row_ok = n0 + lrow < N;
    const bf16* a_src = A + (size_t)(a_row_ok ? m0 + lrow : 0) * K + lk;
    const bf16* b_src = B + (size_t)(b_row_ok ? n0 + lrow : 0) * K + lk;

    uint4 ra, rb;  // the next slice, in flight while the current one is used
    auto load_global = [&](int k0) {
        const uint4 zero = make_uint4(0, 0, 0, 0);
        const bool k_ok = k0 + lk < K;  // K % 8 == 0: the 8 values are all in or all out
        ra = a_row_ok && k_ok ? *reinterpret_cast<const uint4*>(a_src + k0) : zero;
        rb = b_row_ok && k_ok ? *reinterpret_cast<const uint4*>(b_src + k0) : zero;
    };
    auto store_shared = [&] {
        const __nv_bfloat162* a2 = reinterpret_cast<const __nv_bfloat162*>(&ra);
        const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&rb);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float2 a = __bfloat1622float2(a2[j]), b = __bfloat1622float2(b2[j]);
            As[lk + 2 * j][lrow] = a.x;
            As[lk + 2 * j + 1][lrow] = a.y;
            Bs[lk + 2 * j][lrow] = b.x;
            Bs[lk + 2 * j + 1][lrow] = b.y;
        }
    };

    float acc[8][8] = {};
    load_global(0);
    store_shared();
    __syncthreads();
    for (int k0 = 0; k0 < K; k0 += kBK3) {
        const bool has_next = k0 + kBK3 < K;
        if (has_next) load_global(k0 + kBK3);
#pragma unroll
        for (int k = 0; k < kBK3; k++) {
            float a[8], b[8];
            *reinterpret_cast<float4*>(a) = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
            *reinterpret_cast<float4*>(a + 4) = *reinterpret_cast<const float4*>(&As[k][64 + ty * 4]);
            *reinterpret_cast<float4*>(b) = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
            *reinterpret_cast<float4*>(b + 4) = *reinterpret_cast<const float4*>(&Bs[k][64 + tx * 4]);
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // everyone is done with this slice
        if (has_next) {
            store_shared();
            __syncthreads();
        }
    }

    float bv[8];  // this thread's 8 columns' bias
#pragma unroll
    for (int j = 0; j < 8; j++) bv[j] = bias_at(bias, n0 + (j / 4) * 64 + tx * 4 + j % 4, N);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
        if (m >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = n0 + h * 64 + tx * 4;
            float v[4];
#pragma unroll
            for (int j = 0; j < 4; j++) v[j] = acc[i][4 * h + j] + bv[4 * h + j];
            bf16* dst = out + (size_t)m * N + n;
            if (N % 4 == 0 && n + 3 < N) {  // 8-byte aligned: (m*N + n) is a multiple of 4
                __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
                uint2 pack;
                pack.x = *reinterpret_cast<uint32_t*>(&lo);
                pack.y = *reinterpret_cast<uint32_t*>(&hi);
                *reinterpret_cast<uint2*>(dst) = pack;
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (n + j < N) dst[j] = __float2bfloat16(v[j]);
            }
        }
    }
}

// ------------------------------------------------------------------------------------------ variant 4
// Block tile 128 x 128, K step 64 (a tile row is 128 bytes = 8 chunks of 16 bytes, stored with chunk c of row r at
// c ^ (r & 7): flash::tile_chunk_addr<64>, so the 8 rows of an ldmatrix phase and the 8 chunks a cp.async row
// writes fall in 8 different bank groups). 8 warps as 2 (M) x 4 (N), each 64 x 32 = 4 x 4 mma tiles of 16 x 8.
// Per 16-deep K step a warp issues 4 + 2 ldmatrix.x4 for 16 mma. 3 stages of A+B tiles = 96 KB: 2 blocks per SM.
namespace mma4 {
constexpr int kBM = 128, kBN = 128, kBK = 64, kStages = 3, kThreads = 256;
constexpr int kWarpM = 64, kWarpN = 32;
constexpr uint32_t kTileA = kBM * kBK * sizeof(bf16), kTileB = kBN * kBK * sizeof(bf16);
constexpr uint32_t kStageBytes = kTileA + kTileB;
constexpr size_t kSmemBytes = (size_t)kStages * kStageBytes;
// The output tile staged as bf16: 128 rows of 256 bytes (16 chunks, chunk c of row r stored at c ^ (r & 7)).
constexpr uint32_t kOutRowBytes = kBN * sizeof(bf16);
static_assert(kBM * kOutRowBytes <= kSmemBytes, "the output tile reuses the pipeline's shared memory");
static_assert((kBM / kWarpM) * (kBN / kWarpN) * 32 == kThreads, "8 warps cover the block tile");

__device__ __forceinline__ uint32_t out_chunk_addr(uint32_t base, int row, int chunk) {
    return base + row * kOutRowBytes + ((chunk ^ (row & 7)) << 4);
}

// Rows [0, kRows) of the K slice [k0, k0 + 64) of a row-major matrix (`src` = its first row of the tile, `ld`
// elements per row) into a swizzled tile; rows >= rows_valid and columns >= K become zeros (read nothing).
template <int kRows>
__device__ __forceinline__ void load_tile(uint32_t tile, const bf16* src, int rows_valid, int ld, int k0, int K) {
    constexpr int kChunksPerRow = kBK / 8, kChunks = kRows * kChunksPerRow;
    static_assert(kChunks % kThreads == 0, "tile chunks divide evenly among threads");
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; i++) {
        const int id = threadIdx.x + i * kThreads;
        const int row = id / kChunksPerRow, chunk = id % kChunksPerRow, k = k0 + chunk * 8;
        const bool valid = row < rows_valid && k < K;  // K % 8 == 0: a chunk is all in or all out
        const bf16* g = valid ? src + (size_t)row * ld + k : src;
        cp_async_16(flash::tile_chunk_addr<kBK>(tile, row, chunk), g, valid);
    }
}
}  // namespace mma4

__global__ void __launch_bounds__(mma4::kThreads, 2)
    mma_kernel(bf16* out, const bf16* A, const bf16* B, const bf16* bias, int M, int N, int K) {
    using namespace mma4;
    extern __shared__ __align__(128) uint8_t smem[];
    const uint32_t sbase = smem_addr(smem);
    int tm, tn;
    grouped_tile((M + kBM - 1) / kBM, (N + kBN - 1) / kBN, &tm, &tn);
    const int m0 = tm * kBM, n0 = tn * kBN;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = (warp / (kBN / kWarpN)) * kWarpM, wn = (warp % (kBN / kWarpN)) * kWarpN;  // warp's origin in tile
    const bf16* a_src = A + (size_t)m0 * K;
    const bf16* b_src = B + (size_t)n0 * K;
    const int num_k = (K + kBK - 1) / kBK;

    auto load_stage = [&](int stage, int kt) {
        const uint32_t sA = sbase + stage * kStageBytes;
        load_tile<kBM>(sA, a_src, M - m0, K, kt * kBK, K);
        load_tile<kBN>(sA + kTileA, b_src, N - n0, K, kt * kBK, K);
    };

    float acc[kWarpM / 16][kWarpN / 8][4] = {};
    // Prologue: the first kStages - 1 slices in flight. One commit group per slice, empty or not, so that
    // "slice kt has landed" is always "at most kStages - 2 groups pending" below.
#pragma unroll
    for (int s = 0; s < kStages - 1; s++) {
        if (s < num_k) load_stage(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < num_k; kt++) {
        cp_async_wait<kStages - 2>();
        __syncthreads();  // slice kt visible to all; every warp is done with slice kt - 1, whose stage is refilled now
        const int next = kt + kStages - 1;
        if (next < num_k) load_stage(next % kStages, next);
        cp_async_commit();

        const uint32_t sA = sbase + (kt % kStages) * kStageBytes, sB = sA + kTileA;
#pragma unroll
        for (int kk = 0; kk < kBK / 16; kk++) {
            uint32_t b[kWarpN / 16][4];
#pragma unroll
            for (int nj = 0; nj < kWarpN / 16; nj++) flash::load_b_frag_rows_n<kBK>(b[nj], sB, wn + 16 * nj, kk, lane);
#pragma unroll
            for (int mi = 0; mi < kWarpM / 16; mi++) {
                uint32_t a[4];
                flash::load_a_frag<kBK>(a, sA, wm + 16 * mi, kk, lane);
#pragma unroll
                for (int nj = 0; nj < kWarpN / 16; nj++) flash::mma_16816_pair(acc[mi], nj, a, b[nj]);
            }
        }
    }
    cp_async_wait<0>();  // only empty groups can be pending, but the shared memory is reused below
    __syncthreads();

    // Epilogue: accumulator (row g / g + 8, columns 2t, 2t + 1 of each 16 x 8 tile) + bias -> bf16 pairs in the
    // staged output tile, then whole 16-byte chunks to global memory.
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int ni = 0; ni < kWarpN / 8; ni++) {
        const int col = wn + 8 * ni + 2 * t;
        const float b0 = bias_at(bias, n0 + col, N), b1 = bias_at(bias, n0 + col + 1, N);
#pragma unroll
        for (int mi = 0; mi < kWarpM / 16; mi++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = wm + 16 * mi + g + 8 * h;
                const uint32_t v = flash::pack_bf16x2(acc[mi][ni][2 * h] + b0, acc[mi][ni][2 * h + 1] + b1);
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(out_chunk_addr(sbase, row, col / 8) + (col % 8) * 2),
                             "r"(v)
                             : "memory");
            }
        }
    }
    __syncthreads();
    constexpr int kOutChunksPerRow = kBN / 8;
#pragma unroll
    for (int i = 0; i < kBM * kOutChunksPerRow / kThreads; i++) {
        const int id = threadIdx.x + i * kThreads;
        const int row = id / kOutChunksPerRow, chunk = id % kOutChunksPerRow;
        const int m = m0 + row, n = n0 + chunk * 8;
        if (m >= M || n >= N) continue;
        uint4 v;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(out_chunk_addr(sbase, row, chunk))
                     : "memory");
        bf16* dst = out + (size_t)m * N + n;
        if (N % 8 == 0) {  // n + 8 <= N and 16-byte aligned
            *reinterpret_cast<uint4*>(dst) = v;
        } else {
            const bf16* e = reinterpret_cast<const bf16*>(&v);
#pragma unroll
            for (int j = 0; j < 8; j++)
                if (n + j < N) dst[j] = e[j];
        }
    }
}

// ------------------------------------------------------------------------------------------ variants table
struct Variant {
    int id;
    const char* name;
    bool slow;        // without -v, timed only on the benchmark shapes with 2·M·N·K <= kSlowMaxFlops
    int max_repeats;  // the CUDA-core variants are timed fewer times (0: -r as given), to keep the run short
};
static const std::vector<Variant> kVariants = {
    {1, "naive", true, 5},          {2, "smem-tiled", true, 5},    {3, "register-tiled", false, 20},
    {4, "mma-sync", false, 0},      {5, "hopper-wgmma", false, 0}, {6, "cublaslt", false, 0},
    {7, "cublaslt-fp8", false, 0},  {8, "cublaslt-fp8-blk", false, 0},
};
constexpr double kSlowMaxFlops = 1e11;

static const char* kHopperMissing = "needs a build for sm_90a running on a compute-capability 9.0 GPU";
static const char* kFp8Missing = "needs FP8 tensor cores (compute capability 8.9, or 9.0 and up)";

static bool fp8_blocks_supported(int M, int N, int K, bool bias);
static bool variant_available(int id) {
    if (id == 5) return matmul_hopper_available();
    if (id == 7) {
        static const bool fp8 = matmul_fp8_supported(64, 64, 64, Fp8Format::E4M3, Fp8Format::E4M3, false);
        return fp8;
    }
    if (id == 8) {
        static const bool blocks = device_info().prop.major == 9 && fp8_blocks_supported(256, 256, 256, false);
        return blocks;
    }
    return true;
}
static const char* missing_reason(int id) {
    return id == 7 ? kFp8Missing : id == 8 ? "needs cuBLASLt's block-scaled FP8 GEMMs (Hopper, cuBLAS 12.9+)"
                                           : kHopperMissing;
}

// Variant 7's operands: A and B cast to E4M3 once per (A, B, shape), with the scales their amax gives (margin 0);
// the GEMM is then timed alone. scales: a_scale, b_scale, then 1 / a_scale and 1 / b_scale at kDescale[0] and
// kDescale[1] (16 bytes apart: the GEMM's scale pointers, llmc/core/fp8.h's kFp8DescaleStride).
struct Fp8Operands {
    const bf16 *A = nullptr, *B = nullptr;
    int M = 0, N = 0, K = 0;
    DeviceBuffer<uint8_t> a8, b8;
    DeviceBuffer<float> scales, amax;
    static constexpr int kDescale[2] = {kFp8DescaleStride, 2 * kFp8DescaleStride};
    float host_scales[3 * kFp8DescaleStride] = {1, 1};
};
static Fp8Operands& fp8_operands(const bf16* A, const bf16* B, int M, int N, int K) {
    static Fp8Operands o;
    if (o.A == A && o.B == B && o.M == M && o.N == N && o.K == K) return o;
    o.A = A, o.B = B, o.M = M, o.N = N, o.K = K;
    o.a8.resize((size_t)M * K), o.b8.resize((size_t)N * K), o.scales.resize(3 * kFp8DescaleStride), o.amax.resize(2);
    cudaCheck(cudaMemset(o.amax.ptr, 0, 2 * sizeof(float)));
    fp8_cast_transpose<Fp8Format::E4M3>(A, M, K, nullptr, nullptr, nullptr, o.amax.ptr, 0);
    fp8_cast_transpose<Fp8Format::E4M3>(B, N, K, nullptr, nullptr, nullptr, o.amax.ptr + 1, 0);
    float amax[2];
    cudaCheck(cudaMemcpy(amax, o.amax.ptr, sizeof(amax), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 2; i++) {
        o.host_scales[i] = fp8_scale_from_amax(amax[i], Fp8Format::E4M3, 0, 1.f);
        o.host_scales[Fp8Operands::kDescale[i]] = 1.f / o.host_scales[i];
    }
    cudaCheck(cudaMemcpy(o.scales.ptr, o.host_scales, sizeof(o.host_scales), cudaMemcpyHostToDevice));
    fp8_cast_transpose<Fp8Format::E4M3>(A, M, K, o.scales.ptr, o.a8.ptr, nullptr, nullptr, 0);
    fp8_cast_transpose<Fp8Format::E4M3>(B, N, K, o.scales.ptr + 1, o.b8.ptr, nullptr, nullptr, 0);
    cudaCheck(cudaDeviceSynchronize());
    return o;
}
// What variant 7 multiplies: the operands' codes decoded and divided by their scale (fp64, row-major).
static std::vector<double> dequantized(const DeviceBuffer<uint8_t>& codes, float scale) {
    std::vector<uint8_t> c(codes.count);
    cudaCheck(cudaMemcpy(c.data(), codes.ptr, c.size(), cudaMemcpyDeviceToHost));
    std::vector<double> v(c.size());
    for (size_t i = 0; i < c.size(); i++) v[i] = fp8_decode(c[i], Fp8Format::E4M3) / scale;
    return v;
}

// Variant 8's operands: A in 1x128 blocks, B in 128x128 (the weight's), E4M3, cast once per (A, B, shape).
struct Fp8BlockOperands {
    const bf16 *A = nullptr, *B = nullptr;
    int M = 0, N = 0, K = 0;
    DeviceBuffer<uint8_t> a8, b8;
    DeviceBuffer<float> a_descales, b_descales;
};
static bool fp8_blocks_supported(int M, int N, int K, bool bias) {
    return K % 16 == 0 && M % 8 == 0 && N % 8 == 0 &&
           matmul_fp8_supported(M, N, K, Fp8Format::E4M3, Fp8Format::E4M3, false, bias, Fp8Granularity::k1x128,
                                Fp8Granularity::k128x128);
}
static Fp8BlockOperands& fp8_block_operands(const bf16* A, const bf16* B, int M, int N, int K) {
    static Fp8BlockOperands o;
    if (o.A == A && o.B == B && o.M == M && o.N == N && o.K == K) return o;
    o.A = A, o.B = B, o.M = M, o.N = N, o.K = K;
    o.a8.resize((size_t)M * K), o.b8.resize((size_t)N * K);
    o.a_descales.resize(fp8_block_descales(M, K, Fp8Granularity::k1x128));
    o.b_descales.resize(fp8_block_descales(N, K, Fp8Granularity::k128x128));
    cudaCheck(cudaMemset(o.a_descales.ptr, 0, o.a_descales.count * sizeof(float)));  // the grids' padding
    cudaCheck(cudaMemset(o.b_descales.ptr, 0, o.b_descales.count * sizeof(float)));
    fp8_block_cast<Fp8Format::E4M3>(A, M, K, Fp8Granularity::k1x128, o.a8.ptr, o.a_descales.ptr, 0);
    fp8_block_cast<Fp8Format::E4M3>(B, N, K, Fp8Granularity::k128x128, o.b8.ptr, o.b_descales.ptr, 0);
    cudaCheck(cudaDeviceSynchronize());
    return o;
}
// What variant 8 multiplies: each code decoded times its block's descale (fp64, row-major).
static std::vector<double> dequantized_blocks(const DeviceBuffer<uint8_t>& codes, const DeviceBuffer<float>& descales,
                                              int rows, int cols, Fp8Granularity b) {
    std::vector<uint8_t> c(codes.count);
    std::vector<float> d(descales.count);
    cudaCheck(cudaMemcpy(c.data(), codes.ptr, c.size(), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(d.data(), descales.ptr, d.size() * sizeof(float), cudaMemcpyDeviceToHost));
    const size_t ld = fp8_block_ld(rows, cols, b);
    std::vector<double> v(c.size());
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < cols; k++)
            v[(size_t)r * cols + k] =
                fp8_decode(c[(size_t)r * cols + k], Fp8Format::E4M3) * d[fp8_block_index(r, k, ld, b)];
    return v;
}

// C = A·Bᵀ + bias with variant `id`; M, N >= 1, K >= 8, K % 8 == 0, 16-byte aligned A, B (cudaMalloc's).
static void run_variant(int id, bf16* out, const bf16* A, const bf16* B, const bf16* bias, int M, int N, int K) {
    if (M < 1 || N < 1 || K < 8 || K % 8 != 0) {
        fprintf(stderr, "error: M=%d N=%d K=%d: needs M, N >= 1, K >= 8, K %% 8 == 0\n", M, N, K);
        exit(EXIT_FAILURE);
    }
    const long long tiles32 = (long long)((M + 7) / 8) * ((N + 31) / 32);
    switch (id) {
        case 1:
            naive_kernel<<<(unsigned)tiles32, dim3(32, 8)>>>(out, A, B, bias, M, N, K);
            break;
        case 2:
            smem_tiled_kernel<<<(unsigned)((long long)((M + kTile2 - 1) / kTile2) * ((N + kTile2 - 1) / kTile2)),
                                dim3(kTile2, kTile2)>>>(out, A, B, bias, M, N, K);
            break;
        case 3:
            register_tiled_kernel<<<(unsigned)((long long)((M + kBM3 - 1) / kBM3) * ((N + kBN3 - 1) / kBN3)),
                                    kThreads3>>>(out, A, B, bias, M, N, K);
            break;
        case 4: {
            using namespace mma4;
            static bool smem_raised = false;
            if (!smem_raised) {
                cudaCheck(flash::allow_smem(mma_kernel, kSmemBytes));
                smem_raised = true;
            }
            mma_kernel<<<(unsigned)((long long)((M + kBM - 1) / kBM) * ((N + kBN - 1) / kBN)), kThreads,
                         kSmemBytes>>>(out, A, B, bias, M, N, K);
            break;
        }
        case 5:
            matmul_forward_hopper(out, A, B, bias, M, N, K, 0);
            break;
        case 6:
            matmul_forward(out, A, B, bias, M, K, N);  // the engine's argument order: rows, in-, out-channels
            break;
        case 7: {
            const Fp8Operands& o = fp8_operands(A, B, M, N, K);
            matmul_fp8(out, o.a8.ptr, Fp8Format::E4M3, o.scales.ptr + o.kDescale[0], o.b8.ptr, Fp8Format::E4M3,
                       o.scales.ptr + o.kDescale[1], bias, M, N, K, false, 0);
            break;
        }
        case 8: {
            const Fp8BlockOperands& o = fp8_block_operands(A, B, M, N, K);
            matmul_fp8(out, o.a8.ptr, Fp8Format::E4M3, o.a_descales.ptr, o.b8.ptr, Fp8Format::E4M3, o.b_descales.ptr,
                       bias, M, N, K, false, 0, false, Fp8Granularity::k1x128, Fp8Granularity::k128x128);
            break;
        }
        default:
            fprintf(stderr, "error: no variant %d\n", id);
            exit(EXIT_FAILURE);
    }
    cudaCheckLaunch();
}

// ------------------------------------------------------------------------------------------ validation
struct GemmShape {
    const char* name;
    int M, N, K;
    bool bias;
    double flops() const { return 2.0 * M * (double)N * K; }
};

// A GEMM's bf16 output against the fp64 product of the same bf16 inputs. fp32 accumulation over K up to a few
// thousand is good to ~1e-6 relative, so what remains is the output's rounding to bf16: at most half an ulp, 2^-8 of
// |ref|, rel-L2 ~1.6e-3 (a uniform error over a relative ulp of 2^-8..2^-7). Bounds: rel-L2 <= 5e-3 (as for every
// bf16 kernel here) and element-wise |out - ref| <= 2^-7·|ref| (a whole ulp: the accumulation order may flip a
// rounding) + 1e-2·RMS(ref) (values near zero after cancellation; also covers a library that splits K and adds
// bf16-rounded partial sums). Inputs are N(0, 1), so RMS(ref) ~ sqrt(K): a lost K chunk of 8 (~2.8) breaks the
// element-wise bound, a lost bias (N(0, 1), 1/sqrt(K) of RMS) the rel-L2 one, an unwritten element (NaN) both.
static Tolerance gemm_tolerance(double ref_rms) { return {1e-2 * ref_rms + 1e-6, 1.0 / 128, 5e-3}; }

// Odd shapes first (no M, N or K a multiple of any tile; one row; K = 16 < one K step), then an engine shape at
// reduced M (d48 fc projection: the largest K, 100 K steps, and N = 1600 a partial tile), then two that variant 7
// takes (K a multiple of 16, M and N of 4) off every tile. Each with and without bias.
static const std::vector<GemmShape> kCheckShapes = {
    {"one row", 1, 768, 768, true},     {"K=16", 257, 300, 16, true},    {"odd", 131, 1000, 200, true},
    {"N=77", 1000, 77, 72, true},       {"odd-qkv", 333, 2304, 776, true}, {"d48 fcproj M=128", 128, 1600, 6400, true},
    {"fp8 ragged", 132, 1000, 208, true}, {"fp8 qkv", 336, 2304, 784, true},  // shapes variant 7 takes, off the tiles
};

// Validates every chosen variant at one shape, with and without bias; returns the number of failed checks.
static int check_shape(const GemmShape& s, const std::vector<int>& ids, int* total) {
    std::vector<float> a = random_normal((size_t)s.M * s.K), b = random_normal((size_t)s.N * s.K),
                       bias = random_normal(s.N);
    DeviceBuffer<bf16> dA((size_t)s.M * s.K), dB((size_t)s.N * s.K), dbias(s.N), dout((size_t)s.M * s.N);
    dA.upload(round_to_bf16(a));
    dB.upload(round_to_bf16(b));
    dbias.upload(round_to_bf16(bias));
    std::vector<double> ref((size_t)s.M * s.N);
    {
        const std::vector<double> a_d = to_double(a), b_d = to_double(b);
        reference::matmul_forward<double>(ref.data(), a_d.data(), b_d.data(), nullptr, 1, s.M, s.K, s.N);
    }
    // variant 7 multiplies the FP8-rounded operands: its own reference
    const bool fp8 = std::find(ids.begin(), ids.end(), 7) != ids.end() && s.K % 16 == 0 && s.M % 4 == 0 &&
                     s.N % 4 == 0 && matmul_fp8_supported(s.M, s.N, s.K, Fp8Format::E4M3, Fp8Format::E4M3, false, true);
    std::vector<double> ref8, ref8b;
    if (fp8) {
        const Fp8Operands& o = fp8_operands(dA.ptr, dB.ptr, s.M, s.N, s.K);
        const std::vector<double> a8 = dequantized(o.a8, o.host_scales[0]), b8 = dequantized(o.b8, o.host_scales[1]);
        ref8.resize(ref.size());
        reference::matmul_forward<double>(ref8.data(), a8.data(), b8.data(), nullptr, 1, s.M, s.K, s.N);
    }
    // variant 8 likewise, its operands' blocks dequantized
    const bool fp8b = std::find(ids.begin(), ids.end(), 8) != ids.end() && fp8_blocks_supported(s.M, s.N, s.K, true);
    if (fp8b) {
        const Fp8BlockOperands& o = fp8_block_operands(dA.ptr, dB.ptr, s.M, s.N, s.K);
        const std::vector<double> a8 = dequantized_blocks(o.a8, o.a_descales, s.M, s.K, Fp8Granularity::k1x128),
                                  b8 = dequantized_blocks(o.b8, o.b_descales, s.N, s.K, Fp8Granularity::k128x128);
        ref8b.resize(ref.size());
        reference::matmul_forward<double>(ref8b.data(), a8.data(), b8.data(), nullptr, 1, s.M, s.K, s.N);
    }
    int failures = 0;
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        if (with_bias) {
            for (size_t i = 0; i < ref.size(); i++) ref[i] += bias[i % s.N];
            for (size_t i = 0; i < ref8.size(); i++) ref8[i] += bias[i % s.N];
            for (size_t i = 0; i < ref8b.size(); i++) ref8b[i] += bias[i % s.N];
        }
        for (int id : ids) {
            printf("  v%d %-15s M%-5d N%-5d K%-5d %s\n", id, kVariants[id - 1].name, s.M, s.N, s.K,
                   with_bias ? "bias" : "no bias");
            if ((id == 7 && !fp8) || (id == 8 && !fp8b)) {
                printf("    skipped: FP8 takes K in multiples of 16 and M, N of 4 here (block scales: M and N of 8), "
                       "or cuBLASLt has no FP8 GEMM for the shape\n");
                continue;
            }
            const std::vector<double>& want = id == 7 ? ref8 : id == 8 ? ref8b : ref;
            dout.poison();
            run_variant(id, dout.ptr, dA.ptr, dB.ptr, with_bias ? dbias.ptr : nullptr, s.M, s.N, s.K);
            cudaCheck(cudaDeviceSynchronize());
            (*total)++;
            if (!validate("out", dout.download(), want, gemm_tolerance(rms(want)))) failures++;
        }
    }
    return failures;
}

// ------------------------------------------------------------------------------------------ benchmark
// The engine's GEMMs (M = B·T): d12 at B=16, T=1024 and d48 at B=8, T=1024; then one large square.
static const std::vector<GemmShape> kBenchShapes = {
    {"d12 qkv", 16384, 2304, 768, true},       {"d12 attproj", 16384, 768, 768, true},
    {"d12 fc", 16384, 3072, 768, true},        {"d12 fcproj", 16384, 768, 3072, true},
    {"d12 classifier", 16384, 50304, 768, false}, {"d48 qkv", 8192, 4800, 1600, true},
    {"d48 attproj", 8192, 1600, 1600, true},   {"d48 fc", 8192, 6400, 1600, true},
    {"d48 fcproj", 8192, 1600, 6400, true},    {"d48 classifier", 8192, 50304, 1600, false},
    {"square 8192", 8192, 8192, 8192, true},
};
constexpr int kEngineShapes = 10;  // the first 10 of kBenchShapes

// Benchmark inputs: uniform in [-1, 1), made on the device (the classifier's weight is 80M values).
__global__ void fill_uniform_kernel(bf16* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 0x9E3779B1u ^ (uint32_t)(i >> 32) ^ seed;
        h ^= h >> 16;
        h *= 0x85EBCA6Bu;
        h ^= h >> 13;
        h *= 0xC2B2AE35u;
        h ^= h >> 16;
        p[i] = __float2bfloat16((h >> 8) * (2.f / 16777216.f) - 1.f);
    }
}
static void fill_uniform(DeviceBuffer<bf16>& buf, uint32_t seed) {
    fill_uniform_kernel<<<1024, 256>>>(buf.ptr, buf.count, seed);
    cudaCheckLaunch();
}

// ------------------------------------------------------------------------------------------ command line
struct Options {
    std::vector<int> variants;  // empty = all
    std::vector<GemmShape> shapes;
    int repeats = 50;
    bool validate_only = false;
    bool default_shapes = false;  // kBenchShapes: the v5 / v6 geometric mean is over its first kEngineShapes
};

static const char* kVariantsHelp =
    "1 naive, 2 smem-tiled, 3 register-tiled, 4 mma-sync, 5 hopper-wgmma, 6 cublaslt, 7 cublaslt-fp8, "
    "8 cublaslt-fp8-blk";

[[noreturn]] static void usage_and_exit(const char* prog, const char* problem) {
    if (problem) fprintf(stderr, "error: %s\n", problem);
    fprintf(stderr,
            "usage: %s [V] [-v V[,V...]] [-s \"M,N,K[,bias];...\"] [-r repeats] [-c] [-h]\n"
            "  validates the chosen variants (default all) at a fixed list of shapes against the fp64 CPU reference,\n"
            "  then benchmarks them; C (M x N) = A (M x K) · Bᵀ (B N x K) + bias, bf16, K %% 8 == 0\n"
            "  V, -v  variants (default all; the ratio column needs 6 among them): %s\n"
            "  -s  benchmark shapes (default: the d12/d48 GEMMs and 8192^3; bias 0 = none, default 1)\n"
            "  -r  timed repeats (default 50; at most 5 for variants 1 and 2, 20 for 3)\n"
            "  -c  check only: validate, no benchmark; exit status 1 on any failure\n",
            prog, kVariantsHelp);
    exit(problem ? EXIT_FAILURE : EXIT_SUCCESS);
}

static bool parse_shapes(const char* s, std::vector<GemmShape>* out) {
    const std::string str(s);
    size_t at = 0;
    while (at < str.size()) {
        size_t end = str.find(';', at);
        if (end == std::string::npos) end = str.size();
        GemmShape sh = {"custom", 0, 0, 0, true};
        int bias = 1;
        const int n = sscanf(str.substr(at, end - at).c_str(), "%d,%d,%d,%d", &sh.M, &sh.N, &sh.K, &bias);
        if (n < 3 || sh.M < 1 || sh.N < 1 || sh.K < 8 || sh.K % 8 != 0 || (n == 4 && bias != 0 && bias != 1))
            return false;
        sh.bias = bias != 0;
        out->push_back(sh);
        at = end + 1;
    }
    return !out->empty();
}

static Options parse_options(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") usage_and_exit(argv[0], nullptr);
        if (a == "-c") { o.validate_only = true; continue; }
        if (!a.empty() && a[0] != '-') {  // llm.c style: a bare number picks the variant (`./matmul_forward 4`)
            const int x = positive_int(a);
            if (x < 1) usage_and_exit(argv[0], ("expected a variant number, got " + a).c_str());
            o.variants.push_back(x);
            continue;
        }
        if (i + 1 >= argc) usage_and_exit(argv[0], ("missing value after " + a).c_str());
        const char* v = argv[++i];
        if (a == "-v") {
            if (!parse_positive_list(v, &o.variants)) usage_and_exit(argv[0], "bad variant list");
        } else if (a == "-s") {
            if (!parse_shapes(v, &o.shapes)) usage_and_exit(argv[0], "bad -s shape list (M,N,K >= 8, K % 8 == 0)");
        } else if (a == "-r") {
            o.repeats = positive_int(v);
            if (o.repeats < 1) usage_and_exit(argv[0], "expected a positive integer after -r");
        } else {
            usage_and_exit(argv[0], ("unknown option " + a).c_str());
        }
    }
    for (int id : o.variants)
        if (id > (int)kVariants.size()) usage_and_exit(argv[0], ("no variant " + std::to_string(id)).c_str());
    if (o.shapes.empty()) {
        o.shapes = kBenchShapes;
        o.default_shapes = true;
    }
    return o;
}

// ------------------------------------------------------------------------------------------ main
int main(int argc, char** argv) {
    const Options opt = parse_options(argc, argv);
    print_device();
    matmul_init();  // as the engine does before its first GEMM

    std::vector<int> ids;  // the chosen variants that can run here
    for (const Variant& v : kVariants) {
        if (!wants(opt.variants, v.id)) continue;
        if (variant_available(v.id)) {
            ids.push_back(v.id);
        } else if (!opt.variants.empty()) {
            fprintf(stderr, "error: variant %d (%s) requested but not available: %s\n", v.id, v.name,
                    missing_reason(v.id));
            return 1;
        } else {
            printf("v%d %s: not available (%s): skipped\n", v.id, v.name, missing_reason(v.id));
        }
    }

    printf("validation against the fp64 CPU reference (rel-L2 <= 5e-3; element-wise 2^-7·|ref| + 1e-2·RMS)\n");
    int failures = 0, total = 0;
    for (const GemmShape& s : kCheckShapes) failures += check_shape(s, ids, &total);
    if (failures) {
        printf("VALIDATION FAILED: %d of %d checks\n", failures, total);
        return 1;
    }
    printf("validation: all %d checks passed\n", total);
    if (opt.validate_only) return 0;

    printf("\nbenchmark: median of %d calls (at most 5 for variants 1, 2 and 20 for 3; without -v, 1 and 2 run only "
           "where 2·M·N·K <= %.0e); cold = L2 flushed before each call, warm = back-to-back; TFLOP/s = 2·M·N·K / "
           "warm; vs v6 = v6 warm ms / this warm ms (> 1: faster than cuBLASLt)\n",
           opt.repeats, kSlowMaxFlops);
    printf("%-16s %6s %6s %6s %-4s  %2s %-15s %9s %9s %8s %7s\n", "shape", "M", "N", "K", "bias", "v", "variant",
           "cold_ms", "warm_ms", "TFLOP/s", "vs v6");
    // per variant: sum of log(v6 ms / its ms) over the engine shapes where both ran, and their count
    std::vector<double> log_ratio_sum(kVariants.size() + 1, 0.0);
    std::vector<int> ratio_count(kVariants.size() + 1, 0);
    for (size_t si = 0; si < opt.shapes.size(); si++) {
        const GemmShape& s = opt.shapes[si];
        DeviceBuffer<bf16> dA((size_t)s.M * s.K), dB((size_t)s.N * s.K), dbias(s.N), dout((size_t)s.M * s.N);
        fill_uniform(dA, 1);
        fill_uniform(dB, 2);
        fill_uniform(dbias, 3);
        const bf16* bias = s.bias ? dbias.ptr : nullptr;
        // time every variant first, then print the shape's rows with their ratio to v6
        std::vector<std::pair<int, Timing>> results;
        for (int id : ids) {
            const bool slow = kVariants[id - 1].slow;
            if (slow && opt.variants.empty() && s.flops() > kSlowMaxFlops) {
                results.push_back({id, Timing{-1, -1}});
                continue;
            }
            if ((id == 7 && !(s.M % 4 == 0 && s.N % 4 == 0 &&
                              matmul_fp8_supported(s.M, s.N, s.K, Fp8Format::E4M3, Fp8Format::E4M3, false, s.bias))) ||
                (id == 8 && !fp8_blocks_supported(s.M, s.N, s.K, s.bias))) {
                results.push_back({id, Timing{-2, -2}});
                continue;
            }
            const int cap = kVariants[id - 1].max_repeats;
            const int repeats = cap ? std::min(opt.repeats, cap) : opt.repeats;
            results.push_back(
                {id, benchmark([&] { run_variant(id, dout.ptr, dA.ptr, dB.ptr, bias, s.M, s.N, s.K); }, repeats)});
        }
        double v6_ms = -1;
        for (const auto& r : results)
            if (r.first == 6) v6_ms = r.second.warm_ms;
        for (const auto& r : results) {
            printf("%-16s %6d %6d %6d %-4s  %2d %-15s ", s.name, s.M, s.N, s.K, s.bias ? "yes" : "no", r.first,
                   kVariants[r.first - 1].name);
            const Timing& t = r.second;
            if (t.warm_ms == -2) {
                printf("skipped: a shape FP8 does not take (K a multiple of 16, M and N of 4, N of 8)\n");
                continue;
            }
            if (t.warm_ms < 0) {
                printf("skipped: slow teaching variant on a large shape (time it with -v %d)\n", r.first);
                continue;
            }
            printf("%9.4f %9.4f %8.1f", t.cold_ms, t.warm_ms, s.flops() / (t.warm_ms * 1e9));
            if (v6_ms > 0) printf(" %7.3f", v6_ms / t.warm_ms);
            printf("\n");
        }
        fflush(stdout);
        const bool engine_shape = opt.default_shapes && (int)si < kEngineShapes;
        for (const auto& r : results)
            if (engine_shape && r.first != 6 && r.second.warm_ms > 0 && v6_ms > 0) {
                log_ratio_sum[r.first] += std::log(v6_ms / r.second.warm_ms);
                ratio_count[r.first]++;
            }
    }
    // v5 / v6 is the headline (the Hopper kernel against the engine's cuBLASLt); v3 and v4 for context
    bool first = true;
    for (int id : {8, 7, 5, 4, 3}) {
        if (ratio_count[id] == 0) continue;
        printf("%sv%d / v6 throughput, geometric mean over %d engine shapes: %.3f (> 1: faster than cuBLASLt)\n",
               first ? "\n" : "", id, ratio_count[id], std::exp(log_ratio_sum[id] / ratio_count[id]));
        first = false;
    }
    return 0;
}
