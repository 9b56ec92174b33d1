"""PTX fragment layouts of mma.sync m16n8k16 (.bf16 inputs, f32 accumulators) and bf16
rounding, for the lane-level kernel emulators (attention_mma.py,
attention_flash.py). Written from the PTX ISA's fragment tables, independently of
the kernels. Registers holding two bf16 values are (lo, hi) pairs of floats."""
import numpy as np


def bf16(x):
    """Round float32 to bfloat16 (nearest even), returned as float32."""
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


# ---- PTX fragment layouts (m16n8k16, .bf16, f32 accumulate) ----
def a_frag_to_matrix(regs):
    """regs[lane][4] of (lo, hi) pairs -> A 16x16."""
    A = np.zeros((16, 16))
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        for r, (row, col) in enumerate([(g, 2 * c), (g + 8, 2 * c), (g, 2 * c + 8), (g + 8, 2 * c + 8)]):
            A[row, col], A[row, col + 1] = regs[lane][r]
    return A


def b_frag_to_matrix(regs):
    """regs[lane][2] of (lo, hi) pairs -> B 16x8 (k x n)."""
    B = np.zeros((16, 8))
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        for r, k in enumerate([2 * c, 2 * c + 8]):
            B[k, g], B[k + 1, g] = regs[lane][r]
    return B


def c_frag_to_matrix(acc):
    C = np.zeros((16, 8))
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        C[g, 2 * c], C[g, 2 * c + 1], C[g + 8, 2 * c], C[g + 8, 2 * c + 1] = acc[lane]
    return C


def matrix_to_c_frag(C):
    out = []
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        out.append([C[g, 2 * c], C[g, 2 * c + 1], C[g + 8, 2 * c], C[g + 8, 2 * c + 1]])
    return out


def mma(acc, a_regs, b_regs):
    A, B, C = a_frag_to_matrix(a_regs), b_frag_to_matrix(b_regs), c_frag_to_matrix(acc)
    return matrix_to_c_frag(C + A @ B)
