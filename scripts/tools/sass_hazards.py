#!/usr/bin/env python3
"""Looks through compiled kernels (SASS, sm_90) for the schedule that broke the tiled decode step (docs/DECODE.md,
"The tile path's failure, found"): ptxas 12.8 and 13.0 zeroed a register pair with `CS2R Rd, SRZ`, wrote it again in a
predicated instruction, and read it five issue cycles after the CS2R; on an H200 the read saw the value from before
the CS2R whenever the predicate was off. Four more stall cycles in that one instruction made the step pass, and so did
ptxas -O1's schedule of the same code, 7 cycles; so a read fewer than --min-cycles (7) after such a CS2R is reported
as a hazard (6 has not been seen either way). CS2R zeroes read early with no predicated write between are listed as
`plain` (counted, not failed): in 1614 kernels ptxas gave every other CS2R 7 cycles or more, so the defect reads as
its timing only the predicated writer when one comes between.

  scripts/tools/sass_hazards.py BINARY...        runs cuobjdump -sass on each (a GPU machine's toolkit has it)
  scripts/tools/sass_hazards.py --tree DIR       every CUDA program the build makes in DIR (the *cu programs, dev/cuda,
                                                 tests/gpu): make test's gpu-sass-scan
  scripts/tools/sass_hazards.py --sass FILE...   reads cuobjdump's text instead
Exit status 1 when any hazard is found, 2 on bad input. One line per finding, then a summary line.
The issue cycles are a lower bound (stall counts only; scoreboard waits can only add to them)."""
import argparse
import os
import re
import shutil
import subprocess
import sys

INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]{16}) \*/\s*$")
CONTROL = re.compile(r"^\s*/\* (0x[0-9a-f]{16}) \*/\s*$")
FUNCTION = re.compile(r"^\s*Function : (\S+)")
REGISTER = re.compile(r"\bR(\d+)(\.64)?\b")
# straight-line code ends here: the issue distance past a branch or a reconvergence point is not the stall sum
ENDS_BLOCK = ("BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSYNC", "BSSY", "WARPSYNC", "BAR", "KILL")


def parse(text):
    """[(function, [(address, text, stall)])] from cuobjdump -sass output."""
    functions, name, body, lines = [], None, None, text.splitlines()
    for i, line in enumerate(lines):
        f = FUNCTION.match(line)
        if f:
            name, body = f.group(1), []
            functions.append((name, body))
            continue
        m = INSTR.match(line)
        if m and body is not None and i + 1 < len(lines):
            c = CONTROL.match(lines[i + 1])
            if c:
                body.append((int(m.group(1), 16), m.group(2), (int(c.group(1), 16) >> 41) & 0xF))
    return functions


def split(text):
    """(predicated, opcode, operands) of one instruction's text."""
    pred = text.startswith("@")
    if pred:
        text = text.split(None, 1)[1]
    parts = text.split(None, 1)
    return pred, parts[0], [o.strip() for o in parts[1].split(",")] if len(parts) > 1 else []


def registers(operand, wide):
    out = set()
    for n, w in REGISTER.findall(operand):
        out.add(int(n))
        if w or wide:
            out.add(int(n) + 1)
    return out


def reads_writes(text):
    pred, op, ops = split(text)
    if not ops or op.startswith(("ST", "RED", "ATOM", "ISETP", "FSETP", "DSETP", "HSETP", "PSETP", "UBLKCP", "SYNCS")):
        return pred, set().union(*[registers(o, False) for o in ops]) if ops else set(), set()
    wide = any(t in op for t in (".64", "WIDE", "CS2R")) and ".32" not in op
    read = set().union(*[registers(o, False) for o in ops[1:]]) if len(ops) > 1 else set()
    return pred, read, registers(ops[0], wide) if ops[0].startswith("R") else set()


def scan(functions, min_cycles):
    """[(kind, function, address of the CS2R, address of the reader, cycles, reader's text)]"""
    found = []
    for name, body in functions:
        for k, (addr, text, stall) in enumerate(body):
            m = re.match(r"CS2R(\.32)?\s+R(\d+),\s*SRZ$", text)  # unpredicated zeroing only
            if not m:
                continue
            live = {int(m.group(2))} if m.group(1) else {int(m.group(2)), int(m.group(2)) + 1}
            cycles, predicated = stall, False
            for addr2, text2, stall2 in body[k + 1:k + 24]:
                if split(text2)[1].startswith(ENDS_BLOCK) or cycles >= min_cycles:
                    break
                pred, read, written = reads_writes(text2)
                if read & live:
                    found.append(("hazard" if predicated else "plain", name, addr, addr2, cycles, text2))
                    break
                if written & live:
                    if not pred:
                        live -= written
                    else:
                        predicated = True
                if not live:
                    break
                cycles += stall2
    return found


def programs(tree):
    """The build's CUDA programs under tree: executables named *cu at its top, and those in dev/cuda and tests/gpu."""
    def elf(p):
        with open(p, "rb") as f:
            return f.read(4) == b"\x7fELF"
    found = []
    for d, depth in ((tree, 0), (os.path.join(tree, "dev", "cuda"), 0), (os.path.join(tree, "tests", "gpu"), 2)):
        for root, dirs, files in os.walk(d):
            if root[len(d):].count(os.sep) >= depth:
                dirs[:] = []
            for f in files:
                p = os.path.join(root, f)
                if (d != tree or f.endswith("cu")) and os.access(p, os.X_OK) and elf(p):
                    found.append(p)
    return sorted(found)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--sass", action="store_true", help="the paths are cuobjdump -sass text, not binaries")
    ap.add_argument("--tree", action="store_true", help="the path is a build tree: scan its CUDA programs")
    ap.add_argument("--min-cycles", type=int, default=7)
    a = ap.parse_args()
    if a.tree:
        if len(a.paths) != 1 or not os.path.isdir(a.paths[0]):
            print(f"error: --tree takes one directory, not {' '.join(a.paths)}", file=sys.stderr)
            return 2
        a.paths = programs(a.paths[0])
        if not a.paths:
            print("error: --tree: no CUDA programs built there (make all dev first)", file=sys.stderr)
            return 2
    if not a.sass and not shutil.which("cuobjdump"):
        print("error: cuobjdump not found (the CUDA toolkit's; or --sass with its text)", file=sys.stderr)
        return 2
    hazards = plain = kernels = 0
    for path in a.paths:
        try:
            if a.sass:
                text = open(path).read()
            else:
                r = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True)
                if r.returncode != 0 and "does not contain device code" not in r.stderr:
                    print(f"error: {path}: cuobjdump -sass failed: {r.stderr.strip().splitlines()[-1:]}",
                          file=sys.stderr)
                    return 2
                text = r.stdout
        except OSError as e:
            print(f"error: {path}: {e.strerror}", file=sys.stderr)
            return 2
        functions = parse(text)
        kernels += len(functions)
        for kind, name, at, reader, cycles, text2 in scan(functions, a.min_cycles):
            hazards += kind == "hazard"
            plain += kind == "plain"
            print(f"{kind}: {path}: {name}: CS2R at {at:#06x} read at {reader:#06x} after {cycles} cycles: {text2}")
    print(f"sass hazards: {hazards} (CS2R zero, a predicated write, a read < {a.min_cycles} cycles after); "
          f"{plain} plain early reads; {kernels} kernels in {len(a.paths)} files")
    return 1 if hazards else 0


if __name__ == "__main__":
    sys.exit(main())
