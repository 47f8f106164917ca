// The exchange between data-parallel ranks, overlapped with the backward and the next forward (issue 15,
// docs/MULTI_GPU.md). Buckets of consecutive layers (llmc/distributed/zero_plan.h) go to the communication stream (mg.stream) as
// soon as the backward has queued their gradients, ordered by events, so they travel while the layers below are
// still in their backward:
//   -z 0: the bucket's ranges are averaged in place, one NCCL group of all-reduces (no copies);
//   -z 1: the bucket is packed into the staging buffer, reduce-scattered in place, and the rank's averaged slice is
//         copied back to its places in the gradient buffer (llmc/distributed/zero.cuh).
// With gradient accumulation only the last micro-step's backward is armed. After the shard's update (-z 1) the
// buckets' parameters are all-gathered in the order the next forward uses them (wte, wpe and lnf first, then from
// layer 0 up), and the forward waits for a bucket only where it first needs it (GPT2::params_needed).
//
//   GradExchange x = grad_exchange_create(&model, &mg, bucket_bytes);   // installs the model's hooks
//   grad_exchange_arm(&x, last_micro_step);   gpt2_backward(...);
//   grad_exchange_finish(&x);                 // the compute stream waits for the reduced gradients
//   gpt2_update(...);  grad_exchange_gather_params(&x);   // -z 1
//   grad_exchange_sync(&x);                   // before parameters are read outside a training forward
// With one rank nothing is exchanged and no hook is installed (a -z 1 shard is then the whole model).
#pragma once

#include <vector>

#include "llmc/model/gpt2.cuh"
#include "llmc/distributed/multi_gpu.cuh"

struct GradExchange {
    GPT2* model = nullptr;
    MultiGpu* mg = nullptr;
    bool active = false;                // more than one rank
    std::vector<GradBucket> plan;       // the model's ZeRO plan with -z 1, the same bucketing with -z 0
    std::vector<int> bucket_of_layer;   // layer l's bucket
    std::vector<cudaEvent_t> gathered;  // per bucket: its parameters are all-gathered (-z 1)
    cudaEvent_t to_comm = nullptr, to_compute = nullptr;
    bool armed = false;                 // this backward exchanges
    bool gather_pending = false;        // a forward must wait for gathered[] before reading parameters
};

namespace grad_exchange_detail {

inline void send_bucket(GradExchange* x, int k) {
    GPT2& m = *x->model;
    MultiGpu& mg = *x->mg;
    const GradBucket& b = x->plan[(size_t)k];
    floatX* grads = gpt2_grads(&m);
    stream_wait_for(mg.stream, m.stream, x->to_comm);  // the bucket's gradients are queued before this point
    if (m.zero.on) {
        floatX* staging = (floatX*)m.memory[mem::ZeroStaging];
        zero_pack_zero_padded(b, grads, staging, mg.stream);
        multi_gpu_reduce_scatter_avg_in_place(mg, staging, b.shard_elements(mg.world));
        zero_unpack_owned(b, staging, grads, mg.world, mg.rank, mg.stream);
    } else {
        std::vector<DeviceRange> ranges;
        for (const FlatRange& r : b.ranges) ranges.push_back({grads + r.offset, r.count});
        multi_gpu_average(mg, ranges);
    }
}

}  // namespace grad_exchange_detail

inline GradExchange grad_exchange_create(GPT2* m, MultiGpu* mg, size_t bucket_bytes) {
    GradExchange x;
    x.model = m, x.mg = mg;
    x.active = mg->world > 1;
    if (!x.active) return x;
    const int L = m->config.num_layers;
    x.plan = m->zero.on ? m->zero.plan : zero_bucket_plan(m->config, bucket_bytes, mg->world);
    x.bucket_of_layer.assign((size_t)L, -1);
    for (size_t k = 0; k < x.plan.size(); k++)
        for (int l = x.plan[k].first_layer; l >= 0 && l <= x.plan[k].last_layer; l++) x.bucket_of_layer[(size_t)l] = (int)k;
    x.gathered.resize(x.plan.size());
    for (cudaEvent_t& e : x.gathered) cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&x.to_comm, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&x.to_compute, cudaEventDisableTiming));
    return x;
}

// Installs the hooks; call once x has its final address (the hooks keep a pointer to it).
inline void grad_exchange_install(GradExchange* x) {
    if (!x->active) return;
    GPT2* m = x->model;
    const int last_bucket = (int)x->plan.size() - 1;  // wte, wpe, lnf: complete after the encoder backward
    m->grads_ready = [x, last_bucket](int l) {
        if (!x->armed) return;
        if (l < 0) {
            grad_exchange_detail::send_bucket(x, last_bucket);
            return;
        }
        const int k = x->bucket_of_layer[(size_t)l];
        if (x->plan[(size_t)k].first_layer == l) grad_exchange_detail::send_bucket(x, k);  // its lowest layer is done
    };
    m->params_needed = [x, last_bucket](int l) {
        if (!x->gather_pending) return;
        const int k = l < 0 ? last_bucket : x->bucket_of_layer[(size_t)l];
        cudaCheck(cudaStreamWaitEvent(x->model->stream, x->gathered[(size_t)k], 0));
        if (l == x->model->config.num_layers - 1) x->gather_pending = false;  // every bucket waited for
    };
}

inline void grad_exchange_arm(GradExchange* x, bool exchange) { x->armed = x->active && exchange; }

// After the armed backward: the compute stream waits until every bucket's gradients are averaged.
inline void grad_exchange_finish(GradExchange* x) {
    if (!x->active) return;
    x->armed = false;
    stream_wait_for(x->model->stream, x->mg->stream, x->to_compute);
}

// -z 1, after the shard's update: every rank's updated parameters to every rank, bucket by bucket in the order the
// forward reads them; each bucket's event lets the next forward start on what has arrived.
inline void grad_exchange_gather_params(GradExchange* x) {
    if (!x->active || !x->model->zero.on) return;
    GPT2& m = *x->model;
    MultiGpu& mg = *x->mg;
    floatX* staging = (floatX*)m.memory[mem::ZeroStaging];
    floatX* params = (floatX*)m.memory[mem::Params];
    stream_wait_for(mg.stream, m.stream, x->to_comm);  // the update is queued before this point
    for (int k = (int)x->plan.size() - 1; k >= 0; k--) {
        const GradBucket& b = x->plan[(size_t)k];
        zero_pack_owned(b, params, staging, mg.world, mg.rank, mg.stream);
        multi_gpu_all_gather_in_place(mg, staging, b.shard_elements(mg.world));
        zero_unpack(b, staging, params, mg.stream);
        cudaCheck(cudaEventRecord(x->gathered[(size_t)k], mg.stream));
    }
    x->gather_pending = true;
}

// Before anything reads the parameters outside a training forward (checkpoints, samples, the end): the compute
// stream waits for the exchange and the host for both.
inline void grad_exchange_sync(GradExchange* x) {
    if (!x->active) return;
    stream_wait_for(x->model->stream, x->mg->stream, x->to_compute);
    cudaCheck(cudaStreamSynchronize(x->mg->stream));
    cudaCheck(cudaStreamSynchronize(x->model->stream));
    x->gather_pending = false;
}

inline void grad_exchange_free(GradExchange* x) {
    if (!x->active) return;
    grad_exchange_sync(x);
    x->model->grads_ready = nullptr;
    x->model->params_needed = nullptr;
    for (cudaEvent_t e : x->gathered) cudaCheck(cudaEventDestroy(e));
    cudaCheck(cudaEventDestroy(x->to_comm));
    cudaCheck(cudaEventDestroy(x->to_compute));
    *x = GradExchange{};
}
