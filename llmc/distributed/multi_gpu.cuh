// Data-parallel training over several GPUs: one process per GPU, each with a full model copy and its own
// slice of every batch (llmc/data/dataloader.h partitions by rank); after backward the gradients are averaged
// with one NCCL all-reduce, so every rank applies the identical update and the copies stay equal.
//
// Start-up (rendezvous) exchanges NCCL's unique id from rank 0:
//   - built with USE_MPI and run under mpirun: rank and size from MPI, id by MPI_Bcast;
//   - otherwise ("-pi fs"): ranks and size from -pr/-pn, rank 0 writes the id into a file in a shared
//     directory (-pf) atomically, the others poll for it, and rank 0 removes it once everyone has
//     acknowledged (so a stale id never outlives its run; ids older than our own start are ignored).
// With several ranks, the ranks then swap their pid and machine, and a watchdog thread (llmc/distributed/rank_watchdog.h)
// stops this rank with one line when another is lost, instead of waiting in a collective forever.
// Built without MULTI_GPU (no NCCL), only one process is possible and every call is a no-op.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "llmc/core/cuda_common.h"
#include "llmc/core/options.h"
#include "llmc/core/utils.h"
#include "llmc/distributed/rank_watchdog.h"

#ifdef MULTI_GPU
#include <nccl.h>
#ifdef USE_MPI
// The C API is all we use; OpenMPI's C++ bindings do not compile warning-free (-Wcast-function-type).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif
#endif

#ifdef MULTI_GPU
inline void nccl_check(ncclResult_t r, const char* file, int line) {
    if (r != ncclSuccess) library_call_failed("NCCL", ncclGetErrorString(r), (int)r, file, line);
}
#define ncclCheck(r) nccl_check((r), __FILE__, __LINE__)
#endif

struct MultiGpu {
    int rank = 0;
    int world = 1;
    int local_device = 0;
    bool used_mpi = false;
    // Every collective runs on this one stream (created by multi_gpu_init, non-blocking, highest priority): the
    // ranks issue them in the same order on one queue, and the compute stream hands work over through events,
    // so the exchange can run under the backward and the next forward.
    cudaStream_t stream = nullptr;
    float* scalar = nullptr;  // device float for multi_gpu_reduce_scalar
    // The step's queued collectives (multi_gpu_sum_queued, multi_gpu_mean_begin): the device float the mean is
    // reduced in, the pinned host float it is copied to, the events that hand work between the streams.
    float* mean_scalar = nullptr;
    float* mean_host = nullptr;  // pinned: [0] the value sent, [1] the mean received
    cudaEvent_t to_comm = nullptr, from_comm = nullptr, mean_done = nullptr;
#ifdef MULTI_GPU
    ncclComm_t comm = nullptr;
#endif
    std::unique_ptr<RankWatchdog> watchdog;  // only with several ranks
};

// dst waits for everything queued on src so far (one event per pair, reused: a wait binds to the latest record).
inline void stream_wait_for(cudaStream_t dst, cudaStream_t src, cudaEvent_t event) {
    cudaCheck(cudaEventRecord(event, src));
    cudaCheck(cudaStreamWaitEvent(dst, event, 0));
}

struct MultiGpuOptions {
    int num_processes = 1, process_rank = 0, gpus_per_node = 8;
    std::string init_method = "mpi";   // mpi | fs
    std::string rendezvous_dir = "/tmp";
    double rank_timeout_s = 0;  // the watchdog's no-progress limit (LLMC_RANK_TIMEOUT_S; 0: off)
};

namespace multi_gpu_detail {

#ifdef MULTI_GPU
inline bool file_newer_than(const std::string& path, time_t since) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && st.st_mtime >= since;
}

// File rendezvous for the NCCL id (see the header comment). Gives up after five minutes.
inline ncclUniqueId exchange_id_via_files(const MultiGpuOptions& o, time_t started) {
    const std::string id_path = o.rendezvous_dir + "/llmc_nccl_id.bin";
    const std::string ack_prefix = o.rendezvous_dir + "/llmc_nccl_ack_";
    ncclUniqueId id;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    auto wait = [&](const char* what) {
        if (std::chrono::steady_clock::now() > deadline) {
            fprintf(stderr, "error: multi-GPU rendezvous in %s timed out waiting for %s\n", o.rendezvous_dir.c_str(), what);
            exit(EXIT_FAILURE);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    };
    if (o.process_rank == 0) {
        ncclCheck(ncclGetUniqueId(&id));
        AtomicOutputFile out(id_path);
        out.write(&id, sizeof(id));
        out.commit();
        for (int r = 1; r < o.num_processes; r++) {
            const std::string ack = ack_prefix + std::to_string(r);
            while (!file_newer_than(ack, started - 1)) wait("the other ranks' acknowledgements");
            remove(ack.c_str());
        }
        remove(id_path.c_str());
    } else {
        for (;;) {
            if (file_newer_than(id_path, started - 120)) {
                FILE* f = fopen(id_path.c_str(), "rb");
                const bool ok = f && fread(&id, 1, sizeof(id), f) == sizeof(id);
                if (f) fclose(f);
                if (ok) break;
            }
            wait("rank 0's NCCL id");
        }
        AtomicOutputFile ack(ack_prefix + std::to_string(o.process_rank));
        ack.write("ok", 2);
        ack.commit();
    }
    return id;
}

inline std::vector<RankPeer> exchange_peers(MultiGpu& m);  // below multi_gpu_all_gather_bytes

inline std::unique_ptr<RankWatchdog> start_watchdog(MultiGpu& m, double timeout_s) {
    RankWatchdogSettings s;
    s.rank = m.rank;
    s.peers = exchange_peers(m);
    s.timeout_s = timeout_s;
    s.poll_error = [comm = m.comm]() -> std::string {  // NCCL allows this from any thread, under running collectives
        ncclResult_t async = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(comm, &async);
        if (r != ncclSuccess) return std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(r);
        return async == ncclSuccess || async == ncclInProgress ? "" : ncclGetErrorString(async);
    };
    auto w = std::make_unique<RankWatchdog>(std::move(s));
    library_failure_hook = &RankWatchdog::explain_failure_of_running;  // a failed call names a lost peer
    w->start();
    return w;
}
#endif

}  // namespace multi_gpu_detail

// Every rank's `mine`, by rank (one NCCL all-gather of its bytes; start-up only: it waits for the stream).
template <typename T>
inline std::vector<T> multi_gpu_all_gather_bytes(MultiGpu& m, const T& mine) {
    static_assert(std::is_trivially_copyable<T>::value, "sent as bytes");
    std::vector<T> all((size_t)m.world);
    all[(size_t)m.rank] = mine;
#ifdef MULTI_GPU
    if (m.world > 1) {
        T* buf = nullptr;
        cudaCheck(cudaMalloc(&buf, sizeof(T) * all.size()));
        cudaCheck(cudaMemcpyAsync(buf + m.rank, &mine, sizeof(T), cudaMemcpyHostToDevice, m.stream));
        ncclCheck(ncclAllGather(buf + m.rank, buf, sizeof(T), ncclUint8, m.comm, m.stream));
        cudaCheck(cudaMemcpyAsync(all.data(), buf, sizeof(T) * all.size(), cudaMemcpyDeviceToHost, m.stream));
        cudaCheck(cudaStreamSynchronize(m.stream));
        cudaCheck(cudaFree(buf));
    }
#endif
    return all;
}

#ifdef MULTI_GPU
// Every rank's pid and machine, by rank.
inline std::vector<RankPeer> multi_gpu_detail::exchange_peers(MultiGpu& m) {
    return multi_gpu_all_gather_bytes(m, this_rank_peer());
}
#endif

// Chooses this process's GPU (cudaSetDevice) and connects to the other ranks. Call before any CUDA work.
inline MultiGpu multi_gpu_init(MultiGpuOptions o, int* argc_for_mpi = nullptr, char*** argv_for_mpi = nullptr) {
    MultiGpu m;
    auto make_stream = [&m]() {
        int least = 0, greatest = 0;
        cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        cudaCheck(cudaStreamCreateWithPriority(&m.stream, cudaStreamNonBlocking, greatest));
        cudaCheck(cudaMalloc(&m.scalar, sizeof(float)));
        cudaCheck(cudaMalloc(&m.mean_scalar, sizeof(float)));
        cudaCheck(cudaMallocHost(&m.mean_host, 2 * sizeof(float)));
        for (cudaEvent_t* e : {&m.to_comm, &m.from_comm, &m.mean_done})
            cudaCheck(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    };
#ifdef MULTI_GPU
    const time_t started = time(nullptr);
#ifdef USE_MPI
    if (o.init_method == "mpi") {
        MPI_Init(argc_for_mpi, argv_for_mpi);
        MPI_Comm_rank(MPI_COMM_WORLD, &o.process_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &o.num_processes);
        m.used_mpi = true;
    }
#endif
    m.rank = o.process_rank;
    m.world = o.num_processes;
    m.local_device = m.rank % o.gpus_per_node;
    cudaCheck(cudaSetDevice(m.local_device));
    make_stream();
    if (m.world > 1) {
        ncclUniqueId id;
#ifdef USE_MPI
        if (m.used_mpi) {
            if (m.rank == 0) ncclCheck(ncclGetUniqueId(&id));
            MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
        } else
#endif
        {
            if (o.init_method != "fs") {
                fprintf(stderr, "error: -pi mpi needs a build with MPI (mpicxx); use -pi fs -pf <shared dir>\n");
                exit(EXIT_FAILURE);
            }
            id = multi_gpu_detail::exchange_id_via_files(o, started);
        }
        // LLMC_COMM_SMS caps NCCL's blocks per collective: the SMs the persistent kernels leave free while a
        // collective is in flight (llmc/core/sm_budget.h)
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        const int comm_sms = engine_options().comm_sms;
        if (comm_sms > 0) config.minCTAs = config.maxCTAs = comm_sms;
        if (!engine_options().nccl_cta_policy.empty()) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
            config.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
#else
            fprintf(stderr, "error: LLMC_NCCL_CTA_POLICY needs NCCL 2.27 or later (built with %d)\n", NCCL_VERSION_CODE);
            exit(EXIT_FAILURE);
#endif
        }
        ncclCheck(ncclCommInitRankConfig(&m.comm, m.world, id, m.rank, &config));
        m.watchdog = multi_gpu_detail::start_watchdog(m, o.rank_timeout_s);
    }
#else
    (void)argc_for_mpi;
    (void)argv_for_mpi;
    if (o.num_processes > 1) {
        fprintf(stderr, "error: -pn %d: this build has no multi-GPU support (NCCL was not found at build time)\n",
                o.num_processes);
        exit(EXIT_FAILURE);
    }
    cudaCheck(cudaSetDevice(0));
    make_stream();
#endif
    return m;
}

// x[i] = mean over ranks of x[i] for each of the ranges (in place), as one NCCL group on m.stream. NCCL's
// reduction order is fixed for a fixed topology and world size, so runs stay deterministic.
struct DeviceRange {
    floatX* at;
    size_t count;
};
inline void multi_gpu_average(MultiGpu& m, const std::vector<DeviceRange>& ranges) {
#ifdef MULTI_GPU
    if (m.world == 1) return;
    const ncclDataType_t type = kFloatXIsBF16 ? ncclBfloat16 : ncclFloat;
    ncclCheck(ncclGroupStart());
    for (const DeviceRange& r : ranges) ncclCheck(ncclAllReduce(r.at, r.at, r.count, type, ncclAvg, m.comm, m.stream));
    ncclCheck(ncclGroupEnd());
#else
    (void)m; (void)ranges;
#endif
}

// ZeRO-1's exchanges (llmc/distributed/zero.cuh), in place on m.stream; buf holds world x count elements. reduce-scatter:
// this rank's slice (at rank x count) becomes the mean over ranks of that slice. all-gather: this rank's slice
// goes to every rank, the others' slices are filled in. With one rank both are no-ops.
inline void multi_gpu_reduce_scatter_avg_in_place(MultiGpu& m, floatX* buf, size_t count) {
#ifdef MULTI_GPU
    if (m.world == 1) return;
    const ncclDataType_t type = kFloatXIsBF16 ? ncclBfloat16 : ncclFloat;
    ncclCheck(ncclReduceScatter(buf, buf + (size_t)m.rank * count, count, type, ncclAvg, m.comm, m.stream));
#else
    (void)m; (void)buf; (void)count;
#endif
}
template <typename T>
inline void multi_gpu_all_gather_in_place(MultiGpu& m, T* buf, size_t count) {
#ifdef MULTI_GPU
    if (m.world == 1) return;
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "bf16 or fp32");
    const ncclDataType_t type = sizeof(T) == 2 ? ncclBfloat16 : ncclFloat;
    ncclCheck(ncclAllGather(buf + (size_t)m.rank * count, buf, count, type, m.comm, m.stream));
#else
    (void)m; (void)buf; (void)count;
#endif
}

// A host scalar summed or averaged over ranks (the same float on every rank).
enum class ScalarReduce { Sum, Mean };
inline float multi_gpu_reduce_scalar(MultiGpu& m, float value, ScalarReduce op) {
#ifdef MULTI_GPU
    if (m.world == 1) return value;
    // behind whatever m.stream still has queued (a pending exchange), like every collective
    cudaCheck(cudaMemcpyAsync(m.scalar, &value, sizeof(float), cudaMemcpyHostToDevice, m.stream));
    ncclCheck(ncclAllReduce(m.scalar, m.scalar, 1, ncclFloat, op == ScalarReduce::Sum ? ncclSum : ncclAvg, m.comm,
                            m.stream));
    cudaCheck(cudaMemcpyAsync(&value, m.scalar, sizeof(float), cudaMemcpyDeviceToHost, m.stream));
    cudaCheck(cudaStreamSynchronize(m.stream));
#else
    (void)m; (void)op;
#endif
    return value;
}
inline float multi_gpu_sum(MultiGpu& m, float value) { return multi_gpu_reduce_scalar(m, value, ScalarReduce::Sum); }
// Mean of a host scalar (a loss) over ranks.
inline float multi_gpu_mean(MultiGpu& m, float value) { return multi_gpu_reduce_scalar(m, value, ScalarReduce::Mean); }

// The step's scalars without a host wait (the host waits once, at the end of the step):
//   multi_gpu_sum_queued(m, values, n, compute);  // device floats summed over ranks, in place, between compute's
//                                                 // work queued before and after the call
//   multi_gpu_mean_begin(m, loss);                // a host float's mean over ranks, queued on m.stream (behind the
//                                                 // exchange already there, ahead of the all-gather queued later)
//   ... multi_gpu_mean_fetch(m, compute);         // compute copies it to pinned memory once it is reduced
//   cudaStreamSynchronize(compute);  float mean = multi_gpu_mean_value(m);
// The same floats as multi_gpu_sum / multi_gpu_mean give (the same collectives on the same values).
inline void multi_gpu_sum_queued(MultiGpu& m, float* values, int n, cudaStream_t compute) {
#ifdef MULTI_GPU
    if (m.world == 1) return;
    stream_wait_for(m.stream, compute, m.to_comm);
    ncclCheck(ncclAllReduce(values, values, (size_t)n, ncclFloat, ncclSum, m.comm, m.stream));
    stream_wait_for(compute, m.stream, m.from_comm);
#else
    (void)m; (void)values; (void)n; (void)compute;
#endif
}
inline void multi_gpu_mean_begin(MultiGpu& m, float value) {
#ifdef MULTI_GPU
    if (m.world > 1) {  // from pinned memory: a pageable source may make the copy wait for the stream
        m.mean_host[0] = value;
        cudaCheck(cudaMemcpyAsync(m.mean_scalar, &m.mean_host[0], sizeof(float), cudaMemcpyHostToDevice, m.stream));
        ncclCheck(ncclAllReduce(m.mean_scalar, m.mean_scalar, 1, ncclFloat, ncclAvg, m.comm, m.stream));
        cudaCheck(cudaEventRecord(m.mean_done, m.stream));
        return;
    }
#endif
    m.mean_host[1] = value;  // one rank: the mean is the value
}
inline void multi_gpu_mean_fetch(MultiGpu& m, cudaStream_t compute) {
    if (m.world == 1) return;
    cudaCheck(cudaStreamWaitEvent(compute, m.mean_done, 0));
    cudaCheck(cudaMemcpyAsync(&m.mean_host[1], m.mean_scalar, sizeof(float), cudaMemcpyDeviceToHost, compute));
}
inline float multi_gpu_mean_value(const MultiGpu& m) { return m.mean_host[1]; }

// All ranks wait here (e.g. before rank 0 writes a checkpoint the others will read).
inline void multi_gpu_barrier(MultiGpu& m) {
    if (m.world > 1) multi_gpu_mean(m, 0.0f);
}

// After each step (and the work between steps): the last step this rank completed, which the watchdog's line
// names, and progress for its no-progress limit. Nothing with one rank.
inline void multi_gpu_progress(MultiGpu& m, int completed_steps) {
    if (m.watchdog) m.watchdog->progress(completed_steps);
}

// With several ranks, a barrier first: no rank leaves (which its peers' watchdogs would take for a loss) while
// another still works; from there on a peer that leaves has finished (RankWatchdog::closing).
inline void multi_gpu_free(MultiGpu& m) {
    if (m.watchdog) {
        m.watchdog->closing();
        multi_gpu_barrier(m);
    }
    if (m.stream) {
        cudaCheck(cudaStreamSynchronize(m.stream));
        cudaCheck(cudaStreamDestroy(m.stream));
        cudaCheck(cudaFree(m.scalar));
        cudaCheck(cudaFree(m.mean_scalar));
        cudaCheck(cudaFreeHost(m.mean_host));
        for (cudaEvent_t e : {m.to_comm, m.from_comm, m.mean_done}) cudaCheck(cudaEventDestroy(e));
    }
    m.stream = nullptr, m.scalar = nullptr, m.mean_scalar = nullptr, m.mean_host = nullptr;
    m.to_comm = m.from_comm = m.mean_done = nullptr;
#ifdef MULTI_GPU
    if (m.watchdog) m.watchdog->forget_error_poll();
    if (m.comm) ncclCheck(ncclCommDestroy(m.comm));  // still watched: it may wait for a peer that is gone
    m.comm = nullptr;
    if (m.watchdog) m.watchdog->stop();
    m.watchdog.reset();
#ifdef USE_MPI
    if (m.used_mpi) MPI_Finalize();
#endif
#endif
    (void)m;
}
