#!/usr/bin/env python3
"""Writes a vocab-only copy of a GGUF file: the same header and metadata (tokenizer,
chat template, hyper-parameters) with no tensors. `wring --load-format dummy --model
VOCAB.gguf` takes its tokenizer from it, so a device call can run dummy weights of any
shape without carrying the ~100 MB default model.

usage: vocab_gguf.py IN.gguf OUT.gguf
"""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(buf, pos, ty):
    if ty in SIZES:
        return pos + SIZES[ty]
    if ty == 8:  # string: u64 length + bytes
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if ty == 9:  # array: element type, u64 count, elements
        ety, n = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if ety in SIZES:
            return pos + n * SIZES[ety]
        for _ in range(n):
            pos = skip_value(buf, pos, ety)
        return pos
    raise ValueError(f"unknown GGUF value type {ty} at byte {pos}")


def main():
    src, dst = sys.argv[1], sys.argv[2]
    buf = open(src, "rb").read()
    magic, version, _n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    if magic != b"GGUF" or version not in (2, 3):
        sys.exit(f"{src}: not a GGUF v2/v3 file")
    pos = 24
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", buf, pos)
        pos += 8 + klen
        (ty,) = struct.unpack_from("<I", buf, pos)
        pos = skip_value(buf, pos + 4, ty)
    with open(dst, "wb") as f:
        f.write(struct.pack("<4sIQQ", magic, version, 0, n_kv))
        f.write(buf[24:pos])
    print(f"{dst}: {n_kv} metadata keys, {pos} bytes, no tensors")


if __name__ == "__main__":
    main()
