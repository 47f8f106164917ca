// The CPU engine's matrix products: one GEMM, C (M, N) = or += A · B with A and B read through strides (so a
// transposed operand is read in place), blocked for the caches, vectorised (llmc/cpu/simd.h), OpenMP over blocks
// of C. As in BLIS / GotoBLAS, each block copies ("packs") its operands into contiguous panels first: a panel of
// kKC x kNR of B that stays in L1 and kMR-row slivers of A, so the register-tile kernel (kMR x kNR outputs:
// per k one broadcast of A and kNR / kVec vector loads of B) streams from L1 whatever the operands' strides
// (rows 3072 bytes apart map onto a few L1 sets: unpacked, the panel thrashes).
// The model's products, with N = B*T positions:
//   forward   out (N, OC) = inp (N, C) · Wᵀ (+ bias)        A = inp, B = Wᵀ (W read in place, packed transposed)
//   backward  dinp (N, C) += dout (N, OC) · W               A = dout, B = W
//             dW (OC, C) += doutᵀ · inp                     A = doutᵀ (read in place), B = inp
// Every output is summed over k in increasing order, in chunks of kKC: the blocking, the tile edges and the
// number of threads do not change a bit of the result (runs are reproducible, resume is bit-exact).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <new>

#include "llmc/cpu/simd.h"

namespace cpu {

constexpr int kMR = 6;                              // register tile: kMR rows x kNR columns
constexpr int kNV = kVec == 16 ? 4 : 2;             // vectors per tile row (AVX-512: 4 x 16; AVX2: 2 x 8)
constexpr int kNR = kNV * kVec;
constexpr int kKC = 128;                            // reduction chunk: a packed B panel (kKC x kNR) fits L1
constexpr int kMC = 16 * kMR;                       // rows per block when B is packed whole (gemm_small_k)

// A strided matrix view: element (i, j) at p[i rs + j cs].
struct MatView {
    const float* p;
    size_t rs, cs;
    float at(size_t i, size_t j) const { return p[i * rs + j * cs]; }
};

namespace matmul_detail {

// A 64-byte aligned float buffer that keeps its largest size (one per thread: thread_local below).
struct Buffer {
    float* p = nullptr;
    size_t n = 0;
    float* get(size_t count) {
        if (count > n) {
            std::free(p);
            p = static_cast<float*>(std::aligned_alloc(64, round_up64(count * sizeof(float))));
            if (!p) throw std::bad_alloc();
            n = count;
        }
        return p;
    }
    static size_t round_up64(size_t bytes) { return (bytes + 63) / 64 * 64; }
    ~Buffer() { std::free(p); }
};
// [0]: the operand packed whole (the caller's thread), [1]: this thread's panels
inline Buffer& buffer(int which) {
    thread_local Buffer buffers[2];
    return buffers[which];
}

// A rows [i0, i0 + rows) x k [k0, k0 + kc) as slivers of kMR rows, [sliver][k][kMR]; rows past the end zero.
inline void pack_a_sliver(float* d, const MatView& A, int i0, int rows, int k0, int kc) {
    const int r_end = std::min(kMR, rows);
    const float* row[kMR];
    for (int r = 0; r < kMR; r++) row[r] = A.p + (size_t)(i0 + std::min(r, r_end - 1)) * A.rs + (size_t)k0 * A.cs;
    if (r_end == kMR && A.cs == 1) {  // rows contiguous along k
        for (int k = 0; k < kc; k++)
            for (int r = 0; r < kMR; r++) d[k * kMR + r] = row[r][k];
        return;
    }
    if (r_end == kMR && A.rs == 1) {  // Aᵀ read in place: a sliver's kMR values at each k are contiguous
        for (int k = 0; k < kc; k++)
            for (int r = 0; r < kMR; r++) d[k * kMR + r] = row[0][(size_t)k * A.cs + r];
        return;
    }
    for (int k = 0; k < kc; k++) {
        int r = 0;
        for (; r < r_end; r++) d[k * kMR + r] = row[r][(size_t)k * A.cs];
        for (; r < kMR; r++) d[k * kMR + r] = 0.0f;
    }
}

// B k [k0, k0 + kc) x columns [j0, j0 + cols) as [k][kNR]; columns past the end zero.
inline void pack_b_panel(float* dst, const MatView& B, int k0, int kc, int j0, int cols) {
    if (B.cs == 1) {
        for (int k = 0; k < kc; k++) {
            const float* src = B.p + (size_t)(k0 + k) * B.rs + j0;
            float* d = dst + (size_t)k * kNR;
            if (cols == kNR) {
                for (int v = 0; v < kNV; v++) vstore(d + v * kVec, vload(src + v * kVec));
            } else {
                for (int j = 0; j < cols; j++) d[j] = src[j];
                for (int j = cols; j < kNR; j++) d[j] = 0.0f;
            }
        }
        return;
    }
    // B transposed (W read as Wᵀ): column j is contiguous along k. Squares of kVec columns x kVec k are transposed
    // in registers (vtranspose); the edges go one element at a time.
    int j = 0;
    if (B.rs == 1) {
        for (; j + kVec <= cols; j += kVec) {
            const float* src = B.p + (size_t)(j0 + j) * B.cs + k0;
            int k = 0;
            for (; k + kVec <= kc; k += kVec) {
                vfloat r[kVec];
                for (int l = 0; l < kVec; l++) r[l] = vload(src + (size_t)l * B.cs + k);
                vtranspose(r);
                for (int l = 0; l < kVec; l++) vstore(dst + (size_t)(k + l) * kNR + j, r[l]);
            }
            for (; k < kc; k++)
                for (int l = 0; l < kVec; l++) dst[(size_t)k * kNR + j + l] = src[(size_t)l * B.cs + k];
        }
    }
    for (; j < kNR; j++) {
        float* d = dst + j;
        if (j < cols) {
            const float* src = B.p + (size_t)(j0 + j) * B.cs + (size_t)k0 * B.rs;
            for (int k = 0; k < kc; k++) d[(size_t)k * kNR] = src[(size_t)k * B.rs];
        } else {
            for (int k = 0; k < kc; k++) d[(size_t)k * kNR] = 0.0f;
        }
    }
}

// The register tile: acc (kMR x kNR) = C (when load_c) + a sliver · b panel over kc; then rows x cols of it stored.
inline void kernel(const float* __restrict a, const float* __restrict b, int kc, float* c, size_t ldc, int rows,
                   int cols, bool load_c) {
    vfloat acc[kMR][kNV];
    const bool full = rows == kMR && cols == kNR;
    for (int r = 0; r < kMR; r++)
        for (int v = 0; v < kNV; v++) {
            if (!load_c) acc[r][v] = vfloat{};
            else if (full) acc[r][v] = vload(c + r * ldc + v * kVec);
            else {
                acc[r][v] = vfloat{};
                for (int l = 0; l < kVec; l++)
                    if (r < rows && v * kVec + l < cols) acc[r][v][l] = c[r * ldc + v * kVec + l];
            }
        }
    for (int k = 0; k < kc; k++) {
        vfloat bv[kNV];
        for (int v = 0; v < kNV; v++) bv[v] = vload(b + (size_t)k * kNR + v * kVec);
        for (int r = 0; r < kMR; r++) {
            const vfloat av = vset1(a[k * kMR + r]);
            for (int v = 0; v < kNV; v++) acc[r][v] += av * bv[v];
        }
    }
    if (full) {
        for (int r = 0; r < kMR; r++)
            for (int v = 0; v < kNV; v++) vstore(c + r * ldc + v * kVec, acc[r][v]);
        return;
    }
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) c[r * ldc + j] = acc[r][j / kVec][j % kVec];
}

inline int chunks(int n, int size) { return (n + size - 1) / size; }

// A packed whole, [k chunk][sliver][k][kMR] (chunk c starts at c * kKC * slivers * kMR, its slivers kc long).
inline size_t packed_a_offset(int chunk, int sliver, int slivers, int kc) {
    return (size_t)chunk * kKC * slivers * kMR + (size_t)sliver * kc * kMR;
}
// B packed whole, [k chunk][column tile][k][kNR].
inline size_t packed_b_offset(int chunk, int tile, int tiles, int kc) {
    return (size_t)chunk * kKC * tiles * kNR + (size_t)tile * kc * kNR;
}

// M small (the positions: forward and dinp): A packed once, whole; threads take column tiles of C, packing each
// panel of B once (so a weight matrix is read once) and sweeping it over every sliver of A.
inline void gemm_small_m(int M, int N, int K, const MatView& A, const MatView& B, float* C, size_t ldc,
                         bool accumulate, bool parallel) {
    const int slivers = chunks(M, kMR), kchunks = chunks(K, kKC), tiles = chunks(N, kNR);
    float* ap = buffer(0).get((size_t)kchunks * kKC * slivers * kMR);
#pragma omp parallel if (parallel)
    {
#pragma omp for schedule(static)
        for (int job = 0; job < kchunks * slivers; job++) {
            const int c = job / slivers, s = job % slivers, kc = std::min(kKC, K - c * kKC);
            pack_a_sliver(ap + packed_a_offset(c, s, slivers, kc), A, s * kMR, M - s * kMR, c * kKC, kc);
        }
        // Column tiles in groups whose C columns (M x group x kNR) stay in L2 while the chunks of A stream past them
        // once per group; groups go to whichever thread is free (the result does not depend on which).
        float* bp = buffer(1).get((size_t)kKC * kNR);
        const int group = std::max(1, (int)((256 << 10) / ((size_t)M * kNR * sizeof(float))));
#pragma omp for schedule(dynamic)
        for (int g = 0; g < tiles; g += group) {
            for (int c = 0; c < kchunks; c++) {
                const int k0 = c * kKC, kc = std::min(kKC, K - k0);
                for (int t = g; t < std::min(tiles, g + group); t++) {
                    const int j = t * kNR, cols = std::min(kNR, N - j);
                    pack_b_panel(bp, B, k0, kc, j, cols);
                    for (int s = 0; s < slivers; s++) {
                        kernel(ap + packed_a_offset(c, s, slivers, kc), bp, kc, C + (size_t)s * kMR * ldc + j, ldc,
                               std::min(kMR, M - s * kMR), cols, accumulate || c > 0);
                    }
                }
            }
        }
    }
}

// K small (the positions: the weight gradient), M large: B packed once, whole; threads take blocks of kMC rows
// of C, packing each sliver of A once.
inline void gemm_small_k(int M, int N, int K, const MatView& A, const MatView& B, float* C, size_t ldc,
                         bool accumulate, bool parallel) {
    const int kchunks = chunks(K, kKC), tiles = chunks(N, kNR), blocks = chunks(M, kMC);
    float* bpk = buffer(0).get((size_t)kchunks * kKC * tiles * kNR);
#pragma omp parallel if (parallel)
    {
#pragma omp for schedule(static)
        for (int job = 0; job < kchunks * tiles; job++) {
            const int c = job / tiles, t = job % tiles, kc = std::min(kKC, K - c * kKC);
            pack_b_panel(bpk + packed_b_offset(c, t, tiles, kc), B, c * kKC, kc, t * kNR, std::min(kNR, N - t * kNR));
        }
        float* ap = buffer(1).get((size_t)kMC * kKC);
#pragma omp for schedule(dynamic)
        for (int blk = 0; blk < blocks; blk++) {
            const int i0 = blk * kMC, rows = std::min(kMC, M - i0);
            for (int c = 0; c < kchunks; c++) {
                const int k0 = c * kKC, kc = std::min(kKC, K - k0);
                for (int s = 0; s < rows; s += kMR) pack_a_sliver(ap + (size_t)s * kc, A, i0 + s, rows - s, k0, kc);
                for (int t = 0; t < tiles; t++) {
                    const int j = t * kNR, cols = std::min(kNR, N - j);
                    const float* bp = bpk + packed_b_offset(c, t, tiles, kc);
                    for (int s = 0; s < rows; s += kMR) {
                        kernel(ap + (size_t)s * kc, bp, kc, C + (size_t)(i0 + s) * ldc + j, ldc,
                               std::min(kMR, rows - s), cols, accumulate || c > 0);
                    }
                }
            }
        }
    }
}

}  // namespace matmul_detail

// C (M, N) = A · B, or C += A · B (accumulate); A is (M, K), B is (K, N), C has row stride ldc. The smaller of
// A and B is packed whole, the other panel by panel (each element once). parallel: OpenMP over tiles of C; false
// inside a parallel region (the calling thread does it all, with its own buffers).
inline void gemm(int M, int N, int K, const MatView& A, const MatView& B, float* C, size_t ldc, bool accumulate,
                 bool parallel = true) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate)
            for (int i = 0; i < M; i++) std::fill(C + (size_t)i * ldc, C + (size_t)i * ldc + N, 0.0f);
        return;
    }
    if ((size_t)M * K <= (size_t)K * N) matmul_detail::gemm_small_m(M, N, K, A, B, C, ldc, accumulate, parallel);
    else matmul_detail::gemm_small_k(M, N, K, A, B, C, ldc, accumulate, parallel);
}

// dbias (OC) += column sums of dout (N, OC); each column summed over rows in order.
inline void column_sums(float* dbias, const float* dout, int N, int OC) {
    constexpr int kVecs = 8, kChunk = kVecs * kVec;
    const int chunks = (OC + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < chunks; c++) {
        const int j0 = c * kChunk, j1 = std::min(OC, j0 + kChunk);
        if (j1 - j0 == kChunk) {
            vfloat acc[kVecs] = {};
            for (int n = 0; n < N; n++)
                for (int v = 0; v < kVecs; v++) acc[v] += vload(dout + (size_t)n * OC + j0 + v * kVec);
            for (int v = 0; v < kVecs; v++) vstore(dbias + j0 + v * kVec, vload(dbias + j0 + v * kVec) + acc[v]);
            continue;
        }
        for (int j = j0; j < j1; j++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + j];
            dbias[j] += s;
        }
    }
}

// out (N, OC) = inp (N, C) · weight (OC, C)ᵀ + bias (OC; may be null).
inline void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                           int OC) {
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) std::copy(bias, bias + OC, out + (size_t)n * OC);
    }
    gemm(N, OC, C, MatView{inp, (size_t)C, 1}, MatView{weight, 1, (size_t)C}, out, (size_t)OC, bias != nullptr);
}

// The backward of matmul_forward: dinp (N, C) = dout · W (overwritten); dweight (OC, C) += doutᵀ · inp and
// dbias (OC) += column sums of dout (accumulated; dbias may be null).
inline void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int N, int C, int OC) {
    gemm(N, C, OC, MatView{dout, (size_t)OC, 1}, MatView{weight, (size_t)C, 1}, dinp, (size_t)C, false);
    gemm(OC, C, N, MatView{dout, 1, (size_t)OC}, MatView{inp, (size_t)C, 1}, dweight, (size_t)C, true);
    if (dbias) column_sums(dbias, dout, N, OC);
}

}  // namespace cpu
