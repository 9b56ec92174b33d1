#!/usr/bin/env python3
"""Lane-level emulation of crates/cuda/kernels/attention/mma.cu on the CPU (numpy).

The kernel's index arithmetic (which lane loads which bytes, how mma/movmatrix fragments
are laid out) cannot be checked on a machine without a GPU, and device time is scarce.
This script re-implements the kernel's loops lane by lane, with mma.sync m16n8k16,
movmatrix.trans and __byte_perm emulated from the PTX ISA's fragment layouts (written
independently of the kernel), and compares the result with plain attention in float64.
Registers holding two bf16 values are modelled as (lo, hi) pairs of bf16-rounded floats.

    python3 scripts/gpu/emulate mma   # prints max errors, exits 1 on failure
"""
import os
import sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

rng = np.random.default_rng(0)


from mma_fragments import (a_frag_to_matrix, b_frag_to_matrix, bf16, c_frag_to_matrix,  # noqa: E402
                           matrix_to_c_frag, mma)


def movmatrix_trans(regs):
    """regs[lane] = (lo, hi) = M[g][2c], M[g][2c+1]; returns the same for M^T."""
    M = np.zeros((8, 8))
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        M[g, 2 * c], M[g, 2 * c + 1] = regs[lane]
    T = M.T
    return [(T[lane >> 2, 2 * (lane & 3)], T[lane >> 2, 2 * (lane & 3) + 1]) for lane in range(32)]


def byte_perm(x, y, sel):
    return {0x5410: (x[0], y[0]), 0x7632: (x[1], y[1])}[sel]


def words(vec):
    """A row segment of bf16 values -> list of (lo, hi) words."""
    return [(vec[2 * i], vec[2 * i + 1]) for i in range(len(vec) // 2)]


# ---- the kernel, lane by lane ----
def kernel_split(D, NT, Q, K, V, lims, tiles, scale_log2, warps=4):
    """One split of one row chunk. Q: [8*NT][D] rows (float32), K/V: [ctx_pad][D] bf16
    (zero past the context), lims[8*NT] causal limits. Returns per-row (m, l, o[D]) after
    the warp merge, as the kernel leaves them in shared memory."""
    ROWS = 8 * NT
    # Q^T B fragments: qfrag[nt][kstep][lane] = (reg0, reg1)
    qfrag = [[[None] * 32 for _ in range(D // 16)] for _ in range(NT)]
    for nt in range(NT):
        for p in range(D // 32):
            for ln in range(32):
                rg, rc = ln >> 2, ln & 3
                x = bf16(Q[nt * 8 + rg, 32 * p + 8 * rc: 32 * p + 8 * rc + 8])
                qfrag[nt][2 * p][ln] = ((x[0], x[1]), (x[2], x[3]))
                qfrag[nt][2 * p + 1][ln] = ((x[4], x[5]), (x[6], x[7]))
    per_warp = []
    for w in range(warps):
        o = [[[[0.0] * 4 for _ in range(32)] for _ in range(NT)] for _ in range(D // 16)]  # o[mt][nt][lane][4]
        m = np.full((32, NT, 2), -np.inf)
        l = np.zeros((32, NT, 2))
        for tile in tiles[w::warps]:
            key0 = tile * 16
            # loads
            ka, kb, vv = [], [], []
            for lane in range(32):
                g, c = lane >> 2, lane & 3
                ka.append([words(K[key0 + g, 32 * p + 8 * c: 32 * p + 8 * c + 8]) for p in range(D // 32)])
                kb.append([words(K[key0 + g + 8, 32 * p + 8 * c: 32 * p + 8 * c + 8]) for p in range(D // 32)])
                vv.append([words(V[key0 + k, g * (D // 8): (g + 1) * (D // 8)]) for k in (2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9)])
            s = [[[0.0] * 4 for _ in range(32)] for _ in range(NT)]
            for p in range(D // 32):
                for e in range(2):
                    a = [[ka[ln][p][2 * e], kb[ln][p][2 * e], ka[ln][p][2 * e + 1], kb[ln][p][2 * e + 1]] for ln in range(32)]
                    for nt in range(NT):
                        b = [qfrag[nt][2 * p + e][ln] for ln in range(32)]
                        s[nt] = mma(s[nt], a, b)
            pb = [[None, None] for _ in range(NT)]
            for nt in range(NT):
                lo_regs, hi_regs = [], []
                p0s, p1s = np.zeros((32, 2)), np.zeros((32, 2))
                v0s, v1s = np.zeros((32, 2)), np.zeros((32, 2))
                for ln in range(32):
                    g, c = ln >> 2, ln & 3
                    for f in range(2):
                        lim = lims[nt * 8 + 2 * c + f]
                        v0s[ln, f] = s[nt][ln][f] * scale_log2 if key0 + g <= lim else -np.inf
                        v1s[ln, f] = s[nt][ln][2 + f] * scale_log2 if key0 + g + 8 <= lim else -np.inf
                for f in range(2):
                    mx = np.maximum(v0s[:, f], v1s[:, f])
                    for off in (4, 8, 16):
                        mx = np.maximum(mx, mx[np.arange(32) ^ off])
                    for ln in range(32):
                        m_new = max(m[ln, nt, f], mx[ln])
                        m_use = 0.0 if m_new == -np.inf else m_new
                        corr = 2.0 ** (m[ln, nt, f] - m_use)
                        p0s[ln, f] = 2.0 ** (v0s[ln, f] - m_use)
                        p1s[ln, f] = 2.0 ** (v1s[ln, f] - m_use)
                        l[ln, nt, f] = l[ln, nt, f] * corr + p0s[ln, f] + p1s[ln, f]
                        m[ln, nt, f] = m_new
                        for mt in range(D // 16):
                            o[mt][nt][ln][f] *= corr
                            o[mt][nt][ln][2 + f] *= corr
                lo_regs = [tuple(bf16(p0s[ln])) for ln in range(32)]
                hi_regs = [tuple(bf16(p1s[ln])) for ln in range(32)]
                pb[nt] = [movmatrix_trans(lo_regs), movmatrix_trans(hi_regs)]
            for mt in range(D // 16):
                a = []
                for ln in range(32):
                    w0, w1, w2, w3 = (vv[ln][i][mt] for i in range(4))
                    a.append([byte_perm(w0, w1, 0x5410), byte_perm(w0, w1, 0x7632),
                              byte_perm(w2, w3, 0x5410), byte_perm(w2, w3, 0x7632)])
                for nt in range(NT):
                    b = [(pb[nt][0][ln], pb[nt][1][ln]) for ln in range(32)]
                    o[mt][nt] = mma(o[mt][nt], a, b)
        # row sums over g, broadcast from g = 0
        lsum = np.zeros((32, NT, 2))
        for nt in range(NT):
            for f in range(2):
                v = l[:, nt, f].copy()
                for off in (4, 8, 16):
                    v = v + v[np.arange(32) ^ off]
                lsum[:, nt, f] = [v[ln & 3] for ln in range(32)]
        per_warp.append((m, lsum, o))
    # merge in warp order
    sm_m = np.full((warps, ROWS), -np.inf)
    sm_l = np.zeros((warps, ROWS))
    for w, (m, lsum, o) in enumerate(per_warp):
        for ln in range(32):
            g, c = ln >> 2, ln & 3
            if g == 0:
                for nt in range(NT):
                    for f in range(2):
                        sm_m[w, nt * 8 + 2 * c + f] = m[ln, nt, f]
                        sm_l[w, nt * 8 + 2 * c + f] = lsum[ln, nt, f]
    sm_o = np.zeros((ROWS, D))
    for w, (m, lsum, o) in enumerate(per_warp):
        for ln in range(32):
            g, c = ln >> 2, ln & 3
            for nt in range(NT):
                for f in range(2):
                    row = nt * 8 + 2 * c + f
                    mx = sm_m[:, row].max()
                    m_use = 0.0 if mx == -np.inf else mx
                    mine = 2.0 ** (m[ln, nt, f] - m_use)
                    for mt in range(D // 16):
                        sm_o[row, g * (D // 8) + 2 * mt] += o[mt][nt][ln][f] * mine
                        sm_o[row, g * (D // 8) + 2 * mt + 1] += o[mt][nt][ln][2 + f] * mine
    fm = sm_m.max(axis=0)
    fl = np.array([sum(sm_l[w, r] * 2.0 ** (sm_m[w, r] - (0 if fm[r] == -np.inf else fm[r])) for w in range(warps)) for r in range(ROWS)])
    return fm, fl, sm_o


def check(D, NT, G, q_len, ctx, splits):
    rows = q_len * G
    ROWS = 8 * NT
    scale = 1 / np.sqrt(D)
    scale_log2 = scale * np.log2(np.e)
    ctx_pad = (ctx + 15) // 16 * 16 + 16
    K = np.zeros((ctx_pad, D), np.float32)
    V = np.zeros((ctx_pad, D), np.float32)
    K[:ctx] = bf16(rng.standard_normal((ctx, D)))
    V[:ctx] = bf16(rng.standard_normal((ctx, D)))
    Qall = rng.standard_normal((rows, D)).astype(np.float32)
    pos = [ctx - q_len + j for j in range(q_len)]
    ctx_tiles = (ctx + 15) // 16
    per_split = (ctx_tiles + splits - 1) // splits
    worst = 0.0
    for chunk in range((rows + ROWS - 1) // ROWS):
        row0 = chunk * ROWS
        Q = np.zeros((ROWS, D), np.float32)
        lims = []
        for r in range(ROWS):
            if row0 + r < rows:
                Q[r] = Qall[row0 + r]
                lims.append(pos[(row0 + r) // G])
            else:
                lims.append(-1)
        max_lim = pos[(min(rows, row0 + ROWS) - 1) // G]
        need = (max_lim + 16) // 16
        parts = []
        for s in range(splits):
            tb = s * per_split
            te = min(need, tb + per_split)
            parts.append(kernel_split(D, NT, Q, K, V, lims, list(range(tb, te)), scale_log2))
        for r in range(ROWS):
            row = row0 + r
            if row >= rows:
                continue
            mx = max(p[0][r] for p in parts)
            sc = [0.0 if p[0][r] == -np.inf else 2.0 ** (p[0][r] - mx) for p in parts]
            lsum = sum(p[1][r] * w for p, w in zip(parts, sc))
            out = sum(p[2][r] * w for p, w in zip(parts, sc)) / lsum
            # reference: float64 attention over keys 0..lim
            lim = lims[r]
            sc_ref = (K[:lim + 1].astype(np.float64) @ Q[r].astype(np.float64)) * scale
            p = np.exp(sc_ref - sc_ref.max())
            ref = (p @ V[:lim + 1].astype(np.float64)) / p.sum()
            err = np.abs(out - ref).max() / max(1e-9, np.abs(ref).max())
            worst = max(worst, err)
    return worst


cases = [
    # D, NT, G, q_len, ctx, splits
    (64, 1, 3, 1, 37, 1),
    (64, 2, 3, 5, 70, 2),
    (64, 3, 3, 5, 100, 1),
    (128, 1, 4, 1, 50, 3),
    (128, 3, 4, 5, 90, 2),
    (128, 2, 4, 5, 33, 1),
    (64, 1, 3, 13, 60, 1),
    (128, 1, 4, 2, 16, 1),
]
bad = False
for case in cases:
    err = check(*case)
    ok = err < 2e-2
    bad |= not ok
    print(f"D={case[0]} NT={case[1]} G={case[2]} q={case[3]} ctx={case[4]} splits={case[5]}: max rel err {err:.2e} {'ok' if ok else 'FAIL'}")
sys.exit(1 if bad else 0)
