//! Linears over quantized weights (see `crate::qweights` for the formats): FP8 W8A8
//! through cuBLASLt, the small-T int4/NVFP4 tensor-core kernel, and the dequantise-a-tile
//! + cuBLAS path for everything else.

use super::tensor::{CudaMatrix, CudaTensor, DType, Fp8Rescale, Weights};
use super::{upload_slice, CudaBackend};
use crate::blaslt::{fp8_pad_tokens, fp8_shape_ok, BlasLt};
use crate::device::{Arg, DeviceBuffer};
use crate::gemm::Gemm;
use crate::qweights::{DeviceMatrix, DeviceQuant};
use anyhow::{anyhow, Result};

/// Rows of a quantized matrix dequantised per tile of the bf16 scratch (≤ 64 MiB).
pub(super) const SCRATCH_CAP: usize = 64 << 20;

pub(super) fn tile_rows(rows: usize, cols: usize) -> usize {
    ((SCRATCH_CAP / (2 * cols.max(1))) / 16 * 16).clamp(16, rows.max(16))
}

impl CudaBackend {
    pub(super) fn upload_device(&mut self, d: DeviceMatrix) -> Result<CudaMatrix> {
        let (rows, cols) = (d.rows, d.cols);
        self.weight_bytes += d.nbytes();
        let qgemm = d.qgemm_ok();
        let smooth = |s: &Option<Vec<f32>>| -> Result<Option<DeviceBuffer>> {
            s.as_ref().map(|v| upload_slice(v, "weights")).transpose()
        };
        let w = match &d.data {
            DeviceQuant::Fp8 { q, scale } => {
                if !self.lt_tried {
                    self.lt_tried = true;
                    if self.arch >= (8, 9) {
                        match BlasLt::new() {
                            Ok(lt) => self.lt = Some(lt),
                            Err(e) => tracing::warn!("FP8 weights run dequantised to bf16: {e:#}"),
                        }
                    } else {
                        tracing::warn!(
                            "FP8 weights run dequantised to bf16: sm_{}{} has no FP8 tensor cores (sm_89+)",
                            self.arch.0,
                            self.arch.1
                        );
                    }
                }
                Weights::Fp8 {
                    q: upload_slice(q, "weights")?,
                    scale: upload_slice(scale, "weights")?,
                }
            }
            DeviceQuant::Int4 {
                group,
                q,
                scale,
                zero,
            } => Weights::Int4 {
                q: upload_slice(q, "weights")?,
                scale: upload_slice(scale, "weights")?,
                zero: upload_slice(zero, "weights")?,
                group: *group,
                smooth: smooth(&d.smooth)?,
                qgemm,
            },
            DeviceQuant::Nvfp4 {
                q,
                block_scale,
                row_scale,
            } => Weights::Nvfp4 {
                q: upload_slice(q, "weights")?,
                block_scale: upload_slice(block_scale, "weights")?,
                row_scale: upload_slice(row_scale, "weights")?,
                smooth: smooth(&d.smooth)?,
                qgemm,
            },
        };
        // Every quantized matrix may take the dequantising path (large steps, or FP8
        // shapes cuBLASLt does not take): the scratch holds its largest tile.
        self.scratch_bytes = self.scratch_bytes.max(tile_rows(rows, cols) * cols * 2);
        // Layers of 4-bit weights keep their own gemv bound (small_step.rs).
        self.small.four_bit_layers |= matches!(w, Weights::Int4 { .. } | Weights::Nvfp4 { .. });
        Ok(CudaMatrix { w, rows, cols })
    }

    /// `x · Wᵀ` into a new f32 tensor for a quantized `w` (shapes already checked).
    pub(super) fn quant_linear(&mut self, x: &CudaTensor, w: &CudaMatrix) -> CudaTensor {
        let t = x.rows;
        match &w.w {
            Weights::Fp8 { q, scale } if fp8_shape_ok(w.cols, w.rows) => {
                let tp = fp8_pad_tokens(t);
                let supported = self
                    .lt
                    .as_mut()
                    .is_some_and(|lt| lt.supports(tp, w.cols, w.rows));
                if supported {
                    let out = self.fp8_linear(x, w, q.ptr(), scale.ptr());
                    self.settle(&out);
                    return out;
                }
            }
            Weights::Int4 { qgemm: true, .. } | Weights::Nvfp4 { qgemm: true, .. }
                if t <= self.opts.qgemm_max_t =>
            {
                return self.qgemm(x, w);
            }
            _ => {}
        }
        self.dequant_linear(x, w)
    }

    /// FP8 W8A8: E4M3 activations (`x` as its producer wrote them, or bf16 `x` quantised
    /// here per token), the cuBLASLt E4M3 GEMM, and the per-token × per-channel rescale
    /// left pending on the output (`Fp8Rescale`): its reader applies it (`fp8.rs`).
    pub(super) fn fp8_linear(
        &mut self,
        x: &CudaTensor,
        w: &CudaMatrix,
        wq: u64,
        ws: u64,
    ) -> CudaTensor {
        let (t, k, n) = (x.rows, w.cols, w.rows);
        let tp = fp8_pad_tokens(t);
        let quantised;
        let xq = if x.dtype == DType::Fp8 {
            x
        } else {
            // E4M3 bytes [tp][k] (k is a multiple of 16) and one f32 scale per token.
            quantised = self.alloc_fp8(t, k);
            if !self.ok() {
                return CudaTensor::empty();
            }
            let args = [
                Arg::Ptr(x.ptr),
                Arg::Ptr(quantised.ptr),
                Arg::Ptr(quantised.aux_ptr()),
                Arg::I32(t as i32),
                Arg::I32(k as i32),
            ];
            self.launch(
                self.kernels.fp8_quantize_rows,
                (tp as u32, 1, 1),
                256,
                &args,
                "fp8_quantize_rows",
            );
            &quantised
        };
        let mut out = self.alloc(tp, n, DType::F32, x.valid_rows);
        if !self.ok() {
            return CudaTensor::empty();
        }
        out.rows = t;
        let stream = self.cu_stream();
        let Some(lt) = self.lt.as_mut() else {
            self.fail(anyhow!("FP8 GEMM without cuBLASLt"));
            return out;
        };
        if let Err(e) = lt.fp8_linear(stream, xq.ptr, wq, out.ptr, tp, k, n) {
            self.fail(e);
            return out;
        }
        // The scales stay alive with the output until its rescale has run.
        out.aux = xq.aux.clone();
        out.pending.set(Some(Fp8Rescale {
            xs: xq.aux_ptr(),
            ws,
        }));
        out
    }

    /// int4 / NVFP4 weights, small steps: the tensor-core kernel that dequantises in
    /// registers; split-K partial sums are added in a fixed order (no atomics).
    fn qgemm(&mut self, x: &CudaTensor, w: &CudaMatrix) -> CudaTensor {
        let (t, k, n) = (x.rows, w.cols, w.rows);
        let tiles = n / 16;
        let steps = k / 64;
        // Enough warps to keep HBM busy (~2048), at least 4 steps of 64 columns each.
        let splits = (2048 / tiles.max(1)).clamp(1, (steps / 4).max(1));
        let per = steps.div_ceil(splits) * 64;
        let splits = k.div_ceil(per);
        let out = self.alloc(t, n, DType::F32, x.valid_rows);
        let part = if splits > 1 {
            self.alloc(splits * t, n, DType::F32, splits * t)
        } else {
            CudaTensor::empty()
        };
        if !self.ok() {
            return out;
        }
        let dst = if splits > 1 { part.ptr } else { out.ptr };
        let which = if t <= 8 {
            0
        } else if t <= 16 {
            1
        } else {
            2
        };
        let grid = (tiles.div_ceil(4) as u32, splits as u32, 1);
        let opt = |s: &Option<DeviceBuffer>| s.as_ref().map_or(0, |b| b.ptr());
        match &w.w {
            Weights::Int4 {
                q,
                scale,
                zero,
                group,
                smooth,
                ..
            } => {
                let args = [
                    Arg::Ptr(q.ptr()),
                    Arg::Ptr(scale.ptr()),
                    Arg::Ptr(zero.ptr()),
                    Arg::Ptr(opt(smooth)),
                    Arg::Ptr(x.ptr),
                    Arg::Ptr(dst),
                    Arg::I32(n as i32),
                    Arg::I32(k as i32),
                    Arg::I32(t as i32),
                    Arg::I32(per as i32),
                    Arg::I32(*group as i32),
                ];
                self.launch(
                    self.kernels.qgemm_int4[which],
                    grid,
                    128,
                    &args,
                    "qgemm_int4",
                );
            }
            Weights::Nvfp4 {
                q,
                block_scale,
                row_scale,
                smooth,
                ..
            } => {
                let args = [
                    Arg::Ptr(q.ptr()),
                    Arg::Ptr(block_scale.ptr()),
                    Arg::Ptr(row_scale.ptr()),
                    Arg::Ptr(opt(smooth)),
                    Arg::Ptr(x.ptr),
                    Arg::Ptr(dst),
                    Arg::I32(n as i32),
                    Arg::I32(k as i32),
                    Arg::I32(t as i32),
                    Arg::I32(per as i32),
                ];
                self.launch(
                    self.kernels.qgemm_nvfp4[which],
                    grid,
                    128,
                    &args,
                    "qgemm_nvfp4",
                );
            }
            _ => self.fail(anyhow!("qgemm: not an int4 or nvfp4 matrix")),
        }
        if splits > 1 {
            let total = t * n;
            let args = [
                Arg::Ptr(part.ptr),
                Arg::Ptr(out.ptr),
                Arg::I32(splits as i32),
                Arg::I64(total as i64),
            ];
            self.launch(
                self.kernels.sum_splits,
                Self::grid_for(total),
                256,
                &args,
                "sum_splits",
            );
        }
        drop(part);
        out
    }

    /// Any quantized weight, any step: dequantise tiles of rows into the bf16 scratch and
    /// run each tile through cuBLAS into its columns of the output.
    fn dequant_linear(&mut self, x: &CudaTensor, w: &CudaMatrix) -> CudaTensor {
        let (t, k, n) = (x.rows, w.cols, w.rows);
        let out = self.alloc(t, n, DType::F32, x.valid_rows);
        let Some(scratch) = self.scratch.as_ref().map(|b| b.ptr()) else {
            self.fail(anyhow!(
                "quantized linear before the KV pool (and the dequantisation scratch) was allocated"
            ));
            return out;
        };
        let tile = tile_rows(n, k);
        let opt = |s: &Option<DeviceBuffer>| s.as_ref().map_or(0, |b| b.ptr());
        for r0 in (0..n).step_by(tile) {
            if !self.ok() {
                break;
            }
            let nr = tile.min(n - r0);
            let (f, args, what) = match &w.w {
                Weights::Fp8 { q, scale } => (
                    self.kernels.dequant_fp8_bf16,
                    vec![
                        Arg::Ptr(q.ptr()),
                        Arg::Ptr(scale.ptr()),
                        Arg::Ptr(scratch),
                        Arg::I32(r0 as i32),
                        Arg::I32(k as i32),
                        Arg::I64((nr * k) as i64),
                    ],
                    "dequant_fp8_bf16",
                ),
                Weights::Int4 {
                    q,
                    scale,
                    zero,
                    group,
                    smooth,
                    ..
                } => (
                    self.kernels.dequant_int4_bf16,
                    vec![
                        Arg::Ptr(q.ptr()),
                        Arg::Ptr(scale.ptr()),
                        Arg::Ptr(zero.ptr()),
                        Arg::Ptr(opt(smooth)),
                        Arg::Ptr(scratch),
                        Arg::I32(r0 as i32),
                        Arg::I32(k as i32),
                        Arg::I32(*group as i32),
                        Arg::I64((nr * k / 2) as i64),
                    ],
                    "dequant_int4_bf16",
                ),
                Weights::Nvfp4 {
                    q,
                    block_scale,
                    row_scale,
                    smooth,
                    ..
                } => (
                    self.kernels.dequant_nvfp4_bf16,
                    vec![
                        Arg::Ptr(q.ptr()),
                        Arg::Ptr(block_scale.ptr()),
                        Arg::Ptr(row_scale.ptr()),
                        Arg::Ptr(opt(smooth)),
                        Arg::Ptr(scratch),
                        Arg::I32(r0 as i32),
                        Arg::I32(k as i32),
                        Arg::I64((nr * k / 2) as i64),
                    ],
                    "dequant_nvfp4_bf16",
                ),
                Weights::Bf16(_) => {
                    self.fail(anyhow!("dequant_linear on a bf16 matrix"));
                    break;
                }
            };
            let items = if what == "dequant_fp8_bf16" {
                nr * k
            } else {
                nr * k / 2
            };
            self.launch(f, Self::grid_for(items), 256, &args, what);
            if !self.ok() {
                break;
            }
            let y = out.ptr + 4 * r0 as u64;
            let tile = Gemm {
                x: x.ptr,
                w: scratch,
                y,
                tokens: t,
                n_in: k,
                n_out: nr,
            };
            self.persistent_flush();
            if let Err(e) = self.blas.linear_ld(tile, n) {
                self.fail(e);
            }
        }
        out
    }
}
