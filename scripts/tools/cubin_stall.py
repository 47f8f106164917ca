#!/usr/bin/env python3
"""Shows, or changes, one instruction's stall count in a cubin (sm_70 and later: 128-bit instructions whose control
bits 105-108 are the cycles before the next instruction issues). The experiment that found the tiled decode step's
failure (docs/DECODE.md, "The tile path's failure, found"): the same cubin with one stall count raised, nothing else
changed, run side by side with the original.

  scripts/tools/cubin_stall.py CUBIN KERNEL ADDRESS           the instruction at ADDRESS (cuobjdump -sass's /*addr*/)
                                                             of KERNEL (its mangled name): its words and control bits
  scripts/tools/cubin_stall.py CUBIN KERNEL ADDRESS STALL     the same, then its stall count set to STALL (0-15)

A program's cubin: `nvcc ... -dryrun --keep --keep-dir D` prints the build's steps; run them in order, and after the
ptxas step (which writes D/<name>.cubin) run this on that file before the fatbinary step reads it."""
import struct
import sys


def sections(elf):
    """{name: (file offset, size)} of an ELF64 little-endian file's sections."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = {}
    for name, _type, _flags, _addr, offset, size in headers:
        end = elf.index(b"\0", names_at + name)
        out[elf[names_at + name:end].decode()] = (offset, size)
    return out


def control(hi):
    return {"stall": (hi >> 41) & 0xF, "yield": (hi >> 45) & 1, "write barrier": (hi >> 46) & 7,
            "read barrier": (hi >> 49) & 7, "waits on": (hi >> 52) & 0x3F, "reuse": (hi >> 58) & 0xF}


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    path, kernel, address = argv[1], argv[2], argv[3]
    try:
        elf = bytearray(open(path, "rb").read())
        text = sections(elf).get(".text." + kernel)
        at = int(address, 16)
        stall = int(argv[4]) if len(argv) == 5 else None
    except (OSError, ValueError) as e:
        print(f"error: {path}: {e}", file=sys.stderr)
        return 2
    if text is None:
        print(f"error: {path}: no section .text.{kernel} (the kernel's mangled name, as cuobjdump prints it)",
              file=sys.stderr)
        return 2
    if at % 16 or at + 16 > text[1]:
        print(f"error: address {address} is not an instruction of {kernel} ({text[1]} bytes, 16 each)", file=sys.stderr)
        return 2
    if stall is not None and not 0 <= stall <= 15:
        print(f"error: stall {stall} is outside 0-15 (four bits)", file=sys.stderr)
        return 2
    lo, hi = struct.unpack_from("<QQ", elf, text[0] + at)
    c = control(hi)
    print(f"{kernel} +{at:#06x}: {lo:#018x} {hi:#018x}: " + ", ".join(f"{k} {v}" for k, v in c.items()))
    if stall is not None:
        new = (hi & ~(0xF << 41)) | (stall << 41)
        struct.pack_into("<Q", elf, text[0] + at + 8, new)
        open(path, "wb").write(bytes(elf))
        print(f"stall {c['stall']} -> {stall}: {new:#018x}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
