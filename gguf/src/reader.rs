//! Parsing and validation of the GGUF container.
//!
//! Layout (little-endian): magic `GGUF`, u32 version, u64 tensor count, u64 metadata count, the
//! key/value pairs, the tensor infos, padding to `general.alignment` (default 32), then the data section.
//! Every tensor offset is relative to the start of the data section and must be aligned.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use crate::error::{GgufError, Result};
use crate::types::{GgmlType, TensorInfo, Value, ValueType};

/// Arrays inside arrays deeper than this are refused (the format allows nesting; real files use one level).
pub const MAX_ARRAY_NESTING: usize = 8;
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// Default `general.alignment`.
const DEFAULT_ALIGNMENT: u64 = 32;

enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
    /// bytes kept alive by another owner (a tensor of a Burn record mapped by `burn-store`)
    Foreign(Box<dyn AsRef<[u8]> + Send + Sync>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
            Backing::Foreign(o) => (**o).as_ref(),
        }
    }
}

/// A shared, read-only byte range of a GGUF file (or of owned bytes): tensor data handed to a
/// quantized layer without copying. It keeps the memory map alive, so a loaded model's weights are the
/// file's own pages.
#[derive(Clone)]
pub struct SharedBytes {
    backing: Arc<Backing>,
    start: usize,
    len: usize,
}

impl SharedBytes {
    /// Owned bytes (weights made in memory: quantized on the fly, tests).
    pub fn from_vec(bytes: Vec<u8>) -> Self {
        let len = bytes.len();
        Self {
            backing: Arc::new(Backing::Owned(bytes)),
            start: 0,
            len,
        }
    }

    /// Bytes owned by something else that keeps them alive and unchanged (a memory-mapped record's
    /// tensor): no copy is made.
    pub fn from_owner(owner: impl AsRef<[u8]> + Send + Sync + 'static) -> Self {
        let len = owner.as_ref().len();
        Self {
            backing: Arc::new(Backing::Foreign(Box::new(owner))),
            start: 0,
            len,
        }
    }

    /// A read-only memory map of a whole file.
    pub fn map_file(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let file = std::fs::File::open(path)?;
        // SAFETY: read-only, private map; see `GgufFile::open`.
        let map = unsafe { memmap2::Mmap::map(&file) }?;
        let len = map.len();
        Ok(Self {
            backing: Arc::new(Backing::Mmap(map)),
            start: 0,
            len,
        })
    }

    /// Bytes `start..start + len` of this handle, sharing the backing; `None` when out of range.
    pub fn slice(&self, start: usize, len: usize) -> Option<Self> {
        let end = start.checked_add(len)?;
        (end <= self.len).then(|| Self {
            backing: Arc::clone(&self.backing),
            start: self.start + start,
            len,
        })
    }
}

impl SharedBytes {
    /// Lets the OS drop this range's pages from the process's memory, for weights whose bytes were
    /// copied into another layout (packed kernels): memory-mapped bytes are re-read from the file if
    /// touched again (an embedding row, say), so nothing is lost. Only whole pages inside the range
    /// are released, so a neighbouring tensor's pages are never touched. Owned bytes are left as
    /// they are.
    pub fn release_pages(&self) {
        self.release_pages_in(0, self.len);
    }

    /// [`SharedBytes::release_pages`] for bytes `offset..offset + len` of this range (clipped to it).
    pub fn release_pages_in(&self, offset: usize, len: usize) {
        #[cfg(unix)]
        self.release_mapped_pages(
            offset.min(self.len),
            len.min(self.len - offset.min(self.len)),
        );
        #[cfg(not(unix))]
        let _ = (offset, len);
    }

    #[cfg(unix)]
    fn release_mapped_pages(&self, offset: usize, len: usize) {
        let Backing::Mmap(map) = &*self.backing else {
            return;
        };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let Ok(span) = usize::try_from(page) else {
            return;
        };
        if span == 0 {
            return;
        }
        let base = map.as_ptr() as usize;
        let first = (base + self.start + offset).next_multiple_of(span) - base;
        let end = (base + self.start + offset + len) / span * span - base;
        if end <= first || end > map.len() {
            return;
        }
        // SAFETY: the map is read-only and file-backed, and Cinder never writes to it: after
        // MADV_DONTNEED a read faults the same bytes back in from the file. The range lies inside
        // the map (checked above).
        let released = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, end - first)
        };
        if let Err(e) = released {
            tracing::debug!("releasing {} mapped bytes failed: {e}", end - first);
        }
    }
}

impl std::ops::Deref for SharedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // start..start+len was checked against the backing when the handle was made.
        &self.backing.bytes()[self.start..self.start + self.len]
    }
}

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({} bytes at {})", self.len, self.start)
    }
}

/// A parsed and validated GGUF file. Tensor data is borrowed from the memory map, never copied.
pub struct GgufFile {
    backing: Arc<Backing>,
    version: u32,
    metadata: BTreeMap<String, Value>,
    /// keys in file order (the writer's order is kept for `info` output)
    key_order: Vec<String>,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

/// A bounds-checked little-endian cursor over the file bytes.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what.to_string(),
                offset: self.pos as u64,
                needed: n,
                len: self.buf.len() as u64,
            });
        }
        let n = n as usize;
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let at = self.pos as u64;
        let len = self.u64(what)?;
        if len > self.remaining() {
            return Err(GgufError::CountTooLarge {
                what: format!("string length of {what}"),
                count: len,
                offset: at,
                remaining: self.remaining(),
            });
        }
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::BadUtf8 {
            what: what.to_string(),
            offset: at,
        })
    }

    /// Checks that `count` items of at least `min_size` bytes each can fit in what is left.
    fn check_count(&self, count: u64, min_size: u64, what: &str, at: u64) -> Result<()> {
        let fits = count
            .checked_mul(min_size)
            .is_some_and(|n| n <= self.remaining());
        if fits {
            Ok(())
        } else {
            Err(GgufError::CountTooLarge {
                what: what.to_string(),
                count,
                offset: at,
                remaining: self.remaining(),
            })
        }
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value> {
        let what = format!("value of {key:?}");
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(&what)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(&what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            ValueType::U32 => Value::U32(self.u32(&what)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            ValueType::U64 => Value::U64(self.u64(&what)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            ValueType::Bool => {
                let at = self.pos as u64;
                match self.array::<1>(&what)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => {
                        return Err(GgufError::BadKey {
                            key: key.to_string(),
                            reason: format!("bool byte {b} at offset {at} is neither 0 nor 1"),
                        });
                    }
                }
            }
            ValueType::String => Value::String(self.string(&what)?),
            ValueType::Array => {
                let at = self.pos as u64;
                if depth >= MAX_ARRAY_NESTING {
                    return Err(GgufError::NestingTooDeep {
                        key: key.to_string(),
                        max: MAX_ARRAY_NESTING,
                        offset: at,
                    });
                }
                let type_id = self.u32(&what)?;
                let elem =
                    ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
                        key: key.to_string(),
                        type_id,
                        offset: at,
                    })?;
                let count_at = self.pos as u64;
                let count = self.u64(&what)?;
                self.check_count(
                    count,
                    elem.min_size(),
                    &format!("array length of {key:?}"),
                    count_at,
                )?;
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(elem, key, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }
}

impl GgufFile {
    /// Opens and validates a GGUF file through a read-only memory map.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process; Cinder never writes model files while
        // they are loaded. A file truncated underneath a live map is the one hazard mmap cannot guard.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::from_backing(Backing::Mmap(map))
    }

    /// Parses and validates GGUF bytes held in memory (tests, fuzzing, network sources).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::from_backing(Backing::Owned(bytes))
    }

    fn from_backing(backing: Backing) -> Result<Self> {
        let backing = Arc::new(backing);
        let buf = backing.bytes();
        let len = buf.len() as u64;
        let mut c = Cursor { buf, pos: 0 };
        let magic: [u8; 4] = c.array("magic")?;
        if &magic != b"GGUF" {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = c.u32("version")?;
        if version != 2 && version != 3 {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let n_tensors_at = c.pos as u64;
        let n_tensors = c.u64("tensor count")?;
        let n_kv_at = c.pos as u64;
        let n_kv = c.u64("metadata count")?;
        // key (>= 8 bytes) + type (4) + smallest value (1); tensor info >= 8 + 4 + 4 + 8.
        c.check_count(n_kv, 13, "metadata count", n_kv_at)?;
        c.check_count(n_tensors, 24, "tensor count", n_tensors_at)?;

        let mut metadata = BTreeMap::new();
        let mut key_order = Vec::with_capacity(n_kv as usize);
        for i in 0..n_kv {
            let at = c.pos as u64;
            let key = c.string(&format!("metadata key #{i}"))?;
            let type_at = c.pos as u64;
            let type_id = c.u32(&format!("type of {key:?}"))?;
            let ty = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
                key: key.clone(),
                type_id,
                offset: type_at,
            })?;
            let value = c.value(ty, &key, 0)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(GgufError::DuplicateKey { key, offset: at });
            }
            key_order.push(key);
        }

        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if *a != 0 && a.is_power_of_two() => *a as u64,
            Some(v) => return Err(GgufError::BadAlignment(v.to_string())),
        };

        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut by_name = HashMap::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let at = c.pos as u64;
            let name = c.string(&format!("tensor name #{i}"))?;
            let n_dims = c.u32(&format!("dimension count of {name:?}"))?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(GgufError::BadTensorShape {
                    name,
                    reason: format!("{n_dims} dimensions (1..={MAX_DIMS} allowed)"),
                    offset: at,
                });
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(c.u64(&format!("dimensions of {name:?}"))?);
            }
            let type_at = c.pos as u64;
            let type_id = c.u32(&format!("type of {name:?}"))?;
            let ggml_type =
                GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
                    name: name.clone(),
                    type_id,
                    offset: type_at,
                })?;
            let offset = c.u64(&format!("data offset of {name:?}"))?;
            let shape_err = |reason: String| GgufError::BadTensorShape {
                name: name.clone(),
                reason,
                offset: at,
            };
            if dims.contains(&0) {
                return Err(shape_err(format!("zero dimension in {dims:?}")));
            }
            let n_el = dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| shape_err(format!("element count of {dims:?} overflows")))?;
            if !dims[0].is_multiple_of(ggml_type.block_size()) {
                return Err(shape_err(format!(
                    "row length {} is not a multiple of the {} block size {}",
                    dims[0],
                    ggml_type,
                    ggml_type.block_size()
                )));
            }
            let size = ggml_type
                .bytes_for(n_el)
                .ok_or_else(|| shape_err(format!("byte size of {dims:?} {ggml_type} overflows")))?;
            if by_name.insert(name.clone(), tensors.len()).is_some() {
                return Err(GgufError::DuplicateTensor { name, offset: at });
            }
            tensors.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
                size,
            });
        }

        let header_end = c.pos as u64;
        let data_offset = header_end.div_ceil(alignment) * alignment;
        if n_tensors > 0 && data_offset > len {
            return Err(GgufError::Truncated {
                what: "data section".to_string(),
                offset: header_end,
                needed: data_offset - header_end,
                len,
            });
        }
        let data_len = len.saturating_sub(data_offset);

        // Every tensor inside the data section, aligned, and no two overlapping.
        let mut spans: Vec<(u64, u64, usize)> = Vec::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            let bad = |reason: String| GgufError::BadTensorData {
                name: t.name.clone(),
                reason,
            };
            if !t.offset.is_multiple_of(alignment) {
                return Err(bad(format!(
                    "data offset {} is not aligned to {alignment}",
                    t.offset
                )));
            }
            let end = t.offset.checked_add(t.size).ok_or_else(|| {
                bad(format!(
                    "data offset {} + size {} overflows",
                    t.offset, t.size
                ))
            })?;
            if end > data_len {
                // (The absolute offset can exceed u64 for a corrupt offset: say so rather than overflow.)
                let absolute = data_offset
                    .checked_add(t.offset)
                    .map_or_else(|| "beyond 2^64".to_string(), |a| a.to_string());
                return Err(bad(format!(
                    "data [{}, {end}) (absolute {absolute}) runs past the end of the data section ({data_len} bytes): file truncated?",
                    t.offset,
                )));
            }
            spans.push((t.offset, end, i));
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            let (a, b) = (w[0], w[1]);
            if b.0 < a.1 {
                return Err(GgufError::BadTensorData {
                    name: tensors[b.2].name.clone(),
                    reason: format!(
                        "data [{}, {}) overlaps tensor {:?} at [{}, {})",
                        b.0, b.1, tensors[a.2].name, a.0, a.1
                    ),
                });
            }
        }

        tracing::debug!(
            version,
            n_tensors,
            n_kv,
            alignment,
            data_offset,
            "parsed GGUF header"
        );
        Ok(Self {
            backing,
            version,
            metadata,
            key_order,
            tensors,
            by_name,
            alignment,
            data_offset,
        })
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data alignment in bytes.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// All metadata, sorted by key.
    pub fn metadata(&self) -> &BTreeMap<String, Value> {
        &self.metadata
    }

    /// Metadata keys in file order.
    pub fn keys(&self) -> &[String] {
        &self.key_order
    }

    /// One metadata value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// A required string value.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self
            .get(key)
            .ok_or_else(|| GgufError::MissingKey(key.to_string()))?;
        v.as_str().ok_or_else(|| GgufError::BadKey {
            key: key.to_string(),
            reason: format!("expected a string, found {v}"),
        })
    }

    /// A required unsigned integer value (any integer type, non-negative).
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self
            .get(key)
            .ok_or_else(|| GgufError::MissingKey(key.to_string()))?;
        v.as_u64().ok_or_else(|| GgufError::BadKey {
            key: key.to_string(),
            reason: format!("expected a non-negative integer, found {v}"),
        })
    }

    /// An optional unsigned integer value; present but ill-typed is an error.
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.get_u64(key).map(Some),
        }
    }

    /// An optional float value (any numeric type); present but ill-typed is an error.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| GgufError::BadKey {
                key: key.to_string(),
                reason: format!("expected a number, found {v}"),
            }),
        }
    }

    /// An optional bool value; present but ill-typed is an error.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| GgufError::BadKey {
                key: key.to_string(),
                reason: format!("expected a bool, found {v}"),
            }),
        }
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    /// All tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// A tensor's info by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// A required tensor's info.
    pub fn require_tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor(name)
            .ok_or_else(|| GgufError::MissingTensor(name.to_string()))
    }

    /// The raw bytes of a tensor (validated at open time to lie inside the file).
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let r = self.data_range(info);
        &self.backing.bytes()[r]
    }

    /// Where a tensor's bytes lie in the file. Bounds were validated in `from_backing` for every
    /// `TensorInfo` this file handed out; a foreign `TensorInfo` (offsets past the file, or
    /// overflowing) gets an empty range, never a panic.
    fn data_range(&self, info: &TensorInfo) -> std::ops::Range<usize> {
        let start = self.data_offset.checked_add(info.offset);
        let end = start.and_then(|s| s.checked_add(info.size));
        match (start.map(usize::try_from), end.map(usize::try_from)) {
            (Some(Ok(start)), Some(Ok(end)))
                if start <= end && end <= self.backing.bytes().len() =>
            {
                start..end
            }
            _ => 0..0,
        }
    }

    /// A tensor's bytes as a shared handle that keeps the file mapped (zero-copy weight loading).
    /// A foreign `TensorInfo` outside the file yields an empty handle, as [`Self::tensor_data`] does.
    pub fn tensor_shared(&self, info: &TensorInfo) -> SharedBytes {
        let r = self.data_range(info);
        SharedBytes {
            backing: Arc::clone(&self.backing),
            start: r.start,
            len: r.len(),
        }
    }

    /// The whole file's bytes (for checksums).
    pub fn bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    /// Dequantizes a tensor to f32 with the scalar reference decoder, in GGUF element order.
    pub fn dequantize(&self, info: &TensorInfo) -> Result<Vec<f32>> {
        crate::dequant::dequantize(
            info.ggml_type,
            self.tensor_data(info),
            info.n_elements() as usize,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::SharedBytes;
    use std::io::Write;

    /// Releasing a mapped range's pages loses nothing: the bytes read back from the file, and the
    /// neighbouring ranges are untouched. Owned bytes ignore the call.
    #[test]
    fn released_pages_read_back_the_same_bytes() {
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        f.write_all(&bytes).expect("write");
        let map = SharedBytes::map_file(f.path()).expect("map");
        let mid = map.slice(10_001, 200_000).expect("in range");
        assert_eq!(&mid[..], &bytes[10_001..210_001]);
        mid.release_pages();
        mid.release_pages_in(5, 150_000);
        mid.release_pages_in(190_000, 1 << 40); // clipped to the range
        assert_eq!(&mid[..], &bytes[10_001..210_001]);
        assert_eq!(&map[..], &bytes[..]);
        let owned = SharedBytes::from_vec(bytes.clone());
        owned.release_pages();
        assert_eq!(&owned[..], &bytes[..]);
    }
}
