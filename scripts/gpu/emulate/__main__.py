"""The host emulator of the CUDA kernels' index arithmetic (numpy, no GPU): which lane loads
which bytes, how the mma / ldmatrix / movmatrix fragments are laid out, the swizzles, split
partials and epilogues, re-implemented lane by lane from the PTX ISA's fragment tables
(mma_fragments.py, written independently of the kernels) and compared with a float64
reference. Run it after editing a kernel's index arithmetic; a device call is scarcer.

    python3 scripts/gpu/emulate mma     # kernels/attention/mma.cu (decode and verify rows)
    python3 scripts/gpu/emulate flash   # kernels/attention/flash.cu (prefill chunks)
    python3 scripts/gpu/emulate gemv    # kernels/gemv.cu and gemv_multi.cu ("gemv multi": the
                                        # multi-tile builds only)
    python3 scripts/gpu/emulate moe     # kernels/moe.cu itself, run on host threads (g++)
    python3 scripts/gpu/emulate all     # every one; exit status 1 if any fails
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = {"mma": "attention_mma.py", "flash": "attention_flash.py", "gemv": "gemv.py", "moe": "moe.py"}


def main():
    args = sys.argv[1:]
    if not args or args[0] not in [*KERNELS, "all"]:
        sys.exit(__doc__)
    names = list(KERNELS) if args[0] == "all" else [args[0]]
    failed = [n for n in names if subprocess.call([sys.executable, os.path.join(HERE, KERNELS[n]), *args[1:]]) != 0]
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


main()
