//! Run-time presence checks for the CUDA libraries. cudarc loads them lazily and
//! panics when one is missing; checking first turns that into a clear error.

use anyhow::{bail, Result};

/// Whether one library can be loaded.
type Probe = fn() -> bool;

/// The libraries the backend needs, with what each is for.
const LIBS: &[(&str, Probe)] = &[
    ("libcuda (the NVIDIA driver)", driver_present),
    ("libnvrtc (CUDA run-time compiler)", nvrtc_present),
    ("libcublas (CUDA BLAS)", cublas_present),
];

fn driver_present() -> bool {
    // SAFETY: only dlopen()s candidate names; no symbol is called.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn nvrtc_present() -> bool {
    // SAFETY: as above.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

fn cublas_present() -> bool {
    // SAFETY: as above.
    unsafe { cudarc::cublas::sys::is_culib_present() }
}

/// Fails with a message naming every missing library.
pub fn ensure_cuda_libraries() -> Result<()> {
    let missing: Vec<&str> = LIBS
        .iter()
        .filter(|(_, present)| !present())
        .map(|(name, _)| *name)
        .collect();
    if !missing.is_empty() {
        bail!(
            "--device cuda needs {} but {} not be loaded; install the NVIDIA driver and CUDA 13 libraries (or the PyPI wheels nvidia-cuda-nvrtc and nvidia-cublas) and put their lib directories on LD_LIBRARY_PATH, or use --device cpu",
            missing.join(", "),
            if missing.len() == 1 { "it could" } else { "they could" }
        );
    }
    Ok(())
}

/// Only the compiler is needed to build kernels (CI has no GPU).
pub fn ensure_nvrtc() -> Result<()> {
    if !nvrtc_present() {
        bail!("libnvrtc could not be loaded: pip install nvidia-cuda-nvrtc and put site-packages/nvidia/cu13/lib on LD_LIBRARY_PATH");
    }
    Ok(())
}
