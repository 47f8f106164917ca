#!/usr/bin/env python3
"""A token shard of uniformly random GPT-2 token ids, for speed measurements (speed does not depend on the text).

    scripts/reference/make_random_shard.py OUT.bin [NUM_TOKENS]      (default 2,000,000 tokens, seed 0)

Format 20240520, as data/prepro writes it: a header of 256 int32 (magic, version 1, token count), then uint16 ids.
"""
import sys

import numpy as np

if len(sys.argv) not in (2, 3):
    sys.exit(__doc__)
n = int(sys.argv[2]) if len(sys.argv) == 3 else 2_000_000
header = np.zeros(256, dtype=np.int32)
header[0], header[1], header[2] = 20240520, 1, n
tokens = np.random.default_rng(0).integers(0, 50257, size=n, dtype=np.uint16)
with open(sys.argv[1], "wb") as f:
    f.write(header.tobytes())
    f.write(tokens.tobytes())
