// The persistent decode step's phase boundary alone (docs/DECODE.md, "Next here"): every block writes its slice of
// an activation vector of n values and then needs the whole vector, as the LN+qkv phase needs all of fcproj's rows.
// A round is one such all-to-all hand-off, with nothing multiplied; four ways:
//   counter  today's step: the block's stores, a barrier, a release add on the phase's counter; every block waits
//            (one thread, acquire, llmc/core/block_counters.cuh) for the grid's adds, then loads the vector into
//            shared memory: two round trips through L2 (the counter, then the data)
//   spin     counter with the wait polling without the 20 ns sleep between polls (what the sleep costs)
//   ll64     the flag in the data, as NCCL's LL protocol: each value stored with the round's tag in one 64-bit word
//            (fp32 + a 32-bit tag); readers poll their words until the tags are the round's, straight into shared
//            memory: no counter, one round trip when the words are there (a thread's loads all in flight at once,
//            then only the words not yet tagged loaded again)
//   ll32     the same with a bf16 value and a 16-bit tag in 32 bits (the step's activations are bf16): half the bytes
// A tag word is single-copy atomic (aligned, one store), so a reader that sees the tag sees its value. Two buffers,
// by the round's parity: a block writes round r + 2 only after it read all of round r + 1, which every block wrote
// after reading round r, so no word is overwritten while it is read, and a word's old tag is two rounds old (a
// 16-bit tag cannot repeat). Every value read is checked (values are integers below 251, exact in bf16) and the
// program fails on any wrong one; buffers are poisoned (all ones) before the first round. Times: common.h's
// benchmark (CUDA events, warm-ups), the median of 5 back-to-back launches of R rounds each, divided by R. A round
// also checks the vector (the same work in every mode), so compare the modes with each other, not a round's time
// with a phase of the step.
// Then the same hand-off inside a thread block cluster of k blocks (Hopper): each block keeps its slice in its own
// shared memory, the cluster's barrier (arrive.release, wait.acquire) orders it, and every block reads the other
// slices through distributed shared memory, never through L2. A step whose phases exchange within clusters (a head's
// QKV rows, its attention, its share of the projection) would pay this instead of the all-to-all; how many clusters
// of k can be resident at once (cudaOccupancyMaxActiveClusters) says which k such a step can use.
// Last, the release's fence against bulk copies in flight (Hopper; docs/DECODE.md, "The ring's depth and the end's
// release": the step's release grows with the next phase's bytes in flight). The counter hand-off again, each block
// also copying kb KB from global into shared memory (cp.async.bulk, 16 KB pieces on an mbarrier, from a 1 GiB buffer
// walked so that the copies miss L2): issued by warp 1 just before the block's release (before), or by thread 0 just
// after its release add (after), or none. The copies are waited for, and every landed word checked, once the round's
// vector is loaded. If the fence waits for the SM's copies in flight, before costs about a copy's time more than after.
//   make -C dev/cuda decode_handoff && ./dev/cuda/decode_handoff [-r rounds (2000)]
#include <cstdio>
#include <string>
#include <vector>

#include <cooperative_groups.h>

#include "common.h"
#include "llmc/core/block_counters.cuh"
#include "llmc/hopper/arch.cuh"
#include "llmc/hopper/pipeline.cuh"
#include "llmc/hopper/tma.cuh"

namespace cg = cooperative_groups;

constexpr int kThreads = 256, kMaxN = 6400;
enum Mode { Counter = 0, Spin = 1, LL64 = 2, LL32 = 3 };
const char* const kModeNames[] = {"counter", "spin", "ll64", "ll32"};

__device__ __forceinline__ unsigned value_of(unsigned round, int i) { return (round * 7u + (unsigned)i) % 251u; }

__device__ __forceinline__ unsigned long long ld_relaxed_64(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned ld_relaxed_32(const unsigned* p) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_relaxed_64(unsigned long long* p, unsigned long long v) {
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed_32(unsigned* p, unsigned v) {
    asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// A thread's words of the vector: i = threadIdx.x + j * kThreads, j < kPerThread.
constexpr int kPerThread = (kMaxN + kThreads - 1) / kThreads;
// Polls of a word before it counts as never arriving (a stale or lost word fails the run instead of hanging it).
constexpr int kMaxPolls = 1 << 20;

// The whole released vector into shared x, all of a thread's loads in flight before the first store (as the tagged
// modes' first pass); __ldcg: L2, where the other blocks' stores landed.
__device__ __forceinline__ void load_released(const float* v, int n, float* x) {
    float f[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; j++)
        if (threadIdx.x + j * kThreads < n) f[j] = __ldcg(v + threadIdx.x + j * kThreads);
#pragma unroll
    for (int j = 0; j < kPerThread; j++)
        if (threadIdx.x + j * kThreads < n) x[threadIdx.x + j * kThreads] = f[j];
}

// A thread's tagged words into x: all its loads issued at once (independent, so they are in flight together), then
// only the words whose tag is not yet `tag` loaded again. Returns the words that never arrived.
template <typename Word, typename Tag, typename Value>
__device__ __forceinline__ int poll_words(const Word* v, int n, Tag tag_of, unsigned tag, Value value_of_word,
                                          float* x) {
    Word w[kPerThread];
    unsigned pending = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; j++) {
        const int i = threadIdx.x + j * kThreads;
        if (i < n) {
            if constexpr (sizeof(Word) == 8) w[j] = ld_relaxed_64(v + i);
            else w[j] = ld_relaxed_32(v + i);
            pending |= 1u << j;
        }
    }
    for (int polls = 0;; polls++) {
#pragma unroll
        for (int j = 0; j < kPerThread; j++)
            if ((pending >> j & 1u) && tag_of(w[j]) == tag)
                x[threadIdx.x + j * kThreads] = value_of_word(w[j]), pending &= ~(1u << j);
        if (pending == 0 || polls == kMaxPolls) break;
#pragma unroll
        for (int j = 0; j < kPerThread; j++)
            if (pending >> j & 1u) {
                if constexpr (sizeof(Word) == 8) w[j] = ld_relaxed_64(v + threadIdx.x + j * kThreads);
                else w[j] = ld_relaxed_32(v + threadIdx.x + j * kThreads);
            }
    }
    return __popc(pending);
}

// Rounds first..first+rounds-1 (from 1, counted across launches: counters and tags only grow). data: two buffers of
// n words of the mode's width (8 bytes for counter and ll64, read as floats or tag words); wrong: values read wrong
// or never arriving (a block that saw one stops: the others then time out on its words, and the run fails).
template <int kMode>
__global__ void __launch_bounds__(kThreads) handoff_kernel(void* data, unsigned* counter, int n, unsigned first,
                                                           int rounds, unsigned long long* wrong) {
    __shared__ float x[kMaxN];
    __shared__ int lost;
    const int begin = (int)((long long)n * blockIdx.x / gridDim.x);
    const int end = (int)((long long)n * (blockIdx.x + 1) / gridDim.x);
    unsigned long long bad = 0;
    if (threadIdx.x == 0) lost = 0;
    for (unsigned r = first; r < first + (unsigned)rounds; r++) {
        const size_t half = (size_t)(r & 1u) * n;
        int missing = 0;
        if (kMode == Counter || kMode == Spin) {
            float* v = reinterpret_cast<float*>(data) + half;
            for (int i = begin + threadIdx.x; i < end; i += kThreads) v[i] = (float)value_of(r, i);
            __syncthreads();
            if (threadIdx.x == 0) {
                red_release_add(counter, 1u);
                if (kMode == Counter) wait_count(counter, r * gridDim.x);
                else
                    while ((int)(ld_acquire(counter) - r * gridDim.x) < 0) {}
            }
            __syncthreads();
            load_released(v, n, x);
        } else if (kMode == LL64) {
            unsigned long long* v = reinterpret_cast<unsigned long long*>(data) + half;
            for (int i = begin + threadIdx.x; i < end; i += kThreads)
                st_relaxed_64(v + i, (unsigned long long)r << 32 | __float_as_uint((float)value_of(r, i)));
            missing = poll_words(
                v, n, [](unsigned long long w) { return (unsigned)(w >> 32); }, r,
                [](unsigned long long w) { return __uint_as_float((unsigned)w); }, x);
        } else {
            unsigned* v = reinterpret_cast<unsigned*>(data) + half;
            const unsigned tag = r & 0xffffu;
            for (int i = begin + threadIdx.x; i < end; i += kThreads)
                st_relaxed_32(v + i, tag << 16 | __bfloat16_as_ushort(__float2bfloat16((float)value_of(r, i))));
            missing = poll_words(
                v, n, [](unsigned w) { return w >> 16; }, tag,
                [](unsigned w) { return __bfloat162float(__ushort_as_bfloat16((unsigned short)(w & 0xffffu))); }, x);
        }
        if (missing) atomicAdd(&lost, missing);
        __syncthreads();  // the whole vector is the block's: what the next phase's products would read
        for (int i = threadIdx.x; i < n; i += kThreads) bad += x[i] != (float)value_of(r, i);
        const bool stop = lost != 0;
        __syncthreads();  // x is rewritten next round
        if (stop) break;
    }
    if (bad) atomicAdd(wrong, bad);
}

// Rounds within a cluster: the block's slice (by its rank in the cluster) into own[round parity], the cluster's
// barrier, then the whole vector from the cluster's blocks' own[] into x, checked. Two buffers by parity, as above: a
// block writes round r + 2 only after the barrier of round r + 1, which no block passes before it read round r.
// The block also asks for kOneBlockPerSM bytes of dynamic shared memory it does not use, more than half an SM's, so
// that one block sits on an SM as in the step (its ~200 KB) and the resident count is the step's.
constexpr int kMaxClusterN = 3072, kClusterPerThread = kMaxClusterN / kThreads, kOneBlockPerSM = 128 << 10;
__global__ void __launch_bounds__(kThreads) cluster_handoff_kernel(int n, unsigned first, int rounds,
                                                                   unsigned long long* wrong) {
    __shared__ float own[2][kMaxClusterN];
    __shared__ float x[kMaxClusterN];
    cg::cluster_group cluster = cg::this_cluster();
    const int k = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    const int begin = n * rank / k, end = n * (rank + 1) / k;
    int owner[kClusterPerThread];  // the rank whose slice [n o / k, n (o + 1) / k) holds each of the thread's values
#pragma unroll
    for (int j = 0; j < kClusterPerThread; j++) {
        const int i = threadIdx.x + j * kThreads;
        int o = i < n ? i * k / n : 0;
        while (i < n && n * (o + 1) / k <= i) o++;
        while (i < n && n * o / k > i) o--;
        owner[j] = o;
    }
    unsigned long long bad = 0;
    for (unsigned r = first; r < first + (unsigned)rounds; r++) {
        float* mine = own[r & 1u];
        for (int i = begin + threadIdx.x; i < end; i += kThreads) mine[i] = (float)value_of(r, i);
        cluster.sync();
        float v[kClusterPerThread];  // all loads in flight at once, as the other modes'
#pragma unroll
        for (int j = 0; j < kClusterPerThread; j++)
            if (threadIdx.x + j * kThreads < n)
                v[j] = cluster.map_shared_rank(mine, owner[j])[threadIdx.x + j * kThreads];
#pragma unroll
        for (int j = 0; j < kClusterPerThread; j++)
            if (threadIdx.x + j * kThreads < n) x[threadIdx.x + j * kThreads] = v[j];
        __syncthreads();  // the whole vector is the block's
        for (int i = threadIdx.x; i < n; i += kThreads) bad += x[i] != (float)value_of(r, i);
        __syncthreads();  // x is rewritten next round
    }
    cluster.sync();  // no block leaves while another may still read its shared memory
    if (bad) atomicAdd(wrong, bad);
}

struct Handoff {
    int sms;
    DeviceBuffer<unsigned long long> data{2 * (size_t)kMaxN}, wrong{1};
    DeviceBuffer<unsigned> counter{1};
    unsigned next_round = 1;
    explicit Handoff(int sms_) : sms(sms_) {}
    void reset() {  // poisoned: all-ones tags match no round of a run
        cudaCheck(cudaMemset(data.ptr, 0xff, data.bytes()));
        cudaCheck(cudaMemset(counter.ptr, 0, counter.bytes())), cudaCheck(cudaMemset(wrong.ptr, 0, wrong.bytes()));
        next_round = 1;
    }
    void launch(Mode mode, int n, int rounds) {
        void* d = data.ptr;
        unsigned* c = counter.ptr;
        unsigned first = next_round;
        unsigned long long* w = wrong.ptr;
        void* args[] = {&d, &c, &n, &first, &rounds, &w};
        const void* k = mode == Counter ? (const void*)handoff_kernel<Counter>
                        : mode == Spin  ? (const void*)handoff_kernel<Spin>
                        : mode == LL64  ? (const void*)handoff_kernel<LL64>
                                        : (const void*)handoff_kernel<LL32>;
        // cooperative: every block resident, or the launch fails (the rounds wait on each other)
        cudaCheck(cudaLaunchCooperativeKernel(k, dim3(sms), dim3(kThreads), args, 0, nullptr));
        cudaCheckLaunch();
        next_round += (unsigned)rounds;
    }
};

// The counter hand-off of n floats with `bytes` of bulk copies a block a round, issued before the release (by warp 1)
// or after it (by thread 0); source: `words` 32-bit words, word i = i. wrong: values or copied words read wrong.
constexpr int kCopyPiece = 16 << 10, kMaxCopyBytes = 128 << 10;
template <bool kBefore>
__global__ void __launch_bounds__(kThreads) fence_kernel(float* data, unsigned* counter, int n, unsigned first,
                                                         int rounds, const unsigned* source, size_t words, int bytes,
                                                         unsigned long long* wrong) {
    extern __shared__ __align__(128) uint8_t landed[];  // bytes
    __shared__ float x[kMaxN];
    __shared__ uint64_t bar;
    if (threadIdx.x == 0) hopper::mbarrier_init(&bar, 1), hopper::fence_barrier_init();
    __syncthreads();
    const int begin = (int)((long long)n * blockIdx.x / gridDim.x);
    const int end = (int)((long long)n * (blockIdx.x + 1) / gridDim.x);
    const unsigned* landed_words = reinterpret_cast<const unsigned*>(landed);
    unsigned long long bad = 0;
    auto copy = [&](size_t at) {  // the round's copies (at: their first word), on the barrier
        hopper::mbarrier_arrive_expect_tx(&bar, (uint32_t)bytes);
        for (int b = 0; b < bytes; b += kCopyPiece)
            hopper::bulk_load_1d(landed + b, source + at + b / 4, (uint32_t)min(kCopyPiece, bytes - b), &bar);
    };
    for (unsigned r = first; r < first + (unsigned)rounds; r++) {
        float* v = data + (size_t)(r & 1u) * n;
        // a new stretch of the source each round and block, 16-byte aligned: past L2 (1 GiB)
        const size_t at = (((size_t)r * gridDim.x + blockIdx.x) * (size_t)(bytes / 4)) % (words - bytes / 4);
        for (int i = begin + threadIdx.x; i < end; i += kThreads) v[i] = (float)value_of(r, i);
        if (kBefore && bytes && threadIdx.x == 32) copy(at);  // warp 1's copies, in flight at thread 0's release
        __syncthreads();
        if (threadIdx.x == 0) {
            red_release_add(counter, 1u);
            if (!kBefore && bytes) copy(at);  // after the release add
            wait_count(counter, r * gridDim.x);
        }
        __syncthreads();
        load_released(v, n, x);
        if (bytes) {
            hopper::mbarrier_wait(&bar, (r - first) & 1u);
            for (int i = threadIdx.x; i < bytes / 4; i += kThreads) bad += landed_words[i] != (unsigned)(at + i);
        }
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += kThreads) bad += x[i] != (float)value_of(r, i);
        __syncthreads();  // x and the landed bytes are rewritten next round
    }
    if (bad) atomicAdd(wrong, bad);
}

// The fence's table: n 1600 and 6400, 0 to 128 KB of copies a block, before and after the release.
bool fence_rounds(int rounds, int sms) {
    constexpr size_t kWords = (size_t)1 << 28;  // 1 GiB
    DeviceBuffer<unsigned> source(kWords), counter(1);
    DeviceBuffer<float> data(2 * (size_t)kMaxN);
    DeviceBuffer<unsigned long long> wrong(1);
    {
        std::vector<unsigned> host(kWords);
        for (size_t i = 0; i < kWords; i++) host[i] = (unsigned)i;
        source.upload(host);
    }
    for (const void* k : {(const void*)fence_kernel<true>, (const void*)fence_kernel<false>})
        cudaCheck(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxCopyBytes));
    bool ok = true;
    for (int n : {1600, 6400}) {
        printf("  n %4d:", n);
        for (int kb : {0, 32, 64, 128}) {
            for (int before = 1; before >= 0; before--) {
                if (kb == 0 && !before) continue;  // no copies: the two are the same
                cudaCheck(cudaMemset(counter.ptr, 0, counter.bytes())), cudaCheck(cudaMemset(wrong.ptr, 0, wrong.bytes()));
                unsigned next = 1;
                int bytes = kb << 10;
                float* d = data.ptr;
                unsigned* c = counter.ptr;
                const unsigned* src = source.ptr;
                size_t words = kWords;
                unsigned long long* w = wrong.ptr;
                const double us = 1e3 * benchmark([&] {
                    unsigned first = next;
                    void* args[] = {&d, &c, &n, &first, &rounds, &src, &words, &bytes, &w};
                    cudaCheck(cudaLaunchCooperativeKernel(before ? (const void*)fence_kernel<true>
                                                                 : (const void*)fence_kernel<false>,
                                                          dim3(sms), dim3(kThreads), args, (size_t)bytes, nullptr));
                    cudaCheckLaunch();
                    next += (unsigned)rounds;
                }, 5).warm_ms / rounds;
                const unsigned long long bad = wrong.download()[0];
                ok &= bad == 0;
                printf("  %3d KB %s %.3f%s", kb, kb == 0 ? "none  " : before ? "before" : "after ", us,
                       bad ? " (WRONG VALUES)" : "");
            }
        }
        printf("\n");
    }
    return ok;
}

// The cluster hand-off for k = 2, 4, 8 and 16 (16: a non-portable size, where the GPU allows it), over as many whole
// clusters as are resident at once and fit in one block per SM (a second wave would double a round's time).
bool cluster_rounds(int rounds, int sms) {
    cudaCheck(cudaFuncSetAttribute(cluster_handoff_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaCheck(cudaFuncSetAttribute(cluster_handoff_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   kOneBlockPerSM));
    DeviceBuffer<unsigned long long> wrong(1);
    bool ok = true;
    for (int k : {2, 4, 8, 16}) {
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3((unsigned)k), config.blockDim = dim3(kThreads), config.dynamicSmemBytes = kOneBlockPerSM;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = (unsigned)k, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
        config.attrs = attr, config.numAttrs = 1;
        int resident = 0;
        const cudaError_t e = cudaOccupancyMaxActiveClusters(&resident, cluster_handoff_kernel, &config);
        if (e == cudaErrorInvalidClusterSize || e == cudaErrorNotSupported || (e == cudaSuccess && resident == 0)) {
            (void)cudaGetLastError();  // not sticky: this cluster size is refused here
            printf("  k %2d: not launchable here (%s)\n", k,
                   e == cudaSuccess ? "no cluster fits" : cudaGetErrorString(e));
            continue;
        }
        cudaCheck(e);
        const int clusters = std::min(resident, sms / k);
        config.gridDim = dim3((unsigned)(clusters * k));
        printf("  k %2d (%2d clusters resident, %3d blocks; run on %3d):", k, resident, resident * k, clusters * k);
        unsigned first = 1;
        for (int n : {768, 1600, 3072}) {
            cudaCheck(cudaMemset(wrong.ptr, 0, wrong.bytes()));
            unsigned long long* w = wrong.ptr;
            const double us = 1e3 * benchmark([&] {
                cudaCheck(cudaLaunchKernelEx(&config, cluster_handoff_kernel, n, first, rounds, w));
                cudaCheckLaunch();
                first += (unsigned)rounds;
            }, 5).warm_ms / rounds;
            const unsigned long long bad = wrong.download()[0];
            ok &= bad == 0;
            printf("  n %4d %.3f%s", n, us, bad ? " (WRONG VALUES)" : "");
        }
        printf("\n");
    }
    return ok;
}

int main(int argc, char** argv) {
    int rounds = 2000;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-r" && i + 1 < argc && (rounds = positive_int(argv[++i])) > 0 && rounds <= 20000) continue;
        fprintf(stderr, "usage: %s [-r rounds, 1..20000 (2000)]\n", argv[0]);
        return 1;
    }
    print_device();
    const int sms = device_sm_count();
    Handoff h(sms);
    printf("one all-to-all hand-off of n values over %d blocks (one per SM, %d threads), us a round, median of 5 "
           "back-to-back launches of %d rounds\n", sms, kThreads, rounds);
    bool ok = true;
    for (int n : {768, 1600, 3072, 6400}) {  // C and 4C at d12 and d48
        printf("  n %4d:", n);
        for (Mode mode : {Counter, Spin, LL64, LL32}) {
            h.reset();
            // every launch checks its values; the vector is a few KB, so the warm median (back to back) is the one
            const double us = 1e3 * benchmark([&] { h.launch(mode, n, rounds); }, 5).warm_ms / rounds;
            const unsigned long long wrong = h.wrong.download()[0];
            ok &= wrong == 0;
            printf("  %s %.3f%s", kModeNames[mode], us, wrong ? " (WRONG VALUES)" : "");
        }
        printf("\n");
    }
    printf("the same within a cluster of k blocks (distributed shared memory), us a round, median of 5 launches of %d "
           "rounds; resident at once: the most clusters of k, as blocks\n", rounds);
    ok &= cluster_rounds(rounds, sms);
    if (hopper::hopper_available()) {
        printf("the counter hand-off with bulk copies a block a round, in flight at the release (before: issued by warp "
               "1 just before it; after: by the releasing thread just after it), us a round, median of 5 launches of "
               "%d rounds\n", rounds);
        ok &= fence_rounds(rounds, sms);
    } else {
        printf("the release's fence against bulk copies: needs an sm_90a build on an H100/H200, not run\n");
    }
    printf("decode_handoff: %s (every value read checked)\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
