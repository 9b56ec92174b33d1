#!/usr/bin/env python3
"""Emulates kernels/gemv.cu's indexing lane by lane (weight loads, the k permutation inside a
chunk, mma.m16n8k16 fragments, x staging, split partials and the last block's fixed-order
sum, the store / silu / qkv epilogues with both RoPE layouts) against a numpy reference, for
every weight format, token bucket and a split and unsplit K. Host only: run it after editing
the kernel's index arithmetic. The split rule is linear.rs `gemv_splits`, mirrored here."""
import numpy as np

rng = np.random.default_rng(0)
W_OF = {"bf16": 8, "fp8": 16, "int4": 32, "nvfp4": 32}


def bf16(v):
    """Round f32 to bf16 (nearest even), back to f32."""
    u = np.asarray(v, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def e4m3(b):
    b = int(b)
    e, m, s = (b >> 3) & 15, b & 7, -1.0 if b & 0x80 else 1.0
    return np.float32(s * (m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)))


def e2m1(c):
    c = int(c)
    e, m, s = (c >> 1) & 3, c & 1, -1.0 if c & 8 else 1.0
    return np.float32(s * (m * 0.5 if e == 0 else (1 + m / 2) * 2.0 ** (e - 1)))


def splits_for(groups, k, cw, sm=132):
    # linear.rs gemv_splits
    chunks = -(-k // cw)
    min_smem = -(-chunks // (2048 // cw))
    want = -(-4 * sm // groups)
    s = max(min(want, max(chunks // 2, 1)), min_smem, 1)
    cps = -(-chunks // s)
    return -(-chunks // cps), cps


class Mat:
    """Weights in the device layout plus the exact dequantised f32 values."""

    def __init__(self, fmt, rows, k, group=64, smooth=False):
        self.fmt, self.rows, self.k, self.group = fmt, rows, k, group
        self.smooth = (0.5 + rng.random(k)).astype(np.float32) if smooth else None
        if fmt == "bf16":
            self.wf = bf16(rng.standard_normal((rows, k)).astype(np.float32) * 0.1)
        elif fmt == "fp8":
            self.codes = rng.integers(0, 256, (rows, k))
            self.codes[(self.codes & 0x7F) == 0x7F] = 0x10  # no NaN codes
            self.scale = (rng.random(rows) + 0.5).astype(np.float32)
            tab = np.array([e4m3(b) for b in range(256)], np.float32)
            self.q = tab[self.codes]  # exact values; the scale is applied to the sums
            self.wf = self.q * self.scale[:, None]
        else:
            self.codes = rng.integers(0, 16, (rows, k))
            if fmt == "int4":
                ng = -(-k // group)
                self.sc = (rng.random((rows, ng)) * 0.1).astype(np.float32)
                self.zr = rng.integers(0, 16, (rows, ng)).astype(np.float32)
                gidx = np.arange(k) // group
                self.wf = ((self.codes - self.zr[:, gidx]) * self.sc[:, gidx]).astype(np.float32)
            else:
                nb = k // 16
                self.bs = rng.integers(0x20, 0x60, (rows, nb))
                self.rs = (rng.random(rows) + 0.5).astype(np.float32)
                tab = np.array([e2m1(c) for c in range(16)], np.float32)
                tab4 = np.array([e4m3(b) for b in range(256)], np.float32)
                s = (tab4[self.bs] * self.rs[:, None]).astype(np.float32)
                self.wf = (tab[self.codes] * np.repeat(s, 16, axis=1)).astype(np.float32)
            if self.smooth is not None:
                self.wf = (self.wf * self.smooth[None, :]).astype(np.float32)

    def lane_values(self, row, col, w):
        """The kernel's bf16 A values of `w` columns of `row` from `col`, decoded from the
        16 device bytes the lane loads exactly as gv_row_words does (word / byte / nibble
        selection, the group and block scale of the lane's columns)."""
        if col >= self.k:  # gv_load's !ok: zero weights
            return np.zeros(w, np.float32)
        if self.fmt == "bf16":
            return self.wf[row, col:col + w]
        if self.fmt == "fp8":
            raw = bytes(int(b) for b in self.codes[row, col:col + 16])
        else:
            c = self.codes[row]
            packed = [int(c[2 * i]) | (int(c[2 * i + 1]) << 4) for i in range(self.k // 2)]
            raw = bytes(packed[col // 2: col // 2 + 16])
        words = [int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(4)]
        out = []
        for st in range(w // 4):
            if self.fmt == "fp8":
                b = words[st]
                out += [e4m3(b & 0xFF), e4m3((b >> 8) & 0xFF), e4m3((b >> 16) & 0xFF), e4m3(b >> 24)]
                continue
            word = words[st >> 1]
            b0 = (word >> (16 * (st & 1))) & 0xFF
            b1 = (word >> (16 * (st & 1) + 8)) & 0xFF
            nib = [b0 & 0xF, b0 >> 4, b1 & 0xF, b1 >> 4]
            if self.fmt == "int4":
                gi = col // self.group
                s, z = self.sc[row, gi], self.zr[row, gi]
                v = [np.float32((np.float32(n) - z) * s) for n in nib]
            else:
                nb = self.k // 16
                flat = self.bs.reshape(-1)
                u16 = int(flat[row * nb + col // 16]) | (int(flat[row * nb + col // 16 + 1]) << 8)
                sc = np.float32(e4m3((u16 >> (8 * (st >> 2))) & 0xFF) * self.rs[row])
                v = [np.float32(e2m1(n) * sc) for n in nib]
            if self.smooth is not None:
                v = [np.float32(a * b) for a, b in zip(v, self.smooth[col + 4 * st: col + 4 * st + 4])]
            out += v
        out = np.array(out, np.float32)
        want = self.q[row, col:col + w] if self.fmt == "fp8" else self.wf[row, col:col + w]
        assert (out == want).all(), (self.fmt, row, col, out, want)
        return bf16(out)


def mma(acc, A, B):
    """acc[32][4] += per-lane fragments A[32][8], B[32][4] by the PTX m16n8k16 layout."""
    a = np.zeros((16, 16)); b = np.zeros((16, 8))
    for lane in range(32):
        g, c = lane // 4, lane % 4
        for j in range(2):
            a[g, 2 * c + j] = A[lane][j]; a[g + 8, 2 * c + j] = A[lane][2 + j]
            a[g, 2 * c + 8 + j] = A[lane][4 + j]; a[g + 8, 2 * c + 8 + j] = A[lane][6 + j]
            b[2 * c + j, g] = B[lane][j]; b[2 * c + 8 + j, g] = B[lane][2 + j]
    cm = a @ b
    for lane in range(32):
        g, c = lane // 4, lane % 4
        acc[lane] += [cm[g, 2 * c], cm[g, 2 * c + 1], cm[g + 8, 2 * c], cm[g + 8, 2 * c + 1]]


def tile_row(epi, gi, w, rows, D):
    if epi == "store":
        return (gi * 4 + w) * 16
    if epi == "silu":
        return (w >> 1) * (rows // 2) + 16 * (2 * gi + (w & 1))
    per = D // 64
    head, p = gi // per, gi % per
    return head * D + 16 * (2 * p + (w & 1) + (w >> 1) * (D // 32))


def run_kernel(m, x, T, TB, epi, D=64):
    """Full sums per row and token the epilogue sees: res[row][t]."""
    W = W_OF[m.fmt]; CW = 4 * W
    rows, K = m.rows, m.k
    groups = {"store": -(-rows // 64), "silu": rows // 64, "qkv": rows // 64}[epi]
    S, cps = splits_for(groups, K, CW)
    assert cps * CW <= 2048
    part = np.full((S, T, rows), np.nan, np.float32)
    out = np.full((rows, T), np.nan)
    seen = np.zeros(rows, int)
    for gi in range(groups):
        for split in range(S):
            kbase = split * cps * CW
            kr = min(cps * CW, K - kbase)
            assert kr > 0
            XS = ((cps * CW + 63) // 64) * 64 + 8
            xs = np.zeros(TB * XS, np.float32)
            vec = cps * CW // 8
            for i in range(TB * vec):
                t, v = i // vec, i % vec
                if t < T and 8 * v < kr:
                    xs[t * XS + 8 * v: t * XS + 8 * v + 8] = x[t, kbase + 8 * v: kbase + 8 * v + 8]
            for w in range(4):
                row0 = tile_row(epi, gi, w, rows, D)
                ok = row0 < rows
                acc = np.zeros((32, 4))
                for p in range(cps):
                    A = [[0.0] * 8 for _ in range(32)]
                    lanes_a, lanes_x = [], []
                    for lane in range(32):
                        g, c = lane // 4, lane % 4
                        col = kbase + p * CW + c * W
                        va = m.lane_values(row0 + g, col, W) if ok else np.zeros(W)
                        vb = m.lane_values(row0 + g + 8, col, W) if ok else np.zeros(W)
                        xv = xs[g * XS + p * CW + c * W: g * XS + p * CW + c * W + W] if g < TB else np.zeros(W)
                        lanes_a.append((va, vb)); lanes_x.append(xv)
                    for st in range(W // 4):
                        A = []; B = []
                        for lane in range(32):
                            va, vb = lanes_a[lane]; xv = lanes_x[lane]
                            q = slice(4 * st, 4 * st + 4)
                            a4, b4, x4 = va[q], vb[q], xv[q]
                            # {a0a1, a2a3, a4a5, a6a7} = {row a lo, row b lo, row a hi, row b hi}
                            A.append([a4[0], a4[1], b4[0], b4[1], a4[2], a4[3], b4[2], b4[3]])
                            B.append([x4[0], x4[1], x4[2], x4[3]])
                        mma(acc, A, B)
                if m.fmt == "fp8" and ok:
                    for lane in range(32):
                        g = lane // 4
                        acc[lane][:2] *= m.scale[row0 + g]; acc[lane][2:] *= m.scale[row0 + g + 8]
                for lane in range(32):
                    g, c = lane // 4, lane % 4
                    for j, (r, t) in enumerate([(g, 2 * c), (g, 2 * c + 1), (g + 8, 2 * c), (g + 8, 2 * c + 1)]):
                        if t < T and ok:
                            part[split, t, row0 + r] = acc[lane][j]
        # the last block: partials in split order
        for w in range(4):
            row0 = tile_row(epi, gi, w, rows, D)
            for r in range(16):
                if row0 + r < rows:
                    for t in range(T):
                        s = part[0, t, row0 + r]
                        for sp in range(1, S):
                            s += part[sp, t, row0 + r]
                        out[row0 + r, t] = s
                    seen[row0 + r] += 1
    assert (seen == 1).all(), "every row in exactly one tile"
    return out, S


def check(fmt, rows, K, TB, T, epi, smooth=False, D=64, interleaved=False):
    m = Mat(fmt, rows, K, smooth=smooth)
    x = bf16(rng.standard_normal((T, K)).astype(np.float32))
    ref = (x.astype(np.float64) @ (m.q * m.scale[:, None] if fmt == "fp8" else m.wf).astype(np.float64).T).T  # [rows][T]
    # the kernel rounds dequantised weights to bf16 (not fp8, exact): reference with that rounding
    wk = m.wf if fmt == "fp8" else bf16(m.wf)
    ref_k = (x.astype(np.float64) @ wk.astype(np.float64).T).T
    got, S = run_kernel(m, x, T, TB, epi, D)
    err = np.abs(got - ref_k).max() / max(np.abs(ref_k).max(), 1e-9)
    ok = err < 1e-5
    extra = ""
    if epi == "qkv":
        extra = qkv_epilogue(got, rows, D, T, interleaved)
    print(f"{fmt:5} {epi:5} rows {rows:5} K {K:5} TB {TB} T {T} splits {S}: rel err {err:.1e} {'ok' if ok else 'BAD'} {extra}")
    return ok


def qkv_epilogue(res, rows, D, T, interleaved):
    """The epilogue's pair mapping covers every row of the head once, with the right partner."""
    per = D // 64
    heads = rows // D
    for gi in range(heads * per):
        head, p = gi // per, gi % per
        rotate = head < heads - 1  # last head plays v here
        cover = []
        for pi in range(32):
            if rotate and not interleaved:
                wa = pi // 16; wb = wa + 2; ia = ib = pi % 16
            else:
                wa = wb = pi // 8; ia = 2 * (pi % 8); ib = ia + 1
            da = 16 * (2 * p + (wa & 1) + (wa >> 1) * (D // 32)) + ia
            db = 16 * (2 * p + (wb & 1) + (wb >> 1) * (D // 32)) + ib
            # res rows from the tile mapping must be the head's rows da and db
            assert tile_row("qkv", gi, wa, rows, D) + ia == head * D + da
            assert tile_row("qkv", gi, wb, rows, D) + ib == head * D + db
            if rotate and not interleaved:
                assert db == da + D // 2 and da < D // 2
            else:
                assert db == da + 1 and da % 2 == 0
            cover += [da, db]
        assert len(set(cover)) == 64
    return "pairs ok"


if __name__ == "__main__":
    ok = True
    for fmt in ["bf16", "fp8", "int4", "nvfp4"]:
        # K = 320: 4-bit chunks of 128 end half way (the partial chunk); 96 rows: a store
        # group with two idle warps.
        for (TB, T) in [(1, 1), (2, 2), (4, 3), (8, 8)]:
            ok &= check(fmt, 96, 320, TB, T, "store")
        ok &= check(fmt, 128, 576, 8, 5, "silu", smooth=fmt in ("int4", "nvfp4"))
        ok &= check(fmt, 3 * 128, 256, 4, 4, "qkv", D=128, interleaved=False)
        ok &= check(fmt, 3 * 64, 2560, 2, 2, "qkv", D=64, interleaved=True)  # K 2560: splits >= 2 (smem cap)
    print("ALL OK" if ok else "FAILURES")
