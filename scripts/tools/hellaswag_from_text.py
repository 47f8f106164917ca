#!/usr/bin/env python3
"""Multiple-choice examples in HellaSwag's JSONL layout made from a text, for data/hellaswag to convert: each context
is 2 or 3 consecutive lines (of at least 3 words), the true ending the line after them, the three distractors lines
from elsewhere (more than 5 lines away), the label drawn at random. Deterministic for a seed.
    scripts/tools/hellaswag_from_text.py TEXT N SEED OUT.jsonl
"""
import json
import random
import sys


def make_jsonl(text_path, n, seed, out_path):
    lines = [l.strip() for l in open(text_path, encoding="utf-8") if len(l.strip().split()) >= 3]
    rng = random.Random(seed)
    with open(out_path, "w") as f:
        for i in range(n):
            k = rng.choice([2, 3])
            at = rng.randrange(0, len(lines) - k - 1)
            ctx = " ".join(lines[at:at + k])
            true = lines[at + k]
            others = []
            while len(others) < 3:
                j = rng.randrange(len(lines))
                if abs(j - (at + k)) > 5 and lines[j] != true:
                    others.append(lines[j])
            label = rng.randrange(4)
            endings = others[:label] + [true] + others[label:]
            f.write(json.dumps({"ind": i, "ctx": ctx, "endings": endings, "label": label}) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__.strip().split("\n")[-1].strip())
    make_jsonl(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
