//! Parallel loops over matmul outputs shared by the f32 and quantized kernels:
//! register tiles of tokens × weight rows (`tiled`) and per-row work on two
//! buffers (`for_rows`), both on the CPU team (`team.rs`).

use super::team;

/// Calls `f(row, a_row, b_row)` for every row of two row-major buffers (`a`: `a_cols`
/// per row, `b`: `b_cols`), in parallel over chunks of `chunk` rows
/// ([`team::par_for`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn for_rows<A: Send, B: Send>(
    rows: usize,
    chunk: usize,
    a: &mut [A],
    a_cols: usize,
    b: &mut [B],
    b_cols: usize,
    f: impl Fn(usize, &mut [A], &mut [B]) + Sync,
) {
    let chunk = chunk.max(1);
    assert!(
        a.len() >= rows * a_cols && b.len() >= rows * b_cols,
        "for_rows: short buffer"
    );
    let (sa, sb) = (team::SharedMut::new(a), team::SharedMut::new(b));
    team::par_for(rows.div_ceil(chunk), |c| {
        for r in c * chunk..((c + 1) * chunk).min(rows) {
            // SAFETY: row r belongs to chunk c alone.
            let (ra, rb) = unsafe {
                (
                    sa.slice(r * a_cols, (r + 1) * a_cols),
                    sb.slice(r * b_cols, (r + 1) * b_cols),
                )
            };
            f(r, ra, rb);
        }
    });
}

/// Fills `out[t][r]` (`[t_rows][w_rows]`) by calling `micro(t, tt, r, rr, res, stride)`
/// for register tiles of tokens `t..t+tt` (`tt` ≤ 4) × weight rows `r..r+rr`
/// (`rr` ≤ `max_rows[tt]`), which writes value (t+i, r+j) to `res[j * stride + i]`.
/// Parallel over blocks of weight rows; inside a block, tokens are walked in tiles so
/// the block's weights and a tile of activations stay in cache together. Tiling only
/// decides *which* values are computed together, never how one is summed, so results
/// do not depend on `t_rows`.
pub(crate) fn tiled(
    t_rows: usize,
    w_rows: usize,
    max_rows: [usize; 5],
    micro: impl Fn(usize, usize, usize, usize, &mut [f32], usize) + Sync,
) -> Vec<f32> {
    const ROWS: usize = 24; // a multiple of every tile height
    const TOKENS: usize = 16;
    // [row][t]: each block of ROWS weight rows owns one contiguous chunk, so the tasks
    // write in place (no per-block buffers); one token needs no transpose after.
    let mut res = vec![0.0f32; w_rows * t_rows];
    if t_rows == 0 {
        return res;
    }
    let shared = team::SharedMut::new(&mut res);
    team::par_for(w_rows.div_ceil(ROWS), |b| {
        let (r0, r1) = (b * ROWS, ((b + 1) * ROWS).min(w_rows));
        // SAFETY: block b owns rows r0..r1 of `res`, disjoint from every other block.
        let res = unsafe { shared.slice(r0 * t_rows, r1 * t_rows) };
        for t0 in (0..t_rows).step_by(TOKENS) {
            let t1 = (t0 + TOKENS).min(t_rows);
            // Groups of four tokens, each row tile against all of them (its weights
            // stay in L1 while the tile's activations are reused from L1 too) ...
            let full = t0 + (t1 - t0) / 4 * 4;
            let mut r = r0;
            while r < r1 {
                let rr = (r1 - r).min(max_rows[4]);
                for t in (t0..full).step_by(4) {
                    micro(t, 4, r, rr, &mut res[(r - r0) * t_rows + t..], t_rows);
                }
                r += rr;
            }
            // ... then the one to three tokens left, in taller tiles.
            if full < t1 {
                let tt = t1 - full;
                let mut r = r0;
                while r < r1 {
                    let rr = (r1 - r).min(max_rows[tt]);
                    micro(
                        full,
                        tt,
                        r,
                        rr,
                        &mut res[(r - r0) * t_rows + full..],
                        t_rows,
                    );
                    r += rr;
                }
            }
        }
    });
    if t_rows == 1 {
        return res;
    }
    // To [t][row], in parallel over chunks of 16 tokens: for each weight row the chunk
    // reads one cache line of `res` and writes one value into each of its 16 rows.
    const T_CHUNK: usize = 16;
    let mut out = vec![0.0f32; t_rows * w_rows];
    let shared = team::SharedMut::new(&mut out);
    team::par_for(t_rows.div_ceil(T_CHUNK), |c| {
        let (t0, t1) = (c * T_CHUNK, ((c + 1) * T_CHUNK).min(t_rows));
        // SAFETY: chunk c owns output rows t0..t1.
        let out = unsafe { shared.slice(t0 * w_rows, t1 * w_rows) };
        for (r, row) in res.chunks_exact(t_rows).enumerate() {
            for (i, &v) in row[t0..t1].iter().enumerate() {
                out[i * w_rows + r] = v;
            }
        }
    });
    out
}

/// Output rows (weight rows) per group of the grouped layouts (`q4.rs`, `q8.rs`): one
/// AVX2 vector of eight outputs.
pub(crate) const GROUP: usize = 8;

/// The output matrix of [`grouped`], written by its tasks at disjoint cells.
struct Out(*mut f32);
// SAFETY: tasks write disjoint (token, row) cells only.
unsafe impl Sync for Out {}

/// Tokens and row groups per task of [`grouped`]: a task's weights (eight groups) and
/// activations stay in L2 while it walks them in register tiles of up to four tokens
/// × one group.
const TASK_TOKENS: usize = 64;
const TASK_GROUPS: usize = 8;

/// Fills `out[t][r]` (`[t_rows][w_rows]`) for weights stored in groups of [`GROUP`]
/// rows: `micro(t, tt, g, vals)` computes tokens `t..t+tt` (`tt` ≤ 4) × the eight rows
/// of group `g` into `vals[i][lane]` (lanes past `w_rows` are dropped). Parallel over
/// (64 tokens × 8 groups) tasks; which values are computed together never changes how
/// one is summed.
pub(crate) fn grouped(
    t_rows: usize,
    w_rows: usize,
    micro: impl Fn(usize, usize, usize, &mut [[f32; GROUP]; 4]) + Sync,
) -> Vec<f32> {
    // Every cell is written exactly once below, so the buffer is not cleared first (a
    // memset of the whole output per matmul was ~2 % of a CPU server's time in the profile of
    // results/2026-12-02-cpu-matmul-no-clear); its length is set once the writes are done.
    let n = t_rows * w_rows;
    let mut out: Vec<f32> = Vec::with_capacity(n);
    let groups = w_rows.div_ceil(GROUP);
    let (tasks_t, tasks_g) = (t_rows.div_ceil(TASK_TOKENS), groups.div_ceil(TASK_GROUPS));
    let dst = Out(out.as_mut_ptr());
    team::par_for(tasks_t * tasks_g, |task| {
        let dst = &dst;
        let (ti, gi) = (task / tasks_g, task % tasks_g);
        let (t0, t1) = (ti * TASK_TOKENS, ((ti + 1) * TASK_TOKENS).min(t_rows));
        for g in gi * TASK_GROUPS..((gi + 1) * TASK_GROUPS).min(groups) {
            let (r0, r1) = (g * GROUP, ((g + 1) * GROUP).min(w_rows));
            let mut t = t0;
            while t < t1 {
                let tt = (t1 - t).min(4);
                let mut vals = [[0.0f32; GROUP]; 4];
                micro(t, tt, g, &mut vals);
                for (i, v) in vals[..tt].iter().enumerate() {
                    let cell = (t + i) * w_rows + r0;
                    // SAFETY: cells (t+i, r0..r1) belong to this task alone, inside `out`'s
                    // capacity. A whole group is one fixed-size store, not a memcpy call.
                    unsafe {
                        if r1 - r0 == GROUP {
                            std::ptr::write_unaligned(dst.0.add(cell) as *mut [f32; GROUP], *v);
                        } else {
                            std::ptr::copy_nonoverlapping(v.as_ptr(), dst.0.add(cell), r1 - r0);
                        }
                    }
                }
                t += tt;
            }
        }
    });
    // SAFETY: the tasks above wrote all t_rows x w_rows cells (every token row of every
    // group, tile by tile), within the capacity reserved.
    unsafe { out.set_len(n) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `grouped` writes every cell of its (uncleared) output exactly as `micro` computed it,
    /// for shapes whose tokens and rows are not multiples of the tiles.
    #[test]
    fn grouped_writes_every_cell() {
        let value = |t: usize, r: usize| (t * 1000 + r) as f32 + 0.5;
        for (t_rows, w_rows) in [(1, 8), (3, 13), (67, 61), (130, 576), (5, 1)] {
            let out = grouped(t_rows, w_rows, |t, tt, g, vals| {
                for (i, row) in vals[..tt].iter_mut().enumerate() {
                    for (lane, v) in row.iter_mut().enumerate() {
                        *v = value(t + i, g * GROUP + lane);
                    }
                }
            });
            assert_eq!(out.len(), t_rows * w_rows);
            for t in 0..t_rows {
                for r in 0..w_rows {
                    assert_eq!(
                        out[t * w_rows + r],
                        value(t, r),
                        "cell ({t}, {r}) of {t_rows} x {w_rows}"
                    );
                }
            }
        }
    }
}
