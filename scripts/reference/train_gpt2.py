#!/usr/bin/env python3
"""PyTorch reference GPT-2: writes the files the C++/CUDA implementations are checked against.

From a config (L, NH, C, V, maxT) and a seed it builds GPT-2 (pre-LN, tanh GELU, lm_head tied to wte),
optionally pre-trains it on real tokens (so activations and gradients look like a trained model's), then
writes, for one batch of B x T tokens:
  <prefix>_model.bin        fp32 checkpoint (llm.c format, version 3; wte padded to Vp with zero rows)
  <prefix>_model_bf16.bin   the same weights in bf16 (version 5, round to nearest even)
  <prefix>_debug_state.bin  inputs, targets, logits (B,T,V), mean loss, all parameter gradients
  <prefix>_trajectory.txt   the losses of `--steps` AdamW steps on that batch, with the optimizer settings
  <prefix>_bf16_error.txt   what PyTorch itself gets in bf16 on this reference (all-bf16 and autocast): the
                            yardstick for the engine's BF16 build (test_gpt2cu derives its bounds from it)
All reference math is fp32 with TF32 off. Runs with PyTorch 1.13 (CPU) and 2.x (CPU or CUDA).

  tiny fixture:  scripts/reference/make_fixture.sh
  124M (d12):    python3 scripts/reference/train_gpt2.py --preset d12 -b 4 -t 64 -o ref/d12 \
                     [--pretrain-steps 300 --pretrain-data <20240520 token shard>]
"""
import argparse
import contextlib
import copy
import math
import os
import sys

# Deterministic cuBLAS needs this before CUDA initialises.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

MODEL_MAGIC, MODEL_V_FP32, MODEL_V_BF16 = 20240326, 3, 5
DEBUG_MAGIC, DEBUG_VERSION = 20240327, 2
SHARD_MAGIC, SHARD_VERSION = 20240520, 1
TRAJECTORY_VERSION = 1
BF16_ERROR_VERSION = 1
HEADER_INTS = 256
TENSOR_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
                "fcprojw", "fcprojb", "lnfw", "lnfb"]


# ----------------------------------------------------------------------------------------------- model
class CausalSelfAttention(nn.Module):
    fused = False  # True: torch's scaled_dot_product_attention (the speed baselines, scripts/bench/baselines/)

    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.c_attn = nn.Linear(C, 3 * C)   # output laid out (3, NH, HS): q | k | v
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        HS = C // self.NH
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.NH, HS).transpose(1, 2)
        k = k.view(B, T, self.NH, HS).transpose(1, 2)
        v = v.view(B, T, self.NH, HS).transpose(1, 2)
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        # explicit math (not a fused kernel) so every PyTorch version computes the same thing in fp32
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = CausalSelfAttention(C, NH)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, L, NH, C, V, maxT):
        super().__init__()
        self.L, self.NH, self.C, self.V, self.maxT = L, NH, C, V, maxT
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(maxT, C)
        self.h = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def init_weights(self, init_std, param_noise):
        """GPT-2 init with init_std = 0.02: matrices N(0, init_std), residual projections N(0, init_std/sqrt(2L)),
        biases 0, LayerNorm w=1 b=0. A reference taken at init needs more than that to catch bugs: init_std
        near 1/sqrt(C) gives O(1) activations (attention scores, GELU inputs, logits), where 0.02 keeps them
        so small that e.g. an erf GELU or a wrong softmax scale would pass; param_noise > 0 adds N(0, param_noise)
        to every bias and LayerNorm parameter, so an implementation that dropped one would fail."""
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, init_std / math.sqrt(2 * self.L))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, init_std)
            elif ".ln_" in name or name.startswith("ln_f"):
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            else:
                nn.init.zeros_(p)
        if param_noise > 0:
            with torch.no_grad():
                for p in self.parameters():
                    if p.dim() == 1:
                        p.add_(torch.randn_like(p) * param_noise)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, self.V), targets.reshape(-1))
        return logits, loss

    def table_tensors(self, grads):
        """The 16 tensors in llm.c checkpoint order (gpt2_parameter_table), as fp32 numpy arrays;
        wte (or its gradient) padded to Vp rows with zeros."""
        def get(p):
            t = p.grad if grads else p
            if t is None:
                t = torch.zeros_like(p)
            return t.detach().float().cpu()

        def stack(fn):
            return torch.stack([get(fn(b)) for b in self.h])

        Vp = padded_vocab(self.V)
        wte = torch.zeros(Vp, self.C)
        wte[: self.V] = get(self.wte.weight)
        tensors = [
            wte,
            get(self.wpe.weight),
            stack(lambda b: b.ln_1.weight), stack(lambda b: b.ln_1.bias),
            stack(lambda b: b.attn.c_attn.weight), stack(lambda b: b.attn.c_attn.bias),
            stack(lambda b: b.attn.c_proj.weight), stack(lambda b: b.attn.c_proj.bias),
            stack(lambda b: b.ln_2.weight), stack(lambda b: b.ln_2.bias),
            stack(lambda b: b.mlp.c_fc.weight), stack(lambda b: b.mlp.c_fc.bias),
            stack(lambda b: b.mlp.c_proj.weight), stack(lambda b: b.mlp.c_proj.bias),
            get(self.ln_f.weight), get(self.ln_f.bias),
        ]
        return [t.contiguous().numpy().astype(np.float32) for t in tensors]


    def load_table_tensors(self, tensors):
        """Sets the parameters from the 16 checkpoint-order tensors (the inverse of table_tensors)."""
        with torch.no_grad():
            def put(p, t):
                p.copy_(torch.as_tensor(np.ascontiguousarray(t)).reshape(p.shape).to(p.dtype))
            put(self.wte.weight, tensors[0][: self.V])
            put(self.wpe.weight, tensors[1])
            for l, b in enumerate(self.h):
                for p, t in zip([b.ln_1.weight, b.ln_1.bias, b.attn.c_attn.weight, b.attn.c_attn.bias,
                                 b.attn.c_proj.weight, b.attn.c_proj.bias, b.ln_2.weight, b.ln_2.bias,
                                 b.mlp.c_fc.weight, b.mlp.c_fc.bias, b.mlp.c_proj.weight, b.mlp.c_proj.bias],
                                tensors[2:14]):
                    put(p, t[l])
            put(self.ln_f.weight, tensors[14])
            put(self.ln_f.bias, tensors[15])


def padded_vocab(V):
    return (V + 127) // 128 * 128


def param_groups(model, weight_decay):
    """Decay the matrices (every 2-D parameter: wte (tied), wpe, and the Linear weights), not biases or
    LayerNorm: exactly the tensors gpt2_parameter_table() marks weight_decay."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_adamw(model, lr, beta1, beta2, eps, weight_decay):
    kwargs = dict(lr=lr, betas=(beta1, beta2), eps=eps)
    try:  # the plain per-tensor loop: same arithmetic on every PyTorch version and device
        return torch.optim.AdamW(param_groups(model, weight_decay), foreach=False, **kwargs)
    except TypeError:
        return torch.optim.AdamW(param_groups(model, weight_decay), **kwargs)


# ----------------------------------------------------------------------------------------------- files
def atomic_write(path, chunks):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def header(*values):
    h = np.zeros(HEADER_INTS, dtype=np.int32)
    h[: len(values)] = values
    return h.tobytes()


def bf16_bits(a):
    """fp32 -> bf16 bits, round to nearest even, NaN kept NaN (as llmc/core/bf16.h)."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def write_model(path, model, bf16):
    Vp = padded_vocab(model.V)
    h = header(MODEL_MAGIC, MODEL_V_BF16 if bf16 else MODEL_V_FP32, model.maxT, model.V, model.L, model.NH, model.C, Vp)
    tensors = model.table_tensors(grads=False)
    atomic_write(path, [h] + [(bf16_bits(t) if bf16 else t).tobytes() for t in tensors])


def write_debug_state(path, model, x, y, logits, loss):
    B, T = x.shape
    atomic_write(path, [
        header(DEBUG_MAGIC, DEBUG_VERSION, B, T),
        x.cpu().numpy().astype(np.int32).tobytes(),
        y.cpu().numpy().astype(np.int32).tobytes(),
        logits.detach().cpu().numpy().astype(np.float32).tobytes(),
        np.array([loss], dtype=np.float32).tobytes(),
    ] + [t.tobytes() for t in model.table_tensors(grads=True)])


def write_trajectory(path, args, losses):
    lines = [
        "# GPT-2 reference trajectory: AdamW on one batch (the debug state's), fresh optimizer state, no clipping.",
        "# loss i = mean loss of step i's forward pass, before its update (AdamW step t = i + 1).",
        "# Weight decay only on the tensors the parameter table marks (matrices incl. tied wte, and wpe).",
        f"# written by scripts/reference/train_gpt2.py (PyTorch {torch.__version__}, device {args.device})",
        f"gpt2_reference_trajectory {TRAJECTORY_VERSION}",
        f"steps {len(losses)}",
    ]
    for key in ("lr", "beta1", "beta2", "eps", "weight_decay"):
        lines.append(f"{key} {float(np.float32(getattr(args, key))):.9g}")
    lines += [f"loss {i} {float(np.float32(v)):.9g}" for i, v in enumerate(losses)]
    atomic_write(path, [("\n".join(lines) + "\n").encode()])


def rel_l2(out, ref):
    out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    ref_norm = np.linalg.norm(ref)
    err = np.linalg.norm(out - ref)
    return float(err / ref_norm) if ref_norm > 0 else float(err)


def bf16_errors(model, x, y, ref_logits, ref_loss, ref_grads, opt_settings, ref_losses):
    """PyTorch's own error in bf16 on this reference, against its fp32 values, two ways:
    all_bf16: weights, activations and AdamW all in bf16 (model.to(bfloat16));
    autocast: fp32 weights and AdamW, matmuls in bf16 (torch.autocast).
    `model` holds the reference weights (fp32) and is not changed. Returns {mode: {logits, loss, grads, trajectory}}."""
    device = next(model.parameters()).device
    out = {}
    for mode in ("all_bf16", "autocast"):
        def fresh():
            m = copy.deepcopy(model)
            return m.to(torch.bfloat16) if mode == "all_bf16" else m

        def context():
            if mode == "autocast":
                return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
            return contextlib.nullcontext()

        m = fresh()
        m.zero_grad(set_to_none=True)
        with context():
            logits, loss = m(x, y)
        loss.backward()
        grads = m.table_tensors(grads=True)
        r = {"logits": rel_l2(logits.detach().float().cpu().numpy(), ref_logits),
             "loss": abs(loss.item() - ref_loss),
             "grads": [rel_l2(g, ref) for g, ref in zip(grads, ref_grads)]}
        m = fresh()
        opt = make_adamw(m, *opt_settings)
        losses = []
        for _ in ref_losses:
            opt.zero_grad(set_to_none=True)
            with context():
                _, loss = m(x, y)
            loss.backward()
            losses.append(loss.item())
            opt.step()
        r["trajectory"] = [abs(l - ref) for l, ref in zip(losses, ref_losses)]
        out[mode] = r
    return out


def write_bf16_error(path, errors, device, writer="scripts/reference/train_gpt2.py"):
    a, c = errors["all_bf16"], errors["autocast"]
    lines = [
        "# PyTorch's own error in bf16 on this reference, against the reference's fp32 values: rel-L2 for the",
        "# logits and each gradient, |difference| for the loss and each trajectory loss. Two columns, two ways of",
        "# running bf16: all_bf16 (weights, activations and AdamW in bf16) and autocast (fp32 weights and AdamW,",
        "# bf16 matmuls). test_gpt2cu's BF16 bounds are a factor of the larger of the two (reference/bf16_error.h).",
        f"# written by {writer} (PyTorch {torch.__version__}, device {device})",
        f"gpt2_bf16_error {BF16_ERROR_VERSION}",
        f"steps {len(a['trajectory'])}",
        f"logits_rel_l2 {a['logits']:.6e} {c['logits']:.6e}",
        f"loss_abs {a['loss']:.6e} {c['loss']:.6e}",
    ]
    lines += [f"grad_rel_l2 {n} {ga:.6e} {gc:.6e}" for n, ga, gc in zip(TENSOR_NAMES, a["grads"], c["grads"])]
    lines += [f"trajectory_abs {i} {ta:.6e} {tc:.6e}"
              for i, (ta, tc) in enumerate(zip(a["trajectory"], c["trajectory"]))]
    atomic_write(path, [("\n".join(lines) + "\n").encode()])


def load_tokens(path, V):
    """Tokens of a 20240520 shard, or of a text file encoded with tiktoken's GPT-2 BPE."""
    with open(path, "rb") as f:
        head = f.read(HEADER_INTS * 4)
    h = np.frombuffer(head, dtype=np.int32) if len(head) == HEADER_INTS * 4 else None
    if h is not None and h[0] == SHARD_MAGIC:
        if h[1] != SHARD_VERSION:
            sys.exit(f"error: {path}: unsupported data shard version {h[1]}")
        n = int(h[2])
        expected = HEADER_INTS * 4 + 2 * n
        if n < 1 or os.path.getsize(path) != expected:
            sys.exit(f"error: {path}: data shard header says {n} tokens but the file is "
                     f"{os.path.getsize(path)} bytes (expected {expected})")
        tokens = np.fromfile(path, dtype=np.uint16, offset=HEADER_INTS * 4).astype(np.int64)
    else:
        try:
            import tiktoken
        except ImportError:
            sys.exit(f"error: {path}: not a token shard, and tiktoken is not installed to encode it as text")
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
        try:  # tiktoken fetches the BPE files on first use; offline machines need them cached
            enc = tiktoken.get_encoding("gpt2")
        except Exception as e:
            sys.exit(f"error: {path}: tiktoken cannot load the gpt2 encoding ({e}); pass a token shard instead")
        tokens = np.array(enc.encode_ordinary(text), dtype=np.int64)
    if tokens.size and tokens.max() >= V:
        sys.exit(f"error: {path}: token {int(tokens.max())} is outside the model's vocabulary (V = {V})")
    return tokens


def batch_at(tokens, window, B, T, device):
    """The window-th B*T+1-token window (wrapping around the data) as inputs and targets."""
    n = B * T + 1
    if tokens.size < n:
        sys.exit(f"error: the pre-training data has {tokens.size} tokens, fewer than one batch ({n})")
    start = (window * (n - 1)) % (tokens.size - n + 1)
    buf = torch.from_numpy(tokens[start:start + n].copy())
    return buf[:-1].view(B, T).to(device), buf[1:].view(B, T).to(device)


# ----------------------------------------------------------------------------------------------- main
PRESETS = {"d12": (12, 12, 768), "d24": (24, 16, 1024), "d36": (36, 20, 1280), "d48": (48, 25, 1600)}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), help="GPT-2 size: sets L NH C, and V=50257 maxT=1024")
    p.add_argument("--layers", type=int, help="L")
    p.add_argument("--heads", type=int, help="NH")
    p.add_argument("--channels", type=int, help="C")
    p.add_argument("--vocab", type=int, help="V (the padded Vp is V rounded up to 128)")
    p.add_argument("--max-seq-len", type=int, help="maxT")
    p.add_argument("-b", "--batch-size", type=int, default=4, help="B of the reference batch")
    p.add_argument("-t", "--seq-len", type=int, default=64, help="T of the reference batch")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--init-std", type=float, default=0.02, help="std of the matrices at init (GPT-2: 0.02)")
    p.add_argument("--param-noise", type=float, default=0.02,
                   help="std of noise added to biases and LayerNorm params after GPT-2 init (0: pure init)")
    p.add_argument("--pretrain-steps", type=int, default=0)
    p.add_argument("--pretrain-data", help="20240520 token shard, or a text file (needs tiktoken)")
    p.add_argument("--pretrain-lr", type=float, default=6e-4)
    p.add_argument("--steps", type=int, default=10, help="AdamW steps in the trajectory")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    p.add_argument("-o", "--output", required=True, help="output prefix, e.g. tests/fixtures/tiny")
    a = p.parse_args()
    if a.preset:
        L, NH, C = PRESETS[a.preset]
        a.layers = a.layers or L
        a.heads = a.heads or NH
        a.channels = a.channels or C
        a.vocab = a.vocab or 50257
        a.max_seq_len = a.max_seq_len or 1024
    missing = [n for n in ("layers", "heads", "channels", "vocab", "max_seq_len") if getattr(a, n) is None]
    if missing:
        p.error("give --preset or all of --layers --heads --channels --vocab --max-seq-len (missing: %s)"
                % ", ".join("--" + m.replace("_", "-") for m in missing))
    if min(a.layers, a.heads, a.channels, a.vocab, a.max_seq_len, a.batch_size, a.seq_len, a.steps) < 1:
        p.error("every size must be positive")
    if a.channels % a.heads:
        p.error(f"C={a.channels} is not divisible by NH={a.heads}")
    if a.seq_len > a.max_seq_len:
        p.error(f"-t {a.seq_len} exceeds maxT {a.max_seq_len}")
    if a.pretrain_steps and not a.pretrain_data:
        p.error("--pretrain-steps needs --pretrain-data")
    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    return a


def main():
    args = parse_args()
    # fp32 reference math: no TF32 anywhere, deterministic kernels where PyTorch has them
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    device = torch.device(args.device)

    L, NH, C, V, maxT, B, T = args.layers, args.heads, args.channels, args.vocab, args.max_seq_len, \
        args.batch_size, args.seq_len
    model = GPT(L, NH, C, V, maxT)
    model.init_weights(args.init_std, args.param_noise)   # on the CPU, so the weights do not depend on the device
    model.to(device)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"model: L={L} NH={NH} C={C} V={V} (Vp={padded_vocab(V)}) maxT={maxT}, {nparams} parameters "
          f"(unpadded); batch B={B} T={T}; device {device}; PyTorch {torch.__version__}")

    tokens = None
    if args.pretrain_data:
        tokens = load_tokens(args.pretrain_data, V)
        print(f"pre-training data: {args.pretrain_data}, {tokens.size} tokens")
    if args.pretrain_steps:
        opt = make_adamw(model, args.pretrain_lr, 0.9, 0.95, 1e-8, 0.1)
        for step in range(args.pretrain_steps):
            x, y = batch_at(tokens, step, B, T, device)
            opt.zero_grad(set_to_none=True)
            _, loss = model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if step % 50 == 0 or step == args.pretrain_steps - 1:
                print(f"pre-train step {step + 1}/{args.pretrain_steps}: loss {loss.item():.4f}")

    # the reference batch: the next window of the data, or random tokens
    if tokens is not None:
        x, y = batch_at(tokens, args.pretrain_steps, B, T, device)
    else:
        g = torch.Generator().manual_seed(args.seed + 1)
        buf = torch.randint(0, V, (B, T + 1), generator=g)
        x, y = buf[:, :-1].contiguous().to(device), buf[:, 1:].contiguous().to(device)

    model.zero_grad(set_to_none=True)
    logits, loss = model(x, y)
    loss.backward()
    out = args.output
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    write_model(out + "_model.bin", model, bf16=False)
    write_model(out + "_model_bf16.bin", model, bf16=True)
    write_debug_state(out + "_debug_state.bin", model, x, y, logits, loss.item())
    print(f"reference batch loss {loss.item():.6f}")
    reference = copy.deepcopy(model)  # the weights the trajectory and the bf16 comparison start from
    ref_logits, ref_loss = logits.detach().cpu().numpy(), loss.item()
    ref_grads = model.table_tensors(grads=True)

    # trajectory: fresh AdamW state, `steps` steps on the same batch
    opt = make_adamw(model, args.lr, args.beta1, args.beta2, args.eps, args.weight_decay)
    losses = []
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        losses.append(loss.item())
        opt.step()
        print(f"trajectory step {step}: loss {losses[-1]:.6f}")
    write_trajectory(out + "_trajectory.txt", args, losses)
    # the losses as the file holds them (fp32), so a reference read back from disk gives the same record
    losses32 = [float(np.float32(v)) for v in losses]
    settings = [float(np.float32(getattr(args, k))) for k in ("lr", "beta1", "beta2", "eps", "weight_decay")]
    errors = bf16_errors(reference, x, y, ref_logits, ref_loss, ref_grads, settings, losses32)
    write_bf16_error(out + "_bf16_error.txt", errors, args.device)
    print(f"PyTorch bf16 error: logits rel-L2 {errors['all_bf16']['logits']:.3e} (all-bf16), "
          f"{errors['autocast']['logits']:.3e} (autocast)")
    for suffix in ("_model.bin", "_model_bf16.bin", "_debug_state.bin", "_trajectory.txt", "_bf16_error.txt"):
        print(f"wrote {out + suffix} ({os.path.getsize(out + suffix)} bytes)")


if __name__ == "__main__":
    main()
