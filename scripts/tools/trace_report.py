#!/usr/bin/env python3
"""Where a traced training step's time went (LLMC_TRACE=PREFIX, llmc/app/train/step_trace.h), from the
PREFIX.rank<R>.json files the trainer writes: per rank, the exposed communication (collectives and copies on the
communication stream while no compute kernel runs) as intervals with what ran, the largest idle gaps with the
records around them, the idle gaps by length with the commonest pairs of records around the small ones (launch gaps
that add up), and, given --baseline PREFIX of a one-GPU trace, where the longer step went (step = compute busy +
exposed communication + idle, each against the baseline's; the compute kernels' time split into kernels only this
trace has, kernels only the baseline has, and the change of the kernels both have) and how much longer each ran.
With the traces of several ranks, each rank's time inside the step's NCCL collectives beyond the rank that spent the
least in the same collective (every rank issues them in the same order): a collective's kernel starts when its rank
gets there and ends when the last rank has, so the difference is mostly waiting for a slower rank.

  python3 scripts/tools/trace_report.py PREFIX [--baseline PREFIX1] [--step 6] [--top 12]
"""
import argparse
import bisect
import glob
import json
import re
import sys
from collections import Counter, defaultdict


def load(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    recs = [e for e in events if e.get("ph") == "X"]
    marks = {e["name"]: e["ts"] for e in events if e.get("ph") == "i"}
    return recs, marks


def union(intervals):
    out = []
    for b, e in sorted(intervals):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def subtract(a, b):
    """a minus b, both sorted disjoint unions."""
    out, j = [], 0
    for lo, hi in a:
        cur = lo
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < hi:
            if b[k][0] > cur:
                out.append([cur, b[k][0]])
            cur = max(cur, b[k][1])
            k += 1
        if cur < hi:
            out.append([cur, hi])
    return out


class TraceError(Exception):
    pass


UNREADABLE = (OSError, ValueError, KeyError, TypeError)  # a missing, truncated or foreign file


def window(recs, marks, step):
    lo, hi = marks.get(f"step {step}"), marks.get(f"step {step} end")
    if lo is None or hi is None:
        raise TraceError(f"no 'step {step}' marks in the trace (LLMC_TRACE_STEP?)")
    inside = [r for r in recs if r["ts"] + r["dur"] > lo and r["ts"] < hi]
    return lo, hi, inside


def clip(r, lo, hi):
    return max(r["ts"], lo), min(r["ts"] + r["dur"], hi)


def split(inside, lo, hi):
    """The step's compute-busy intervals, exposed communication and idle gaps (step = compute + exposed + idle)."""
    comp = union([list(clip(r, lo, hi)) for r in inside if r["cat"] == "compute"])
    comm = union([list(clip(r, lo, hi)) for r in inside if r["cat"] == "comm"])
    exposed = subtract(comm, comp)
    idle = subtract([[lo, hi]], union(comp + comm))
    return comp, exposed, idle


def length(intervals):
    return sum(e - b for b, e in intervals)


def kernel_totals(inside, lo, hi):
    t = defaultdict(float)
    for r in inside:
        if r["cat"] == "compute" and lo <= r["ts"] < hi:
            t[r["name"]] += r["dur"]
    return t


def report(path, step, top, baseline):
    recs, marks = load(path)
    lo, hi, inside = window(recs, marks, step)
    comp, exposed, idle = split(inside, lo, hi)
    ms = lambda us: us / 1e3
    print(f"== {path}: step {step}, {ms(hi - lo):.3f} ms; exposed communication "
          f"{ms(sum(e - b for b, e in exposed)):.3f} ms in {len(exposed)} pieces, idle {ms(sum(e - b for b, e in idle)):.3f} ms")
    print(f"  exposed communication (the largest {top}; start from the step's start, ms):")
    for b, e in sorted(exposed, key=lambda x: x[0] - x[1])[:top]:
        names = sorted({r["name"] for r in inside if r["cat"] == "comm" and r["ts"] < e and r["ts"] + r["dur"] > b})
        print(f"    {ms(b - lo):8.3f} +{ms(e - b):.3f}  {', '.join(names)[:110]}")
    print(f"  idle gaps (the largest {top}):")
    by_end = sorted(inside, key=lambda r: r["ts"] + r["dur"])
    ends = [r["ts"] + r["dur"] for r in by_end]
    by_start = sorted(inside, key=lambda r: r["ts"])
    starts = [r["ts"] for r in by_start]

    def around(b, e):  # the record that ended last before the gap, the one that starts first after it
        i, j = bisect.bisect_right(ends, b + 0.01), bisect.bisect_left(starts, e - 0.01)
        return (by_end[i - 1]["name"] if i else "(window start)"), (by_start[j]["name"] if j < len(by_start) else "(window end)")

    for b, e in sorted(idle, key=lambda x: x[0] - x[1])[:top]:
        prev, nxt = around(b, e)
        print(f"    {ms(b - lo):8.3f} +{ms(e - b):.3f}  after {prev[:50]} / before {nxt[:50]}")
    # launch gaps: many small gaps between the same kernels add up where one large one would show above
    classes = [(0, 2), (2, 5), (5, 10), (10, 20), (20, float("inf"))]
    parts = []
    for a, z in classes:
        g = [e - b for b, e in idle if a <= e - b < z]
        parts.append(f"{a}-{z if z != float('inf') else ''} us: {len(g)} ({ms(sum(g)):.3f} ms)")
    print("  idle gaps by length: " + ", ".join(parts))
    pairs, pair_us = Counter(), defaultdict(float)
    for b, e in idle:
        if 2 <= e - b < 20:
            k = around(b, e)
            pairs[k] += 1
            pair_us[k] += e - b
    print("  the commonest gaps of 2-20 us (count x mean, between):")
    for k, n in pairs.most_common(min(top, 8)):
        print(f"    {n:4d} x {pair_us[k] / n:5.1f} us  {k[0][:45]} -> {k[1][:45]}")
    if baseline:
        baseline_totals = baseline["totals"]
        totals = kernel_totals(inside, lo, hi)
        only_here = sum(v for n, v in totals.items() if n not in baseline_totals)
        only_there = sum(v for n, v in baseline_totals.items() if n not in totals)
        both = sum(v - baseline_totals[n] for n, v in totals.items() if n in baseline_totals)
        print(f"  against the one-GPU trace: step {ms(hi - lo - baseline['step']):+.3f} ms = compute busy "
              f"{ms(length(comp) - baseline['compute']):+.3f} + exposed communication "
              f"{ms(length(exposed) - baseline['exposed']):+.3f} + idle {ms(length(idle) - baseline['idle']):+.3f}; "
              f"the kernels' time: only here {ms(only_here):+.3f}, only there {ms(-only_there):+.3f}, "
              f"the same kernels {ms(both):+.3f}")
        rows = sorted(((totals[n] - baseline_totals.get(n, 0.0), n) for n in totals), reverse=True)
        grown = sum(d for d, _ in rows)
        print(f"  compute kernels against the one-GPU trace: {ms(grown):+.3f} ms in all; the largest changes:")
        for d, n in rows[:top]:
            print(f"    {ms(d):+8.3f} ms  {ms(totals[n]):8.3f} (one GPU {ms(baseline_totals.get(n, 0.0)):8.3f})  {n[:70]}")


def collectives(path, step):
    """Every NCCL collective of the trace (both recorded steps) in order, and the step's window."""
    recs, marks = load(path)
    lo, hi, _ = window(recs, marks, step)
    ours = [r for r in recs if r.get("cat") == "comm" and r["name"].startswith("nccl")]
    return sorted(ours, key=lambda r: r["ts"]), lo, hi


def report_waits(files, step, top, shown):
    """Per shown rank: its time in the step's collectives beyond the quickest rank's in the same one. A collective's
    kernel starts when its rank gets there and ends when the last rank has, so the extra time is at its start: it
    counts where that part falls inside this rank's step (the trace also holds the step before)."""
    per = {}
    for f in files:
        try:
            per[f] = collectives(f, step)
        except TraceError:
            print(f"== waiting for other ranks: not compared, {f} has no 'step {step}' marks")
            return
        except UNREADABLE as e:
            print(f"== waiting for other ranks: not compared, {f} cannot be read ({e.__class__.__name__})")
            return
    counts = [len(per[f][0]) for f in files]
    if len(set(counts)) != 1:
        print("== waiting for other ranks: not compared, the ranks' traces hold "
              + " / ".join(map(str, counts)) + " collectives")
        return
    if any([r["name"] for r in per[f][0]] != [r["name"] for r in per[files[0]][0]] for f in files):
        print("== waiting for other ranks: not compared, the ranks' collectives differ in order or kind")
        return
    n = counts[0]
    shortest = [min(per[f][0][i]["dur"] for f in files) for i in range(n)]
    for f in shown:
        recs, lo, hi = per[f]
        waits = []  # (wait inside the step, index) for the collectives that overlap the step
        for i, r in enumerate(recs):
            if r["ts"] + r["dur"] <= lo or r["ts"] >= hi:
                continue
            b, e = max(r["ts"], lo), min(r["ts"] + r["dur"] - shortest[i], hi)
            waits.append((max(0.0, e - b), i))
        if not waits:
            print(f"== {f}: waiting for other ranks: no NCCL collectives in step {step}")
            continue
        total = sum(w for w, _ in waits)
        print(f"== {f}: waiting for other ranks: {total / 1e3:.3f} ms in {len(waits)} collectives (time in each beyond "
              f"the rank that spent the least in it, inside the step); the largest:")
        for w, i in sorted(waits, reverse=True)[:min(top, 5)]:
            if w <= 0:
                break
            r = recs[i]
            print(f"    {w / 1e3:+.3f} ms  collective {i + 1} of {n} in the trace: {r['dur'] / 1e3:.3f} here, "
                  f"{shortest[i] / 1e3:.3f} on the quickest rank  {r['name'][:60]}")


def baseline_of(prefix, step):
    """Rank 0's step of the baseline trace: its length, compute busy, exposed communication, idle, kernel totals."""
    path = sorted(glob.glob(prefix + ".rank0.json"))
    if not path:
        sys.exit(f"error: {prefix}.rank0.json not found")
    recs, marks = load(path[0])
    lo, hi, inside = window(recs, marks, step)
    comp, exposed, idle = split(inside, lo, hi)
    return {"step": hi - lo, "compute": length(comp), "exposed": length(exposed), "idle": length(idle),
            "totals": kernel_totals(inside, lo, hi)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prefix")
    ap.add_argument("--baseline", help="PREFIX of a one-GPU trace of the same model and batch")
    ap.add_argument("--step", type=int, default=6)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--ranks", default="all", help="'all' or a comma list")
    a = ap.parse_args()
    files = sorted(glob.glob(a.prefix + ".rank*.json"), key=lambda p: int(re.search(r"rank(\d+)", p).group(1)))
    if not files:
        sys.exit(f"error: no {a.prefix}.rank*.json files")
    every = files
    if a.ranks != "all":
        want = {int(x) for x in a.ranks.split(",")}
        files = [f for f in files if int(re.search(r"rank(\d+)", f).group(1)) in want]
    try:
        base = baseline_of(a.baseline, a.step) if a.baseline else None
    except (TraceError,) + UNREADABLE as e:
        sys.exit(f"error: the baseline {a.baseline}: {e}")
    failed = 0
    for f in files:  # a rank's unreadable trace is one line; the others are still reported
        try:
            report(f, a.step, a.top, base)
        except (TraceError,) + UNREADABLE as e:
            why = str(e) if isinstance(e, TraceError) else f"cannot be read ({e.__class__.__name__}: {e})"
            print(f"error: {f}: {why}", file=sys.stderr)
            failed += 1
    if len(every) > 1:
        report_waits(every, a.step, a.top, files)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
