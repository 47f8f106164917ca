// The catalogue of flash attention tile configurations the dev programs sweep: attention_forward variant 5 and
// attention_backward variant 3 take the configuration number in their "block" column (-k). The engine compiles
// only its defaults (llmc/kernels/attention/attention_flash.cuh); the other configurations are instantiated here, so only the dev
// programs pay their compile time. Numbers are kept stable: docs/PERFORMANCE.md quotes them.
//   forward   0: the engine's default (HS 64: 3; HS 128: 1)
//             1: Br 64 (4 warps), Bc 64, >= 2 blocks/SM     2: Br 128 (8 warps), Bc 64, >= 1 block/SM
//             3: Br 64 (4 warps), Bc 128, >= 2 blocks/SM    4: as 1 with >= 4 (HS 64) / 3 (HS 128) blocks/SM
//             5: Br 128 (4 warps of 32 rows each), Bc 64     6: as 5 with Bc 32    (HS 128: 5, 6 = 1; they spill)
//   backward  0: the engine's default (HS 64: 4; HS 128: 1)
//             1: Br = Bc = 64 in both kernels (4 warps), operand fragments re-read from shared memory each tile
//             2: as 1, with the loop-invariant operand fragments held in registers
//             3: each kernel's block owns 128 rows (8 warps) and streams 64-row tiles: dQ Br 128 / Bc 64,
//                dK/dV Bc 128 / Br 64; fragments re-read
//             4: HS 64: as 2, registers capped for >= 3 blocks/SM; HS 128: as 1 (it asks for >= 2 blocks/SM,
//                which its 255 registers already allow: the same code; a real cap spills)
#pragma once

#include <cstdio>
#include <type_traits>

#include "llmc/kernels/attention/attention_flash.cuh"

constexpr int kFlashForwardConfigs = 6;
constexpr int kFlashBackwardConfigs = 4;

namespace flash_configs {
using flash::BackwardConfig;
using flash::BackwardDKVConfig;
using flash::BackwardDQConfig;
using flash::ForwardConfig;

// ForwardConfig<HS, Br, Bc, blocks/SM, 16-row m-tiles per warp>
template <int HS> using Forward1 = ForwardConfig<HS, 64, 64, 2>;
template <int HS> using Forward2 = ForwardConfig<HS, 128, 64, 1>;
template <int HS> using Forward3 = ForwardConfig<HS, 64, 128, 2>;
template <int HS> using Forward4 = ForwardConfig<HS, 64, 64, HS == 64 ? 4 : 3>;
template <int HS> using Forward5 = ForwardConfig<HS, 128, 64, 1, 2>;
template <int HS> using Forward6 = ForwardConfig<HS, 128, 32, 1, 2>;

// Both kernels with the same warps, fragment hoisting and register cap; B*Config<HS, Br, Bc, hoist, blocks/SM>.
template <int HS, int DQ_Br, int DQ_Bc, int DKV_Br, int DKV_Bc, bool kHoist, int kMinBlocks>
using Backward = BackwardConfig<BackwardDQConfig<HS, DQ_Br, DQ_Bc, kHoist, kMinBlocks>,
                                BackwardDKVConfig<HS, DKV_Br, DKV_Bc, kHoist, kMinBlocks>>;
template <int HS> using Backward1 = Backward<HS, 64, 64, 64, 64, false, 1>;
template <int HS> using Backward2 = Backward<HS, 64, 64, 64, 64, true, 1>;
template <int HS> using Backward3 = Backward<HS, 128, 64, 64, 128, false, 1>;
template <int HS> using Backward4 = Backward<HS, 64, 64, 64, 64, HS == 64, HS == 64 ? 3 : 2>;

// Config 0 is the engine's default; these say which numbered configuration it is.
static_assert(std::is_same_v<flash::DefaultConfigs<64>::Forward, Forward3<64>>, "HS 64 forward default = 3");
static_assert(std::is_same_v<flash::DefaultConfigs<128>::Forward, Forward1<128>>, "HS 128 forward default = 1");
static_assert(std::is_same_v<flash::DefaultConfigs<64>::Backward, Backward4<64>>, "HS 64 backward default = 4");
static_assert(std::is_same_v<flash::DefaultConfigs<128>::Backward, Backward1<128>>, "HS 128 backward default = 1");
}  // namespace flash_configs

// attention_flash_forward with tile configuration `config` (0 = the engine's default).
inline cudaError_t attention_flash_forward_config(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B,
                                                  int T, int NH, int HS, cudaStream_t stream, int config) {
    using namespace flash_configs;
    if (config == 0) return attention_flash_forward(out, lse, qkv, B, T, NH, HS, stream);
    if (!flash::head_size_supported(HS, "attention_flash_forward")) return cudaErrorInvalidValue;
    switch (HS * 10 + config) {
        case 641: return flash::launch_forward<Forward1<64>>(out, lse, qkv, B, T, NH, stream);
        case 642: return flash::launch_forward<Forward2<64>>(out, lse, qkv, B, T, NH, stream);
        case 643: return flash::launch_forward<Forward3<64>>(out, lse, qkv, B, T, NH, stream);
        case 644: return flash::launch_forward<Forward4<64>>(out, lse, qkv, B, T, NH, stream);
        case 645: return flash::launch_forward<Forward5<64>>(out, lse, qkv, B, T, NH, stream);
        case 646: return flash::launch_forward<Forward6<64>>(out, lse, qkv, B, T, NH, stream);
        case 1281: return flash::launch_forward<Forward1<128>>(out, lse, qkv, B, T, NH, stream);
        case 1282: return flash::launch_forward<Forward2<128>>(out, lse, qkv, B, T, NH, stream);
        case 1283: return flash::launch_forward<Forward3<128>>(out, lse, qkv, B, T, NH, stream);
        case 1284: return flash::launch_forward<Forward4<128>>(out, lse, qkv, B, T, NH, stream);
        case 1285:  // two m-tiles per warp spill at HS 128: 5 and 6 run 1
        case 1286: return flash::launch_forward<Forward1<128>>(out, lse, qkv, B, T, NH, stream);
    }
    fprintf(stderr, "attention_flash_forward: config %d is not one of 0..%d\n", config, kFlashForwardConfigs);
    return cudaErrorInvalidValue;
}

// attention_flash_backward with tile configuration `config` (0 = the engine's default).
inline cudaError_t attention_flash_backward_config(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                                                   const __nv_bfloat16* out, const float* lse,
                                                   const __nv_bfloat16* qkv, int B, int T, int NH, int HS,
                                                   float* workspace, cudaStream_t stream, int config) {
    using namespace flash_configs;
    // config 0: the mma.sync default (the Hopper kernels are attention_backward's variants 4-6)
    if (config == 0) return attention_flash_backward_mma(dqkv, dout, out, lse, qkv, B, T, NH, HS, workspace, stream);
    if (!flash::head_size_supported(HS, "attention_flash_backward")) return cudaErrorInvalidValue;
    float* D = workspace;
    switch (HS * 10 + config) {
        case 641: return flash::launch_backward<Backward1<64>>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 642: return flash::launch_backward<Backward2<64>>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 643: return flash::launch_backward<Backward3<64>>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 644: return flash::launch_backward<Backward4<64>>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 1281: return flash::launch_backward<Backward1<128>>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 1282: return flash::launch_backward<Backward2<128>>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 1283: return flash::launch_backward<Backward3<128>>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
        case 1284: return flash::launch_backward<Backward4<128>>(dqkv, D, dout, out, lse, qkv, B, T, NH, stream);
    }
    fprintf(stderr, "attention_flash_backward: config %d is not one of 0..%d\n", config, kFlashBackwardConfigs);
    return cudaErrorInvalidValue;
}
