#!/usr/bin/env bash
# scripts/tools/sass_hazards.py on hand-made SASS (cuobjdump's layout, the instructions and control words of the
# failing decode build, docs/DECODE.md "The tile path's failure, found"): the failing schedule is a hazard (exit 1);
# the same with four more stall cycles in the CS2R, and ptxas -O1's 7-cycle schedule, are not; an early read with no
# predicated write between is listed as plain only; an unpredicated rewrite ends the watch; bad input is one line.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/lib.sh
. tests/lib/cli_checks.sh  # check, one_line
begin_checks
tmp=$TMP
python3 - "$tmp" <<'PY'
import sys
d = sys.argv[1]
def sass(path, body):
    lines = ["\tcode for sm_90a", "\t\tFunction : _Z6kernelv", "\t.headerflags @\"EF_CUDA_SM90\""]
    for at, (text, lo, stall, rest) in enumerate(body):
        hi = (rest & ~(0xF << 41)) | (stall << 41)
        lines.append(f"        /*{at * 16:04x}*/                   {text} ;   /* {lo:#018x} */")
        lines.append(f"                                                                 /* {hi:#018x} */")
    open(path, "w").write("\n".join(lines) + "\n")
FADD = ("@!P2 FADD.FTZ R4, R22, 1", 0x3f8000001604a421, 4, 0x008fc80000010000)
FMUL = ("@!P2 FMUL.FTZ R11, R4, R5", 0x00000005040ba220, 1, 0x000fe20000410000)
CS2R = lambda stall: ("CS2R R4, SRZ", 0x0000000000047805, stall, 0x000fe4000001ff00)
IMADW = ("@!P4 IMAD.WIDE R4, R26, UR4, RZ", 0x000000041a04cc25, 1, 0x002fe2000f8e02ff)
F2F = lambda stall: ("@!P3 F2F.BF16.F32 R24, R11", 0x0000000b0018b304, stall, 0x000e640000202000)
IADD3 = ("IADD3 R9, P2, R29, R4, RZ", 0x000000041d097210, 4, 0x000fc80007f5e0ff)
IMADW_PLAIN = ("IMAD.WIDE R4, R26, UR4, RZ", 0x000000041a047c25, 1, 0x002fe2000f8e02ff)
sass(f"{d}/failing.sass", [FADD, FMUL, CS2R(2), IMADW, F2F(2), IADD3])            # 2 + 1 + 2 = 5 cycles
sass(f"{d}/patched.sass", [FADD, FMUL, CS2R(6), IMADW, F2F(2), IADD3])            # 9 cycles
sass(f"{d}/o1.sass", [FADD, FMUL, CS2R(2), IMADW, F2F(4), IADD3])                 # 7 cycles
sass(f"{d}/plain.sass", [FADD, FMUL, CS2R(2), F2F(2), IADD3])                     # no predicated write: plain, 4 cycles
sass(f"{d}/rewritten.sass", [FADD, FMUL, CS2R(2), IMADW_PLAIN, F2F(2), IADD3])    # the IADD3 reads the IMAD's value
PY
tool=scripts/tools/sass_hazards.py
out=$(python3 $tool --sass "$tmp/failing.sass"); rc=$?
check "the failing schedule is a hazard (exit 1)" test "$rc" = 1
check "its line names the kernel, both addresses and 5 cycles" \
    grep -q "^hazard: .*_Z6kernelv: CS2R at 0x0020 read at 0x0050 after 5 cycles: IADD3 R9, P2, R29, R4, RZ" <<<"$out"
check "its summary counts one" grep -q "^sass hazards: 1 (" <<<"$out"
for f in patched o1; do
    out=$(python3 $tool --sass "$tmp/$f.sass"); rc=$?
    check "$f: no hazard (exit 0)" test "$rc" = 0
    check "$f: the summary counts none" grep -q "^sass hazards: 0 (.*); 0 plain early reads; 1 kernels in 1 files" <<<"$out"
done
out=$(python3 $tool --sass "$tmp/plain.sass"); rc=$?
check "an early read without a predicated write: exit 0" test "$rc" = 0
check "... listed as plain" grep -q "^plain: .*after 4 cycles" <<<"$out"
out=$(python3 $tool --sass "$tmp/rewritten.sass"); rc=$?
check "an unpredicated rewrite between: nothing found" grep -q "^sass hazards: 0 (.*); 0 plain" <<<"$out"
check "a -min-cycles of 10 flags the patched schedule" bash -c "python3 $tool --min-cycles 10 --sass '$tmp/patched.sass' >/dev/null; test \$? = 1"
out=$(python3 $tool --sass "$tmp/missing.sass" 2>&1); rc=$?
check "a missing file: exit 2" test "$rc" = 2
check "... one line naming it" one_line "$out" 'missing.sass'
mkdir -p "$tmp/tree"
out=$(python3 $tool --tree "$tmp/tree" 2>&1); rc=$?
check "--tree on a tree without CUDA programs: exit 2" test "$rc" = 2
check "... one line saying so" one_line "$out" 'no CUDA programs'
py=$(python3 -c "import sys; print(sys.executable)")
out=$(PATH=/nonexistent "$py" $tool ./train_gpt2cu 2>&1); rc=$?
check "without cuobjdump: exit 2" test "$rc" = 2
check "... one line naming it" one_line "$out" 'cuobjdump not found'
end_checks sass_hazards.py
