// How much peer traffic on the copy engines slows a GPU's own kernels. The copy-engine exchange (docs/MULTI_GPU.md)
// moves a step's gradients and parameters between the GPUs under the backward and the forward, and its time is
// hidden; yet each GPU's step is ~5% slower than one GPU alone, while other GPUs merely being busy costs nothing
// (both measured). This separates the traffic itself (the copy engines read and write this GPU's memory, and NVLink
// draws power under the power cap) from the rest of the exchange's work (sums, norm, waits).
// Work on GPU 0: one CUDA Graph of the engine's kernels at d12's shapes, kGroups times the fc GEMM (matmul_forward,
// 16384 x 768 -> 3072 with bias: compute-bound) and a LayerNorm forward (16384 x 768: memory-bound); each mode
// replays it W times (the power cap settles) and then R timed times (CUDA events, median). Beside it:
//   none   nothing
//   out    GPU 0 -> GPU 1, 64 MB copies back to back, on GPU 0 (its copy engines read its memory, NVLink out)
//   in     GPU 1 -> GPU 0, 64 MB copies back to back, on GPU 1 (writes into GPU 0's memory, NVLink in)
//   both   out and in
//   paced  out and in, 8 MB copies each way queued on the host's clock at RATE GB/s each way (default 9: a d12
//          -z 1 step on 2 GPUs moves ~250 MB each way in ~28 ms)
//   burst  out and in, 256 MB each way at full speed once every PERIOD ms (default: RATE on average, 29.8 ms at 9
//          GB/s, about a d12 step's exchange in one burst; against paced, whether the cost follows the bytes or the
//          time the links are in use)
//   local  8 MB copies from GPU 0 to GPU 0 at RATE GB/s (the same bytes through its memory, no NVLink; one GPU will do)
// Each mode prints the median replay and the mean (a burst lasts ~0.7 ms: the median shows the replays beside none,
// the mean includes those a burst slowed).
// The traffic runs on a host thread of its own, started before the first replay is queued and stopped after the last
// is done, so it covers every timed replay whatever the launch queue does.
// Checked first: the GEMM's first 64 rows and the whole LayerNorm against the fp64 CPU reference (bf16 tolerances);
// after every mode the outputs are the lone replay's bit for bit, and the copies' destinations hold their sources.
//   make -C dev/cuda peer_traffic && ./dev/cuda/peer_traffic [-g RATE] [-p PERIOD] [-w W] [-n R] [-m MODE,...]
//   ./dev/cuda/peer_traffic -c     the checks alone (make test; on one GPU only the copies within it are checked)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/matmul/matmul.cuh"
#include "reference/gpt2.h"

static_assert(kFloatXIsBF16, "peer_traffic.cu is built without -DENABLE_FP32: the GEMM is the engine's bf16 call");

using bf16 = __nv_bfloat16;
using Clock = std::chrono::steady_clock;

constexpr int kN = 16384, kC = 768, kOC = 3072, kGroups = 20, kCheckRows = 64, kInFlight = 4;
constexpr size_t kBurstBytes = 64u << 20, kPacedBytes = 8u << 20;

// The modes whose copies cross NVLink (everything but none and local).
static bool needs_peer(const std::string& mode) { return mode != "none" && mode != "local"; }

// One direction of traffic: copies from src to dst queued on `stream` (of `device`), at most kInFlight at once.
struct Lane {
    int device = 0;
    cudaStream_t stream = nullptr;
    char* src = nullptr;
    char* dst = nullptr;
    size_t bytes_moved = 0;
    std::deque<cudaEvent_t> in_flight;
    std::vector<cudaEvent_t> free_events;

    void init(int dev, char* from, char* to) {
        device = dev, src = from, dst = to;
        int lo = 0, hi = 0;
        cudaCheck(cudaSetDevice(dev));
        cudaCheck(cudaDeviceGetStreamPriorityRange(&lo, &hi));
        cudaCheck(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, hi));  // as the exchange's lanes
        for (int i = 0; i < kInFlight; i++) {
            cudaEvent_t e;
            cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
            free_events.push_back(e);
        }
        cudaCheck(cudaSetDevice(0));
    }
    // Retires finished copies; true when another may be queued.
    bool room() {
        while (!in_flight.empty()) {
            const cudaError_t r = cudaEventQuery(in_flight.front());
            if (r == cudaErrorNotReady) break;
            cudaCheck(r);
            free_events.push_back(in_flight.front());
            in_flight.pop_front();
        }
        return !free_events.empty();
    }
    void copy(size_t bytes) {
        cudaCheck(cudaSetDevice(device));
        cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
        cudaEvent_t e = free_events.back();
        free_events.pop_back();
        cudaCheck(cudaEventRecord(e, stream));
        in_flight.push_back(e);
        cudaCheck(cudaSetDevice(0));
        bytes_moved += bytes;
    }
    void drain() {
        cudaCheck(cudaStreamSynchronize(stream));
        room();
    }
    void destroy() {
        if (!stream) return;
        drain();
        cudaCheck(cudaSetDevice(device));
        for (cudaEvent_t e : free_events) cudaCheck(cudaEventDestroy(e));
        cudaCheck(cudaStreamDestroy(stream));
        cudaCheck(cudaSetDevice(0));
        free_events.clear(), stream = nullptr;
    }
};

// The first `bytes` of two device buffers (of any GPU) are the same.
static bool same_bytes(const char* a, const char* b, size_t bytes) {
    std::vector<char> ha(bytes), hb(bytes);
    cudaCheck(cudaMemcpy(ha.data(), a, bytes, cudaMemcpyDefault));
    cudaCheck(cudaMemcpy(hb.data(), b, bytes, cudaMemcpyDefault));
    return memcmp(ha.data(), hb.data(), bytes) == 0;
}
template <typename T>
static bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

int main(int argc, char** argv) {
    bool check_only = false;
    double rate_gbs = 9.0, period_ms = 0.0;  // 0: the period that gives RATE on average
    std::vector<std::string> chosen;
    const std::vector<std::string> known = {"none", "out", "in", "both", "paced", "burst", "local"};
    int warmup = 100, repeats = 100;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "-c") {
            check_only = true;
        } else if (a == "-g" && has_value) {
            rate_gbs = atof(argv[++i]);
            if (!(rate_gbs > 0.0 && rate_gbs <= 1000.0)) { fprintf(stderr, "error: -g: a rate in GB/s from 0 to 1000\n"); return 1; }
        } else if (a == "-p" && has_value) {
            period_ms = atof(argv[++i]);
            if (!(period_ms >= 1.0 && period_ms <= 10000.0)) { fprintf(stderr, "error: -p: a period in ms from 1 to 10000\n"); return 1; }
        } else if (a == "-m" && has_value) {
            const std::string list = argv[++i];
            chosen.clear();
            for (size_t b = 0; b <= list.size();) {
                const size_t e = std::min(list.find(',', b), list.size());
                const std::string m = list.substr(b, e - b);
                if (std::find(known.begin(), known.end(), m) == known.end()) {
                    fprintf(stderr, "error: -m: unknown mode '%s' (none, out, in, both, paced, burst, local)\n", m.c_str());
                    return 1;
                }
                chosen.push_back(m), b = e + 1;
            }
        } else if ((a == "-w" || a == "-n") && has_value) {
            const int v = positive_int(argv[++i]);
            if (v < 1 || v > 10000) { fprintf(stderr, "error: %s: a number of replays from 1 to 10000\n", a.c_str()); return 1; }
            (a == "-w" ? warmup : repeats) = v;
        } else {
            fprintf(stderr, "usage: %s [-g GB/s each way when paced] [-p ms between bursts] [-w warm-up replays] "
                            "[-n timed replays] [-m mode,...] [-c]\n", argv[0]);
            return 1;
        }
    }
    if (check_only && !chosen.empty()) {
        fprintf(stderr, "error: -m: -c checks its own modes (none, both, burst, local); leave -m out\n");
        return 1;
    }
    std::vector<std::string> modes = check_only ? std::vector<std::string>{"none", "both", "burst", "local"}
                                                : std::vector<std::string>{"none", "out", "in", "both", "paced", "burst", "local", "none"};
    if (!chosen.empty()) {  // the percentages are against a lone replay measured first
        modes = chosen;
        if (modes.front() != "none") modes.insert(modes.begin(), "none");
    }
    const bool bursts = std::find(modes.begin(), modes.end(), "burst") != modes.end();
    if (period_ms == 0.0) {
        period_ms = (double)(kInFlight * kBurstBytes) / (rate_gbs * 1e9) * 1e3;
        if (bursts && (period_ms < 1.0 || period_ms > 10000.0)) {
            fprintf(stderr, "error: -g %.3g: bursts of 256 MB would come every %.3g ms; give -p from 1 to 10000 ms\n",
                    rate_gbs, period_ms);
            return 1;
        }
    }
    int devices = 0;
    cudaCheck(cudaGetDeviceCount(&devices));
    int peer01 = 0, peer10 = 0;
    if (devices >= 2) {
        cudaCheck(cudaDeviceCanAccessPeer(&peer01, 0, 1));
        cudaCheck(cudaDeviceCanAccessPeer(&peer10, 1, 0));
    }
    const bool two = devices >= 2 && peer01 && peer10;
    cudaCheck(cudaSetDevice(0));
    print_device();
    if (two) {
        cudaDeviceProp p1;
        cudaCheck(cudaGetDeviceProperties(&p1, 1));
        printf("peer: %s (GPU 1), peer access both ways\n", p1.name);
    }
    if (!two && !check_only && std::any_of(modes.begin(), modes.end(), needs_peer)) {
        fprintf(stderr, "error: peer_traffic's modes but none and local need 2 GPUs with peer access (%d GPU(s)%s)\n",
                devices, devices >= 2 ? ", no peer access between 0 and 1" : "");
        return 1;
    }

    // the work: inputs, fresh for this run, rounded to bf16 so the reference sees the kernel's values
    std::vector<float> inp = random_normal((size_t)kN * kC), weight = random_normal((size_t)kOC * kC, 0.02f),
                       bias = random_normal(kOC, 0.1f), ln_w = random_normal(kC, 0.1f), ln_b = random_normal(kC, 0.1f);
    for (float& w : ln_w) w += 1.0f;
    DeviceBuffer<bf16> d_inp((size_t)kN * kC), d_weight((size_t)kOC * kC), d_bias(kOC), d_lnw(kC), d_lnb(kC);
    d_inp.upload(round_to_bf16(inp)), d_weight.upload(round_to_bf16(weight)), d_bias.upload(round_to_bf16(bias));
    d_lnw.upload(round_to_bf16(ln_w)), d_lnb.upload(round_to_bf16(ln_b));
    DeviceBuffer<bf16> d_out((size_t)kN * kOC), d_ln((size_t)kN * kC);
    DeviceBuffer<float> d_mean(kN), d_rstd(kN);
    d_out.poison(), d_ln.poison();

    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    matmul_init();
    auto work = [&] {
        for (int g = 0; g < kGroups; g++) {
            matmul_forward(d_out.ptr, d_inp.ptr, d_weight.ptr, d_bias.ptr, kN, kC, kOC, nullptr, false, s);
            layernorm_forward(d_ln.ptr, d_mean.ptr, d_rstd.ptr, d_inp.ptr, d_lnw.ptr, d_lnb.ptr, kN, kC, s);
        }
    };
    work();  // outside the capture: cuBLASLt picks and caches its plan
    cudaCheck(cudaStreamSynchronize(s));
    d_out.poison(), d_ln.poison();
    cudaCheck(cudaDeviceSynchronize());  // the poison lands before the replay (s does not wait for the legacy stream)
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    work();
    cudaCheck(cudaStreamEndCapture(s, &graph));
    cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
    cudaCheck(cudaGraphLaunch(exec, s));
    cudaCheck(cudaStreamSynchronize(s));

    // the kernels against fp64: the GEMM's first rows, the whole LayerNorm
    const std::vector<bf16> out0 = d_out.download(), ln0 = d_ln.download();
    {
        const std::vector<double> x = to_double(inp), w = to_double(weight), b = to_double(bias);
        std::vector<double> ref((size_t)kCheckRows * kOC);
        reference::matmul_forward<double>(ref.data(), x.data(), w.data(), b.data(), 1, kCheckRows, kC, kOC);
        const std::vector<bf16> rows(out0.begin(), out0.begin() + (ptrdiff_t)ref.size());
        const bool gemm_ok = validate("gemm", rows, ref, bf16_tolerance(rms(ref)));
        std::vector<double> ln_ref((size_t)kN * kC);
        const std::vector<double> lw = to_double(ln_w), lb = to_double(ln_b);
        reference::layernorm_forward<double>(ln_ref.data(), nullptr, nullptr, x.data(), lw.data(), lb.data(), 1, kN, kC);
        const bool ln_ok = validate("ln", ln0, ln_ref, bf16_tolerance(rms(ln_ref)));
        if (!gemm_ok || !ln_ok) return 1;
    }

    // the traffic: a buffer to send and one to receive on each GPU, random bytes
    Lane out_lane, in_lane, local_lane;
    DeviceBuffer<char> send0(kBurstBytes), recv0, local0(kBurstBytes);
    char *send1 = nullptr, *recv1 = nullptr;
    {
        const std::vector<float> bytes = random_normal(kBurstBytes / sizeof(float));
        cudaCheck(cudaMemcpy(send0.ptr, bytes.data(), kBurstBytes, cudaMemcpyHostToDevice));
        local_lane.init(0, send0.ptr, local0.ptr);
    }
    if (two) {
        cudaCheck(cudaDeviceEnablePeerAccess(1, 0));
        cudaCheck(cudaSetDevice(1));
        cudaCheck(cudaDeviceEnablePeerAccess(0, 0));
        cudaCheck(cudaMalloc(&send1, kBurstBytes));
        cudaCheck(cudaMalloc(&recv1, kBurstBytes));
        cudaCheck(cudaSetDevice(0));
        recv0.resize(kBurstBytes);
        const std::vector<float> bytes = random_normal(kBurstBytes / sizeof(float));
        cudaCheck(cudaMemcpy(send1, bytes.data(), kBurstBytes, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemset(recv0.ptr, 0, kBurstBytes));
        cudaCheck(cudaMemset(recv1, 0, kBurstBytes));
        out_lane.init(0, send0.ptr, recv1);
        in_lane.init(1, send1, recv0.ptr);
    }

    const int w = check_only ? 2 : warmup, r = check_only ? 2 : repeats;
    std::vector<cudaEvent_t> marks((size_t)r + 1);
    for (cudaEvent_t& e : marks) cudaCheck(cudaEventCreate(&e));
    if (bursts && two)
        printf("burst: 4 x 64 MB each way every %.1f ms (%.1f GB/s each way on average)\n", period_ms,
               (double)(kInFlight * kBurstBytes) / (period_ms * 1e6));
    double alone = 0, alone_mean = 0;
    bool ok = true;
    for (const std::string& mode : modes) {
        if (needs_peer(mode) && !two) {
            printf("%-6s not run: the copies need 2 GPUs with peer access\n", mode.c_str());
            continue;
        }
        d_out.poison(), d_ln.poison();
        out_lane.bytes_moved = in_lane.bytes_moved = local_lane.bytes_moved = 0;
        cudaCheck(cudaMemset(local0.ptr, 0, kBurstBytes));  // what an earlier mode copied must not pass for this one's
        if (two) {
            cudaCheck(cudaMemset(recv0.ptr, 0, kBurstBytes));
            cudaCheck(cudaSetDevice(1));
            cudaCheck(cudaMemset(recv1, 0, kBurstBytes));
            cudaCheck(cudaDeviceSynchronize());
            cudaCheck(cudaSetDevice(0));
        }
        cudaCheck(cudaDeviceSynchronize());
        const bool out_on = mode == "out" || mode == "both" || mode == "paced" || mode == "burst";
        const bool in_on = mode == "in" || mode == "both" || mode == "paced" || mode == "burst";
        const bool local_on = mode == "local";
        // the traffic: its first copies are queued before the first replay, and it goes on until the last is done
        std::atomic<bool> started{!out_on && !in_on && !local_on}, stop{false};
        const auto t0 = Clock::now();
        std::thread traffic([&] {
            cudaCheck(cudaSetDevice(0));
            const auto interval = std::chrono::duration_cast<Clock::duration>(
                std::chrono::duration<double>((double)kPacedBytes / (rate_gbs * 1e9)));
            const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(period_ms / 1e3));
            auto next = Clock::now();
            while (!stop.load()) {
                if (mode == "paced") {
                    if (Clock::now() >= next && out_lane.room() && in_lane.room()) {
                        out_lane.copy(kPacedBytes), in_lane.copy(kPacedBytes);
                        next += interval;
                    }
                } else if (mode == "local") {
                    if (Clock::now() >= next && local_lane.room()) {
                        local_lane.copy(kPacedBytes);
                        next += interval;
                    }
                } else if (mode == "burst") {  // the next burst once the last is done and its time has come
                    out_lane.room(), in_lane.room();
                    if (Clock::now() >= next && out_lane.in_flight.empty() && in_lane.in_flight.empty()) {
                        for (int k = 0; k < kInFlight; k++) out_lane.copy(kBurstBytes), in_lane.copy(kBurstBytes);
                        next = std::max(next + period, Clock::now());
                    }
                } else {
                    if (out_on && out_lane.room()) out_lane.copy(kBurstBytes);
                    if (in_on && in_lane.room()) in_lane.copy(kBurstBytes);
                }
                started.store(true);
                std::this_thread::sleep_for(std::chrono::microseconds(20));
            }
        });
        while (!started.load()) std::this_thread::yield();
        for (int i = 0; i < w; i++) cudaCheck(cudaGraphLaunch(exec, s));
        cudaCheck(cudaEventRecord(marks[0], s));
        for (int i = 0; i < r; i++) {
            cudaCheck(cudaGraphLaunch(exec, s));
            cudaCheck(cudaEventRecord(marks[(size_t)i + 1], s));
        }
        cudaCheck(cudaEventSynchronize(marks[(size_t)r]));
        stop.store(true);
        traffic.join();
        local_lane.drain();
        if (two) out_lane.drain(), in_lane.drain();
        const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();  // every copy done
        cudaCheck(cudaDeviceSynchronize());
        std::vector<double> ms;
        for (int i = 0; i < r; i++) {
            float t = 0;
            cudaCheck(cudaEventElapsedTime(&t, marks[(size_t)i], marks[(size_t)i + 1]));
            ms.push_back(t);
        }
        // the work's results must not depend on the traffic; the traffic must have arrived whole
        const bool bits = bitwise_equal(d_out.download(), out0) && bitwise_equal(d_ln.download(), ln0);
        const size_t copy_bytes = mode == "paced" || mode == "local" ? kPacedBytes : kBurstBytes;
        bool landed = true;
        if (out_on) landed = landed && out_lane.bytes_moved > 0 && same_bytes(send0.ptr, recv1, copy_bytes);
        if (in_on) landed = landed && in_lane.bytes_moved > 0 && same_bytes(send1, recv0.ptr, copy_bytes);
        if (local_on) landed = landed && local_lane.bytes_moved > 0 && same_bytes(send0.ptr, local0.ptr, copy_bytes);
        ok = ok && bits && landed;
        const double m = median(ms);
        float span = 0;
        cudaCheck(cudaEventElapsedTime(&span, marks[0], marks[(size_t)r]));
        const double mean = span / r;
        if (mode == "none" && alone == 0) alone = m, alone_mean = mean;
        printf("%-6s %d GEMMs + %d LayerNorms: %.3f ms per replay (%+.2f%% against alone; mean %.3f ms, %+.2f%%), traffic "
               "%.1f GB/s out, %.1f GB/s in, %.1f GB/s within GPU 0 (over the %.2f s of warm-up and timed replays); outputs "
               "bitwise the lone run's: %s; copies landed: %s\n",
               mode.c_str(), kGroups, kGroups, m, 100.0 * (m / alone - 1.0), mean, 100.0 * (mean / alone_mean - 1.0),
               out_lane.bytes_moved / seconds / 1e9,
               in_lane.bytes_moved / seconds / 1e9, local_lane.bytes_moved / seconds / 1e9, seconds, bits ? "yes" : "NO",
               landed ? "yes" : "NO");
    }
    if (check_only) printf("peer_traffic -c: kernels against fp64, outputs and copies %s: %s\n",
                           two ? "checked under traffic" : "(no 2 GPUs with peer access: only the copies within GPU 0)",
                           ok ? "PASS" : "FAIL");
    cudaCheck(cudaGraphExecDestroy(exec));
    cudaCheck(cudaGraphDestroy(graph));
    for (cudaEvent_t e : marks) cudaCheck(cudaEventDestroy(e));
    local_lane.destroy();
    if (two) {
        out_lane.destroy(), in_lane.destroy();
        cudaCheck(cudaSetDevice(1));
        cudaCheck(cudaFree(send1)), cudaCheck(cudaFree(recv1));
        cudaCheck(cudaSetDevice(0));
    }
    cudaCheck(cudaStreamDestroy(s));
    return ok ? 0 : 1;
}
