//! Host <-> device transfers of the backend: weight uploads, result copies, and the copy
//! bandwidth the roofline figures are measured against.

use super::tensor::DType;
use crate::device::{copy_htod_landed, DeviceBuffer};
use anyhow::{anyhow, Result};
use cudarc::driver::{result, sys, CudaContext};

/// Device-to-device copy bandwidth (bytes read + written per second) over `bytes`.
pub fn measure_copy_bandwidth(bytes: usize) -> Result<f64> {
    crate::loader::ensure_cuda_libraries()?;
    let ctx = CudaContext::new(0).map_err(|e| anyhow!("cannot open CUDA device 0: {e:?}"))?;
    ctx.bind_to_thread().map_err(|e| anyhow!("{e:?}"))?;
    let (a, b) = (
        DeviceBuffer::alloc(bytes, "bandwidth test")?,
        DeviceBuffer::alloc(bytes, "bandwidth test")?,
    );
    let copy = || -> Result<()> {
        // SAFETY: both buffers hold `bytes`.
        unsafe { result::memcpy_dtod_sync(b.ptr(), a.ptr(), bytes) }.map_err(|e| anyhow!("{e:?}"))
    };
    // SAFETY: a holds `bytes`; random-ish contents are irrelevant to a copy but zero pages
    // are avoided by writing every byte once.
    unsafe { result::memset_d8_sync(a.ptr(), 0x5a, bytes) }.map_err(|e| anyhow!("{e:?}"))?;
    copy()?;
    let mut times = vec![];
    for _ in 0..10 {
        let t0 = std::time::Instant::now();
        copy()?;
        result::ctx::synchronize().map_err(|e| anyhow!("{e:?}"))?;
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(|x, y| x.total_cmp(y));
    Ok(2.0 * bytes as f64 / times[times.len() / 2])
}

pub(super) fn upload_f32(v: &[f32], what: &str) -> Result<DeviceBuffer> {
    upload_slice(v, what)
}

/// A device copy of `v` (plain values: u8, u16, f32).
pub(super) fn upload_slice<T: Copy>(v: &[T], what: &str) -> Result<DeviceBuffer> {
    let buf = DeviceBuffer::alloc(std::mem::size_of_val(v).max(1), what)?;
    // SAFETY: buf holds size_of_val(v) bytes.
    unsafe { copy_htod_landed(buf.ptr(), v) }
        .map_err(|e| anyhow!("copying {what} to the GPU failed: {e:?}"))?;
    Ok(buf)
}

pub(super) fn to_bf16_bits(data: &[f32]) -> Vec<u16> {
    use rayon::prelude::*;
    data.par_iter()
        .map(|&x| half::bf16::from_f32(x).to_bits())
        .collect()
}

/// Synchronous copy of `n` values of `dtype` at `ptr` into host f32.
pub(super) fn copy_to_host(
    stream: sys::CUstream,
    ptr: u64,
    n: usize,
    dtype: DType,
) -> Result<Vec<f32>> {
    let err = |e| anyhow!("copying results from the GPU failed: {e:?}");
    match dtype {
        DType::F32 => {
            let mut v = vec![0f32; n];
            // SAFETY: ptr holds at least n f32 (tensor shape); synchronised below.
            unsafe {
                result::memcpy_dtoh_async(&mut v, ptr, stream).map_err(err)?;
                result::stream::synchronize(stream).map_err(err)?;
            }
            Ok(v)
        }
        DType::Fp8 => Err(anyhow!(
            "an FP8 GEMM input (E4M3 codes) cannot be copied back as f32 values"
        )),
        DType::Bf16 => {
            let mut v = vec![0u16; n];
            // SAFETY: as above for u16.
            unsafe {
                result::memcpy_dtoh_async(&mut v, ptr, stream).map_err(err)?;
                result::stream::synchronize(stream).map_err(err)?;
            }
            Ok(v.into_iter()
                .map(|b| half::bf16::from_bits(b).to_f32())
                .collect())
        }
    }
}
