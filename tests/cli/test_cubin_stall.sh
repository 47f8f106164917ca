#!/usr/bin/env bash
# scripts/tools/cubin_stall.py on a hand-made ELF64 file with a kernel's section of three instructions (the failing
# decode build's CS2R, IMAD.WIDE and IADD3 words): it reads the instruction's control bits, sets one stall count and
# changes no other byte, and refuses a missing kernel, an address off the instructions, a stall past 15 and a file
# that is not ELF64, each in one line.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/lib.sh
. tests/lib/cli_checks.sh  # check, one_line (functions: sourced before begin_checks sets TMP)
begin_checks
tmp=$TMP
python3 - "$tmp/k.cubin" <<'PY'
import struct, sys
text = b"".join(struct.pack("<QQ", lo, hi) for lo, hi in [
    (0x0000000000047805, 0x000fe4000001ff00), (0x000000041a04cc25, 0x002fe2000f8e02ff),
    (0x000000041d097210, 0x000fc80007f5e0ff)])
names = b"\0.shstrtab\0.text._Z6kernelv\0"
text_at, names_at = 64, 64 + len(text)
sh_at = names_at + len(names)
header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, sh_at, 0, 64, 0, 0,
                                                                  64, 3, 1)
def sh(name, typ, offset, size):
    return struct.pack("<IIQQQQIIQQ", name, typ, 0, 0, offset, size, 0, 0, 1, 0)
elf = header + text + names + sh(0, 0, 0, 0) + sh(1, 3, names_at, len(names)) + sh(11, 1, text_at, len(text))
open(sys.argv[1], "wb").write(elf)
PY
tool=scripts/tools/cubin_stall.py
out=$(python3 $tool "$tmp/k.cubin" _Z6kernelv 0x10); rc=$?
check "reading: exit 0" test "$rc" = 0
check "the IMAD.WIDE's words and stall 1" grep -q "_Z6kernelv +0x0010: 0x000000041a04cc25 0x002fe2000f8e02ff: stall 1," <<<"$out"
cp "$tmp/k.cubin" "$tmp/before.cubin"
out=$(python3 $tool "$tmp/k.cubin" _Z6kernelv 0x0 6); rc=$?
check "setting the CS2R's stall to 6: exit 0" test "$rc" = 0
check "... its new high word" grep -q "stall 2 -> 6: 0x000fec000001ff00" <<<"$out"
check "... read back as 6" bash -c "python3 $tool '$tmp/k.cubin' _Z6kernelv 0x0 | grep -q 'stall 6,'"
check "... one byte changed, nothing else" test "$(cmp -l "$tmp/before.cubin" "$tmp/k.cubin" | wc -l)" = 1
out=$(python3 $tool "$tmp/k.cubin" _Z5otherv 0x0 2>&1); rc=$?
check "a missing kernel: exit 2" test "$rc" = 2
check "... one line naming the section" one_line "$out" 'no section .text._Z5otherv'
out=$(python3 $tool "$tmp/k.cubin" _Z6kernelv 0x30 2>&1); rc=$?
check "an address past the kernel: exit 2" test "$rc" = 2
check "... one line" one_line "$out" 'is not an instruction of _Z6kernelv'
out=$(python3 $tool "$tmp/k.cubin" _Z6kernelv 0x8 2>&1); rc=$?
check "an address inside an instruction: exit 2" test "$rc" = 2
check "... one line" one_line "$out" 'is not an instruction'
out=$(python3 $tool "$tmp/k.cubin" _Z6kernelv 0x0 16 2>&1); rc=$?
check "a stall of 16: exit 2" test "$rc" = 2
check "... one line" one_line "$out" 'outside 0-15'
printf 'not an elf' >"$tmp/x.txt"
out=$(python3 $tool "$tmp/x.txt" _Z6kernelv 0x0 2>&1); rc=$?
check "not ELF64: exit 2, one line" one_line "$out" 'not a 64-bit little-endian ELF file'
check "... and the file untouched" test "$(cat "$tmp/x.txt")" = "not an elf"
end_checks cubin_stall.py
