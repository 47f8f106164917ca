#!/usr/bin/env python3
"""The trainer's HellaSwag scoring (-h 1) against Hugging Face transformers on the same model and eval file, item by
item, on a GPU machine with PyTorch and transformers:

  1. the eval file: --eval FILE (e.g. the real hellaswag_val.bin), or by default one made here in HellaSwag's
     schema from Tiny Shakespeare (--text): context = 2-3 consecutive lines, the true ending = the next line, three
     distractors = lines from elsewhere, the label drawn at random; written as JSONL and converted by data/hellaswag
     (our BPE), so the converter is in the loop. Nothing of it is kept in the repository.
  2. ours: ./train_gpt2cu -e MODEL -x 0 -h 1 -hf FILE -hp picks.tsv (FP32 builds with -f 0: no TF32), each
     example's four mean log-probabilities per ending token and its pick;
  3. transformers: GPT2LMHeadModel (from ./gpt2_convert to-hf MODEL) in fp32 without TF32, the same rule (llm.c's
     acc_norm: the highest mean log-probability of the ending's tokens given the context; the first wins a tie),
     tokens read from the same eval file;
  4. per item: an FP32 build must pick what transformers picks on every example; a BF16 build may differ only
     where transformers' scores of the two endings involved are within --bf16-noise nats (bf16 logits carry errors
     of that order). Printed: how many picks differ and why, the largest score difference, both accuracies.
One line per check, a summary line, exit status 1 if any failed.

    python3 tests/gpu/check_hellaswag_hf.py [--precision BF16|FP32] [--model ref/d12_model.bin] [--eval FILE]
                                          [--examples 512] [--out hellaswag_check]
"""
import argparse
import os
import struct
import subprocess
import sys

import torch
from transformers import GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "tools"))
from hellaswag_from_text import make_jsonl  # noqa: E402
RESULTS = []


def result(name, ok, detail=""):
    RESULTS.append(ok)
    print(f"{'PASS' if ok else 'FAIL'}: {name}{(': ' + detail) if detail else ''}", flush=True)


def read_eval_file(path):
    """llm.c's eval file (llmc/formats/eval_file.h): [(label, context, [ending tokens] * 4)]."""
    data = open(path, "rb").read()
    header = struct.unpack("<256i", data[:1024])
    assert header[0] == 20240522 and header[1] == 1, f"{path}: not an eval file"
    words = struct.unpack(f"<{(len(data) - 1024) // 2}H", data[1024:])
    examples, i = [], 0
    for _ in range(header[2]):
        assert words[i] == 65535, f"{path}: bad delimiter"
        size = words[i + 1] // 2
        ex = words[i:i + size]
        label, n_end, ctx_len = ex[3], ex[4], ex[5]
        ctx = list(ex[6:6 + ctx_len])
        p, ends = 6 + ctx_len, []
        for _ in range(n_end):
            ends.append(list(ex[p + 1:p + 1 + ex[p]]))
            p += 1 + ex[p]
        examples.append((label, ctx, ends))
        i += size
    return examples


def hf_scores(model, examples, T, batch_examples=32):
    """Per example the four mean log-probabilities per ending token, fp32 (the rule of llmc/evaluation/eval_scoring.h)."""
    out = []
    for b in range(0, len(examples), batch_examples):
        chunk = examples[b:b + batch_examples]
        x = torch.zeros((4 * len(chunk), T), dtype=torch.long)
        for e, (_, ctx, ends) in enumerate(chunk):
            for c, end in enumerate(ends):
                row = ctx + end
                x[4 * e + c, :len(row)] = torch.tensor(row)
        with torch.no_grad():
            logp = torch.log_softmax(model(x.cuda()).logits.float(), dim=-1).cpu()
        for e, (_, ctx, ends) in enumerate(chunk):
            scores = []
            for c, end in enumerate(ends):
                pos = torch.arange(len(ctx) - 1, len(ctx) + len(end) - 1)
                lp = logp[4 * e + c, pos, torch.tensor(end)]
                s = torch.zeros((), dtype=torch.float32)
                for v in lp:  # float, in token order, as the trainer sums
                    s = s + v
                scores.append(float(s / len(end)))
            out.append(scores)
    return out


def pick(scores):
    best = 0
    for c in range(1, len(scores)):
        if scores[c] > scores[best]:
            best = c
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="ref/d12_model.bin")
    p.add_argument("--precision", default="BF16", choices=["BF16", "FP32"], help="what --binary was built with")
    p.add_argument("--binary", default="./train_gpt2cu")
    p.add_argument("--eval", default="", help="an eval file to score (default: one made from --text)")
    p.add_argument("--text", default="data/cache/tinyshakespeare/input.txt")
    p.add_argument("--vocab-dir", default="data/cache/gpt2")
    p.add_argument("--examples", type=int, default=512, help="examples to make from --text")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bf16-noise", type=float, default=0.05,
                   help="a BF16 pick may differ where transformers' two scores are this close (nats)")
    p.add_argument("-b", type=int, default=32, help="our batch size (a multiple of 4)")
    p.add_argument("--out", default="hellaswag_check")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    eval_path = a.eval
    if not eval_path:
        jsonl = os.path.join(a.out, "made.jsonl")
        make_jsonl(a.text, a.examples, a.seed, jsonl)
        eval_path = os.path.join(a.out, "made.bin")
        rc = subprocess.call(["./data/hellaswag", "--vocab-dir", a.vocab_dir, "-o", eval_path, jsonl], cwd=ROOT)
        if rc != 0:
            raise SystemExit(f"error: data/hellaswag exited {rc}")
    examples = read_eval_file(eval_path)
    longest = max(len(ctx) + len(e) for _, ctx, ends in examples for e in ends)
    T = min(1024, (longest + 63) // 64 * 64)

    picks_path = os.path.join(a.out, f"picks_{a.precision}.tsv")
    cmd = [a.binary, "-e", a.model, "-x", "0", "-v", "0", "-s", "0", "-h", "1", "-hf", eval_path, "-hp", picks_path,
           "-b", str(a.b), "-t", str(T)] + (["-f", "0"] if a.precision == "FP32" else [])
    log = os.path.join(a.out, f"ours_{a.precision}.log")
    with open(log, "w") as f:
        rc = subprocess.call(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        raise SystemExit(f"error: {' '.join(cmd)} exited {rc} (see {log})")
    line = [l.strip() for l in open(log) if l.startswith("HellaSwag: ")]
    ours = {}
    for row in open(picks_path).read().splitlines()[1:]:
        f = row.split("\t")
        ours[int(f[0])] = (int(f[1]), int(f[2]), [float(v) for v in f[4:8]])

    hf_dir = os.path.join(a.out, "hf")
    if subprocess.call(["./gpt2_convert", "to-hf", a.model, hf_dir], cwd=ROOT, stdout=subprocess.DEVNULL) != 0:
        raise SystemExit(f"error: gpt2_convert to-hf {a.model} {hf_dir} failed")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    hf = GPT2LMHeadModel.from_pretrained(os.path.join(ROOT, hf_dir)).to("cuda", torch.float32).eval()
    want = hf_scores(hf, examples, T)

    result("every example scored once", sorted(ours) == list(range(len(examples))),
           f"{len(ours)} of {len(examples)} in {picks_path}")
    differ, explained, max_err = [], 0, 0.0
    hf_correct = our_correct = 0
    for i, (label, _, _) in enumerate(examples):
        if i not in ours:
            continue
        _, our_pick, our_scores = ours[i]
        hf_pick = pick(want[i])
        hf_correct += hf_pick == label
        our_correct += our_pick == label
        max_err = max(max_err, max(abs(x - y) for x, y in zip(our_scores, want[i])))
        if our_pick != hf_pick:
            gap = want[i][hf_pick] - want[i][our_pick]
            differ.append((i, our_pick, hf_pick, gap))
            explained += gap <= a.bf16_noise
    n = len(examples)
    print(f"ours: {line[0] if line else '(no HellaSwag line)'}; transformers fp32: {hf_correct}/{n} = {hf_correct / n:.6f}; "
          f"largest |score difference| {max_err:.3g} nats; picks differ on {len(differ)} of {n}"
          + (f" (transformers' gaps there: {', '.join(f'{g:.3g}' for *_, g in differ[:10])})" if differ else ""))
    if a.precision == "FP32":
        result("FP32: every pick equals transformers'", not differ, f"{len(differ)} differ")
    else:
        result(f"BF16: picks equal transformers' except within {a.bf16_noise} nats",
               explained == len(differ), f"{len(differ)} differ, {explained} of them within the noise")
    result("the printed count is the picks file's", bool(line) and line[0].startswith(f"HellaSwag: {our_correct}/{n} "),
           line[0] if line else "")
    failed = RESULTS.count(False)
    print(f"hellaswag vs transformers: {len(RESULTS) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
