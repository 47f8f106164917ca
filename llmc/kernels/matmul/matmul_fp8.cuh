// FP8 GEMMs through cuBLASLt (Hopper's FP8 tensor cores), in row-major terms as matmul.cuh states them:
//   C (M x N, floatX) = (A · Bᵀ) · a_descale · b_descale (+ bias, N entries) (+ C, with accumulate)
// A (M x K) and B (N x K) are FP8 bytes (llmc/core/fp8.h's formats), both K-major (K contiguous in every row): the
// only layout Hopper's FP8 GEMMs take (cuBLASLt's "TN"), which is why the casts write transposes where a GEMM needs
// them (llmc/kernels/fp8/cast_transpose.cuh). a_descale and b_descale are device pointers to 1 / the scale each
// operand was cast with (the cast multiplied by the scale; the GEMM divides it out on the fp32 accumulator).
// E4M3 x E4M3, E4M3 x E5M2 and E5M2 x E4M3 (no E5M2 x E5M2 on Hopper). fast_accum: cuBLASLt's
// CUBLASLT_MATMUL_DESC_FAST_ACCUM (the tensor cores' own accumulation throughout, fewer bits over long K) or off
// (partial sums promoted to fp32). No amax of C: cuBLASLt computes AMAX_D only for FP8 outputs; a consumer that casts
// C to FP8 takes it from the cast (fp8_cast_transpose's amax). a_descale and b_descale 16-byte aligned: cuBLASLt
// refuses every algorithm for a scale pointer that is not (llmc/core/fp8.h's kFp8DescaleStride). Plans
// (descriptors, layouts, the heuristic's algorithm) cached per problem, as matmul.cuh's, and the heuristic told the
// operands' real alignment. BF16 builds
// (C and the bias bf16: the FP8 GEMMs' supported combination); N a multiple of 8 (C's rows of 16-byte multiples).
// a_scaling / b_scaling: what each descale pointer holds (llmc/core/fp8.h's Fp8Granularity): one float, or a grid of
// block descales (1x128 along K, or 128x128) in llmc/kernels/fp8/block_cast.cuh's order, cuBLASLt's VEC128_32F /
// BLK128x128_32F modes (cuBLAS 12.9+ on Hopper; not both operands 128x128; promoted accumulation only; M a multiple
// of 8 when A is in 1x128 blocks: refused here in one line otherwise).
// The heuristic is asked with the scale pointers already set (to a unit scale of our own): asked without them it may
// answer with a kernel that takes no scales, which cublasLtMatmul then refuses once they are set. Its first few
// answers are kept and the first that cublasLtMatmul takes is the plan's from then on (NVIDIA's advice for FP8).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>

#include "llmc/core/cuda_common.h"
#include "llmc/core/fp8.h"
#include "llmc/kernels/matmul/matmul.cuh"

namespace matmul_fp8_detail {

struct Key {
    int M, N, K, a_format, b_format, fast_accum, has_bias, align;  // align: matmul_detail::check_alignment's
    int accumulate, a_scaling = 0, b_scaling = 0;
    bool operator<(const Key& o) const {
        return std::tie(M, N, K, a_format, b_format, fast_accum, has_bias, align, accumulate, a_scaling, b_scaling) <
               std::tie(o.M, o.N, o.K, o.a_format, o.b_format, o.fast_accum, o.has_bias, o.align, o.accumulate,
                        o.a_scaling, o.b_scaling);
    }
};
constexpr int kCandidates = 8;  // the heuristic's answers kept, tried in order until cublasLtMatmul takes one
struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algos[kCandidates];
    int found = 0;       // answers in algos
    int chosen = 0;      // the first one cublasLtMatmul has not refused
    bool supported = false;
};
inline std::map<Key, Plan>& plans() {
    static std::map<Key, Plan> p;
    return p;
}
inline cudaDataType_t cuda_type(Fp8Format f) { return f == Fp8Format::E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }
inline cublasLtMatmulMatrixScale_t scale_mode(int scaling) {
    switch ((Fp8Granularity)scaling) {
        case Fp8Granularity::k1x128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        case Fp8Granularity::k128x128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
        default: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    }
}

// A device float 1.0, the scale pointers the heuristic is asked with (each call sets the real ones).
inline const float* unit_scale() {
    static float* d = nullptr;
    if (!d) {
        const float one = 1.f;
        cudaCheck(cudaMalloc(&d, sizeof(float)));
        cudaCheck(cudaMemcpy(d, &one, sizeof(float), cudaMemcpyHostToDevice));
    }
    return d;
}
inline void set_scales(cublasLtMatmulDesc_t desc, const float* a_descale, const float* b_descale) {
    // cuBLASLt's A is our B: its scale is b_descale
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_descale,
                                               sizeof(b_descale)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_descale,
                                               sizeof(a_descale)));
}

// The column-major problem cuBLASLt sees: Cᵀ (N x M) = B (as a K x N matrix, transposed) · A (as K x M), so
// cuBLASLt's first operand is our B and its second our A, both "K rows" matrices with leading dimension K.
inline Plan* find_plan(const Key& k) {
    auto it = plans().find(k);
    if (it != plans().end()) return it->second.supported ? &it->second : nullptr;
    matmul_detail::State& s = matmul_detail::state();
    Plan p;
    cublasCheck(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)));
    const int8_t fast = (int8_t)k.fast_accum;
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    const cublasLtEpilogue_t epi = k.has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (k.has_bias) {
        const cudaDataType_t bias_type = cuda_datatype_of_floatX();
        cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                   sizeof(bias_type)));
    }
    set_scales(p.desc, unit_scale(), unit_scale());
    bool modes_taken = true;
    if (k.a_scaling || k.b_scaling) {  // cuBLASLt's A is our B; a cuBLAS without the modes refuses them: no plan
        const cublasLtMatmulMatrixScale_t a_mode = scale_mode(k.b_scaling), b_mode = scale_mode(k.a_scaling);
        modes_taken =
            cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)) ==
                CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)) ==
                CUBLAS_STATUS_SUCCESS;
    }
    using matmul_detail::make_layout;
    p.a = make_layout(cuda_type((Fp8Format)k.b_format), k.K, k.N, k.K, 1, 0);
    p.b = make_layout(cuda_type((Fp8Format)k.a_format), k.K, k.M, k.K, 1, 0);
    p.c = make_layout(cuda_datatype_of_floatX(), k.N, k.M, k.N, 1, 0);
    cublasLtMatmulPreference_t pref = matmul_algos::preference(s.workspace_bytes, k.align);
    cublasLtMatmulHeuristicResult_t results[kCandidates];
    // not cublasCheck: "no algorithm" (a format pair Hopper lacks, a shape it refuses) is an answer
    const cublasStatus_t status =
        modes_taken ? cublasLtMatmulAlgoGetHeuristic(s.handle, p.desc, p.a, p.b, p.c, p.c, pref, kCandidates, results,
                                                     &p.found)
                    : CUBLAS_STATUS_NOT_SUPPORTED;
    cublasLtMatmulPreferenceDestroy(pref);
    int usable = 0;
    for (int i = 0; status == CUBLAS_STATUS_SUCCESS && i < p.found; i++)
        if (results[i].state == CUBLAS_STATUS_SUCCESS) p.algos[usable++] = results[i].algo;
    p.found = usable;
    p.supported = usable > 0;
    Plan& stored = plans().emplace(k, p).first->second;
    return stored.supported ? &stored : nullptr;
}

// What block scales add to the shape rules ("" when none is broken).
inline const char* block_rule(int M, bool fast_accum, Fp8Granularity a_scaling, Fp8Granularity b_scaling) {
    if (a_scaling == Fp8Granularity::kTensor && b_scaling == Fp8Granularity::kTensor) return "";
    if (fast_accum) return "block scales take promoted accumulation only";
    if (a_scaling == Fp8Granularity::k128x128 && b_scaling == Fp8Granularity::k128x128) return "not both in 128x128 blocks";
    if (a_scaling == Fp8Granularity::k1x128 && M % 8 != 0) return "A in 1x128 blocks needs M a multiple of 8";
    return "";
}

}  // namespace matmul_fp8_detail

// Whether cuBLASLt has an FP8 GEMM for these formats and this shape on this device (false off FP8 tensor cores, and
// for shapes matmul_fp8 refuses), for 256-byte aligned operands.
inline bool matmul_fp8_supported(int M, int N, int K, Fp8Format a_format, Fp8Format b_format, bool fast_accum,
                                 bool bias = false, Fp8Granularity a_scaling = Fp8Granularity::kTensor,
                                 Fp8Granularity b_scaling = Fp8Granularity::kTensor) {
    matmul_init();
    if (M < 1 || N < 1 || N % 8 != 0 || K < 16 || K % 16 != 0) return false;
    if (*matmul_fp8_detail::block_rule(M, fast_accum, a_scaling, b_scaling)) return false;
    return matmul_fp8_detail::find_plan({M, N, K, (int)a_format, (int)b_format, fast_accum, bias, 0, 0,
                                         (int)a_scaling, (int)b_scaling}) != nullptr;
}

inline void matmul_fp8(floatX* C, const uint8_t* A, Fp8Format a_format, const float* a_descale, const uint8_t* B,
                       Fp8Format b_format, const float* b_descale, const floatX* bias, int M, int N, int K,
                       bool fast_accum, cudaStream_t stream, bool accumulate = false,
                       Fp8Granularity a_scaling = Fp8Granularity::kTensor, Fp8Granularity b_scaling = Fp8Granularity::kTensor) {
    using namespace matmul_fp8_detail;
    matmul_init();
    if (M < 1 || N < 1 || N % 8 != 0 || K < 16 || K % 16 != 0) {
        fprintf(stderr, "error: matmul_fp8: M %d, N %d, K %d (N a multiple of 8, K of 16)\n", M, N, K);
        exit(EXIT_FAILURE);
    }
    if (const char* rule = block_rule(M, fast_accum, a_scaling, b_scaling); *rule) {
        fprintf(stderr, "error: matmul_fp8: M %d, N %d, K %d: %s\n", M, N, K, rule);
        exit(EXIT_FAILURE);
    }
    const int align = matmul_detail::check_alignment(A, B, C, bias, nullptr);  // 16-byte aligned, or an error
    if (((uintptr_t)a_descale | (uintptr_t)b_descale) % 16 != 0) {
        fprintf(stderr, "error: matmul_fp8: the descale pointers must be 16-byte aligned\n");
        exit(EXIT_FAILURE);
    }
    Plan* p = find_plan({M, N, K, (int)a_format, (int)b_format, fast_accum, bias != nullptr, align, accumulate,
                         (int)a_scaling, (int)b_scaling});
    if (!p) {
        fprintf(stderr, "error: matmul_fp8: cuBLASLt has no FP8 GEMM for %s x %s at M %d, N %d, K %d (scale modes %d, "
                "%d) on this device\n", fp8_name(a_format), fp8_name(b_format), M, N, K, (int)a_scaling,
                (int)b_scaling);
        exit(EXIT_FAILURE);
    }
    matmul_detail::State& s = matmul_detail::state();
    set_scales(p->desc, a_descale, b_descale);
    if (bias)
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (!accumulate) sanitizer_mark_initialized(C, (size_t)M * N * sizeof(floatX), stream);  // TMA stores
    const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
    // A refusal (CUBLAS_STATUS_NOT_SUPPORTED) is returned before anything is queued: the next answer is tried.
    for (; p->chosen < p->found; p->chosen++) {
        const cublasStatus_t status = cublasLtMatmul(s.handle, p->desc, &alpha, B, p->a, A, p->b, &beta, C, p->c, C,
                                                     p->c, &p->algos[p->chosen], s.workspace, s.workspace_bytes, stream);
        if (status == CUBLAS_STATUS_SUCCESS) return;
        if (status != CUBLAS_STATUS_NOT_SUPPORTED) cublasCheck(status);
    }
    fprintf(stderr, "error: matmul_fp8: cuBLASLt refused each of its %d algorithms for %s x %s at M %d, N %d, K %d\n",
            p->found, fp8_name(a_format), fp8_name(b_format), M, N, K);
    exit(EXIT_FAILURE);
}
