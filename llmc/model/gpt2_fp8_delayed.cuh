// Delayed scaling where it lets a producer cast an FP8 operand as it writes it (docs/FP8.md): fcproj's input gelu(fch),
// cast (y, yT) as fch is read once; fc's output gradient, cast as the GELU backward computes it
// (fp8_cast_transpose_dgelu) instead of being written in bf16 first; qkv's and fc's inputs, written in E4M3 by the
// LayerNorms ahead of them (LayerNormFp8Out), their yT a transpose of those bytes; and the four weights, cast once per
// optimizer step without an amax pass. Every other operand keeps current scaling. Each of those eight per layer has an
// amax history of H micro-steps. After each micro-step's backward, gpt2_fp8_delayed_update writes the amaxes their
// casts folded into the histories, at the device's micro-step counter (so a replayed CUDA graph advances it), and sets
// the activations' and gradient's scales and descales from the largest amax of each window (fp8_update_one: powers of
// two, exact, deterministic). A weight's history takes its amax at the update after it was cast, at the step's position
// (counter / G: it is cast at most once a step, so its window is its last H casts whatever G is), and its scale is set
// as it is cast, from the window's max (Fp8Delayed::window), so the micro-steps that reuse the copy keep the descale it
// was cast with. Until the first update (Fp8Delayed::calibrated) the eight run current scaling, which fills the
// histories: no cast uses a scale its tensor was not measured for. The histories, the counter and the scales are run
// state (gpt2_fp8_delayed_state / _restore): a resumed run casts with the same scales, bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/model/gpt2_fp8.cuh"

// Why -fp8h cannot run with several processes (yet).
inline std::string fp8_history_multi_gpu_problem() {
    return "one process only for now: each rank's amaxes would fill histories of its own (they are not reduced "
           "across ranks), and a checkpoint keeps rank 0's";
}

inline void gpt2_fp8_delayed_allocate(Fp8Layers* f, int H, int G) {
    if (f->blocks()) {  // the LayerNorms would write E4M3 only and the GELU backward go into the cast: not blocks'
        fprintf(stderr, "error: delayed scaling (-fp8h) and LLMC_FP8_BLOCKS=1 do not go together\n");
        exit(EXIT_FAILURE);
    }
    f->delayed.H = H, f->delayed.G = G;
    const size_t ops = (size_t)kFp8DelayedPerLayer * f->L, floats = ops * (H + 1);  // histories, windows
    char* block;
    cudaCheck(cudaMalloc(&block, floats * sizeof(float) + sizeof(long long)));
    cudaCheck(cudaMemset(block, 0, floats * sizeof(float) + sizeof(long long)));
    f->delayed.history = (float*)block;
    f->delayed.window = f->delayed.history + ops * H;
    f->delayed.counter = (long long*)(block + floats * sizeof(float));  // 8-byte aligned: ops is even
    static_assert(kFp8DelayedPerLayer % 2 == 0, "the counter after the histories, 8-byte aligned");
    f->delayed.updates = 0;
}

__global__ void gpt2_fp8_delayed_update_kernel(float* amax, float* scale, float* descale, float* history,
                                               float* window, long long* counter, int operands, int H, int G,
                                               Fp8Format grads) {
    const long long step = *counter;  // micro-steps; a run (or a resume) starts at a step's first
    for (int t = threadIdx.x; t < operands; t += blockDim.x) {
        const size_t s = gpt2_fp8_delayed_slot(t);
        const float seen = amax[s];
        if (gpt2_fp8_delayed_is_weight(t)) {  // 0 unless it was cast since the last update
            if (seen != 0.f) history[(size_t)t * H + step / G % H] = seen;
            amax[s] = 0.f;
            window[t] = fp8_window_max(history + (size_t)t * H, H);  // its next cast's amax
            if (!isfinite(seen)) descale[kFp8DescaleStride * s] = NAN;  // the copy saturated it: the next GEMMs say so
            continue;
        }
        // (an overflow made this step's descale NaN in the cast itself, ScaleSource::overflow_descale; the next
        // forward starts from 1 / scale again, gpt2_fp8_begin_forward)
        fp8_update_one(history + (size_t)t * H, H, (int)(step % H), amax + s, gpt2_fp8_delayed_format(t, grads), 0,
                       scale + s, descale + kFp8DescaleStride * s);
    }
    __syncthreads();  // every thread has read the counter
    if (threadIdx.x == 0) *counter = step + 1;
}

// After a micro-step's backward (queued on its stream; the caller counts it on the host: Fp8Delayed::updates).
inline void gpt2_fp8_delayed_update(const Fp8Layers& f, cudaStream_t stream) {
    gpt2_fp8_delayed_update_kernel<<<1, 128, 0, stream>>>(f.stats, f.scale(0), f.descale(0), f.delayed.history,
                                                         f.delayed.window, f.delayed.counter,
                                                         kFp8DelayedPerLayer * f.L, f.delayed.H, f.delayed.G,
                                                         f.grads);
    cudaCheck(cudaGetLastError());
}

// The run state's bytes (llmc/formats/run_state.h's FP8 section): int32 "FP8D", H, operands, 0; int64 the counter;
// then the operands' histories, scales and descales (fp32). Empty when delayed scaling is off. Waits for the stream.
constexpr int32_t kFp8DelayedMagic = 0x44385046;  // "FP8D"
inline std::vector<uint8_t> gpt2_fp8_delayed_state(const Fp8Layers& f, cudaStream_t stream) {
    if (!f.delayed.on()) return {};
    const int ops = kFp8DelayedPerLayer * f.L, H = f.delayed.H;
    std::vector<float> floats((size_t)ops * (H + 2));  // histories, then scales, then descales
    int64_t counter = 0;
    cudaCheck(cudaStreamSynchronize(stream));
    cudaCheck(cudaMemcpy(floats.data(), f.delayed.history, (size_t)ops * H * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&counter, f.delayed.counter, sizeof(counter), cudaMemcpyDeviceToHost));
    for (int t = 0; t < ops; t++) {
        const size_t s = gpt2_fp8_delayed_slot(t);
        cudaCheck(cudaMemcpy(&floats[(size_t)ops * H + t], f.scale(s), sizeof(float), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(&floats[(size_t)ops * (H + 1) + t], f.descale(s), sizeof(float), cudaMemcpyDeviceToHost));
    }
    const int32_t head[4] = {kFp8DelayedMagic, H, ops, 0};
    std::vector<uint8_t> out(sizeof(head) + sizeof(counter) + floats.size() * sizeof(float));
    memcpy(out.data(), head, sizeof(head));
    memcpy(out.data() + sizeof(head), &counter, sizeof(counter));
    memcpy(out.data() + sizeof(head) + sizeof(counter), floats.data(), floats.size() * sizeof(float));
    return out;
}

// Puts a checkpoint's FP8 section back (before the first step). Returns why the section is malformed ("" if not);
// a well-formed section this run cannot continue from (another -fp8h, none, the batch laid out otherwise: its
// histories were measured at another loss scale) leaves the histories to start over from this run's first
// micro-step, and *note says so.
inline std::string gpt2_fp8_delayed_restore(Fp8Layers* f, const std::vector<uint8_t>& bytes, bool reshaped,
                                            std::string* note) {
    note->clear();
    if (bytes.empty()) {
        if (f->delayed.on())
            *note = "the checkpoint has no FP8 amax histories (written without -fp8h): -fp8h " +
                    std::to_string(f->delayed.H) + " starts them from this run's first micro-step";
        return "";
    }
    int32_t head[4] = {};
    int64_t counter = -1;
    if (bytes.size() >= sizeof(head) + sizeof(counter)) {
        memcpy(head, bytes.data(), sizeof(head));
        memcpy(&counter, bytes.data() + sizeof(head), sizeof(counter));
    }
    const int fH = head[1], fops = head[2];
    if (head[0] != kFp8DelayedMagic || head[3] != 0 || fH < 1 || fH > 1024 || fops < 2 || fops > 1 << 14 ||
        counter < 0) {
        return "its FP8 section is not an amax-history record";
    }
    if (bytes.size() != sizeof(head) + sizeof(counter) + (size_t)fops * (fH + 2) * sizeof(float))
        return "its FP8 section's size does not match its " + std::to_string(fops) + " operands";
    std::vector<float> floats((size_t)fops * (fH + 2));
    memcpy(floats.data(), bytes.data() + sizeof(head) + sizeof(counter), floats.size() * sizeof(float));
    for (int t = 0; t < fops; t++) {  // powers of two within 2^-126..2^126 and their exact inverses, or it is damaged
        const float scale = floats[(size_t)fops * fH + t], descale = floats[(size_t)fops * (fH + 1) + t];
        int e = 0;
        const bool power =
            std::isfinite(scale) && scale > 0.f && std::frexp(scale, &e) == 0.5f && e >= -125 && e <= 127;
        if (!power || descale != (float)(1.0 / (double)scale)) return "its FP8 section holds a scale that is not one";
    }
    const std::string held = "the checkpoint's FP8 amax histories (-fp8h " + std::to_string(fH) + ")";
    if (!f->delayed.on()) {
        *note = held + " are not used: this run casts every FP8 operand with current scaling";
        return "";
    }
    if (fH != f->delayed.H || fops != kFp8DelayedPerLayer * f->L) {
        *note = held + " for " + std::to_string(fops) + " operands do not fit this run's (-fp8h " +
                std::to_string(f->delayed.H) + ", " + std::to_string(kFp8DelayedPerLayer * f->L) +
                " operands): they start over";
        return "";
    }
    if (reshaped) {
        *note = held + " were measured with the batch laid out otherwise (another loss scale): they start over";
        return "";
    }
    cudaCheck(cudaMemcpy(f->delayed.history, floats.data(), (size_t)fops * fH * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<float> window(fops, 0.f);  // what the last update left: the weights' windows of these histories
    for (int t = 0; t < fops; t++)
        if (gpt2_fp8_delayed_is_weight(t)) window[t] = fp8_window_max(&floats[(size_t)t * fH], fH);
    cudaCheck(cudaMemcpy(f->delayed.window, window.data(), fops * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(f->delayed.counter, &counter, sizeof(counter), cudaMemcpyHostToDevice));
    for (int t = 0; t < fops; t++) {
        const size_t slot = gpt2_fp8_delayed_slot(t);
        cudaCheck(cudaMemcpy(f->scale(slot), &floats[(size_t)fops * fH + t], sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(f->descale(slot), &floats[(size_t)fops * (fH + 1) + t], sizeof(float),
                             cudaMemcpyHostToDevice));
    }
    f->delayed.updates = counter;
    return "";
}
