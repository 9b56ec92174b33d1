//! The backend's tensor types: activations in the arena, weight matrices (bf16 or
//! packed quantized) and f32 weight vectors.

use crate::arena::Block;
use crate::device::DeviceBuffer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    F32,
    Bf16,
}

impl DType {
    pub(super) fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::Bf16 => 2,
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
        }
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
