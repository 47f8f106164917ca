// How many SMs the persistent kernels (one block per SM, each walking its share of tiles) may fill. While a
// collective is in flight on the communication stream, its blocks hold some SMs; a persistent kernel sized for all
// of them would leave the rest of its blocks waiting for the collective to end, and its statically assigned tiles
// with them. The gradient exchange (llmc/distributed/grad_exchange.cuh) reserves LLMC_COMM_SMS SMs for exactly
// those windows (NCCL is capped to as many blocks); otherwise nothing is reserved. Read at launch time, so it holds
// for kernels queued one by one (the multi-GPU step), not inside a captured graph (one GPU, nothing reserved).
#pragma once

#include "llmc/core/cuda_common.h"

inline int& sm_reserved_for_comm() {
    static int n = 0;
    return n;
}
// SMs a persistent grid should size itself to (at least one).
inline int compute_sm_count() {
    const int n = device_sm_count() - sm_reserved_for_comm();
    return n > 0 ? n : 1;
}
