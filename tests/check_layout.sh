#!/usr/bin/env bash
# The engine's layout rules (docs/ARCHITECTURE.md, "What may include what"), checked on the tree:
#   - each llmc/ folder includes only the folders below it (core <- formats <- kernels <- model <- distributed,
#     inference <- training; inference <- serving), kernels/mma and kernels/hopper count as kernels; cpu (the CPU
#     trainer's engine) stands beside them on core, formats and the model's shape;
#   - llmc/serving/ is host code: its .h files include no .cuh (the GPU engine is its one .cuh);
#   - nothing in llmc/ or dev/ includes tests/; llmc/ includes neither reference/ nor data/;
#   - no engine file over 400 lines, except the ones listed below as one algorithm each.
set -u
cd "$(dirname "$0")/.."
fail=0
allowed() {  # folder -> the llmc folders its files may include
    case $1 in
        core) echo "core" ;;
        formats) echo "core formats model/gpt2_config.h" ;;
        kernels) echo "core formats kernels model/gpt2_config.h" ;;
        model) echo "core formats kernels model" ;;
        distributed) echo "core formats kernels model distributed" ;;
        inference) echo "core formats kernels model inference" ;;
        training) echo "core formats kernels model distributed inference training" ;;
        serving) echo "core formats kernels model inference serving" ;;
        cpu) echo "core formats model/gpt2_config.h cpu" ;;
        *) echo "" ;;
    esac
}
for f in $(find llmc -name '*.h' -o -name '*.cuh' | sort); do
    folder=$(echo "$f" | cut -d/ -f2)
    ok=$(allowed "$folder")
    [ -n "$ok" ] || { echo "layout: $f is in an unknown folder llmc/$folder"; fail=1; continue; }
    while IFS= read -r inc; do
        case $inc in
            tests/*|reference/*|data/*) echo "layout: $f includes $inc (the engine depends on no test, reference or tool)"; fail=1; continue ;;
            llmc/*) ;;
            *) continue ;;
        esac
        rest=${inc#llmc/}
        good=0
        for a in $ok; do
            case $rest in "$a"|"$a"/*) good=1 ;; esac
        done
        [ $good = 1 ] || { echo "layout: $f includes $inc (llmc/$folder may include: $ok)"; fail=1; }
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
done
for f in $(find llmc/serving -name '*.h' 2>/dev/null | sort); do
    if grep -q '^#include ".*\.cuh"' "$f"; then echo "layout: $f includes a .cuh (llmc/serving/*.h are host code)"; fail=1; fi
done
for f in $(find dev -name '*.cu' -o -name '*.h' -o -name '*.cuh' | sort); do
    if grep -q '^#include "tests/' "$f"; then echo "layout: $f includes tests/ (dev programs use reference/)"; fail=1; fi
done
# one algorithm each, longer than 400 lines on purpose
long_ok="llmc/kernels/attention_decode.cuh llmc/kernels/decode_matvec.cuh llmc/serving/scheduler.h"
for f in $(find llmc -name '*.h' -o -name '*.cuh' | sort); do
    n=$(wc -l < "$f")
    if [ "$n" -gt 400 ] && [[ " $long_ok " != *" $f "* ]]; then
        echo "layout: $f has $n lines (over 400: split it by concept, or list it here as one algorithm)"; fail=1
    fi
done
[ $fail = 0 ] && echo "layout: every include and file size within the rules"
exit $fail
