//! Raw device memory and kernel launches over cudarc's driver bindings. The backend
//! works with plain device addresses so that a captured graph sees fixed pointers and
//! no allocator or event bookkeeping runs inside a captured region.

use anyhow::{Context, Result};
use cudarc::driver::{result, sys};
use std::ffi::c_void;

/// Waits for the legacy default stream, where `cuMemcpyHtoD` and `cuMemsetD8` run. Neither
/// is finished when it returns (a pageable `cuMemcpyHtoD` returns once the data is staged,
/// before its DMA lands; a memset is asynchronous), and the backend's non-blocking stream is
/// not ordered after them, so its next kernel could read the destination half-written
/// (seen in `gpu_check attention`, results/2026-12-02-flash-prefill: the last rows of a 3 MB activation upload
/// were still the previous run's when attention read them).
pub fn wait_legacy_stream() -> Result<(), result::DriverError> {
    // SAFETY: the null stream is the context's legacy default stream.
    unsafe { result::stream::synchronize(std::ptr::null_mut()) }
}

/// A host-to-device copy that has landed when this returns.
///
/// # Safety
/// `dst` must hold `size_of_val(src)` bytes.
pub unsafe fn copy_htod_landed<T: Copy>(dst: u64, src: &[T]) -> Result<(), result::DriverError> {
    result::memcpy_htod_sync(dst, src)?;
    wait_legacy_stream()
}

/// One device allocation, freed on drop.
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
}

// SAFETY: a device address is plain data; every use goes through the owning backend.
unsafe impl Send for DeviceBuffer {}
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    pub fn alloc(bytes: usize, what: &str) -> Result<Self> {
        // SAFETY: the context is current on this thread (CudaBackend binds it first).
        let ptr = unsafe { result::malloc_sync(bytes.max(256)) }.with_context(|| {
            format!("cannot allocate {} MiB on the GPU for {what}", bytes >> 20)
        })?;
        Ok(Self { ptr })
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Sets the first `bytes` bytes to zero; done when this returns ([`wait_legacy_stream`]).
    pub fn zero(&self, bytes: usize) -> Result<()> {
        // SAFETY: the buffer holds at least `bytes` bytes (callers pass its size).
        unsafe { result::memset_d8_sync(self.ptr, 0, bytes) }
            .and_then(|()| wait_legacy_stream())
            .context("cannot clear GPU memory")
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_sync and freed once.
        unsafe {
            let _ = result::free_sync(self.ptr);
        }
    }
}

/// Page-locked host memory for per-step metadata (fast async host→device copies).
pub struct PinnedBuffer {
    ptr: *mut u32,
    len: usize,
}

// SAFETY: owned exclusively by one backend.
unsafe impl Send for PinnedBuffer {}
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    pub fn alloc(len: usize) -> Result<Self> {
        // SAFETY: plain page-locked allocation of len u32s.
        let ptr = unsafe { result::malloc_host(len * 4, 0) }
            .context("cannot allocate page-locked host memory")? as *mut u32;
        Ok(Self { ptr, len })
    }

    pub fn as_mut_slice(&mut self) -> &mut [u32] {
        // SAFETY: ptr holds len u32s for the life of self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub fn as_slice(&self) -> &[u32] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_host and freed once.
        unsafe {
            let _ = result::free_host(self.ptr as *mut c_void);
        }
    }
}

/// A kernel argument, passed by value.
#[derive(Debug, Clone, Copy)]
pub enum Arg {
    Ptr(u64),
    I32(i32),
    I64(i64),
    F32(f32),
}

/// Launches `f` with `params` (pointers to each argument's value). With `pdl`, the launch
/// allows programmatic stream serialization: the kernel may start while the previous one
/// in the stream drains, and waits for it with `griddepcontrol.wait` (every wring kernel
/// does so first, kernels/common.cuh `pdl_entry`). Graph capture records the edge.
pub(crate) fn launch_params(
    f: sys::CUfunction,
    grid: (u32, u32, u32),
    block: u32,
    smem: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
    pdl: bool,
) -> Result<(), result::DriverError> {
    // SAFETY: a zeroed attribute is a valid value of the plain-data union.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: smem,
        hStream: stream,
        attrs: if pdl { &mut attr } else { std::ptr::null_mut() },
        numAttrs: pdl as u32,
    };
    // SAFETY: params point at live values matching the kernel's signature (the typed
    // callers guarantee it); the driver copies them before returning.
    unsafe { sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut()).result() }
}

/// Launches `f` whose one parameter is the C struct that `args` mirrors (`#[repr(C)]`,
/// same fields in the same order), with `smem` bytes of dynamic shared memory (past 48 KB
/// the kernel's limit must have been raised at load: `Kernels::load`).
pub fn launch_struct_smem<T: Copy>(
    f: sys::CUfunction,
    grid: (u32, u32, u32),
    block: u32,
    smem: u32,
    stream: sys::CUstream,
    args: &T,
    pdl: bool,
) -> Result<(), result::DriverError> {
    let mut params = [args as *const T as *mut c_void];
    launch_params(f, grid, block, smem, stream, &mut params, pdl)
}

/// Launches `f` on `stream` with `args` in order.
pub fn launch(
    f: sys::CUfunction,
    grid: (u32, u32, u32),
    block: u32,
    stream: sys::CUstream,
    args: &[Arg],
    pdl: bool,
) -> Result<(), result::DriverError> {
    // Each argument lives in its own 8-byte slot; the driver reads the value's size
    // from the slot's start (little-endian, so 4-byte values sit in the low bytes).
    let mut slots: Vec<u64> = args
        .iter()
        .map(|a| match *a {
            Arg::Ptr(p) => p,
            Arg::I32(v) => v as u32 as u64,
            Arg::I64(v) => v as u64,
            Arg::F32(v) => v.to_bits() as u64,
        })
        .collect();
    let mut params: Vec<*mut c_void> = slots
        .iter_mut()
        .map(|s| s as *mut u64 as *mut c_void)
        .collect();
    launch_params(f, grid, block, 0, stream, &mut params, pdl)
}
