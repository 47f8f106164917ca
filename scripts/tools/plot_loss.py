#!/usr/bin/env python3
"""Plots train and val loss from an llm.c-style main.log ("s:<step> trl:<loss>" / "s:<step> tel:<loss>") to a PNG.

    scripts/tools/plot_loss.py out/main.log [-o loss.png] [--title TEXT]

Uses matplotlib when it is installed; otherwise draws the plot itself (standard library only: zlib + a
tiny bitmap font), so it works on machines without matplotlib too.
"""
import argparse
import re
import struct
import sys
import zlib

LINE = re.compile(r"^s:(\d+) (trl|tel|eval):([-+0-9.eEinfa]+)")  # eval: HellaSwag accuracy (-h 1), not plotted


def read_log(path):
    """(train, val) lists of (step, loss); any problem exits with one line "error: <path>: <problem>"."""
    train, val = [], []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        sys.exit(f"error: {path}: cannot read ({e.strerror or e})")
    except UnicodeDecodeError as e:
        sys.exit(f"error: {path}: not a text file (byte {e.start} is not UTF-8)")
    for n, line in enumerate(lines, 1):
        m = LINE.match(line)
        if not m:
            if line.strip():
                sys.exit(f"error: {path}: line {n}: not a main.log line: {line.strip()[:80]!r}")
            continue
        try:
            step, kind, loss = int(m.group(1)), m.group(2), float(m.group(3))
        except ValueError:
            sys.exit(f"error: {path}: line {n}: bad loss value {m.group(3)!r}")
        if kind != "eval":
            (train if kind == "trl" else val).append((step, loss))
    if not train and not val:
        sys.exit(f"error: {path}: no loss lines")
    return train, val


def plot_matplotlib(train, val, out, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    if train:
        ax.plot(*zip(*train), label="train", lw=1)
    if val:
        ax.plot(*zip(*val), "o-", label="val", ms=3)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)


# ---- fallback renderer: RGB canvas, lines, a 3x5 font for tick labels and the legend
FONT = {  # 3 columns x 5 rows, row-major bits
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001010010",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", "-": "000000111000000",
    "a": "000011101101011", "e": "111101111100111", "i": "010000010010010", "l": "110010010010111",
    "n": "000110101101101", "o": "000111101101111", "p": "111101111100100", "r": "000111100100100",
    "s": "011100010001110", "t": "010111010010011", "v": "000101101101010", " ": "000000000000000",
}


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def dot(self, x, y, c, r=0):
        for dy in range(-r, r + 1):
            for dx in range(-r, r + 1):
                xx, yy = int(x) + dx, int(y) + dy
                if 0 <= xx < self.w and 0 <= yy < self.h:
                    i = 3 * (yy * self.w + xx)
                    self.px[i:i + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c, r=0):
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        for k in range(n + 1):
            t = k / n
            self.dot(round(x0 + (x1 - x0) * t), round(y0 + (y1 - y0) * t), c, r)

    def text(self, x, y, s, c=(0, 0, 0), scale=2):
        for ch in s:
            bits = FONT.get(ch, FONT[" "])
            for i, b in enumerate(bits):
                if b == "1":
                    for sy in range(scale):
                        for sx in range(scale):
                            self.dot(x + (i % 3) * scale + sx, y + (i // 3) * scale + sy, c)
            x += 4 * scale

    def png(self, path):
        raw = b"".join(b"\x00" + bytes(self.px[3 * y * self.w:3 * (y + 1) * self.w]) for y in range(self.h))

        def chunk(tag, data):
            return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)) +
                    chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def nice_ticks(lo, hi, n=6):
    span = (hi - lo) or 1.0
    raw = span / n
    mag = 10 ** int(f"{raw:e}".split("e")[1])
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=10 * mag)
    first = (lo // step) * step
    ticks, t = [], first
    while t <= hi + 1e-9 * span:
        if t >= lo - 1e-9 * span:
            ticks.append(t)
        t += step
    return ticks


def plot_builtin(train, val, out):
    W, H, L, R, T, B = 900, 560, 80, 20, 30, 60
    cv = Canvas(W, H)
    pts = train + val
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if x1 == x0:
        x1 = x0 + 1
    pad = 0.05 * ((y1 - y0) or 1.0)
    y0, y1 = y0 - pad, y1 + pad
    X = lambda s: L + (s - x0) / (x1 - x0) * (W - L - R)
    Y = lambda v: H - B - (v - y0) / (y1 - y0) * (H - T - B)
    grey, black = (225, 225, 225), (0, 0, 0)
    for t in nice_ticks(y0, y1):
        cv.line(L, Y(t), W - R, Y(t), grey)
        label = f"{t:.2f}"
        cv.text(L - 8 - 8 * len(label), Y(t) - 5, label)
    for t in nice_ticks(x0, x1):
        cv.line(X(t), T, X(t), H - B, grey)
        label = f"{int(round(t))}"
        cv.text(X(t) - 4 * len(label), H - B + 8, label)
    cv.line(L, H - B, W - R, H - B, black)
    cv.line(L, T, L, H - B, black)
    cv.text(W // 2 - 16, H - 24, "step")
    cv.text(8, 8, "loss")
    blue, orange = (31, 119, 180), (255, 127, 14)
    for a, b in zip(train, train[1:]):
        cv.line(X(a[0]), Y(a[1]), X(b[0]), Y(b[1]), blue)
    for a, b in zip(val, val[1:]):
        cv.line(X(a[0]), Y(a[1]), X(b[0]), Y(b[1]), orange, 1)
    for s, v in val:
        cv.dot(X(s), Y(v), orange, 3)
    cv.line(W - 150, 40, W - 120, 40, blue, 1)
    cv.text(W - 110, 35, "train")
    cv.line(W - 150, 60, W - 120, 60, orange, 1)
    cv.text(W - 110, 55, "val")
    cv.png(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("-o", "--out", default=None, help="PNG path (default: next to the log, loss.png)")
    ap.add_argument("--title", default="GPT-2 training loss")
    ap.add_argument("--builtin", action="store_true", help="use the built-in renderer even if matplotlib exists")
    a = ap.parse_args()
    out = a.out or (a.log.rsplit("/", 1)[0] + "/loss.png" if "/" in a.log else "loss.png")
    train, val = read_log(a.log)
    try:
        try:
            if a.builtin:
                raise ImportError
            plot_matplotlib(train, val, out, a.title)
            how = "matplotlib"
        except ImportError:
            plot_builtin(train, val, out)
            how = "built-in renderer"
    except OSError as e:
        sys.exit(f"error: {out}: cannot write ({e.strerror or e})")
    first = f"train {train[0][1]:.4f} -> {train[-1][1]:.4f}" if train else "no train lines"
    vals = f", val {val[0][1]:.4f} -> {val[-1][1]:.4f}" if val else ""
    print(f"wrote {out} ({how}; {len(train)} train / {len(val)} val points; {first}{vals})")


if __name__ == "__main__":
    main()
