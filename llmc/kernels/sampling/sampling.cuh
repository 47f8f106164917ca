// Choosing the next token on the GPU, so no logits cross to the host during generation.
//
// The rule is llmc/kernels/sampling/sampling_rule.h's, which the host sampler (llmc/inference/sampler.h) is built from too:
// greedy at temperature 0 or top-k 1 (the lowest id among equal maxima); else softmax(logits / temperature) over the
// real vocabulary, restricted to the top_k highest logits and then to the nucleus (the highest tokens whose
// probabilities reach top_p, ties by lower id), and one coin in [0, 1) inverts the CDF in id order. One block of
// 1024 threads per sequence; thread t owns the contiguous ids [t·chunk, (t+1)·chunk), so "lower id first" is a
// prefix over threads. Thresholds are found by bisection over the rule's key order (16 steps for bf16, 32 for fp32),
// each step one fixed-order block reduction: the same coin gives the same token on every run. Sums are fp32 where
// the host's are double, so a coin within rounding of a CDF boundary may pick the neighbouring token
// (tests/gpu/test_sampling.cu allows exactly that).
//
// Per sequence b the kernel reads the logits row b·rows_per_seq + (rows_per_seq > 1 ? len[b] − 1 : 0) (rows_per_seq
// 1: one row per sequence, as generation's prefill and decode step leave them), takes the coin coins[g·B + b] with
// g = len[b] − prompt_len[b] (the index of the token being chosen), and writes the token to next_tokens[b] (the next
// decode step's input) and tokens_out[g·B + b], then advances len[b] by one.
#pragma once

#include <climits>

#include "llmc/core/cuda_common.h"
#include "llmc/kernels/sampling/sampling_rule.h"

// A pick's outputs for sequence b (its length len_b before the pick): the token as its g-th new one (g = len_b −
// prompt_len[b], when 0 <= g < max_new), as the next step's input, and the length advanced by one. pick_tokens and
// the classifier's fused greedy pick (llmc/kernels/decode/decode_matvec.cuh) both end with it.
__device__ __forceinline__ void store_pick(int b, int chosen, int len_b, const int* prompt_len, int* len,
                                           int* next_tokens, int* tokens_out, int max_new, int B) {
    const int g = len_b - prompt_len[b];
    if (g >= 0 && g < max_new) tokens_out[(size_t)g * B + b] = chosen;
    next_tokens[b] = chosen;
    len[b] = len_b + 1;
}

namespace sampling_detail {

constexpr int kThreads = 1024, kWarps = kThreads / 32;

// The rule's key order (sampling_rule.h) for a logit of type T, and the logit of a key.
template <typename T> struct KeyOf;
template <> struct KeyOf<__nv_bfloat16> {
    static constexpr int kBits = 16;
    __device__ static uint32_t key(__nv_bfloat16 x) { return sampling_rule::key_of_bits16(__bfloat16_as_ushort(x)); }
    __device__ static float value(uint32_t k) {
        return __bfloat162float(__ushort_as_bfloat16((unsigned short)sampling_rule::bits16_of_key(k)));
    }
};
template <> struct KeyOf<float> {
    static constexpr int kBits = 32;
    __device__ static uint32_t key(float x) { return sampling_rule::key_of(x); }
    __device__ static float value(uint32_t k) { return __uint_as_float(sampling_rule::bits32_of_key(k)); }
};

// Fixed-order block reductions (xor trees within warps, then warp 0 over the warp results): bit-identical on
// every run. `scratch` holds kWarps values; every thread gets the result.
template <typename V, typename Op>
__device__ V block_reduce(V v, Op op, V* scratch) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    __syncthreads();  // scratch free (a previous reduction's readers are done)
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = scratch[lane];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
template <typename V> __device__ V block_sum(V v, V* scratch) {
    return block_reduce(v, [](V a, V b) { return a + b; }, scratch);
}

// Inclusive prefix over the lanes of a warp, in lane order.
template <typename V>
__device__ V warp_inclusive_scan(V v, int lane) {
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
        const V up = __shfl_up_sync(0xffffffffu, v, off);
        if (lane >= off) v = v + up;
    }
    return v;
}

// Exclusive prefix over threads in thread order (fixed order); *total = the sum over all threads.
template <typename V>
__device__ V block_exclusive_scan(V v, V* scratch, V* total) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const V incl = warp_inclusive_scan(v, lane);
    V excl = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0) excl = V(0);
    __syncthreads();
    if (lane == 31) scratch[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const V wincl = warp_inclusive_scan(scratch[lane], lane);
        V wexcl = __shfl_up_sync(0xffffffffu, wincl, 1);
        if (lane == 0) wexcl = V(0);
        __syncwarp();
        scratch[lane] = wexcl;
        if (lane == 31) scratch[kWarps] = wincl;
    }
    __syncthreads();
    *total = scratch[kWarps];
    return scratch[warp] + excl;
}

template <typename T>
struct PickArgs {
    const T* logits;
    size_t row_stride;  // elements between rows (the padded vocabulary)
    int rows_per_seq, B, V;
    PickParams p;
    const float* coins;      // (max_new, B), or null when greedy
    const int* prompt_len;   // (B)
    int* len;                // (B), advanced by one
    int* next_tokens;        // (B)
    int* tokens_out;         // (max_new, B), may be host-mapped memory
    int max_new;
    const PickParams* row_params;  // (B) each sequence's own rule (the server's rows are different requests), or null: p
    int* nonfinite;                // (B) set to 1 where the row holds a non-finite logit, 0 elsewhere; or null
};

template <typename T>
__global__ void __launch_bounds__(kThreads) pick_tokens_kernel(const PickArgs<T> a) {
    pdl_trigger_and_wait();  // launched as a programmatic dependent (pdl): all below reads the kernel before's output
    using K = KeyOf<T>;
    constexpr int kVec = 16 / sizeof(T);
    extern __shared__ __align__(16) uint8_t smem_raw[];
    T* row_s = reinterpret_cast<T*>(smem_raw);  // the row, only when sampling
    __shared__ int scratch_i[kWarps + 1];
    __shared__ float scratch_f[kWarps + 1];
    __shared__ unsigned long long scratch_ka[kWarps];

    const int b = blockIdx.x, tid = threadIdx.x, V = a.V;
    const int len_b = a.len[b];
    const T* row = a.logits + ((size_t)b * a.rows_per_seq + (a.rows_per_seq > 1 ? len_b - 1 : 0)) * a.row_stride;
    const PickParams p = a.row_params ? a.row_params[b] : a.p;
    const bool greedy = p.greedy();

    // pass over the row in 16-byte vectors: the largest key (lowest id), and the row into shared memory to sample
    const int n_vec = (V + kVec - 1) / kVec;
    unsigned long long best = sampling_rule::rank_floor();
    int bad = 0;
    for (int j = tid; j < n_vec; j += kThreads) {
        const uint4 raw = reinterpret_cast<const uint4*>(row)[j];
        const T* e = reinterpret_cast<const T*>(&raw);
        if (!greedy) reinterpret_cast<uint4*>(row_s)[j] = raw;
#pragma unroll
        for (int x = 0; x < kVec; x++) {
            const int id = j * kVec + x;
            if (id < V) {
                best = max(best, sampling_rule::rank(K::key(e[x]), id));
                bad |= !isfinite(to_float(e[x]));
            }
        }
    }
    best = block_reduce(best, [](unsigned long long u, unsigned long long v) { return max(u, v); }, scratch_ka);
    if (a.nonfinite) {
        bad = block_reduce(bad, [](int u, int v) { return u | v; }, scratch_i);
        if (tid == 0) a.nonfinite[b] = bad;
    }
    const uint32_t best_key = (uint32_t)(best >> 32);
    int chosen = sampling_rule::rank_id(best);

    if (!greedy) {
        __syncthreads();  // row_s complete
        const int chunk = (V + kThreads - 1) / kThreads;
        const int i0 = min(V, tid * chunk), i1 = min(V, i0 + chunk);
        const float max_v = K::value(best_key), inv_t = 1.f / p.temperature;
        auto weight = [&](int i) { return sampling_rule::weight(to_float(row_s[i]), max_v, inv_t); };
        auto count_ge = [&](uint32_t k) {
            int n = 0;
            for (int i = i0; i < i1; i++) n += K::key(row_s[i]) >= k;
            return block_sum(n, scratch_i);
        };
        // kept(i): key > tau, or key == tau and among the first `ties` such ids (tie_base: those before this chunk)
        uint32_t tau = 0;
        int ties = INT_MAX, tie_base = 0;
        auto set_tie_base = [&]() {
            int n = 0, total;
            for (int i = i0; i < i1; i++) n += K::key(row_s[i]) == tau;
            tie_base = block_exclusive_scan(n, scratch_i, &total);
        };
        auto for_kept = [&](auto&& f) {  // f(i) for every kept id of this thread's chunk, in id order
            int rank = tie_base;
            for (int i = i0; i < i1; i++) {
                const uint32_t k = K::key(row_s[i]);
                if (k > tau || (k == tau && rank++ < ties)) f(i);
            }
        };
        // the largest key held by at least `count` ids (top-k), or whose keys at or above carry `mass` (top-p)
        auto bisect = [&](uint32_t lo, uint32_t hi, auto&& enough) {
            while (lo < hi) {
                const uint32_t mid = lo + (hi - lo + 1) / 2;
                if (enough(mid)) lo = mid; else hi = mid - 1;
            }
            return lo;
        };
        if (p.cuts_top_k(V)) {
            tau = bisect(0u, best_key, [&](uint32_t k) { return count_ge(k) >= p.top_k; });
            ties = p.top_k - (tau < best_key ? count_ge(tau + 1) : 0);
            set_tie_base();
        }
        if (p.cuts_top_p()) {
            float kept = 0.f;
            for_kept([&](int i) { kept += weight(i); });
            const float target = sampling_rule::nucleus_target(p.top_p, block_sum(kept, scratch_f));
            auto mass_ge = [&](uint32_t k) {  // k > tau: every id with key >= k is kept
                float m = 0.f;
                for (int i = i0; i < i1; i++)
                    if (K::key(row_s[i]) >= k) m += weight(i);
                return block_sum(m, scratch_f);
            };
            const uint32_t tau_p = bisect(tau, best_key, [&](uint32_t k) { return k == tau || mass_ge(k) >= target; });
            const float above = tau_p < best_key ? mass_ge(tau_p + 1) : 0.f;
            const float w_tau = sampling_rule::weight(K::value(tau_p), max_v, inv_t);
            const int need = max(1, (int)ceilf((target - above) / w_tau));  // ties at tau_p, by lower id
            if (tau_p == tau) {
                ties = min(ties, need);
            } else {
                tau = tau_p;
                ties = need;
                set_tie_base();
            }
        }
        // inverse CDF in id order: the thread whose prefix the target falls in walks its chunk
        float mine = 0.f, total;
        for_kept([&](int i) { mine += weight(i); });
        const float prefix = block_exclusive_scan(mine, scratch_f, &total);
        const int g = len_b - a.prompt_len[b];
        const float target = sampling_rule::cdf_target(a.coins[(size_t)min(max(g, 0), a.max_new - 1) * a.B + b], total);
        const int owner =
            block_reduce(mine > 0.f && prefix <= target ? tid : -1, [](int u, int v) { return max(u, v); }, scratch_i);
        int pick = -1;
        if (tid == owner) {
            sampling_rule::CdfWalk<float> walk(target, prefix);
            for_kept([&](int i) { walk.step(i, weight(i)); });
            pick = walk.result();
        }
        chosen = block_reduce(pick, [](int u, int v) { return max(u, v); }, scratch_i);
    }
    if (tid == 0) {
        store_pick(b, chosen, len_b, a.prompt_len, a.len, a.next_tokens, a.tokens_out, a.max_new, a.B);
        // rows by their own rules (a server's): the next input is a valid id whatever came, so the next step can
        // be queued before the host has seen this one (a non-finite row's pick means nothing; the host ends it)
        if (a.nonfinite && (chosen < 0 || chosen >= V)) a.next_tokens[b] = 0;
    }
}

}  // namespace sampling_detail

// Shared memory the sampling path needs for a row of V logits of type T (greedy needs none).
template <typename T>
inline size_t pick_tokens_smem_bytes(int V) {
    return ((size_t)V + 15) / 16 * 16 * sizeof(T);
}

namespace sampling_detail {

// Checks the launch, sets the shared memory the sampling path needs (sampling: some row samples) and launches.
template <typename T>
inline void launch_pick(const PickArgs<T>& a, bool sampling, cudaStream_t stream, bool pdl) {
    const size_t smem = sampling ? pick_tokens_smem_bytes<T>(a.V) : 0;
    constexpr size_t kVec = 16 / sizeof(T);  // the kernel reads whole 16-byte vectors
    if (a.row_stride % kVec != 0 || a.row_stride < (a.V + kVec - 1) / kVec * kVec || a.max_new < 1 ||
        (sampling && a.coins == nullptr)) {
        fprintf(stderr, "error: pick_tokens: row stride %zu for V %d, max_new %d, %s\n", a.row_stride, a.V, a.max_new,
                sampling && !a.coins ? "sampling without coins" : "bad shape");
        exit(EXIT_FAILURE);
    }
    if (smem > 0) {
        int limit = 0, dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        if (smem > (size_t)limit) {
            fprintf(stderr, "error: pick_tokens: a row of %d logits needs %zu bytes of shared memory (%d here)\n", a.V,
                    smem, limit);
            exit(EXIT_FAILURE);
        }
        cudaCheck(cudaFuncSetAttribute(pick_tokens_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    }
    PdlLaunch launch(dim3(a.B), dim3(kThreads), smem, stream, pdl);
    cudaCheck(cudaLaunchKernelEx(&launch.config, pick_tokens_kernel<T>, a));
}

}  // namespace sampling_detail

// One token per sequence from its logits row (see the top of this file); coins may be null when greedy. pdl: launched
// as a programmatic dependent of the kernel before it.
template <typename T>
inline void pick_tokens(const T* logits, size_t row_stride, int rows_per_seq, int B, int V, const PickParams& p,
                        const float* coins, const int* prompt_len, int* len, int* next_tokens, int* tokens_out,
                        int max_new, cudaStream_t stream, bool pdl = false) {
    if (const char* problem = pick_params_problem(p)) {
        fprintf(stderr, "error: pick_tokens: %s (temperature %g, top_p %g)\n", problem, p.temperature, p.top_p);
        exit(EXIT_FAILURE);
    }
    const sampling_detail::PickArgs<T> a{logits, row_stride, rows_per_seq, B,       V,       p,
                                         coins,  prompt_len, len,          next_tokens, tokens_out, max_new,
                                         nullptr, nullptr};
    sampling_detail::launch_pick(a, !p.greedy(), stream, pdl);
}

// One token per row of logits (B rows, row_stride apart), each row by its own rule row_params[b] (device memory;
// every one already checked by pick_params_problem on the host) and coin coins[b]: the server's decode step, whose
// rows belong to different requests. tokens[b] gets the pick; nonfinite[b] 1 where the row holds a non-finite logit
// (its pick means nothing); next_tokens[b] (null: none) the pick too, or 0 where it is not a valid id: the next
// decode step's inputs. tokens and nonfinite may be mapped host memory. sampling: some row is not greedy (those rows
// need the row in shared memory). scratch: B ints of device memory, any values (the kernel's length bookkeeping:
// every row's length and prompt length are the same entry, so each pick is its row's new token 0). pdl: launched as
// a programmatic dependent of the kernel before it.
template <typename T>
inline void pick_tokens_per_row(const T* logits, size_t row_stride, int B, int V, const PickParams* row_params,
                                bool sampling, const float* coins, int* tokens, int* nonfinite, int* scratch,
                                cudaStream_t stream, int* next_tokens = nullptr, bool pdl = false) {
    int* next = next_tokens ? next_tokens : scratch;  // (none: written over the bookkeeping of rows it has read)
    const sampling_detail::PickArgs<T> a{logits, row_stride, 1,       B,    V,      PickParams{},
                                         coins,  scratch,    scratch, next, tokens, 1,
                                         row_params, nonfinite};
    sampling_detail::launch_pick(a, sampling, stream, pdl);
}
