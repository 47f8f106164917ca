#!/usr/bin/env bash
# scripts/tools/trace_report.py on two hand-made traces (the trainer's LLMC_TRACE format): a one-GPU step of 100 us and a
# two-GPU step of 130 us whose compute kernels, copy-engine sum, collective and gaps are placed so every figure is
# known. Checks the step's split (compute busy + exposed communication + idle, each against the one-GPU trace), the
# kernels' split (only here, only there, the same kernels), the exposed interval, the largest gap, the per-kernel
# rows, and each rank's time waiting in a collective for the other. Fails if a figure is off.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/lib.sh
begin_checks
tmp=$TMP
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
def trace(path, marks, recs):
    ev = [{"ph": "i", "name": n, "ts": t} for n, t in marks]
    ev += [{"ph": "X", "name": n, "cat": c, "ts": t, "dur": u} for n, c, t, u in recs]
    json.dump({"traceEvents": ev}, open(path, "w"))
# one GPU: gemm 0-60, layernorm 60-90, idle 90-100 (the update's end)
trace(f"{d}/one.rank0.json", [("step 6", 0), ("step 6 end", 100)],
      [("gemm", "compute", 0, 60), ("layernorm", "compute", 60, 30), ("adamw_full", "compute", 90, 5)])
# two GPUs: gemm 0-63 (+3), a collective 50-70 (20 us, 7 exposed after the gemm), layernorm 70-100, the sum
# 100-110 (a kernel only here), idle 110-120, the shard update 120-125, idle 125-130
trace(f"{d}/two.rank0.json", [("step 6", 0), ("step 6 end", 130)],
      [("gemm", "compute", 0, 63), ("ncclReduceScatter", "comm", 50, 20), ("layernorm", "compute", 70, 30),
       ("mean_kernel", "compute", 100, 10), ("adamw_shard", "compute", 120, 5)])
# its rank 1 reaches the collective last: 5 us there, so rank 0 spent 15 us waiting in it
trace(f"{d}/two.rank1.json", [("step 6", 0), ("step 6 end", 130)],
      [("gemm", "compute", 0, 65), ("ncclReduceScatter", "comm", 65, 5), ("layernorm", "compute", 70, 30)])
# the step before's all-gather runs 20 us into this step on rank 0, 8 us on rank 1 (ended before the step): of rank
# 0's 22 us of waiting, 2 fall inside the step
trace(f"{d}/cross.rank0.json", [("step 6", 0), ("step 6 end", 50)],
      [("ncclAllGather", "comm", -20, 30), ("ncclReduceScatter", "comm", 20, 5)])
trace(f"{d}/cross.rank1.json", [("step 6", 0), ("step 6 end", 50)],
      [("ncclAllGather", "comm", -20, 8), ("ncclReduceScatter", "comm", 20, 5)])
# rank 0's collective runs 45-55 us, past the step's end at 50; rank 1's takes 1 us: rank 0's 9 us of waiting are
# 45-54, of which 45-50 fall inside the step
trace(f"{d}/late.rank0.json", [("step 6", 0), ("step 6 end", 50)], [("ncclAllReduce", "comm", 45, 10)])
trace(f"{d}/late.rank1.json", [("step 6", 0), ("step 6 end", 50)], [("ncclAllReduce", "comm", 49, 1)])
# the same number of collectives, one of another kind
trace(f"{d}/kind.rank0.json", [("step 6", 0), ("step 6 end", 50)], [("ncclAllReduce", "comm", 0, 5)])
trace(f"{d}/kind.rank1.json", [("step 6", 0), ("step 6 end", 50)], [("ncclAllGather", "comm", 0, 5)])
# a rank whose trace lacks the step
trace(f"{d}/gap.rank0.json", [("step 6", 0), ("step 6 end", 50)], [("ncclAllReduce", "comm", 0, 5)])
trace(f"{d}/gap.rank1.json", [("step 5", 0), ("step 5 end", 50)], [("ncclAllReduce", "comm", 0, 5)])
# ranks whose steps hold different numbers of collectives are not compared
trace(f"{d}/odd.rank0.json", [("step 6", 0), ("step 6 end", 50)], [("ncclAllReduce", "comm", 0, 5)])
trace(f"{d}/odd.rank1.json", [("step 6", 0), ("step 6 end", 50)],
      [("ncclAllReduce", "comm", 0, 5), ("ncclAllGather", "comm", 10, 5)])
PY
out=$(python3 scripts/tools/trace_report.py "$tmp/two" --baseline "$tmp/one" 2>&1)
rc=$?
check() { expect_line "$1" "$2" "$out"; }  # name, extended regex a line of the output must match
[ $rc = 0 ] && ok "exits 0" || bad "exited $rc"
# one GPU: step 100, compute 95, exposed 0, idle 5; two: step 130, compute 108, exposed 7, idle 15
check "the step's header" 'step 6, 0\.130 ms; exposed communication 0\.007 ms in 1 pieces, idle 0\.015 ms'
check "the step split against one GPU" \
    'against the one-GPU trace: step \+0\.030 ms = compute busy \+0\.013 \+ exposed communication \+0\.007 \+ idle \+0\.010;'
check "the kernels split" 'only here \+0\.015, only there -0\.005, the same kernels \+0\.003$'
check "the exposed interval and what ran" '^ +0\.063 \+0\.007  ncclReduceScatter$'
check "the largest idle gap and its neighbours" '^ +0\.110 \+0\.010  after mean_kernel / before adamw_shard$'
check "a kernel only here in the rows" '^ +\+0\.010 ms +0\.010 \(one GPU +0\.000\)  mean_kernel$'
check "a grown kernel in the rows" '^ +\+0\.003 ms +0\.063 \(one GPU +0\.060\)  gemm$'
check "rank 0's wait for rank 1" '^== .*two\.rank0\.json: waiting for other ranks: 0\.015 ms in 1 collectives'
check "the collective it waited in" '^ +\+0\.015 ms  collective 1 of 1 in the trace: 0\.020 here, 0\.005 on the quickest rank  ncclReduceScatter$'
check "rank 1 waited for none" '^== .*two\.rank1\.json: waiting for other ranks: 0\.000 ms in 1 collectives'
odd=$(python3 scripts/tools/trace_report.py "$tmp/odd" 2>&1)
expect_line "ranks with different collectives are not compared" \
    '^== waiting for other ranks: not compared, the ranks.* traces hold 1 / 2 collectives$' "$odd"
one=$(python3 scripts/tools/trace_report.py "$tmp/two" --ranks 0 2>&1)
expect_line "--ranks 0 still compares with rank 1" '^== .*two\.rank0\.json: waiting for other ranks: 0\.015 ms in 1 collectives' "$one"
cross=$(python3 scripts/tools/trace_report.py "$tmp/cross" --ranks 0 2>&1)
expect_line "a collective from the step before: only its part inside the step" \
    '^== .*cross\.rank0\.json: waiting for other ranks: 0\.002 ms in 2 collectives' "$cross"
late=$(python3 scripts/tools/trace_report.py "$tmp/late" --ranks 0 2>&1)
expect_line "a wait past the step's end: only its part inside" '^== .*late\.rank0\.json: waiting for other ranks: 0\.005 ms in 1 collectives' "$late"
kind=$(python3 scripts/tools/trace_report.py "$tmp/kind" 2>&1)
expect_line "ranks with collectives of different kinds are not compared" \
    '^== waiting for other ranks: not compared, the ranks.* collectives differ in order or kind$' "$kind"
gap=$(python3 scripts/tools/trace_report.py "$tmp/gap" 2>&1)
rc=$?
[ $rc = 1 ] && expect_line "every rank: the rank without the step is one error line" \
    "^error: .*gap\.rank1\.json: no 'step 6' marks in the trace" "$gap" && expect_line "... and rank 0 is still reported" \
    '^== .*gap\.rank0\.json: step 6, ' "$gap" || bad "every rank with one lacking the step: exit $rc"
gap=$(python3 scripts/tools/trace_report.py "$tmp/gap" --ranks 0 2>&1)
rc=$?
[ $rc = 0 ] && expect_line "a rank without the step: one line, the rest reported" \
    "^== waiting for other ranks: not compared, .*gap\.rank1\.json has no 'step 6' marks$" "$gap" ||
    bad "a rank without the step: exit $rc"
: >"$tmp/gap.rank1.json"
gap=$(python3 scripts/tools/trace_report.py "$tmp/gap" --ranks 0 2>&1)
expect_line "an empty rank file: one line" '^== waiting for other ranks: not compared, .*gap\.rank1\.json cannot be read' "$gap"
out2=$(python3 scripts/tools/trace_report.py "$tmp/none" 2>&1)
[ $? != 0 ] && [ "$(printf '%s\n' "$out2" | wc -l)" = 1 ] && printf '%s\n' "$out2" | grep -q "^error: no .*none.rank\*.json files" &&
    ok "a missing trace is one error line" || bad "a missing trace: $out2"
[ "$fails" = 0 ] || printf '%s\n' "$out"
end_checks trace_report.py
