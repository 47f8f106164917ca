#!/usr/bin/env bash
# scripts/bench/hellaswag_paired.py (two models' -hp picks compared item by item) on hand-made picks files whose
# figures are known: 20 examples, A right on 10, B on 14; A alone right on 2, B alone on 6 (sign test p = 2 * 37/256);
# the same numbers with B's rows shuffled; and each bad input refused in one line naming the file and the problem.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/lib.sh
begin_checks
python3 - "$TMP" <<'PY'
import random, sys
d = sys.argv[1]
HEAD = "example\tlabel\tpick\tpick_sum\tmean0\tmean1\tmean2\tmean3\ttokens0\ttokens1\ttokens2\ttokens3\n"
def write(name, picks, labels=None, order=None, head=HEAD, extra=""):
    labels = labels or [0] * len(picks)
    rows = [f"{e}\t{labels[e]}\t{p}\t{p}\t-1\t-2\t-3\t-4\t5\t5\t5\t5\n" for e, p in enumerate(picks)]
    if order:
        random.Random(order).shuffle(rows)
    open(f"{d}/{name}.tsv", "w").write(head + "".join(rows) + extra)
a = [0] * 10 + [1] * 10             # right on 0-9
b = [0] * 8 + [1] * 2 + [0] * 6 + [1] * 4  # right on 0-7 and 10-15
write("a", a)
write("b", b)
write("b_shuffled", b, order=7)
write("b_short", b[:19])
write("b_labels", b, labels=[0] * 19 + [2])
write("bad_head", b, head="ex\tlabel\tpick\n")
write("bad_row", b, extra="20\tx\t0\n")
write("dup", b, extra="3\t0\t0\t0\t-1\t-2\t-3\t-4\t5\t5\t5\t5\n")
PY
want='^hellaswag paired: B 70\.00% against A 50\.00% over 20 examples: \+20\.00 points \(95% -6\.30 \.\. \+46\.30\); right only in A 2, only in B 6 \(sign test p 0\.289\); same pick 60\.0%$'
out=$(python3 scripts/bench/hellaswag_paired.py "$TMP/a.tsv" "$TMP/b.tsv" --names A B 2>&1)
expect_line "the accuracies, the paired difference and its interval, the discordant counts, the sign test" "$want" "$out"
out=$(python3 scripts/bench/hellaswag_paired.py "$TMP/a.tsv" "$TMP/b_shuffled.tsv" --names A B 2>&1)
expect_line "the rows' order does not matter" "$want" "$out"
out=$(python3 scripts/bench/hellaswag_paired.py "$TMP/b.tsv" "$TMP/a.tsv" --names B A 2>&1)
expect_line "swapped: the difference's sign and the counts swap" '^hellaswag paired: A 50\.00% against B 70\.00% over 20 examples: -20\.00 points \(95% -46\.30 \.\. \+6\.30\); right only in B 6, only in A 2 \(sign test p 0\.289\)' "$out"
out=$(python3 scripts/bench/hellaswag_paired.py "$TMP/a.tsv" "$TMP/a.tsv" 2>&1)
expect_line "a file against itself: no difference, p 1" '\+0\.00 points \(95% \+0\.00 \.\. \+0\.00\); right only in .* 0, only in .* 0 \(sign test p 1\.000\); same pick 100\.0%$' "$out"
H=scripts/bench/hellaswag_paired.py
expect_error "a missing file" "$TMP/nope.tsv: cannot open" python3 $H "$TMP/a.tsv" "$TMP/nope.tsv"
expect_error "not a picks file" "bad_head.tsv: not a -hp picks file" python3 $H "$TMP/a.tsv" "$TMP/bad_head.tsv"
expect_error "a row that is not integers" "bad_row.tsv: line 22: example, label and pick must be integers" \
    python3 $H "$TMP/a.tsv" "$TMP/bad_row.tsv"
expect_error "an example twice" "dup.tsv: line 22: example 3 appears twice" python3 $H "$TMP/a.tsv" "$TMP/dup.tsv"
expect_error "other examples" "hold different examples (20 and 19): not the same eval file" \
    python3 $H "$TMP/a.tsv" "$TMP/b_short.tsv"
expect_error "other labels" "example 19 has labels 0 and 2: not the same eval file" \
    python3 $H "$TMP/a.tsv" "$TMP/b_labels.tsv"
end_checks hellaswag-paired
