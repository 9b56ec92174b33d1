#!/usr/bin/env python3
"""Lane-level emulation of crates/cuda/kernels/attention/flash.cu on the CPU (numpy).

The kernel's index arithmetic (which thread copies which 16-byte piece where, the XOR
swizzle, which lane addresses which ldmatrix row, how mma fragments are laid out) cannot be
checked on a machine without a GPU, and device time is scarce. This script re-implements
the kernel's loops thread by thread and lane by lane, with ldmatrix (plain and .trans) and
mma.sync m16n8k16 emulated from the PTX ISA's fragment layouts (written independently of the
kernel), shared memory as a flat array of bf16 values, and compares every row with plain
attention in float64. Registers holding two bf16 values are modelled as (lo, hi) pairs.

    python3 scripts/gpu/emulate flash   # prints max errors, exits 1 on failure
"""
import os
import sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mma_fragments import bf16, mma  # noqa: E402

rng = np.random.default_rng(1)
FL_WARPS, FL_KEYS = 4, 64
FL_ROWS = 16 * FL_WARPS


def ldmatrix_x4(smem, addr_of_lane, trans):
    """addr_of_lane[lane]: element index of the 8-element row lane supplies (lanes 8i..8i+7:
    rows 0..7 of matrix i). Returns regs[lane][4] of (lo, hi)."""
    mats = [np.array([smem[addr_of_lane[8 * i + r]: addr_of_lane[8 * i + r] + 8] for r in range(8)]) for i in range(4)]
    out = []
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        regs = []
        for M in mats:
            if trans:
                regs.append((M[2 * c, g], M[2 * c + 1, g]))
            else:
                regs.append((M[g, 2 * c], M[g, 2 * c + 1]))
        out.append(regs)
    return out


def pack(lo, hi):
    return (float(bf16(lo)), float(bf16(hi)))


# ---- the kernel, thread by thread ----
def fl_offset(D, key, piece):
    return key * (D * 2) + ((piece ^ (key & 7)) << 4)


def fl_fill(D, buf, K, V, stage, ctx):
    pieces = D // 8
    kpp = FL_WARPS * 32 // pieces
    for t in range(FL_WARPS * 32):
        piece, k0 = t % pieces, t // pieces
        for j in range(FL_KEYS // kpp):
            key = k0 + j * kpp
            pos = stage * FL_KEYS + key
            ok = pos < ctx
            for base, src in ((0, K), (FL_KEYS * D * 2, V)):
                e = (base + fl_offset(D, key, piece)) // 2
                buf[e:e + 8] = src[pos, piece * 8: piece * 8 + 8] if ok else 0.0


def block(D, G, Qrows, K, V, positions, block_row0, rows, scale_log2):
    """One block: Qrows[r][D] for every row of the sequence (r = j * G + hh), positions[j].
    Returns {row: out[D]} for the rows this block writes."""
    KS, NT = D // 16, FL_KEYS // 8
    ctx = positions[-1] + 1
    block_last = min(rows, block_row0 + FL_ROWS) - 1
    stages = positions[block_last // G] // FL_KEYS + 1
    bufs = [np.zeros(FL_KEYS * D * 2, np.float32) for _ in range(stages)]  # one per stage (ring order is timing only)
    for s in range(stages):
        fl_fill(D, bufs[s], K, V, s, ctx)
    result = {}
    for warp in range(FL_WARPS):
        row0 = block_row0 + warp * 16
        qa = [[None] * 4 for _ in range(32)]
        qa = [[[None] * 4 for _ in range(KS)] for _ in range(32)]
        lim = np.full((32, 2), -1)
        for lane in range(32):
            g, c = lane >> 2, lane & 3
            for h in range(2):
                r = row0 + g + 8 * h
                if r < rows:
                    lim[lane, h] = positions[r // G]
                q = Qrows[r] if r < rows else np.zeros(D, np.float32)
                for ks in range(KS):
                    qa[lane][ks][h] = pack(q[16 * ks + 2 * c], q[16 * ks + 2 * c + 1])
                    qa[lane][ks][2 + h] = pack(q[16 * ks + 8 + 2 * c], q[16 * ks + 8 + 2 * c + 1])
        warp_last = min(rows, row0 + 16) - 1
        warp_lim = positions[warp_last // G] if warp_last >= row0 else -1
        o = [[[0.0] * 4 for _ in range(32)] for _ in range(2 * KS)]
        m = np.full((32, 2), -np.inf)
        l = np.zeros((32, 2))
        for s in range(stages):
            if s * FL_KEYS > warp_lim:
                continue
            buf = bufs[s]
            sc = []
            for nt in range(NT):
                acc = [[0.0] * 4 for _ in range(32)]
                for kp in range(KS // 2):
                    addr = [fl_offset(D, 8 * nt + (ln & 7), 4 * kp + (ln >> 3)) // 2 for ln in range(32)]
                    b = ldmatrix_x4(buf, addr, trans=False)
                    acc = mma(acc, [qa[ln][2 * kp] for ln in range(32)], [(b[ln][0], b[ln][1]) for ln in range(32)])
                    acc = mma(acc, [qa[ln][2 * kp + 1] for ln in range(32)], [(b[ln][2], b[ln][3]) for ln in range(32)])
                sc.append(np.array(acc))  # [32][4]
            sc = np.array(sc)  # [NT][32][4]
            mx = np.full((32, 2), -np.inf)
            for lane in range(32):
                c = lane & 3
                for nt in range(NT):
                    for i in range(4):
                        key = s * FL_KEYS + 2 * c + 8 * nt + (i & 1)
                        sc[nt, lane, i] = sc[nt, lane, i] * scale_log2 if key <= lim[lane, i >> 1] else -np.inf
                        mx[lane, i >> 1] = max(mx[lane, i >> 1], sc[nt, lane, i])
            for off in (1, 2):
                mx = np.maximum(mx, mx[np.arange(32) ^ off])
            m_new = np.maximum(m, mx)
            m_use = np.where(m_new == -np.inf, 0.0, m_new)
            corr = 2.0 ** (m - m_use)
            m = m_new
            rs = np.zeros((32, 2))
            for lane in range(32):
                for nt in range(NT):
                    for i in range(4):
                        sc[nt, lane, i] = 2.0 ** (sc[nt, lane, i] - m_use[lane, i >> 1])
                        rs[lane, i >> 1] += sc[nt, lane, i]
            l = l * corr + rs
            for dn in range(2 * KS):
                for lane in range(32):
                    o[dn][lane] = [o[dn][lane][0] * corr[lane, 0], o[dn][lane][1] * corr[lane, 0],
                                   o[dn][lane][2] * corr[lane, 1], o[dn][lane][3] * corr[lane, 1]]
            vbase = FL_KEYS * D * 2
            for kk in range(FL_KEYS // 16):
                pa = [[pack(sc[2 * kk, ln, 0], sc[2 * kk, ln, 1]), pack(sc[2 * kk, ln, 2], sc[2 * kk, ln, 3]),
                       pack(sc[2 * kk + 1, ln, 0], sc[2 * kk + 1, ln, 1]), pack(sc[2 * kk + 1, ln, 2], sc[2 * kk + 1, ln, 3])]
                      for ln in range(32)]
                for dp in range(KS):
                    im = [ln >> 3 for ln in range(32)]
                    addr = [(vbase + fl_offset(D, 16 * kk + 8 * (im[ln] & 1) + (ln & 7), 2 * dp + (im[ln] >> 1))) // 2
                            for ln in range(32)]
                    b = ldmatrix_x4(buf, addr, trans=True)
                    o[2 * dp] = mma(o[2 * dp], pa, [(b[ln][0], b[ln][1]) for ln in range(32)])
                    o[2 * dp + 1] = mma(o[2 * dp + 1], pa, [(b[ln][2], b[ln][3]) for ln in range(32)])
        lsum = l.copy()
        for off in (1, 2):
            lsum = lsum + lsum[np.arange(32) ^ off]
        for lane in range(32):
            g, c = lane >> 2, lane & 3
            for h in range(2):
                r = row0 + g + 8 * h
                if r >= rows:
                    continue
                out = result.setdefault(r, np.full(D, np.nan))
                for dn in range(2 * KS):
                    out[8 * dn + 2 * c] = bf16(o[dn][lane][2 * h] / lsum[lane, h])
                    out[8 * dn + 2 * c + 1] = bf16(o[dn][lane][2 * h + 1] / lsum[lane, h])
    return result


def check(D, G, q_len, ctx):
    rows = q_len * G
    scale = 1 / np.sqrt(D)
    scale_log2 = np.float32(scale * np.log2(np.e))
    K = bf16(rng.standard_normal((ctx, D)) * 2)
    V = bf16(rng.standard_normal((ctx, D)))
    Q = rng.standard_normal((rows, D)).astype(np.float32)
    positions = [ctx - q_len + j for j in range(q_len)]
    got = {}
    chunks = (rows + FL_ROWS - 1) // FL_ROWS
    for chunk in range(chunks):
        got.update(block(D, G, Q, K, V, positions, chunk * FL_ROWS, rows, scale_log2))
    assert sorted(got) == list(range(rows)), "rows not all written"
    worst = 0.0
    for r in range(rows):
        lim = positions[r // G]
        s = (K[:lim + 1].astype(np.float64) @ Q[r].astype(np.float64)) * scale
        p = np.exp(s - s.max())
        ref = (p @ V[:lim + 1].astype(np.float64)) / p.sum()
        assert np.all(np.isfinite(got[r])), f"row {r} not finite"
        worst = max(worst, np.abs(got[r] - ref).max() / max(1e-9, np.abs(ref).max()))
    return worst


cases = [
    # D, G, q_len, ctx: chunks starting at 0 and after earlier context, partial stages and
    # row chunks, rows past the sequence in the last warp.
    (64, 3, 23, 23),
    (64, 3, 30, 150),
    (128, 4, 17, 17),
    (128, 4, 20, 100),
]
bad = False
for case in cases:
    err = check(*case)
    ok = err < 2e-2
    bad |= not ok
    print(f"D={case[0]} G={case[1]} q={case[2]} ctx={case[3]}: max rel err {err:.2e} {'ok' if ok else 'FAIL'}")
sys.exit(1 if bad else 0)
