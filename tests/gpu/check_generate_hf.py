#!/usr/bin/env python3
"""generate_gpt2cu's greedy output against Hugging Face transformers' GPT2LMHeadModel.generate (greedy), on a GPU
machine with PyTorch, transformers and tiktoken (built from --vocab-dir's files: no network):

  1. our model file (default ref/d12_model.bin, the d12 that `make test` pre-trains 300 steps on Tiny Shakespeare,
     so its logits are not the near-uniform ones of a random init) -> ./gpt2_convert to-hf -> from_pretrained, fp32;
  2. three prompts of different lengths, 64 new tokens each, greedy, stopping at <|endoftext|> as we do:
     transformers prompt by prompt; ours (--binary, built with --precision) in one batch (-pf, --ids): an FP32
     build must be identical; a BF16 build identical up to the first position where transformers' top two logits,
     given the common prefix, are within bf16 noise (gap <= 0.02 * |top logit| + 0.02; from there on the texts
     may part);
  3. each prompt alone (-p) against the batch, with the near-tie rule in both precisions (the batch changes the
     GEMM shapes, hence possibly their rounding).
One line per check, a summary line, exit status 1 if any failed. make test runs it on GPU machines (in the
precision it builds) once the d12 reference exists.

    python3 tests/gpu/check_generate_hf.py [--precision BF16|FP32] [--binary ./generate_gpt2cu]
                                         [--model ref/d12_model.bin] [--out gen_check]
"""
import argparse
import os
import subprocess
import sys

import torch
from transformers import GPT2LMHeadModel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "bench"))
from bench_tokenizer import load_tiktoken  # noqa: E402  (tiktoken's gpt2 built from the local vocabulary files)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = [
    "First Citizen:",
    "ROMEO: What light through yonder window breaks? It is the east, and",
    "The king is dead, and in the morning the lords of the realm came together in the great hall to choose, from "
    "among the sons of the old house, the one who would",
]
N = 64
EOT = 50256
RESULTS = []


def result(name, ok, detail=""):
    RESULTS.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def ours(a, args, name):
    """generate_gpt2cu greedy with extra args; its ids per prompt (a list per output line). Logs in --out."""
    ids_path, log = os.path.join(a.out, name + ".ids"), os.path.join(a.out, name + ".log")
    cmd = [a.binary, "-e", a.model, "-g", str(N), "-st", "0", "--ids", ids_path, "--vocab-dir", a.vocab_dir] + args
    with open(log, "w") as f:
        rc = subprocess.call(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        print(open(log, errors="replace").read()[-2000:])
        raise SystemExit(f"error: {' '.join(cmd)} exited {rc} (log {log})")
    with open(ids_path) as f:
        return [[int(x) for x in line.split()] for line in f.read().splitlines()]


def first_difference(a, b):
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def near_tie(hf, prompt_ids, common):
    """transformers' top-two gap at the position after prompt + common (fp32), and whether it is within bf16 noise."""
    x = torch.tensor([prompt_ids + common], device="cuda")
    with torch.no_grad():
        logits = hf(x).logits[0, -1].float()
    top = torch.topk(logits[:EOT + 1], 2).values
    gap = (top[0] - top[1]).item()
    return gap, gap <= 0.02 * abs(top[0].item()) + 0.02


def compare(name, hf, prompts_ids, want, got, exact):
    for i, (w, g) in enumerate(zip(want, got)):
        d = first_difference(w, g)
        if d is None:
            result(f"{name}, prompt {i + 1}", True, f"{len(g)} tokens identical")
        elif exact:
            result(f"{name}, prompt {i + 1}", False, f"first difference at new token {d} ({w[d:d + 3]} vs {g[d:d + 3]})")
        else:
            gap, tie = near_tie(hf, prompts_ids[i], w[:d])
            result(f"{name}, prompt {i + 1}", tie, f"identical for {d} of {len(w)} tokens, then a "
                   f"{'near-tie' if tie else 'clear choice'} (transformers' top-two gap {gap:.4f})")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="ref/d12_model.bin")
    p.add_argument("--precision", default="BF16", choices=["BF16", "FP32"], help="what --binary was built with")
    p.add_argument("--binary", default="./generate_gpt2cu")
    p.add_argument("--vocab-dir", default="data/cache/gpt2")
    p.add_argument("--out", default="gen_check")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    hf_dir = os.path.join(a.out, "hf")
    rc = subprocess.call(["./gpt2_convert", "to-hf", a.model, hf_dir], cwd=ROOT)
    if rc != 0:
        raise SystemExit(f"error: gpt2_convert to-hf {a.model} {hf_dir} exited {rc}")
    hf = GPT2LMHeadModel.from_pretrained(os.path.join(ROOT, hf_dir)).to("cuda", torch.float32).eval()
    enc, _ = load_tiktoken(a.vocab_dir)
    prompts_ids = [enc.encode_ordinary(t) for t in PROMPTS]
    want = []
    for ids in prompts_ids:
        x = torch.tensor([ids], device="cuda")
        with torch.no_grad():
            out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=N, do_sample=False,
                              eos_token_id=EOT, pad_token_id=EOT)
        new = out[0, len(ids):].tolist()
        want.append(new[:new.index(EOT) + 1] if EOT in new else new)
    prompt_file = os.path.join(a.out, "prompts.txt")
    with open(prompt_file, "w") as f:
        f.write("\n".join(PROMPTS) + "\n")

    exact = a.precision == "FP32"
    batch = ours(a, ["-pf", prompt_file], "batch")
    compare(f"{a.precision} batch of 3 vs transformers fp32", hf, prompts_ids, want, batch, exact)
    alone = [ours(a, ["-p", t], f"alone{i}")[0] for i, t in enumerate(PROMPTS)]
    # alone vs batch: near-ties may part them in either precision (the GEMM shapes change with the batch)
    compare(f"{a.precision} each prompt alone vs in the batch", hf, prompts_ids, batch, alone, exact=False)
    failed = RESULTS.count(False)
    print(f"generate vs transformers: {len(RESULTS) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
