//! A small GGUF v3 writer: metadata of every value type (arrays may nest), tensors of any [`GgmlType`]
//! given their raw bytes, and the data alignment.
//!
//! Layout written (little-endian, as [`crate::GgufFile`] reads it): magic `GGUF`, u32 version 3,
//! u64 tensor count, u64 metadata count, the key/value pairs in insertion order, the tensor infos in
//! insertion order, zero padding to the alignment, then each tensor's bytes at an aligned offset, each
//! followed by zero padding to the alignment (as ggml and gguf-py do).
//!
//! Everything is checked when it is added (duplicate keys and names, array element types, shapes
//! against byte lengths, `general.alignment`), so [`GgufWriter::to_bytes`] always produces a file the
//! reader accepts.

use std::io::Write;
use std::path::Path;

use crate::error::{GgufError, Result};
use crate::reader::MAX_ARRAY_NESTING;
use crate::types::{GgmlType, Value, ValueType};

/// The GGUF version this writer produces.
pub const WRITER_VERSION: u32 = 3;
/// The alignment used when `general.alignment` is not set.
pub const DEFAULT_ALIGNMENT: u32 = 32;
const ALIGNMENT_KEY: &str = "general.alignment";

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

/// Builds a GGUF file in memory. Keys and tensors keep their insertion order.
///
/// ```
/// use cinder_gguf::{GgmlType, GgufFile, Value};
/// use cinder_gguf::writer::GgufWriter;
///
/// let mut w = GgufWriter::new();
/// w.add_kv("general.architecture", Value::String("llama".into()))?;
/// w.add_tensor("x", &[2], GgmlType::F32, [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect())?;
/// let f = GgufFile::from_bytes(w.to_bytes()?)?;
/// assert_eq!(f.architecture()?, "llama");
/// assert_eq!(f.dequantize(f.require_tensor("x")?)?, vec![1.0, 2.0]);
/// # Ok::<(), cinder_gguf::GgufError>(())
/// ```
#[derive(Default)]
pub struct GgufWriter {
    kv: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

impl std::fmt::Debug for GgufWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufWriter")
            .field("metadata", &self.kv.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment())
            .finish()
    }
}

fn bad_key(key: &str, reason: impl Into<String>) -> GgufError {
    GgufError::BadKey {
        key: key.to_string(),
        reason: reason.into(),
    }
}

fn bad_tensor(name: &str, reason: impl Into<String>) -> GgufError {
    GgufError::BadTensorData {
        name: name.to_string(),
        reason: reason.into(),
    }
}

/// Checks that every element of an array value has the declared type, recursively.
fn check_value(key: &str, v: &Value, depth: usize) -> Result<()> {
    if let Value::Array(elem, items) = v {
        if depth >= MAX_ARRAY_NESTING {
            return Err(bad_key(
                key,
                format!("arrays nested deeper than {MAX_ARRAY_NESTING} (the reader refuses them)"),
            ));
        }
        for (i, item) in items.iter().enumerate() {
            if item.value_type() != *elem {
                return Err(bad_key(
                    key,
                    format!(
                        "array element #{i} is {:?} but the array is declared {elem:?}",
                        item.value_type()
                    ),
                ));
            }
            check_value(key, item, depth + 1)?;
        }
    }
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Writes a value's payload (no type tag; arrays write their element type and count).
fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::Array(elem, items) => {
            out.extend_from_slice(&elem.id().to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn pad_to(out: &mut Vec<u8>, alignment: u64) {
    let len = out.len() as u64;
    let target = len.div_ceil(alignment) * alignment;
    out.resize(target as usize, 0);
}

impl GgufWriter {
    /// An empty writer (no metadata, no tensors, alignment 32).
    pub fn new() -> Self {
        Self::default()
    }

    /// The data alignment: `general.alignment` if set, else 32.
    pub fn alignment(&self) -> u32 {
        self.kv
            .iter()
            .find(|(k, _)| k == ALIGNMENT_KEY)
            .and_then(|(_, v)| match v {
                Value::U32(a) => Some(*a),
                _ => None,
            })
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// Sets `general.alignment` (a non-zero power of two), adding or replacing the key.
    pub fn set_alignment(&mut self, alignment: u32) -> Result<&mut Self> {
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(GgufError::BadAlignment(alignment.to_string()));
        }
        match self.kv.iter_mut().find(|(k, _)| k == ALIGNMENT_KEY) {
            Some((_, v)) => *v = Value::U32(alignment),
            None => self
                .kv
                .push((ALIGNMENT_KEY.to_string(), Value::U32(alignment))),
        }
        Ok(self)
    }

    /// Adds a metadata pair. Refuses a duplicate key, an array whose elements do not all have its
    /// declared type, arrays nested deeper than the reader accepts, and a `general.alignment` that is
    /// not a power-of-two u32.
    pub fn add_kv(&mut self, key: impl Into<String>, value: Value) -> Result<&mut Self> {
        let key = key.into();
        if self.kv.iter().any(|(k, _)| *k == key) {
            return Err(bad_key(&key, "duplicate key"));
        }
        check_value(&key, &value, 0)?;
        if key == ALIGNMENT_KEY {
            match &value {
                Value::U32(a) if *a != 0 && a.is_power_of_two() => {}
                v => return Err(GgufError::BadAlignment(v.to_string())),
            }
        }
        self.kv.push((key, value));
        Ok(self)
    }

    /// Adds an array of strings (the common case of `tokenizer.ggml.tokens`).
    pub fn add_string_array<S: AsRef<str>>(
        &mut self,
        key: impl Into<String>,
        items: impl IntoIterator<Item = S>,
    ) -> Result<&mut Self> {
        let items = items
            .into_iter()
            .map(|s| Value::String(s.as_ref().to_string()))
            .collect();
        self.add_kv(key, Value::Array(ValueType::String, items))
    }

    /// Adds a tensor of type `ty` with GGUF dims (innermost first, 1 to 4 of them) and its raw bytes,
    /// which must be exactly the size of `dims` in `ty` (`dims[0]` a multiple of the block size).
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self> {
        let name = name.into();
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(bad_tensor(&name, "duplicate tensor name"));
        }
        if dims.is_empty() || dims.len() > 4 {
            return Err(bad_tensor(
                &name,
                format!("{} dimensions (1..=4 allowed)", dims.len()),
            ));
        }
        if dims.contains(&0) {
            return Err(bad_tensor(&name, format!("zero dimension in {dims:?}")));
        }
        if !dims[0].is_multiple_of(ty.block_size()) {
            return Err(bad_tensor(
                &name,
                format!(
                    "row length {} is not a multiple of the {ty} block size {}",
                    dims[0],
                    ty.block_size()
                ),
            ));
        }
        let need = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .and_then(|n| ty.bytes_for(n))
            .ok_or_else(|| bad_tensor(&name, format!("byte size of {dims:?} {ty} overflows")))?;
        if need != data.len() as u64 {
            return Err(bad_tensor(
                &name,
                format!("{dims:?} of {ty} needs {need} bytes, got {}", data.len()),
            ));
        }
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            ty,
            data,
        });
        Ok(self)
    }

    /// Adds an F32 tensor from values.
    pub fn add_f32_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        values: &[f32],
    ) -> Result<&mut Self> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, dims, GgmlType::F32, data)
    }

    /// Number of metadata pairs added.
    pub fn n_kv(&self) -> usize {
        self.kv.len()
    }

    /// Number of tensors added.
    pub fn n_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// The complete file as bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let alignment = u64::from(self.alignment());
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&WRITER_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kv.len() as u64).to_le_bytes());
        for (key, value) in &self.kv {
            put_str(&mut out, key);
            out.extend_from_slice(&value.value_type().id().to_le_bytes());
            put_value(&mut out, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            let size = t.data.len() as u64;
            offset = size
                .checked_add(offset)
                .map(|end| end.div_ceil(alignment) * alignment)
                .ok_or_else(|| bad_tensor(&t.name, "data section size overflows"))?;
        }
        pad_to(&mut out, alignment);
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            pad_to(&mut out, alignment);
        }
        Ok(out)
    }

    /// Writes the file to `w`.
    pub fn write_to(&self, mut w: impl Write) -> std::io::Result<()> {
        let bytes = self.to_bytes().map_err(std::io::Error::other)?;
        w.write_all(&bytes)
    }

    /// Writes the file to `path` (created or truncated).
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let bytes = self.to_bytes()?;
        std::fs::write(path, bytes).map_err(|source| GgufError::Io {
            path: path.display().to_string(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgufFile;

    fn every_value() -> Vec<(&'static str, Value)> {
        vec![
            ("general.architecture", Value::String("llama".into())),
            ("t.u8", Value::U8(200)),
            ("t.i8", Value::I8(-100)),
            ("t.u16", Value::U16(65000)),
            ("t.i16", Value::I16(-32000)),
            ("t.u32", Value::U32(4_000_000_000)),
            ("t.i32", Value::I32(-2_000_000_000)),
            ("t.f32", Value::F32(-1.5e-7)),
            ("t.bool", Value::Bool(true)),
            ("t.string.empty", Value::String(String::new())),
            ("t.string.utf8", Value::String("héllo ✓ 🦀".into())),
            ("t.u64", Value::U64(u64::MAX)),
            ("t.i64", Value::I64(i64::MIN)),
            ("t.f64", Value::F64(std::f64::consts::PI)),
            ("t.arr.empty", Value::Array(ValueType::F32, vec![])),
            (
                "t.arr.bool",
                Value::Array(ValueType::Bool, vec![Value::Bool(false), Value::Bool(true)]),
            ),
            (
                "t.arr.str",
                Value::Array(
                    ValueType::String,
                    vec![Value::String("a".into()), Value::String("".into())],
                ),
            ),
            (
                "t.arr.nested",
                Value::Array(
                    ValueType::Array,
                    vec![
                        Value::Array(ValueType::I64, vec![Value::I64(-1), Value::I64(2)]),
                        Value::Array(
                            ValueType::Array,
                            vec![Value::Array(ValueType::U8, vec![Value::U8(7)])],
                        ),
                        Value::Array(ValueType::String, vec![]),
                    ],
                ),
            ),
        ]
    }

    #[test]
    fn round_trip_metadata_and_tensors() {
        let mut w = GgufWriter::new();
        for (k, v) in every_value() {
            w.add_kv(k, v).unwrap();
        }
        w.set_alignment(64).unwrap();
        let q8: Vec<u8> = (0..34 * 3).map(|i| (i * 7 % 251) as u8).collect();
        w.add_tensor("q8", &[32, 3], GgmlType::Q8_0, q8.clone())
            .unwrap();
        w.add_f32_tensor("f", &[3], &[1.0, -2.0, 0.5]).unwrap();
        let k6: Vec<u8> = (0..210).map(|i| i as u8).collect();
        w.add_tensor("k6", &[256, 1, 1, 1], GgmlType::Q6_K, k6.clone())
            .unwrap();
        let bytes = w.to_bytes().unwrap();
        assert_eq!(bytes.len() % 64, 0);

        let f = GgufFile::from_bytes(bytes).unwrap();
        assert_eq!(f.version(), 3);
        assert_eq!(f.alignment(), 64);
        let want = every_value();
        assert_eq!(f.keys().len(), want.len() + 1);
        for (i, (k, v)) in want.iter().enumerate() {
            assert_eq!(f.keys()[i], *k);
            assert_eq!(f.get(k), Some(v), "{k}");
        }
        assert_eq!(f.get("general.alignment"), Some(&Value::U32(64)));
        let names: Vec<_> = f.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["q8", "f", "k6"]);
        assert_eq!(f.tensor_data(f.require_tensor("q8").unwrap()), &q8[..]);
        assert_eq!(f.tensor_data(f.require_tensor("k6").unwrap()), &k6[..]);
        let t = f.require_tensor("f").unwrap();
        assert_eq!(t.offset % 64, 0);
        assert_eq!(f.dequantize(t).unwrap(), vec![1.0, -2.0, 0.5]);
        assert_eq!(f.require_tensor("k6").unwrap().dims, vec![256, 1, 1, 1]);
    }

    #[test]
    fn empty_file_round_trips() {
        let f = GgufFile::from_bytes(GgufWriter::new().to_bytes().unwrap()).unwrap();
        assert!(f.tensors().is_empty() && f.metadata().is_empty());
    }

    #[test]
    fn refuses_bad_input() {
        let mut w = GgufWriter::new();
        w.add_kv("a", Value::U8(1)).unwrap();
        assert!(w.add_kv("a", Value::U8(2)).is_err());
        let mixed = Value::Array(ValueType::U8, vec![Value::U8(1), Value::I8(1)]);
        assert!(
            w.add_kv("m", mixed)
                .unwrap_err()
                .to_string()
                .contains("element #1")
        );
        assert!(w.add_kv("general.alignment", Value::U32(48)).is_err());
        assert!(w.add_kv("general.alignment", Value::U64(32)).is_err());
        assert!(w.set_alignment(0).is_err());
        let mut deep = Value::Array(ValueType::U8, vec![]);
        for _ in 0..MAX_ARRAY_NESTING {
            deep = Value::Array(ValueType::Array, vec![deep]);
        }
        assert!(w.add_kv("deep", deep).is_err());
        assert!(
            w.add_tensor("t", &[32], GgmlType::Q4_0, vec![0; 17])
                .is_err()
        );
        assert!(
            w.add_tensor("t", &[16], GgmlType::Q4_0, vec![0; 9])
                .is_err()
        );
        assert!(w.add_tensor("t", &[], GgmlType::F32, vec![]).is_err());
        assert!(
            w.add_tensor("t", &[1, 1, 1, 1, 1], GgmlType::F32, vec![0; 4])
                .is_err()
        );
        assert!(w.add_tensor("t", &[0], GgmlType::F32, vec![]).is_err());
        assert!(
            w.add_tensor("t", &[u64::MAX, 2], GgmlType::F32, vec![])
                .is_err()
        );
        w.add_tensor("t", &[1], GgmlType::F32, vec![0; 4]).unwrap();
        let e = w
            .add_tensor("t", &[1], GgmlType::F32, vec![0; 4])
            .unwrap_err();
        assert!(e.to_string().contains("\"t\""), "{e}");
        // Still writes a valid file after refusals.
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    }

    #[test]
    fn writes_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.gguf");
        let mut w = GgufWriter::new();
        w.add_kv("k", Value::String("v".into())).unwrap();
        w.add_f32_tensor("x", &[1], &[3.0]).unwrap();
        w.write_file(&path).unwrap();
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(f.get_str("k").unwrap(), "v");
        let mut buf = Vec::new();
        w.write_to(&mut buf).unwrap();
        assert_eq!(buf, std::fs::read(&path).unwrap());
    }
}
