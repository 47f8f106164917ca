// Generation's whole decode step for batches of 1..4 as one persistent kernel (issue 16). At batch 1 a step is
// bound by latency, not by the weights: d12 reads 248 MB (0.05 ms at 4.8 TB/s) but took 0.334 ms as 62 kernels,
// each paying a launch, a wait for the kernel before and a prologue (~3 µs of ~5). Here every block of a
// cooperative grid (all resident: 3 per SM) runs the step's phases in order,
//   per layer: LayerNorm + QKV product (+ K, V into the cache) | decode attention | attention projection + residual
//              | LayerNorm + fc + GELU | fc projection + residual;   then LayerNorm + classifier,
// with a grid barrier between phases (4 per layer). A phase's first weights do not depend on the phase before, so
// each warp loads them into registers before the barrier: the weight fetch overlaps the barrier and the tail of
// the phase before, as the programmatic dependent launches of decode_matvec did across kernels.
// The products are decode_matvec's (llmc/decode_matvec.cuh: the same staging, LayerNorm, dot products and
// epilogue), with the 768-column projections split over 4 warps per column (a K slice each, summed in a fixed
// order) so that they occupy every warp; the attention phase runs decode attention's work items
// (llmc/attention_decode.cuh's split_block). Results equal the per-kernel path up to those sums' order; the
// outputs land in the same buffers (tests/test_decode compares both with the full forward).
// BF16 builds (decode_matvec's vectors); HS 64 or 128.
#pragma once

#include "attention_decode.cuh"
#include "decode_matvec.cuh"

constexpr int kDecodeStepMaxB = 4;

struct DecodeLayerTensor {  // a per-layer parameter: layer l's at p + l * stride
    const floatX* p = nullptr;
    size_t stride = 0;
    __host__ __device__ const floatX* at(int l) const { return p + (size_t)l * stride; }
};

struct DecodeStepArgs {
    // the model
    const floatX *wte = nullptr, *wpe = nullptr, *lnf_w = nullptr, *lnf_b = nullptr;
    DecodeLayerTensor ln1_w, ln1_b, qkv_w, qkv_b, attproj_w, attproj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
    int L = 0, C = 0, NH = 0, HS = 0, Vp = 0;
    // the step: B new tokens, len[b] tokens in the cache counting the new one
    int B = 0;
    const int* tokens = nullptr;
    const int* len = nullptr;
    floatX *k_cache = nullptr, *v_cache = nullptr;  // layer 0's; each layer cache_layer_elements further
    size_t cache_layer_elements = 0;
    int max_T = 0;
    DecodeAttentionParts attn;
    // activations, B rows each (the model's buffers, as the per-kernel path uses them)
    floatX *x = nullptr, *qkv = nullptr, *atty = nullptr, *residual2 = nullptr, *fch_gelu = nullptr,
           *residual3 = nullptr, *logits = nullptr;
    int blocks_per_sm = 3;        // 2 or 3 (decode_step_kernel)
    unsigned* barrier = nullptr;  // decode_step_barrier_bytes(), zero before the first launch (each leaves it reusable)
};

namespace decode_step_detail {

using namespace decode_matvec_detail;

// All blocks of the grid wait here until every block has arrived; writes before it are visible after it.
// Arrival is two-level (groups of kBarrierGroup blocks count on their own 128-byte line, the last of each group
// counts on the top line), so no address takes more than 32 atomics; waiting polls the generation word with
// relaxed loads and fences once (an acquire load per poll invalidates the SM's L1 each time). The generation is
// read before arriving: a block can only see it advance once every block, itself included, has arrived. The last
// arriver of a group resets the group's count, the last at the top the top count, before the generation advances.
constexpr int kBarrierGroup = 32;
constexpr int kBarrierWords = 32;  // one 128-byte line per counter: [0] the generation, [32] the top, then groups
__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned atom_add_acq_rel(unsigned* p, unsigned v) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}
__device__ __forceinline__ void grid_barrier(unsigned* barrier) {
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned* generation = barrier;
        unsigned* top = barrier + kBarrierWords;
        const int group = blockIdx.x / kBarrierGroup, groups = (gridDim.x + kBarrierGroup - 1) / kBarrierGroup;
        unsigned* mine = barrier + (2 + group) * kBarrierWords;
        const unsigned in_group = min(kBarrierGroup, (int)gridDim.x - group * kBarrierGroup);
        const unsigned gen = ld_relaxed(generation);
        // acq_rel: the group's last arriver sees the group's writes before it releases them at the top
        if (atom_add_acq_rel(mine, 1u) == in_group - 1) {
            *mine = 0;
            if (atom_add_acq_rel(top, 1u) == (unsigned)groups - 1) {
                *top = 0;
                asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(generation), "r"(gen + 1) : "memory");
            }
        }
        while (ld_relaxed(generation) == gen) {
        }
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    __syncthreads();
}

// One product of the step: DecodeMatvec's fields (out, W, bias, residual, gelu, the cache append; B rows, N, K),
// with `split` warps per column (1, 2 or 4), warp w of a group taking K slice w.
struct Product {
    DecodeMatvec a;
    int split = 1;
};

// Columns of a block in pass p: (p·grid + block)·(kWarps / split) + warp / split.
__device__ __forceinline__ int product_column(const Product& p, int pass) {
    const int per_block = kWarps / p.split;
    return (pass * gridDim.x + blockIdx.x) * per_block + (threadIdx.x / 32) / p.split;
}

// Before the barrier: this warp's first column's first kPre vectors into registers, the next kAhead passes'
// columns requested into L2 (the classifier's 16 passes).
__device__ __forceinline__ void product_preload(const Product& p, int4 (&wpre)[kPre]) {
    const int lane = threadIdx.x % 32, slice = p.a.K / p.split, k_begin = (threadIdx.x / 32 % p.split) * slice;
    const int n = product_column(p, 0);
    if (n < p.a.N) {
#pragma unroll
        for (int v = 0; v < kPre; v++) {
            const int k = k_begin + (lane + 32 * v) * 8;
            if (k < k_begin + slice) wpre[v] = load_weights(p.a.W + (size_t)n * p.a.K + k);
        }
    }
#pragma unroll
    for (int j = 1; j <= kAhead; j++) {
        const int c = product_column(p, j);
        if (c < p.a.N)
            for (int k = k_begin + lane * 64; k < k_begin + slice; k += 32 * 64)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(p.a.W + (size_t)c * p.a.K + k));
    }
}

// After the barrier and the staging of the rows (xs, K each): every column of the product. red: kWarps·kRows
// floats of shared memory for the split sums.
template <int kRows>
__device__ __forceinline__ void product_run(const Product& p, const float* xs, float* red, const int4 (&wpre)[kPre]) {
    const DecodeMatvec& a = p.a;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, B = a.B;
    const int slice = a.K / p.split, part = warp % p.split, k_begin = part * slice;
    for (int pass = 0;; pass++) {
        const int first = (pass * gridDim.x + blockIdx.x) * (kWarps / p.split);
        if (first >= a.N) break;  // the same for the whole block
        const int n = product_column(p, pass);
        const bool active = n < a.N;
        float mine = 0.f, bias = 0.f, res = 0.f;
        if (active) {
            const int ahead = product_column(p, pass + kAhead + 1);
            if (ahead < a.N)
                for (int k = k_begin + lane * 64; k < k_begin + slice; k += 32 * 64)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(a.W + (size_t)ahead * a.K + k));
            if (part == 0) {  // the epilogue's operands, loaded ahead of the weights
                bias = a.bias ? to_float(a.bias[n]) : 0.f;
                res = a.residual && lane < B ? to_float(a.residual[(size_t)lane * a.N + n]) : 0.f;
            }
            mine = column_dot<kRows>(a.W + (size_t)n * a.K, xs, a.K, B, k_begin, k_begin + slice, wpre, pass == 0);
        }
        if (p.split > 1) {  // the slices' sums, added in slice order
            if (active && lane < B) red[warp * kRows + lane] = mine;
            __syncthreads();
            if (active && part == 0 && lane < B) {
                mine = red[warp * kRows + lane];
                for (int j = 1; j < p.split; j++) mine += red[(warp + j) * kRows + lane];
            }
            __syncthreads();
        }
        if (active && part == 0 && lane < B) store_column(a, lane, n, mine, bias, res);
    }
}

// kBlocks per SM: 3 as decode_matvec (85 registers: ~250 bytes of spills, outside the dot products' loops), or 2
// (128 registers, no spills, but d12's 2304- and 3072-column products take two passes).
template <int kRows, int HS, int kBlocks>
__global__ void __launch_bounds__(kWarps * 32, kBlocks) decode_step_kernel(const DecodeStepArgs s) {
    extern __shared__ float smem[];
    const int B = s.B, C = s.C;
    float* xs = smem;                           // (B, up to 4C) the staged rows, fp32
    float* ln_ws = xs + (size_t)B * 4 * C;      // (2, C) the LayerNorm's weights
    float* red = ln_ws + 2 * C;                 // (kWarps, kRows) split sums
    int4 wpre[kPre];  // raw: as bf16 pairs the compiler kept them in 16-bit halves and spilled them

    auto product = [&](floatX* out, const floatX* W, const floatX* bias, int N, int K, int split) {
        Product p;
        p.a.out = out, p.a.W = W, p.a.bias = bias, p.a.B = B, p.a.N = N, p.a.K = K;
        p.split = split;
        return p;
    };
    const int split_c = C % (4 * 8) == 0 ? 4 : 1;  // the C-column projections: 4 warps per column
    const floatX* residual = s.x;
    for (int l = 0; l < s.L; l++) {
        floatX* k_cache = s.k_cache + l * s.cache_layer_elements;
        floatX* v_cache = s.v_cache + l * s.cache_layer_elements;
        // ---- LayerNorm 1 + QKV, K and V into the cache
        Product qkv = product(s.qkv, s.qkv_w.at(l), s.qkv_b.at(l), 3 * C, C, 1);
        qkv.a.k_cache = k_cache, qkv.a.v_cache = v_cache, qkv.a.len = s.len;
        qkv.a.NH = s.NH, qkv.a.HS = HS, qkv.a.max_T = s.max_T;
        product_preload(qkv, wpre);
        if (l == 0) {  // the embedding: every block makes the rows itself, block 0 also stores them (the residual)
            for (int i = threadIdx.x; i < B * C / 8; i += kWarps * 32) {
                const int b = i / (C / 8), c = i % (C / 8) * 8;
                const Packed128<floatX> w = load128(s.wte + (size_t)s.tokens[b] * C + c);
                const Packed128<floatX> p = load128(s.wpe + (size_t)(s.len[b] - 1) * C + c);
                Packed128<floatX> x;
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    x[e] = from_float<floatX>(to_float(w[e]) + to_float(p[e]));
                    xs[(size_t)b * C + c + e] = to_float(x[e]);
                }
                if (blockIdx.x == 0) store128(s.x + (size_t)b * C + c, x);
            }
            stage_rows(xs, ln_ws, nullptr, 0, C, s.ln1_w.at(l), s.ln1_b.at(l));
        } else {
            grid_barrier(s.barrier);
            stage_rows(xs, ln_ws, residual, B, C, s.ln1_w.at(l), s.ln1_b.at(l));
        }
        layernorm_rows(xs, ln_ws, B, C);
        product_run<kRows>(qkv, xs, red, wpre);
        // ---- decode attention: work items (chunk, b·NH + h), each block's in turn
        grid_barrier(s.barrier);
        const int items = s.attn.chunks * B * s.NH;
        for (int item = blockIdx.x; item < items; item += gridDim.x) {
            decode_attention::split_block<HS, floatX, kWarps>(s.atty, s.attn.o, s.attn.ml, s.attn.finished, s.qkv,
                                                              k_cache, v_cache, s.len, s.NH, s.max_T, s.attn.chunks,
                                                              (size_t)3 * C, item % s.attn.chunks,
                                                              item / s.attn.chunks);
            __syncthreads();  // split_block's shared memory is reused by the next item
        }
        // ---- attention projection + residual
        Product proj = product(s.residual2, s.attproj_w.at(l), s.attproj_b.at(l), C, C, split_c);
        proj.a.residual = residual;
        product_preload(proj, wpre);
        grid_barrier(s.barrier);
        stage_rows(xs, ln_ws, s.atty, B, C, nullptr, nullptr);
        product_run<kRows>(proj, xs, red, wpre);
        // ---- LayerNorm 2 + fc + GELU
        Product fc = product(s.fch_gelu, s.fc_w.at(l), s.fc_b.at(l), 4 * C, C, 1);
        fc.a.gelu = true;
        product_preload(fc, wpre);
        grid_barrier(s.barrier);
        stage_rows(xs, ln_ws, s.residual2, B, C, s.ln2_w.at(l), s.ln2_b.at(l));
        layernorm_rows(xs, ln_ws, B, C);
        product_run<kRows>(fc, xs, red, wpre);
        // ---- fc projection + residual
        Product fcproj = product(s.residual3, s.fcproj_w.at(l), s.fcproj_b.at(l), C, 4 * C, split_c);
        fcproj.a.residual = s.residual2;
        product_preload(fcproj, wpre);
        grid_barrier(s.barrier);
        stage_rows(xs, ln_ws, s.fch_gelu, B, 4 * C, nullptr, nullptr);
        product_run<kRows>(fcproj, xs, red, wpre);
        residual = s.residual3;
    }
    // ---- final LayerNorm + classifier
    Product logits = product(s.logits, s.wte, nullptr, s.Vp, C, 1);
    product_preload(logits, wpre);
    grid_barrier(s.barrier);
    stage_rows(xs, ln_ws, residual, B, C, s.lnf_w, s.lnf_b);
    layernorm_rows(xs, ln_ws, B, C);
    product_run<kRows>(logits, xs, red, wpre);
}

template <int kRows, int HS, int kBlocks>
inline void launch(const DecodeStepArgs& s, cudaStream_t stream) {
    auto kernel = decode_step_kernel<kRows, HS, kBlocks>;
    const size_t smem = ((size_t)s.B * 4 * s.C + 2 * s.C + kWarps * kRows) * sizeof(float);
    if (smem > 48 * 1024)  // the opt-in above 48 KiB (not a stream operation: fine inside a graph capture)
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, smem));
    per_sm = std::min(per_sm, kBlocks);
    if (per_sm < 1) {
        fprintf(stderr, "error: decode step kernel: no block fits on an SM (%zu bytes of shared memory)\n", smem);
        exit(EXIT_FAILURE);
    }
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(per_sm * device_sm_count());
    config.blockDim = dim3(kWarps * 32);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;  // every block resident at once, or the launch fails
    attr[0].val.cooperative = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    cudaCheck(cudaLaunchKernelEx(&config, kernel, s));
}

}  // namespace decode_step_detail

// The grid barrier's counters: the generation, the top count and one count per group, a 128-byte line each.
inline size_t decode_step_barrier_bytes() {
    using namespace decode_step_detail;
    const int groups = (kBlocksPerSM * device_sm_count() + kBarrierGroup - 1) / kBarrierGroup;
    return (size_t)(2 + groups) * kBarrierWords * sizeof(unsigned);
}

// Whether the one-kernel step runs here: BF16 builds, 1..4 rows, HS 64 or 128, C a multiple of 8, and a device
// that launches cooperative grids.
inline bool decode_step_supported(int B, int C, int HS) {
    return kDecodeMatvecAvailable && B >= 1 && B <= kDecodeStepMaxB && (HS == 64 || HS == 128) && C % 8 == 0 &&
           device_info().prop.cooperativeLaunch;
}

inline void decode_step(const DecodeStepArgs& s, cudaStream_t stream) {
    using namespace decode_step_detail;
    if (!decode_step_supported(s.B, s.C, s.HS)) {
        fprintf(stderr, "error: decode_step: B %d (1..%d), C %d, HS %d (64 or 128), BF16 build, cooperative launch\n",
                s.B, kDecodeStepMaxB, s.C, s.HS);
        exit(EXIT_FAILURE);
    }
    const bool hs64 = s.HS == 64;
    if (s.blocks_per_sm == 2) {
        if (s.B == 1) hs64 ? launch<1, 64, 2>(s, stream) : launch<1, 128, 2>(s, stream);
        else if (s.B == 2) hs64 ? launch<2, 64, 2>(s, stream) : launch<2, 128, 2>(s, stream);
        else hs64 ? launch<4, 64, 2>(s, stream) : launch<4, 128, 2>(s, stream);
    } else {
        if (s.B == 1) hs64 ? launch<1, 64, 3>(s, stream) : launch<1, 128, 3>(s, stream);
        else if (s.B == 2) hs64 ? launch<2, 64, 3>(s, stream) : launch<2, 128, 3>(s, stream);
        else hs64 ? launch<4, 64, 3>(s, stream) : launch<4, 128, 3>(s, stream);
    }
}
