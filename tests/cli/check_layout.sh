#!/usr/bin/env bash
# The engine's layout rules (docs/ARCHITECTURE.md, "Floors"), checked on the tree:
#   - every llmc/ folder stands on a floor, and its files include only their own folder and folders on lower floors
#     (llmc/kernels/'s subfolders are the kernels' floor; llmc/app/'s are floors of their own);
#   - llmc/serving/ is host code: its .h files include no .cuh (the GPU engine is its one .cuh);
#   - nothing in llmc/ or dev/ includes tests/; llmc/ includes neither reference/ nor data/ (the tools);
#   - no engine file over 400 lines, except the ones listed below as one algorithm each.
set -u
cd "$(dirname "$0")/../.."
fail=0
floor() {  # folder (llmc/<folder>, or app/<program>) -> its floor
    case $1 in
        core) echo 0 ;;                           # CUDA plumbing, host helpers, RNG, flags, memory tables
        gpt2) echo 1 ;;                           # the model's shape, its parameter table, its initialisation
        formats) echo 2 ;;                        # the file formats
        tokenizer|hopper|mma) echo 3 ;;           # GPT-2 BPE; the sm_90a and mma.sync vocabularies
        kernels) echo 4 ;;                        # the kernels, by operation
        model|cpu) echo 5 ;;                      # the GPU training model; the CPU engine
        distributed|inference|data) echo 6 ;;     # several GPUs; generation; the data loader
        optimizer|evaluation|serving) echo 7 ;;   # AdamW and schedules; HellaSwag; the server engine
        checkpoint) echo 8 ;;                     # a run's state on disk
        app/generation) echo 9 ;;                 # what generate_gpt2cu and serve_gpt2cu share
        app/train|app/generate|app/serve) echo 10 ;;  # each program's glue
        *) echo "" ;;
    esac
}
folder_of() {  # llmc path (without llmc/) -> its folder key
    case $1 in
        app/*) echo "$1" | cut -d/ -f1-2 ;;
        *) echo "$1" | cut -d/ -f1 ;;
    esac
}
for f in $(find llmc -name '*.h' -o -name '*.cuh' | sort); do
    rel=${f#llmc/}
    folder=$(folder_of "$rel")
    own=$(floor "$folder")
    [ -n "$own" ] || { echo "layout: $f is in llmc/$folder, which has no floor (tests/cli/check_layout.sh, floor())"; fail=1; continue; }
    while IFS= read -r inc; do
        case $inc in
            tests/*|reference/*|data/*) echo "layout: $f includes $inc (the engine depends on no test, reference or tool)"; fail=1; continue ;;
            llmc/*) ;;
            *) continue ;;
        esac
        target=$(folder_of "${inc#llmc/}")
        [ "$target" = "$folder" ] && continue
        theirs=$(floor "$target")
        if [ -z "$theirs" ] || [ "$theirs" -ge "$own" ]; then
            echo "layout: $f includes $inc (llmc/$folder is on floor $own; llmc/$target on ${theirs:-none}: a folder includes only folders below it)"
            fail=1
        fi
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
done
for f in $(find llmc/serving -name '*.h' 2>/dev/null | sort); do
    if grep -q '^#include ".*\.cuh"' "$f"; then echo "layout: $f includes a .cuh (llmc/serving/*.h are host code)"; fail=1; fi
done
for f in $(find dev -name '*.cu' -o -name '*.h' -o -name '*.cuh' | sort); do
    if grep -q '^#include "tests/' "$f"; then echo "layout: $f includes tests/ (dev programs use reference/)"; fail=1; fi
done
# one algorithm each, longer than 400 lines on purpose
long_ok="llmc/kernels/attention/attention_decode.cuh llmc/kernels/decode/decode_matvec.cuh llmc/serving/scheduler.h"
for f in $(find llmc -name '*.h' -o -name '*.cuh' | sort); do
    n=$(wc -l < "$f")
    if [ "$n" -gt 400 ] && [[ " $long_ok " != *" $f "* ]]; then
        echo "layout: $f has $n lines (over 400: split it by concept, or list it here as one algorithm)"; fail=1
    fi
done
[ $fail = 0 ] && echo "layout: every include and file size within the rules"
exit $fail
