#!/usr/bin/env python3
"""What PyTorch itself gets in bf16 on a reference that carries no such record (one made by another tool in the
same file formats, e.g. llm.c's train_gpt2.py): reads <prefix>_model.bin (fp32), <prefix>_debug_state.bin and
<prefix>_trajectory.txt, runs the model and batch in bf16 two ways (all-bf16 and autocast) and writes the record
scripts/reference/train_gpt2.py writes next to its own references:

    python3 scripts/reference/pytorch_bf16_error.py <prefix> [-o <file>]     (default <prefix>_bf16_error.txt)

test_gpt2cu runs this itself on a GPU machine with PyTorch when a reference has no record.
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_gpt2 as ref  # noqa: E402  (the model, the bf16 comparison and the record's writer)


def read_ints(path, count, what):
    data = np.fromfile(path, dtype=np.int32, count=count)
    if data.size != count:
        sys.exit(f"error: {path}: truncated {what}")
    return data


def read_model(path):
    h = read_ints(path, ref.HEADER_INTS, "header")
    if h[0] != ref.MODEL_MAGIC or h[1] != ref.MODEL_V_FP32:
        sys.exit(f"error: {path}: not an fp32 model file (magic {h[0]}, version {h[1]}; need {ref.MODEL_MAGIC}, 3)")
    maxT, V, L, NH, C, Vp = (int(v) for v in h[2:8])
    shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
              (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    count = sum(int(np.prod(s)) for s in shapes)
    flat = np.fromfile(path, dtype=np.float32, offset=ref.HEADER_INTS * 4)
    if flat.size != count:
        sys.exit(f"error: {path}: {flat.size} parameters, the header's shape needs {count}")
    tensors, at = [], 0
    for s in shapes:
        n = int(np.prod(s))
        tensors.append(flat[at:at + n].reshape(s))
        at += n
    model = ref.GPT(L, NH, C, V, maxT)
    model.load_table_tensors(tensors)
    return model, count


def read_debug_state(path, V, num_params):
    h = read_ints(path, ref.HEADER_INTS, "header")
    if h[0] != ref.DEBUG_MAGIC or h[1] != ref.DEBUG_VERSION:
        sys.exit(f"error: {path}: not a debug state (magic {h[0]}, version {h[1]})")
    B, T = int(h[2]), int(h[3])
    offset = ref.HEADER_INTS * 4
    x = np.fromfile(path, dtype=np.int32, count=B * T, offset=offset)
    y = np.fromfile(path, dtype=np.int32, count=B * T, offset=offset + 4 * B * T)
    rest = np.fromfile(path, dtype=np.float32, offset=offset + 8 * B * T)
    if x.size != B * T or y.size != B * T or rest.size != B * T * V + 1 + num_params:
        sys.exit(f"error: {path}: size does not match B={B} T={T} and the model file")
    logits = rest[: B * T * V].reshape(B, T, V)
    loss = float(rest[B * T * V])
    return x.reshape(B, T), y.reshape(B, T), logits, loss, rest[B * T * V + 1:]


def read_trajectory(path):
    settings, losses = {}, []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if parts[0] == "loss":
                losses.append(float(parts[2]))
            elif parts[0] in ("lr", "beta1", "beta2", "eps", "weight_decay"):
                settings[parts[0]] = float(parts[1])
    missing = [k for k in ("lr", "beta1", "beta2", "eps", "weight_decay") if k not in settings]
    if missing or not losses:
        sys.exit(f"error: {path}: no losses or missing {', '.join(missing)}")
    return [settings[k] for k in ("lr", "beta1", "beta2", "eps", "weight_decay")], losses


def split_grads(flat, model):
    """The debug state's flat gradients as the 16 checkpoint-order tensors (shapes from table_tensors)."""
    tensors, at = [], 0
    for t in model.table_tensors(grads=False):
        tensors.append(flat[at:at + t.size].reshape(t.shape))
        at += t.size
    return tensors


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prefix")
    p.add_argument("-o", "--output", help="record file (default <prefix>_bf16_error.txt)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    a = p.parse_args()
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if a.device == "auto" else a.device))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model, num_params = read_model(a.prefix + "_model.bin")
    x, y, logits, loss, grads = read_debug_state(a.prefix + "_debug_state.bin", model.V, num_params)
    settings, losses = read_trajectory(a.prefix + "_trajectory.txt")
    model.to(device)
    xt = torch.from_numpy(x.astype(np.int64)).to(device)
    yt = torch.from_numpy(y.astype(np.int64)).to(device)
    errors = ref.bf16_errors(model, xt, yt, logits, loss, split_grads(grads, model), settings, losses)
    out = a.output or a.prefix + "_bf16_error.txt"
    ref.write_bf16_error(out, errors, device, writer="scripts/reference/pytorch_bf16_error.py")
    print(f"wrote {out}: PyTorch bf16 logits rel-L2 {errors['all_bf16']['logits']:.3e} (all-bf16), "
          f"{errors['autocast']['logits']:.3e} (autocast)")


if __name__ == "__main__":
    main()
