// GPU test of the copy-engine exchange (llmc/distributed/peer_copy.cuh) over N processes of one host, one GPU each:
//   tests/gpu/test_peer_copy N RANK DIR     (N processes with RANK 0..N-1 and one shared directory: the file rendezvous)
// Every rank fills a flat gradient buffer with its own random values (seeded by rank and round), then moves every
// layer bucket of a small model's plan as GradExchange does with -z 0: send_bucket on the lanes after an event
// of the "compute" stream, the bucket before summed (reduce_bucket) on the compute stream, then its means to every peer
// (gather_owned), the last bucket's sum and wait_gathered at the end. Every rank checks its whole buffer against the mean over ranks computed in
// fp64 from the same seeds: the layer buckets' places must be within one rounding of it (rel-L2 and max-abs, bounds
// printed), the tensors outside the layers (NCCL's, not moved here) must keep the rank's own values bit for bit. The
// receive ring starts as NaN, so an element summed from a place no peer wrote shows. Six rounds with two bucket
// sizes' worth of operations reuse the ring slots and the flags many times over.
// Then -z 2's path: every layer bucket in a slot-like area (its staging layout), each peer's slice sent whole
// (send_slices), the mean of the rank's slice summed into a gradient shard (reduce_slices), copied on a first and
// added on a second micro-step; the shard against the fp64 sum over both micro-steps of the means (two roundings).
// Last the parameters' all-gather (gather_owned into every peer's parameters, wait_gathered): every place of a layer
// bucket must hold its owner's value exactly (owners from the plan's staging order, not from PeerCopy's tables),
// every other place this rank's own.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "llmc/core/rand.h"
#include "llmc/distributed/multi_gpu.cuh"
#include "llmc/distributed/peer_copy.cuh"
#include "llmc/distributed/zero_plan.h"
#include "llmc/gpt2/gpt2_config.h"

namespace {

std::vector<float> rank_values(size_t n, int rank, int round) {
    Rng rng(mix_seed(1234 + (uint64_t)round, (uint64_t)rank));
    std::vector<float> v(n);
    for (float& x : v) x = rng.normal() * (1.0f + (float)rank);  // ranks of different scales
    std::vector<floatX> rounded(n);
    for (size_t i = 0; i < n; i++) rounded[i] = (floatX)v[i];   // what the buffer can hold
    for (size_t i = 0; i < n; i++) v[i] = (float)rounded[i];
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s N RANK DIR (N processes, one GPU each, one shared rendezvous directory)\n", argv[0]);
        return 2;
    }
    MultiGpuOptions o;
    o.num_processes = atoi(argv[1]), o.process_rank = atoi(argv[2]), o.init_method = "fs", o.rendezvous_dir = argv[3];
    MultiGpu mg = multi_gpu_init(o);
    const int N = mg.world, R = mg.rank;
    const GPT2Config c{64, 1000, 1024, 6, 4, 128};  // maxT V Vp L NH C
    size_t P = 0;
    for (const auto& t : gpt2_parameter_table(c)) P += t.numel;
    int failures = 0;
    cudaStream_t compute = nullptr;
    cudaEvent_t event = nullptr;
    cudaCheck(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    for (size_t bucket_bytes : {(size_t)0, (size_t)600000}) {  // one layer per bucket; several
        const std::vector<GradBucket> plan = zero_bucket_plan(c, bucket_bytes, N);
        floatX* grads = nullptr;
        cudaCheck(cudaMalloc(&grads, P * sizeof(floatX)));
        PeerCopy peer;
        if (!peer.init(mg, plan, grads)) {
            if (R == 0) printf("test_peer_copy: FAIL: the ranks could not map each other's memory\n");
            return 1;
        }
        cudaCheck(cudaMemset(peer.ring, 0xff, (size_t)PeerCopy::kSlots * N * peer.slot_elements * sizeof(floatX)));
        cudaCheck(cudaDeviceSynchronize());
        multi_gpu_barrier(mg);  // nobody writes into a ring before its owner has poisoned it
        std::vector<bool> moved(P, false);
        int layer_buckets = 0;
        for (const GradBucket& b : plan)
            if (b.first_layer >= 0) {
                layer_buckets++;
                for (const FlatRange& r : b.ranges)
                    for (size_t i = 0; i < r.count; i++) moved[r.offset + i] = true;
            }
        for (int round = 0; round < 6; round++) {
            std::vector<float> mine = rank_values(P, R, round);
            host_floats_to_device(grads, mine.data(), P);
            cudaCheck(cudaDeviceSynchronize());  // a copy from pageable memory may return before it lands
            auto reduce = [&](int k) {
                peer.reduce_bucket(k, grads, compute);
                cudaCheck(cudaEventRecord(event, compute));
                peer.lanes_wait(event);
                peer.gather_owned(k);
            };
            int unreduced = -1;
            for (int k = 0; k < (int)plan.size(); k++) {
                if (plan[(size_t)k].first_layer < 0) continue;
                cudaCheck(cudaEventRecord(event, compute));
                peer.lanes_wait(event);
                peer.send_bucket(k, grads);
                if (unreduced >= 0) reduce(unreduced);
                unreduced = k;
            }
            reduce(unreduced);
            peer.wait_gathered(compute);
            peer.join(compute);
            cudaCheck(cudaStreamSynchronize(compute));
            std::vector<float> got(P);
            device_to_host_floats(got.data(), grads, P);
            std::vector<std::vector<float>> every;
            for (int p = 0; p < N; p++) every.push_back(p == R ? mine : rank_values(P, p, round));
            double err2 = 0, ref2 = 0, max_abs = 0, max_ref = 0;
            size_t kept_wrong = 0, nonfinite = 0;
            for (size_t i = 0; i < P; i++) {
                if (!moved[i]) {
                    kept_wrong += got[i] != mine[i];
                    continue;
                }
                double ref = 0;
                for (int p = 0; p < N; p++) ref += every[(size_t)p][i];
                ref /= N;
                if (!std::isfinite(got[i])) nonfinite++;
                const double d = got[i] - ref;
                err2 += d * d, ref2 += ref * ref;
                max_abs = std::max(max_abs, std::fabs(d)), max_ref = std::max(max_ref, std::fabs(ref));
            }
            const double rel_l2 = std::sqrt(err2 / std::max(ref2, 1e-30));
            // one rounding to floatX of an fp32 sum: half an ulp of bf16 (2^-9 relative), nothing for fp32 but the sum
            const double rel_bound = kFloatXIsBF16 ? 4e-3 : 1e-6, abs_bound = (kFloatXIsBF16 ? 8e-3 : 1e-6) * max_ref;
            const bool ok = nonfinite == 0 && kept_wrong == 0 && rel_l2 <= rel_bound && max_abs <= abs_bound;
            failures += !ok;
            if (R == 0 || !ok)
                printf("test_peer_copy (%s, rank %d of %d): %d layer buckets of %s, round %d: rel-L2 %.3e (<= %.0e), "
                       "max-abs %.3e (<= %.3e), %zu non-finite, %zu places outside the layers changed: %s\n",
                       kFloatXIsBF16 ? "bf16" : "fp32", R, N, layer_buckets,
                       bucket_bytes ? "several layers" : "one layer", round, rel_l2, rel_bound, max_abs, abs_bound,
                       nonfinite, kept_wrong, ok ? "OK" : "FAIL");
        }
        peer.free(mg);
        cudaCheck(cudaFree(grads));
    }
    {  // -z 2
        const std::vector<GradBucket> plan = zero_bucket_plan(c, 0, N);
        std::vector<size_t> area_at, shard_at;
        size_t area_elements = 0, shard_elements = 0;
        for (const GradBucket& b : plan) {
            area_at.push_back(area_elements), shard_at.push_back(shard_elements);
            if (b.first_layer < 0) continue;
            area_elements += b.padded, shard_elements += b.shard_elements(N);
        }
        floatX *areas = nullptr, *shard = nullptr, *params = nullptr;
        cudaCheck(cudaMalloc(&areas, area_elements * sizeof(floatX)));
        cudaCheck(cudaMalloc(&shard, shard_elements * sizeof(floatX)));
        cudaCheck(cudaMalloc(&params, P * sizeof(floatX)));
        PeerCopy peer;
        if (!peer.init(mg, plan, params)) return 1;
        cudaCheck(cudaMemset(peer.ring, 0xff, (size_t)PeerCopy::kSlots * N * peer.slot_elements * sizeof(floatX)));
        cudaCheck(cudaMemset(shard, 0xff, shard_elements * sizeof(floatX)));
        cudaCheck(cudaDeviceSynchronize());
        multi_gpu_barrier(mg);
        for (int round = 0; round < 3; round++) {
            std::vector<double> ref(shard_elements, 0.0);
            for (int micro = 0; micro < 2; micro++) {
                const int seed = 100 + 2 * round + micro;
                const std::vector<float> mine = rank_values(area_elements, R, seed);
                host_floats_to_device(areas, mine.data(), area_elements);
                cudaCheck(cudaDeviceSynchronize());  // the pageable upload has landed
                std::vector<std::vector<float>> every;
                for (int p = 0; p < N; p++) every.push_back(p == R ? mine : rank_values(area_elements, p, seed));
                int unreduced = -1;
                auto reduce = [&](int k) {
                    const size_t per = plan[(size_t)k].shard_elements(N);
                    peer.reduce_slices(areas + area_at[(size_t)k], per, shard + shard_at[(size_t)k], micro > 0, compute);
                };
                for (int k = 0; k < (int)plan.size(); k++) {
                    if (plan[(size_t)k].first_layer < 0) continue;
                    const size_t per = plan[(size_t)k].shard_elements(N);
                    cudaCheck(cudaEventRecord(event, compute));
                    peer.lanes_wait(event);
                    peer.send_slices(areas + area_at[(size_t)k], per);
                    if (unreduced >= 0) reduce(unreduced);
                    unreduced = k;
                    for (size_t i = 0; i < per; i++) {
                        double sum = 0;
                        for (int p = 0; p < N; p++) sum += every[(size_t)p][area_at[(size_t)k] + (size_t)R * per + i];
                        ref[shard_at[(size_t)k] + i] += sum / N;
                    }
                }
                reduce(unreduced);
                peer.join(compute);  // the areas are overwritten next: every copy out of them done
                cudaCheck(cudaStreamSynchronize(compute));
                multi_gpu_barrier(mg);  // and every peer's copies of this micro-step out of theirs
            }
            std::vector<float> got(shard_elements);
            device_to_host_floats(got.data(), shard, shard_elements);
            double err2 = 0, ref2 = 0, max_abs = 0, max_ref = 0;
            size_t nonfinite = 0;
            for (size_t i = 0; i < shard_elements; i++) {
                if (!std::isfinite(got[i])) nonfinite++;
                const double d = got[i] - ref[i];
                err2 += d * d, ref2 += ref[i] * ref[i];
                max_abs = std::max(max_abs, std::fabs(d)), max_ref = std::max(max_ref, std::fabs(ref[i]));
            }
            const double rel_l2 = std::sqrt(err2 / std::max(ref2, 1e-30));
            // two roundings to floatX (the first micro-step's mean, then the sum)
            const double rel_bound = kFloatXIsBF16 ? 6e-3 : 2e-6, abs_bound = (kFloatXIsBF16 ? 8e-3 : 2e-6) * max_ref;
            const bool ok = nonfinite == 0 && rel_l2 <= rel_bound && max_abs <= abs_bound;
            failures += !ok;
            if (R == 0 || !ok)
                printf("test_peer_copy (%s, rank %d of %d): -z 2, slices into a gradient shard over 2 micro-steps, "
                       "round %d: rel-L2 %.3e (<= %.0e), max-abs %.3e (<= %.3e), %zu non-finite: %s\n",
                       kFloatXIsBF16 ? "bf16" : "fp32", R, N, round, rel_l2, rel_bound, max_abs, abs_bound, nonfinite,
                       ok ? "OK" : "FAIL");
        }
        {  // the parameters' all-gather (-z 1, -z 2): every place of a layer bucket holds its owner's value
            const std::vector<float> mine = rank_values(P, R, 999);
            host_floats_to_device(params, mine.data(), P);
            cudaCheck(cudaDeviceSynchronize());
            multi_gpu_barrier(mg);  // nobody's values land here before this rank's upload
            cudaCheck(cudaEventRecord(event, compute));
            peer.lanes_wait(event);
            for (int k = 0; k < (int)plan.size(); k++) {
                if (plan[(size_t)k].first_layer < 0) continue;
                peer.gather_owned(k);
                peer.wait_gathered(peer.recv);
            }
            cudaCheck(cudaStreamSynchronize(peer.recv));
            peer.join(compute);
            cudaCheck(cudaStreamSynchronize(compute));
            std::vector<float> got(P);
            device_to_host_floats(got.data(), params, P);
            std::vector<std::vector<float>> every;
            for (int p = 0; p < N; p++) every.push_back(p == R ? mine : rank_values(P, p, 999));
            // each layer place's owner from the plan alone (staging index -> flat place), not from PeerCopy's tables
            std::vector<int> owner(P, -1);
            size_t wrong = 0, checked = 0, twice = 0;
            for (const GradBucket& b : plan) {
                if (b.first_layer < 0) continue;
                const size_t per = b.shard_elements(N);
                for (size_t i = 0; i < b.elements; i++) {
                    const size_t f = zero_staging_to_flat(b, i);
                    twice += owner[f] >= 0;
                    owner[f] = (int)(i / per);
                }
            }
            for (size_t i = 0; i < P; i++, checked++)  // outside the layers: untouched, this rank's own
                wrong += got[i] != every[(size_t)(owner[i] >= 0 ? owner[i] : R)][i];
            wrong += twice;
            failures += wrong != 0;
            if (R == 0 || wrong)
                printf("test_peer_copy (%s, rank %d of %d): the parameters' all-gather: %zu places checked, %zu wrong: %s\n",
                       kFloatXIsBF16 ? "bf16" : "fp32", R, N, checked, wrong, wrong ? "FAIL" : "OK");
        }
        peer.free(mg);
        cudaCheck(cudaFree(areas));
        cudaCheck(cudaFree(shard));
        cudaCheck(cudaFree(params));
    }
    const int all_failures = (int)multi_gpu_sum(mg, (float)failures);
    if (R == 0) printf("test_peer_copy: %s (%d failed rounds over %d ranks)\n", all_failures ? "FAIL" : "PASS", all_failures, N);
    multi_gpu_free(mg);
    return all_failures ? 1 : 0;
}
