# The step lines' arithmetic the benchmarks share: median, median_ms (sourced by bench_multi_gpu.sh and bench_fp8.sh).

# the median of the numbers on stdin, one per line, printed with printf format $1; nothing for none
median() {
    sort -g | awk -v f="$1" '{v[NR] = $1} END {if (NR) printf f, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

# median ms/step over steps FIRST (or $2)..end of a log ("step    11/12 | loss ... |  52.10 ms | ..."), or empty
median_ms() {
    sed -n 's/^step *\([0-9]*\)\/[0-9]* |.*| *\([0-9.]*\) ms |.*/\1 \2/p' "$1" | awk -v f="${2:-${FIRST:-1}}" '$1 >= f {print $2}' |
        median %.2f
}
