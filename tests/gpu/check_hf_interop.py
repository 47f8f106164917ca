#!/usr/bin/env python3
"""Hugging Face interop, end to end, on a GPU machine with PyTorch and transformers (safetensors format):

  (a) import: transformers' GPT2LMHeadModel, random init (+ noise on biases and LayerNorms), at d12 and at a
      non-default shape -> save_pretrained (safetensors) -> ./gpt2_convert from-hf -> <prefix>_model.bin, which must
      equal the file this script writes from the same weights (scripts/reference/train_gpt2.py's writer, Conv1D transposed);
      transformers' own fp32 logits, loss, gradients and 10 AdamW steps on one batch become the reference
      (<prefix>_debug_state.bin, _trajectory.txt, _bf16_error.txt), and ./test_gpt2cu (FP32 build) must pass on it
      (./test_gpt2, the CPU reference, too on the small shape).
  (c) train: ./train_gpt2cu -e <(a)'s d12 HF directory> fine-tunes 20 steps on Tiny Shakespeare (FP32 build, then
      the default BF16 build): exit 0, every loss finite, the last 5 below the first; the FP32 run's checkpoint
      feeds (b).
  (b) export: our model files (the fixture tests/fixtures/tiny_model.bin, and (c)'s checkpoint) -> ./gpt2_convert
      to-hf -> GPT2LMHeadModel.from_pretrained. Transformers' logits on the fixture's batch against PyTorch's in
      tests/fixtures/tiny_debug_state.bin (rel-L2 <= 1e-5); then transformers' logits, loss and gradients become a
      reference for our own file, so ./test_gpt2 (CPU) and ./test_gpt2cu (FP32) compare our engine with
      transformers: logits rel-L2 <= 1e-5, gradients <= 1e-4, trajectory within 1e-4.
Prints one line per check and a summary line; exit status 1 if any check failed. Everything lands in --out.

    python3 tests/gpu/check_hf_interop.py [--out hf_check] [--device cuda]
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "reference"))
import train_gpt2 as ref  # noqa: E402  (our file writers, AdamW groups, the bf16 comparison)

from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = []


def result(name, ok, detail=""):
    RESULTS.append((name, ok))
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    return ok


def run(name, cmd, log):
    """Runs cmd in the repository root, output to log; one result line (the log's tail on failure)."""
    with open(log, "w") as f:
        rc = subprocess.call(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        with open(log, errors="replace") as f:
            tail = f.read().splitlines()[-8:]
        print("\n".join("     " + line for line in tail))
    return result(name, rc == 0, f"{' '.join(cmd)} (log {log})")


class HFAdapter(torch.nn.Module):
    """GPT2LMHeadModel with train_gpt2.py's GPT interface: forward(idx, targets) -> (logits, loss) and table_tensors()
    in our checkpoint layout (Conv1D weights and their gradients transposed to (out, in), wte padded to Vp), so
    ref.write_model / write_debug_state / make_adamw / bf16_errors take it unchanged."""

    def __init__(self, hf):
        super().__init__()
        self.hf = hf
        c = hf.config
        self.L, self.NH, self.C, self.V, self.maxT = c.n_layer, c.n_head, c.n_embd, c.vocab_size, c.n_positions

    def forward(self, idx, targets):
        logits = self.hf(input_ids=idx, use_cache=False).logits
        return logits, F.cross_entropy(logits.view(-1, self.V), targets.reshape(-1))

    def table_tensors(self, grads):
        t = self.hf.transformer

        def get(p):
            x = p.grad if grads else p
            return (torch.zeros_like(p) if x is None else x).detach().float().cpu()

        def stack(fn, conv1d=False):
            return torch.stack([get(fn(b)).t() if conv1d else get(fn(b)) for b in t.h])

        wte = torch.zeros(ref.padded_vocab(self.V), self.C)
        wte[: self.V] = get(t.wte.weight)
        tensors = [
            wte, get(t.wpe.weight),
            stack(lambda b: b.ln_1.weight), stack(lambda b: b.ln_1.bias),
            stack(lambda b: b.attn.c_attn.weight, True), stack(lambda b: b.attn.c_attn.bias),
            stack(lambda b: b.attn.c_proj.weight, True), stack(lambda b: b.attn.c_proj.bias),
            stack(lambda b: b.ln_2.weight), stack(lambda b: b.ln_2.bias),
            stack(lambda b: b.mlp.c_fc.weight, True), stack(lambda b: b.mlp.c_fc.bias),
            stack(lambda b: b.mlp.c_proj.weight, True), stack(lambda b: b.mlp.c_proj.bias),
            get(t.ln_f.weight), get(t.ln_f.bias),
        ]
        return [x.contiguous().numpy().astype(np.float32) for x in tensors]


def with_eager(fn, *args, **kwargs):
    """fn(..., attn_implementation="eager") where this transformers has the argument: the plain fp32 attention."""
    try:
        return fn(*args, attn_implementation="eager", **kwargs)
    except (TypeError, ValueError):
        return fn(*args, **kwargs)


def new_hf_model(L, NH, C, V, maxT, seed):
    cfg = GPT2Config(n_layer=L, n_head=NH, n_embd=C, vocab_size=V, n_positions=maxT, n_ctx=maxT, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new", layer_norm_epsilon=1e-5)
    torch.manual_seed(seed)
    model = with_eager(GPT2LMHeadModel._from_config, cfg)
    with torch.no_grad():  # GPT-2's init leaves biases 0 and LayerNorms 1: noise so that dropping one would show
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.02)
    return model.float().eval()


def load_hf(path, device):
    model = with_eager(GPT2LMHeadModel.from_pretrained, path, torch_dtype=torch.float32)
    return model.to(device).eval()


def write_reference(prefix, adapter, x, y, device, write_model=True):
    """<prefix>_debug_state.bin, _trajectory.txt, _bf16_error.txt (and _model.bin, _model_bf16.bin) from the
    transformers model, as scripts/reference/train_gpt2.py writes them for its own (same batch, same 10 AdamW steps)."""
    adapter.zero_grad(set_to_none=True)
    logits, loss = adapter(x, y)
    loss.backward()
    if write_model:
        ref.write_model(prefix + "_model.bin", adapter, bf16=False)
    ref.write_model(prefix + "_model_bf16.bin", adapter, bf16=True)
    ref.write_debug_state(prefix + "_debug_state.bin", adapter, x, y, logits, loss.item())
    ref_logits, ref_loss, ref_grads = logits.detach().cpu().numpy(), loss.item(), adapter.table_tensors(grads=True)
    start = {k: v.clone() for k, v in adapter.state_dict().items()}
    args = argparse.Namespace(lr=1e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, device=str(device))
    opt = ref.make_adamw(adapter, args.lr, args.beta1, args.beta2, args.eps, args.weight_decay)
    losses = []
    for _ in range(10):
        opt.zero_grad(set_to_none=True)
        _, step_loss = adapter(x, y)
        step_loss.backward()
        losses.append(step_loss.item())
        opt.step()
    ref.write_trajectory(prefix + "_trajectory.txt", args, losses)
    adapter.load_state_dict(start)
    settings = [float(np.float32(getattr(args, k))) for k in ("lr", "beta1", "beta2", "eps", "weight_decay")]
    errors = ref.bf16_errors(adapter, x, y, ref_logits, ref_loss, ref_grads, settings,
                             [float(np.float32(v)) for v in losses])
    ref.write_bf16_error(prefix + "_bf16_error.txt", errors, str(device), writer="tests/gpu/check_hf_interop.py")
    return ref_logits


def random_batch(V, B, T, seed, device):
    g = torch.Generator().manual_seed(seed)
    buf = torch.randint(0, V, (B, T + 1), generator=g)
    return buf[:, :-1].contiguous().to(device), buf[:, 1:].contiguous().to(device)


def check_import(out, device, name, shape, cpu_reference):
    L, NH, C, V, maxT = shape
    hf_dir, prefix = f"{out}/{name}_hf", f"{out}/{name}"
    adapter = HFAdapter(new_hf_model(L, NH, C, V, maxT, seed=1337))
    adapter.hf.save_pretrained(hf_dir)  # safetensors by default since transformers 4.35
    if not result(f"(a) {name}: save_pretrained wrote {hf_dir}/model.safetensors", os.path.exists(hf_dir + "/model.safetensors")):
        return hf_dir
    adapter.to(device)
    x, y = random_batch(V, 4, 64, seed=1338, device=device)
    write_reference(prefix, adapter, x, y, device)  # writes <prefix>_model.bin by Python, from the same weights
    os.replace(prefix + "_model.bin", prefix + "_model_py.bin")
    ok = run(f"(a) {name}: gpt2_convert from-hf", ["./gpt2_convert", "from-hf", hf_dir, prefix + "_model.bin"],
             f"{prefix}_convert.log")
    if ok:
        same = open(prefix + "_model.bin", "rb").read() == open(prefix + "_model_py.bin", "rb").read()
        result(f"(a) {name}: the converted file equals the one written from transformers' weights in Python", same)
        run(f"(a) {name}: test_gpt2cu (FP32) against transformers", ["./test_gpt2cu", prefix], f"{prefix}_test_gpt2cu.log")
        if cpu_reference:
            run(f"(a) {name}: test_gpt2 (CPU reference) against transformers", ["./test_gpt2", prefix],
                f"{prefix}_test_gpt2.log")
    return hf_dir


def read_fixture_batch(prefix):
    h = np.fromfile(prefix + "_model.bin", dtype=np.int32, count=ref.HEADER_INTS)
    V = int(h[3])
    d = np.fromfile(prefix + "_debug_state.bin", dtype=np.int32, count=ref.HEADER_INTS)
    B, T = int(d[2]), int(d[3])
    ints = np.fromfile(prefix + "_debug_state.bin", dtype=np.int32, count=2 * B * T, offset=ref.HEADER_INTS * 4)
    logits = np.fromfile(prefix + "_debug_state.bin", dtype=np.float32, count=B * T * V,
                         offset=ref.HEADER_INTS * 4 + 8 * B * T).reshape(B, T, V)
    return ints[: B * T].reshape(B, T), ints[B * T:].reshape(B, T), logits


def check_export(out, device, name, model_path, batch_from=None, cpu_reference=True):
    hf_dir, prefix = f"{out}/{name}_hf", f"{out}/{name}"
    if not run(f"(b) {name}: gpt2_convert to-hf", ["./gpt2_convert", "to-hf", model_path, hf_dir], f"{prefix}_convert.log"):
        return
    adapter = HFAdapter(load_hf(hf_dir, device))
    if batch_from:
        xs, ys, pytorch_logits = read_fixture_batch(batch_from)
        x, y = torch.from_numpy(xs).long().to(device), torch.from_numpy(ys).long().to(device)
        with torch.no_grad():
            logits = adapter(x, y)[0].float().cpu().numpy()
        err = ref.rel_l2(logits, pytorch_logits)
        result(f"(b) {name}: transformers' logits vs PyTorch's in {batch_from}_debug_state.bin", err <= 1e-5,
               f"rel-L2 {err:.3e} (<= 1e-5)")
    else:
        x, y = random_batch(adapter.V, 4, 64, seed=7, device=device)
    shutil.copyfile(model_path, prefix + "_model.bin")  # our own file: the engines read it, transformers the export
    write_reference(prefix, adapter, x, y, device, write_model=False)
    run(f"(b) {name}: test_gpt2cu (FP32): our engine vs transformers", ["./test_gpt2cu", prefix], f"{prefix}_test_gpt2cu.log")
    if cpu_reference:
        run(f"(b) {name}: test_gpt2 (CPU reference) vs transformers", ["./test_gpt2", prefix], f"{prefix}_test_gpt2.log")


def check_train(out, hf_dir, precision):
    work = f"{out}/train_{precision.lower()}"
    shutil.rmtree(work, ignore_errors=True)
    cmd = ["./train_gpt2cu", "-e", hf_dir, "-i", "data/tinyshakespeare/tiny_shakespeare_train.bin",
           "-j", "data/tinyshakespeare/tiny_shakespeare_val.bin", "-o", work, "-b", "8", "-t", "256", "-x", "20",
           "-v", "10", "-s", "0", "-n", "20", "-l", "3e-4", "-u", "5"]
    if not run(f"(c) train_gpt2cu ({precision}) -e {hf_dir}: 20 steps", cmd, f"{work}.log"):
        return None
    losses = []
    with open(f"{work}/main.log") as f:
        for line in f:
            if " trl:" in line:
                losses.append(float(line.split("trl:")[1]))
    finite = len(losses) == 20 and all(np.isfinite(losses))
    falls = finite and max(losses[-5:]) < losses[0]
    result(f"(c) {precision}: 20 finite losses, the last 5 below the first", falls,
           f"first {losses[0]:.4f}, last {losses[-1]:.4f}" if losses else "no losses in main.log")
    return f"{work}/model_00000020.bin"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="hf_check", help="directory for everything this writes")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.use_deterministic_algorithms(True, warn_only=True)
    device = torch.device(a.device)
    out = os.path.abspath(a.out)
    os.chdir(ROOT)  # the programs and the fixture are named from the repository root
    os.makedirs(out, exist_ok=True)
    make = lambda *targets, precision="FP32": run(f"build {' '.join(targets)} ({precision})",  # noqa: E731
                                                  ["make", "-s", *targets, f"PRECISION={precision}"], f"{out}/make.log")
    if not make("gpt2_convert", "test_gpt2", "test_gpt2cu", "train_gpt2cu"):
        sys.exit(1)
    d12_dir = check_import(out, device, "a_d12", (12, 12, 768, 50257, 1024), cpu_reference=False)
    check_import(out, device, "a_l3_c96", (3, 3, 96, 1000, 128), cpu_reference=True)
    checkpoint = None
    if run("(c) Tiny Shakespeare shards (make data)", ["make", "-s", "data"], f"{out}/data.log"):
        checkpoint = check_train(out, d12_dir, "FP32")
    check_export(out, device, "b_fixture", "tests/fixtures/tiny_model.bin", batch_from="tests/fixtures/tiny")
    if checkpoint:
        check_export(out, device, "b_trained_d12", checkpoint, cpu_reference=False)
    if os.path.exists(f"{ROOT}/data/tinyshakespeare/tiny_shakespeare_train.bin") and make("train_gpt2cu", precision="BF16"):
        check_train(out, d12_dir, "BF16")
    failed = [n for n, ok in RESULTS if not ok]
    print(f"hf interop: {len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
