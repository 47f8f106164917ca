#!/usr/bin/env python3
"""Two models' HellaSwag picks compared item by item: the files the trainers write with -hp (one row an example:
example, label, pick, pick_sum, the endings' mean log-probs and token counts), from the same eval file.

Two accuracies on one eval file share their examples, so their difference is judged by the examples where the
models disagree (McNemar): A right and B wrong, A wrong and B right. Printed: each accuracy (acc_norm, llm.c's),
B - A in points with its 95% interval (paired, normal approximation), those two counts and the exact two-sided
p-value of the sign test on them (the chance of a split at least this uneven if neither model were better).

    scripts/bench/hellaswag_paired.py A.tsv B.tsv [--names A B]
"""
import argparse
import math
import sys


def read_picks(path):
    """{example: (label, pick)} from a -hp file; exits with one line naming the file and the row on bad input."""
    out = {}
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        sys.exit(f"error: {path}: cannot open ({e.strerror})")
    with f:
        header = f.readline().rstrip("\n").split("\t")
        if header[:3] != ["example", "label", "pick"]:
            sys.exit(f"error: {path}: not a -hp picks file (its header is not example, label, pick, ...)")
        for n, line in enumerate(f, start=2):
            cols = line.rstrip("\n").split("\t")
            try:
                example, label, pick = int(cols[0]), int(cols[1]), int(cols[2])
            except (ValueError, IndexError):
                sys.exit(f"error: {path}: line {n}: example, label and pick must be integers")
            if example in out:
                sys.exit(f"error: {path}: line {n}: example {example} appears twice")
            out[example] = (label, pick)
    if not out:
        sys.exit(f"error: {path}: no examples")
    return out


def sign_test_p(k, n):
    """Exact two-sided p of k or fewer (or as many or more) successes in n fair coin flips."""
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1))
    return min(1.0, 2 * tail / 2 ** n)


def compare(a, b):
    """The counts and statistics of B against A over their shared examples."""
    n = len(a)
    right_a = sum(label == pick for label, pick in a.values())
    right_b = sum(label == pick for label, pick in b.values())
    only_a = sum(a[e][0] == a[e][1] and b[e][0] != b[e][1] for e in a)  # A right, B wrong
    only_b = sum(a[e][0] != a[e][1] and b[e][0] == b[e][1] for e in a)
    same_pick = sum(a[e][1] == b[e][1] for e in a)
    diff = (only_b - only_a) / n  # = acc_b - acc_a
    se = math.sqrt(max(only_a + only_b - (only_b - only_a) ** 2 / n, 0.0)) / n
    return {"n": n, "acc_a": right_a / n, "acc_b": right_b / n, "diff": diff, "lo": diff - 1.96 * se,
            "hi": diff + 1.96 * se, "only_a": only_a, "only_b": only_b, "same_pick": same_pick / n,
            "p": sign_test_p(min(only_a, only_b), only_a + only_b)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--names", nargs=2, default=None, metavar=("A", "B"), help="labels for the two files")
    args = p.parse_args()
    name_a, name_b = args.names or (args.a, args.b)
    a, b = read_picks(args.a), read_picks(args.b)
    if a.keys() != b.keys():
        sys.exit(f"error: {args.a} and {args.b} hold different examples ({len(a)} and {len(b)}): "
                 f"not the same eval file")
    bad = next((e for e in sorted(a) if a[e][0] != b[e][0]), None)
    if bad is not None:
        sys.exit(f"error: {args.a} and {args.b}: example {bad} has labels {a[bad][0]} and {b[bad][0]}: "
                 f"not the same eval file")
    r = compare(a, b)
    print(f"hellaswag paired: {name_b} {100 * r['acc_b']:.2f}% against {name_a} {100 * r['acc_a']:.2f}% over "
          f"{r['n']} examples: {100 * r['diff']:+.2f} points (95% {100 * r['lo']:+.2f} .. {100 * r['hi']:+.2f}); "
          f"right only in {name_a} {r['only_a']}, only in {name_b} {r['only_b']} (sign test p {r['p']:.3f}); "
          f"same pick {100 * r['same_pick']:.1f}%")


if __name__ == "__main__":
    main()
