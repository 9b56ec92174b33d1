//! NCCL for tensor parallelism, loaded at run time like the rest of CUDA: the binary
//! starts without it, and a missing library is an error naming what to install.
//!
//! Why not cudarc's `nccl` module: cudarc 0.19.10 looks for `libnccl.so`,
//! `libnccl.so.13`, `.so.12`, … `.so.1` but never `libnccl.so.2`, the only file the PyPI
//! wheel `nvidia-nccl-cu13` ships (and the name distributions install), and it panics
//! when no candidate loads; its result enums would also be undefined behaviour for a
//! code its NCCL version does not know. The handful of entry points used here are
//! bound with `libloading` instead, with plain integer results.
//!
//! Where the library is looked for: `WRING_NCCL_LIB` (a path), then `libnccl.so.2` and
//! `libnccl.so` on the loader's path (LD_LIBRARY_PATH, system directories), then the
//! wheel's directory (`site-packages/nvidia/nccl/lib`) beside every `python3` on PATH.
//!
//! Environment, set before NCCL starts: `NCCL_NVLS_ENABLE=0`, always (NVLink multicast
//! can take the GPUs of a shared host out of service; wring never enables it), and
//! `NCCL_RUNTIME_CONNECT=0` unless set (peers connect while the communicators are
//! created, so enqueueing a collective never waits for another rank, and an abort from
//! the coordinator never waits behind one).

use anyhow::{anyhow, bail, Result};
use cudarc::driver::sys::CUstream;
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

type RawComm = *mut c_void;

/// `ncclDataType_t` / `ncclRedOp_t` values (nccl.h, stable since NCCL 2.0).
const NCCL_FLOAT32: c_int = 7;
const NCCL_SUM: c_int = 0;

struct Api {
    get_version: unsafe extern "C" fn(*mut c_int) -> c_int,
    comm_init_all: unsafe extern "C" fn(*mut RawComm, c_int, *const c_int) -> c_int,
    all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        RawComm,
        CUstream,
    ) -> c_int,
    comm_abort: unsafe extern "C" fn(RawComm) -> c_int,
    get_error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    get_last_error: unsafe extern "C" fn(RawComm) -> *const c_char,
    /// Kept loaded for the life of the process (the function pointers point into it).
    _lib: Library,
    path: String,
}

/// Candidate library names and paths, in search order.
fn candidates() -> Vec<PathBuf> {
    let mut c: Vec<PathBuf> = vec![];
    if let Some(p) = std::env::var_os("WRING_NCCL_LIB").filter(|p| !p.is_empty()) {
        c.push(p.into());
    }
    c.push("libnccl.so.2".into());
    c.push("libnccl.so".into());
    // The PyPI wheel beside a Python environment on PATH (bin/python3 →
    // lib/python3.*/site-packages/nvidia/nccl/lib).
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        if !dir.join("python3").exists() {
            continue;
        }
        let Some(prefix) = dir.parent() else { continue };
        let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("python3") {
                for sp in ["site-packages", "dist-packages"] {
                    let lib = e.path().join(sp).join("nvidia/nccl/lib/libnccl.so.2");
                    if lib.exists() {
                        c.push(lib);
                    }
                }
            }
        }
    }
    c
}

fn load() -> Result<Api, String> {
    let tried = candidates();
    let mut errors = vec![];
    for cand in &tried {
        // SAFETY: loading NCCL runs its initialisers, which only set up its own state.
        let lib = match unsafe { Library::new(cand) } {
            Ok(l) => l,
            Err(e) => {
                errors.push(format!("{}: {e}", cand.display()));
                continue;
            }
        };
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is NCCL's C function of this name; the field's type
                // is its signature in nccl.h.
                match unsafe { lib.get($name) } {
                    Ok(f) => *f,
                    Err(e) => {
                        return Err(format!(
                            "{} has no {}: {e} (NCCL 2.x is needed)",
                            cand.display(),
                            String::from_utf8_lossy(&$name[..$name.len() - 1])
                        ))
                    }
                }
            };
        }
        return Ok(Api {
            get_version: sym!(b"ncclGetVersion\0"),
            comm_init_all: sym!(b"ncclCommInitAll\0"),
            all_reduce: sym!(b"ncclAllReduce\0"),
            comm_abort: sym!(b"ncclCommAbort\0"),
            get_error_string: sym!(b"ncclGetErrorString\0"),
            get_last_error: sym!(b"ncclGetLastError\0"),
            path: cand.display().to_string(),
            _lib: lib,
        });
    }
    Err(format!(
        "tensor parallelism on CUDA needs NCCL, but libnccl.so.2 could not be loaded: pip install nvidia-nccl-cu13 and put site-packages/nvidia/nccl/lib on LD_LIBRARY_PATH, or set WRING_NCCL_LIB to the library's path (tried: {})",
        errors.join("; ")
    ))
}

fn api() -> Result<&'static Api> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(|e| anyhow!("{e}"))
}

/// The loaded library's path and version (e.g. 22703 for 2.27.3).
pub fn version() -> Result<(String, i32)> {
    let api = api()?;
    let mut v = 0;
    // SAFETY: writes one int.
    check(
        api,
        unsafe { (api.get_version)(&mut v) },
        None,
        "ncclGetVersion",
    )?;
    Ok((api.path.clone(), v))
}

fn check(api: &Api, code: c_int, comm: Option<RawComm>, what: &str) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    // SAFETY: NCCL returns static NUL-terminated strings (or null).
    let text = |p: *const c_char| unsafe {
        (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
    };
    let name = text(unsafe { (api.get_error_string)(code) }).unwrap_or_default();
    let last = comm
        .and_then(|c| text(unsafe { (api.get_last_error)(c) }))
        .filter(|s| !s.is_empty());
    match last {
        Some(l) => bail!("{what} failed: NCCL error {code} ({name}): {l}"),
        None => bail!("{what} failed: NCCL error {code} ({name})"),
    }
}

/// Sets the NCCL environment described in the module doc (before any NCCL call).
pub fn set_environment() {
    if std::env::var("NCCL_NVLS_ENABLE").is_ok_and(|v| v != "0") {
        tracing::warn!("NCCL_NVLS_ENABLE is set to a value other than 0; wring keeps NVLink multicast off (NCCL_NVLS_ENABLE=0)");
    }
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    if std::env::var_os("NCCL_RUNTIME_CONNECT").is_none() {
        std::env::set_var("NCCL_RUNTIME_CONNECT", "0");
    }
}

/// One rank's communicator. Shared between the rank (which enqueues collectives) and
/// the coordinator (which may abort it from another thread while the rank waits).
pub struct NcclComm {
    api: &'static Api,
    comm: RawComm,
    rank: usize,
    ranks: usize,
    ordinal: usize,
    /// Held while a call into NCCL runs; true once aborted (the handle is then freed).
    aborted: Mutex<bool>,
}

// SAFETY: the raw communicator is only used under `aborted`'s lock (one call at a time,
// never after the abort freed it).
unsafe impl Send for NcclComm {}
unsafe impl Sync for NcclComm {}

impl NcclComm {
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The CUDA device this rank runs on.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Enqueues an in-place sum of `count` f32 at device address `ptr` over the ranks on
    /// `stream` (recorded, not run, while the stream is being captured into a graph).
    ///
    /// # Safety
    /// `ptr` must hold `count` f32 on this communicator's GPU until the sum has run, and
    /// `stream` must be a live stream of that GPU's context.
    pub unsafe fn all_reduce_sum_f32(
        &self,
        ptr: u64,
        count: usize,
        stream: CUstream,
    ) -> Result<()> {
        let aborted = self.aborted.lock().unwrap_or_else(|e| e.into_inner());
        if *aborted {
            bail!("the tensor-parallel group was aborted");
        }
        let p = ptr as *mut c_void;
        // SAFETY: the caller's contract; in-place all-reduce is allowed (send == receive).
        let code = unsafe {
            (self.api.all_reduce)(p, p, count, NCCL_FLOAT32, NCCL_SUM, self.comm, stream)
        };
        check(self.api, code, Some(self.comm), "ncclAllReduce")
    }

    /// Aborts this communicator: collectives in flight on the GPU stop, and every later
    /// call fails. Safe from any thread, any number of times.
    pub fn abort(&self) {
        let mut aborted = self.aborted.lock().unwrap_or_else(|e| e.into_inner());
        if !*aborted {
            *aborted = true;
            // SAFETY: the communicator is live (not aborted before) and no call into
            // NCCL with it runs now (we hold the lock).
            unsafe { (self.api.comm_abort)(self.comm) };
        }
    }
}

impl Drop for NcclComm {
    /// Abort rather than destroy: destroying waits for collectives a failed peer may
    /// never join.
    fn drop(&mut self) {
        self.abort();
    }
}

/// One communicator per GPU in `ordinals` (rank i on GPU `ordinals[i]`), created
/// together by this thread (`ncclCommInitAll`).
pub fn init_group(ordinals: &[usize]) -> Result<Vec<Arc<NcclComm>>> {
    set_environment();
    let api = api()?;
    let n = ordinals.len();
    let devs: Vec<c_int> = ordinals.iter().map(|&o| o as c_int).collect();
    let mut comms: Vec<RawComm> = vec![std::ptr::null_mut(); n];
    // SAFETY: comms has room for n handles; devs lists n device ordinals.
    let code = unsafe { (api.comm_init_all)(comms.as_mut_ptr(), n as c_int, devs.as_ptr()) };
    check(api, code, None, "ncclCommInitAll")?;
    Ok(comms
        .into_iter()
        .enumerate()
        .map(|(rank, comm)| {
            Arc::new(NcclComm {
                api,
                comm,
                rank,
                ranks: n,
                ordinal: ordinals[rank],
                aborted: Mutex::new(false),
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs where the library is installed (it needs no GPU to load and report its
    /// version); elsewhere it checks the error says what to install.
    #[test]
    fn loads_nccl_or_says_how_to_get_it() {
        match version() {
            Ok((path, v)) => {
                assert!(v >= 20000, "{path}: version {v}");
                eprintln!("NCCL {v} from {path}");
            }
            Err(e) => {
                let e = e.to_string();
                assert!(
                    e.contains("nvidia-nccl-cu13") && e.contains("WRING_NCCL_LIB"),
                    "{e}"
                );
            }
        }
    }
}
