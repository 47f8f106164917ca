#!/usr/bin/env python3
"""The PyTorch baseline of scripts/bench/bench_train.sh: GPT-2 trained the way a PyTorch user runs it, on one GPU.

The model is the project's PyTorch reference (scripts/reference/train_gpt2.py: pre-LN, tanh GELU, tied lm_head) with
its attention through torch's scaled_dot_product_attention (causal), the vocabulary padded to 50304 rows (tokens stay
below 50257), bf16 autocast over fp32 weights, torch.compile (unless --no-compile), fused AdamW (lr 3e-4, betas 0.9 /
0.95, eps 1e-8, weight decay 0.1 on the matrices), gradient clipping at 1.0: the recipe our trainer runs. Random
tokens: speed does not depend on them. Each step is timed with CUDA events after the warm-up steps (compilation
happens there); the median is printed:

    python3 scripts/bench/baselines/torch_train_step.py --depth 12 --B 16 --T 1024 [--steps 30] [--warmup 8]
    BASELINE torch.compile model=d12 B=16 T=1024 ms_per_step=... tok_per_s=... loss=... device=...

../shared/anchors/torch_gpt2_baseline.py is the workplace's fixed baseline for the same measurement; bench_train.sh
runs it beside this one when ANCHOR names it, so the two can be compared in one call.
"""
import argparse
import os
import statistics
import sys

import torch

_user_workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "reference"))
import train_gpt2 as ref  # noqa: E402  (the model and its parameter groups)

if _user_workspace is None:  # the reference asks cuBLAS for a small, deterministic workspace; a baseline does not
    os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)

PADDED_VOCAB, VOCAB = 50304, 50257


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depth", type=int, default=12, choices=sorted(int(k[1:]) for k in ref.PRESETS))
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=30, help="timed steps")
    ap.add_argument("--warmup", type=int, default=8, help="untimed steps first (torch.compile compiles here)")
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: torch_train_step.py needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    L, NH, C = ref.PRESETS[f"d{a.depth}"]
    model = ref.GPT(L, NH, C, PADDED_VOCAB, max(1024, a.T))
    model.init_weights(0.02, 0.0)
    for block in model.h:
        block.attn.fused = True
    model = model.cuda()
    opt = torch.optim.AdamW(ref.param_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_fn = model if a.no_compile else torch.compile(model)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    g = torch.Generator(device="cuda").manual_seed(1)
    batches = [torch.randint(0, VOCAB, (a.B, a.T + 1), device="cuda", generator=g) for _ in range(4)]
    loss = None
    for i in range(a.warmup):
        t = batches[i % len(batches)]
        loss = step(t[:, :-1], t[:, 1:])
    torch.cuda.synchronize()
    times = []
    for i in range(a.steps):
        t = batches[i % len(batches)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step(t[:, :-1], t[:, 1:])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = statistics.median(times)
    name = "torch.eager" if a.no_compile else "torch.compile"
    print(f"BASELINE {name} model=d{L} B={a.B} T={a.T} ms_per_step={ms:.2f} tok_per_s={a.B * a.T / ms * 1e3:.0f} "
          f"loss={loss.item():.3f} device={torch.cuda.get_device_name()}", flush=True)


if __name__ == "__main__":
    main()
