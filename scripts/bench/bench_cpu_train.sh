#!/usr/bin/env bash
# The CPU trainer's speed: GPT-2 dDEPTH from random init on Tiny Shakespeare, B x T tokens per step, STEPS steps
# (the first excluded from the average), once with idle OpenMP threads asleep (train_gpt2's default) and once
# spinning. Prints the machine, the load before and after (the numbers mean little on a busy machine) and the commit.
#   scripts/bench/bench_cpu_train.sh          env: DEPTH (12), B (4), T (64), STEPS (20)
set -euo pipefail
cd "$(dirname "$0")/../.."
DEPTH=${DEPTH:-12} B=${B:-4} T=${T:-64} STEPS=${STEPS:-20}
make -s data train_gpt2
echo "machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores;" \
     "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $(date -u +%FT%TZ)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for policy in passive active; do
    line=$(OMP_WAIT_POLICY=$policy ./train_gpt2 -e "d$DEPTH" -b "$B" -t "$T" -x "$STEPS" -v 0 -s 0 \
        -i data/tinyshakespeare/tiny_shakespeare_train.bin | grep '^average')
    echo "d$DEPTH B=$B T=$T, OMP_WAIT_POLICY=$policy: ${line#average over }"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
