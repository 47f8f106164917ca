// The layers' buckets moved by the copy engines (docs/MULTI_GPU.md, "Copy engines"). On one host the ranks map each
// other's buffers (CUDA IPC); a bucket travels as cudaMemcpyAsync calls between GPUs, which the copy engines carry over
// NVLink without an SM, and flags written and waited for by stream memory operations (cuStreamWriteValue64 /
// cuStreamWaitValue64, no SM either) say when a peer's data has landed and when a receive slot is free again. Only the
// sum needs SMs: one short kernel per bucket on the rank that owns the slice. NCCL's kernels hold SMs for as long as a
// collective runs, and the persistent GEMMs of the backward they overlap wait for those SMs; these do not. The sum
// runs on the compute stream, a bucket after its copies were queued (their data has long arrived): on a stream of
// its own it would share the SMs with the GEMMs and slow them as NCCL does (measured: docs/MULTI_GPU.md).
//
//   send_bucket(k): every rank copies the part of bucket k each peer owns (zero_owned_segments: the ZeRO shard) into
//     that peer's receive slot for it and signals it. Each peer has a lane (a stream) of its own, so the copies to the
//     N-1 peers run at once on several copy engines.
//   reduce_bucket(k, stream): the owner waits for the N-1 arrivals and sums its own values and the received ones in
//     rank order, in fp32 with one rounding, into its places of the flat gradients; then tells every sender the slot
//     is free.
//   send_slices / reduce_slices (-z 2): the bucket lies in a slot in its staging layout, so each peer's slice goes
//     whole, and the owner's sum goes into the gradient shard (copied on a step's first micro-step, added on the
//     others: fp32, one rounding).
//   gather_owned(k, buffer): every rank copies its owned places of bucket k in `buffer` (the updated parameters with
//     -z 1, the averaged gradients with -z 0) to the same places of every peer's `buffer`, then signals; wait_gathered
//     queues the wait for every peer's signal.
// Every rank issues the same operations in the same order, so one counter per kind of operation names an operation
// on every rank; the flags hold the number of operations done (64-bit, never wrapping).
#pragma once

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/core/cuda_common.h"
#include "llmc/distributed/multi_gpu.cuh"
#include "llmc/distributed/zero_plan.h"

namespace peer_copy_detail {

// For each segment g (blockIdx.y): dst[i] = (add ? dst[i] : 0) + the mean over ranks p of p's value, own[i] for
// p == self and recv[p * stride + i] otherwise, where dst, own and recv are the segment's places in dst_base, own_base
// and the receive slot; summed in rank order in fp32, one rounding. -z 0 / 1: dst = own, the rank's places of the
// flat gradients; -z 2: one segment, the rank's slice of the slot into the gradient shard.
constexpr int kMaxSegments = 16;
struct Segments {
    int count;
    size_t own[kMaxSegments], dst[kMaxSegments];  // in own_base and dst_base
    size_t relative[kMaxSegments];                // in the sender's part of the receive slot
    size_t elements[kMaxSegments];
};
// V elements per access: 16 bytes when every offset, count and the stride are multiples of V (GPT-2's shapes), else 1.
template <int V>
struct alignas(V * sizeof(floatX)) Pack {
    floatX v[V];
};
template <int V>
__global__ void __launch_bounds__(256) mean_kernel(floatX* dst_base, const floatX* own_base, const floatX* slot,
                                                   size_t stride, int world, int self, bool add, Segments s) {
    const int g = blockIdx.y;
    Pack<V>* dst = reinterpret_cast<Pack<V>*>(dst_base + s.dst[g]);
    const Pack<V>* own = reinterpret_cast<const Pack<V>*>(own_base + s.own[g]);
    const Pack<V>* recv = reinterpret_cast<const Pack<V>*>(slot + s.relative[g]);
    const size_t packs = s.elements[g] / V, pack_stride = stride / V;
    const float inv_n = 1.0f / (float)world;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < packs; i += (size_t)gridDim.x * blockDim.x) {
        float sum[V];
        for (int j = 0; j < V; j++) sum[j] = 0.0f;
        for (int p = 0; p < world; p++) {
            const Pack<V> x = p == self ? own[i] : recv[(size_t)p * pack_stride + i];
            for (int j = 0; j < V; j++) sum[j] += (float)x.v[j];
        }
        Pack<V> out;
        if (add) out = dst[i];
        for (int j = 0; j < V; j++) out.v[j] = (floatX)((add ? (float)out.v[j] : 0.0f) + sum[j] * inv_n);
        dst[i] = out;
    }
}

// The driver's stream memory operations (libcuda, found at run time: the programs link the runtime only).
using WriteValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
using WaitValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
using DeviceGetAttribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);
// null when the driver lacks it (the ranks then agree on NCCL)
template <typename F>
inline F driver_entry(const char* name) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr, "note: the CUDA driver has no %s: NCCL moves every bucket\n", name);
        return nullptr;
    }
    return reinterpret_cast<F>(fn);
}
inline void driver_check(CUresult r, const char* what, const char* file, int line) {
    if (r != CUDA_SUCCESS) library_call_failed("CUDA driver", what, (int)r, file, line);
}

// What a rank tells the others at start-up: where its host is, and handles to the buffers they write into.
struct Share {
    char host[64];
    cudaIpcMemHandle_t handle[3];  // receive ring, flags, the gathered buffer (the model's parameters or gradients)
    uint64_t offset[3];            // of the shared pointer in the allocation the handle names
    bool ready;                    // the handles were made
};

}  // namespace peer_copy_detail

struct PeerCopy {
    static constexpr int kSlots = 2;  // receive slots per sender: a sender waits for the owner's sum two buckets back

    bool active = false;
    int rank = 0, world = 1;
    std::vector<cudaStream_t> lanes;  // per peer: the copies to it and their signals (none for this rank)
    std::vector<cudaEvent_t> lane_done;
    cudaStream_t recv = nullptr;      // waits for gathers
    std::vector<std::vector<std::vector<ZeroSegment>>> owned;  // [bucket][rank]: what rank owns, bucket-relative
    size_t slot_elements = 0;         // one sender's part of a slot: the largest layer bucket's shard
    floatX* ring = nullptr;           // kSlots x world x slot_elements (the own part unused)
    uint64_t* flags = nullptr;        // arrived[world], freed[world], gathered[world]
    std::vector<floatX*> peer_ring, peer_buffer;
    std::vector<uint64_t*> peer_flags;
    floatX* buffer = nullptr;         // the local buffer gather_owned fills on the peers
    uint64_t sent_ops = 0, reduced_ops = 0, gathered_ops = 0;

    // Maps the peers' buffers; every rank returns the same answer (false: some rank could not, so nobody uses copy
    // engines and NCCL moves everything). gathered_buffer: what gather_owned writes on the peers (params or grads).
    bool init(MultiGpu& mg, const std::vector<GradBucket>& plan, floatX* gathered_buffer) {
        using namespace peer_copy_detail;
        rank = mg.rank, world = mg.world, buffer = gathered_buffer;
        owned.assign(plan.size(), std::vector<std::vector<ZeroSegment>>((size_t)world));
        for (int q = 0; q < world; q++) {
            size_t bucket_start = 0, k = 0;
            std::vector<ZeroSegment> all = zero_owned_segments(plan, world, q);
            for (const ZeroSegment& g : all) {
                while (g.shard_offset >= bucket_start + plan[k].shard_elements(world))
                    bucket_start += plan[k].shard_elements(world), k++;
                ZeroSegment r = g;
                r.shard_offset -= bucket_start;
                owned[k][(size_t)q].push_back(r);
            }
        }
        for (size_t k = 0; k < plan.size(); k++) {
            if (plan[k].first_layer < 0) continue;
            slot_elements = std::max(slot_elements, plan[k].shard_elements(world));
            for (int q = 0; q < world; q++)
                if (owned[k][(size_t)q].size() > (size_t)kMaxSegments) {
                    fprintf(stderr, "error: PeerCopy: bucket %zu has %zu segments on rank %d (at most %d)\n", k,
                            owned[k][(size_t)q].size(), q, kMaxSegments);
                    exit(EXIT_FAILURE);
                }
        }
        // What fails on one rank only makes it say no below: every rank reaches the same all-gather and agreement.
        write_value = driver_entry<WriteValue64>("cuStreamWriteValue64");
        wait_value = driver_entry<WaitValue64>("cuStreamWaitValue64");
        auto attribute = driver_entry<DeviceGetAttribute>("cuDeviceGetAttribute");
        auto get_range = driver_entry<GetAddressRange>("cuMemGetAddressRange");
        bool ok = write_value && wait_value && attribute && get_range;
        int device = 0, has64 = 0, flush = 0;
        cudaCheck(cudaGetDevice(&device));
        if (ok && (attribute(&has64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, device) != CUDA_SUCCESS || !has64)) {
            fprintf(stderr, "note: rank %d: no 64-bit stream memory operations: NCCL moves every bucket\n", rank);
            ok = false;
        }
        if (ok && attribute(&flush, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, device) != CUDA_SUCCESS) flush = 0;
        // Without the flush (H100/H200 report none) the data a peer's copy engine wrote is seen by work after the wait
        // because the peer's flag write comes after a memory barrier that waits for those writes; over NVLink, as on
        // these machines, that holds. Hosts whose GPUs talk over PCIe only are not what this was measured on.
        wait_flags = CU_STREAM_WAIT_VALUE_GEQ | (flush ? CU_STREAM_WAIT_VALUE_FLUSH : 0);

        cudaCheck(cudaMalloc(&ring, (size_t)kSlots * world * slot_elements * sizeof(floatX)));
        cudaCheck(cudaMalloc(&flags, 3 * (size_t)world * sizeof(uint64_t)));
        cudaCheck(cudaMemset(flags, 0, 3 * (size_t)world * sizeof(uint64_t)));
        cudaCheck(cudaDeviceSynchronize());

        Share me{};
        gethostname(me.host, sizeof(me.host) - 1);
        void* shared[3] = {ring, flags, buffer};
        for (int i = 0; i < 3 && ok; i++) {
            CUdeviceptr base = 0;
            size_t size = 0;
            if (get_range(&base, &size, (CUdeviceptr)shared[i]) != CUDA_SUCCESS ||
                cudaIpcGetMemHandle(&me.handle[i], (void*)base) != cudaSuccess) {
                (void)cudaGetLastError();
                fprintf(stderr, "note: rank %d cannot export its memory: NCCL moves every bucket\n", rank);
                ok = false;
            }
            me.offset[i] = (uint64_t)((CUdeviceptr)shared[i] - base);
        }
        me.ready = ok;
        const std::vector<Share> all = multi_gpu_all_gather_bytes(mg, me);
        bool one_host = true;
        for (const Share& s : all) ok = ok && s.ready, one_host = one_host && strncmp(s.host, me.host, sizeof(me.host)) == 0;
        if (!one_host && rank == 0) fprintf(stderr, "note: the ranks are on several hosts: NCCL moves every bucket\n");
        ok = ok && one_host;
        peer_ring.assign((size_t)world, nullptr), peer_flags.assign((size_t)world, nullptr);
        peer_buffer.assign((size_t)world, nullptr);
        for (int p = 0; p < world && ok; p++) {
            if (p == rank) continue;
            void* base[3] = {nullptr, nullptr, nullptr};
            for (int i = 0; i < 3 && ok; i++) {
                for (int j = 0; j < i; j++)  // one allocation shared twice (the buffer beside another): opened once
                    if (memcmp(&all[(size_t)p].handle[j], &all[(size_t)p].handle[i], sizeof(cudaIpcMemHandle_t)) == 0)
                        base[i] = base[j];
                if (base[i]) continue;
                const cudaError_t e = cudaIpcOpenMemHandle(&base[i], all[(size_t)p].handle[i],
                                                           cudaIpcMemLazyEnablePeerAccess);
                if (e != cudaSuccess) {
                    fprintf(stderr, "note: rank %d cannot map rank %d's memory (%s): NCCL moves every bucket\n", rank, p,
                            cudaGetErrorString(e));
                    (void)cudaGetLastError();
                    ok = false;
                } else {
                    opened.push_back(base[i]);
                }
            }
            if (!ok) break;
            peer_ring[(size_t)p] = (floatX*)((char*)base[0] + all[(size_t)p].offset[0]);
            peer_flags[(size_t)p] = (uint64_t*)((char*)base[1] + all[(size_t)p].offset[1]);
            peer_buffer[(size_t)p] = (floatX*)((char*)base[2] + all[(size_t)p].offset[2]);
        }
        active = multi_gpu_sum(mg, ok ? 0.0f : 1.0f) == 0.0f;  // also a barrier: every flag is zero before any use
        if (!active) {
            free(mg);
            return false;
        }
        int least = 0, greatest = 0;
        cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        lanes.assign((size_t)world, nullptr), lane_done.assign((size_t)world, nullptr);
        for (int q = 0; q < world; q++) {
            if (q == rank) continue;
            cudaCheck(cudaStreamCreateWithPriority(&lanes[(size_t)q], cudaStreamNonBlocking, greatest));
            cudaCheck(cudaEventCreateWithFlags(&lane_done[(size_t)q], cudaEventDisableTiming));
        }
        cudaCheck(cudaStreamCreateWithPriority(&recv, cudaStreamNonBlocking, greatest));
        return true;
    }

    // Every lane waits for `event` (what the next copies read is queued before it).
    void lanes_wait(cudaEvent_t event) {
        for (int q = 0; q < world; q++)
            if (q != rank) cudaCheck(cudaStreamWaitEvent(lanes[(size_t)q], event, 0));
    }
    // `stream` waits for everything queued on the lanes so far.
    void join(cudaStream_t stream) {
        for (int q = 0; q < world; q++) {
            if (q == rank) continue;
            cudaCheck(cudaEventRecord(lane_done[(size_t)q], lanes[(size_t)q]));
            cudaCheck(cudaStreamWaitEvent(stream, lane_done[(size_t)q], 0));
        }
    }

    // Bucket k's gradients to the peers that own them (make the lanes wait for their producer first: lanes_wait).
    void send_bucket(int k, const floatX* grads) {
        send_each([&](int q, floatX* to, cudaStream_t lane) {
            for (const ZeroSegment& g : owned[(size_t)k][(size_t)q])
                cudaCheck(cudaMemcpyAsync(to + g.shard_offset, grads + g.flat_offset, g.count * sizeof(floatX),
                                          cudaMemcpyDeviceToDevice, lane));
        });
    }

    // The mean over the ranks of the rank's own slice of bucket k (sent by every rank: send_bucket), into its places
    // of grads, on `stream`; buckets in the order they were sent.
    void reduce_bucket(int k, floatX* grads, cudaStream_t stream) {
        using namespace peer_copy_detail;
        const std::vector<ZeroSegment>& mine = owned[(size_t)k][(size_t)rank];
        Segments s{};
        s.count = (int)mine.size();
        for (int g = 0; g < s.count; g++) {
            s.own[g] = s.dst[g] = mine[(size_t)g].flat_offset, s.relative[g] = mine[(size_t)g].shard_offset;
            s.elements[g] = mine[(size_t)g].count;
        }
        reduce_into(s, grads, grads, false, stream);
    }

    // -z 2: a layer bucket lies in `area` in its staging layout (its slot), rank q's slice at area[q * per, + per):
    // each peer's slice to it, whole (lanes_wait for the backward first).
    void send_slices(const floatX* area, size_t per) {
        send_each([&](int q, floatX* to, cudaStream_t lane) {
            cudaCheck(cudaMemcpyAsync(to, area + (size_t)q * per, per * sizeof(floatX), cudaMemcpyDeviceToDevice, lane));
        });
    }
    // -z 2: the mean over the ranks of this rank's slice of the bucket send_slices sent (in the same order), into dst
    // (copied, or added to what dst holds: a step's later micro-steps), on `stream`.
    void reduce_slices(const floatX* area, size_t per, floatX* dst, bool add, cudaStream_t stream) {
        peer_copy_detail::Segments s{};
        s.count = 1, s.elements[0] = per;
        reduce_into(s, dst, area + (size_t)rank * per, add, stream);
    }
    // Per lane, an event after what is queued on it so far (events: one per rank); wait_lanes: `stream` waits for them.
    void record_lanes(std::vector<cudaEvent_t>& events) {
        for (int q = 0; q < world; q++)
            if (q != rank) cudaCheck(cudaEventRecord(events[(size_t)q], lanes[(size_t)q]));
    }
    void wait_lanes(cudaStream_t stream, const std::vector<cudaEvent_t>& events) {
        for (int q = 0; q < world; q++)
            if (q != rank) cudaCheck(cudaStreamWaitEvent(stream, events[(size_t)q], 0));
    }

    // The rank's owned places of bucket k in `buffer` to every peer's, on the lanes (lanes_wait for what produced them).
    void gather_owned(int k) {
        const uint64_t op = gathered_ops++;
        for (int i = 1; i < world; i++) {
            const int q = (rank + i) % world;
            cudaStream_t stream = lanes[(size_t)q];
            for (const ZeroSegment& g : owned[(size_t)k][(size_t)rank])
                cudaCheck(cudaMemcpyAsync(peer_buffer[(size_t)q] + g.flat_offset, buffer + g.flat_offset,
                                          g.count * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
            signal(stream, peer_flags[(size_t)q] + 2 * world + rank, op + 1);
        }
    }
    // `stream` waits until every peer has gathered everything it gathered so far.
    void wait_gathered(cudaStream_t stream) {
        for (int p = 0; p < world; p++)
            if (p != rank) wait(stream, &flags[2 * world + p], gathered_ops);
    }

    // Every rank calls it: once all are here no peer writes into this rank's memory any more (the last kSlots
    // "freed" signals are never waited for), then the mappings go.
    void free(MultiGpu& mg) {
        for (size_t q = 0; q < lanes.size(); q++) {
            if (!lanes[q]) continue;
            cudaCheck(cudaStreamSynchronize(lanes[q]));
            cudaCheck(cudaStreamDestroy(lanes[q]));
            cudaCheck(cudaEventDestroy(lane_done[q]));
        }
        lanes.clear(), lane_done.clear();
        if (recv) cudaCheck(cudaStreamSynchronize(recv)), cudaCheck(cudaStreamDestroy(recv));
        multi_gpu_barrier(mg);
        for (void* p : opened) cudaCheck(cudaIpcCloseMemHandle(p));
        opened.clear();
        multi_gpu_barrier(mg);  // every peer has unmapped this rank's memory before it is freed (here or by its owner)
        if (ring) cudaCheck(cudaFree(ring));
        if (flags) cudaCheck(cudaFree(flags));
        recv = nullptr, ring = nullptr, flags = nullptr, active = false;
    }

  private:
    peer_copy_detail::WriteValue64 write_value = nullptr;
    peer_copy_detail::WaitValue64 wait_value = nullptr;
    unsigned wait_flags = 0;
    std::vector<void*> opened;

    static int q_arrived(int sender) { return sender; }
    // One send operation: for each peer q, on its lane, once q has summed what its slot held kSlots operations ago,
    // copy_to(q, this rank's part of q's slot, lane) queues the copies; then q's "arrived" flag.
    template <typename CopyTo>
    void send_each(CopyTo copy_to) {
        const uint64_t op = sent_ops++;
        const size_t slot = (size_t)(op % kSlots) * world * slot_elements;
        for (int i = 1; i < world; i++) {
            const int q = (rank + i) % world;
            cudaStream_t lane = lanes[(size_t)q];
            if (op >= (uint64_t)kSlots) wait(lane, &flags[world + q], op - kSlots + 1);
            copy_to(q, peer_ring[(size_t)q] + slot + (size_t)rank * slot_elements, lane);
            signal(lane, peer_flags[(size_t)q] + q_arrived(rank), op + 1);
        }
    }
    // One sum operation, in send order: the N-1 arrivals, the sum, then each sender's "freed" flag.
    void reduce_into(const peer_copy_detail::Segments& s, floatX* dst, const floatX* own, bool add, cudaStream_t stream) {
        const uint64_t op = reduced_ops++;
        const size_t slot = (size_t)(op % kSlots) * world * slot_elements;
        for (int p = 0; p < world; p++)
            if (p != rank) wait(stream, &flags[q_arrived(p)], op + 1);
        launch_mean(s, dst, own, ring + slot, add, stream);
        for (int p = 0; p < world; p++)
            if (p != rank) signal(stream, peer_flags[(size_t)p] + world + rank, op + 1);  // p's freed[rank]
    }
    // mean_kernel over the segments, 16-byte packs where every place allows them
    void launch_mean(const peer_copy_detail::Segments& s, floatX* dst, const floatX* own, const floatX* slot, bool add,
                     cudaStream_t stream) const {
        using namespace peer_copy_detail;
        if (s.count == 0) return;
        constexpr int V = 16 / sizeof(floatX);
        bool packed = slot_elements % V == 0 && ((uintptr_t)dst | (uintptr_t)own | (uintptr_t)slot) % 16 == 0;
        size_t most = 0;
        for (int g = 0; g < s.count; g++) {
            packed = packed && (s.own[g] | s.dst[g] | s.relative[g] | s.elements[g]) % V == 0;
            most = std::max(most, s.elements[g]);
        }
        const unsigned blocks =
            (unsigned)std::max<size_t>(1, std::min<size_t>(1024 / s.count, (most / (packed ? V : 1) + 255) / 256));
        const dim3 grid(blocks, (unsigned)s.count);
        if (packed) mean_kernel<V><<<grid, 256, 0, stream>>>(dst, own, slot, slot_elements, world, rank, add, s);
        else mean_kernel<1><<<grid, 256, 0, stream>>>(dst, own, slot, slot_elements, world, rank, add, s);
        cudaCheckLaunch();
    }
    // After everything queued on `stream` so far (the write's default memory barrier makes it visible first).
    void signal(cudaStream_t stream, uint64_t* at, uint64_t value) {
        peer_copy_detail::driver_check(write_value((CUstream)stream, (CUdeviceptr)at, value, CU_STREAM_WRITE_VALUE_DEFAULT),
                                       "cuStreamWriteValue64", __FILE__, __LINE__);
    }
    void wait(cudaStream_t stream, uint64_t* at, uint64_t value) {
        peer_copy_detail::driver_check(wait_value((CUstream)stream, (CUdeviceptr)at, value, wait_flags),
                                       "cuStreamWaitValue64", __FILE__, __LINE__);
    }
};
