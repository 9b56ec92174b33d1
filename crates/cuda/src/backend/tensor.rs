//! The backend's tensor types: activations in the arena, weight matrices (bf16 or
//! packed quantized) and f32 weight vectors.

use crate::arena::Block;
use crate::device::DeviceBuffer;
use std::cell::Cell;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    F32,
    Bf16,
    /// E4M3 codes `[fp8_pad_tokens(rows)][cols]` (rows past `rows` are GEMM padding,
    /// never read back) with one f32 scale per token in `aux`: an FP8 GEMM's input.
    Fp8,
}

impl DType {
    pub(super) fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::Bf16 => 2,
            DType::Fp8 => 1,
        }
    }
}

/// An activation in the arena. `valid_rows` ≤ `rows`: padded rows are computed but
/// never returned to the host.
pub struct CudaTensor {
    pub(super) _block: Option<Block>,
    pub(super) ptr: u64,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) valid_rows: usize,
    pub(super) dtype: DType,
    /// Per-token f32 scales: of the codes (`Fp8`), or the ones a pending rescale reads.
    /// Shared, so the scales outlive the FP8 input tensor until the rescale has run.
    pub(super) aux: Option<Arc<Block>>,
    /// An FP8 GEMM's output not yet multiplied by its scales: the op that reads it next
    /// applies them (fused, or `CudaBackend::settle`).
    pub(super) pending: Cell<Option<Fp8Rescale>>,
}

/// `y[t][o] · (xs[t] · ws[o])` still to be applied to an f32 tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fp8Rescale {
    /// Per-token scales (device pointer).
    pub xs: u64,
    /// Per-output-channel weight scales (device pointer).
    pub ws: u64,
}

impl CudaTensor {
    pub(super) fn empty() -> Self {
        Self {
            _block: None,
            ptr: 0,
            rows: 0,
            cols: 0,
            valid_rows: 0,
            dtype: DType::F32,
            aux: None,
            pending: Cell::new(None),
        }
    }

    /// Device pointer of the per-token scales (0 when there are none).
    pub(super) fn aux_ptr(&self) -> u64 {
        self.aux.as_ref().map_or(0, |b| b.ptr)
    }
}

/// A weight matrix `[rows=out][cols=in]`: bf16, or quantized (see [`crate::qweights`]).
pub struct CudaMatrix {
    pub(super) w: Weights,
    pub(super) rows: usize,
    pub(super) cols: usize,
}

pub(super) enum Weights {
    Bf16(DeviceBuffer),
    Fp8 {
        q: DeviceBuffer,
        scale: DeviceBuffer,
    },
    Int4 {
        q: DeviceBuffer,
        scale: DeviceBuffer,
        zero: DeviceBuffer,
        group: usize,
        smooth: Option<DeviceBuffer>,
        qgemm: bool,
    },
    Nvfp4 {
        q: DeviceBuffer,
        block_scale: DeviceBuffer,
        row_scale: DeviceBuffer,
        smooth: Option<DeviceBuffer>,
        qgemm: bool,
    },
}

impl CudaMatrix {
    /// The storage scheme: "bf16", "fp8", "int4" or "nvfp4".
    pub fn scheme(&self) -> &'static str {
        match self.w {
            Weights::Bf16(_) => "bf16",
            Weights::Fp8 { .. } => "fp8",
            Weights::Int4 { .. } => "int4",
            Weights::Nvfp4 { .. } => "nvfp4",
        }
    }
}

/// An f32 weight vector (norm gains, biases).
pub struct CudaVector {
    pub(super) buf: DeviceBuffer,
    pub(super) len: usize,
}
