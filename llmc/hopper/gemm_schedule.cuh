// How the persistent Hopper GEMMs (the GELU backward, matmul_hopper_dgelu.cuh; dev/cuda's forward) spread output
// tiles over the SMs: one block per SM, each walking the tiles in an order that keeps its neighbours' operands in L2.
#pragma once

#include "llmc/hopper/arch.cuh"

namespace matmul_hopper {

// Output tile `tile` of a (tiles_m x tiles_n) grid, in groups of kGroupM tile rows: the blocks running at once
// share a band of A rows and sweep B, so both stay in L2.
__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int* tm, int* tn) {
    constexpr int kGroupM = 16;
    const int per_group = kGroupM * tiles_n;
    const int group = tile / per_group, first = group * kGroupM;
    const int rows = min(kGroupM, tiles_m - first);
    const int in_group = tile % per_group;
    *tm = first + in_group % rows;
    *tn = in_group / rows;
}

inline int num_sms() {
    static const int n = [] {
        int dev = 0, count = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev));
        return count;
    }();
    return n;
}

}  // namespace matmul_hopper

inline bool matmul_hopper_available() { return hopper::hopper_available(); }
