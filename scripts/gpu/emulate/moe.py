#!/usr/bin/env python3
"""Runs crates/cuda/kernels/moe.cu itself on the host: moe_host.cpp includes the kernel source
unchanged under cuda_host.h (a block's threads as std::threads, barriers and warp exchanges
emulated), launches it as crates/cuda/src/backend/moe.rs does, and checks routing, expert
lists, outputs against a float64 evaluation of the CPU backend's moe_ffn, determinism and
batch invariance (see moe_host.cpp). Built with -fsanitize=alignment, so a 16-byte load from
an address the GPU would fault on stops the run; `asan` adds AddressSanitizer (out-of-bounds
reads and writes; about four times slower). Needs g++ with C++20; no GPU, no numpy.

    python3 scripts/gpu/emulate moe              # prints per-shape errors, exits 1 on failure
    python3 scripts/gpu/emulate moe quick        # two shapes, 3 and 37 tokens (~1 minute)
    python3 scripts/gpu/emulate moe quick asan   # the same under AddressSanitizer
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.normpath(os.path.join(HERE, "../../../crates/cuda/kernels"))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "moe_host")
        args = sys.argv[1:]
        sanitize = "alignment,address,undefined" if "asan" in args else "alignment"
        cmd = ["g++", "-std=c++20", "-O1" if "asan" in args else "-O2", "-g", "-ffp-contract=off", "-w",
               f"-fsanitize={sanitize}", "-fno-sanitize-recover=all",
               "-I", HERE, "-I", KERNELS, os.path.join(HERE, "moe_host.cpp"), "-o", exe]
        if subprocess.call(cmd) != 0:
            sys.exit("moe_host.cpp did not compile")
        env = dict(os.environ, ASAN_OPTIONS="detect_stack_use_after_return=0")
        sys.exit(subprocess.call([exe, *[a for a in args if a != "asan"]], env=env))


main()
