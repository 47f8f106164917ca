// Shared CUDA plumbing for every kernel module: error checks that name file:line, the training
// precision (floatX), 128-bit packed loads/stores, warp reductions and device-property queries.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExtMemCudaRt.h>

#include <string>
#include <vector>

#include "llmc/core/bf16.h"
#include "llmc/core/utils.h"

// ---------------------------------------------------------------- error checks
// Set while something may know the real cause of a failed call better than the call itself: the rank watchdog
// (llmc/distributed/rank_watchdog.h), when a peer process is gone. It runs first and may end the process with its
// own line.
inline void (*library_failure_hook)() = nullptr;

// One message shape for every library (CUDA, cuBLAS, NCCL in multi_gpu.cuh): what failed, why, and where.
[[noreturn]] inline void library_call_failed(const char* library, const char* what, int code, const char* file,
                                             int line) {
    if (library_failure_hook) library_failure_hook();
    fprintf(stderr, "error: %s: %s (%d) at %s:%d\n", library, what, code, file, line);
    exit(EXIT_FAILURE);
}

inline void cuda_check(cudaError_t err, const char* file, int line) {
    if (err != cudaSuccess) library_call_failed("CUDA", cudaGetErrorString(err), (int)err, file, line);
}
#define cudaCheck(err) cuda_check((err), __FILE__, __LINE__)

inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        library_call_failed("cuBLAS", cublasGetStatusString(status), (int)status, file, line);
    }
}
#define cublasCheck(status) cublas_check((status), __FILE__, __LINE__)

// Every kernel launch is followed by this: catches bad launch configurations immediately.
#define cudaCheckLaunch() cuda_check(cudaGetLastError(), __FILE__, __LINE__)

// ---------------------------------------------------------------- precision
#if defined(ENABLE_FP32)
typedef float floatX;
constexpr bool kFloatXIsBF16 = false;
#define PRECISION_NAME "fp32"
#else
typedef __nv_bfloat16 floatX;
constexpr bool kFloatXIsBF16 = true;
#define PRECISION_NAME "bf16"
#endif

template <typename T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }

inline cudaDataType_t cuda_datatype_of_floatX() { return kFloatXIsBF16 ? CUDA_R_16BF : CUDA_R_32F; }

constexpr int kWarpSize = 32;
// Softmax in the log2 domain (exp2 is one instruction): exp(x) = exp2(x * kLog2e), ln(x) = log2(x) * kLn2.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
inline int ceil_div(long long a, long long b) { return (int)((a + b - 1) / b); }

// ---------------------------------------------------------------- sanitizer annotations
// Tells compute-sanitizer's initcheck that [ptr, ptr + bytes) was written by the work queued on `stream`. Needed
// for memory written by library kernels whose stores initcheck does not see (cuBLASLt's Hopper GEMMs: after one,
// initcheck reports every read of its output as uninitialized). NVTX is header-only and this is a no-op unless a
// tool is attached.
inline void sanitizer_mark_initialized(const void* ptr, size_t bytes, cudaStream_t stream) {
    if (!ptr || bytes == 0) return;
    static const nvtxDomainHandle_t domain = nvtxDomainCreateA("llmc");
    nvtxMemVirtualRangeDesc_t range = {bytes, ptr};
    nvtxMemMarkInitializedBatch_t batch = {};
    batch.extCompatID = NVTX_EXT_COMPATID_MEM;
    batch.structSize = sizeof(batch);
    batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
    batch.regionDescCount = 1;
    batch.regionDescElementSize = sizeof(range);
    batch.regionDescElements = &range;
    nvtxMemCudaMarkInitialized(domain, stream, 0, &batch);
}

// ---------------------------------------------------------------- host <-> device as fp32
// n elements of a device tensor (fp32 or bf16) copied to host floats (bf16 widened exactly), and host floats
// copied into one (rounded to the nearest bf16). Synchronous.
inline void device_to_host_floats(float* host, const float* device, size_t n) {
    cudaCheck(cudaMemcpy(host, device, n * sizeof(float), cudaMemcpyDeviceToHost));
}
inline void device_to_host_floats(float* host, const __nv_bfloat16* device, size_t n) {
    std::vector<uint16_t> bits(n);
    cudaCheck(cudaMemcpy(bits.data(), device, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    bf16_bits_to_floats(bits.data(), host, n);
}
// Values already copied to the host in the device's type (a pinned staging copy), as floats.
inline void host_values_to_floats(float* out, const float* in, size_t n) { std::memcpy(out, in, n * sizeof(float)); }
inline void host_values_to_floats(float* out, const __nv_bfloat16* in, size_t n) {
    bf16_bits_to_floats(reinterpret_cast<const uint16_t*>(in), out, n);
}
inline void host_floats_to_device(float* device, const float* host, size_t n) {
    cudaCheck(cudaMemcpy(device, host, n * sizeof(float), cudaMemcpyHostToDevice));
}
inline void host_floats_to_device(__nv_bfloat16* device, const float* host, size_t n) {
    std::vector<uint16_t> bits(n);
    floats_to_bf16_bits(host, bits.data(), n);
    cudaCheck(cudaMemcpy(device, bits.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
}

// ---------------------------------------------------------------- 128-bit packed access
// A 16-byte vector of T; loads and stores compile to single 128-bit memory instructions.
template <typename T>
struct alignas(16) Packed128 {
    static constexpr int size = 16 / sizeof(T);
    T payload[size];
    __device__ __forceinline__ T& operator[](int i) { return payload[i]; }
    __device__ __forceinline__ const T& operator[](int i) const { return payload[i]; }
};
template <typename T> __device__ __forceinline__ Packed128<T> load128(const T* p) {
    return *reinterpret_cast<const Packed128<T>*>(p);
}
// Streaming load: the data is not reused soon, keep it out of the cache's way.
template <typename T> __device__ __forceinline__ Packed128<T> load128cs(const T* p) {
    Packed128<T> out;
    *reinterpret_cast<int4*>(&out) = __ldcs(reinterpret_cast<const int4*>(p));
    return out;
}
template <typename T> __device__ __forceinline__ void store128(T* p, const Packed128<T>& v) {
    *reinterpret_cast<Packed128<T>*>(p) = v;
}
typedef Packed128<floatX> x128;
typedef Packed128<float> f128;

// ---------------------------------------------------------------- asynchronous copies (sm_80+)
// A shared-memory pointer as the 32-bit shared-space address that PTX's shared operands take.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte async copy global -> shared (dst: a shared-space address); when !valid the 16 bytes are zero-filled and
// nothing is read. commit closes a group of copies; wait<N> returns when at most N of this thread's groups are
// still in flight (then __syncthreads makes the data visible to the whole block).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

// ---------------------------------------------------------------- named barriers
// Barrier kId (1..15; 0 is __syncthreads') for `threads` threads, a multiple of 32. The id is an immediate, so a
// kernel reserves only the barriers it names (an id in a register reserves all 16, and fewer blocks fit an SM).
template <int kId>
__device__ __forceinline__ void named_barrier_sync(int threads) {
    static_assert(kId >= 1 && kId <= 15, "barrier 0 is __syncthreads'");
    asm volatile("bar.sync %0, %1;" ::"n"(kId), "r"(threads) : "memory");
}

// ---------------------------------------------------------------- reductions
__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffff, v, off);
    return v;
}
__device__ __forceinline__ float warp_reduce_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, off));
    return v;
}
// Sum over the whole block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// The order of additions is fixed by thread index, so the result is deterministic.
__device__ inline float block_reduce_sum(float v) {
    __shared__ float warp_sums[32];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int num_warps = blockDim.x / kWarpSize;
    v = warp_reduce_sum(v);
    __syncthreads();  // warp_sums may still be read by a previous call
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = lane < num_warps ? warp_sums[lane] : 0.0f;
    return warp_reduce_sum(v);
}
// Column `col` of a [num_chunks][stride] fp32 array summed by a block of dim3(kWarpSize, kColumnSumSplit) threads (32
// columns per block): the 32 threads of a column each sum every 32nd row (their loads in flight together), then
// those 32 sums are added in order, so the result repeats bit for bit. Every thread of the block calls it (in_range
// false past the last column); the sum is meant for the threads with threadIdx.y == 0.
constexpr int kColumnSumSplit = 32;
__device__ inline float ordered_column_sum(const float* partials, int num_chunks, size_t stride, int col, bool in_range) {
    __shared__ float part[kColumnSumSplit][kWarpSize];
    float acc = 0.0f;
    if (in_range) {
#pragma unroll 8
        for (int k = threadIdx.y; k < num_chunks; k += kColumnSumSplit) acc += partials[(size_t)k * stride + col];
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0)
        for (int y = 1; y < kColumnSumSplit; y++) acc += part[y][threadIdx.x];
    return acc;
}
// A reduction across blocks, deterministic: each block writes its part, then every thread of it calls this; true in
// the block that arrives last at *count (of `blocks`), which resets the count to zero for the next call and then
// reads the other blocks' parts through L2 (__ldcg) in a fixed order, whichever block it is.
__device__ inline bool last_to_arrive(unsigned* count, unsigned blocks) {
    __shared__ bool last;
    __threadfence();  // this block's part visible device-wide before its count
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(count, 1u) == blocks - 1;
        if (last) {
            *count = 0;
            __threadfence();  // the others' parts ordered before this block's reads (the barrier passes it on)
        }
    }
    __syncthreads();
    return last;
}

// ---------------------------------------------------------------- stochastic rounding
// A stateless 32-bit hash (Squirrel-style): random bits for element `index` under `seed`.
__device__ __forceinline__ uint32_t hash_u32(uint32_t index, uint32_t seed) {
    uint32_t x = index * 0xB5297A4Du;
    x += seed;
    x ^= x >> 8;
    x += 0x68E31DA4u;
    x ^= x << 8;
    x *= 0x1B56C4E9u;
    x ^= x >> 8;
    return x;
}
// Rounds to bf16 up or down with probability proportional to the distance, so that small updates
// are not lost on average. Deterministic for a given (index, seed).
__device__ __forceinline__ __nv_bfloat16 stochastic_round_bf16(float x, uint32_t index, uint32_t seed) {
    if (!isfinite(x)) return __float2bfloat16(x);
    uint32_t bits = __float_as_uint(x);
    uint32_t noise = hash_u32(index, seed) & 0xFFFFu;
    uint32_t rounded = (bits + noise) & 0xFFFF0000u;
    // Adding noise may carry into the exponent; that is the correct round-up (to the next binade).
    if (!isfinite(__uint_as_float(rounded))) rounded = bits & 0xFFFF0000u;  // never round up to inf
    return __ushort_as_bfloat16((unsigned short)(rounded >> 16));
}
__device__ __forceinline__ void store_param(float* dst, float x, uint32_t, uint32_t) { *dst = x; }
__device__ __forceinline__ void store_param(__nv_bfloat16* dst, float x, uint32_t index, uint32_t seed) {
    *dst = stochastic_round_bf16(x, index, seed);
}

// ---------------------------------------------------------------- device properties
// Every GPU program calls this first: without a usable GPU it exits with one line saying what is missing
// (no driver, a driver too old for this build, or no device) instead of the runtime's first error.
inline void require_cuda_device(const char* program) {
    int driver = 0, runtime = 0, count = 0;
    cudaDriverGetVersion(&driver);  // 0 when no driver is installed
    cudaRuntimeGetVersion(&runtime);
    const cudaError_t err = cudaGetDeviceCount(&count);
    auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    std::string why;
    if (driver == 0) {
        why = "no NVIDIA driver found: it needs an NVIDIA GPU with its driver (nvidia-smi lists them); "
              "the CPU tests run anywhere (make test)";
    } else if (driver < runtime) {
        why = "the NVIDIA driver supports CUDA " + version(driver) + ", this build needs " + version(runtime) +
              ": update the driver, or build with a CUDA toolkit no newer than the driver";
    } else if (err != cudaSuccess || count == 0) {
        why = "no CUDA device found (driver " + version(driver) + ", " + cudaGetErrorString(err) +
              "): check nvidia-smi and CUDA_VISIBLE_DEVICES";
    }
    if (why.empty()) return;
    cudaGetLastError();  // clear the sticky error of the failed query
    fprintf(stderr, "error: %s: %s\n", program, why.c_str());
    exit(EXIT_FAILURE);
}

struct DeviceInfo {
    int device = 0;
    cudaDeviceProp prop;
};
inline const DeviceInfo& device_info() {
    static DeviceInfo info = [] {
        DeviceInfo d;
        cudaCheck(cudaGetDevice(&d.device));
        cudaCheck(cudaGetDeviceProperties(&d.prop, d.device));
        return d;
    }();
    return info;
}
inline int device_sm_count() { return device_info().prop.multiProcessorCount; }
// The device's peak memory bandwidth in bytes/s: its memory clock (HBM and GDDR move two words a clock) times its bus
// width, as the driver reports them; 0 if it does not (a number for reports: no error).
inline double device_peak_memory_bandwidth() {
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device_info().device) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device_info().device) != cudaSuccess) {
        cudaGetLastError();  // clear it
        return 0.0;
    }
    return clock_khz > 0 && bus_bits > 0 ? 2.0 * clock_khz * 1e3 * bus_bits / 8.0 : 0.0;
}

// ---------------------------------------------------------------- programmatic dependent launch (PDL, sm_90+)
// A kernel launched through PdlLaunch with pdl = true may start while the kernel before it in the stream still
// runs. Before pdl_trigger_and_wait() it may only touch what no earlier kernel writes (weights); the call lets the
// next PDL kernel start launching, then waits until the kernel before has finished and its writes are visible.
// Launched plainly, or before sm_90, both are no-ops.
__device__ __forceinline__ void pdl_trigger_and_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
struct PdlLaunch {  // cudaLaunchKernelEx(&launch.config, kernel, args...)
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attr[1];
    PdlLaunch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl) {
        config.gridDim = grid;
        config.blockDim = block;
        config.dynamicSmemBytes = smem;
        config.stream = stream;
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        config.attrs = attr;
        config.numAttrs = pdl && device_info().prop.major >= 9 ? 1 : 0;
    }
    PdlLaunch(const PdlLaunch&) = delete;  // config.attrs points into this object
    PdlLaunch& operator=(const PdlLaunch&) = delete;
};
