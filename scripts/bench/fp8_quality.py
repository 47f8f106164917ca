#!/usr/bin/env python3
"""FP8 against BF16 from the main.log files of runs with the same seed, data and settings (issue 64's quality points).

Prints every validation's losses, then one verdict line:
  - every validation after step --after within the tolerance of BF16's: max(--tol, BF16's seed-to-seed difference)
    when a second BF16 seed is given (with --fixed-tol, --tol all the same: the spread only printed), else --tol;
    the best validation losses likewise;
  - every logged loss finite and every step logged (the trainer never skips an update: it stops on a NaN);
  - with --spike S: FP8's train loss, averaged over 10 steps, never more than S above BF16's at the same steps;
  - where the runs evaluated HellaSwag (-h 1): FP8's last accuracy within --eval-points of BF16's (the means of the
    last EVAL_MEAN_LAST evaluations printed beside them, not judged);
  - with --train-mean A B: FP8's mean train loss over steps A..B within --tol of BF16's (the runs need not validate).
Exit status 1 when a point fails.
Several seeds (--bf16 and --fp8 one DIR per seed, --seeds their numbers) or --bf16-floor (a BF16 run at the first
seed that differs only in rounding): one seed cannot tell FP8's loss from the seed's luck, so instead per validation
the signed gap fp8 - bf16 of each seed, its mean, the floor's |bf16 floor - bf16| and BF16's seed-to-seed spread
(max - min), then one line: the mean gap within --tol at every validation after --after; every run finite, every
step logged, and with --spike no spike in any seed.
    scripts/bench/fp8_quality.py --label d12 --bf16 DIR [--bf16-seed2 DIR] --fp8 DIR [--after 100] [--tol 0.02]
                                 [--spike S] [--eval-points 1.0] [--steps N] [--train-mean A B]
    scripts/bench/fp8_quality.py --label d48 --bf16 DIR... --fp8 DIR... --seeds 42 43 ... [--bf16-floor DIR] ...
"""
import argparse
import math
import os
import re
import sys

EVAL_MEAN_LAST = 9  # the evaluations whose mean is printed beside the last one


def read_log(path):
    """{'trl': {step: loss}, 'tel': {...}, 'eval': {...}} from llm.c's main.log lines (s:<step> <key>:<value>)."""
    out = {"trl": {}, "tel": {}, "eval": {}}
    for line in open(path):
        m = re.match(r"s:(\d+) (trl|tel|eval):(\S+)", line)
        if m:
            out[m.group(2)][int(m.group(1))] = float(m.group(3))
    return out


def smoothed(series, width=10):
    steps = sorted(series)
    return {s: sum(series[t] for t in steps[max(0, i - width + 1):i + 1]) / min(width, i + 1)
            for i, s in enumerate(steps)}


def spike(bf, f8):
    """How far FP8's train loss rises above BF16's at most, both averaged over 10 steps."""
    sb, sf = smoothed(bf["trl"]), smoothed(f8["trl"])
    return max((sf[s] - sb[s] for s in set(sb) & set(sf)), default=float("nan"))


def sanity(name, log, steps):
    """The problems of one run: a non-finite loss, a step not logged (the trainer stops on a NaN, it never skips)."""
    problems = []
    if not all(math.isfinite(v) for series in log.values() for v in series.values()):
        problems.append(f"a non-finite loss in the {name} run")
    if steps and len(log["trl"]) != steps:
        problems.append(f"the {name} run logged {len(log['trl'])} of {steps} steps")
    return problems


def several_seeds(a, tag):
    """FP8 against BF16 over seeds: the mean signed gap is the verdict (FP8 better at one seed offsets worse at
    another, as BF16's own seeds do); the floor and the spread are printed to weigh it against."""
    seeds = a.seeds or list(range(1, len(a.bf16) + 1))
    if not len(a.bf16) == len(a.fp8) == len(seeds):
        sys.exit(f"{tag} NO (--bf16, --fp8 and --seeds need one entry per seed)")
    bfs = [read_log(f"{d}/main.log") for d in a.bf16]
    f8s = [read_log(f"{d}/main.log") for d in a.fp8]
    fl = read_log(f"{a.bf16_floor}/main.log") if a.bf16_floor else None
    steps = sorted(set.intersection(*(set(log["tel"]) for log in bfs + f8s + ([fl] if fl else []))))
    print(f"{tag} step | " + " | ".join(f"fp8 - bf16 seed {s}" for s in seeds) + " | mean gap" +
          (f" | bf16 floor seed {seeds[0]}" if fl else "") + (" | bf16 seed spread" if len(seeds) > 1 else ""))
    late, mean, worst, floor, spread = [], [], [], [], []
    for s in steps:
        gaps = [f8["tel"][s] - bf["tel"][s] for bf, f8 in zip(bfs, f8s)]
        row = [sum(gaps) / len(gaps)]
        if fl:
            row.append(abs(fl["tel"][s] - bfs[0]["tel"][s]))
        if len(seeds) > 1:
            row.append(max(bf["tel"][s] for bf in bfs) - min(bf["tel"][s] for bf in bfs))
        print(f"{tag} {s} | " + " | ".join(f"{x:+.4f}" for x in gaps) + " | " + " | ".join(f"{x:.4f}" for x in row))
        if s > a.after:
            late.append(s)
            mean.append(row[0])
            worst += [(g, seed, s) for g, seed in zip(gaps, seeds)]
            if fl:
                floor.append(row[1])
            if len(seeds) > 1:
                spread.append(row[-1])
    problems = [] if late else [f"no validation after step {a.after}"]
    top = max(mean, default=float("nan"))
    if late and not top <= a.tol:
        problems.append(f"mean gap {top:.4f} > {a.tol:.4f} at step {late[mean.index(top)]}")
    for seed, bf, f8 in zip(seeds, bfs, f8s):
        problems += sanity(f"bf16 seed {seed}", bf, a.steps) + sanity(f"fp8 seed {seed}", f8, a.steps)
        if a.spike is not None:
            excess = spike(bf, f8)
            if not excess <= a.spike:
                problems.append(f"a spike at seed {seed}: {excess:.4f} > {a.spike}")
    if fl:
        problems += sanity("bf16 floor", fl, a.steps)
    g, g_seed, g_step = max(worst, default=(float("nan"), "-", "-"))
    print(f"{tag[:-1]} over {len(seeds)} seed{'s' * (len(seeds) > 1)}: mean gap (fp8 - bf16, mean over seeds) at "
          f"most {top:.4f} after step {a.after}, worst seed {g:.4f} (seed {g_seed}, step {g_step}); bf16 floor " +
          (f"|floor - bf16| at most {max(floor):.4f} (seed {seeds[0]})" if floor else "not run") +
          "; bf16 seed spread " + (f"(max - min) at most {max(spread):.4f}" if spread else "not measured (one seed)") +
          f"; mean gap within {a.tol:g} at every validation: " +
          ("yes" if not problems else "NO (" + "; ".join(problems) + ")"))
    sys.exit(0 if not problems else 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--label", default="d12")
    p.add_argument("--bf16", required=True, nargs="+", help="the BF16 run's -o directory (several: one per seed)")
    p.add_argument("--bf16-seed2", default="", help="a BF16 run with another seed: BF16's own spread")
    p.add_argument("--fixed-tol", action="store_true", help="print the spread but keep --tol as the bound")
    p.add_argument("--fp8", required=True, nargs="+", help="the FP8 run's -o directory (several: one per seed)")
    p.add_argument("--seeds", type=int, nargs="+", default=[], help="the seeds of --bf16's and --fp8's runs")
    p.add_argument("--bf16-floor", default="", help="a BF16 run at the first seed differing only in rounding")
    p.add_argument("--after", type=int, default=100)
    p.add_argument("--tol", type=float, default=0.02)
    p.add_argument("--spike", type=float, default=None)
    p.add_argument("--eval-points", type=float, default=1.0, help="HellaSwag: percentage points")
    p.add_argument("--steps", type=int, default=0, help="the steps each run was asked for (0: not checked)")
    p.add_argument("--train-mean", type=int, nargs=2, default=None, metavar=("A", "B"))
    a = p.parse_args()
    tag = f"fp8 quality {a.label}:"
    missing = [d for d in a.bf16 + a.fp8 + [a.bf16_seed2, a.bf16_floor] if d and not os.path.isfile(f"{d}/main.log")]
    if missing:  # a run that did not start or finish: one line, not a traceback
        print(f"{tag} NO (no main.log in {', '.join(missing)}: the run did not finish)")
        sys.exit(1)
    if len(a.bf16) > 1 or len(a.fp8) > 1 or a.bf16_floor:
        several_seeds(a, tag)
    bf, f8 = read_log(f"{a.bf16[0]}/main.log"), read_log(f"{a.fp8[0]}/main.log")
    b2 = read_log(f"{a.bf16_seed2}/main.log") if a.bf16_seed2 else None
    steps = sorted(set(bf["tel"]) & set(f8["tel"]) & (set(b2["tel"]) if b2 else set(bf["tel"])))
    if steps:
        print(f"{tag} step | bf16 | " + ("bf16 seed 2 | " if b2 else "") + "fp8")
    for s in steps:
        print(f"{tag} {s} | {bf['tel'][s]:.4f} | " + (f"{b2['tel'][s]:.4f} | " if b2 else "") + f"{f8['tel'][s]:.4f}")
    late = [s for s in steps if s > a.after]
    problems = []
    if not late and not a.train_mean:
        problems.append(f"no validation after step {a.after}")
    spread = max((abs(b2["tel"][s] - bf["tel"][s]) for s in late), default=0.0) if b2 else 0.0
    tol = a.tol if a.fixed_tol else max(a.tol, spread)
    gap = max((abs(f8["tel"][s] - bf["tel"][s]) for s in late), default=float("nan"))
    best_bf, best_f8 = min(bf["tel"].values(), default=math.nan), min(f8["tel"].values(), default=math.nan)
    if late and not gap <= tol:
        problems.append(f"validation gap {gap:.4f} > {tol:.4f}")
    if late and not abs(best_f8 - best_bf) <= tol:
        problems.append(f"best validation {best_f8:.4f} against {best_bf:.4f}")
    problems += sanity("bf16", bf, a.steps) + sanity("fp8", f8, a.steps)
    if late:
        detail = (f"after step {a.after} the largest |fp8 - bf16| {gap:.4f}" +
                  (f", bf16's seed-to-seed {spread:.4f}" if b2 else "") +
                  f"; best validation bf16 {best_bf:.4f}, fp8 {best_f8:.4f}; tolerance {tol:.4f}")
    else:
        detail = "no validation (the runs were asked for none)"
    if a.train_mean:
        lo, hi = a.train_mean
        means = []
        for log in (bf, f8):
            window = [v for s, v in log["trl"].items() if lo <= s <= hi]
            means.append(sum(window) / len(window) if window else float("nan"))
        detail += f"; mean train loss over steps {lo}-{hi} bf16 {means[0]:.4f}, fp8 {means[1]:.4f}"
        if not abs(means[1] - means[0]) <= a.tol:
            problems.append(f"mean train loss {means[1]:.4f} against {means[0]:.4f}")
    if a.spike is not None:
        excess = spike(bf, f8)
        detail += f"; fp8's train loss at most {excess:.4f} above bf16's (10-step means)"
        if not excess <= a.spike:
            problems.append(f"a spike: {excess:.4f} > {a.spike}")
    if bf["eval"] and f8["eval"]:
        acc_bf, acc_f8 = bf["eval"][max(bf["eval"])], f8["eval"][max(f8["eval"])]
        detail += f"; HellaSwag-format eval bf16 {100 * acc_bf:.2f}%, fp8 {100 * acc_f8:.2f}%"
        # one evaluation moves by about a point between evaluations of one run: the mean of the last ones beside it
        # (reported, not judged: the verdict is the last evaluation's, as the issue states it)
        last_bf, last_f8 = sorted(bf["eval"])[-EVAL_MEAN_LAST:], sorted(f8["eval"])[-EVAL_MEAN_LAST:]
        mean_bf = sum(bf["eval"][s] for s in last_bf) / len(last_bf)
        mean_f8 = sum(f8["eval"][s] for s in last_f8) / len(last_f8)
        detail += (f" (means of the last {len(last_f8)} evaluations, steps {last_f8[0]}-{last_f8[-1]}: "
                   f"bf16 {100 * mean_bf:.2f}%, fp8 {100 * mean_f8:.2f}%)")
        if not abs(acc_f8 - acc_bf) * 100 <= a.eval_points:
            problems.append(f"eval accuracy {100 * acc_f8:.2f}% against {100 * acc_bf:.2f}%")
    print(f"{tag} {detail}: {'yes' if not problems else 'NO (' + '; '.join(problems) + ')'}")
    sys.exit(0 if not problems else 1)


if __name__ == "__main__":
    main()
