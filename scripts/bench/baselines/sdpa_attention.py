#!/usr/bin/env python3
"""The PyTorch baseline of scripts/bench/bench_attention.sh: causal attention through torch's
scaled_dot_product_attention in bf16, one backend at a time (FLASH_ATTENTION: FlashAttention-2; CUDNN_ATTENTION;
EFFICIENT_ATTENTION; MATH), forward and forward + backward, on q, k, v of shape (B, NH, T, HS) from randn.
Each call is timed with CUDA events after 10 warm-up calls, back to back (caches warm, as the engine's "warm" column);
the median of --iters calls is printed. FLOPs: causal forward 2·B·NH·T²·HS, forward + backward 3.5 times that.

    python3 scripts/bench/baselines/sdpa_attention.py --shapes "8,12,1024,64;4,12,4096,64" [--iters 200]
    SDPA backend=CUDNN_ATTENTION B=8 NH=12 T=1024 HS=64 fwd_ms=... fwd_tflops=... fwdbwd_ms=... fwdbwd_tflops=...

../shared/anchors/sdpa_baseline.py is the workplace's fixed baseline for the same measurement; bench_attention.sh runs
it beside this one when ANCHOR names it.
"""
import argparse
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, iters, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="8,12,1024,64", help="B,NH,T,HS[;B,NH,T,HS...]")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--backends", default="FLASH_ATTENTION,CUDNN_ATTENTION,EFFICIENT_ATTENTION,MATH")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: sdpa_attention.py needs a CUDA GPU")
    try:
        shapes = [tuple(int(v) for v in s.split(",")) for s in a.shapes.split(";") if s]
        assert all(len(s) == 4 for s in shapes)
    except (ValueError, AssertionError):
        sys.exit(f"error: --shapes {a.shapes!r}: expected B,NH,T,HS[;B,NH,T,HS...]")
    backends = []
    for name in a.backends.split(","):
        if not hasattr(SDPBackend, name):
            sys.exit(f"error: --backends: no SDPA backend {name!r} in this PyTorch")
        backends.append((name, getattr(SDPBackend, name)))
    torch.manual_seed(0)
    for B, NH, T, HS in shapes:
        q, k, v = (torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
        flops = 2.0 * B * NH * T * T * HS  # causal: half of QKᵀ and PV each
        for name, backend in backends:
            try:
                with sdpa_kernel(backend):
                    def fwd():
                        with torch.no_grad():
                            F.scaled_dot_product_attention(q, k, v, is_causal=True)

                    def fwd_bwd():
                        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dout)
                        q.grad = k.grad = v.grad = None

                    t_fwd, t_both = median_ms(fwd, a.iters), median_ms(fwd_bwd, a.iters)
            except RuntimeError as e:  # the backend does not take this shape or GPU
                print(f"SDPA backend={name} B={B} NH={NH} T={T} HS={HS} unsupported: {str(e).splitlines()[0][:80]}")
                continue
            print(f"SDPA backend={name} B={B} NH={NH} T={T} HS={HS} fwd_ms={t_fwd:.4f} "
                  f"fwd_tflops={flops / t_fwd / 1e9:.1f} fwdbwd_ms={t_both:.4f} "
                  f"fwdbwd_tflops={3.5 * flops / t_both / 1e9:.1f}", flush=True)


if __name__ == "__main__":
    main()
