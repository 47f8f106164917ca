// Delayed per-tensor scaling for FP8 (TransformerEngine's recipe, docs/FP8.md): every FP8 tensor of a step has an
// amax history of H steps (a ring), a scale (what its cast multiplies by) and a descale (1 / scale, what its GEMM
// multiplies by). During a step the casts fold max |x| into `amax` (llmc/kernels/fp8/cast_transpose.cuh); after it,
// fp8_update_scales writes that into the ring at step % H, zeroes `amax` for the next step, and sets the scale from
// the largest amax in the ring (fp8_scale_from_amax: a power of two, margin bits below the format's top; an empty or
// non-finite window keeps the previous scale). Max and powers of two: the update is exact and deterministic, and the
// kernel runs llmc/core/fp8.h's fp8_update_one, the same function the CPU tests check. The ring, scales and step
// are run state (saved and restored with the checkpoint, so a resumed run casts with the same scales).
#pragma once

#include <cmath>
#include <cstdint>

#include "llmc/core/cuda_common.h"
#include "llmc/core/fp8.h"

// Every tensor's state, device arrays (tensors x history for the ring).
struct Fp8Scaling {
    int tensors = 0, history = 0, margin = 0;
    float *amax_history = nullptr, *amax = nullptr, *scale = nullptr;
    float* descale = nullptr;  // tensor t's at descale[t * kFp8DescaleStride] (a GEMM's scale pointer)
    const uint8_t* formats = nullptr;  // Fp8Format of each tensor
};

__global__ void fp8_update_scales_kernel(Fp8Scaling s, int step) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= s.tensors) return;
    fp8_update_one(s.amax_history + (size_t)t * s.history, s.history, step, s.amax + t, (Fp8Format)s.formats[t],
                   s.margin, s.scale + t, s.descale + (size_t)t * kFp8DescaleStride);
}

// After step `step` (0-based) has cast every tensor.
inline void fp8_update_scales(const Fp8Scaling& s, int step, cudaStream_t stream) {
    if (s.tensors < 1) return;
    fp8_update_scales_kernel<<<(s.tensors + 255) / 256, 256, 0, stream>>>(s, step);
    cudaCheck(cudaGetLastError());
}
