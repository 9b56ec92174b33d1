//! GGUF v2/v3 reader: metadata, tensor directory, and dequantisation of the tensor
//! types wring supports. Errors name the tensor or key and the problem.

use anyhow::{bail, ensure, Context, Result};
use memmap2::Mmap;
use std::collections::BTreeMap;
use std::path::Path;

use crate::ggml_type::ggml_type_name;
pub use crate::ggml_type::GgmlType;
use crate::quant;

#[derive(Debug, Clone)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    U64(u64),
    I64(i64),
    F64(f64),
    Array(Vec<MetaValue>),
}

impl MetaValue {
    pub fn as_u64(&self) -> Option<u64> {
        Some(match *self {
            MetaValue::U8(v) => v as u64,
            MetaValue::I8(v) => v as u64,
            MetaValue::U16(v) => v as u64,
            MetaValue::I16(v) => v as u64,
            MetaValue::U32(v) => v as u64,
            MetaValue::I32(v) => v as u64,
            MetaValue::U64(v) => v,
            MetaValue::I64(v) => v as u64,
            _ => return None,
        })
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v as f64),
            MetaValue::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[MetaValue]> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// GGML order: `dims[0]` is the contiguous (column) dimension.
    pub dims: Vec<usize>,
    pub ty: GgmlType,
    /// Byte offset from the start of the file.
    pub offset: usize,
    pub nbytes: usize,
}

impl TensorInfo {
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

pub struct GgufFile {
    pub version: u32,
    pub meta: BTreeMap<String, MetaValue>,
    pub tensors: BTreeMap<String, TensorInfo>,
    mmap: Mmap,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        ensure!(
            self.pos.checked_add(n).is_some_and(|e| e <= self.buf.len()),
            "file ends at byte {} while reading {n} bytes at {} (truncated?)",
            self.buf.len(),
            self.pos
        );
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn string(&mut self) -> Result<String> {
        let n = self.u64()? as usize;
        ensure!(
            n < 1 << 30,
            "string length {n} is implausible (corrupt file?)"
        );
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    fn value(&mut self, ty: u32, depth: usize) -> Result<MetaValue> {
        Ok(match ty {
            0 => MetaValue::U8(self.u8()?),
            1 => MetaValue::I8(self.u8()? as i8),
            2 => MetaValue::U16(self.u16()?),
            3 => MetaValue::I16(self.u16()? as i16),
            4 => MetaValue::U32(self.u32()?),
            5 => MetaValue::I32(self.u32()? as i32),
            6 => MetaValue::F32(f32::from_bits(self.u32()?)),
            7 => MetaValue::Bool(self.u8()? != 0),
            8 => MetaValue::Str(self.string()?),
            9 => {
                ensure!(depth < 4, "nested arrays too deep");
                let ety = self.u32()?;
                let n = self.u64()? as usize;
                ensure!(
                    n < 1 << 28,
                    "array length {n} is implausible (corrupt file?)"
                );
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.value(ety, depth + 1)?);
                }
                MetaValue::Array(v)
            }
            10 => MetaValue::U64(self.u64()?),
            11 => MetaValue::I64(self.u64()? as i64),
            12 => MetaValue::F64(f64::from_bits(self.u64()?)),
            t => bail!("unknown metadata value type {t}"),
        })
    }
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        // SAFETY: the file is opened read-only; wring never writes model files it maps.
        let mmap = unsafe { Mmap::map(&file) }
            .with_context(|| format!("cannot map {}", path.display()))?;
        Self::parse(mmap).with_context(|| format!("{} is not a valid GGUF file", path.display()))
    }

    fn parse(mmap: Mmap) -> Result<Self> {
        let mut c = Cursor { buf: &mmap, pos: 0 };
        let magic = c.take(4).context("reading the magic number")?;
        ensure!(
            magic == b"GGUF",
            "bad magic {:?} (expected \"GGUF\")",
            String::from_utf8_lossy(magic)
        );
        let version = c.u32()?;
        ensure!(
            version == 2 || version == 3,
            "GGUF version {version} is not supported (2 or 3)"
        );
        let n_tensors = c.u64()? as usize;
        let n_kv = c.u64()? as usize;
        ensure!(
            n_tensors < 1 << 20 && n_kv < 1 << 20,
            "header counts implausible ({n_tensors} tensors, {n_kv} keys)"
        );
        let mut meta = BTreeMap::new();
        for i in 0..n_kv {
            let key = c.string().with_context(|| format!("metadata key #{i}"))?;
            let ty = c.u32()?;
            let v = c
                .value(ty, 0)
                .with_context(|| format!("metadata value of {key}"))?;
            meta.insert(key, v);
        }
        let mut infos = Vec::with_capacity(n_tensors);
        for i in 0..n_tensors {
            let name = c.string().with_context(|| format!("tensor #{i} name"))?;
            let nd = c.u32()? as usize;
            ensure!(nd <= 4, "tensor {name}: {nd} dimensions");
            let mut dims = Vec::with_capacity(nd);
            for _ in 0..nd {
                dims.push(c.u64()? as usize);
            }
            let tid = c.u32()?;
            let off = c.u64()? as usize;
            infos.push((name, dims, tid, off));
        }
        let align = meta
            .get("general.alignment")
            .and_then(|v| v.as_u64())
            .unwrap_or(32) as usize;
        ensure!(
            align.is_power_of_two(),
            "general.alignment {align} is not a power of two"
        );
        let data_start = c.pos.div_ceil(align) * align;
        let mut tensors = BTreeMap::new();
        for (name, dims, tid, off) in infos {
            let ty = GgmlType::from_id(tid).ok_or_else(|| anyhow::anyhow!("tensor {name}: type {} (id {tid}) is not supported (supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K)", ggml_type_name(tid)))?;
            let numel: usize = dims.iter().product();
            let (be, bb) = ty.block();
            ensure!(numel.is_multiple_of(be), "tensor {name}: {numel} elements is not a multiple of the {be}-element block of {ty:?}");
            let nbytes = numel / be * bb;
            let offset = data_start + off;
            ensure!(offset + nbytes <= mmap.len(), "tensor {name}: data at bytes {offset}..{} lies past the end of the file ({} bytes): the file is truncated", offset + nbytes, mmap.len());
            tensors.insert(
                name.clone(),
                TensorInfo {
                    name,
                    dims,
                    ty,
                    offset,
                    nbytes,
                },
            );
        }
        Ok(Self {
            version,
            meta,
            tensors,
            mmap,
        })
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.meta.get(key)
    }
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.meta.get(key).and_then(|v| v.as_u64())
    }
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.meta.get(key).and_then(|v| v.as_f64())
    }
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.meta.get(key).and_then(|v| v.as_str())
    }
    pub fn require_u64(&self, key: &str) -> Result<u64> {
        self.get_u64(key)
            .ok_or_else(|| anyhow::anyhow!("metadata key {key} is missing or not an integer"))
    }

    pub fn raw(&self, t: &TensorInfo) -> &[u8] {
        &self.mmap[t.offset..t.offset + t.nbytes]
    }

    /// Dequantises a tensor to f32 in GGML order (row-major with `dims[0]` contiguous).
    pub fn dequantize(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let t = self
            .tensors
            .get(name)
            .ok_or_else(|| anyhow::anyhow!("tensor {name} is missing from the file"))?;
        let data = quant::dequantize(t.ty, self.raw(t), t.numel())
            .with_context(|| format!("tensor {name}"))?;
        if let Some(i) = data.iter().position(|x| !x.is_finite()) {
            bail!("tensor {name}: value #{i} is not finite (corrupt file?)");
        }
        Ok((t.dims.clone(), data))
    }
}
