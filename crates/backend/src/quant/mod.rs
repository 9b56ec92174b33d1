//! Quantized weight formats (what `wring quantize` writes and backends run).
//!
//! | scheme  | weights                                   | scales                                          | activations |
//! |---------|-------------------------------------------|-------------------------------------------------|-------------|
//! | `int8`  | int8, symmetric                            | f32 per output row                              | f32 (W8A16) |
//! | `int4`  | uint4 asymmetric, 2 per byte, group 128    | f16 scale + uint4 zero per (row, group)         | f32 (W4A16) |
//! | `fp8`   | FP8 E4M3                                   | f32 per output row                              | E4M3 per token, dynamic scale (W8A8) |
//! | `nvfp4` | FP4 E2M1, 2 per byte                       | E4M3 per block of 16 inputs × one f32 per tensor | f32 (weight-only: no FP4 tensor cores before Blackwell) |
//!
//! Groups run along the input (column) dimension; a last group may be shorter when
//! `cols` is not a multiple of the group. Packed nibbles: column `2i` in the low
//! nibble of byte `i`, `2i+1` in the high nibble. Any matrix may carry `smooth`, a
//! per-input-channel multiplier applied on dequantisation (`int4` with AWQ stores the
//! weight times the activation-aware scale `s`, and `smooth = 1/s`).
//!
//! Every format has an exact [`QuantMatrix::dequantize_row`] and byte-exact parts
//! ([`QuantMatrix::to_parts`] / [`QuantMatrix::from_parts`]) that a checkpoint stores
//! as tensors named `<prefix>.<suffix>`.

pub mod fp;

use anyhow::{bail, ensure, Result};
use half::f16;

pub use fp::{e2m1_to_f32, e4m3_to_f32, f32_to_e2m1, f32_to_e4m3, E2M1_MAX, E4M3_MAX};

/// Default group of `int4` (inputs per scale).
pub const INT4_GROUP: usize = 128;
/// Block of `nvfp4` (inputs per E4M3 scale).
pub const NVFP4_BLOCK: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    Int8,
    Int4,
    Fp8,
    Nvfp4,
}

impl Scheme {
    pub const ALL: [Scheme; 4] = [Scheme::Int8, Scheme::Int4, Scheme::Fp8, Scheme::Nvfp4];

    pub fn name(&self) -> &'static str {
        match self {
            Scheme::Int8 => "int8",
            Scheme::Int4 => "int4",
            Scheme::Fp8 => "fp8",
            Scheme::Nvfp4 => "nvfp4",
        }
    }

    /// Inputs per scale along a row (`None`: one scale per row).
    pub fn default_group(&self) -> Option<usize> {
        match self {
            Scheme::Int8 | Scheme::Fp8 => None,
            Scheme::Int4 => Some(INT4_GROUP),
            Scheme::Nvfp4 => Some(NVFP4_BLOCK),
        }
    }

    /// Weight bits per value, scales excluded.
    pub fn bits(&self) -> usize {
        match self {
            Scheme::Int8 | Scheme::Fp8 => 8,
            Scheme::Int4 | Scheme::Nvfp4 => 4,
        }
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Scheme {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "int8" | "w8a16" => Scheme::Int8,
            "int4" | "w4a16" => Scheme::Int4,
            "fp8" | "w8a8-fp8" => Scheme::Fp8,
            "nvfp4" => Scheme::Nvfp4,
            _ => bail!("unknown quantization scheme {s:?} (int8, int4, fp8, nvfp4)"),
        })
    }
}

/// The stored values of a quantized matrix.
#[derive(Debug, Clone, PartialEq)]
pub enum QuantData {
    /// `w = q · scale[row]`.
    Int8 { q: Vec<i8>, scale: Vec<f32> },
    /// `w = (q − zero[row][g]) · scale[row][g]`, `q`, `zero` in 0..=15.
    Int4 {
        group: usize,
        /// `rows · cols/2` packed bytes.
        q: Vec<u8>,
        /// `rows · groups`.
        scale: Vec<f16>,
        /// `rows · groups`, one per byte.
        zero: Vec<u8>,
    },
    /// `w = e4m3(q) · scale[row]`; activations are quantised to E4M3 per token at run time.
    Fp8 { q: Vec<u8>, scale: Vec<f32> },
    /// `w = e2m1(q) · e4m3(block_scale[row][b]) · global_scale`.
    Nvfp4 {
        /// `rows · cols/2` packed bytes.
        q: Vec<u8>,
        /// `rows · blocks` E4M3 bytes.
        block_scale: Vec<u8>,
        global_scale: f32,
    },
}

/// A quantized weight matrix `[rows=out][cols=in]`.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantMatrix {
    pub rows: usize,
    pub cols: usize,
    pub data: QuantData,
    /// Per-input-channel multiplier applied on dequantisation (AWQ's `1/s`), length `cols`.
    pub smooth: Option<Vec<f32>>,
}

/// Element type of a stored part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartDtype {
    I8,
    U8,
    F16,
    F32,
    F8E4M3,
}

impl PartDtype {
    pub fn size(&self) -> usize {
        match self {
            PartDtype::I8 | PartDtype::U8 | PartDtype::F8E4M3 => 1,
            PartDtype::F16 => 2,
            PartDtype::F32 => 4,
        }
    }
}

/// One stored tensor of a quantized matrix: `<prefix>.<suffix>`, little-endian bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantPart {
    pub suffix: &'static str,
    pub dtype: PartDtype,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

/// Names of the parts a scheme stores (`smooth` is optional for every scheme).
pub fn part_suffixes(scheme: Scheme) -> &'static [&'static str] {
    match scheme {
        Scheme::Int8 | Scheme::Fp8 => &["qweight", "scales"],
        Scheme::Int4 => &["qweight", "scales", "zeros"],
        Scheme::Nvfp4 => &["qweight", "scales", "global_scale"],
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Scale and zero of one asymmetric uint4 group (the range always includes 0, so 0 is exact).
pub fn int4_group_params(x: &[f32]) -> (f16, u8) {
    let (mut lo, mut hi) = (0.0f32, 0.0f32);
    for &v in x {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let scale = f16::from_f32((hi - lo) / 15.0);
    let s = scale.to_f32();
    if s <= 0.0 || !s.is_finite() {
        return (f16::ZERO, 0);
    }
    let zero = (-lo / s).round().clamp(0.0, 15.0) as u8;
    (scale, zero)
}

/// uint4 code of `x` under (`scale`, `zero`), round to nearest.
#[inline]
pub fn int4_encode(x: f32, scale: f32, zero: u8) -> u8 {
    if scale <= 0.0 {
        return zero;
    }
    ((x / scale).round() + zero as f32).clamp(0.0, 15.0) as u8
}

/// The value a uint4 code stands for.
#[inline]
pub fn int4_decode(q: u8, scale: f32, zero: u8) -> f32 {
    (q as f32 - zero as f32) * scale
}

impl QuantMatrix {
    pub fn scheme(&self) -> Scheme {
        match self.data {
            QuantData::Int8 { .. } => Scheme::Int8,
            QuantData::Int4 { .. } => Scheme::Int4,
            QuantData::Fp8 { .. } => Scheme::Fp8,
            QuantData::Nvfp4 { .. } => Scheme::Nvfp4,
        }
    }

    /// Inputs per scale along a row.
    pub fn group_size(&self) -> usize {
        match &self.data {
            QuantData::Int8 { .. } | QuantData::Fp8 { .. } => self.cols,
            QuantData::Int4 { group, .. } => *group,
            QuantData::Nvfp4 { .. } => NVFP4_BLOCK,
        }
    }

    fn groups(&self) -> usize {
        self.cols.div_ceil(self.group_size())
    }

    /// Round-to-nearest quantisation of row-major `data` (`smooth`: see [`QuantMatrix::smooth`];
    /// `data` must then already be multiplied by `1/smooth` per column).
    pub fn quantize_rtn(
        scheme: Scheme,
        rows: usize,
        cols: usize,
        data: &[f32],
        group: Option<usize>,
        smooth: Option<Vec<f32>>,
    ) -> Result<Self> {
        ensure!(
            data.len() == rows * cols,
            "matrix has {} values, expected {rows}x{cols}",
            data.len()
        );
        ensure!(
            data.iter().all(|v| v.is_finite()),
            "matrix has non-finite values"
        );
        if let Some(s) = &smooth {
            ensure!(
                s.len() == cols,
                "smooth has {} values, expected {cols}",
                s.len()
            );
        }
        let row = |r: usize| &data[r * cols..(r + 1) * cols];
        let data = match scheme {
            Scheme::Int8 => {
                let mut q = Vec::with_capacity(rows * cols);
                let mut scale = Vec::with_capacity(rows);
                for r in 0..rows {
                    let x = row(r);
                    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                    let d = amax / 127.0;
                    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
                    q.extend(
                        x.iter()
                            .map(|&v| (v * id).round().clamp(-127.0, 127.0) as i8),
                    );
                    scale.push(d);
                }
                QuantData::Int8 { q, scale }
            }
            Scheme::Fp8 => {
                let mut q = Vec::with_capacity(rows * cols);
                let mut scale = Vec::with_capacity(rows);
                for r in 0..rows {
                    let x = row(r);
                    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                    let d = amax / E4M3_MAX;
                    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
                    q.extend(x.iter().map(|&v| f32_to_e4m3(v * id)));
                    scale.push(d);
                }
                QuantData::Fp8 { q, scale }
            }
            Scheme::Int4 => {
                ensure!(
                    cols.is_multiple_of(2),
                    "int4 needs an even number of columns, got {cols}"
                );
                let group = group.unwrap_or(INT4_GROUP);
                ensure!(
                    group >= 2 && group.is_multiple_of(2),
                    "int4 group {group} must be even"
                );
                let ng = cols.div_ceil(group);
                let mut codes = vec![0u8; rows * cols];
                let mut scale = Vec::with_capacity(rows * ng);
                let mut zero = Vec::with_capacity(rows * ng);
                for r in 0..rows {
                    for g in 0..ng {
                        let (c0, c1) = (g * group, ((g + 1) * group).min(cols));
                        let x = &row(r)[c0..c1];
                        let (s, z) = int4_group_params(x);
                        for (c, &v) in x.iter().enumerate() {
                            codes[r * cols + c0 + c] = int4_encode(v, s.to_f32(), z);
                        }
                        scale.push(s);
                        zero.push(z);
                    }
                }
                QuantData::Int4 {
                    group,
                    q: pack_nibbles(&codes),
                    scale,
                    zero,
                }
            }
            Scheme::Nvfp4 => {
                ensure!(
                    cols.is_multiple_of(2),
                    "nvfp4 needs an even number of columns, got {cols}"
                );
                let nb = cols.div_ceil(NVFP4_BLOCK);
                let amax = data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                // The global scale maps the largest block scale onto E4M3's range.
                let global_scale = if amax > 0.0 {
                    amax / (E4M3_MAX * E2M1_MAX)
                } else {
                    1.0
                };
                let mut codes = vec![0u8; rows * cols];
                let mut block_scale = Vec::with_capacity(rows * nb);
                for r in 0..rows {
                    for b in 0..nb {
                        let (c0, c1) = (b * NVFP4_BLOCK, ((b + 1) * NVFP4_BLOCK).min(cols));
                        let x = &row(r)[c0..c1];
                        let bmax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                        let bs = f32_to_e4m3(bmax / E2M1_MAX / global_scale);
                        let eff = e4m3_to_f32(bs) * global_scale;
                        let inv = if eff > 0.0 { 1.0 / eff } else { 0.0 };
                        for (c, &v) in x.iter().enumerate() {
                            codes[r * cols + c0 + c] = f32_to_e2m1(v * inv);
                        }
                        block_scale.push(bs);
                    }
                }
                QuantData::Nvfp4 {
                    q: pack_nibbles(&codes),
                    block_scale,
                    global_scale,
                }
            }
        };
        Ok(Self {
            rows,
            cols,
            data,
            smooth,
        })
    }

    /// Exact f32 values of row `r` into `out` (length `cols`).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                // SAFETY: the features were detected at run time.
                return unsafe { self.dequantize_row_avx2(r, out) };
            }
        }
        self.dequantize_row_impl(r, out)
    }

    /// The same code compiled with AVX2 enabled, so its loops vectorise 8 wide.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dequantize_row_avx2(&self, r: usize, out: &mut [f32]) {
        self.dequantize_row_impl(r, out)
    }

    #[inline(always)]
    fn dequantize_row_impl(&self, r: usize, out: &mut [f32]) {
        let cols = self.cols;
        debug_assert_eq!(out.len(), cols);
        match &self.data {
            QuantData::Int8 { q, scale } => {
                let s = scale[r];
                for (o, &v) in out.iter_mut().zip(&q[r * cols..(r + 1) * cols]) {
                    *o = v as f32 * s;
                }
            }
            QuantData::Fp8 { q, scale } => {
                let s = scale[r];
                for (o, &v) in out.iter_mut().zip(&q[r * cols..(r + 1) * cols]) {
                    *o = fp::e4m3_to_f32_fast(v) * s;
                }
            }
            QuantData::Int4 {
                group,
                q,
                scale,
                zero,
            } => {
                let ng = cols.div_ceil(*group);
                let qr = &q[r * cols / 2..(r + 1) * cols / 2];
                for g in 0..ng {
                    let (c0, c1) = (g * group, ((g + 1) * group).min(cols));
                    let s = scale[r * ng + g].to_f32();
                    let z = zero[r * ng + g] as f32;
                    for (i, pair) in out[c0..c1].chunks_exact_mut(2).enumerate() {
                        let b = qr[c0 / 2 + i];
                        pair[0] = ((b & 0xF) as f32 - z) * s;
                        pair[1] = ((b >> 4) as f32 - z) * s;
                    }
                }
            }
            QuantData::Nvfp4 {
                q,
                block_scale,
                global_scale,
            } => {
                let nb = cols.div_ceil(NVFP4_BLOCK);
                let qr = &q[r * cols / 2..(r + 1) * cols / 2];
                for b in 0..nb {
                    let (c0, c1) = (b * NVFP4_BLOCK, ((b + 1) * NVFP4_BLOCK).min(cols));
                    let s = e4m3_to_f32(block_scale[r * nb + b]) * global_scale;
                    for (pair, &byte) in out[c0..c1].chunks_exact_mut(2).zip(&qr[c0 / 2..]) {
                        let v = fp::E2M1_PAIRS[byte as usize];
                        pair[0] = v[0] * s;
                        pair[1] = v[1] * s;
                    }
                }
            }
        }
        if let Some(sm) = &self.smooth {
            for (o, s) in out.iter_mut().zip(sm) {
                *o *= s;
            }
        }
    }

    /// The whole matrix dequantised (for backends without kernels for the scheme).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0.0f32; self.rows * self.cols];
        for (r, row) in out.chunks_exact_mut(self.cols.max(1)).enumerate() {
            self.dequantize_row(r, row);
        }
        out
    }

    /// Bytes the stored values take (what a backend holds resident).
    pub fn nbytes(&self) -> usize {
        let s = self.smooth.as_ref().map_or(0, |s| 4 * s.len());
        s + match &self.data {
            QuantData::Int8 { q, scale } => q.len() + 4 * scale.len(),
            QuantData::Fp8 { q, scale } => q.len() + 4 * scale.len(),
            QuantData::Int4 { q, scale, zero, .. } => q.len() + 2 * scale.len() + zero.len(),
            QuantData::Nvfp4 { q, block_scale, .. } => q.len() + block_scale.len() + 4,
        }
    }

    /// The stored tensors (byte-exact; [`QuantMatrix::from_parts`] reads them back).
    pub fn to_parts(&self) -> Vec<QuantPart> {
        let (rows, cols) = (self.rows, self.cols);
        let ng = self.groups();
        let part = |suffix, dtype, shape, bytes| QuantPart {
            suffix,
            dtype,
            shape,
            bytes,
        };
        let mut parts = match &self.data {
            QuantData::Int8 { q, scale } => vec![
                part(
                    "qweight",
                    PartDtype::I8,
                    vec![rows, cols],
                    q.iter().map(|&v| v as u8).collect(),
                ),
                part("scales", PartDtype::F32, vec![rows], f32_bytes(scale)),
            ],
            QuantData::Fp8 { q, scale } => vec![
                part("qweight", PartDtype::F8E4M3, vec![rows, cols], q.clone()),
                part("scales", PartDtype::F32, vec![rows], f32_bytes(scale)),
            ],
            QuantData::Int4 { q, scale, zero, .. } => vec![
                part("qweight", PartDtype::U8, vec![rows, cols / 2], q.clone()),
                part(
                    "scales",
                    PartDtype::F16,
                    vec![rows, ng],
                    scale.iter().flat_map(|s| s.to_le_bytes()).collect(),
                ),
                part("zeros", PartDtype::U8, vec![rows, ng], zero.clone()),
            ],
            QuantData::Nvfp4 {
                q,
                block_scale,
                global_scale,
            } => vec![
                part("qweight", PartDtype::U8, vec![rows, cols / 2], q.clone()),
                part(
                    "scales",
                    PartDtype::F8E4M3,
                    vec![rows, ng],
                    block_scale.clone(),
                ),
                part(
                    "global_scale",
                    PartDtype::F32,
                    vec![1],
                    global_scale.to_le_bytes().to_vec(),
                ),
            ],
        };
        if let Some(s) = &self.smooth {
            parts.push(part("smooth", PartDtype::F32, vec![cols], f32_bytes(s)));
        }
        parts
    }

    /// Reads a matrix back from its parts; `get(suffix)` returns a stored part
    /// (`None` when absent). Errors name the part and what is wrong with it.
    pub fn from_parts<'a>(
        scheme: Scheme,
        rows: usize,
        cols: usize,
        group: Option<usize>,
        get: impl Fn(&str) -> Option<(PartDtype, Vec<usize>, &'a [u8])>,
    ) -> Result<Self> {
        let need = |suffix: &str, dtype: PartDtype, shape: &[usize]| -> Result<&'a [u8]> {
            let (d, s, b) =
                get(suffix).ok_or_else(|| anyhow::anyhow!("part .{suffix} is missing"))?;
            ensure!(
                d == dtype,
                ".{suffix}: dtype {d:?}, expected {dtype:?} for {scheme}"
            );
            ensure!(s == shape, ".{suffix}: shape {s:?}, expected {shape:?}");
            let n: usize = shape.iter().product::<usize>() * dtype.size();
            ensure!(b.len() == n, ".{suffix}: {} bytes, expected {n}", b.len());
            Ok(b)
        };
        let finite = |name: &str, v: &[f32]| -> Result<()> {
            ensure!(
                v.iter().all(|x| x.is_finite()),
                ".{name}: holds non-finite values"
            );
            Ok(())
        };
        let packed = || -> Result<()> {
            ensure!(
                cols.is_multiple_of(2),
                "{scheme} needs an even number of columns, got {cols}"
            );
            Ok(())
        };
        let data = match scheme {
            Scheme::Int8 => {
                let q = need("qweight", PartDtype::I8, &[rows, cols])?;
                let scale = bytes_f32(need("scales", PartDtype::F32, &[rows])?);
                finite("scales", &scale)?;
                ensure!(
                    !q.contains(&0x80),
                    ".qweight: holds -128 (int8 weights are in -127..=127)"
                );
                QuantData::Int8 {
                    q: q.iter().map(|&b| b as i8).collect(),
                    scale,
                }
            }
            Scheme::Fp8 => {
                let q = need("qweight", PartDtype::F8E4M3, &[rows, cols])?;
                let scale = bytes_f32(need("scales", PartDtype::F32, &[rows])?);
                finite("scales", &scale)?;
                ensure!(
                    !q.iter().any(|&b| b & 0x7F == 0x7F),
                    ".qweight: holds E4M3 NaN codes"
                );
                QuantData::Fp8 {
                    q: q.to_vec(),
                    scale,
                }
            }
            Scheme::Int4 => {
                packed()?;
                let group = group.unwrap_or(INT4_GROUP);
                ensure!(
                    group >= 2 && group.is_multiple_of(2),
                    "int4 group {group} must be even"
                );
                let ng = cols.div_ceil(group);
                let q = need("qweight", PartDtype::U8, &[rows, cols / 2])?;
                let scale: Vec<f16> = need("scales", PartDtype::F16, &[rows, ng])?
                    .chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]))
                    .collect();
                ensure!(
                    scale.iter().all(|s| s.is_finite()),
                    ".scales: holds non-finite values"
                );
                let zero = need("zeros", PartDtype::U8, &[rows, ng])?;
                ensure!(zero.iter().all(|&z| z <= 15), ".zeros: values past 15");
                QuantData::Int4 {
                    group,
                    q: q.to_vec(),
                    scale,
                    zero: zero.to_vec(),
                }
            }
            Scheme::Nvfp4 => {
                packed()?;
                let nb = cols.div_ceil(NVFP4_BLOCK);
                let q = need("qweight", PartDtype::U8, &[rows, cols / 2])?;
                let bs = need("scales", PartDtype::F8E4M3, &[rows, nb])?;
                ensure!(
                    !bs.iter().any(|&b| b & 0x7F == 0x7F),
                    ".scales: holds E4M3 NaN codes"
                );
                let gs = bytes_f32(need("global_scale", PartDtype::F32, &[1])?)[0];
                ensure!(gs.is_finite(), ".global_scale: {gs} is not finite");
                QuantData::Nvfp4 {
                    q: q.to_vec(),
                    block_scale: bs.to_vec(),
                    global_scale: gs,
                }
            }
        };
        let smooth = match get("smooth") {
            None => None,
            Some(_) => {
                let s = bytes_f32(need("smooth", PartDtype::F32, &[cols])?);
                finite("smooth", &s)?;
                Some(s)
            }
        };
        Ok(Self {
            rows,
            cols,
            data,
            smooth,
        })
    }
}

/// Codes (0..=15) two per byte, the even index in the low nibble.
pub fn pack_nibbles(codes: &[u8]) -> Vec<u8> {
    codes
        .chunks(2)
        .map(|p| (p[0] & 0xF) | (p.get(1).copied().unwrap_or(0) << 4))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rows: usize, cols: usize) -> Vec<f32> {
        (0..rows * cols)
            .map(|i| (((i * 7919) % 1013) as f32 / 1013.0 - 0.45) * (1.0 + (i % 7) as f32))
            .collect()
    }

    #[test]
    fn tiny_int8_by_hand() {
        let m =
            QuantMatrix::quantize_rtn(Scheme::Int8, 1, 4, &[1.27, -0.635, 0.0, 0.01], None, None)
                .unwrap();
        let QuantData::Int8 { q, scale } = &m.data else {
            panic!()
        };
        assert_eq!(q, &[127, -64, 0, 1]); // -63.5 rounds away from zero
        assert!((scale[0] - 0.01).abs() < 1e-9);
        let mut out = [0.0; 4];
        m.dequantize_row(0, &mut out);
        assert_eq!(out, [127.0 * scale[0], -64.0 * scale[0], 0.0, scale[0]]);
    }

    #[test]
    fn tiny_int4_by_hand() {
        // One group of 4: range [-1, 2] -> scale 0.2, zero round(1/0.2) = 5.
        let m =
            QuantMatrix::quantize_rtn(Scheme::Int4, 1, 4, &[-1.0, 0.0, 0.5, 2.0], Some(4), None)
                .unwrap();
        let QuantData::Int4 { q, scale, zero, .. } = &m.data else {
            panic!()
        };
        let s = f16::from_f32(0.2).to_f32();
        assert_eq!(scale[0].to_f32(), s);
        assert_eq!(zero, &[5]);
        // codes: 0, 5, 5 + round(0.5/s), 15
        let c2 = (0.5 / s).round() as u8 + 5;
        assert_eq!(q, &[5 << 4, c2 | (15 << 4)]);
        let mut out = [0.0; 4];
        m.dequantize_row(0, &mut out);
        assert_eq!(out, [-5.0 * s, 0.0, (c2 as f32 - 5.0) * s, 10.0 * s]);
    }

    #[test]
    fn tiny_fp8_and_nvfp4_by_hand() {
        let m =
            QuantMatrix::quantize_rtn(Scheme::Fp8, 1, 4, &[448.0, -1.0, 1.0625, 0.0], None, None)
                .unwrap();
        let QuantData::Fp8 { q, scale } = &m.data else {
            panic!()
        };
        assert_eq!(scale[0], 1.0);
        assert_eq!(q, &[0x7E, 0xB8, 0x38, 0x00]);
        let mut out = [0.0; 4];
        m.dequantize_row(0, &mut out);
        assert_eq!(out, [448.0, -1.0, 1.0, 0.0]);

        // One block: amax 6 over the tensor -> global 6/(448*6) = 1/448; block scale
        // 6/6*448 = 448 (0x7E) -> effective scale 1: codes are the values themselves.
        let x = [
            6.0, -0.5, 2.4, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0,
        ];
        let m = QuantMatrix::quantize_rtn(Scheme::Nvfp4, 1, 16, &x, None, None).unwrap();
        let QuantData::Nvfp4 {
            q,
            block_scale,
            global_scale,
        } = &m.data
        else {
            panic!()
        };
        assert_eq!(*global_scale, 6.0 / 2688.0);
        assert_eq!(block_scale, &[0x7E]);
        assert_eq!(q[0], 0x7 | (0x9 << 4)); // 6, -0.5
        assert_eq!(q[1], 0x4 | (0x2 << 4)); // 2.4 -> 2, 1
        let mut out = [0.0; 16];
        m.dequantize_row(0, &mut out);
        let s = 448.0 * global_scale;
        assert_eq!(&out[..4], &[6.0 * s, -0.5 * s, 2.0 * s, 1.0 * s]);
        assert_eq!(out[15], 3.0 * s);
    }

    #[test]
    fn parts_round_trip_byte_exactly_and_errors_name_the_part() {
        let (rows, cols) = (5, 200); // int4: a short last group; nvfp4: 13 blocks (last of 8)
        let w = sample(rows, cols);
        for scheme in Scheme::ALL {
            for smooth in [
                None,
                Some((0..cols).map(|c| 1.0 + c as f32 / 100.0).collect()),
            ] {
                let m = QuantMatrix::quantize_rtn(scheme, rows, cols, &w, None, smooth).unwrap();
                let parts = m.to_parts();
                let get = |s: &str| {
                    parts
                        .iter()
                        .find(|p| p.suffix == s)
                        .map(|p| (p.dtype, p.shape.clone(), p.bytes.as_slice()))
                };
                let back = QuantMatrix::from_parts(scheme, rows, cols, None, get).unwrap();
                assert_eq!(back, m, "{scheme}");
                assert_eq!(back.to_parts(), parts);
                // Dequantisation error is bounded by the format's step.
                let d = m.dequantize();
                let sm = m.smooth.clone().unwrap_or(vec![1.0; cols]);
                let err = w
                    .iter()
                    .zip(&d)
                    .enumerate()
                    .map(|(i, (a, b))| (a * sm[i % cols] - b).abs())
                    .fold(0.0f32, f32::max);
                let amax = w.iter().fold(0.0f32, |m, v| m.max(v.abs())) * 3.0;
                let tol = match scheme {
                    Scheme::Int8 => amax / 127.0,
                    Scheme::Int4 => 2.0 * amax / 15.0,
                    Scheme::Fp8 => amax / 8.0,
                    Scheme::Nvfp4 => amax / 3.0,
                };
                assert!(err <= tol, "{scheme}: max error {err} > {tol}");

                // A truncated part is an error naming it.
                let bad = |s: &str| {
                    parts.iter().find(|p| p.suffix == s).map(|p| {
                        let b = if p.suffix == "scales" {
                            &p.bytes[1..]
                        } else {
                            p.bytes.as_slice()
                        };
                        (p.dtype, p.shape.clone(), b)
                    })
                };
                let e = QuantMatrix::from_parts(scheme, rows, cols, None, bad)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains(".scales"), "{e}");
                let e = QuantMatrix::from_parts(scheme, rows + 1, cols, None, get)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains(".qweight") && e.contains("shape"), "{e}");
            }
        }
    }
}
