#!/usr/bin/env bash
# scripts/bench/fp8_quality.py (issue 64's quality verdict) on hand-made main.log files whose figures are known:
# BF16 seed 42, BF16 seed 43 (0.010 above it everywhere), FP8 0.005 above; then FP8 off by 0.03 after step 100, a
# NaN, a missing step, a 0.2 spike in the train loss, and an eval accuracy 2 points lower, each of which must fail
# with its reason, and nothing else; a 300-step trajectory without validations 0.01 and 0.05 above BF16's (and both
# runs without validations: the verdict says so instead of printing NaN). Over seeds: seed 42's FP8 0.03 above and seed
# 43's 0.02 below (mean 0.005: yes, where seed 42 alone fails), or 0.02 above (mean 0.025: NO); a BF16 floor run 0.004
# off seed 42's BF16.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/lib.sh
begin_checks
python3 - "$TMP" <<'PY'
import math, os, sys
d = sys.argv[1]
def write(name, val_off=0.0, train=lambda s: 0.0, acc=0.30, nan_at=None, skip=None, val=True):
    os.makedirs(f"{d}/{name}", exist_ok=True)
    with open(f"{d}/{name}/main.log", "w") as f:
        for s in range(1, 301):
            if s == skip:
                continue
            trl = 5 + 3 * math.exp(-s / 50) + train(s)
            f.write(f"s:{s} trl:{'nan' if s == nan_at else f'{trl:.6f}'}\n")
            if val and s % 25 == 0:
                off = val_off(s) if callable(val_off) else val_off
                f.write(f"s:{s} tel:{5.2 + 3 * math.exp(-s / 50) + off:.6f}\n")
                f.write(f"s:{s} eval:{acc:.4f}\n")
write("bf16")
write("bf16_43", 0.010)
write("fp8", 0.005)
write("fp8_gap", lambda s: 0.03 if s > 100 else 0.0)
write("fp8_early", lambda s: 0.5 if s <= 100 else 0.0)
write("fp8_nan", 0.005, nan_at=200)
write("fp8_skip", 0.005, skip=150)
write("fp8_spike", 0.005, train=lambda s: 0.2 if 200 <= s < 230 else 0.0)
write("fp8_eval", 0.005, acc=0.28)
write("traj_fp8", train=lambda s: 0.01, val=False)
write("traj_fp8_off", train=lambda s: 0.05 if s > 150 else 0.0, val=False)
write("traj_bf16", val=False)
write("bf16_wide", 0.05)
write("fp8_43_below", -0.010)  # bf16_43 is 0.010 above bf16: 0.02 below seed 43's BF16
write("fp8_43_above", 0.030)
write("bf16_floor", 0.004)
PY
verdict() {  # fp8 run, extra flags: the verdict line and the exit status
    out=$(python3 scripts/bench/fp8_quality.py --label t --bf16 "$TMP/bf16" --bf16-seed2 "$TMP/bf16_43" --fp8 "$TMP/$1" \
        --steps 300 "${@:2}" 2>&1)
    rc=$?
    out=$(printf '%s\n' "$out" | tail -n 1)
}
verdict fp8
expect_line "within BF16's spread: yes" 'largest \|fp8 - bf16\| 0\.0050, bf16.s seed-to-seed 0\.0100; .*tolerance 0\.0200.*: yes$' "$out"
[ $rc = 0 ] && ok "exit 0 when every point holds" || bad "exit $rc when every point holds"
verdict fp8_gap
expect_line "a gap after step 100 fails" ": NO \\(validation gap 0\\.0300 > 0\\.0200; best validation 5\\.2374 against 5\\.2074\\)$" "$out"
[ $rc = 1 ] && ok "exit 1 on a failed point" || bad "exit $rc on a failed point"
verdict fp8_early
expect_line "a gap up to step 100 does not count" ': yes$' "$out"
verdict fp8_nan
expect_line "a NaN fails" ': NO \(a non-finite loss in the fp8 run\)$' "$out"
verdict fp8_skip
expect_line "a missing step fails" ': NO \(the fp8 run logged 299 of 300 steps\)$' "$out"
verdict fp8_spike --spike 0.1
expect_line "a spike in the train loss fails" ': NO \(a spike: 0\.2000 > 0\.1\)$' "$out"
verdict fp8_spike
expect_line "no spike check without --spike" ': yes$' "$out"
verdict fp8_eval
expect_line "an eval 2 points lower fails, the last 9 evaluations' means beside it" 'eval bf16 30\.00%, fp8 28\.00% \(means of the last 9 evaluations, steps 100-300: bf16 30\.00%, fp8 28\.00%\): NO \(eval accuracy 28\.00% against 30\.00%\)$' "$out"
verdict traj_fp8 --train-mean 151 300
expect_line "a trajectory 0.01 above over steps 151-300: yes" 'mean train loss over steps 151-300 bf16 5\.0[0-9]{3}, fp8 5\.0[0-9]{3}: yes$' "$out"
verdict traj_fp8_off --train-mean 151 300
expect_line "a trajectory 0.05 above fails" ': NO \(mean train loss 5\.[0-9]{4} against 5\.[0-9]{4}\)$' "$out"
out=$(python3 scripts/bench/fp8_quality.py --label t --bf16 "$TMP/traj_bf16" --fp8 "$TMP/traj_fp8" --steps 300 \
    --train-mean 151 300 2>&1 | tail -n 1)
expect_line "runs without validation: said so, no NaN" \
    ': no validation \(the runs were asked for none\); mean train loss over steps 151-300 bf16 5\.[0-9]{4}, fp8 5\.[0-9]{4}: yes$' "$out"
wide() {
    python3 scripts/bench/fp8_quality.py --label t --bf16 "$TMP/bf16" --bf16-seed2 "$TMP/bf16_wide" --fp8 "$TMP/fp8_gap" \
        --steps 300 "$@" 2>&1 | tail -n 1
}
expect_line "a 0.05 seed-to-seed spread covers a 0.03 gap" 'seed-to-seed 0\.0500; .*tolerance 0\.0500.*: yes$' "$(wide)"
expect_line "--fixed-tol prints the spread and keeps --tol" \
    'seed-to-seed 0\.0500; .*tolerance 0\.0200.*: NO \(validation gap 0\.0300 > 0\.0200' "$(wide --fixed-tol)"
seeds() {  # seed 43's fp8 run, extra flags: seeds 42 (FP8 0.03 above after step 100) and 43
    out=$(python3 scripts/bench/fp8_quality.py --label t --bf16 "$TMP/bf16" "$TMP/bf16_43" --fp8 "$TMP/fp8_gap" \
        "$TMP/$1" --seeds 42 43 --steps 300 "${@:2}" 2>&1)
    rc=$?
}
seeds fp8_43_below --bf16-floor "$TMP/bf16_floor"
expect_line "over seeds: each step's signed gaps, their mean, the floor, the spread" \
    '^fp8 quality t: 200 \| \+0\.0300 \| -0\.0200 \| 0\.0050 \| 0\.0040 \| 0\.0100$' "$out"
want='^fp8 quality t over 2 seeds: mean gap \(fp8 - bf16, mean over seeds\) at most 0\.0050 after step 100, '
want+='worst seed 0\.0300 \(seed 42, step [0-9]+\); bf16 floor \|floor - bf16\| at most 0\.0040 \(seed 42\)'
want+='; bf16 seed spread \(max - min\) at most 0\.0100; mean gap within 0\.02 at every validation: yes$'
expect_line "over seeds: a seed 0.03 above, one 0.02 below: yes" "$want" "$out"
[ $rc = 0 ] && ok "over seeds: exit 0 when the mean holds" || bad "over seeds: exit $rc when the mean holds"
seeds fp8_43_above
expect_line "over seeds: 0.03 and 0.02 above: NO" \
    'at most 0\.0250 after step 100, .*bf16 floor not run; .*: NO \(mean gap 0\.0250 > 0\.0200 at step [0-9]+\)$' "$out"
[ $rc = 1 ] && ok "over seeds: exit 1 when the mean fails" || bad "over seeds: exit $rc when the mean fails"
out=$(python3 scripts/bench/fp8_quality.py --label t --bf16 "$TMP/bf16" --fp8 "$TMP/fp8" --bf16-floor "$TMP/bf16_floor" \
    2>&1 | tail -n 1)
expect_line "one seed and a floor run" \
    'over 1 seed: .* at most 0\.0050 .*floor - bf16\| at most 0\.0040 \(seed 1\); bf16 seed spread not measured .*: yes$' "$out"
out=$(python3 scripts/bench/fp8_quality.py --label t --bf16 "$TMP/bf16" "$TMP/bf16_43" --fp8 "$TMP/fp8" "$TMP/never_ran" \
    2>&1)
expect_line "over seeds, a run without a main.log: one line" "^fp8 quality t: NO \\(no main.log in $TMP/never_ran: " "$out"
out=$(python3 scripts/bench/fp8_quality.py --label t --bf16 "$TMP/bf16" --fp8 "$TMP/never_ran" 2>&1); rc=$?
expect_line "a run without a main.log: one line, exit 1" \
    "^fp8 quality t: NO \\(no main.log in $TMP/never_ran: the run did not finish\\)$" "$out"
[ $rc = 1 ] && ok "exit 1 without a log" || bad "exit $rc without a log"
end_checks "fp8 quality verdict"
