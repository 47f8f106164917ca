#!/usr/bin/env python3
"""The Hugging Face baseline of scripts/bench/bench_generate.sh: transformers' GPT2LMHeadModel.generate on the same
weights (a directory gpt2_convert to-hf wrote), greedy, B prompts of P tokens (random ids, seed 0), exactly N new
tokens (no stop at end of text). Modes: eager (the default cache), static (the static KV cache with the forward
compiled by torch.compile: minutes of compilation first).
Time per new token = (time for N tokens − time for 1 token) / (N − 1), the best of 3 runs each, so the prompt's
prefill is not counted; tokens/s = B·N / the time for N tokens.

    python3 scripts/bench/baselines/hf_generate.py --model-dir DIR --B 1 --P 64 --N 256 [--dtype bf16] [--modes eager]
    BASELINE hf-generate eager model=d12 B=1 P=64 N=256 dtype=bf16 ms_per_token=... tok_per_s=...
        prefill_plus_first_ms=... device=...

../shared/anchors/hf_generate_baseline.py is the workplace's fixed baseline for the same measurement;
bench_generate.sh runs it beside this one when ANCHOR names it.
"""
import argparse
import sys
import time

import torch
from transformers import GPT2LMHeadModel


def generate_seconds(model, ids, n, **kw):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                         min_new_tokens=n, pad_token_id=model.config.eos_token_id, **kw)
    torch.cuda.synchronize()
    if out.shape[1] != ids.shape[1] + n:
        sys.exit(f"error: generate returned {out.shape[1] - ids.shape[1]} new tokens, not {n}")
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", required=True, help="a Hugging Face GPT-2 directory (gpt2_convert to-hf)")
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--P", type=int, default=64)
    ap.add_argument("--N", type=int, default=256)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--modes", default="eager", help="eager, static, or both (comma-separated)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: hf_generate.py needs a CUDA GPU")
    if a.N < 2:
        sys.exit("error: --N must be at least 2 (the time per token is a difference of two runs)")
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    model = GPT2LMHeadModel.from_pretrained(a.model_dir, torch_dtype=dtype).cuda().eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (a.B, a.P), generator=g).cuda()
    for mode in a.modes.split(","):
        kw = {}
        if mode == "static":
            kw["cache_implementation"] = "static"
            model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        elif mode != "eager":
            sys.exit(f"error: --modes: {mode!r} is not eager or static")
        with torch.inference_mode():
            generate_seconds(model, ids, a.N, **kw)  # warm-up (compilation, allocations)
            t_one = min(generate_seconds(model, ids, 1, **kw) for _ in range(3))
            t_all = min(generate_seconds(model, ids, a.N, **kw) for _ in range(3))
        per_token_ms = (t_all - t_one) / (a.N - 1) * 1e3
        print(f"BASELINE hf-generate {mode} model=d{model.config.n_layer} B={a.B} P={a.P} N={a.N} dtype={a.dtype} "
              f"ms_per_token={per_token_ms:.3f} tok_per_s={a.B * a.N / t_all:.0f} "
              f"prefill_plus_first_ms={t_one * 1e3:.2f} device={torch.cuda.get_device_name()}", flush=True)


if __name__ == "__main__":
    main()
