// The time between the kernels of a replayed CUDA Graph, alone and with another stream at work beside it: in a
// multi-GPU step kernels started later after their predecessor than on one GPU, with the same graphs, while the
// exchange's streams worked beside the compute stream (docs/MULTI_GPU.md).
// The graph: K launches of a short compute-bound kernel (each thread applies x = a*x + b R times in registers),
// captured on a stream of default priority. Beside it, on a stream of the highest priority (as the exchange's):
//   none      nothing
//   copy      device-to-device copies of 256 MB back to back (copy engines, as the copy-engine exchange)
//   spin      one block spinning until the host says stop (an SM held, as an NCCL kernel waiting for its peer)
//   wait      a stream memory wait on a flag set only at the end (as a lane waiting for a peer's flag)
//   kernels   long one-block kernels back to back (other work sharing the SMs)
// The graph's result is checked against the fp64 value first (K*R affine steps; rel 2e-4; each launch counted), then each mode prints
// the median replay time over 20 replays and the time per launch.
//   make -C dev/cuda graph_gaps && ./dev/cuda/graph_gaps [K]      (-c: the validation alone, K = 8)
#include <cuda.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common.h"

constexpr int kRepeats = 20, kInner = 256, kThreads = 256;
constexpr float kA = 0.999f, kB = 0.001f;

// x: R affine steps (the work); launches: +1 (exact: counts the launches that ran)
__global__ void affine_kernel(float* x, float* launches) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
#pragma unroll 16
    for (int r = 0; r < kInner; r++) v = fmaf(v, kA, kB);
    x[i] = v;
    launches[i] += 1.0f;
}

__global__ void spin_kernel(const volatile int* stop) {
    while (*stop == 0) __nanosleep(1000);
}

__global__ void busy_kernel(float* sink) {  // one block, long next to the graph's kernels
    float v = threadIdx.x;
    for (int r = 0; r < 20000; r++) v = fmaf(v, 0.9999f, 0.0001f);
    if (v == -1.0f) sink[0] = v;  // never: keeps the loop
}

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

int main(int argc, char** argv) {
    const bool check_only = argc > 1 && std::string(argv[1]) == "-c";  // make test: the validation alone
    const int K = check_only ? 8 : argc > 1 ? positive_int(argv[1]) : 400;
    if (K < 2 || K > 4000) { fprintf(stderr, "error: K (launches per graph) must be a number from 2 to 4000\n"); return 1; }
    print_device();
    int sms = 0;
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int blocks = sms * 4, n = blocks * kThreads;
    int lo = 0, hi = 0;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaStream_t s, side, third;
    cudaCheck(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, lo));
    cudaCheck(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, hi));
    cudaCheck(cudaStreamCreateWithFlags(&third, cudaStreamNonBlocking));
    DeviceBuffer<float> x(n), launches(n), a(64 << 20), b(64 << 20), sink(1);
    DeviceBuffer<int> flag(1);
    int* stop = nullptr;  // host-mapped: the spin kernel reads it, the host writes it
    cudaCheck(cudaHostAlloc(&stop, sizeof(int), cudaHostAllocMapped));
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    cudaCheck(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess) { fprintf(stderr, "error: no cuStreamWaitValue32\n"); return 1; }
    const WaitValue32 wait_value = reinterpret_cast<WaitValue32>(fn);

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < K; k++) affine_kernel<<<blocks, kThreads, 0, s>>>(x.ptr, launches.ptr);
    cudaCheck(cudaStreamEndCapture(s, &graph));
    cudaCheck(cudaGraphInstantiate(&exec, graph, 0));

    // validation: one replay from random inputs against fp64 (fp32's rounding over K*R contracting steps stays
    // within 6e-5 relative at K = 400), and every launch counted exactly
    std::vector<float> x0 = random_normal((size_t)n);
    x.upload(x0);
    launches.upload(std::vector<float>((size_t)n, 0.0f));
    cudaCheck(cudaGraphLaunch(exec, s));
    cudaCheck(cudaStreamSynchronize(s));
    std::vector<double> ref(x0.size());
    for (size_t i = 0; i < x0.size(); i++) {
        double v = x0[i];
        for (int r = 0; r < K * kInner; r++) v = v * (double)kA + (double)kB;
        ref[i] = v;
    }
    const bool x_ok = validate("x", x.download(), ref, Tolerance{1e-4, 1e-4, 2e-4});
    if (!validate("launch", launches.download(), std::vector<double>((size_t)n, (double)K), Tolerance{0, 0, 0}) || !x_ok)
        return 1;
    if (check_only) {
        printf("graph_gaps -c: %d launches replayed and checked: PASS\n", K);
        return 0;
    }

    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    double alone = 0;
    for (const std::string mode : {"none", "copy", "spin", "wait", "kernels", "none"}) {
        *stop = 0;
        cudaCheck(cudaMemsetAsync(flag.ptr, 0, sizeof(int), third));
        cudaCheck(cudaStreamSynchronize(third));
        if (mode == "copy")
            for (int i = 0; i < 3000; i++)
                cudaCheck(cudaMemcpyAsync(i % 2 ? a.ptr : b.ptr, i % 2 ? b.ptr : a.ptr, a.bytes(), cudaMemcpyDeviceToDevice, side));
        if (mode == "spin") spin_kernel<<<1, 32, 0, side>>>(stop);
        if (mode == "wait") {
            const CUresult r = wait_value((CUstream)side, (CUdeviceptr)flag.ptr, 1, CU_STREAM_WAIT_VALUE_EQ);
            if (r != CUDA_SUCCESS) { fprintf(stderr, "error: cuStreamWaitValue32: %d\n", (int)r); return 1; }
        }
        if (mode == "kernels")
            for (int i = 0; i < 2000; i++) busy_kernel<<<1, 32, 0, side>>>(sink.ptr);
        cudaCheckLaunch();
        for (int w = 0; w < 3; w++) cudaCheck(cudaGraphLaunch(exec, s));
        std::vector<double> ms;
        for (int r = 0; r < kRepeats; r++) {
            cudaCheck(cudaEventRecord(e0, s));
            cudaCheck(cudaGraphLaunch(exec, s));
            cudaCheck(cudaEventRecord(e1, s));
            cudaCheck(cudaEventSynchronize(e1));
            float t;
            cudaCheck(cudaEventElapsedTime(&t, e0, e1));
            ms.push_back(t);
        }
        const bool side_busy = cudaStreamQuery(side) == cudaErrorNotReady;  // still working when the timing ended
        *stop = 1;
        cudaCheck(cudaMemsetAsync(flag.ptr, 1, 1, third));  // the flag's low byte: the wait (== 1) is released
        cudaCheck(cudaDeviceSynchronize());
        const double m = median(ms);
        if (mode == "none" && alone == 0) alone = m;
        printf("%-8s %d launches: %.3f ms per replay, %.3f us per launch (%+.3f us against alone)%s\n", mode.c_str(), K, m,
               1e3 * m / K, 1e3 * (m - alone) / K, mode == "none" || side_busy ? "" : " (the side stream ran dry)");
    }
    cudaCheck(cudaGraphExecDestroy(exec));
    cudaCheck(cudaGraphDestroy(graph));
    cudaCheck(cudaFreeHost(stop));
    for (cudaStream_t t : {s, side, third}) cudaCheck(cudaStreamDestroy(t));
    return 0;
}
