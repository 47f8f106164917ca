#!/usr/bin/env bash
# Where the time of one training step goes, kernel by kernel (GPU machine with Nsight Compute).
# ncu times every kernel of a short run with the caches left alone (--cache-control none: flushing them
# before each kernel inflates short memory-bound kernels) and the clocks untouched; the last whole step
# (steps end with the AdamW kernel) is summed per kernel name.
#   scripts/bench/profile_step.sh                      d12, B=16, T=1024, flash attention
#   B=8 TRAIN_FLAGS="-ab materialized" scripts/bench/profile_step.sh
#   MODEL=d48 B=8 STEPS=2 scripts/bench/profile_step.sh   the 1.5B shape (under ncu a d48 step takes ~142 s on an H200)
# Env: OUT or LOGDIR (where the CSV and tables go), MODEL (d12; what -e takes), B, T, TRAIN_FLAGS, STEPS (3).
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-d12}
B=${B:-16}
T=${T:-1024}
TRAIN_FLAGS=${TRAIN_FLAGS:-"-ab flash"}
STEPS=${STEPS:-3}  # at least 2: the last whole step lies between the last two AdamW kernels
LOGDIR=${LOGDIR:-${OUT:-profile_logs}}
mkdir -p "$LOGDIR"
command -v ncu >/dev/null || { echo "error: ncu (Nsight Compute) not on PATH" >&2; exit 1; }
[ -x ./train_gpt2cu ] || { echo "error: ./train_gpt2cu not built (make train_gpt2cu)" >&2; exit 1; }

SHARD="$LOGDIR/random_tokens_train_000000.bin"
python3 scripts/reference/make_random_shard.py "$SHARD" 1000000

CSV="$LOGDIR/profile_${MODEL}_B${B}_T${T}.csv"
ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --log-file "$CSV" ./train_gpt2cu -e "$MODEL" -b "$B" -t "$T" -x "$STEPS" -v 0 -s 0 -i "$SHARD" $TRAIN_FLAGS \
    >"$LOGDIR/profile_train.log" 2>&1 || { tail -n 20 "$LOGDIR/profile_train.log"; exit 1; }

python3 - "$CSV" "$LOGDIR/profile_${MODEL}_B${B}_T${T}_sequence.txt" <<'PY'
import csv, collections, re, sys
rows = []
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") == "gpu__time_duration.sum":
        rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) / 1e3))  # ns -> us
def short(name):
    name = re.sub(r"\(.*$", "", name) if not name.startswith("void ") else re.sub(r"^void ", "", name)
    name = re.sub(r"<.*", "", name)
    return name[:70]
ends = [i for i, (n, _) in enumerate(rows) if "adamw" in n.lower()]
if len(ends) < 2:
    sys.exit("error: fewer than two AdamW kernels in the profile; cannot isolate a step")
step = rows[ends[-2] + 1: ends[-1] + 1]
total = sum(t for _, t in step)
by = collections.defaultdict(lambda: [0.0, 0])
for n, t in step:
    by[short(n)][0] += t; by[short(n)][1] += 1
print(f"one step: {len(step)} kernels, {total / 1e3:.2f} ms of kernel time (ncu, caches not flushed)")
print(f"{'kernel':70s} {'calls':>6s} {'total ms':>9s} {'share':>6s} {'us/call':>8s}")
for n, (t, c) in sorted(by.items(), key=lambda kv: -kv[1][0]):
    print(f"{n:70s} {c:6d} {t / 1e3:9.3f} {100 * t / total:5.1f}% {t / c:8.1f}")
with open(sys.argv[2], "w") as f:
    for n, t in step:
        f.write(f"{t:9.1f} us  {short(n)}\n")
PY
