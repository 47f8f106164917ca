// The exchange between data-parallel ranks, overlapped with the backward and the next forward (docs/MULTI_GPU.md).
// Buckets of consecutive layers (llmc/distributed/zero_plan.h) go to the communication stream (mg.stream) as soon as
// the backward has queued their gradients, ordered by events, so they travel while the layers below are still in
// their backward:
//   -z 0: the bucket's ranges are averaged in place, one NCCL group of all-reduces (no copies);
//   -z 1: the bucket is packed into the staging buffer, reduce-scattered in place, and the rank's averaged slice is
//         copied back to its places in the gradient buffer (llmc/distributed/zero.cuh); a bucket of one range that
//         splits evenly (wte) is reduce-scattered where it lies, with no copies.
// After the shard's update (-z 1) the buckets' parameters are all-gathered in the order the next forward uses them
// (wte, wpe and lnf first, then from layer 0 up; wte in place), and the forward waits for a bucket only where it
// first needs it.
//
// It is the model's listener: gpt2_backward(..., &x) sends the buckets (pass it only to the micro-step whose
// gradients are exchanged, the last), gpt2_forward(..., &x) waits for gathered parameters. The optimizer
// (llmc/training/adamw_optimizer.cuh) owns it and calls finish, gather_params and sync around its update.
#pragma once

#include <algorithm>
#include <vector>

#include "llmc/core/options.h"
#include "llmc/core/sm_budget.h"
#include "llmc/distributed/multi_gpu.cuh"
#include "llmc/distributed/zero.cuh"
#include "llmc/model/gpt2_backward.cuh"
#include "llmc/model/gpt2_forward.cuh"

struct GradExchange : ForwardListener, BackwardListener {
    MultiGpu* mg = nullptr;
    cudaStream_t compute = 0;           // the model's stream
    floatX* grads = nullptr;            // the model's flat gradients and parameters
    floatX* params = nullptr;
    floatX* staging = nullptr;          // -z 1: the largest bucket, padded
    bool sharded = false;               // -z 1
    std::vector<GradBucket> plan;
    std::vector<int> bucket_of_layer;   // layer l's bucket
    std::vector<cudaEvent_t> gathered;  // per bucket: its parameters are all-gathered (-z 1)
    cudaEvent_t to_comm = nullptr, to_compute = nullptr;
    bool gather_pending = false;        // a forward must wait for gathered[] before reading parameters

    // More than one rank: something to exchange (with one, nothing is, and no listener is passed).
    bool active() const { return mg && mg->world > 1; }

    void init(MultiGpu* m, cudaStream_t compute_stream, const std::vector<GradBucket>& buckets, int num_layers,
              floatX* grads_flat, floatX* params_flat, floatX* staging_buffer, bool shard) {
        mg = m, compute = compute_stream, plan = buckets, grads = grads_flat, params = params_flat;
        staging = staging_buffer, sharded = shard;
        bucket_of_layer.assign((size_t)num_layers, -1);
        for (size_t k = 0; k < plan.size(); k++)
            for (int l = plan[k].first_layer; l >= 0 && l <= plan[k].last_layer; l++) bucket_of_layer[(size_t)l] = (int)k;
        if (!active()) return;
        gathered.resize(plan.size());
        for (cudaEvent_t& e : gathered) cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&to_comm, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&to_compute, cudaEventDisableTiming));
    }

    // The backward has queued layer `layer`'s gradients (-1: wte, wpe, lnf, the last bucket): a bucket leaves once
    // its lowest layer is done.
    void gradients_ready(int layer) override {
        if (layer < 0) {  // the buckets outside the layers, wte last
            for (size_t k = 0; k < plan.size(); k++)
                if (plan[k].first_layer < 0) send_bucket((int)k);
            return;
        }
        const int k = bucket_of_layer[(size_t)layer];
        if (plan[(size_t)k].first_layer == layer) send_bucket(k);
    }

    // The forward is about to read layer `layer`'s parameters (-1: wte, wpe, lnf).
    void parameters_needed(int layer) override {
        if (!gather_pending) return;
        if (layer < 0) {
            for (size_t k = 0; k < plan.size(); k++)
                if (plan[k].first_layer < 0) cudaCheck(cudaStreamWaitEvent(compute, gathered[k], 0));
        } else {
            cudaCheck(cudaStreamWaitEvent(compute, gathered[(size_t)bucket_of_layer[(size_t)layer]], 0));
        }
        if (layer == (int)bucket_of_layer.size() - 1) gather_pending = false;  // every bucket waited for
        // the last bucket gathered (plan[0]) has landed: what is queued from here on runs with every SM
        if (!gather_pending || event_done(gathered[0])) reserve_sms(false);
    }

    // After the exchanging backward: the compute stream waits until every bucket's gradients are averaged.
    void finish() {
        if (!active()) return;
        stream_wait_for(compute, mg->stream, to_compute);
        reserve_sms(false);
    }

    // -z 1, after the shard's update: every rank's updated parameters to every rank, bucket by bucket in the order
    // the forward reads them; each bucket's event lets the next forward start on what has arrived.
    void gather_params() {
        if (!active() || !sharded) return;
        stream_wait_for(mg->stream, compute, to_comm);  // the update is queued before this point
        reserve_sms(true);
        for (int k = (int)plan.size() - 1; k >= 0; k--) {
            const GradBucket& b = plan[(size_t)k];
            if (b.in_place()) {
                multi_gpu_all_gather_in_place(*mg, params + b.ranges[0].offset, b.shard_elements(mg->world));
            } else {
                zero_pack_owned(b, params, staging, mg->world, mg->rank, mg->stream);
                multi_gpu_all_gather_in_place(*mg, staging, b.shard_elements(mg->world));
                zero_unpack(b, staging, params, mg->stream);
            }
            cudaCheck(cudaEventRecord(gathered[(size_t)k], mg->stream));
        }
        gather_pending = true;
    }

    // Before anything reads the parameters outside a training forward (checkpoints, samples, the end): the compute
    // stream waits for the exchange and the host for both.
    void sync() {
        if (!active()) return;
        stream_wait_for(compute, mg->stream, to_compute);
        cudaCheck(cudaStreamSynchronize(mg->stream));
        cudaCheck(cudaStreamSynchronize(compute));
        gather_pending = false;
        reserve_sms(false);
    }

    void free() {
        if (!active()) return;
        sync();
        for (cudaEvent_t e : gathered) cudaCheck(cudaEventDestroy(e));
        cudaCheck(cudaEventDestroy(to_comm));
        cudaCheck(cudaEventDestroy(to_compute));
        gathered.clear();
        mg = nullptr;
    }

  private:
    // While a collective may be in flight, persistent kernels leave LLMC_COMM_SMS SMs to NCCL's blocks
    // (llmc/core/sm_budget.h); off by default (-1).
    static void reserve_sms(bool on) { sm_reserved_for_comm() = on ? std::max(0, engine_options().comm_sms) : 0; }
    static bool event_done(cudaEvent_t e) {
        const cudaError_t r = cudaEventQuery(e);
        if (r == cudaErrorNotReady) return false;
        cudaCheck(r);
        return true;
    }

    void send_bucket(int k) {
        const GradBucket& b = plan[(size_t)k];
        reserve_sms(true);
        stream_wait_for(mg->stream, compute, to_comm);  // the bucket's gradients are queued before this point
        if (sharded && b.in_place()) {  // the rank's averaged slice lands where zero_unpack_owned would put it
            multi_gpu_reduce_scatter_avg_in_place(*mg, grads + b.ranges[0].offset, b.shard_elements(mg->world));
        } else if (sharded) {
            zero_pack_zero_padded(b, grads, staging, mg->stream);
            multi_gpu_reduce_scatter_avg_in_place(*mg, staging, b.shard_elements(mg->world));
            zero_unpack_owned(b, staging, grads, mg->world, mg->rank, mg->stream);
        } else {
            std::vector<DeviceRange> ranges;
            for (const FlatRange& r : b.ranges) ranges.push_back({grads + r.offset, r.count});
            multi_gpu_average(*mg, ranges);
        }
    }
};
