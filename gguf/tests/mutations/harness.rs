//! Shared harness of `tests/mutations.rs`: the counting allocator, the base file and the map of its
//! fields, and the variant runner.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

use cinder_gguf::writer::GgufWriter;
use cinder_gguf::{GgmlType, GgufError, GgufFile, Value, ValueType};

use crate::fuzz_body;

// ---- allocation tracking --------------------------------------------------------------------------

pub struct Tracking;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

pub fn note(delta: i64) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size() as i64);
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size() as i64);
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note(new as i64 - l.size() as i64);
        unsafe { System.realloc(p, l, new) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        note(-(l.size() as i64));
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

/// Peak live heap bytes allocated by `f` on this thread.
pub fn peak_alloc<R>(f: impl FnOnce() -> R) -> (R, i64) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    let r = f();
    (r, PEAK.with(|p| p.get()))
}

// ---- the base file --------------------------------------------------------------------------------

pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

pub fn f16s(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|v| half::f16::from_f32(*v).to_bits().to_le_bytes())
        .collect()
}

/// A small valid file: every scalar value type, strings, nested and empty arrays; six tensors of
/// different types. Pairs of same-length names (`test.u8val`/`test.i8val`, `t.f32`/`t.f16`) let a
/// two-byte patch create duplicates.
pub fn base_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    let s = |x: &str| Value::String(x.to_string());
    let kv = [
        ("general.architecture", s("llama")),
        ("general.alignment", Value::U32(32)),
        ("test.u8val", Value::U8(7)),
        ("test.i8val", Value::I8(-3)),
        ("test.u16", Value::U16(513)),
        ("test.i16", Value::I16(-513)),
        ("test.u32", Value::U32(70_000)),
        ("test.i32", Value::I32(-70_000)),
        ("test.f32", Value::F32(0.25)),
        ("test.bool", Value::Bool(true)),
        ("test.u64", Value::U64(1 << 40)),
        ("test.i64", Value::I64(-(1 << 40))),
        ("test.f64", Value::F64(-0.125)),
        ("test.str", s("héllo")),
        (
            "test.arr.str",
            Value::Array(ValueType::String, vec![s("alpha"), s("beta"), s("gamma")]),
        ),
        (
            "test.arr.i32",
            Value::Array(
                ValueType::I32,
                vec![Value::I32(1), Value::I32(-2), Value::I32(3)],
            ),
        ),
        (
            "test.arr.nested",
            Value::Array(
                ValueType::Array,
                vec![
                    Value::Array(ValueType::U8, vec![Value::U8(1), Value::U8(2)]),
                    Value::Array(ValueType::String, vec![s("x")]),
                    Value::Array(
                        ValueType::Array,
                        vec![Value::Array(ValueType::F32, vec![Value::F32(1.0)])],
                    ),
                ],
            ),
        ),
        ("test.arr.empty", Value::Array(ValueType::U64, vec![])),
    ];
    for (k, v) in kv {
        w.add_kv(k, v).unwrap();
    }
    let f32s: Vec<f32> = (0..16).map(|i| i as f32 * 0.5 - 3.0).collect();
    w.add_f32_tensor("t.f32", &[8, 2], &f32s).unwrap();
    let mut q4 = pattern(36, 1);
    q4[0..2].copy_from_slice(&f16s(&[0.5]));
    q4[18..20].copy_from_slice(&f16s(&[-0.25]));
    w.add_tensor("t.q4_0", &[64], GgmlType::Q4_0, q4).unwrap();
    let mut q8 = pattern(68, 2);
    q8[0..2].copy_from_slice(&f16s(&[0.1]));
    q8[34..36].copy_from_slice(&f16s(&[2.0]));
    w.add_tensor("t.q8_0", &[32, 2], GgmlType::Q8_0, q8)
        .unwrap();
    w.add_tensor(
        "t.f16",
        &[4],
        GgmlType::F16,
        f16s(&[1.0, -2.0, 0.5, 65504.0]),
    )
    .unwrap();
    let mut q4k = pattern(144, 3);
    q4k[0..4].copy_from_slice(&f16s(&[0.01, 0.002]));
    w.add_tensor("t.q4_k", &[256], GgmlType::Q4_K, q4k).unwrap();
    let mut q6k = pattern(210, 4);
    q6k[208..210].copy_from_slice(&f16s(&[0.03]));
    w.add_tensor("t.q6_k", &[256], GgmlType::Q6_K, q6k).unwrap();
    w
}

pub const KEYS: [&str; 18] = [
    "general.architecture",
    "general.alignment",
    "test.u8val",
    "test.i8val",
    "test.u16",
    "test.i16",
    "test.u32",
    "test.i32",
    "test.f32",
    "test.bool",
    "test.u64",
    "test.i64",
    "test.f64",
    "test.str",
    "test.arr.str",
    "test.arr.i32",
    "test.arr.nested",
    "test.arr.empty",
];
pub const TENSORS: [&str; 6] = ["t.f32", "t.q4_0", "t.q8_0", "t.f16", "t.q4_k", "t.q6_k"];

/// Where the fields of a key or tensor header start in the base file.
pub struct FileMap {
    pub bytes: Vec<u8>,
    /// absolute start of the data section
    pub data_offset: usize,
    /// end of the last tensor info (before padding)
    pub header_end: usize,
    /// length below which the file must fail (end of the last tensor's data)
    pub min_len: usize,
    pub tensor_spans: Vec<(String, usize, usize)>,
}

/// Offset of the length-prefixed string `s` (its u64 length) in the header; must be unique.
pub fn find_str(bytes: &[u8], s: &str) -> usize {
    let mut needle = (s.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(s.as_bytes());
    let hits: Vec<usize> = bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == &needle[..])
        .map(|(i, _)| i)
        .collect();
    assert_eq!(hits.len(), 1, "{s:?} occurs {} times", hits.len());
    hits[0]
}

impl FileMap {
    pub fn new() -> Self {
        let bytes = base_writer().to_bytes().unwrap();
        let f = GgufFile::from_bytes(bytes.clone()).unwrap();
        let data_offset = f.data_offset() as usize;
        let last = TENSORS[TENSORS.len() - 1];
        let header_end = Self::tensor_field(&bytes, last, TensorField::Offset) + 8;
        let tensor_spans: Vec<_> = f
            .tensors()
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    data_offset + t.offset as usize,
                    data_offset + (t.offset + t.size) as usize,
                )
            })
            .collect();
        let min_len = tensor_spans.iter().map(|s| s.2).max().unwrap();
        FileMap {
            bytes,
            data_offset,
            header_end,
            min_len,
            tensor_spans,
        }
    }

    /// Offset of a key's value-type id.
    pub fn key_type(&self, key: &str) -> usize {
        find_str(&self.bytes, key) + 8 + key.len()
    }

    /// Offset of a key's value payload.
    pub fn key_value(&self, key: &str) -> usize {
        self.key_type(key) + 4
    }

    pub fn tensor_field(bytes: &[u8], name: &str, field: TensorField) -> usize {
        let n_dims_at = find_str(bytes, name) + 8 + name.len();
        let n_dims =
            u32::from_le_bytes(bytes[n_dims_at..n_dims_at + 4].try_into().unwrap()) as usize;
        match field {
            TensorField::Name => n_dims_at - 8 - name.len(),
            TensorField::NDims => n_dims_at,
            TensorField::Dim(i) => n_dims_at + 4 + 8 * i,
            TensorField::LastDim => n_dims_at + 4 + 8 * (n_dims - 1),
            TensorField::Type => n_dims_at + 4 + 8 * n_dims,
            TensorField::Offset => n_dims_at + 8 + 8 * n_dims,
        }
    }

    pub fn tensor(&self, name: &str, field: TensorField) -> usize {
        Self::tensor_field(&self.bytes, name, field)
    }

    pub fn read_u64(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.bytes[at..at + 8].try_into().unwrap())
    }

    pub fn with(&self, at: usize, patch: &[u8]) -> Vec<u8> {
        let mut b = self.bytes.clone();
        b[at..at + patch.len()].copy_from_slice(patch);
        b
    }
}

#[derive(Clone, Copy)]
pub enum TensorField {
    Name,
    NDims,
    Dim(usize),
    LastDim,
    Type,
    Offset,
}

// ---- running variants -----------------------------------------------------------------------------

#[derive(Default)]
pub struct Runner {
    pub variants: usize,
    pub ok: usize,
    pub panics: Vec<String>,
    pub failures: Vec<String>,
}

impl Runner {
    /// Runs the fuzz body on `bytes`; records a panic or an allocation beyond the bound.
    pub fn run(&mut self, label: &str, bytes: &[u8]) -> Option<Result<u64, GgufError>> {
        self.variants += 1;
        let (r, peak) = peak_alloc(|| {
            catch_unwind(AssertUnwindSafe(|| fuzz_body::parse_and_dequantize(bytes)))
        });
        let bound = 64 * bytes.len() as i64 + (64 << 10);
        if peak > bound {
            self.failures.push(format!(
                "{label}: allocated {peak} bytes for a {}-byte file",
                bytes.len()
            ));
        }
        match r {
            Ok(r) => {
                self.ok += usize::from(r.is_ok());
                Some(r)
            }
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                self.panics.push(format!("{label}: {msg}"));
                None
            }
        }
    }

    /// Runs a variant that must fail with an error matching `want` whose message contains `names`.
    pub fn expect(
        &mut self,
        label: &str,
        bytes: &[u8],
        want: fn(&GgufError) -> bool,
        names: &[&str],
    ) {
        match self.run(label, bytes) {
            None => {}
            Some(Ok(_)) => self
                .failures
                .push(format!("{label}: parsed, expected an error")),
            Some(Err(e)) => {
                let msg = e.to_string();
                if !want(&e) {
                    self.failures
                        .push(format!("{label}: unexpected error kind: {msg}"));
                }
                for n in names {
                    if !msg.contains(n) {
                        self.failures
                            .push(format!("{label}: error does not name {n:?}: {msg}"));
                    }
                }
            }
        }
    }

    pub fn finish(self, min_variants: usize) {
        println!(
            "{} variants, {} parsed OK, {} panics",
            self.variants,
            self.ok,
            self.panics.len()
        );
        assert!(
            self.panics.is_empty(),
            "variants panicked:\n{}",
            self.panics.join("\n")
        );
        assert!(
            self.failures.is_empty(),
            "{} failures:\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
        assert!(
            self.variants >= min_variants,
            "only {} variants",
            self.variants
        );
    }
}

pub fn truncated(e: &GgufError) -> bool {
    matches!(
        e,
        GgufError::Truncated { .. }
            | GgufError::CountTooLarge { .. }
            | GgufError::BadTensorData { .. }
    )
}
pub fn count_too_large(e: &GgufError) -> bool {
    matches!(e, GgufError::CountTooLarge { .. })
}
pub fn bad_shape_or_data(e: &GgufError) -> bool {
    matches!(
        e,
        GgufError::BadTensorShape { .. } | GgufError::BadTensorData { .. }
    )
}
pub fn bad_shape(e: &GgufError) -> bool {
    matches!(e, GgufError::BadTensorShape { .. })
}
pub fn bad_data(e: &GgufError) -> bool {
    matches!(e, GgufError::BadTensorData { .. })
}
pub fn q(s: &str) -> String {
    format!("{s:?}")
}

/// Hand-made header with one key holding arrays nested `depth` deep (innermost: an empty u8 array).
pub fn nested_file(depth: usize, innermost_count: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&4u64.to_le_bytes());
    b.extend_from_slice(b"deep");
    b.extend_from_slice(&9u32.to_le_bytes());
    for _ in 1..depth {
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
    }
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&innermost_count.to_le_bytes());
    b
}
