// AdamW for the CPU trainer: the moments m and v (fp32, like the parameters: no master copy), the global gradient
// norm, clipping, the update, and the state in checkpoints in the layout every trainer shares
// (llmc/checkpoint/checkpoint.h): [m][v], each fp32 in gpt2_parameter_table order. It reads that and the GPU's BF16
// layout [fp32 master weights][m][v], whose master weights then become the parameters (they are the run's exact
// weights; the model file beside them holds them rounded to bf16).
// The update is the GPU kernel's (llmc/kernels/adamw.cuh), operation for operation:
//   g = grad * scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²; p -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p)
// with weight decay only on the tensors the parameter table marks. Every sum runs in a fixed order, whatever the
// number of threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/cpu/gpt2.h"
#include "llmc/cpu/simd.h"

namespace cpu {

struct AdamWSettings {
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
};

struct AdamW {
    struct Result {
        float grad_norm = 0, grad_scale = 1;  // the global norm before clipping; the factor clipping applied
    };

    AdamWSettings settings;
    std::vector<float> m, v;

    void init(const GPT2& model, const AdamWSettings& s) {
        settings = s;
        m.assign(model.num_parameters, 0.0f);
        v.assign(model.num_parameters, 0.0f);
    }

    // sqrt(sum of grad²): per chunk of kNormChunk in fp32 vectors, the chunks added in order in double.
    static float grad_norm(const std::vector<float>& grads) {
        constexpr size_t kNormChunk = 1 << 16;
        const size_t n = grads.size(), chunks = (n + kNormChunk - 1) / kNormChunk;
        std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static)
        for (long c = 0; c < (long)chunks; c++) {
            const size_t i0 = (size_t)c * kNormChunk, i1 = std::min(n, i0 + kNormChunk);
            vfloat acc = vfloat{};
            size_t i = i0;
            for (; i + kVec <= i1; i += kVec) {
                const vfloat g = vload(grads.data() + i);
                acc += g * g;
            }
            double s = vsum(acc);
            for (; i < i1; i++) s += (double)grads[i] * grads[i];
            partial[c] = s;
        }
        double total = 0;
        for (double p : partial) total += p;
        return (float)std::sqrt(total);
    }

    // One step (t >= 1) with learning rate lr, the gradient norm clipped to grad_clip (0: no clipping).
    Result step(GPT2& model, float lr, float grad_clip, int t) {
        Result r;
        r.grad_norm = grad_norm(model.grads);
        r.grad_scale = (grad_clip > 0 && r.grad_norm > grad_clip) ? grad_clip / r.grad_norm : 1.0f;
        const AdamWSettings& s = settings;
        const float bc1 = 1.0f - powf(s.beta1, (float)t), bc2 = 1.0f - powf(s.beta2, (float)t);
        const auto table = gpt2_parameter_table(model.config);
        for (int i = 0; i < kNumParameterTensors; i++) {
            const size_t off = model.offsets[i], n = table[i].numel;
            const float wd = table[i].weight_decay ? s.weight_decay : 0.0f;
            float* p = model.params.data() + off;
            const float* g = model.grads.data() + off;
            float* mi = m.data() + off;
            float* vi = v.data() + off;
            const float scale = r.grad_scale, b1 = s.beta1, b2 = s.beta2, eps = s.eps;
#pragma omp parallel for simd schedule(static)
            for (size_t k = 0; k < n; k++) {
                const float gk = g[k] * scale;
                mi[k] = std::fma(b1, mi[k], (1.0f - b1) * gk);
                vi[k] = std::fma(b2, vi[k], ((1.0f - b2) * gk) * gk);
                const float mhat = mi[k] / bc1, vhat = vi[k] / bc2;
                p[k] = std::fma(-lr, std::fma(wd, p[k], mhat / (std::sqrt(vhat) + eps)), p[k]);
            }
        }
        return r;
    }

    // ---- checkpoints
    std::vector<uint8_t> state_to_host() const {
        std::vector<uint8_t> out((m.size() + v.size()) * sizeof(float));
        memcpy(out.data(), m.data(), m.size() * sizeof(float));
        memcpy(out.data() + m.size() * sizeof(float), v.data(), v.size() * sizeof(float));
        return out;
    }

    // [m][v], or [master weights][m][v] (a BF16 GPU run's): the master weights replace the model's parameters.
    // `path` names the file in the error when the size fits neither.
    void state_from_host(const std::vector<uint8_t>& state, const std::string& path, GPT2* model) {
        const size_t P = model->num_parameters, array = P * sizeof(float);
        const bool with_master = state.size() == 3 * array;
        if (state.size() != 2 * array && !with_master) {
            file_error(path, "optimizer state is %zu bytes; this model (%zu parameters) needs %zu (AdamW m, v) or "
                       "%zu (with the fp32 master weights of a BF16 GPU run): a different model?", state.size(), P,
                       2 * array, 3 * array);
        }
        const uint8_t* src = state.data();
        if (with_master) {
            memcpy(model->params.data(), src, array);
            src += array;
        }
        memcpy(m.data(), src, array);
        memcpy(v.data(), src + array, array);
    }
};

}  // namespace cpu
