#!/usr/bin/env bash
# GPU machine (or any machine with Python tiktoken): build the tokenizer tools, run the tokenizer
# tests, check our ids against tiktoken and benchmark both (see scripts/bench/bench_tokenizer.py).
#   DATA_MIRROR=dir-with-gpt2/-tinyshakespeare/-alice  bash scripts/bench/bench_tokenizer.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export DATA_MIRROR=${DATA_MIRROR:-../shared/data}
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(lscpu 2>/dev/null | grep -E '^(Thread\(s\) per core|Core\(s\) per socket|Socket\(s\))' | tr -s ' ' | tr '\n' ';')"
echo "commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
make -j"$(nproc)" tokenizer data/prepro >/dev/null
${CXX:-g++} -O2 -std=c++17 -Wall -Wextra -I. tests/unit/test_bpe_tokenizer.cpp -o /tmp/test_bpe_tokenizer -lgtest -lgtest_main -pthread
/tmp/test_bpe_tokenizer 2>&1 | tail -3
bash tests/cli/test_tokenizer_tools.sh | tail -1
python3 scripts/bench/bench_tokenizer.py --data "$DATA_MIRROR" "$@"
