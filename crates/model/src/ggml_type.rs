//! GGML tensor element types: what a GGUF file says a tensor holds. Shared by the
//! reader (`gguf.rs`) and the dequantiser (`quant.rs`), which both depend on it.

/// GGML tensor element types wring can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q8_0,
    Q4K,
    Q6K,
}

impl GgmlType {
    pub(crate) fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            8 => Self::Q8_0,
            12 => Self::Q4K,
            14 => Self::Q6K,
            30 => Self::BF16,
            _ => return None,
        })
    }
    /// The type's id in a GGUF file (what [`GgmlType::from_id`] reads).
    pub fn id(&self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q8_0 => 8,
            Self::Q4K => 12,
            Self::Q6K => 14,
            Self::BF16 => 30,
        }
    }
    /// (elements per block, bytes per block)
    pub fn block(&self) -> (usize, usize) {
        match self {
            Self::F32 => (1, 4),
            Self::F16 | Self::BF16 => (1, 2),
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q8_0 => (32, 34),
            Self::Q4K => (256, 144),
            Self::Q6K => (256, 210),
        }
    }
}

pub(crate) fn ggml_type_name(id: u32) -> &'static str {
    match id {
        6 => "Q5_0",
        7 => "Q5_1",
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        13 => "Q5_K",
        15 => "Q8_K",
        16..=23 => "IQ*",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        _ => "unknown",
    }
}
