// A captured graph's small memsets as kernels (llmc/core/graph_memsets.cuh): the same bytes, the same order.
//   ./tests/gpu/kernels/test_graph_memsets [seed]   (tests/gpu/kernels/kernel_checks.cuh: inputs, poison, tolerances)
#include "llmc/core/graph_memsets.cuh"
#include "llmc/kernels/matmul/matmul.cuh"
#include "tests/gpu/kernels/kernel_checks.cuh"

// graph_memsets_to_kernels: a graph's small memset nodes (1-, 2- and 4-byte elements, aligned or not, 2D with a pitch,
// one with two dependents) become kernel nodes that write the same bytes in the same place of the order: a kernel
// fills the buffer before the chain of memsets (the second overlaps the first, so their order shows), two kernels copy
// it after, and the result must equal the bytes the memset graph gives, byte for byte, with as many edges as before;
// a memset above the size limit stays a memset node. Then a captured GEMM (cuBLASLt
// zeroes counters with memsets) replayed after the conversion gives the eager call's bits.
__global__ void fill_words_kernel(unsigned int* p, unsigned int value, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = value ^ (unsigned int)i;
}
__global__ void copy_words_kernel(unsigned int* dst, const unsigned int* src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
static int count_nodes(cudaGraph_t g, cudaGraphNodeType want) {
    int n = 0;
    for (cudaGraphNode_t node : graph_memsets_detail::nodes_of(g)) {
        cudaGraphNodeType t;
        cudaCheck(cudaGraphNodeGetType(node, &t));
        n += t == want;
    }
    return n;
}
static size_t edge_count(cudaGraph_t g) {
    size_t n = 0;
#if CUDART_VERSION >= 13000
    cudaCheck(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
#else
    cudaCheck(cudaGraphGetEdges(g, nullptr, nullptr, &n));
#endif
    return n;
}
static void test_graph_memsets() {
    constexpr size_t kWords = 1 << 16;  // 256 KB; the large memset below is 64 KB, over a 60 KB limit
    unsigned int *buf, *out_a, *out_b;
    cudaCheck(cudaMalloc(&buf, kWords * 4));
    cudaCheck(cudaMalloc(&out_a, kWords * 4));
    cudaCheck(cudaMalloc(&out_b, kWords * 4));
    // fill -> memsets -> two copies: each memset's bytes show only if it runs after the fill and before the copies
    // and before the copy after it; the graph is built node by node (2- and 4-byte memsets cannot be captured).
    auto build = [&](cudaGraph_t* g) {
        cudaCheck(cudaGraphCreate(g, 0));
        cudaGraphNode_t prev = nullptr;
        auto add_kernel = [&](void* func, void** args) {
            cudaKernelNodeParams k = {};
            k.func = func, k.gridDim = dim3(64), k.blockDim = dim3(256), k.kernelParams = args;
            cudaGraphNode_t n;
            cudaCheck(cudaGraphAddKernelNode(&n, *g, prev ? &prev : nullptr, prev ? 1 : 0, &k));
            return n;
        };
        auto add_memset = [&](size_t offset_bytes, unsigned int value, unsigned int element_size, size_t width,
                              size_t height, size_t pitch) {
            cudaMemsetParams m = {};
            m.dst = (char*)buf + offset_bytes, m.value = value, m.elementSize = element_size;
            m.width = width, m.height = height, m.pitch = pitch;
            cudaGraphNode_t n;
            cudaCheck(cudaGraphAddMemsetNode(&n, *g, prev ? &prev : nullptr, prev ? 1 : 0, &m));
            return n;
        };
        static unsigned int fill_value = 0xA5A5A5A5u;
        static size_t words = kWords;
        void* fill_args[] = {&buf, &fill_value, &words};
        prev = add_kernel((void*)fill_words_kernel, fill_args);
        prev = add_memset(13, 0x5A, 1, 101, 1, 0);               // bytes, unaligned start and length
        prev = add_memset(100, 0xBEEF, 2, 37, 1, 0);              // 2-byte elements over the last 14 of those
        prev = add_memset(256, 0x3C, 1, 64, 1, 0);                // bytes written as words
        prev = add_memset(512, 0x1234, 2, 16, 1, 0);              // halves written as words
        prev = add_memset(8192, 0x01234567u, 4, 9, 5, 64);        // 4-byte, 2D: 5 rows of 9, 64 bytes apart
        prev = add_memset(16384, 0u, 4, 4096 * 4, 1, 0);          // 64 KB of zeros: over the limit, stays
        const cudaGraphNode_t last = add_memset(4, 0u, 4, 1, 1, 0);  // a counter, then two readers
        static size_t words_copy = kWords;
        void* copy_a[] = {&out_a, &buf, &words_copy};
        void* copy_b[] = {&out_b, &buf, &words_copy};
        prev = last;
        add_kernel((void*)copy_words_kernel, copy_a);
        prev = last;
        add_kernel((void*)copy_words_kernel, copy_b);
    };
    auto run = [&](cudaGraph_t g, std::vector<unsigned int>* a, std::vector<unsigned int>* b) {
        cudaGraphExec_t e;
        cudaCheck(cudaMemset(out_a, 0xFF, kWords * 4));
        cudaCheck(cudaMemset(out_b, 0xFF, kWords * 4));
        cudaCheck(cudaGraphInstantiate(&e, g, cudaGraphInstantiateFlagUseNodePriority));
        cudaCheck(cudaGraphLaunch(e, 0));
        cudaCheck(cudaDeviceSynchronize());
        cudaCheck(cudaGraphExecDestroy(e));
        a->resize(kWords), b->resize(kWords);
        cudaCheck(cudaMemcpy(a->data(), out_a, kWords * 4, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(b->data(), out_b, kWords * 4, cudaMemcpyDeviceToHost));
    };
    cudaGraph_t with_memsets, converted;
    build(&with_memsets);
    build(&converted);
    const int replaced = graph_memsets_to_kernels(converted, 0, 60u << 10);
    std::vector<unsigned int> ref_a, ref_b, a, b;
    run(with_memsets, &ref_a, &ref_b);
    run(converted, &a, &b);
    // what the memsets wrote, independently of the GPU: the fill, then each memset's bytes
    std::vector<unsigned int> want(kWords);
    for (size_t i = 0; i < kWords; i++) want[i] = 0xA5A5A5A5u ^ (unsigned int)i;
    unsigned char* w = reinterpret_cast<unsigned char*>(want.data());
    for (size_t i = 0; i < 101; i++) w[13 + i] = 0x5A;
    for (size_t i = 0; i < 37; i++) w[100 + 2 * i] = 0xEF, w[100 + 2 * i + 1] = 0xBE;
    for (size_t i = 0; i < 64; i++) w[256 + i] = 0x3C;
    for (size_t i = 0; i < 16; i++) w[512 + 2 * i] = 0x34, w[512 + 2 * i + 1] = 0x12;
    for (size_t r = 0; r < 5; r++)
        for (size_t i = 0; i < 9; i++) memcpy(w + 8192 + r * 64 + 4 * i, "\x67\x45\x23\x01", 4);
    memset(w + 16384, 0, 4096 * 4 * 4);
    memset(w + 4, 0, 4);
    check_exact("graph memsets: the memset graph writes the expected bytes", ref_a == want && ref_b == want);
    check_exact("graph memsets: 6 replaced, the large one kept, the same number of edges",
                replaced == 6 && count_nodes(converted, cudaGraphNodeTypeMemset) == 1 &&
                    edge_count(converted) == edge_count(with_memsets));
    check_exact("graph memsets: as kernels, the same bytes (both readers)", a == want && b == want);
    cudaCheck(cudaGraphDestroy(with_memsets));
    cudaCheck(cudaGraphDestroy(converted));

    // a captured GEMM (forward with bias and its backward) at d12's shape: eager bits == converted graph's bits
    const int N = 16384, C = 768, OC = 2304;
    auto inp = random_vec((size_t)N * C, 1.0f), wt = random_vec((size_t)OC * C, 0.03f), bias = random_vec(OC, 0.5f);
    auto dout = random_vec((size_t)N * OC, 1.0f);
    floatX *d_inp = upload(inp), *d_w = upload(wt), *d_bias = upload(bias), *d_dout = upload(dout);
    floatX *d_out = poisoned((size_t)N * OC), *d_dinp = poisoned((size_t)N * C), *d_dw = upload(wt);
    floatX* d_db = upload(bias);
    float* d_scratch;
    cudaCheck(cudaMalloc(&d_scratch, column_sum_scratch_floats(N, OC) * 4));
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto gemms = [&] {
        matmul_forward(d_out, d_inp, d_w, d_bias, N, C, OC, nullptr, false, s);
        matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, d_scratch, nullptr, false, 0.5f, s);
    };
    // the resets and the poison go through the legacy default stream, which a non-blocking stream does not wait for
    // (nor it for them): each is fenced by device syncs on both sides, or it races the GEMMs on s (seen under load)
    auto reset = [&] {
        cudaCheck(cudaDeviceSynchronize());
        cudaCheck(cudaMemcpy(d_dw, d_w, (size_t)OC * C * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(d_db, d_bias, OC * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemset(d_out, 0xFF, (size_t)N * OC * sizeof(floatX)));
        cudaCheck(cudaMemset(d_dinp, 0xFF, (size_t)N * C * sizeof(floatX)));
        cudaCheck(cudaDeviceSynchronize());
    };
    auto bits = [&] {
        cudaCheck(cudaDeviceSynchronize());
        std::vector<floatX> v((size_t)N * OC + (size_t)N * C + (size_t)OC * C + OC);
        floatX* p = v.data();
        for (auto [d, n] : {std::pair<floatX*, size_t>{d_out, (size_t)N * OC}, {d_dinp, (size_t)N * C},
                            {d_dw, (size_t)OC * C}, {d_db, (size_t)OC}}) {
            cudaCheck(cudaMemcpy(p, d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
            p += n;
        }
        return v;
    };
    reset();
    gemms();  // the plans are made outside the capture
    reset();
    gemms();
    const std::vector<floatX> eager = bits();
    reset();
    cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    gemms();
    cudaGraph_t g;
    cudaCheck(cudaStreamEndCapture(s, &g));
    // what cuBLASLt's memsets write (its counters), poisoned before the replay: the kernels that replace the memsets
    // must write them again before each GEMM
    std::vector<cudaMemsetParams> targets;
    for (cudaGraphNode_t node : graph_memsets_detail::nodes_of(g)) {
        cudaGraphNodeType t;
        cudaCheck(cudaGraphNodeGetType(node, &t));
        if (t != cudaGraphNodeTypeMemset) continue;
        targets.emplace_back();
        cudaCheck(cudaGraphMemsetNodeGetParams(node, &targets.back()));
    }
    const int gemm_memsets = graph_memsets_to_kernels(g, 0);
    cudaGraphExec_t e;
    cudaCheck(cudaGraphInstantiate(&e, g, cudaGraphInstantiateFlagUseNodePriority));
    for (const cudaMemsetParams& m : targets)
        cudaCheck(cudaMemset2D(m.dst, m.height > 1 ? m.pitch : m.width * m.elementSize, 0xFF, m.width * m.elementSize,
                               m.height));
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaGraphLaunch(e, s));
    const std::vector<floatX> replayed = bits();
    char tag[128];
    snprintf(tag, sizeof(tag), "graph memsets: GEMMs replayed (%d memsets as kernels)", gemm_memsets);
    check_exact(tag, count_nodes(g, cudaGraphNodeTypeMemset) == 0 &&
                         memcmp(eager.data(), replayed.data(), eager.size() * sizeof(floatX)) == 0);
    cudaCheck(cudaGraphExecDestroy(e));
    cudaCheck(cudaGraphDestroy(g));
    cudaCheck(cudaStreamDestroy(s));
    for (void* p : {(void*)buf, (void*)out_a, (void*)out_b, (void*)d_inp, (void*)d_w, (void*)d_bias, (void*)d_dout,
                    (void*)d_out, (void*)d_dinp, (void*)d_dw, (void*)d_db, (void*)d_scratch})
        cudaCheck(cudaFree(p));
}

int main(int argc, char** argv) {
    kernel_tests_begin(argc, argv);
    matmul_init();
    test_graph_memsets();
    return kernel_tests_end();
}
