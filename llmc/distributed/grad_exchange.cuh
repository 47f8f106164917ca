// The exchange between data-parallel ranks, overlapped with the backward and the next forward (docs/MULTI_GPU.md).
// Buckets of consecutive layers (llmc/distributed/zero_plan.h) go to the communication stream (mg.stream) as soon as
// the backward has queued their gradients, ordered by events, so they travel while the layers below are still in
// their backward:
//   -z 0: the bucket's ranges are averaged in place, one NCCL group of all-reduces (no copies);
//   -z 1: the bucket is packed into the staging buffer, reduce-scattered in place, and the rank's averaged slice is
//         copied back to its places in the gradient buffer (llmc/distributed/zero.cuh); a bucket of one range that
//         splits evenly (wte) is reduce-scattered where it lies, with no copies.
//   -z 2: the backward has written the bucket's gradients straight into its slot of a ring (layer buckets) or into
//         the model's buffer of wte, wpe and lnf, both in the bucket's staging layout (llmc/distributed/grad_slots.h);
//         it is reduce-scattered in place there and the rank's averaged slice goes into the gradient shard (copied on
//         a step's first micro-step, added on the others: every micro-step's backward exchanges). Before the backward
//         writes into a slot (layer_begins), the compute stream waits until the slot's last reduce-scatter is done
//         and zeroes it; after the buckets outside the layers, the model's buffer is zeroed for the next micro-step.
// On one host (LLMC_PEER_COPY=0 turns it off) the layers' buckets go by the copy engines instead of
// NCCL (llmc/distributed/peer_copy.cuh): copied to their owners as soon as the backward has queued them, summed on
// the compute stream after the next bucket's backward (a bucket's time later: the copies have landed) and, with -z 0,
// the means copied back to every rank (-z 2: each peer's slice of the slot goes whole, and the sum lands in the
// gradient shard); no collective kernel then holds SMs under the backward and the forward. wte,
// wpe and lnf stay with NCCL: their exchange is the step's exposed tail and head, where nothing else runs.
// After the shard's update (-z 1, -z 2) the buckets' parameters are all-gathered in the order the next forward uses
// them (wte, wpe and lnf first, then from layer 0 up; wte in place), and the forward waits for a bucket only where it
// first needs it.
//
// It is the model's listener: gpt2_backward(..., &x) sends the buckets (pass it only to the micro-step whose
// gradients are exchanged: the last, or every one with -z 2), gpt2_forward(..., &x) waits for gathered parameters.
// The optimizer (llmc/optimizer/adamw_optimizer.cuh) owns it and calls finish, gather_params and sync around its
// update.
#pragma once

#include <algorithm>
#include <vector>

#include "llmc/core/options.h"
#include "llmc/core/sm_budget.h"
#include "llmc/distributed/grad_slots.h"
#include "llmc/distributed/multi_gpu.cuh"
#include "llmc/distributed/peer_copy.cuh"
#include "llmc/distributed/zero.cuh"
#include "llmc/model/gpt2_backward.cuh"
#include "llmc/model/gpt2_forward.cuh"

struct GradExchange : ForwardListener, BackwardListener {
    MultiGpu* mg = nullptr;
    cudaStream_t compute = 0;           // the model's stream
    floatX* grads = nullptr;            // the model's gradients (flat; -z 2: wte, wpe, lnf) and parameters
    floatX* params = nullptr;
    floatX* staging = nullptr;          // -z 1: the largest bucket, padded; -z 2: GradSlotLayout's gather staging
    bool sharded = false;               // -z 1 or 2
    std::vector<GradBucket> plan;
    std::vector<int> bucket_of_layer;   // layer l's bucket
    std::vector<cudaEvent_t> gathered;  // per bucket: its parameters are all-gathered (-z 1, 2)
    cudaEvent_t to_comm = nullptr, to_compute = nullptr;
    bool gather_pending = false;        // a forward must wait for gathered[] before reading parameters
    PeerCopy peer;                      // the layers' buckets by copy engines (init_peer_copy)
    cudaEvent_t to_peer = nullptr, from_recv = nullptr;
    int unreduced = -1;                 // the bucket sent by copy engines whose sum is not queued yet
    std::vector<std::vector<cudaEvent_t>> slot_sent;  // -z 2 by copy engines: per slot, per lane: its copies done

    // -z 2 (init_grad_shard)
    bool grad_shard = false;
    GradSlotLayout slots;
    floatX* slot_memory = nullptr;       // slots.num_slots x slots.slot_elements
    floatX* shard_grads = nullptr;       // this rank's averaged gradients, shard order (ZeroShard::elements)
    std::vector<size_t> shard_offset;    // per bucket: where its slice starts in the shard
    std::vector<cudaEvent_t> slot_free;  // per slot: the communication stream's last use of it is done
    cudaEvent_t outer_free = nullptr;    // the model's gradient buffer exchanged and zeroed again
    int next_to_map = 0;                 // the backward's next bucket to get its slot
    bool step_begins = true;             // the next backward is its step's first: it copies into the shard
    bool add_to_shard = false;           // the current backward adds into the shard

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

    // -z 2, after init with the model's gradient buffer (the tensors outside the layers, in layout's places) as
    // grads_flat and layout's gather staging as staging_buffer: the slots (layout.slots_elements(), what the
    // model's grads.slices point into) and the gradient shard (shard_elements).
    void init_grad_shard(const GradSlotLayout& layout, floatX* slot_buffer, floatX* shard_buffer, size_t shard_elements) {
        if (!active() || !sharded) return;
        grad_shard = true, slots = layout, slot_memory = slot_buffer, shard_grads = shard_buffer;
        shard_offset.assign(plan.size(), 0);
        size_t at = 0;
        for (size_t k = 0; k < plan.size(); at += plan[k].shard_elements(mg->world), k++) shard_offset[k] = at;
        if (at != shard_elements) {
            fprintf(stderr, "error: GradExchange: a gradient shard of %zu elements for a plan of %zu\n", shard_elements, at);
            exit(EXIT_FAILURE);
        }
        slot_free.resize((size_t)slots.num_slots);
        for (cudaEvent_t& e : slot_free) cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&outer_free, cudaEventDisableTiming));
    }

    // After init (and init_grad_shard): the layers' buckets by copy engines when every rank is on this host and
    // can map the others' memory. Every rank calls it.
    void init_peer_copy() {
        if (!active()) return;
        // the ranks agree first: one whose LLMC_PEER_COPY differs must not leave the others in collectives alone
        const bool wanted = engine_options().peer_copy;
        if (multi_gpu_sum(*mg, wanted ? 0.0f : 1.0f) > 0.0f) {
            if (wanted) fprintf(stderr, "note: rank %d: LLMC_PEER_COPY=0 on another rank: NCCL moves every bucket\n", mg->rank);
            return;
        }
        if (!peer.init(*mg, plan, sharded ? params : grads)) return;
        for (cudaEvent_t* e : {&to_peer, &from_recv})
            cudaCheck(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
        if (grad_shard) {
            slot_sent.assign((size_t)slots.num_slots, std::vector<cudaEvent_t>((size_t)mg->world, nullptr));
            for (auto& lanes : slot_sent)
                for (int q = 0; q < mg->world; q++)
                    if (q != mg->rank) cudaCheck(cudaEventCreateWithFlags(&lanes[(size_t)q], cudaEventDisableTiming));
        }
    }
    bool by_peer_copy(int k) const { return peer.active && plan[(size_t)k].first_layer >= 0; }

    // -z 2: the backward is about to write layer `layer`'s gradients (L: the classifier's and lnf's, first); they and
    // the fcproj bias gradient of the layer below (written by this layer's first LayerNorm backward) need their
    // buckets' slots, handed out in backward order.
    void layer_begins(int layer) override {
        if (!grad_shard) return;
        const int L = (int)bucket_of_layer.size();
        if (layer == L) {  // a new backward: the classifier accumulates into wte's gradient, zeroed after the last one
            next_to_map = 0;
            add_to_shard = !step_begins;
            cudaCheck(cudaStreamWaitEvent(compute, outer_free, 0));
        }
        const int needed = grad_slots_needed_through(bucket_of_layer, layer);
        while (next_to_map <= needed) map_slot(next_to_map++);
    }

    // The backward has queued layer `layer`'s gradients (-1: wte, wpe, lnf, the last bucket): a bucket leaves once
    // its lowest layer is done.
    void gradients_ready(int layer) override {
        if (layer < 0) {  // the buckets outside the layers, wte last
            for (size_t k = 0; k < plan.size(); k++)
                if (plan[k].first_layer < 0) send_bucket((int)k);
            // -z 2: the last layer bucket's sum before the next backward reuses its slot (a step's earlier
            // micro-steps never reach finish)
            if (grad_shard && unreduced >= 0) reduce_sent(unreduced), unreduced = -1;
            if (grad_shard) {  // exchanged: zero for the next micro-step's backward (layer_begins waits for it)
                cudaCheck(cudaMemsetAsync(grads, 0, slots.outer_elements * sizeof(floatX), mg->stream));
                cudaCheck(cudaEventRecord(outer_free, mg->stream));
                step_begins = false;
            }
            return;
        }
        const int k = bucket_of_layer[(size_t)layer];
        if (grad_shard && k >= next_to_map) {  // its gradients went to a slot that was not handed out
            fprintf(stderr, "error: GradExchange: layer %d's gradients are ready before its slot was given "
                            "(the backward did not call layer_begins)\n", layer);
            exit(EXIT_FAILURE);
        }
        if (plan[(size_t)k].first_layer == layer) send_bucket(k);
    }

    // The forward is about to read layer `layer`'s parameters (-1: wte, wpe, lnf): it waits for their bucket where
    // the bucket's first layer is needed.
    void parameters_needed(int layer) override {
        if (!gather_pending) return;
        if (layer < 0) {
            for (size_t k = 0; k < plan.size(); k++)
                if (plan[k].first_layer < 0) cudaCheck(cudaStreamWaitEvent(compute, gathered[k], 0));
        } else if (first_of_bucket(layer)) {
            cudaCheck(cudaStreamWaitEvent(compute, gathered[(size_t)bucket_of_layer[(size_t)layer]], 0));
        }
        if (layer == (int)bucket_of_layer.size() - 1) gather_pending = false;  // every bucket waited for
        // the last bucket gathered (plan[0]) has landed: what is queued from here on runs with every SM
        if (sm_reserved_for_comm() > 0 && (!gather_pending || event_done(gathered[0]))) reserve_sms(false);
    }

    // Which calls may queue work (a micro-step replayed from CUDA Graphs ends a graph before them): the forward's
    // waits for gathered buckets, a bucket's send (after its lowest layer; -1: wte, wpe, lnf), -z 2's slots. With SMs
    // reserved for NCCL (LLMC_COMM_SMS) every forward call may query an event: the trainer replays no graphs then.
    bool queues_work(StepHook hook, int layer) const override {
        switch (hook) {
            case StepHook::ParametersNeeded: return sharded && (layer < 0 || first_of_bucket(layer));
            case StepHook::QkvReady: return false;
            case StepHook::LayerBegins: return grad_shard;
            case StepHook::GradientsReady: return layer < 0 || first_of_bucket(layer);
        }
        return true;
    }
    bool first_of_bucket(int layer) const { return plan[(size_t)bucket_of_layer[(size_t)layer]].first_layer == layer; }

    // After the exchanging backward: the compute stream waits until every bucket's gradients are averaged. The step's
    // exchange is over: with -z 2 the next backward starts the next step's gradient shard.
    void finish() {
        if (!active()) return;
        if (unreduced >= 0) reduce_sent(unreduced), unreduced = -1;
        if (peer.active && !sharded) peer.wait_gathered(compute);  // -z 0: every peer's means have landed here
        compute_waits_for_exchange();
        reserve_sms(false);
        step_begins = true;
    }

    // -z 1 and 2, after the shard's update: every rank's updated parameters to every rank, bucket by bucket in the
    // order the forward reads them; each bucket's event lets the next forward start on what has arrived. -z 2 stages
    // through the slots (idle until the next backward, which waits for their events) or its gather staging. which:
    // the buckets outside the layers (queued after their own part of the update, so they travel under the layers'),
    // the layers' (after the rest of the update), or all.
    void gather_params(ZeroChunks which = ZeroChunks::All) {
        if (!active() || !sharded) return;
        stream_wait_for(mg->stream, compute, to_comm);  // the update is queued before this point
        if (peer.active && which != ZeroChunks::Outer) peer.lanes_wait(to_comm);
        reserve_sms(true);
        for (int k = (int)plan.size() - 1; k >= 0; k--) {
            const GradBucket& b = plan[(size_t)k];
            const bool outer = b.first_layer < 0;
            if ((which == ZeroChunks::Outer && !outer) || (which == ZeroChunks::Layers && outer)) continue;
            if (by_peer_copy(k)) {  // the own places to every peer; the bucket is here once every peer's have come
                peer.gather_owned(k);
                peer.wait_gathered(peer.recv);
                cudaCheck(cudaEventRecord(gathered[(size_t)k], peer.recv));
                continue;
            }
            if (b.in_place()) {
                multi_gpu_all_gather_in_place(*mg, params + b.ranges[0].offset, b.shard_elements(mg->world));
            } else {
                const int s = grad_shard ? slots.gather_slot[(size_t)k] : -1;
                floatX* buffer = s >= 0 ? slot_memory + slots.slot_start(s) : staging;
                zero_pack_owned(b, params, buffer, mg->world, mg->rank, mg->stream);
                multi_gpu_all_gather_in_place(*mg, buffer, b.shard_elements(mg->world));
                zero_unpack(b, buffer, params, mg->stream);
                if (s >= 0) cudaCheck(cudaEventRecord(slot_free[(size_t)s], mg->stream));
            }
            cudaCheck(cudaEventRecord(gathered[(size_t)k], mg->stream));
        }
        if (which != ZeroChunks::Outer) gather_pending = true;
    }

    // Before anything reads the parameters outside a training forward (checkpoints, samples, the end): the compute
    // stream waits for the exchange and the host for both.
    void sync() {
        if (!active()) return;
        compute_waits_for_exchange();
        cudaCheck(cudaStreamSynchronize(mg->stream));
        cudaCheck(cudaStreamSynchronize(compute));
        gather_pending = false;
        reserve_sms(false);
    }

    void free() {
        if (!active()) return;
        sync();
        if (peer.active) {
            peer.free(*mg);
            for (auto& lanes : slot_sent)
                for (cudaEvent_t e : lanes)
                    if (e) cudaCheck(cudaEventDestroy(e));
            slot_sent.clear();
            for (cudaEvent_t e : {to_peer, from_recv}) cudaCheck(cudaEventDestroy(e));
        }
        for (cudaEvent_t e : gathered) cudaCheck(cudaEventDestroy(e));
        for (cudaEvent_t e : slot_free) cudaCheck(cudaEventDestroy(e));
        if (outer_free) cudaCheck(cudaEventDestroy(outer_free));
        cudaCheck(cudaEventDestroy(to_comm));
        cudaCheck(cudaEventDestroy(to_compute));
        gathered.clear(), slot_free.clear(), outer_free = nullptr, grad_shard = false;
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

    floatX* slot(int s) const { return slot_memory + slots.slot_start(s); }

    // The sum of a bucket sent by copy engines, on the compute stream; -z 0: then its means to every rank.
    void reduce_sent(int k) {
        if (grad_shard) {
            const size_t per = plan[(size_t)k].shard_elements(mg->world);
            peer.reduce_slices(slot(slots.slot_of_bucket[(size_t)k]), per, shard_grads + shard_offset[(size_t)k],
                               add_to_shard, compute);
            return;
        }
        peer.reduce_bucket(k, grads, compute);
        if (!sharded) {
            cudaCheck(cudaEventRecord(to_peer, compute));
            peer.lanes_wait(to_peer);
            peer.gather_owned(k);
        }
    }

    void compute_waits_for_exchange() {
        stream_wait_for(compute, mg->stream, to_compute);
        if (peer.active) {
            peer.join(compute);
            stream_wait_for(compute, peer.recv, from_recv);
        }
    }

    // -z 2: bucket k's slot to the backward, zeroed (the backward accumulates) once its last user is done with it.
    void map_slot(int k) {
        const int s = slots.slot_of_bucket[(size_t)k];
        if (s < 0) return;  // outside the layers: the model's own buffer
        cudaCheck(cudaStreamWaitEvent(compute, slot_free[(size_t)s], 0));  // its last all-gather staging
        if (peer.active) peer.wait_lanes(compute, slot_sent[(size_t)s]);     // its last copies to the peers
        cudaCheck(cudaMemsetAsync(slot(s), 0, plan[(size_t)k].padded * sizeof(floatX), compute));
    }

    void send_bucket(int k) {
        const GradBucket& b = plan[(size_t)k];
        if (by_peer_copy(k)) {  // the bucket's gradients are queued on the compute stream before this point
            cudaCheck(cudaEventRecord(to_peer, compute));
            peer.lanes_wait(to_peer);
            if (grad_shard) {  // -z 2: each peer's slice of the slot, whole
                const int s = slots.slot_of_bucket[(size_t)k];
                peer.send_slices(slot(s), b.shard_elements(mg->world));
                peer.record_lanes(slot_sent[(size_t)s]);
            } else {
                peer.send_bucket(k, grads);
            }
            if (unreduced >= 0) reduce_sent(unreduced);  // the bucket before: its copies had this bucket's backward
            unreduced = k;
            return;
        }
        reserve_sms(true);
        stream_wait_for(mg->stream, compute, to_comm);  // the bucket's gradients are queued before this point
        if (grad_shard) {  // in place where the backward wrote it, then the rank's slice into the gradient shard
            const int s = slots.slot_of_bucket[(size_t)k];
            floatX* area = s >= 0 ? slot(s) : grads + slots.outer_offset[(size_t)k];
            const size_t per = b.shard_elements(mg->world);
            multi_gpu_reduce_scatter_avg_in_place(*mg, area, per);
            zero_shard_accumulate(shard_grads + shard_offset[(size_t)k], area + (size_t)mg->rank * per, per,
                                  add_to_shard, mg->stream);
            if (s >= 0) cudaCheck(cudaEventRecord(slot_free[(size_t)s], mg->stream));
        } else if (sharded && b.in_place()) {  // the rank's averaged slice lands where zero_unpack_owned would put it
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
