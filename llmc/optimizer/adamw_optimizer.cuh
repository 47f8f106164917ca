// The optimizer: AdamW on the training model's parameters, with everything it needs of its own. It owns the fp32
// master weights (BF16 builds, -w 1), the moments m and v, the ZeRO shard plan (-z 1: master weights and moments
// for this rank's shard only, llmc/distributed/zero.cuh; -z 2: also the averaged gradients, and the slots the layers'
// gradients are written into, llmc/distributed/grad_slots.h) and the bucketed gradient exchange between ranks
// (llmc/distributed/grad_exchange.cuh); it runs the step (gradient norm over every rank, clipping, the update, the
// parameters' all-gather) and saves and restores its state in one flat layout whatever the number of ranks and stage:
//   [fp32 master weights (when kept)] [AdamW m (fp32)] [AdamW v (fp32)], each in the parameter table's order.
//
//   model_and_optimizer_init(&model, &opt, &mg, allocation, settings);  // the model's allocation with the optimizer
//                                                  // (model_and_optimizer.cuh: the order the two need, and their free)
//   gpt2_forward(&model, ..., opt.listener());  gpt2_backward(&model, scale, opt.backward_listener(last_micro_step));
//   opt.step(lr, grad_clip, step, seed);                  // queued: norm, clipping and update with no host wait
//   AdamW::Result r = opt.result();                        // the step's norm and clipping factor (waits for it)
//   opt.sync();                                            // before the parameters are read outside a forward
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "llmc/core/memory_table.h"
#include "llmc/core/utils.h"
#include "llmc/distributed/grad_exchange.cuh"
#include "llmc/distributed/grad_slots.h"
#include "llmc/distributed/multi_gpu.cuh"
#include "llmc/distributed/zero.cuh"
#include "llmc/kernels/adamw.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/model/gpt2.cuh"

struct AdamWSettings {
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
    bool master_weights = kFloatXIsBF16;  // fp32 master copy of bf16 parameters (-w)
    int zero_stage = 0;                   // -z: 1 keeps this rank's shard of the state only, 2 of the gradients too
    size_t bucket_bytes = 0;              // gradients per exchanged bucket (-zb MB)
};

namespace adamw_memory {
enum Id { Master, M, V, Staging, GradSlots, GradShard, NormPartials, Clip, Count };

// The buckets the exchange sends and, with ZeRO, the shards (the same bucketing for -z 0).
inline std::vector<GradBucket> buckets(const GPT2Config& c, const AdamWSettings& s, int world) {
    return zero_bucket_plan(c, s.bucket_bytes, world);
}

// -z 2 with several ranks (with one there is nothing to exchange, and -z 2 runs as -z 1).
inline bool grad_shard(const AdamWSettings& s, int world) { return s.zero_stage == 2 && world > 1; }

// The optimizer's memory as a table (llmc/core/memory_table.h).
inline std::vector<MemoryTensor> table(const GPT2Config& c, const AdamWSettings& s, int world) {
    using G = MemoryGroup;
    const std::vector<GradBucket> plan = buckets(c, s, world);
    const size_t shard = zero_shard_size(plan, world);
    const size_t state = s.zero_stage >= 1 ? shard : gpt2_num_parameters(c);
    size_t staging = 0;  // -z 1 with several ranks: the largest bucket exchanged through it, padded
    if (s.zero_stage == 1 && world > 1)
        for (const GradBucket& b : plan)
            if (!b.in_place()) staging = std::max(staging, b.padded);
    size_t slots = 0, grad_shard_elems = 0;
    if (grad_shard(s, world)) {
        const GradSlotLayout layout = grad_slot_layout(plan, c);
        slots = layout.slots_elements(), grad_shard_elems = shard, staging = layout.gather_staging_elements;
    }
    std::vector<MemoryTensor> t(Count);
    t[Master] = {"master weights (fp32)", G::MasterWeights, s.master_weights && kFloatXIsBF16 ? state : 0, 4};
    t[M] = {"AdamW m (fp32)", G::Optimizer, state, 4};
    t[V] = {"AdamW v (fp32)", G::Optimizer, state, 4};
    t[Staging] = {s.zero_stage == 2 ? "all-gather staging (ZeRO-2)" : "bucket staging (ZeRO-1)", G::Workspace, staging,
                  sizeof(floatX)};
    t[GradSlots] = {"layer gradient slots (ZeRO-2: " + std::to_string(kGradSlots) + " x the largest layer bucket)",
                    G::Gradients, slots, sizeof(floatX)};
    t[GradShard] = {"gradient shard (ZeRO-2: this rank's, averaged)", G::Gradients, grad_shard_elems, sizeof(floatX)};
    t[NormPartials] = {"global norm partials", G::Workspace, global_norm_scratch_floats(), 4};
    t[Clip] = {"clipping: norm, factor, squared shard norm", G::Workspace, 4, 4};  // clip_state below
    return t;
}
}  // namespace adamw_memory

// Where the model keeps its gradients for these settings (set as GPT2::grad_layout before gpt2_allocate): flat, or
// with -z 2 on several ranks only wte's, wpe's and lnf's, in the exchange's layout (llmc/distributed/grad_slots.h).
inline GradLayout adamw_model_grad_layout(const GPT2Config& c, const AdamWSettings& s, int world) {
    GradLayout g;
    if (!adamw_memory::grad_shard(s, world)) return g;
    const GradSlotLayout layout = grad_slot_layout(adamw_memory::buckets(c, s, world), c);
    g.elements = layout.outer_elements;
    g.offsets = layout.outer_tensor_offset;
    return g;
}

// Device bytes AdamW::init will allocate (for the model's out-of-memory check, which comes first).
inline size_t adamw_device_bytes(const GPT2Config& c, const AdamWSettings& s, int world) {
    return memory_table_bytes(adamw_memory::table(c, s, world));
}

struct AdamW {
    struct Result {
        float grad_norm = 0, grad_scale = 1;  // the global norm before clipping; the factor clipping applied
    };

    AdamWSettings settings;
    GPT2* model = nullptr;
    MultiGpu* mg = nullptr;
    std::vector<MemoryTensor> memory_table;
    std::vector<void*> memory;  // device pointer per adamw_memory::Id
    void* device_block = nullptr;
    MemoryPlan plan;
    size_t state_elements = 0;  // per array: the parameters, or this rank's shard of them
    ZeroShard shard;            // -z 1: this rank's segments
    GradExchange exchange;
    float* result_host = nullptr;  // pinned: the last step's [norm, clipping factor], copied after its update
    // -z 2: where the backward writes each (tensor, layer) gradient slice (GPT2Params::slices), in this optimizer's
    // slots; empty otherwise (the model's own flat gradients). model_and_optimizer_init hands them to the model.
    std::vector<floatX*> grad_slices;

    // After gpt2_allocate: the master copy from the model's fp32 host parameters, zero moments.
    void init(GPT2* m, MultiGpu* multi_gpu, const AdamWSettings& s) {
        model = m, mg = multi_gpu, settings = s;
        const GPT2Config& c = m->config;
        if (s.zero_stage < 0 || s.zero_stage > 2) {
            fprintf(stderr, "error: AdamW: ZeRO stage %d (0, 1 or 2)\n", s.zero_stage);
            exit(EXIT_FAILURE);
        }
        const GradLayout want = adamw_model_grad_layout(c, s, mg->world);
        if (m->grad_layout.elements != want.elements || m->grad_layout.offsets != want.offsets) {
            fprintf(stderr, "error: AdamW::init: the model's gradients were allocated in another layout than ZeRO "
                            "stage %d needs (set GPT2::grad_layout = adamw_model_grad_layout(...) before "
                            "gpt2_allocate)\n", s.zero_stage);
            exit(EXIT_FAILURE);
        }
        const std::vector<GradBucket> plan_buckets = adamw_memory::buckets(c, s, mg->world);
        memory_table = adamw_memory::table(c, s, mg->world);
        plan = memory_plan_of(memory_table);
        cudaCheck(cudaMalloc(&device_block, memory_table_bytes(memory_table)));
        memory = memory_table_carve(memory_table, device_block);
        state_elements = memory_table[adamw_memory::M].elems;
        if (sharded()) shard = zero_shard_create(plan_buckets, c, mg->world, mg->rank);
        if (master()) {
            if (m->host_params.size() != m->num_parameters) {
                fprintf(stderr, "error: AdamW::init: the model's fp32 parameters were released before the master "
                                "copy was made\n");
                exit(EXIT_FAILURE);
            }
            const float* flat = m->host_params.data();
            std::vector<float> own;
            if (sharded()) own = zero_shard_from_flat(plan_buckets, mg->world, mg->rank, flat, 0.0f), flat = own.data();
            cudaCheck(cudaMemcpy(master(), flat, state_elements * sizeof(float), cudaMemcpyHostToDevice));
        }
        cudaCheck(cudaMemset(moment(adamw_memory::M), 0, state_elements * sizeof(float)));
        cudaCheck(cudaMemset(moment(adamw_memory::V), 0, state_elements * sizeof(float)));
        for (adamw_memory::Id id : {adamw_memory::Staging, adamw_memory::GradShard})  // never read unwritten; tidy
            if (memory[id]) cudaCheck(cudaMemset(memory[id], 0, memory_table[id].bytes()));
        exchange.init(mg, m->stream, plan_buckets, c.num_layers, m->grads.base, m->params.base,
                      (floatX*)memory[adamw_memory::Staging], sharded());
        if (grad_shard()) {  // the layers' gradients in the exchange's slots: the backward writes them there
            const GradSlotLayout layout = grad_slot_layout(plan_buckets, c);
            floatX* slots = (floatX*)memory[adamw_memory::GradSlots];
            exchange.init_grad_shard(layout, slots, shard_grads(), shard.elements);
            grad_slices.assign(layout.slice.size(), nullptr);
            for (size_t i = 0; i < layout.slice.size(); i++)
                if (layout.slice[i] != GradSlotLayout::kNoSlice) grad_slices[i] = slots + layout.slice[i];
        }
        exchange.init_peer_copy();
        cudaCheck(cudaMallocHost(&result_host, 2 * sizeof(float)));
        result_host[0] = 0.0f, result_host[1] = 1.0f;
    }

    bool sharded() const { return settings.zero_stage >= 1; }
    bool grad_shard() const { return adamw_memory::grad_shard(settings, mg->world); }
    floatX* shard_grads() const { return (floatX*)memory[adamw_memory::GradShard]; }
    float* master() const { return (float*)memory[adamw_memory::Master]; }
    // [0] the global norm, [1] the clipping factor, [2] this rank's squared shard norm, then their sum over ranks
    float* clip_state() const { return (float*)memory[adamw_memory::Clip]; }
    float* moment(adamw_memory::Id id) const { return (float*)memory[id]; }

    // What the model's passes tell while they queue (null with one rank: nothing to exchange, and the step can be
    // a CUDA Graph). Pass it to the forward of every micro-step and to the backward of the last.
    GradExchange* listener() { return exchange.active() ? &exchange : nullptr; }
    // The backward's: the last micro-step's exchanges its gradients; with -z 2 every micro-step's does (the layers'
    // gradients are not held whole between micro-steps).
    GradExchange* backward_listener(bool last_micro_step) {
        return last_micro_step || grad_shard() ? listener() : nullptr;
    }

    // One optimizer step, after the last micro-step's backward: the exchanged gradients' global norm, clipping to
    // grad_clip (0: none), AdamW with learning rate lr, then (-z 1) the parameters' all-gather, which the next forward
    // waits for bucket by bucket. step: the update's number (>= 1); seed fixes the stochastic rounding. All of it is
    // queued without a host wait: the norm stays on the device (with ZeRO its square is summed over ranks there),
    // clip_scale turns it into the factor the update kernels read; result() has the host's copy.
    void step(float lr, float grad_clip, int step, uint64_t seed) {
        if (step < 1) {
            fprintf(stderr, "error: AdamW::step: step must be >= 1 (got %d)\n", step);
            exit(EXIT_FAILURE);
        }
        cudaStream_t s = model->stream;
        exchange.finish();
        float* clip = clip_state();
        if (sharded()) {  // each rank holds the mean of its shard; the norm combines the shards' squares
            if (grad_shard()) zero_grad_norm_shard_square_queue(shard, shard_grads(), clip + 2, s);
            else zero_grad_norm_square_queue(shard, model->grads.base, clip + 2, s);
            multi_gpu_sum_queued(*mg, clip + 2, 1, s);
            clip_scale(clip + 2, /*squared=*/true, grad_clip, clip, s);
        } else {
            float* scratch = (float*)memory[adamw_memory::NormPartials];
            global_norm_queue(model->grads.base, model->num_parameters, scratch, s);
            clip_scale(scratch, /*squared=*/false, grad_clip, clip, s);
        }
        model->fp8_weights_current = false;  // the update below changes the parameters the FP8 copies came from
        AdamWTensorTable table;
        const auto specs = gpt2_parameter_table(model->config);
        for (int i = 0; i < kNumParameterTensors; i++) {
            table.offset[i] = model->params.offsets[i];
            table.size[i] = specs[i].numel;
            table.weight_decay[i] = specs[i].weight_decay ? settings.weight_decay : 0.0f;
        }
        const AdamWSettings& a = settings;
        // the factor from the device; NaN in its place would show a kernel that did not read it there
        AdamWStep args = adamw_step(lr, a.beta1, a.beta2, a.eps, NAN, step, seed);
        args.grad_scale_at = clip + 1;
        if (sharded()) {  // this rank's shard, from its gradient shard (-z 2) or its reduce-scattered gradients;
            // with several ranks wte, wpe and lnf first, so that their all-gather runs under the layers' update
            auto update = [&](ZeroChunks part) {
                if (grad_shard())
                    zero_adamw_update_shard(shard, model->params.base, master(), shard_grads(), moment(adamw_memory::M),
                                            moment(adamw_memory::V), table, args, s, part);
                else
                    zero_adamw_update(shard, model->params.base, master(), model->grads.base, moment(adamw_memory::M),
                                      moment(adamw_memory::V), table, args, s, part);
                exchange.gather_params(part);  // queued behind its part of the update (an event), no host wait
            };
            if (exchange.active()) update(ZeroChunks::Outer), update(ZeroChunks::Layers);
            else update(ZeroChunks::All);
        } else {
            adamw_update(model->params.base, master(), model->grads.base, moment(adamw_memory::M),
                         moment(adamw_memory::V), table, kNumParameterTensors, args, s);
        }
        cudaCheck(cudaMemcpyAsync(result_host, clip, 2 * sizeof(float), cudaMemcpyDeviceToHost, s));
    }

    // The last step's norm and clipping factor; waits for its update (not for the all-gather after it).
    Result result() const {
        cudaCheck(cudaStreamSynchronize(model->stream));
        Result r;
        r.grad_norm = result_host[0], r.grad_scale = result_host[1];
        return r;
    }

    // Before the parameters are read outside a training forward (checkpoints, samples, the end).
    void sync() { exchange.sync(); }

    // ---- state for checkpoints, the flat layout above
    size_t state_bytes() const {
        const size_t P = model->num_parameters;
        return ((master() ? P : 0) + 2 * P) * sizeof(float);
    }

    // Every rank calls it (with ZeRO-1 the shards are gathered: collectives), between steps; rank 0 gets the
    // bytes, the others an empty vector.
    std::vector<uint8_t> state_to_host() {
        if (sharded()) return gather_state();
        if (mg->rank != 0) return {};
        std::vector<uint8_t> out(state_bytes());
        uint8_t* dst = out.data();
        for (float* a : state_arrays()) {
            cudaCheck(cudaMemcpy(dst, a, model->num_parameters * sizeof(float), cudaMemcpyDeviceToHost));
            dst += model->num_parameters * sizeof(float);
        }
        return out;
    }

    // Puts a saved state back (each rank its shard with ZeRO-1, whatever number of ranks wrote it); `path` names the
    // file in the error when the size does not match this model and settings. A state without master weights
    // ([m][v]: an FP32 build's, the CPU trainer's) also restores into a run that keeps them: the master copy stays
    // as init() made it, from the checkpoint's model file (exact when that file is fp32, as those runs write it).
    void state_from_host(const std::vector<uint8_t>& state, const std::string& path) {
        const size_t moments_bytes = 2 * model->num_parameters * sizeof(float);
        const bool without_master = master() && state.size() == moments_bytes;
        if (state.size() != state_bytes() && !without_master) {
            file_error(path, "optimizer state is %zu bytes, this model needs %zu (different model or -w?)",
                       state.size(), state_bytes());
        }
        const float* src = reinterpret_cast<const float*>(state.data());
        const std::vector<GradBucket>& buckets = exchange.plan;
        for (float* a : state_arrays()) {
            if (without_master && a == master()) continue;
            std::vector<float> own;
            const float* from = src;
            if (sharded()) own = zero_shard_from_flat(buckets, mg->world, mg->rank, src, 0.0f), from = own.data();
            cudaCheck(cudaMemcpy(a, from, state_elements * sizeof(float), cudaMemcpyHostToDevice));
            src += model->num_parameters;
        }
    }

    // The start-up table's rows.
    std::string zero_description() const {
        if (grad_shard())
            return "2 (master weights, AdamW moments and averaged gradients: this rank's shard; the layers' gradients "
                   "in " + std::to_string(kGradSlots) + " slots)";
        if (settings.zero_stage == 2) return "2 with one process: runs as 1 (nothing to exchange)";
        return sharded() ? "1 (master weights and AdamW moments: this rank's shard)"
                         : "0 (every rank keeps the whole optimizer state)";
    }
    std::string exchange_description(size_t bucket_mb) const {
        return std::to_string(exchange.plan.size()) + " buckets of about " + std::to_string(bucket_mb) + " MB, " +
               (sharded() ? "reduce-scatter" : "all-reduce") +
               (grad_shard() ? " under every micro-step's backward (ZeRO-2, also with -d > B*T*N)"
                             : " under the backward") +
               (sharded() ? ", all-gather under the forward" : "") +
               (exchange.peer.active ? "; the layers' buckets by copy engines (LLMC_PEER_COPY=0: NCCL)" : "");
    }

    void free() {
        grad_slices.clear();
        exchange.free();
        zero_shard_free(&shard);
        if (result_host) {
            cudaCheck(cudaStreamSynchronize(model->stream));  // the last step's copy into it
            cudaCheck(cudaFreeHost(result_host));
        }
        result_host = nullptr;
        if (device_block) cudaCheck(cudaFree(device_block));
        device_block = nullptr;
        memory.clear();
    }

  private:
    std::vector<float*> state_arrays() const {
        std::vector<float*> out;
        if (master()) out.push_back(master());
        out.push_back(moment(adamw_memory::M));
        out.push_back(moment(adamw_memory::V));
        return out;
    }

    // ZeRO-1: the ranks' shards into the flat layout, a bucket at a time through an fp32 buffer of the largest
    // bucket (in the model's activations, dead between steps, when it fits; else a buffer of its own).
    std::vector<uint8_t> gather_state() {
        const size_t P = model->num_parameters;
        std::vector<uint8_t> out(mg->rank == 0 ? state_bytes() : 0);
        size_t largest = 0;
        for (const GradBucket& b : exchange.plan) largest = std::max(largest, b.padded);
        size_t scratch_bytes = 0;
        float* gathered = (float*)gpt2_scratch_between_steps(model, &scratch_bytes);
        const bool own_buffer = largest * sizeof(float) > scratch_bytes;
        if (own_buffer) cudaCheck(cudaMalloc(&gathered, largest * sizeof(float)));
        std::vector<float> host(largest);
        size_t array = 0;
        for (float* a : state_arrays()) {
            float* flat = mg->rank == 0 ? reinterpret_cast<float*>(out.data()) + array * P : nullptr;
            size_t shard_at = 0;
            for (const GradBucket& b : exchange.plan) {
                const size_t per = b.shard_elements(mg->world);
                cudaCheck(cudaMemcpyAsync(gathered + (size_t)mg->rank * per, a + shard_at, per * sizeof(float),
                                          cudaMemcpyDeviceToDevice, mg->stream));
                multi_gpu_all_gather_in_place(*mg, gathered, per);
                cudaCheck(cudaStreamSynchronize(mg->stream));
                shard_at += per;
                if (!flat) continue;
                cudaCheck(cudaMemcpy(host.data(), gathered, b.elements * sizeof(float), cudaMemcpyDeviceToHost));
                size_t at = 0;  // the gathered buffer is the bucket's staging layout: its ranges in table order
                for (const FlatRange& r : b.ranges) {
                    std::copy(host.begin() + at, host.begin() + at + r.count, flat + r.offset);
                    at += r.count;
                }
            }
            array++;
        }
        if (own_buffer) cudaCheck(cudaFree(gathered));
        return out;
    }
};
