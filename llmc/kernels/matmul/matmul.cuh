// Matrix multiplies through cuBLASLt, with the bias add and GELU fused into the GEMM epilogue.
//
// Everything is stated in row-major terms (as the model thinks): C (M x N) = op(A) · op(B), A is M x K
// (K x M when transA), B is K x N (N x K when transB). cuBLASLt is column-major, so we hand it the
// transposed problem Cᵀ = op(B)ᵀ · op(A)ᵀ, which reads the same memory without copies.
// Matmul descriptors, layouts and the chosen algorithm are cached per problem (shape, transposes, batch,
// epilogue), so the heuristic runs once per shape, not per call.
//
// Precision: bf16 operands with fp32 accumulation in BF16 builds; in FP32 builds plain fp32 (TF32 only
// when matmul_set_tf32(true), e.g. the trainer's -f 1: the reference tests need it off).
#pragma once

#include <cstring>
#include <map>
#include <tuple>

#include "llmc/core/cuda_common.h"
#include "llmc/core/sm_budget.h"
#include "llmc/kernels/column_sum.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/matmul/matmul_algos.cuh"

enum class MatmulEpilogue {
    None,      // C = alpha·A·B + beta·C
    Bias,      // C = A·B + bias (bias has N entries: one per output column)
    GeluBias,  // pre_gelu = A·B + bias, C = gelu(pre_gelu): both written
    DGelu,     // C = (A·B) * gelu'(pre_gelu)   (backward through GELU)
    BiasGrad,  // C = alpha·A·B + beta·C, and bias_grad[i] = Σ_k A[i][k] (A transposed: the rows of op(A) summed
               // over K). Used for dweight = doutᵀ·inp, where it yields dbias = Σ_rows dout inside the same GEMM.
};

namespace matmul_detail {

struct Key {
    int M, N, K, transA, transB, batch;
    long long strideA, strideB, strideC;
    int epilogue, has_beta, bias_type;
    int sm_target;  // 0: every SM; else the SMs a collective in flight leaves (llmc/core/sm_budget.h)
    int align;      // 0: A, B, C all 256-byte aligned; else the smallest alignment among them (check_alignment)
    bool operator<(const Key& o) const {
        return std::tie(M, N, K, transA, transB, batch, strideA, strideB, strideC, epilogue, has_beta, bias_type,
                        sm_target, align) <
               std::tie(o.M, o.N, o.K, o.transA, o.transB, o.batch, o.strideA, o.strideB, o.strideC, o.epilogue,
                        o.has_beta, o.bias_type, o.sm_target, o.align);
    }
};

// supported = false records that cuBLASLt has no algorithm for the key, so the question is asked once.
struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
    bool supported = false;
    int tuning = -1;  // >= 0 while LLMC_GEMM_TUNE times candidates for it (matmul_algos.cuh)
};

// One workspace for the process: GEMMs on two streams must not overlap in time, or split-K partials mix (the
// trainer waits for its stream before a sample's engine runs on its own; tests read the engine's results first).
struct State {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 32u << 20;  // cuBLASLt asks for up to 32 MiB on Hopper
    bool tf32 = false;
    std::map<Key, Plan> plans;
};
inline State& state() {
    static State s;
    return s;
}

inline cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int rows, int cols, int ld, int batch, long long stride) {
    cublasLtMatrixLayout_t layout;
    cublasCheck(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
    if (batch > 1) {
        cublasCheck(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
        cublasCheck(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                     sizeof(stride)));
    }
    return layout;
}

}  // namespace matmul_detail

// Creates the cuBLASLt handle and workspace; idempotent. Call before the first matmul (the model does).
inline void matmul_init() {
    auto& s = matmul_detail::state();
    if (s.handle) return;
    cublasCheck(cublasLtCreate(&s.handle));
    cudaCheck(cudaMalloc(&s.workspace, s.workspace_bytes));
    // Split-K GEMMs write partials here with stores initcheck cannot see, then a reduction kernel reads them:
    // zeroing it once keeps those reads from being reported (it costs nothing after start-up).
    cudaCheck(cudaMemset(s.workspace, 0, s.workspace_bytes));
}
// How the GEMM algorithms are chosen, for start-up tables: "" (the heuristic's first answer) or where from.
inline std::string matmul_algorithms_description() {
    matmul_algos::State& s = matmul_algos::ready();
    if (!s.tune_path.empty()) return " (algorithms: tuning into " + s.tune_path + ")";
    if (!s.algos_path.empty()) return " (algorithms: " + s.algos_path + ")";
    return "";
}
inline size_t matmul_workspace_bytes() { return matmul_detail::state().workspace_bytes; }

// TF32 tensor cores for fp32 builds (no effect on bf16 builds). Clears cached plans.
inline void matmul_set_tf32(bool on) {
    auto& s = matmul_detail::state();
    if (s.tf32 == on) return;
    s.tf32 = on;
    for (auto& kv : s.plans) {
        cublasLtMatmulDescDestroy(kv.second.desc);
        cublasLtMatrixLayoutDestroy(kv.second.a);
        cublasLtMatrixLayoutDestroy(kv.second.b);
        cublasLtMatrixLayoutDestroy(kv.second.c);
    }
    s.plans.clear();
}

namespace matmul_detail {

inline std::string key_text(const Key& k) {
    static const char* const kEpilogues[] = {"none", "bias", "gelu_bias", "dgelu", "bias_grad"};
    char buf[256];
    char sms[32] = "", align[32] = "";
    if (k.sm_target > 0) snprintf(sms, sizeof(sms), " sms=%d", k.sm_target);
    if (k.align > 0) snprintf(align, sizeof(align), " align=%d", k.align);
    snprintf(buf, sizeof(buf), "M=%d N=%d K=%d tA=%d tB=%d batch=%d sA=%lld sB=%lld sC=%lld epi=%s beta=%d bias=%d%s%s%s",
             k.M, k.N, k.K, k.transA, k.transB, k.batch, k.strideA, k.strideB, k.strideC, kEpilogues[k.epilogue],
             k.has_beta, k.bias_type, !kFloatXIsBF16 && state().tf32 ? " tf32" : "", sms, align);
    return buf;
}

// The plan for a key: descriptors, layouts and the algorithm, made on first use and cached. The algorithm is the
// heuristic's first answer, or the one recorded for the key in LLMC_GEMM_ALGOS / LLMC_GEMM_TUNE's file, or, while
// LLMC_GEMM_TUNE tunes the key, each call's candidate (run_plan). Returns nullptr where cuBLASLt has no algorithm
// (or rejects the combination) for it.
inline Plan* find_plan(const Key& key) {
    State& s = state();
    auto it = s.plans.find(key);
    if (it != s.plans.end()) return it->second.supported ? &it->second : nullptr;
    Plan p;
    const MatmulEpilogue epilogue = (MatmulEpilogue)key.epilogue;
    const cudaDataType_t type = cuda_datatype_of_floatX();
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if (!kFloatXIsBF16 && s.tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    cublasCheck(cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F));
    // Column-major problem: D (N x M) = opB' (N x K) · opA' (K x M), where B' = B and A' = A as stored.
    cublasOperation_t opFirst = key.transB ? CUBLAS_OP_T : CUBLAS_OP_N;   // B viewed column-major
    cublasOperation_t opSecond = key.transA ? CUBLAS_OP_T : CUBLAS_OP_N;  // A viewed column-major
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opFirst, sizeof(opFirst)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opSecond, sizeof(opSecond)));
    // Stored shapes (column-major rows x cols, leading dimension = rows).
    const int M = key.M, N = key.N, K = key.K;
    p.a = key.transB ? make_layout(type, K, N, K, key.batch, key.strideB) : make_layout(type, N, K, N, key.batch, key.strideB);
    p.b = key.transA ? make_layout(type, M, K, M, key.batch, key.strideA) : make_layout(type, K, M, K, key.batch, key.strideA);
    p.c = make_layout(type, N, M, N, key.batch, key.strideC);
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (epilogue == MatmulEpilogue::Bias) epi = CUBLASLT_EPILOGUE_BIAS;
    if (epilogue == MatmulEpilogue::GeluBias) epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    if (epilogue == MatmulEpilogue::DGelu) epi = CUBLASLT_EPILOGUE_DGELU;
    // Our A is the column-major problem's second operand ("B"), so its row sums are cuBLASLt's BGRADB.
    if (epilogue == MatmulEpilogue::BiasGrad) epi = CUBLASLT_EPILOGUE_BGRADB;
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (key.sm_target > 0) {
        const int32_t sms = key.sm_target;
        cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof(sms)));
    }
    if (epilogue == MatmulEpilogue::Bias || epilogue == MatmulEpilogue::GeluBias ||
        epilogue == MatmulEpilogue::BiasGrad) {
        cudaDataType_t bias_type = (cudaDataType_t)key.bias_type;
        cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                   sizeof(bias_type)));
    }
    if (epilogue == MatmulEpilogue::GeluBias || epilogue == MatmulEpilogue::DGelu) {
        int64_t ld = N;
        cudaDataType_t aux_type = type;
        cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
        cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type,
                                                   sizeof(aux_type)));
    }
    cublasLtMatmulPreference_t pref = matmul_algos::preference(s.workspace_bytes, key.align);
    cublasLtMatmulHeuristicResult_t results[matmul_algos::kCandidates];
    int found = 0;
    // Not cublasCheck: an unsupported combination (e.g. a bias-gradient type) is an answer, not an error.
    const int want = matmul_algos::tuning() ? matmul_algos::kCandidates : 1;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(s.handle, p.desc, p.a, p.b, p.c, p.c, pref, want, results, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    p.supported = status == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p.supported) {
        p.algo = results[0].algo;
        const std::string text = key_text(key);
        cublasLtMatmulAlgo_t recorded;
        if (matmul_algos::find_recorded(text, &recorded)) {
            cublasLtMatmulHeuristicResult_t check;
            if (cublasLtMatmulAlgoCheck(s.handle, p.desc, p.a, p.b, p.c, p.c, &recorded, &check) !=
                    CUBLAS_STATUS_SUCCESS ||
                check.workspaceSize > s.workspace_bytes) {
                fprintf(stderr, "error: GEMM algorithm file: cuBLASLt rejects the algorithm recorded for %s\n",
                        text.c_str());
                exit(EXIT_FAILURE);
            }
            p.algo = recorded;
        } else {
            std::vector<cublasLtMatmulAlgo_t> candidates;
            for (int i = 0; i < found; i++)
                if (results[i].state == CUBLAS_STATUS_SUCCESS) candidates.push_back(results[i].algo);
            p.tuning = matmul_algos::start_tuning(text, candidates.data(), (int)candidates.size());
        }
    }
    Plan& stored = s.plans.emplace(key, p).first->second;
    return stored.supported ? &stored : nullptr;
}

inline Key make_key(int M, int N, int K, bool transA, bool transB, float beta, MatmulEpilogue epilogue,
                    cudaDataType_t bias_type, int batch, long long strideA, long long strideB, long long strideC,
                    int align) {
    const int sm_target = sm_reserved_for_comm() > 0 ? compute_sm_count() : 0;
    return Key{M, N, K, transA, transB, batch, strideA, strideB,
               strideC, (int)epilogue, beta != 0.0f, (int)bias_type, sm_target, align};
}

// Every operand 16-byte aligned, or an error. Returns the plan key's `align`: cuBLASLt's heuristic assumes 256-byte
// aligned A, B, C unless told and may pick an algorithm that needs it, so 0 where they all are, else their smallest
// alignment, which the plan's heuristic is told (ZeRO-2's gradient slots at d48: llmc/distributed/grad_slots.h).
inline int check_alignment(const void* A, const void* B, const void* C, const void* bias, const void* pre_gelu) {
    if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (uintptr_t)bias | (uintptr_t)pre_gelu) % 16 != 0) {
        fprintf(stderr, "error: matmul: operands must be 16-byte aligned\n");
        exit(EXIT_FAILURE);
    }
    const uintptr_t bits = (uintptr_t)A | (uintptr_t)B | (uintptr_t)C;
    int align = 16;
    while (align < 256 && bits % (uintptr_t)(2 * align) == 0) align *= 2;
    return align == 256 ? 0 : align;
}

// M x N outputs (batch of them, strideC apart), and what the epilogue writes besides: pre_gelu (GeluBias), the
// bias gradient (BiasGrad: M entries of bias_grad_bytes each).
struct Outputs {
    int M, N, batch;
    long long strideC;
    size_t bias_grad_bytes;
};

inline void run_plan(Plan& p, MatmulEpilogue epilogue, floatX* C, const floatX* A, const floatX* B, float alpha,
                     float beta, const void* bias, const floatX* pre_gelu, const Outputs& out, cudaStream_t stream) {
    State& s = state();
    // Pointers change between calls (layers, buffers), so they are set per call; the rest is cached.
    if (epilogue == MatmulEpilogue::Bias || epilogue == MatmulEpilogue::GeluBias ||
        epilogue == MatmulEpilogue::BiasGrad) {
        cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (epilogue == MatmulEpilogue::GeluBias || epilogue == MatmulEpilogue::DGelu) {
        cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre_gelu,
                                                   sizeof(pre_gelu)));
    }
    // initcheck cannot see cuBLASLt's (TMA) stores: say what the GEMM writes, or every read of it is reported.
    // Outputs it only writes are marked before the call, because cuBLASLt may read them back inside it (a
    // separate epilogue kernel reads C after the main kernel stored it, seen at C = 128); C read as an input
    // (beta != 0) is marked after, so a C nobody initialised is still reported.
    const size_t c_bytes = (size_t)out.M * out.N * sizeof(floatX);
    auto mark_c = [&] {
        for (int b = 0; b < out.batch; b++) sanitizer_mark_initialized(C + (size_t)b * out.strideC, c_bytes, stream);
    };
    if (beta == 0.0f) mark_c();
    if (epilogue == MatmulEpilogue::GeluBias) sanitizer_mark_initialized(pre_gelu, c_bytes, stream);
    if (epilogue == MatmulEpilogue::BiasGrad) sanitizer_mark_initialized(bias, out.M * out.bias_grad_bytes, stream);
    cublasLtMatmulAlgo_t algo = p.algo;
    bool done = false;
    const bool timed = p.tuning >= 0 && matmul_algos::begin_call(p.tuning, stream, &algo, &done);
    if (done) {
        p.algo = algo;
        p.tuning = -1;
    }
    cublasCheck(cublasLtMatmul(s.handle, p.desc, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &algo, s.workspace,
                               s.workspace_bytes, stream));
    if (timed) matmul_algos::end_timed_call(stream);
    if (beta != 0.0f) mark_c();
}

}  // namespace matmul_detail

// The general entry point (row-major view, see the top of the file). Strides are in elements, used when batch > 1.
// bias: N entries (Bias, GeluBias). pre_gelu: M x N, written by GeluBias, read by DGelu.
inline void matmul(floatX* C, const floatX* A, const floatX* B, int M, int N, int K, bool transA, bool transB,
                   float alpha = 1.0f, float beta = 0.0f, MatmulEpilogue epilogue = MatmulEpilogue::None,
                   const floatX* bias = nullptr, floatX* pre_gelu = nullptr, int batch = 1, long long strideA = 0,
                   long long strideB = 0, long long strideC = 0, cudaStream_t stream = 0) {
    using namespace matmul_detail;
    if (!state().handle) matmul_init();
    const int align = check_alignment(A, B, C, bias, pre_gelu);
    if (epilogue == MatmulEpilogue::BiasGrad) {
        fprintf(stderr, "error: matmul: BiasGrad goes through matmul_with_bias_grad\n");
        exit(EXIT_FAILURE);
    }
    const Key key = make_key(M, N, K, transA, transB, beta, epilogue, cuda_datatype_of_floatX(), batch, strideA,
                             strideB, strideC, align);
    Plan* p = find_plan(key);
    if (!p) {
        fprintf(stderr, "error: matmul: cuBLASLt has no algorithm for M=%d N=%d K=%d transA=%d transB=%d "
                        "batch=%d epilogue=%d\n", M, N, K, (int)transA, (int)transB, batch, (int)epilogue);
        exit(EXIT_FAILURE);
    }
    run_plan(*p, epilogue, C, A, B, alpha, beta, bias, pre_gelu, Outputs{M, N, batch, strideC, 0}, stream);
}

// C (M x N) = alpha · Aᵀ·B + beta·C with A stored K x M, and the bias gradient bias_grad[i] = Σ_k A[k][i] (M
// entries, NOT scaled by alpha) written in the same GEMM. bias_grad is fp32 where cuBLASLt can write fp32, else
// floatX; *bias_grad_type says which. Returns false (nothing run) where cuBLASLt offers no such epilogue.
inline bool matmul_with_bias_grad(floatX* C, const floatX* A, const floatX* B, int M, int N, int K, float alpha,
                                  float beta, void* bias_grad, cudaDataType_t* bias_grad_type, cudaStream_t stream = 0) {
    using namespace matmul_detail;
    if (!state().handle) matmul_init();
    const int align = check_alignment(A, B, C, bias_grad, nullptr);
    for (cudaDataType_t type : {CUDA_R_32F, cuda_datatype_of_floatX()}) {
        Plan* p = find_plan(make_key(M, N, K, true, false, beta, MatmulEpilogue::BiasGrad, type, 1, 0, 0, 0, align));
        if (!p) continue;
        const size_t grad_bytes = type == CUDA_R_32F ? sizeof(float) : sizeof(floatX);
        run_plan(*p, MatmulEpilogue::BiasGrad, C, A, B, alpha, beta, bias_grad, nullptr, Outputs{M, N, 1, 0, grad_bytes},
                 stream);
        *bias_grad_type = type;
        return true;
    }
    return false;
}

// dbias[i] += scale · bias_grad[i]: folds the GEMM's bias gradient (unscaled, one step's worth) into the
// accumulated gradient.
template <typename T>
__global__ void bias_grad_accumulate_kernel(floatX* dbias, const T* bias_grad, int n, float scale) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dbias[i] = from_float<floatX>(to_float(dbias[i]) + scale * to_float(bias_grad[i]));
}

// ---------------------------------------------------------------- the model's two uses
// Forward of a linear layer: out (N x OC) = inp (N x C) · weightᵀ + bias; weight is (OC, C) like nn.Linear.
// With pre_gelu: pre_gelu = inp·weightᵀ + bias and out = gelu(pre_gelu) (GELU fused when `fuse_gelu`).
inline void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C,
                           int OC, floatX* pre_gelu = nullptr, bool fuse_gelu = true, cudaStream_t stream = 0) {
    if (pre_gelu && fuse_gelu) {
        matmul(out, inp, weight, N, OC, C, false, true, 1.0f, 0.0f, MatmulEpilogue::GeluBias, bias, pre_gelu, 1, 0,
               0, 0, stream);
    } else if (pre_gelu) {
        matmul(pre_gelu, inp, weight, N, OC, C, false, true, 1.0f, 0.0f,
               bias ? MatmulEpilogue::Bias : MatmulEpilogue::None, bias, nullptr, 1, 0, 0, 0, stream);
        gelu_forward(out, pre_gelu, (size_t)N * OC, stream);
    } else {
        matmul(out, inp, weight, N, OC, C, false, true, 1.0f, 0.0f,
               bias ? MatmulEpilogue::Bias : MatmulEpilogue::None, bias, nullptr, 1, 0, 0, 0, stream);
    }
}

// Backward of matmul_forward, scaled by `scale` (the loss scale, folded into the GEMMs' alpha), in two halves:
//   matmul_backward_weight: dweight (OC x C) += scale · doutᵀ · inp,  dbias (OC, or null) += scale · Σ_rows dout
//   matmul_backward_input:  dinp (N x C) = scale · dout · weight      (overwritten; times gelu'(pre_gelu) if given)
// scratch: column_sum_scratch_floats(N, OC) floats (for dbias).
inline void matmul_backward_weight(floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp, int N, int C,
                                   int OC, float* scratch, float scale = 1.0f, cudaStream_t stream = 0) {
    // dbias rides along in the dweight GEMM (which reads dout anyway) where cuBLASLt can do it; otherwise it is
    // a separate pass over dout.
    cudaDataType_t bias_grad_type;
    if (dbias && matmul_with_bias_grad(dweight, dout, inp, OC, C, N, scale, 1.0f, scratch, &bias_grad_type, stream)) {
        if (bias_grad_type == CUDA_R_32F) {
            bias_grad_accumulate_kernel<<<ceil_div(OC, 256), 256, 0, stream>>>(dbias, scratch, OC, scale);
        } else {
            bias_grad_accumulate_kernel<<<ceil_div(OC, 256), 256, 0, stream>>>(dbias, (const floatX*)scratch, OC,
                                                                               scale);
        }
        cudaCheckLaunch();
    } else {
        if (dbias) column_sum_accumulate(dbias, dout, N, OC, scale, scratch, stream);
        matmul(dweight, dout, inp, OC, C, N, true, false, scale, 1.0f, MatmulEpilogue::None, nullptr, nullptr, 1, 0,
               0, 0, stream);
    }
}

inline void matmul_backward_input(floatX* dinp, const floatX* dout, const floatX* weight, int N, int C, int OC,
                                  const floatX* pre_gelu = nullptr, bool fuse_gelu = true, float scale = 1.0f,
                                  cudaStream_t stream = 0) {
    if (pre_gelu && fuse_gelu) {
        matmul(dinp, dout, weight, N, C, OC, false, false, scale, 0.0f, MatmulEpilogue::DGelu, nullptr,
               const_cast<floatX*>(pre_gelu), 1, 0, 0, 0, stream);
    } else {
        matmul(dinp, dout, weight, N, C, OC, false, false, scale, 0.0f, MatmulEpilogue::None, nullptr, nullptr, 1, 0,
               0, 0, stream);
        if (pre_gelu) gelu_backward_inplace(dinp, pre_gelu, (size_t)N * C, stream);
    }
}

// Both halves, the weight gradient first (inp may share memory with dinp: the trainer's recomputed GELU output).
inline void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                            const floatX* weight, int N, int C, int OC, float* scratch,
                            const floatX* pre_gelu = nullptr, bool fuse_gelu = true, float scale = 1.0f,
                            cudaStream_t stream = 0) {
    matmul_backward_weight(dweight, dbias, dout, inp, N, C, OC, scratch, scale, stream);
    matmul_backward_input(dinp, dout, weight, N, C, OC, pre_gelu, fuse_gelu, scale, stream);
}
