//! Greedy ids on the device: the argmax of each logit row, under structured output with
//! the rows' grammar masks uploaded in one copy and applied inside the same kernel, so a
//! constrained greedy step sends its masks and gets only ids back, never the logits.

use anyhow::anyhow;
use cudarc::driver::result;
use wring_backend::RowMasks;

use super::tensor::DType;
use super::{CudaBackend, CudaTensor};
use crate::device::{Arg, DeviceBuffer};

impl CudaBackend {
    /// The ids of `logits`' valid rows: `argmax_rows`, or with `masks`
    /// `argmax_rows_masked`. Some(empty) after a failure (recorded by `fail`).
    pub(super) fn argmax_launch(
        &mut self,
        logits: &CudaTensor,
        masks: Option<&RowMasks>,
    ) -> Option<Vec<u32>> {
        if !self.expect(logits, DType::F32, "argmax_rows") {
            return Some(vec![]);
        }
        let rows = logits.valid_rows;
        if rows == 0 {
            return Some(vec![]);
        }
        let Some(ids) = &self.ids else {
            self.fail(anyhow!("KV pool not allocated"));
            return Some(vec![]);
        };
        let ids_ptr = ids.ptr();
        match masks.filter(|m| m.any()) {
            None => {
                let args = [
                    Arg::Ptr(logits.ptr),
                    Arg::I32(logits.cols as i32),
                    Arg::Ptr(ids_ptr),
                ];
                self.launch(
                    self.kernels.argmax_rows,
                    (rows as u32, 1, 1),
                    1024,
                    &args,
                    "argmax_rows",
                );
            }
            Some(m) => {
                let Some((table_ptr, words_ptr)) = self.upload_masks(m, rows, logits.cols) else {
                    return Some(vec![]);
                };
                let args = [
                    Arg::Ptr(logits.ptr),
                    Arg::I32(logits.cols as i32),
                    Arg::Ptr(ids_ptr),
                    Arg::Ptr(table_ptr),
                    Arg::Ptr(words_ptr),
                    Arg::I32(m.words_per_row as i32),
                ];
                self.launch(
                    self.kernels.argmax_rows_masked,
                    (rows as u32, 1, 1),
                    1024,
                    &args,
                    "argmax_rows_masked",
                );
            }
        }
        if !self.ok() {
            return Some(vec![]);
        }
        let mut out = vec![0u32; rows];
        let stream = self.cu_stream();
        self.note_enqueued();
        // SAFETY: ids holds max_tokens u32 ≥ rows; synchronised before use.
        let copied = unsafe {
            result::memcpy_dtoh_async(&mut out, ids_ptr, stream)
                .and_then(|_| result::stream::synchronize(stream))
        };
        if let Err(e) = copied {
            self.fail(anyhow!("copying token ids from the GPU failed: {e:?}"));
        }
        Some(out)
    }

    /// Copies the masks' row table and tables to the device (one buffer, grown to the
    /// largest step seen; the copy is ordered on the step's stream before the kernel that
    /// reads it and the step ends synchronised, so the host data outlives it). Returns the
    /// device addresses of the table index and the tables.
    fn upload_masks(&mut self, m: &RowMasks, rows: usize, cols: usize) -> Option<(u64, u64)> {
        if m.row_table.len() < rows || m.words_per_row < cols.div_ceil(32) {
            self.fail(anyhow!(
                "grammar masks cover {} rows of {} ids; the step has {rows} rows of {cols}",
                m.row_table.len(),
                m.words_per_row * 32
            ));
            return None;
        }
        let table_words = rows.next_multiple_of(4);
        let words = table_words + m.words.len();
        if self.masks.as_ref().is_none_or(|(_, cap)| *cap < words) {
            let cap = words.next_power_of_two();
            match DeviceBuffer::alloc(4 * cap, "grammar masks") {
                Ok(buf) => self.masks = Some((buf, cap)),
                Err(e) => {
                    self.fail(e);
                    return None;
                }
            }
        }
        let base = self.masks.as_ref().map(|(b, _)| b.ptr())?;
        let words_ptr = base + 4 * table_words as u64;
        let stream = self.cu_stream();
        // SAFETY: the buffer holds `words` u32; the host slices live until the step's
        // synchronising copy back.
        let copied = unsafe {
            result::memcpy_htod_async(base, &m.row_table[..rows], stream).and_then(|_| {
                if m.words.is_empty() {
                    Ok(())
                } else {
                    result::memcpy_htod_async(words_ptr, &m.words, stream)
                }
            })
        };
        if let Err(e) = copied {
            self.fail(anyhow!("copying grammar masks to the GPU failed: {e:?}"));
            return None;
        }
        Some((base, words_ptr))
    }
}
