//! Dequantisation of GGML block formats to f32 (layouts as documented by ggml).

use crate::ggml_type::GgmlType;
use anyhow::{ensure, Result};
use half::{bf16, f16};
use rayon::prelude::*;

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

pub fn dequantize(ty: GgmlType, raw: &[u8], numel: usize) -> Result<Vec<f32>> {
    let (be, bb) = ty.block();
    ensure!(
        raw.len() == numel / be * bb,
        "{} bytes of data for {numel} elements of {ty:?}",
        raw.len()
    );
    let mut out = vec![0.0f32; numel];
    out.par_chunks_mut(be * 1024)
        .zip(raw.par_chunks(bb * 1024))
        .for_each(|(o, r)| {
            for (ob, rb) in o.chunks_mut(be).zip(r.chunks(bb)) {
                dequant_block(ty, rb, ob);
            }
        });
    Ok(out)
}

fn dequant_block(ty: GgmlType, b: &[u8], y: &mut [f32]) {
    match ty {
        GgmlType::F32 => y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        GgmlType::F16 => y[0] = f16_at(b, 0),
        GgmlType::BF16 => y[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        GgmlType::Q4_0 => {
            let d = f16_at(b, 0);
            for j in 0..16 {
                let q = b[2 + j];
                y[j] = ((q & 0xF) as i32 - 8) as f32 * d;
                y[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
            }
        }
        GgmlType::Q4_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            for j in 0..16 {
                let q = b[4 + j];
                y[j] = (q & 0xF) as f32 * d + m;
                y[j + 16] = (q >> 4) as f32 * d + m;
            }
        }
        GgmlType::Q8_0 => {
            let d = f16_at(b, 0);
            for j in 0..32 {
                y[j] = (b[2 + j] as i8) as f32 * d;
            }
        }
        GgmlType::Q4K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let scales = &b[4..16];
            let qs = &b[16..144];
            for (g, chunk) in y.chunks_mut(64).enumerate() {
                let (sc1, m1) = scale_min_k4(2 * g, scales);
                let (sc2, m2) = scale_min_k4(2 * g + 1, scales);
                let (d1, mm1, d2, mm2) = (
                    d * sc1 as f32,
                    dmin * m1 as f32,
                    d * sc2 as f32,
                    dmin * m2 as f32,
                );
                let q = &qs[32 * g..32 * g + 32];
                for l in 0..32 {
                    chunk[l] = d1 * (q[l] & 0xF) as f32 - mm1;
                    chunk[l + 32] = d2 * (q[l] >> 4) as f32 - mm2;
                }
            }
        }
        GgmlType::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = f16_at(b, 208);
            for n in 0..2 {
                let (ql, qh, sc, y) = (
                    &ql[64 * n..],
                    &qh[32 * n..],
                    &sc[8 * n..],
                    &mut y[128 * n..],
                );
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                    y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                    y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                    y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                }
            }
        }
    }
}

/// The 6-bit scale and min of sub-block `j` in a Q4_K block's 12 packed bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_1_block_by_hand() {
        // d = 0.5, m = -1.0; nibbles: low = j % 16, high = 15 - j % 16
        let mut b = vec![];
        b.extend_from_slice(&f16::from_f32(0.5).to_le_bytes());
        b.extend_from_slice(&f16::from_f32(-1.0).to_le_bytes());
        for j in 0..16u8 {
            b.push(j | ((15 - j) << 4));
        }
        let y = dequantize(GgmlType::Q4_1, &b, 32).unwrap();
        assert_eq!(y[0], -1.0);
        assert_eq!(y[15], 15.0 * 0.5 - 1.0);
        assert_eq!(y[16], 15.0 * 0.5 - 1.0);
        assert_eq!(y[31], -1.0);
    }

    #[test]
    fn q8_0_block_by_hand() {
        let mut b = vec![];
        b.extend_from_slice(&f16::from_f32(0.25).to_le_bytes());
        for j in 0..32i8 {
            b.push((j - 16) as u8);
        }
        let y = dequantize(GgmlType::Q8_0, &b, 32).unwrap();
        assert_eq!(y[0], -4.0);
        assert_eq!(y[31], 15.0 * 0.25);
    }

    #[test]
    fn q4_0_block_by_hand() {
        let mut b = vec![];
        b.extend_from_slice(&f16::from_f32(2.0).to_le_bytes());
        b.extend(std::iter::repeat_n(0x8F_u8, 16));
        let y = dequantize(GgmlType::Q4_0, &b, 32).unwrap();
        assert_eq!(y[0], 14.0); // (15 - 8) * 2
        assert_eq!(y[16], 0.0); // (8 - 8) * 2
    }

    #[test]
    fn wrong_length_is_an_error() {
        assert!(dequantize(GgmlType::Q4_1, &[0u8; 19], 32).is_err());
    }
}
