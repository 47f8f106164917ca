// The MLP's backward through the GELU, as the engine runs it for one layer under recompute (-r 1): the GELU output
// fcproj's weight gradient reads, recomputed from fch, and fcproj's input gradient
//   fch_gelu = gelu(fch),   dfch = (dout · W_fcproj) ∘ gelu'(fch)
//   (dout: M x C, W_fcproj: C x 4C as stored, fch: fc's output, M x 4C)
// and fc's weight and bias gradients from it, accumulated:
//   dW_fc (4C x C) += dfchᵀ · ln2,   db_fc (4C) += Σ_rows dfch
//   1  cuBLASLt: fch_gelu by the GELU kernel, dfch with the DGELU epilogue, then the dW_fc GEMM with the BGRADB
//      epilogue (its own reduction kernel) and the fold of that bias gradient into db_fc (llmc/kernels/matmul/matmul.cuh, the
//      engine's path off Hopper)
//   2  Hopper (llmc/kernels/matmul/matmul_hopper_dgelu.cuh): dfch, fch_gelu and the column-sum partials of db_fc in one ping-pong
//      wgmma kernel, the partials summed in order (matmul_dgelu_bias_grad), then the dW_fc GEMM without epilogue
//      (cuBLASLt); needs an sm_90a build on a compute-capability 9.0 GPU, else reported as not available
// Every variant is validated against an fp64 CPU reference on fresh bf16-rounded inputs, dfch and fch_gelu
// poisoned and the accumulated gradients starting from random values (rel-L2 <= 5e-3 and bf16_tolerance's
// element-wise bound), and variant 2 is run twice on the same inputs: the bytes must repeat. Then each is timed
// (whole sequence, and the dfch and fch_gelu part alone) at the GPT-2 shapes.
// Build: make -C dev/cuda matmul_backward_dgelu     Run: ./matmul_backward_dgelu [-r repeats] [-s "M,C;M,C"] [-c]
#include "common.h"
#include "llmc/kernels/matmul/matmul.cuh"
#include "llmc/kernels/matmul/matmul_hopper_dgelu.cuh"
#include "reference/gpt2.h"

static_assert(kFloatXIsBF16, "matmul_backward_dgelu.cu is built without -DENABLE_FP32: it runs the bf16 engine path");

struct Shape {
    int M, C;
    const char* name;
};

struct Buffers {
    int M, C, N;  // N = 4C
    DeviceBuffer<floatX> dout, w_fcproj, fch, ln2, dfch, fch_gelu, dw_fc, db_fc;
    DeviceBuffer<float> scratch;
    Buffers(int M_, int C_)
        : M(M_), C(C_), N(4 * C_), dout((size_t)M * C), w_fcproj((size_t)C * N), fch((size_t)M * N), ln2((size_t)M * C),
          dfch((size_t)M * N), fch_gelu((size_t)M * N), dw_fc((size_t)N * C), db_fc(N),
          scratch(std::max(column_sum_scratch_floats(M, N), matmul_dgelu_partials_floats(M, N))) {}
    void dfch_cublas() {
        gelu_forward(fch_gelu.ptr, fch.ptr, (size_t)M * N);
        matmul_backward_input(dfch.ptr, dout.ptr, w_fcproj.ptr, M, N, C, fch.ptr, true, 1.0f);
    }
    void dfch_hopper() {
        matmul_backward_dgelu_hopper(dfch.ptr, scratch.ptr, dout.ptr, w_fcproj.ptr, fch.ptr, M, N, C, 1.0f, 0,
                                     fch_gelu.ptr);
        matmul_dgelu_bias_grad(db_fc.ptr, scratch.ptr, M, N, 1.0f);
    }
    void run(int variant) {
        if (variant == 1) {
            dfch_cublas();
            matmul_backward_weight(dw_fc.ptr, db_fc.ptr, dfch.ptr, ln2.ptr, M, C, N, scratch.ptr, 1.0f);
        } else {
            dfch_hopper();
            matmul_backward_weight(dw_fc.ptr, nullptr, dfch.ptr, ln2.ptr, M, C, N, scratch.ptr, 1.0f);
        }
    }
};

struct HostInputs {
    std::vector<float> dout, w_fcproj, fch, ln2, dw0, db0;
};
// Fresh inputs (fch with the spread of a pre-activation, so both arms of the GELU are exercised), rounded to bf16.
static HostInputs fill(Buffers& buf) {
    HostInputs h;
    const int M = buf.M, C = buf.C, N = buf.N;
    h.dout = random_normal((size_t)M * C), h.w_fcproj = random_normal((size_t)C * N, 0.05f);
    h.fch = random_normal((size_t)M * N, 2.0f), h.ln2 = random_normal((size_t)M * C);
    h.dw0 = random_normal((size_t)N * C), h.db0 = random_normal(N);
    buf.dout.upload(round_to_bf16(h.dout)), buf.w_fcproj.upload(round_to_bf16(h.w_fcproj));
    buf.fch.upload(round_to_bf16(h.fch)), buf.ln2.upload(round_to_bf16(h.ln2));
    buf.dw_fc.upload(round_to_bf16(h.dw0)), buf.db_fc.upload(round_to_bf16(h.db0));
    return h;
}
static void reset_outputs(Buffers& buf, const HostInputs& h) {
    std::vector<float> dw0 = h.dw0, db0 = h.db0;
    buf.dw_fc.upload(round_to_bf16(dw0)), buf.db_fc.upload(round_to_bf16(db0));
    buf.dfch.poison(), buf.fch_gelu.poison(), buf.scratch.poison();
}

struct Reference {
    std::vector<double> dfch, gelu, dw, db;
};
static Reference expected(const HostInputs& h, int M, int C) {
    const int N = 4 * C;
    Reference r;
    r.dfch.assign((size_t)M * N, 0.0);
    r.gelu.resize((size_t)M * N);
    reference::gelu_forward(r.gelu.data(), to_double(h.fch).data(), (size_t)M * N);
    std::vector<double> grad((size_t)M * N);
    reference::gelu_backward(grad.data(), to_double(h.fch).data(), std::vector<double>((size_t)M * N, 1.0).data(),
                       (size_t)M * N);  // gelu'(fch)
#pragma omp parallel for
    for (int i = 0; i < M; i++) {
        double* row = r.dfch.data() + (size_t)i * N;
        for (int k = 0; k < C; k++) {
            const double d = h.dout[(size_t)i * C + k];
            const float* w = h.w_fcproj.data() + (size_t)k * N;
            for (int j = 0; j < N; j++) row[j] += d * w[j];
        }
        for (int j = 0; j < N; j++) row[j] *= grad[(size_t)i * N + j];
    }
    r.dw = to_double(h.dw0), r.db = to_double(h.db0);
#pragma omp parallel for
    for (int j = 0; j < N; j++) {
        double* dw = r.dw.data() + (size_t)j * C;
        for (int i = 0; i < M; i++) {
            const double d = r.dfch[(size_t)i * N + j];
            const float* x = h.ln2.data() + (size_t)i * C;
            for (int k = 0; k < C; k++) dw[k] += d * x[k];
            r.db[j] += d;
        }
    }
    return r;
}

static bool validate_shape(const Shape& sh, bool hopper) {
    printf("  %s M=%d C=%d (dfch %d x %d)\n", sh.name, sh.M, sh.C, sh.M, 4 * sh.C);
    Buffers buf(sh.M, sh.C);
    const HostInputs h = fill(buf);
    const Reference ref = expected(h, sh.M, sh.C);
    bool ok = true;
    for (int variant = 1; variant <= 2; variant++) {
        if (variant == 2 && !hopper) continue;
        reset_outputs(buf, h);
        buf.run(variant);
        cudaCheck(cudaDeviceSynchronize());
        printf("   variant %d\n", variant);
        const std::vector<floatX> dfch = buf.dfch.download(), gelu = buf.fch_gelu.download(), dw = buf.dw_fc.download(),
                                  db = buf.db_fc.download();
        ok &= validate("dfch", dfch, ref.dfch, bf16_tolerance(rms(ref.dfch)));
        ok &= validate("fch_gelu", gelu, ref.gelu, bf16_tolerance(rms(ref.gelu)));
        ok &= validate("dW_fc", dw, ref.dw, bf16_tolerance(rms(ref.dw)));
        ok &= validate("db_fc", db, ref.db, bf16_tolerance(rms(ref.db)));
        if (variant == 2) {  // the same inputs again: the same bytes
            reset_outputs(buf, h);
            buf.run(variant);
            cudaCheck(cudaDeviceSynchronize());
            const bool same = buf.dfch.download() == dfch && buf.fch_gelu.download() == gelu &&
                              buf.dw_fc.download() == dw && buf.db_fc.download() == db;
            printf("    rerun  %s\n", same ? "bit-identical ok" : "FAIL: bytes differ");
            ok &= same;
        }
    }
    return ok;
}

int main(int argc, char** argv) {
    std::vector<Shape> timed = {{16384, 768, "d12 B16"}, {32768, 768, "d12 B32"}, {8192, 1600, "d48 B8"}};
    ShapeArgs args;
    if (!parse_shape_args(argc, argv, "[-r repeats] [-s \"M,C;M,C\"] [-c]", &args)) return 1;
    use_shape_args(args, &timed);
    const int repeats = args.repeats;
    const bool check_only = args.check_only;
    for (const Shape& sh : timed) {
        if (sh.C % 8 != 0) { fprintf(stderr, "error: -s: C = %d is not a multiple of 8\n", sh.C); return 1; }
    }
    print_device();
    matmul_init();
    const bool hopper = matmul_hopper_available();
    if (!hopper) printf("variant 2 not available (needs an sm_90a build on a compute-capability 9.0 GPU)\n");

    // one row; partial tiles in M, N and K (K = 200: a partial k-step); more tiles than two per SM (the consumers'
    // turns wrap the ring many times) with fewer k-steps than stages; the GPT-2 widths d12 and d48
    const std::vector<Shape> checks = {{1, 8, "one row"},        {37, 96, "odd"},      {300, 200, "partial tiles"},
                                       {8192, 256, "many tiles"}, {2048, 768, "d12"}, {513, 1600, "d48"}};
    int failed = 0;
    printf("validation (fp64 CPU reference, dfch and fch_gelu poisoned, gradients accumulated onto random values):\n");
    for (const Shape& sh : checks) failed += validate_shape(sh, hopper) ? 0 : 1;
    printf("validation: %d of %zu shapes failed\n", failed, checks.size());
    if (failed) return 1;
    if (check_only) return 0;

    printf("\n%-10s %6s %5s | %-34s | %-34s\n", "shape", "M", "C", "dfch + fch_gelu (+ partials): cold / warm us",
           "whole sequence: cold / warm us");
    for (const Shape& sh : timed) {
        Buffers buf(sh.M, sh.C);
        fill(buf);
        for (int variant = 1; variant <= 2; variant++) {
            if (variant == 2 && !hopper) continue;
            const Timing part = benchmark([&] { variant == 1 ? buf.dfch_cublas() : buf.dfch_hopper(); }, repeats);
            const Timing whole = benchmark([&] { buf.run(variant); }, repeats);
            const double flops = 2.0 * sh.M * sh.C * 4.0 * sh.C;
            printf("%-10s %6d %5d | v%d %8.1f / %8.1f (%4.0f TFLOP/s) | v%d %8.1f / %8.1f\n", sh.name, sh.M, sh.C,
                   variant, 1e3 * part.cold_ms, 1e3 * part.warm_ms, flops / (part.warm_ms * 1e9), variant,
                   1e3 * whole.cold_ms, 1e3 * whole.warm_ms);
        }
    }
    return 0;
}
