//! Mixture-of-experts layers (`Backend::moe_ffn`: Qwen3-MoE, Mixtral) on the GPU, as a step
//! op that CUDA graphs capture. Off unless `WRING_CUDA_MOE=on` (`CudaOptions::moe`) until it
//! has been checked on a GPU (`gpu_check moe`, `scripts/gpu/check.sh cpu-moe`).
//!
//! One layer is seven launches of kernels/moe.cu: the router logits `x · routerᵀ` in f32,
//! the routing rule of `wring_backend::moe::route` on the device (ids and weights per token),
//! the (token, slot) pairs of each expert in token order, each expert's gate|up → SiLU·mul
//! and down for its pairs, and per token the weighted sum of its experts' outputs.
//!
//! Why this layout:
//! - Every grid follows the step's shape alone (tokens, experts, top_k, hidden, expert
//!   intermediate size), never the routing: the routing lives in device buffers of the
//!   arena (allocated in one fixed order, so a replay finds them where the capture left
//!   them), and nothing is copied from the host or synchronised.
//! - The expert compute runs on a grid over (expert, output tile) whose blocks return at once
//!   when their expert got no pairs: a step reads the weights of the experts its tokens route
//!   to, the bytes its roofline counts.
//! - The experts are separate matrices; their addresses travel by value in the launch's
//!   parameter (`MoeExpertArgs`, up to [`MOE_MAX_EXPERTS`]), so no device table is built and a
//!   graph holds them as it holds any argument.
//! - Each (token, slot) pair has its own output row, and a token's rows are summed afterwards
//!   in ascending expert index from zero, a rounded product then a rounded add each: the CPU
//!   backend's order, with no float atomics. With the kernels' fixed per-value reduction
//!   orders, a token's result never depends on the other tokens of the step (which experts
//!   they pick, how many share one) and graph replay equals eager execution bit for bit.
//!
//! Expert weights must be bf16: `prepare_moe` refuses others (`--gpu-weights`,
//! `WRING_CUDA_WEIGHTS`, a quantized checkpoint under `WRING_CUDA_QUANT_KERNELS`) when the
//! layer is uploaded. The expert kernels are CUDA-core dot products, simple rather than fast:
//! a warp streams a weight row once per eight pairs, which is the weight-bound roofline for
//! decode and verify steps but far from the tensor cores for long prompt chunks.

use super::tensor::{CudaMatrix, CudaTensor, CudaVector, DType, Weights};
use super::CudaBackend;
use crate::device::Arg;
use anyhow::{anyhow, ensure, Context, Result};
use wring_backend::MoeLayer;

/// kernels/moe.cu's limits: experts a layer (addresses in one launch parameter) and experts
/// a token (the combine kernel's sort).
pub(crate) const MOE_MAX_EXPERTS: usize = 256;
pub(crate) const MOE_MAX_TOP_K: usize = 32;
/// Output columns a block of `moe_gate_up` / `moe_down` (a warp each).
const MOE_WARPS: usize = 8;
/// Threads a block of `moe_route` (a token each).
const ROUTE_THREADS: usize = 128;
/// The arena's allocation granule (`arena.rs`), to size the op's scratch.
const ARENA_ALIGN: usize = 256;

/// The parameter of `moe_gate_up` and `moe_down` (kernels/moe.cu `MoeExpertArgs`, field for
/// field).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct MoeExpertArgs {
    /// Expert e's bf16 matrix (gate|up `[2I][H]` or down `[H][I]`); 0 past the layer's experts.
    pub w: [u64; MOE_MAX_EXPERTS],
    /// `moe_gate_up`: bf16 x `[T][H]`; `moe_down`: f32 m `[T·k][I]`.
    pub input: u64,
    /// `moe_gate_up`: m; `moe_down`: y `[T·k][H]` (f32).
    pub out: u64,
    /// `[E]` i32: pairs routed to each expert.
    pub counts: u64,
    /// `[E][T]` i32: those pairs (t·k + slot), ascending.
    pub lists: u64,
    pub tokens: i32,
    pub top_k: i32,
    pub n_in: i32,
    pub n_out: i32,
}

/// One layer's dimensions, checked against its weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MoeShape {
    pub experts: usize,
    /// Experts a token (`routing.top_k`, at most `experts`, as `route` takes it).
    pub top_k: usize,
    pub hidden: usize,
    /// One expert's intermediate size.
    pub inter: usize,
}

impl MoeShape {
    /// The shape of `layer`, or why the CUDA op cannot run it.
    pub(crate) fn of(layer: &MoeLayer<CudaVector, CudaMatrix>) -> Result<Self> {
        ensure!(
            layer.is_plain_softmax(),
            "the CUDA mixture-of-experts op runs softmax top-k routing only (no sigmoid scores, correction bias, expert groups, routed scale or shared experts)"
        );
        let experts = layer.experts.len();
        ensure!(
            (1..=MOE_MAX_EXPERTS).contains(&experts),
            "the CUDA mixture-of-experts op runs 1 to {MOE_MAX_EXPERTS} experts a layer; this layer has {experts}"
        );
        let top_k = layer.routing.top_k.min(experts);
        ensure!(
            (1..=MOE_MAX_TOP_K).contains(&top_k),
            "the CUDA mixture-of-experts op routes a token to 1 to {MOE_MAX_TOP_K} experts; this layer asks for {}",
            layer.routing.top_k
        );
        let first = &layer.experts[0].gate_up;
        let (hidden, inter) = (first.cols, first.rows / 2);
        ensure!(
            hidden > 0 && inter > 0 && first.rows == 2 * inter,
            "expert 0's gate|up matrix is {}x{}: expected [2·I][hidden]",
            first.rows,
            first.cols
        );
        ensure!(
            layer.router.len == experts * hidden,
            "the router has {} values; {experts} experts of hidden size {hidden} need {}",
            layer.router.len,
            experts * hidden
        );
        for (e, ex) in layer.experts.iter().enumerate() {
            for (what, m) in [("gate|up", &ex.gate_up), ("down", &ex.down)] {
                ensure!(
                    matches!(m.w, Weights::Bf16(_)),
                    "expert {e}'s {what} weights are {}: the CUDA mixture-of-experts op runs bf16 expert weights only (run without --gpu-weights / WRING_CUDA_WEIGHTS and WRING_CUDA_QUANT_KERNELS, or with --device cpu)",
                    m.scheme()
                );
            }
            ensure!(
                (ex.gate_up.rows, ex.gate_up.cols, ex.down.rows, ex.down.cols)
                    == (2 * inter, hidden, hidden, inter),
                "expert {e} is gate|up {}x{}, down {}x{}; expert 0 makes it gate|up {}x{hidden}, down {hidden}x{inter}",
                ex.gate_up.rows,
                ex.gate_up.cols,
                ex.down.rows,
                ex.down.cols,
                2 * inter
            );
        }
        Ok(Self {
            experts,
            top_k,
            hidden,
            inter,
        })
    }

    /// The op's arena allocations for a step of `t` tokens, in the order it makes them
    /// (rows, columns, bytes a value): the output, the bf16 copy of an f32 input, logits,
    /// ids, weights, expert lists, counts, SiLU·mul rows, expert output rows.
    fn allocations(&self, t: usize) -> [(usize, usize, DType); 9] {
        let (e, k, h, i) = (self.experts, self.top_k, self.hidden, self.inter);
        [
            (t, h, DType::F32),
            (t, h, DType::Bf16),
            (t, e, DType::F32),
            (t, k, DType::F32),
            (t, k, DType::F32),
            (e, t, DType::F32),
            (1, e, DType::F32),
            (t * k, i, DType::F32),
            (t * k, h, DType::F32),
        ]
    }

    /// Arena bytes the op holds at its peak in a step of `t` tokens.
    pub(crate) fn scratch_bytes(&self, t: usize) -> usize {
        self.allocations(t)
            .iter()
            .map(|&(r, c, d)| (r * c * d.size()).max(1).div_ceil(ARENA_ALIGN) * ARENA_ALIGN)
            .sum()
    }
}

impl CudaBackend {
    /// `Backend::prepare_moe`: refuses a layer the op cannot run (at load) and sizes the
    /// activation arena for its scratch at the step token cap.
    pub(super) fn prepare_moe_op(
        &mut self,
        layer: &MoeLayer<CudaVector, CudaMatrix>,
    ) -> Result<()> {
        let shape = MoeShape::of(layer).context("a mixture-of-experts layer on CUDA")?;
        self.moe_scratch = self
            .moe_scratch
            .max(shape.scratch_bytes(self.opts.max_tokens));
        Ok(())
    }

    pub(super) fn moe_ffn_op(
        &mut self,
        x: &CudaTensor,
        layer: &MoeLayer<CudaVector, CudaMatrix>,
    ) -> CudaTensor {
        if !self.ok() {
            return CudaTensor::empty();
        }
        let s = match MoeShape::of(layer) {
            Ok(s) => s,
            Err(e) => {
                self.fail(e.context("moe_ffn"));
                return CudaTensor::empty();
            }
        };
        if x.ptr == 0 || x.cols != s.hidden || x.dtype == DType::Fp8 {
            self.fail(anyhow!(
                "moe_ffn got a {:?} tensor of {} columns; the layer takes bf16 or f32 rows of {}",
                x.dtype,
                x.cols,
                s.hidden
            ));
            return CudaTensor::empty();
        }
        let (t, e, k, h, i) = (x.rows, s.experts, s.top_k, s.hidden, s.inter);
        // In `MoeShape::allocations`' order (it sizes the arena for them).
        let out = self.alloc(t, h, DType::F32, x.valid_rows);
        let converted = (x.dtype == DType::F32).then(|| self.moe_to_bf16(x));
        let xb = converted.as_ref().map_or(x.ptr, |c| c.ptr);
        let logits = self.alloc(t, e, DType::F32, t);
        // i32 arrays, held in 4-byte tensors.
        let ids = self.alloc(t, k, DType::F32, t);
        let weights = self.alloc(t, k, DType::F32, t);
        let lists = self.alloc(e, t, DType::F32, e);
        let counts = self.alloc(1, e, DType::F32, 1);
        let m = self.alloc(t * k, i, DType::F32, t * k);
        let y = self.alloc(t * k, h, DType::F32, t * k);
        if !self.ok() {
            return CudaTensor::empty();
        }
        let f = self.kernels.moe.router;
        let args = [
            Arg::Ptr(xb),
            Arg::Ptr(layer.router.buf.ptr()),
            Arg::Ptr(logits.ptr),
            Arg::I32(e as i32),
            Arg::I32(h as i32),
        ];
        self.launch(f, (t as u32, 1, 1), 256, &args, "moe_router");
        let f = self.kernels.moe.route;
        let args = [
            Arg::Ptr(logits.ptr),
            Arg::Ptr(ids.ptr),
            Arg::Ptr(weights.ptr),
            Arg::I32(t as i32),
            Arg::I32(e as i32),
            Arg::I32(k as i32),
            Arg::I32(layer.routing.renormalize as i32),
        ];
        let grid = (t.div_ceil(ROUTE_THREADS) as u32, 1, 1);
        self.launch(f, grid, ROUTE_THREADS as u32, &args, "moe_route");
        let f = self.kernels.moe.group;
        let args = [
            Arg::Ptr(ids.ptr),
            Arg::I32((t * k) as i32),
            Arg::I32(t as i32),
            Arg::Ptr(lists.ptr),
            Arg::Ptr(counts.ptr),
        ];
        self.launch(f, (e as u32, 1, 1), 256, &args, "moe_group");
        let expert_args = |pick: fn(&wring_backend::Expert<CudaMatrix>) -> &CudaMatrix,
                           input: u64,
                           out: u64,
                           n_in: usize,
                           n_out: usize| {
            let mut a = MoeExpertArgs {
                w: [0; MOE_MAX_EXPERTS],
                input,
                out,
                counts: counts.ptr,
                lists: lists.ptr,
                tokens: t as i32,
                top_k: k as i32,
                n_in: n_in as i32,
                n_out: n_out as i32,
            };
            for (slot, ex) in a.w.iter_mut().zip(&layer.experts) {
                if let Weights::Bf16(buf) = &pick(ex).w {
                    *slot = buf.ptr();
                }
            }
            a
        };
        let gate_up = expert_args(|ex| &ex.gate_up, xb, m.ptr, h, i);
        let down = expert_args(|ex| &ex.down, m.ptr, y.ptr, i, h);
        let f = self.kernels.moe.gate_up;
        let grid = (e as u32, i.div_ceil(MOE_WARPS) as u32, 1);
        self.launch_args(f, grid, 32 * MOE_WARPS as u32, &gate_up, "moe_gate_up");
        let f = self.kernels.moe.down;
        let grid = (e as u32, h.div_ceil(MOE_WARPS) as u32, 1);
        self.launch_args(f, grid, 32 * MOE_WARPS as u32, &down, "moe_down");
        let f = self.kernels.moe.combine;
        let args = [
            Arg::Ptr(ids.ptr),
            Arg::Ptr(weights.ptr),
            Arg::Ptr(y.ptr),
            Arg::Ptr(out.ptr),
            Arg::I32(k as i32),
            Arg::I32(h as i32),
        ];
        self.launch(f, (t as u32, 1, 1), 256, &args, "moe_combine");
        out
    }

    /// An f32 input (a check's activation) as bf16, the dtype of a model's normed input.
    fn moe_to_bf16(&mut self, x: &CudaTensor) -> CudaTensor {
        let out = self.alloc(x.rows, x.cols, DType::Bf16, x.valid_rows);
        if !self.expect(x, DType::F32, "moe_ffn") || !self.ok() {
            return out;
        }
        let n = x.rows * x.cols;
        let args = [Arg::Ptr(x.ptr), Arg::Ptr(out.ptr), Arg::I64(n as i64)];
        let f = self.kernels.moe.to_bf16;
        self.launch(f, Self::grid_for(n), 256, &args, "moe_to_bf16");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expert_args_match_the_kernels_struct() {
        // 256 expert addresses, 4 pointers and 4 ints (kernels/moe.cu MoeExpertArgs): well
        // inside the 4 KB a kernel's parameters may take.
        assert_eq!(
            std::mem::size_of::<MoeExpertArgs>(),
            MOE_MAX_EXPERTS * 8 + 4 * 8 + 4 * 4
        );
        assert!(std::mem::size_of::<MoeExpertArgs>() <= 4096);
        assert_eq!(std::mem::offset_of!(MoeExpertArgs, input), 2048);
        assert_eq!(std::mem::offset_of!(MoeExpertArgs, lists), 2072);
        assert_eq!(std::mem::offset_of!(MoeExpertArgs, tokens), 2080);
        assert_eq!(std::mem::offset_of!(MoeExpertArgs, n_out), 2092);
    }

    #[test]
    fn the_limits_are_the_kernels() {
        let src = include_str!("../../kernels/moe.cu");
        for (name, v) in [
            ("MOE_MAX_EXPERTS", MOE_MAX_EXPERTS),
            ("MOE_MAX_TOP_K", MOE_MAX_TOP_K),
            ("MOE_WARPS", MOE_WARPS),
        ] {
            assert!(
                src.contains(&format!("#define {name} {v}\n")),
                "kernels/moe.cu must define {name} as {v}"
            );
        }
    }

    #[test]
    fn scratch_covers_every_allocation_rounded_as_the_arena_rounds() {
        // Qwen3-30B-A3B's layer at one token: out 8 KiB, bf16 copy 4 KiB, logits 512 B, ids
        // and weights 32 B each (256 B), lists 512 B, counts 512 B, m 24 KiB, y 64 KiB.
        let s = MoeShape {
            experts: 128,
            top_k: 8,
            hidden: 2048,
            inter: 768,
        };
        assert_eq!(
            s.scratch_bytes(1),
            8192 + 4096 + 512 + 256 + 256 + 512 + 512 + 24576 + 65536
        );
        assert!(s.scratch_bytes(8192) >= 8192 * (4 * 2048 + 2 * 2048 + 8 * 4 * (768 + 2048)));
    }
}
