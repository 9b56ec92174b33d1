//! Host side of quantized weights on the GPU: how a [`QuantMatrix`] is laid out on the
//! device, the rule for which kernels can run it, and quantisation at load time
//! (`WRING_CUDA_WEIGHTS`). Pure host code, unit-tested against the CPU formats.
//!
//! Device layouts (what `upload_quantized` keeps resident):
//! - fp8: E4M3 bytes `[rows][cols]` + f32 scale per row (the CPU format as is).
//! - int4: packed codes `[rows][cols/2]` (the CPU format) + f32 scale and f32 zero per
//!   (row, group) (the f16 scale and uint4 zero widened: 8 bytes per group of 128).
//! - nvfp4: packed E2M1 codes `[rows][cols/2]` + E4M3 block scale per (row, 16) + one f32
//!   per row (the tensor's global scale, repeated so that stacked matrices keep theirs).
//! - `smooth` (AWQ): f32 per input column, multiplied into the dequantised weight.
//!
//! int8 is not kept on the device: it is dequantised to bf16 (no W8A16 kernel yet).

use anyhow::{bail, ensure, Result};
use rayon::prelude::*;
use wring_backend::quant::{e4m3_to_f32, QuantData, QuantMatrix, Scheme};
use wring_backend::HostMatrix;

/// A quantized matrix ready for upload.
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceQuant {
    Fp8 {
        q: Vec<u8>,
        scale: Vec<f32>,
    },
    Int4 {
        group: usize,
        q: Vec<u8>,
        scale: Vec<f32>,
        zero: Vec<f32>,
    },
    Nvfp4 {
        q: Vec<u8>,
        block_scale: Vec<u8>,
        row_scale: Vec<f32>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeviceMatrix {
    pub rows: usize,
    pub cols: usize,
    pub data: DeviceQuant,
    pub smooth: Option<Vec<f32>>,
}

impl DeviceMatrix {
    /// The device layout of `m`; None when the backend keeps it as bf16 instead (int8,
    /// or an odd column count).
    pub fn from_quant(m: QuantMatrix) -> Option<Self> {
        if !Self::supports(&m) {
            return None;
        }
        let (rows, cols) = (m.rows, m.cols);
        let data = match m.data {
            QuantData::Int8 { .. } => return None,
            QuantData::Fp8 { q, scale } => DeviceQuant::Fp8 { q, scale },
            QuantData::Int4 {
                group,
                q,
                scale,
                zero,
            } => DeviceQuant::Int4 {
                group,
                q,
                scale: scale.iter().map(|s| s.to_f32()).collect(),
                zero: zero.iter().map(|&z| z as f32).collect(),
            },
            QuantData::Nvfp4 {
                q,
                block_scale,
                global_scale,
            } => DeviceQuant::Nvfp4 {
                q,
                block_scale,
                row_scale: vec![global_scale; rows],
            },
        };
        Some(Self {
            rows,
            cols,
            data,
            smooth: m.smooth,
        })
    }

    /// Whether [`DeviceMatrix::from_quant`] keeps `m` quantized: not int8, not fp8 with
    /// `smooth` (W8A8 cannot fold a per-input multiplier into E4M3 activations exactly),
    /// an even, non-zero number of columns.
    pub fn supports(m: &QuantMatrix) -> bool {
        let shape = m.cols.is_multiple_of(2) && m.rows > 0 && m.cols > 0;
        shape
            && match m.data {
                QuantData::Int8 { .. } => false,
                QuantData::Fp8 { .. } => m.smooth.is_none(),
                _ => true,
            }
    }

    pub fn scheme(&self) -> Scheme {
        match self.data {
            DeviceQuant::Fp8 { .. } => Scheme::Fp8,
            DeviceQuant::Int4 { .. } => Scheme::Int4,
            DeviceQuant::Nvfp4 { .. } => Scheme::Nvfp4,
        }
    }

    /// Bytes resident on the device.
    pub fn nbytes(&self) -> usize {
        let s = self.smooth.as_ref().map_or(0, |s| 4 * s.len());
        s + match &self.data {
            DeviceQuant::Fp8 { q, scale } => q.len() + 4 * scale.len(),
            DeviceQuant::Int4 { q, scale, zero, .. } => q.len() + 4 * (scale.len() + zero.len()),
            DeviceQuant::Nvfp4 {
                q,
                block_scale,
                row_scale,
            } => q.len() + block_scale.len() + 4 * row_scale.len(),
        }
    }

    /// Whether the small-T tensor-core kernel (`qgemm_*`) takes this matrix: 16-row
    /// tiles, 64-column steps, int4 groups that are whole steps.
    pub fn qgemm_ok(&self) -> bool {
        let base = self.rows.is_multiple_of(16) && self.cols.is_multiple_of(64);
        match &self.data {
            DeviceQuant::Fp8 { .. } => false,
            DeviceQuant::Int4 { group, .. } => base && group.is_multiple_of(64),
            DeviceQuant::Nvfp4 { .. } => base,
        }
    }

    /// Row `r` exactly as the dequantising kernels compute it (f32, before the bf16
    /// rounding): the mirror the unit tests hold against the CPU format.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let cols = self.cols;
        match &self.data {
            DeviceQuant::Fp8 { q, scale } => {
                for (c, o) in out.iter_mut().enumerate() {
                    *o = e4m3_to_f32(q[r * cols + c]) * scale[r];
                }
            }
            DeviceQuant::Int4 {
                group,
                q,
                scale,
                zero,
            } => {
                let ng = cols.div_ceil(*group);
                for (c, o) in out.iter_mut().enumerate() {
                    let b = q[r * cols / 2 + c / 2];
                    let code = if c % 2 == 0 { b & 0xF } else { b >> 4 };
                    let g = r * ng + c / group;
                    *o = (code as f32 - zero[g]) * scale[g];
                }
            }
            DeviceQuant::Nvfp4 {
                q,
                block_scale,
                row_scale,
            } => {
                let nb = cols.div_ceil(16);
                for (c, o) in out.iter_mut().enumerate() {
                    let b = q[r * cols / 2 + c / 2];
                    let code = if c % 2 == 0 { b & 0xF } else { b >> 4 };
                    let s = e4m3_to_f32(block_scale[r * nb + c / 16]) * row_scale[r];
                    *o = wring_backend::quant::e2m1_to_f32(code) * s;
                }
            }
        }
        if let Some(sm) = &self.smooth {
            for (o, s) in out.iter_mut().zip(sm) {
                *o *= s;
            }
        }
    }
}

/// The weight scheme of `WRING_CUDA_WEIGHTS`: None keeps bf16.
pub fn parse_weights(v: &str) -> Result<Option<Scheme>> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "bf16" => Ok(None),
        "int8" => bail!(
            "WRING_CUDA_WEIGHTS=int8: the CUDA backend has no int8 kernel (int8 checkpoints load dequantised to bf16); use fp8, int4 or nvfp4"
        ),
        other => match other.parse::<Scheme>() {
            Ok(s) => Ok(Some(s)),
            Err(_) => bail!("WRING_CUDA_WEIGHTS={v:?}: expected bf16, fp8, int4 or nvfp4"),
        },
    }
}

/// Rows per quantisation chunk of a large matrix (chunks run in parallel).
const CHUNK_ROWS: usize = 512;
/// Matrices up to this many values are quantised in one piece.
const ONE_PIECE: usize = 1 << 24;

/// Round-to-nearest quantisation of a dense matrix at load (`WRING_CUDA_WEIGHTS`), in
/// parallel row chunks for large matrices. fp8 and int4 scales are per row, so chunking
/// changes nothing; nvfp4's per-tensor global scale becomes one per chunk of 512 rows for
/// matrices above 2^24 values (the device keeps a scale per row anyway).
pub fn quantize_for_load(scheme: Scheme, m: &HostMatrix) -> Result<DeviceMatrix> {
    ensure!(
        scheme != Scheme::Int8,
        "int8 is not a CUDA weight format (use fp8, int4 or nvfp4)"
    );
    let (rows, cols) = (m.rows, m.cols);
    ensure!(
        m.data.len() == rows * cols,
        "matrix data has {} values, expected {rows}x{cols}",
        m.data.len()
    );
    let one = |r0: usize, r1: usize| -> Result<DeviceMatrix> {
        let q = QuantMatrix::quantize_rtn(
            scheme,
            r1 - r0,
            cols,
            &m.data[r0 * cols..r1 * cols],
            None,
            None,
        )?;
        DeviceMatrix::from_quant(q)
            .ok_or_else(|| anyhow::anyhow!("{scheme} needs an even number of columns, got {cols}"))
    };
    if rows * cols <= ONE_PIECE {
        return one(0, rows);
    }
    let parts: Vec<DeviceMatrix> = (0..rows.div_ceil(CHUNK_ROWS))
        .into_par_iter()
        .map(|i| one(i * CHUNK_ROWS, ((i + 1) * CHUNK_ROWS).min(rows)))
        .collect::<Result<_>>()?;
    stack(parts)
}

/// The rows of `parts` (same scheme, columns and group) in order, as one matrix.
pub fn stack(parts: Vec<DeviceMatrix>) -> Result<DeviceMatrix> {
    ensure!(!parts.is_empty(), "nothing to stack");
    let cols = parts[0].cols;
    let rows = parts.iter().map(|p| p.rows).sum();
    ensure!(
        parts
            .iter()
            .all(|p| p.cols == cols && p.smooth == parts[0].smooth),
        "stacked matrices differ in columns or smoothing"
    );
    let mut it = parts.into_iter();
    let first = it.next().expect("non-empty");
    let smooth = first.smooth.clone();
    let mut data = first.data;
    for p in it {
        match (&mut data, p.data) {
            (DeviceQuant::Fp8 { q, scale }, DeviceQuant::Fp8 { q: q2, scale: s2 }) => {
                q.extend(q2);
                scale.extend(s2);
            }
            (
                DeviceQuant::Int4 {
                    group,
                    q,
                    scale,
                    zero,
                },
                DeviceQuant::Int4 {
                    group: g2,
                    q: q2,
                    scale: s2,
                    zero: z2,
                },
            ) if *group == g2 => {
                q.extend(q2);
                scale.extend(s2);
                zero.extend(z2);
            }
            (
                DeviceQuant::Nvfp4 {
                    q,
                    block_scale,
                    row_scale,
                },
                DeviceQuant::Nvfp4 {
                    q: q2,
                    block_scale: b2,
                    row_scale: r2,
                },
            ) => {
                q.extend(q2);
                block_scale.extend(b2);
                row_scale.extend(r2);
            }
            _ => bail!("stacked matrices differ in scheme or group"),
        }
    }
    Ok(DeviceMatrix {
        rows,
        cols,
        data,
        smooth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rows: usize, cols: usize, seed: usize) -> Vec<f32> {
        (0..rows * cols)
            .map(|i| {
                let h = (i * 7919 + seed * 104729) % 1013;
                (h as f32 / 1013.0 - 0.47) * (1.0 + (i % 11) as f32 * 0.3)
            })
            .collect()
    }

    #[test]
    fn device_layout_dequantises_exactly_like_the_cpu_format() {
        let (rows, cols) = (48, 320); // int4: 3 groups (last of 64); nvfp4: 20 blocks
        let w = sample(rows, cols, 1);
        for scheme in [Scheme::Fp8, Scheme::Int4, Scheme::Nvfp4] {
            for smooth in [
                None,
                Some((0..cols).map(|c| 0.5 + c as f32 / 300.0).collect()),
            ] {
                if scheme == Scheme::Fp8 && smooth.is_some() {
                    continue;
                }
                let q = QuantMatrix::quantize_rtn(scheme, rows, cols, &w, None, smooth).unwrap();
                let d = DeviceMatrix::from_quant(q.clone()).unwrap();
                assert_eq!(d.scheme(), scheme);
                let (mut a, mut b) = (vec![0f32; cols], vec![0f32; cols]);
                for r in 0..rows {
                    q.dequantize_row(r, &mut a);
                    d.dequantize_row(r, &mut b);
                    for c in 0..cols {
                        assert_eq!(a[c].to_bits(), b[c].to_bits(), "{scheme} r{r} c{c}");
                    }
                }
                // Resident bytes: the packed values plus the widened scales.
                let per_value = d.nbytes() as f64 / (rows * cols) as f64;
                let want = match scheme {
                    Scheme::Fp8 => 1.0,
                    _ => 0.5,
                };
                // (48 rows: the smoothing vector alone adds 1/12 byte per value here.)
                assert!(
                    per_value >= want && per_value < want + 0.2,
                    "{scheme}: {per_value}"
                );
            }
        }
        // int8 and odd column counts stay on the bf16 path.
        let q = QuantMatrix::quantize_rtn(Scheme::Int8, 2, 4, &[1.0; 8], None, None).unwrap();
        assert!(DeviceMatrix::from_quant(q).is_none());
    }

    #[test]
    fn qgemm_shape_rule() {
        let mk = |scheme, rows, cols, group| {
            let w = sample(rows, cols, 2);
            DeviceMatrix::from_quant(
                QuantMatrix::quantize_rtn(scheme, rows, cols, &w, group, None).unwrap(),
            )
            .unwrap()
        };
        assert!(mk(Scheme::Int4, 32, 256, None).qgemm_ok());
        assert!(!mk(Scheme::Int4, 32, 256, Some(32)).qgemm_ok()); // group not a 64-step
        assert!(!mk(Scheme::Int4, 24, 256, None).qgemm_ok()); // rows not 16-tiles
        assert!(mk(Scheme::Nvfp4, 16, 576, None).qgemm_ok());
        assert!(!mk(Scheme::Nvfp4, 16, 520, None).qgemm_ok());
        assert!(!mk(Scheme::Fp8, 16, 512, None).qgemm_ok()); // fp8 runs on cuBLASLt
    }

    #[test]
    fn load_quantisation_is_the_rtn_format_and_chunks_stack_exactly() {
        // Small: one piece, identical to QuantMatrix::quantize_rtn.
        let (rows, cols) = (40, 256);
        let w = sample(rows, cols, 3);
        let hm = HostMatrix {
            rows,
            cols,
            data: w.clone(),
        };
        for scheme in [Scheme::Fp8, Scheme::Int4, Scheme::Nvfp4] {
            let d = quantize_for_load(scheme, &hm).unwrap();
            let q = QuantMatrix::quantize_rtn(scheme, rows, cols, &w, None, None).unwrap();
            assert_eq!(d, DeviceMatrix::from_quant(q).unwrap(), "{scheme}");
            // Stacking two halves quantised apart: per-row schemes equal the whole.
            let half = |r0: usize, r1: usize| {
                DeviceMatrix::from_quant(
                    QuantMatrix::quantize_rtn(
                        scheme,
                        r1 - r0,
                        cols,
                        &w[r0 * cols..r1 * cols],
                        None,
                        None,
                    )
                    .unwrap(),
                )
                .unwrap()
            };
            let s = stack(vec![half(0, 16), half(16, rows)]).unwrap();
            assert_eq!(s.rows, rows);
            if scheme != Scheme::Nvfp4 {
                assert_eq!(s, d, "{scheme}");
            } else {
                // nvfp4 keeps each part's own global scale, per row.
                let DeviceQuant::Nvfp4 { row_scale, .. } = &s.data else {
                    panic!()
                };
                assert_eq!(row_scale.len(), rows);
            }
        }
        assert!(quantize_for_load(Scheme::Int8, &hm).is_err());
        assert!(parse_weights("int8").is_err());
        assert!(parse_weights("fp4").is_err());
        assert_eq!(parse_weights("bf16").unwrap(), None);
        assert_eq!(parse_weights(" NVFP4 ").unwrap(), Some(Scheme::Nvfp4));
        assert_eq!(parse_weights("w4a16").unwrap(), Some(Scheme::Int4));
    }
}
