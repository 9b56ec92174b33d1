//! Reading part of a weight: a range of its rows or of its columns, from a GGUF file, a
//! safetensors checkpoint (one file or sharded) or dummy values, without materialising
//! the rest. A tensor-parallel rank reads only its shard this way; the whole matrix is
//! the part `Part::All`.

use crate::gguf::GgufFile;
use crate::weights::{dummy_hash, dummy_value, hf_name, SafetensorsSet, Weight, WeightSource};
use anyhow::{anyhow, bail, ensure, Context, Result};
use half::{bf16, f16};
use rayon::prelude::*;
use std::ops::Range;
use wring_backend::HostMatrix;

/// Which part of a `[rows][cols]` matrix to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    All,
    /// Output rows (column-parallel layers, vocabulary shards).
    Rows(Range<usize>),
    /// Input columns (row-parallel layers).
    Cols(Range<usize>),
}

impl Part {
    /// (rows, cols) of this part of a `[rows][cols]` matrix.
    pub fn shape(&self, rows: usize, cols: usize) -> (usize, usize) {
        match self {
            Part::All => (rows, cols),
            Part::Rows(r) => (r.len(), cols),
            Part::Cols(c) => (rows, c.len()),
        }
    }

    fn check(&self, name: &str, rows: usize, cols: usize) -> Result<()> {
        let ok = match self {
            Part::All => true,
            Part::Rows(r) => r.start < r.end && r.end <= rows,
            Part::Cols(c) => c.start < c.end && c.end <= cols,
        };
        ensure!(
            ok,
            "tensor {name}: part {self:?} lies outside [{rows}, {cols}]"
        );
        Ok(())
    }

    /// This part of a row-major `[rows][cols]` f32 matrix.
    fn cut(&self, data: Vec<f32>, cols: usize) -> Vec<f32> {
        match self {
            Part::All => data,
            Part::Rows(r) => data[r.start * cols..r.end * cols].to_vec(),
            Part::Cols(c) => data
                .chunks_exact(cols)
                .flat_map(|row| &row[c.clone()])
                .copied()
                .collect(),
        }
    }
}

impl WeightSource {
    /// Part of a linear weight `[rows=out][cols=in]` as stored: quantized when the
    /// checkpoint holds it quantized and the whole matrix is asked for, else dense f32.
    pub fn weight_part(&self, name: &str, rows: usize, cols: usize, part: &Part) -> Result<Weight> {
        if *part == Part::All {
            return self.weight(name, rows, cols);
        }
        Ok(Weight::Dense(self.matrix_part(name, rows, cols, part)?))
    }

    /// Part of a linear weight `[rows=out][cols=in]` in f32 (quantized weights dequantised).
    pub fn matrix_part(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        part: &Part,
    ) -> Result<HostMatrix> {
        part.check(name, rows, cols)?;
        let data = match self {
            WeightSource::Gguf(g) => gguf_part(g, name, rows, cols, part)?,
            WeightSource::Safetensors(s) => safetensors_part(s, name, rows, cols, part)?,
            WeightSource::Dummy { seed } => {
                dummy_part(*seed, name, rows, cols, part, 1.0 / (cols as f32).sqrt())
            }
        };
        let (rows, cols) = part.shape(rows, cols);
        Ok(HostMatrix { rows, cols, data })
    }

    /// Values `range` of a 1-D parameter of `len` values (a bias of a sharded projection).
    pub fn vector_part(&self, name: &str, len: usize, range: Range<usize>) -> Result<Vec<f32>> {
        if range == (0..len) {
            return self.vector(name, len);
        }
        ensure!(
            range.start < range.end && range.end <= len,
            "tensor {name}: values {range:?} lie outside its {len}"
        );
        match self {
            // Dummy vectors are one row of `len` values: the same numbers, cut.
            WeightSource::Dummy { .. } => Ok(self.vector(name, len)?[range].to_vec()),
            _ => Ok(self
                .matrix_part(name, 1, len, &Part::Cols(range))
                .with_context(|| format!("tensor {name}"))?
                .data),
        }
    }
}

/// Checks every value is finite (a corrupt file otherwise poisons the model silently).
fn finite(name: &str, data: Vec<f32>) -> Result<Vec<f32>> {
    if let Some(i) = data.iter().position(|x| !x.is_finite()) {
        bail!("tensor {name}: value #{i} of the part read is not finite (corrupt file?)");
    }
    Ok(data)
}

fn gguf_part(g: &GgufFile, name: &str, rows: usize, cols: usize, part: &Part) -> Result<Vec<f32>> {
    let t = g.tensor(name)?;
    let flat = t.dims.iter().product::<usize>() == rows * cols;
    // A 1-D tensor (a bias) read as one row.
    ensure!(
        t.dims == [cols, rows] || (rows == 1 && t.dims == [cols] && flat),
        "tensor {name}: shape {:?} in the file, expected [{cols}, {rows}] for this config",
        t.dims
    );
    if *part == Part::All {
        return Ok(g.dequantize(name)?.1);
    }
    let (be, bb) = t.ty.block();
    ensure!(
        cols.is_multiple_of(be),
        "tensor {name}: rows of {cols} values are not whole {be}-value blocks of {:?}",
        t.ty
    );
    let row_bytes = cols / be * bb;
    let raw = g.raw(&t);
    let deq = |bytes: &[u8], n: usize| {
        crate::quant::dequantize(t.ty, bytes, n).with_context(|| format!("tensor {name}"))
    };
    let data = match part {
        Part::All => unreachable!("handled above"),
        Part::Rows(r) => deq(&raw[r.start * row_bytes..r.end * row_bytes], r.len() * cols)?,
        Part::Cols(c) => {
            // Each row: dequantise the blocks the range touches, keep the range.
            let (b0, b1) = (c.start / be, c.end.div_ceil(be));
            let skip = c.start - b0 * be;
            let mut out = vec![0f32; rows * c.len()];
            out.par_chunks_mut(c.len())
                .enumerate()
                .try_for_each(|(row, o)| -> Result<()> {
                    let at = row * row_bytes;
                    let v = deq(&raw[at + b0 * bb..at + b1 * bb], (b1 - b0) * be)?;
                    o.copy_from_slice(&v[skip..skip + c.len()]);
                    Ok(())
                })?;
            out
        }
    };
    finite(name, data)
}

fn safetensors_part(
    s: &SafetensorsSet,
    name: &str,
    rows: usize,
    cols: usize,
    part: &Part,
) -> Result<Vec<f32>> {
    let hf = hf_name(name);
    if let Some(q) = s.quant_matrix(&hf, rows, cols)? {
        // `wring quantize` checkpoints: the parts of a packed matrix do not slice along
        // arbitrary rows/columns, so the matrix is dequantised whole and cut (one matrix
        // at a time: the load's peak memory grows by one dense matrix, not the model).
        return Ok(part.cut(q.dequantize(), cols));
    }
    if let Some(values) = s.fp8_block_values(&hf, rows, cols)? {
        // Block-scaled FP8 likewise.
        return Ok(part.cut(values, cols));
    }
    let (dtype, shape, bytes) = s
        .raw(&hf)?
        .ok_or_else(|| anyhow!("tensor {hf} is missing from the checkpoint"))?;
    ensure!(
        shape == [rows, cols] || (rows == 1 && shape == [cols]),
        "tensor {hf}: shape {shape:?} in the checkpoint, expected [{rows}, {cols}]"
    );
    use safetensors::Dtype;
    let size = match dtype {
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::BF16 => 2,
        d => bail!("tensor {hf} has dtype {d:?}; wring reads F32, F16 and BF16"),
    };
    let convert = |b: &[u8], out: &mut Vec<f32>| match dtype {
        Dtype::F32 => out.extend(
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        Dtype::F16 => out.extend(
            b.chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        _ => out.extend(
            b.chunks_exact(2)
                .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
    };
    let row_bytes = cols * size;
    let (r, c) = match part {
        Part::All => (0..rows, 0..cols),
        Part::Rows(r) => (r.clone(), 0..cols),
        Part::Cols(c) => (0..rows, c.clone()),
    };
    let mut data = Vec::with_capacity(r.len() * c.len());
    for row in r.clone() {
        let at = row * row_bytes;
        convert(&bytes[at + c.start * size..at + c.end * size], &mut data);
    }
    s.release(&bytes[r.start * row_bytes..r.end * row_bytes]);
    Ok(data)
}

/// Dummy values of a part: each value is a function of (tensor name, flat index), so
/// every rank computes its own shard without generating the rest, and a sharded model
/// holds exactly the values of the unsharded one.
fn dummy_part(
    seed: u64,
    name: &str,
    rows: usize,
    cols: usize,
    part: &Part,
    scale: f32,
) -> Vec<f32> {
    let h = dummy_hash(seed, name);
    let (r, c) = match part {
        Part::All => (0..rows, 0..cols),
        Part::Rows(r) => (r.clone(), 0..cols),
        Part::Cols(c) => (0..rows, c.clone()),
    };
    let width = c.len();
    let mut out = vec![0f32; r.len() * width];
    out.par_chunks_mut(width.max(1))
        .enumerate()
        .for_each(|(i, o)| {
            let base = ((r.start + i) * cols + c.start) as u64;
            for (j, x) in o.iter_mut().enumerate() {
                *x = dummy_value(h, base + j as u64, scale);
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_of_dummy_weights_are_cuts_of_the_whole() {
        let src = WeightSource::Dummy { seed: 7 };
        let whole = src.matrix("blk.0.attn_q.weight", 6, 10).unwrap();
        for part in [Part::Rows(2..5), Part::Cols(3..7), Part::Cols(0..10)] {
            let p = src
                .matrix_part("blk.0.attn_q.weight", 6, 10, &part)
                .unwrap();
            assert_eq!(p.data, part.cut(whole.data.clone(), 10), "{part:?}");
            assert_eq!((p.rows, p.cols), part.shape(6, 10));
        }
        let bias = src.vector("blk.0.attn_q.bias", 10).unwrap();
        assert_eq!(
            src.vector_part("blk.0.attn_q.bias", 10, 4..8).unwrap(),
            bias[4..8]
        );
    }

    #[test]
    fn out_of_range_parts_are_errors() {
        let src = WeightSource::Dummy { seed: 0 };
        let e = src
            .matrix_part("x.weight", 4, 4, &Part::Rows(2..6))
            .unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
        assert!(src
            .matrix_part("x.weight", 4, 4, &Part::Cols(3..3))
            .is_err());
    }
}
