// GPU test of ZeRO-1's and ZeRO-2's arithmetic (llmc/distributed/zero.cuh, grad_slots.h) on one GPU, N ranks
// simulated: for N = 1, 2, 3 and two bucket sizes, every rank packs the (already averaged) gradients bucket by bucket
// into a stale staging buffer and copies its slice back to its places in its own gradient buffer (what an in-place
// reduce-scatter and zero_unpack_owned leave; every other place is poisoned with NaN), takes the norm of its owned
// gradients, updates its shard with zero_adamw_update (odd ranks in two launches, wte/wpe/lnf's chunks then the
// layers', as the trainer with several ranks), packs only its own parameters into a poisoned staging buffer
// and takes the other ranks' slices (an in-place all-gather). Every rank must end with the parameters adamw_update
// gives the unsharded model, bit for bit; the shards of master weights, m and v must reassemble
// (zero_flat_from_shards) into the unsharded ones; the ranks' squared norms must add up to the whole gradient's (and
// repeat bit for bit). Before the gather a rank must have written only the elements it owns; shard padding of master,
// m and v is poisoned and must stay so.
// -z 2 runs the same cases with the gradients on ZeRO-2's path instead (zero2_fill_shards): written through a
// GPT2Params whose layer slices point into the ring of slots, in two micro-steps of half the gradient each, every
// bucket's rank slice copied then added into the rank's gradient shard; the shard must hold the owned gradients bit
// for bit, its norm (padding poisoned) must be the -z 1 norm's float, and zero_adamw_update_shard must give the same
// parameters, master weights and moments as adamw_update.
// Last, the model's side of -z 2 (backward_into_slots): a real backward writes the layers' gradients through
// GPT2Params::slices into a ring of slots handed out by layer_begins as GradExchange does (without the ranks), and
// wte's, wpe's and lnf's into its own buffer in the exchange's layout; copied out bucket by bucket when ready, the
// gradients must equal a flat model's bit for bit, in two backwards in a row (slots reused and re-zeroed).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/distributed/grad_slots.h"
#include "llmc/distributed/zero.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/model/gpt2.cuh"
#include "llmc/model/gpt2_params.cuh"
#include "llmc/model/gpt2_step.cuh"

namespace {

int failures = 0;

// floatX arrays through fp32 on the host (cuda_common.h's conversions: to floatX rounds to nearest, back is exact,
// so comparing the fp32 copies bit for bit compares the floatX values)
floatX* floatX_to_device(const std::vector<float>& h) {
    floatX* d = nullptr;
    cudaCheck(cudaMalloc(&d, std::max<size_t>(1, h.size()) * sizeof(floatX)));
    host_floats_to_device(d, h.data(), h.size());
    return d;
}
std::vector<float> floatX_to_host(const floatX* d, size_t n) {
    std::vector<float> h(n);
    device_to_host_floats(h.data(), d, n);
    return h;
}

template <typename T>
T* to_device(const std::vector<T>& h) {
    T* d = nullptr;
    cudaCheck(cudaMalloc(&d, std::max<size_t>(1, h.size()) * sizeof(T)));
    if (!h.empty()) cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> h(n);
    if (n) cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
int stage = 1;  // the ZeRO stage of the running case
void expect(bool ok, const char* what, int N, size_t bucket_bytes, int rank) {
    if (ok) return;
    printf("FAIL: %s (-z %d, N %d, buckets of %zu bytes, rank %d)\n", what, stage, N, bucket_bytes, rank);
    failures++;
}

// ZeRO-2's data path for N simulated ranks (llmc/distributed/grad_exchange.cuh, what send_bucket does): two
// micro-steps each "run the backward", which writes d_half's values through a GPT2Params whose layers' slices point
// into the ring of slots and whose other tensors lie in a model-like buffer in the exchange's layout, bucket by bucket
// in backward order, each slot zeroed before its bucket's layers are written (the slots and the buffer start stale).
// Every rank holds the same averaged gradients, so the in-place reduce-scatter leaves rank r the r-th slice of the
// bucket's area as it is; it goes into rank r's gradient shard: copied on micro-step 0, added on micro-step 1.
void zero2_fill_shards(const GPT2Config& c, const std::vector<GradBucket>& plan, int N, const floatX* d_half,
                       const std::vector<floatX*>& shard_grads) {
    const GradSlotLayout g = grad_slot_layout(plan, c);
    const auto table = gpt2_parameter_table(c);
    const auto offsets = gpt2_parameter_offsets(c);
    floatX* slots = floatX_to_device(std::vector<float>(g.slots_elements(), 1.5f));
    floatX* outer = floatX_to_device(std::vector<float>(g.outer_elements, 1.5f));
    GradLayout layout;
    layout.elements = g.outer_elements;
    layout.offsets = g.outer_tensor_offset;
    GPT2Params grads(c, outer, layout);  // as the model's grads with -z 2, slices as model_and_optimizer_init sets them
    grads.slices.assign(g.slice.size(), nullptr);
    for (size_t i = 0; i < g.slice.size(); i++)
        if (g.slice[i] != GradSlotLayout::kNoSlice) grads.slices[i] = slots + g.slice[i];
    auto write = [&](int t, int layer) {  // the backward's gradient of tensor t (its layer `layer` slice)
        const size_t each = table[t].per_layer ? table[t].numel / c.num_layers : table[t].numel;
        const size_t from = offsets[t] + (table[t].per_layer ? (size_t)layer * each : 0);
        cudaCheck(cudaMemcpy(grads((ParamTensor)t, layer), d_half + from, each * sizeof(floatX),
                             cudaMemcpyDeviceToDevice));
    };
    for (int micro = 0; micro < 2; micro++) {
        cudaCheck(cudaMemset(outer, 0, g.outer_elements * sizeof(floatX)));  // zeroed after the last exchange
        for (int t = 0; t < kNumParameterTensors; t++)
            if (!table[t].per_layer) write(t, 0);
        size_t shard_at = 0;
        for (size_t k = 0; k < plan.size(); k++) {
            const GradBucket& b = plan[k];
            const size_t per = b.shard_elements(N);
            floatX* area = outer + g.outer_offset[k];
            if (b.first_layer >= 0) {  // map_slot, then the bucket's layers
                area = slots + g.slot_start(g.slot_of_bucket[k]);
                cudaCheck(cudaMemset(area, 0, b.padded * sizeof(floatX)));
                for (int l = b.last_layer; l >= b.first_layer; l--)
                    for (int t = 0; t < kNumParameterTensors; t++)
                        if (table[t].per_layer) write(t, l);
            }
            for (int r = 0; r < N; r++)
                zero_shard_accumulate(shard_grads[r] + shard_at, area + (size_t)r * per, per, micro > 0, 0);
            shard_at += per;
        }
    }
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaFree(slots));
    cudaCheck(cudaFree(outer));
}

// GradExchange's slot protocol without the ranks (llmc/distributed/grad_exchange.cuh): layer_begins hands out and
// zeroes the slots in plan order; a bucket's gradients, once ready, are copied from its slot (or the model's buffer)
// to their flat places (zero_unpack: the staging layout), where the exchange would reduce-scatter them; the model's
// buffer is zeroed after the last bucket, as the exchange does for the next micro-step.
struct SlotCollector : BackwardListener {
    const std::vector<GradBucket>* plan = nullptr;
    const GradSlotLayout* g = nullptr;
    std::vector<int> owner;  // layer l's bucket
    floatX *slots = nullptr, *outer = nullptr, *flat = nullptr;
    cudaStream_t stream = 0;
    int next = 0;
    void layer_begins(int layer) override {
        if (layer == (int)owner.size()) next = 0;
        for (; next <= grad_slots_needed_through(owner, layer); next++)
            cudaCheck(cudaMemsetAsync(slots + g->slot_start(g->slot_of_bucket[(size_t)next]), 0,
                                      (*plan)[(size_t)next].padded * sizeof(floatX), stream));
    }
    void gradients_ready(int layer) override {
        if (layer >= 0) {
            const int k = owner[(size_t)layer];
            if (k >= next) printf("FAIL: layer %d's gradients ready before its slot was handed out\n", layer), failures++;
            if ((*plan)[(size_t)k].first_layer == layer)
                zero_unpack((*plan)[(size_t)k], slots + g->slot_start(g->slot_of_bucket[(size_t)k]), flat, stream);
            return;
        }
        for (size_t k = 0; k < plan->size(); k++)
            if ((*plan)[k].first_layer < 0) zero_unpack((*plan)[k], outer + g->outer_offset[k], flat, stream);
        cudaCheck(cudaMemsetAsync(outer, 0, g->outer_elements * sizeof(floatX), stream));
    }
};

// C = 128: every slice 256-byte aligned, so both models' GEMMs run the same cuBLASLt plans (bit-identical).
void backward_into_slots() {
    const GPT2Config c{64, 1000, 1024, 5, 4, 128};  // maxT V Vp L NH C
    const int B = 2, T = 64, N = 3;
    std::vector<int> tokens(B * T), targets(B * T);
    Rng rng(77);
    for (int i = 0; i < B * T; i++) tokens[i] = (int)(rng.uniform() * c.vocab_size) % c.vocab_size;
    for (int i = 0; i < B * T; i++) targets[i] = (int)(rng.uniform() * c.vocab_size) % c.vocab_size;
    const size_t P = gpt2_num_parameters(c);
    GPT2 flat_model;
    gpt2_build_random(&flat_model, c, 5);
    gpt2_allocate(&flat_model, B, T, 1, AttentionBackend::Materialized);
    gpt2_zero_grad(&flat_model);
    gpt2_forward(&flat_model, tokens.data(), targets.data(), B, T);
    gpt2_backward(&flat_model, 1.0f);
    const std::vector<float> want = gpt2_grads_to_host(&flat_model);
    gpt2_free(&flat_model);
    for (size_t bucket_bytes : {(size_t)0, (size_t)500000}) {  // a layer per bucket (5 > 3 slots); two per bucket
        const std::vector<GradBucket> plan = zero_bucket_plan(c, bucket_bytes, N);
        const GradSlotLayout g = grad_slot_layout(plan, c);
        GPT2 m;
        gpt2_build_random(&m, c, 5);
        m.grad_layout.elements = g.outer_elements;
        m.grad_layout.offsets = g.outer_tensor_offset;
        gpt2_allocate(&m, B, T, 1, AttentionBackend::Materialized);
        SlotCollector x;
        x.plan = &plan, x.g = &g, x.stream = m.stream;
        x.owner.assign((size_t)c.num_layers, -1);
        for (size_t k = 0; k < plan.size(); k++)
            for (int l = plan[k].first_layer; l >= 0 && l <= plan[k].last_layer; l++) x.owner[(size_t)l] = (int)k;
        x.slots = floatX_to_device(std::vector<float>(g.slots_elements(), 1.5f));  // stale until handed out
        x.outer = m.grads.base;
        m.grads.slices.assign(g.slice.size(), nullptr);
        for (size_t i = 0; i < g.slice.size(); i++)
            if (g.slice[i] != GradSlotLayout::kNoSlice) m.grads.slices[i] = x.slots + g.slice[i];
        float poison;
        const uint32_t poison_bits = 0x7fc0dead;
        memcpy(&poison, &poison_bits, 4);
        for (int pass = 0; pass < 2; pass++) {
            x.flat = floatX_to_device(std::vector<float>(P, poison));
            gpt2_forward(&m, tokens.data(), targets.data(), B, T);
            gpt2_backward(&m, 1.0f, &x);
            cudaCheck(cudaDeviceSynchronize());
            const std::vector<float> got = floatX_to_host(x.flat, P);
            size_t differ = 0;
            for (size_t i = 0; i < P; i++) differ += memcmp(&got[i], &want[i], 4) != 0;
            if (differ) {
                printf("FAIL: -z 2 backward into slots (buckets of %zu bytes, backward %d): %zu of %zu gradients differ "
                       "from the flat model's\n", bucket_bytes, pass + 1, differ, P);
                failures++;
            }
            cudaCheck(cudaFree(x.flat));
        }
        m.grads.slices.clear();
        cudaCheck(cudaFree(x.slots));
        gpt2_free(&m);
    }
}

}  // namespace

int main() {
    require_cuda_device("test_zero");
    const GPT2Config c{64, 1000, 1024, 4, 4, 128};  // maxT V Vp L NH C
    const auto table_spec = gpt2_parameter_table(c);
    const size_t P = gpt2_num_parameters(c);
    const bool with_master = kFloatXIsBF16;  // as the trainer: fp32 master weights in BF16 builds

    // a state mid-training: parameters, master copy, moments and this step's gradients
    Rng rng(20261123);
    std::vector<float> master(P), m(P), v(P);
    std::vector<float> params(P), grads(P);  // rounded to floatX on upload
    for (size_t i = 0; i < P; i++) {
        master[i] = 0.05f * rng.normal();
        params[i] = master[i];
        m[i] = 1e-3f * rng.normal();
        v[i] = 1e-6f * std::fabs(rng.normal());
        grads[i] = 0.02f * rng.normal();
    }
    AdamWTensorTable table{};
    for (size_t t = 0, at = 0; t < table_spec.size(); at += table_spec[t].numel, t++) {
        table.offset[t] = at;
        table.size[t] = table_spec[t].numel;
        table.weight_decay[t] = table_spec[t].weight_decay ? 0.1f : 0.0f;
    }
    const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, grad_scale = 0.75f;
    const int step = 5;
    const uint64_t seed = 1337;

    // the unsharded update
    floatX* d_params = floatX_to_device(params);
    floatX* d_grads = floatX_to_device(grads);
    params = floatX_to_host(d_params, P);  // as rounded: what every rank starts from
    float* d_master = with_master ? to_device(master) : nullptr;
    float* d_m = to_device(m);
    float* d_v = to_device(v);
    adamw_update(d_params, d_master, d_grads, d_m, d_v, table, (int)table_spec.size(), lr, b1, b2, eps, grad_scale,
                 step, seed);
    const std::vector<float> want_params = floatX_to_host(d_params, P);
    const std::vector<float> want_master = with_master ? to_host(d_master, P) : std::vector<float>();
    const std::vector<float> want_m = to_host(d_m, P), want_v = to_host(d_v, P);
    if (same_bits(want_params, params)) {
        printf("FAIL: the unsharded update changed nothing (the test could not fail)\n");
        failures++;
    }
    float* norm_scratch = nullptr;
    cudaCheck(cudaMalloc(&norm_scratch, global_norm_scratch_floats() * sizeof(float)));
    const float whole_norm = global_norm(d_grads, P, norm_scratch);
    cudaCheck(cudaFree(norm_scratch));
    const AdamWStep s = adamw_step(lr, b1, b2, eps, grad_scale, step, seed);
    float poison;
    const uint32_t poison_bits = 0x7fc0dead;  // a NaN no update produces
    memcpy(&poison, &poison_bits, 4);
    // -z 2's two micro-steps: half the gradient each (halving a floatX is exact, and so is adding the halves)
    const std::vector<float> grads_x = floatX_to_host(d_grads, P);
    std::vector<float> half(P);
    for (size_t i = 0; i < P; i++) half[i] = 0.5f * grads_x[i];
    floatX* d_half = floatX_to_device(half);

    int cases = 0;
    for (int z : {1, 2})
    for (int N : {1, 2, 3}) {
        stage = z;
        for (size_t bucket_bytes : {(size_t)0, (size_t)1 << 20}) {  // a layer per bucket; ~1 MB buckets
            const std::vector<GradBucket> plan = zero_bucket_plan(c, bucket_bytes, N);
            size_t max_padded = 0;
            for (const GradBucket& b : plan) max_padded = std::max(max_padded, b.padded);
            floatX* staging = nullptr;  // stale values everywhere, as the trainer's shared staging buffer holds
            cudaCheck(cudaMalloc(&staging, max_padded * sizeof(floatX)));
            {
                const std::vector<float> stale(max_padded, 1.5f);
                host_floats_to_device(staging, stale.data(), max_padded);
            }
            std::vector<floatX*> rank_params(N);
            std::vector<ZeroShard> shards(N);
            std::vector<float*> sh_master(N), sh_m(N), sh_v(N);
            std::vector<floatX*> rank_grads(N);  // each rank's flat gradient buffer
            for (int r = 0; r < N; r++) {
                shards[r] = zero_shard_create(plan, c, N, r);
                expect(shards[r].first_outer_chunk > 0 && shards[r].first_outer_chunk < shards[r].num_chunks,
                       "the shard's chunks: the layers' first, then wte's, wpe's and lnf's (both parts non-empty)", N,
                       bucket_bytes, r);
                rank_params[r] = floatX_to_device(params);
                sh_master[r] = with_master ? to_device(zero_shard_from_flat(plan, N, r, master.data(), poison)) : nullptr;
                sh_m[r] = to_device(zero_shard_from_flat(plan, N, r, m.data(), poison));
                sh_v[r] = to_device(zero_shard_from_flat(plan, N, r, v.data(), poison));
                rank_grads[r] = floatX_to_device(std::vector<float>(P, poison));
            }
            // the reduce-scatter (every rank's gradients are the averaged ones, so each rank's slice of the packed
            // bucket is what an in-place reduce-scatter leaves there), then the slice back to its flat places
            for (const GradBucket& b : plan) {
                zero_pack_zero_padded(b, d_grads, staging, 0);
                for (int r = 0; r < N; r++) zero_unpack_owned(b, staging, rank_grads[r], N, r, 0);
            }
            std::vector<floatX*> shard_grads(N, nullptr);  // -z 2: each rank's gradient shard
            if (z == 2) {
                for (int r = 0; r < N; r++)
                    shard_grads[r] = floatX_to_device(std::vector<float>(shards[r].elements, poison));
                zero2_fill_shards(c, plan, N, d_half, shard_grads);
                for (int r = 0; r < N; r++) {  // the owned gradients, then the padding poisoned: never read
                    std::vector<float> got = floatX_to_host(shard_grads[r], shards[r].elements);
                    std::vector<bool> owned(got.size(), false);
                    bool values_ok = true;
                    zero_for_each_owned(plan, N, r, [&](size_t si, size_t k) {
                        values_ok = values_ok && memcmp(&got[si], &grads_x[k], 4) == 0;
                        owned[si] = true;
                    });
                    expect(values_ok, "the gradient shard holds the owned gradients (half + half) bit for bit", N,
                           bucket_bytes, r);
                    for (size_t i = 0; i < got.size(); i++)
                        if (!owned[i]) got[i] = poison;
                    host_floats_to_device(shard_grads[r], got.data(), got.size());
                }
            }
            double sum_sq = 0.0;
            for (int r = 0; r < N; r++) {
                const float norm = zero_grad_norm(shards[r], rank_grads[r]);
                expect(std::isfinite(norm) && norm > 0.0f, "a rank's gradient norm is finite (reads owned places only)",
                       N, bucket_bytes, r);
                const float again = zero_grad_norm(shards[r], rank_grads[r]);
                expect(memcmp(&norm, &again, 4) == 0, "a rank's gradient norm repeats bit for bit", N, bucket_bytes, r);
                // the trainer's path: the square queued on the device (what the ranks sum), the host's float product
                float* d_square = nullptr;
                cudaCheck(cudaMalloc(&d_square, sizeof(float)));
                cudaCheck(cudaMemset(d_square, 0xFF, sizeof(float)));
                if (z == 2) zero_grad_norm_shard_square_queue(shards[r], shard_grads[r], d_square, 0);
                else zero_grad_norm_square_queue(shards[r], rank_grads[r], d_square, 0);
                float square = 0.0f;
                cudaCheck(cudaMemcpy(&square, d_square, sizeof(float), cudaMemcpyDeviceToHost));
                cudaCheck(cudaFree(d_square));
                const float host_square = norm * norm;
                expect(memcmp(&square, &host_square, 4) == 0,
                       "the queued squared norm is the host's square of the norm bit for bit", N, bucket_bytes, r);
                if (z == 2) {
                    const float from_shard = zero_grad_norm_shard(shards[r], shard_grads[r]);
                    expect(memcmp(&norm, &from_shard, 4) == 0,
                           "the gradient shard's norm is the flat owned gradients' norm bit for bit", N, bucket_bytes, r);
                }
                sum_sq += (double)norm * norm;
            }
            expect(std::fabs(std::sqrt(sum_sq) - whole_norm) <= 1e-5 * whole_norm,
                   "the ranks' norms combine into the whole gradient's norm (rel 1e-5)", N, bucket_bytes, -1);
            // the trainer's step reads the gradient scale from the device (its host field NaN): ranks from the
            // second do, the first takes it by value; the same bits either way
            float* d_scale = nullptr;
            cudaCheck(cudaMalloc(&d_scale, sizeof(float)));
            cudaCheck(cudaMemcpy(d_scale, &s.grad_scale, sizeof(float), cudaMemcpyHostToDevice));
            AdamWStep s_device = s;
            s_device.grad_scale = NAN, s_device.grad_scale_at = d_scale;
            for (int r = 0; r < N; r++) {
                // odd ranks in two launches as the trainer with several ranks (outside the layers first), even ranks
                // in one: the same bits either way
                const std::vector<ZeroChunks> parts = r % 2 ? std::vector<ZeroChunks>{ZeroChunks::Outer, ZeroChunks::Layers}
                                                            : std::vector<ZeroChunks>{ZeroChunks::All};
                const AdamWStep& sr = r > 0 ? s_device : s;
                for (ZeroChunks part : parts) {
                    if (z == 2)
                        zero_adamw_update_shard(shards[r], rank_params[r], sh_master[r], shard_grads[r], sh_m[r],
                                                sh_v[r], table, sr, 0, part);
                    else
                        zero_adamw_update(shards[r], rank_params[r], sh_master[r], rank_grads[r], sh_m[r], sh_v[r],
                                          table, sr, 0, part);
                }
            }
            cudaCheck(cudaFree(d_scale));
            cudaCheck(cudaDeviceSynchronize());
            // before the gather: owned elements updated, the others untouched
            for (int r = 0; r < N; r++) {
                const std::vector<float> got = floatX_to_host(rank_params[r], P);
                std::vector<float> expect_r = params;
                zero_for_each_owned(plan, N, r, [&](size_t, size_t k) { expect_r[k] = want_params[k]; });
                expect(same_bits(got, expect_r), "a rank's parameters before the gather (owned updated, others not)", N,
                       bucket_bytes, r);
            }
            // the all-gather: every rank's slice of each bucket into everyone's parameters
            floatX* gathered = nullptr;
            cudaCheck(cudaMalloc(&gathered, max_padded * sizeof(floatX)));
            const std::vector<float> poisoned_staging(max_padded, poison);
            for (const GradBucket& b : plan) {
                const size_t per = b.shard_elements(N);
                for (int r = 0; r < N; r++) {
                    host_floats_to_device(staging, poisoned_staging.data(), max_padded);
                    zero_pack_owned(b, rank_params[r], staging, N, r, 0);
                    cudaCheck(cudaMemcpy(gathered + (size_t)r * per, staging + (size_t)r * per, per * sizeof(floatX),
                                         cudaMemcpyDeviceToDevice));
                }
                for (int r = 0; r < N; r++) zero_unpack(b, gathered, rank_params[r], 0);
            }
            cudaCheck(cudaDeviceSynchronize());
            std::vector<std::vector<float>> host_master(N), host_m(N), host_v(N);
            for (int r = 0; r < N; r++) {
                expect(same_bits(floatX_to_host(rank_params[r], P), want_params), "parameters after the gather = unsharded", N,
                       bucket_bytes, r);
                const size_t n = shards[r].elements;
                host_m[r] = to_host(sh_m[r], n);
                host_v[r] = to_host(sh_v[r], n);
                if (with_master) host_master[r] = to_host(sh_master[r], n);
                // padding: in no segment, so never written
                std::vector<bool> owned(n, false);
                zero_for_each_owned(plan, N, r, [&](size_t sidx, size_t) { owned[sidx] = true; });
                bool pad_ok = true;
                for (size_t i = 0; i < n; i++) {
                    if (owned[i]) continue;
                    if (memcmp(&host_m[r][i], &poison, 4) != 0 || memcmp(&host_v[r][i], &poison, 4) != 0) pad_ok = false;
                    if (with_master && memcmp(&host_master[r][i], &poison, 4) != 0) pad_ok = false;
                }
                expect(pad_ok, "shard padding untouched", N, bucket_bytes, r);
            }
            std::vector<float> flat(P);
            zero_flat_from_shards(plan, N, host_m, flat.data());
            expect(same_bits(flat, want_m), "m reassembled = unsharded", N, bucket_bytes, -1);
            zero_flat_from_shards(plan, N, host_v, flat.data());
            expect(same_bits(flat, want_v), "v reassembled = unsharded", N, bucket_bytes, -1);
            if (with_master) {
                zero_flat_from_shards(plan, N, host_master, flat.data());
                expect(same_bits(flat, want_master), "master weights reassembled = unsharded", N, bucket_bytes, -1);
            }
            for (int r = 0; r < N; r++) {
                zero_shard_free(&shards[r]);
                cudaCheck(cudaFree(rank_params[r]));
                if (sh_master[r]) cudaCheck(cudaFree(sh_master[r]));
                cudaCheck(cudaFree(sh_m[r]));
                cudaCheck(cudaFree(sh_v[r]));
                cudaCheck(cudaFree(rank_grads[r]));
                if (shard_grads[r]) cudaCheck(cudaFree(shard_grads[r]));
            }
            cudaCheck(cudaFree(staging));
            cudaCheck(cudaFree(gathered));
            cases++;
        }
    }
    cudaCheck(cudaFree(d_half));
    backward_into_slots();
    printf("test_zero (%s): %d cases (-z 1 and -z 2 x N = 1, 2, 3 x 2 bucket sizes, %zu parameters): sharded AdamW + "
           "simulated reduce-scatter / all-gather = adamw_update bit for bit, norms combine, -z 2's slots and "
           "gradient shard; a backward into -z 2's slots = the flat backward bit for bit: %s\n",
           PRECISION_NAME, cases, P, failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
