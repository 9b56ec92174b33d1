//! Kernel sources (crates/cuda/kernels/*.cu), compiled to PTX by NVRTC at run time and
//! cached on disk under `$WRING_HOME/kernels`, keyed by a hash of source and target.

use crate::params::{GemvEpilogue, GemvFormat, GEMV_BUCKETS, GEMV_MULTI_BUCKETS};
use anyhow::{anyhow, Context, Result};
use cudarc::driver::{result, sys};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use sha2::{Digest, Sha256};
use std::ffi::CString;
use std::path::PathBuf;

const COMMON: &str = include_str!("../kernels/common.cuh");

/// Every kernel source file, by name.
pub const SOURCES: &[(&str, &str)] = &[
    ("embed.cu", include_str!("../kernels/embed.cu")),
    (
        "norm.cu",
        concat!(
            include_str!("../kernels/fp8.cuh"),
            include_str!("../kernels/norm.cu")
        ),
    ),
    (
        "elementwise.cu",
        concat!(
            include_str!("../kernels/fp8.cuh"),
            include_str!("../kernels/elementwise.cu")
        ),
    ),
    ("rope.cu", include_str!("../kernels/rope.cu")),
    (
        "attention/paged.cu",
        concat!(
            include_str!("../kernels/attention/args.cuh"),
            include_str!("../kernels/attention/paged.cu")
        ),
    ),
    (
        "attention/mma.cu",
        concat!(
            include_str!("../kernels/attention/args.cuh"),
            include_str!("../kernels/attention/mma.cu"),
            include_str!("../kernels/attention/mma_entries.cu"),
            include_str!("../kernels/attention/flash.cu")
        ),
    ),
    ("sampling.cu", include_str!("../kernels/sampling.cu")),
    (
        "quant_gemm.cu",
        concat!(
            include_str!("../kernels/fp_formats.cuh"),
            include_str!("../kernels/fp8.cuh"),
            include_str!("../kernels/quant_gemm.cu")
        ),
    ),
    (
        "gemv.cu",
        concat!(
            include_str!("../kernels/fp_formats.cuh"),
            include_str!("../kernels/gemv.cu"),
            include_str!("../kernels/gemv_entries.cu"),
            include_str!("../kernels/gemv_multi.cu")
        ),
    ),
    (
        "persistent.cu",
        concat!(
            "#define WRING_PERSISTENT\n",
            include_str!("../kernels/fp_formats.cuh"),
            include_str!("../kernels/gemv.cu"),
            include_str!("../kernels/attention/args.cuh"),
            include_str!("../kernels/attention/mma.cu"),
            include_str!("../kernels/persistent.cu")
        ),
    ),
    (
        "tensor_parallel.cu",
        include_str!("../kernels/tensor_parallel.cu"),
    ),
    ("moe.cu", include_str!("../kernels/moe.cu")),
];

/// Compiles one source to PTX for `compute_{major}{minor}`, or errors with NVRTC's log.
pub fn compile(name: &str, src: &str, arch: (i32, i32)) -> Result<String> {
    let opts = CompileOptions {
        name: Some(name.to_string()),
        options: vec![
            format!("--gpu-architecture=compute_{}{}", arch.0, arch.1),
            "--std=c++17".into(),
        ],
        ..Default::default()
    };
    let full = format!("{COMMON}\n#line 1 \"{name}\"\n{src}");
    let ptx = compile_ptx_with_opts(full, opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => {
            anyhow!("NVRTC failed on {name}:\n{}", log.to_string_lossy())
        }
        other => anyhow!("NVRTC failed on {name}: {other:?}"),
    })?;
    Ok(ptx.to_src())
}

fn cache_dir() -> PathBuf {
    let home = std::env::var_os("WRING_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| ".".into()))
                .join(".cache/wring")
        });
    home.join("kernels")
}

/// PTX for `src`, from the disk cache when present (a broken cache entry is rebuilt).
fn cached_ptx(name: &str, src: &str, arch: (i32, i32)) -> Result<String> {
    let mut h = Sha256::new();
    h.update(COMMON.as_bytes());
    h.update(src.as_bytes());
    h.update(format!("{arch:?}").as_bytes());
    let key: String = h
        .finalize()
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = cache_dir().join(format!(
        "{}-sm{}{}-{key}.ptx",
        name.trim_end_matches(".cu").replace('/', "_"),
        arch.0,
        arch.1
    ));
    // Tensor-parallel ranks load kernels from several threads at once: one compiles,
    // the others then read its cache entry.
    static COMPILING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = COMPILING.lock().unwrap_or_else(|e| e.into_inner());
    if let Ok(ptx) = std::fs::read_to_string(&path) {
        if ptx.contains(".entry") {
            return Ok(ptx);
        }
    }
    let ptx = compile(name, src, arch)?;
    // The cache is an optimisation: failing to write it is not an error.
    if std::fs::create_dir_all(cache_dir()).is_ok() {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &ptx).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok(ptx)
}

/// The op kind of decode attention in the persistent kernel (kernels/persistent.cu
/// `PK_ATTENTION`; a gemv's kind is its `GemvEpilogue` number).
pub(crate) const PERSISTENT_ATTENTION_KIND: i32 = 3;

/// Head dimensions the persistent step kernel is built for.
const PERSISTENT_HEAD_DIMS: [usize; 2] = [64, 128];

/// The attention build the persistent kernel runs for `head_dim` (kernels/persistent.cu
/// `PK_MMA_BUILD`: the default's, prefetching for 64 and serial for 128).
pub(crate) fn persistent_attention_build(head_dim: usize) -> Option<MmaBuild> {
    match head_dim {
        64 => Some(MmaBuild::Prefetch),
        128 => Some(MmaBuild::Serial),
        _ => None,
    }
}

/// How `attention_mma` gets each warp's K/V tiles (kernels/attention/mma.cu `MMA_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MmaBuild {
    /// The next tile loaded into registers while this one is computed.
    Prefetch,
    /// Each tile's loads waited for before its math.
    Serial,
    /// cp.async into a ring of tiles per warp in dynamic shared memory.
    Staged,
}

impl MmaBuild {
    const ALL: [Self; 3] = [Self::Prefetch, Self::Serial, Self::Staged];

    fn kernel(self) -> &'static str {
        match self {
            Self::Prefetch => "attention_mma",
            Self::Serial => "attention_mma_serial",
            Self::Staged => "attention_mma_staged",
        }
    }
}

/// Handles of every kernel the backend launches.
pub struct Kernels {
    pub embed_rows: sys::CUfunction,
    pub rms_norm: sys::CUfunction,
    pub add_rms_norm: sys::CUfunction,
    /// `add_rms_norm` holding rows of up to 4·256, 8·256, 16·256 and 32·256 columns in
    /// registers (blocks of 256 threads).
    pub add_rms_norm_regs: [(usize, sys::CUfunction); 4],
    pub add_f32: sys::CUfunction,
    pub add_bias_f32: sys::CUfunction,
    pub silu_mul: sys::CUfunction,
    pub silu_mul_fused: sys::CUfunction,
    pub gather_rows: sys::CUfunction,
    pub rope: sys::CUfunction,
    pub head_rms_norm: sys::CUfunction,
    pub rope_split_qkv: sys::CUfunction,
    /// `rope_split_qkv` over an FP8 GEMM's unscaled output (per-token x per-channel scales).
    pub rope_split_qkv_fp8: sys::CUfunction,
    /// SiLU·mul of gate|up rows straight to bf16 or E4M3 + per-token scale, optionally
    /// rescaling an FP8 GEMM's output: rows of up to 4·1024, 8·1024, 16·1024 values in
    /// registers (blocks of 1024 threads), and any width.
    pub silu_mul_row_regs: [(usize, sys::CUfunction); 3],
    pub silu_mul_row: sys::CUfunction,
    pub kv_store: sys::CUfunction,
    pub paged_attention: sys::CUfunction,
    pub paged_attention_split: sys::CUfunction,
    pub attention_combine: sys::CUfunction,
    /// `gemv_{format}_{epilogue}_t{1,2,4,8}`: [format][epilogue][token bucket].
    gemv: [[[sys::CUfunction; 4]; 3]; 4],
    /// `gemv_{int4,nvfp4}_{epilogue}_t{16,32,64}` (kernels/gemv_multi.cu): [int4, nvfp4]
    /// [epilogue][token bucket].
    gemv_multi: [[[sys::CUfunction; 3]; 3]; 2],
    /// `attention_mma{,_serial,_staged}_d{head_dim}_n{row tiles}`, keyed by (head_dim, row
    /// tiles, build).
    attention_mma: Vec<((usize, usize, MmaBuild), sys::CUfunction)>,
    /// `attention_flash_d{head_dim}`, keyed by head_dim.
    attention_flash: Vec<(usize, sys::CUfunction)>,
    /// `persistent_t{1,2,4,8}_d{64,128}` (kernels/persistent.cu): [head_dim 64, 128][token bucket].
    persistent: [[sys::CUfunction; 4]; 2],
    pub argmax_rows: sys::CUfunction,
    pub argmax_rows_masked: sys::CUfunction,
    /// Tensor-parallel ranks: vocabulary-shard embedding, per-row (max, index).
    pub embed_rows_shard: sys::CUfunction,
    pub max_rows: sys::CUfunction,
    pub fp8_quantize_rows: sys::CUfunction,
    pub fp8_rescale: sys::CUfunction,
    pub dequant_fp8_bf16: sys::CUfunction,
    pub dequant_int4_bf16: sys::CUfunction,
    pub dequant_nvfp4_bf16: sys::CUfunction,
    pub sum_splits: sys::CUfunction,
    /// Small-T weight-only GEMMs for T <= 8, 16, 32.
    pub qgemm_int4: [sys::CUfunction; 3],
    pub qgemm_nvfp4: [sys::CUfunction; 3],
    /// Mixture-of-experts layers (kernels/moe.cu, `backend/moe.rs`).
    pub moe: MoeKernels,
    _modules: Vec<sys::CUmodule>,
}

/// The launches of one mixture-of-experts layer, in the order they run.
pub struct MoeKernels {
    pub to_bf16: sys::CUfunction,
    pub router: sys::CUfunction,
    pub route: sys::CUfunction,
    pub group: sys::CUfunction,
    pub gate_up: sys::CUfunction,
    pub down: sys::CUfunction,
    pub combine: sys::CUfunction,
}

// SAFETY: module and function handles are context-wide and used from one thread at a time.
unsafe impl Send for Kernels {}

impl Kernels {
    /// Compiles (or reads from cache) and loads every module into the current context.
    pub fn load(arch: (i32, i32)) -> Result<Self> {
        let mut modules = vec![];
        let mut funcs = std::collections::HashMap::new();
        for (name, src) in SOURCES {
            let ptx = cached_ptx(name, src, arch)?;
            let c = CString::new(ptx).context("PTX contains a NUL byte")?;
            // SAFETY: c is a NUL-terminated PTX image; the context is current.
            let module = unsafe { result::module::load_data(c.as_ptr() as *const _) }
                .with_context(|| format!("the driver rejected the PTX of {name}"))?;
            modules.push(module);
            for entry in entry_names(src) {
                // SAFETY: module was just loaded.
                let f =
                    unsafe { result::module::get_function(module, CString::new(entry.clone())?) }
                        .with_context(|| format!("kernel {entry} missing from {name}"))?;
                funcs.insert(entry, f);
            }
        }
        let mut get = |n: &str| {
            funcs
                .remove(n)
                .ok_or_else(|| anyhow!("kernel {n} is not defined in any source"))
        };
        Ok(Self {
            embed_rows: get("embed_rows")?,
            rms_norm: get("rms_norm")?,
            add_rms_norm: get("add_rms_norm")?,
            add_rms_norm_regs: [
                (4, get("add_rms_norm_r4")?),
                (8, get("add_rms_norm_r8")?),
                (16, get("add_rms_norm_r16")?),
                (32, get("add_rms_norm_r32")?),
            ],
            add_f32: get("add_f32")?,
            add_bias_f32: get("add_bias_f32")?,
            silu_mul: get("silu_mul")?,
            silu_mul_fused: get("silu_mul_fused")?,
            gather_rows: get("gather_rows")?,
            rope: get("rope")?,
            head_rms_norm: get("head_rms_norm")?,
            rope_split_qkv: get("rope_split_qkv")?,
            rope_split_qkv_fp8: get("rope_split_qkv_fp8")?,
            silu_mul_row_regs: [
                (4, get("silu_mul_row_r4")?),
                (8, get("silu_mul_row_r8")?),
                (16, get("silu_mul_row_r16")?),
            ],
            silu_mul_row: get("silu_mul_row")?,
            kv_store: get("kv_store")?,
            paged_attention: get("paged_attention")?,
            paged_attention_split: get("paged_attention_split")?,
            gemv: {
                let mut f = [[[std::ptr::null_mut(); 4]; 3]; 4];
                for (fi, fmt) in GemvFormat::ALL.iter().enumerate() {
                    for (ei, epi) in GemvEpilogue::ALL.iter().enumerate() {
                        for (ti, tb) in GEMV_BUCKETS.iter().enumerate() {
                            f[fi][ei][ti] =
                                get(&format!("gemv_{}_{}_t{tb}", fmt.name(), epi.name()))?;
                        }
                    }
                }
                f
            },
            gemv_multi: {
                let mut f = [[[std::ptr::null_mut(); 3]; 3]; 2];
                for (fi, fmt) in [GemvFormat::Int4, GemvFormat::Nvfp4].iter().enumerate() {
                    for (ei, epi) in GemvEpilogue::ALL.iter().enumerate() {
                        for (ti, tb) in GEMV_MULTI_BUCKETS.iter().enumerate() {
                            f[fi][ei][ti] =
                                get(&format!("gemv_{}_{}_t{tb}", fmt.name(), epi.name()))?;
                        }
                    }
                }
                f
            },
            attention_mma: crate::params::MMA_ROW_TILES
                .iter()
                .flat_map(|&(d, tiles)| tiles.iter().map(move |&nt| (d, nt)))
                .flat_map(|(d, nt)| MmaBuild::ALL.map(|b| (d, nt, b)))
                .map(|(d, nt, build)| {
                    let f = get(&format!("{}_d{d}_n{nt}", build.kernel()))?;
                    if build == MmaBuild::Staged {
                        allow_dynamic_smem(
                            f,
                            crate::params::mma_staged_smem(d),
                            &format!("{}_d{d}_n{nt}", build.kernel()),
                        )?;
                    }
                    Ok(((d, nt, build), f))
                })
                .collect::<Result<_>>()?,
            persistent: {
                let mut f = [[std::ptr::null_mut(); 4]; 2];
                for (di, d) in PERSISTENT_HEAD_DIMS.iter().enumerate() {
                    for (ti, &tb) in GEMV_BUCKETS.iter().enumerate() {
                        let name = format!("persistent_t{tb}_d{d}");
                        f[di][ti] = get(&name)?;
                        // Its static shared memory and the gemv's dynamic part together
                        // pass 48 KB: the launch must be allowed the dynamic part.
                        allow_dynamic_smem(
                            f[di][ti],
                            crate::params::persistent_smem_bytes(tb),
                            &name,
                        )?;
                    }
                }
                f
            },
            attention_flash: crate::params::FLASH_HEAD_DIMS
                .iter()
                .map(|&d| {
                    let name = format!("attention_flash_d{d}");
                    let f = get(&name)?;
                    allow_dynamic_smem(f, crate::params::flash_smem(d), &name)?;
                    Ok((d, f))
                })
                .collect::<Result<_>>()?,
            attention_combine: get("attention_combine")?,
            argmax_rows: get("argmax_rows")?,
            argmax_rows_masked: get("argmax_rows_masked")?,
            embed_rows_shard: get("embed_rows_shard")?,
            max_rows: get("max_rows")?,
            fp8_quantize_rows: get("fp8_quantize_rows")?,
            fp8_rescale: get("fp8_rescale")?,
            dequant_fp8_bf16: get("dequant_fp8_bf16")?,
            dequant_int4_bf16: get("dequant_int4_bf16")?,
            dequant_nvfp4_bf16: get("dequant_nvfp4_bf16")?,
            sum_splits: get("sum_splits")?,
            qgemm_int4: [
                get("qgemm_int4_n1")?,
                get("qgemm_int4_n2")?,
                get("qgemm_int4_n4")?,
            ],
            qgemm_nvfp4: [
                get("qgemm_nvfp4_n1")?,
                get("qgemm_nvfp4_n2")?,
                get("qgemm_nvfp4_n4")?,
            ],
            moe: MoeKernels {
                to_bf16: get("moe_to_bf16")?,
                router: get("moe_router")?,
                route: get("moe_route")?,
                group: get("moe_group")?,
                gate_up: get("moe_gate_up")?,
                down: get("moe_down")?,
                combine: get("moe_combine")?,
            },
            _modules: modules,
        })
    }
}

impl Kernels {
    /// The weight-streaming linear for `format` and `epilogue` whose token bucket holds
    /// `t` tokens (1 to 8; int4 and nvfp4 also 9 to 64, the multi-tile builds).
    pub(crate) fn gemv(
        &self,
        format: GemvFormat,
        epilogue: GemvEpilogue,
        t: usize,
    ) -> Option<sys::CUfunction> {
        if let Some(b) = GEMV_BUCKETS.iter().position(|&b| t >= 1 && t <= b) {
            return Some(self.gemv[format as usize][epilogue as usize][b]);
        }
        let fi = match format {
            GemvFormat::Int4 => 0,
            GemvFormat::Nvfp4 => 1,
            _ => return None,
        };
        let b = GEMV_MULTI_BUCKETS.iter().position(|&b| t <= b)?;
        Some(self.gemv_multi[fi][epilogue as usize][b])
    }

    /// The tensor-core attention kernel for `head_dim` with `row_tiles` tiles of 8 rows.
    pub(crate) fn attention_mma(
        &self,
        head_dim: usize,
        row_tiles: usize,
        build: MmaBuild,
    ) -> Option<sys::CUfunction> {
        self.attention_mma
            .iter()
            .find(|(k, _)| *k == (head_dim, row_tiles, build))
            .map(|&(_, f)| f)
    }

    /// The persistent step kernel for `head_dim` and token bucket index `bucket`.
    pub(crate) fn persistent(&self, head_dim: usize, bucket: usize) -> Option<sys::CUfunction> {
        let di = PERSISTENT_HEAD_DIMS.iter().position(|&d| d == head_dim)?;
        self.persistent[di].get(bucket).copied()
    }

    /// The op kind under which the persistent kernel for (`head_dim`, `bucket`) runs
    /// kernel `f` (kernels/persistent.cu `PK_*`), if it runs it: a bf16 gemv of that token
    /// bucket, or the one-row-tile decode attention of the default build.
    pub(crate) fn persistent_kind(
        &self,
        f: sys::CUfunction,
        head_dim: usize,
        bucket: usize,
    ) -> Option<i32> {
        for e in GemvEpilogue::ALL {
            if self.gemv[GemvFormat::Bf16 as usize][e as usize].get(bucket) == Some(&f) {
                return Some(e as i32);
            }
        }
        let build = persistent_attention_build(head_dim)?;
        (self.attention_mma(head_dim, 1, build) == Some(f)).then_some(PERSISTENT_ATTENTION_KIND)
    }

    /// The FlashAttention-style prefill kernel for `head_dim`.
    pub(crate) fn attention_flash(&self, head_dim: usize) -> Option<sys::CUfunction> {
        self.attention_flash
            .iter()
            .find(|(d, _)| *d == head_dim)
            .map(|&(_, f)| f)
    }
}

/// Lets kernel `f` (`name`, for the error) be launched with `bytes` of dynamic shared memory,
/// past the 48 KB a launch gets without asking.
fn allow_dynamic_smem(f: sys::CUfunction, bytes: usize, name: &str) -> Result<()> {
    // SAFETY: f is a loaded kernel; the attribute is a plain integer.
    unsafe {
        result::function::set_function_attribute(
            f,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    }
    .with_context(|| format!("{name}: {bytes} bytes of shared memory"))
}

/// Names of the `extern "C" __global__` functions defined in a source.
pub fn entry_names(src: &str) -> Vec<String> {
    let mut names = vec![];
    let mut rest = src;
    while let Some(i) = rest.find("__global__") {
        rest = &rest[i + "__global__".len()..];
        let mut head = rest.trim_start();
        head = head.strip_prefix("void").unwrap_or(head).trim_start();
        if let Some(after) = head.strip_prefix("__launch_bounds__") {
            // Skip the bounds' parenthesised arguments.
            head = after.find(')').map_or("", |p| after[p + 1..].trim_start());
        }
        let name: String = head
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            names.push(name);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_kernel_names_including_launch_bounds() {
        let src = "extern \"C\" __global__ void a(int x) {}\nextern \"C\" __global__ void __launch_bounds__(128)\nb(int y) {}";
        assert_eq!(entry_names(src), ["a", "b"]);
    }

    #[test]
    fn every_gemv_build_is_defined() {
        let names: Vec<String> = SOURCES.iter().flat_map(|(_, s)| entry_names(s)).collect();
        for fmt in GemvFormat::ALL {
            for epi in GemvEpilogue::ALL {
                for tb in GEMV_BUCKETS {
                    let want = format!("gemv_{}_{}_t{tb}", fmt.name(), epi.name());
                    assert!(names.contains(&want), "{want} is not defined in any source");
                }
                if matches!(fmt, GemvFormat::Int4 | GemvFormat::Nvfp4) {
                    for tb in GEMV_MULTI_BUCKETS {
                        let want = format!("gemv_{}_{}_t{tb}", fmt.name(), epi.name());
                        assert!(names.contains(&want), "{want} is not defined in any source");
                    }
                }
            }
        }
    }

    #[test]
    fn every_tensor_core_attention_build_is_defined() {
        let names: Vec<String> = SOURCES.iter().flat_map(|(_, s)| entry_names(s)).collect();
        for (kernel, builds) in [
            ("attention_mma", &crate::params::MMA_ROW_TILES[..]),
            ("attention_mma_serial", &crate::params::MMA_ROW_TILES[..]),
            ("attention_mma_staged", &crate::params::MMA_ROW_TILES[..]),
        ] {
            for &(d, tiles) in builds.iter() {
                for nt in tiles {
                    let want = format!("{kernel}_d{d}_n{nt}");
                    assert!(names.contains(&want), "{want} is not defined in any source");
                }
            }
        }
        for d in crate::params::FLASH_HEAD_DIMS {
            let want = format!("attention_flash_d{d}");
            assert!(names.contains(&want), "{want} is not defined in any source");
        }
    }
}
