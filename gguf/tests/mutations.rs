//! Mutation tests of the GGUF reader: thousands of deterministic corruptions of a small valid file
//! (truncations, byte flips, huge counts, bad offsets and type ids, bad UTF-8, duplicates, random
//! splats). Every variant goes through the fuzz target's body (parse, read all metadata, dequantize all
//! tensors), which must return `Ok` or `Err` and never panic. Targeted variants must fail with a
//! specific error that names the key or tensor.
//!
//! Allocation is bounded by construction: the reader checks every count against the bytes left before
//! allocating. This test makes that measurable without a timer: a counting global allocator records the
//! peak of live heap bytes per variant (per thread), which must stay within a small multiple of the
//! variant's length.

use cinder_gguf::dequant::dequantize_row_into;
use cinder_gguf::writer::GgufWriter;
use cinder_gguf::{GgmlType, GgufError, GgufFile, Value};

#[path = "../fuzz/src/lib.rs"]
mod fuzz_body;
#[path = "mutations/harness.rs"]
mod harness;

use harness::*;

// ---- the tests ------------------------------------------------------------------------------------

#[test]
fn base_file_is_valid() {
    let l = FileMap::new();
    let f = GgufFile::from_bytes(l.bytes.clone()).unwrap();
    assert_eq!(f.keys(), KEYS);
    assert_eq!(
        f.tensors()
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        TENSORS
    );
    assert_eq!(
        fuzz_body::parse_and_dequantize(&l.bytes).unwrap(),
        16 + 64 + 64 + 4 + 256 + 256
    );
    assert!(l.header_end <= l.data_offset && l.data_offset - l.header_end < 32);
    // The allocation meter works: parsing allocates something, and within the bound used below.
    let (_, peak) = peak_alloc(|| GgufFile::from_bytes(l.bytes.clone()).unwrap());
    assert!(
        peak > l.bytes.len() as i64 && peak < 64 * l.bytes.len() as i64,
        "peak {peak}"
    );
}

#[test]
fn truncations() {
    let l = FileMap::new();
    let mut r = Runner::default();
    let mut cuts: Vec<usize> = (0..=l.data_offset + 64).collect();
    cuts.extend((l.data_offset + 64..l.min_len).step_by(13));
    cuts.push(l.min_len - 1);
    // Where each key's and tensor's header entry starts, to check that errors name them.
    let mut owners: Vec<(usize, usize, String)> = KEYS
        .iter()
        .map(|k| {
            (
                find_str(&l.bytes, k),
                find_str(&l.bytes, k) + 8 + k.len(),
                q(k),
            )
        })
        .collect();
    owners.extend(TENSORS.iter().map(|t| {
        let at = l.tensor(t, TensorField::Name);
        (at, at + 8 + t.len(), q(t))
    }));
    // The header's counts are checked against the bytes after them (>= 13 per key, >= 24 per tensor).
    let counts_checked_until = 24 + (13 * KEYS.len()).max(24 * TENSORS.len());
    for cut in cuts {
        let bytes = &l.bytes[..cut];
        let mut names: Vec<String> = Vec::new();
        if cut < 8 {
            names.push(if cut < 4 { "magic" } else { "version" }.into());
        } else if cut < counts_checked_until {
            // Too short for the declared counts: refused before any entry is read.
            names.push("count".into());
        } else if cut < l.header_end {
            // Inside an entry: once its name is read, the error names it.
            let (_, name_end, name) = owners
                .iter()
                .filter(|o| o.0 <= cut)
                .max_by_key(|o| o.0)
                .unwrap();
            if cut >= *name_end {
                names.push(name.clone());
            }
        }
        if cut >= l.data_offset {
            // The first tensor (file order) whose data runs past the cut.
            let t = l.tensor_spans.iter().find(|s| s.2 > cut).unwrap();
            names.push(q(&t.0));
        }
        let names: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        r.expect(&format!("truncate at {cut}"), bytes, truncated, &names);
    }
    for cut in l.min_len..=l.bytes.len() {
        if r.run(&format!("truncate padding at {cut}"), &l.bytes[..cut])
            .is_some_and(|r| r.is_err())
        {
            r.failures
                .push(format!("cut in final padding at {cut} must parse"));
        }
    }
    let bad_magic = |e: &GgufError| matches!(e, GgufError::BadMagic { .. });
    r.expect("empty", &[], truncated, &[]);
    r.expect("magic GGUG", &l.with(3, b"G"), bad_magic, &[]);
    r.expect("magic zeros", &l.with(0, &[0; 4]), bad_magic, &[]);
    r.finish(l.data_offset + 64);
}

#[test]
fn byte_flips_and_sets_in_the_header() {
    let l = FileMap::new();
    let mut r = Runner::default();
    for pos in 0..l.header_end {
        let orig = l.bytes[pos];
        for (op, b) in [
            ("xor ff", orig ^ 0xFF),
            ("xor 80", orig ^ 0x80),
            ("set 00", 0),
            ("set 01", 1),
            ("inc", orig.wrapping_add(1)),
        ] {
            if b == orig {
                continue;
            }
            let bytes = l.with(pos, &[b]);
            let label = format!("byte {pos} {op} ({orig:#04x} -> {b:#04x})");
            if pos < 4 {
                r.expect(
                    &label,
                    &bytes,
                    |e| matches!(e, GgufError::BadMagic { .. }),
                    &[],
                );
            } else if pos < 8 {
                let v = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
                if v == 2 {
                    if !matches!(r.run(&label, &bytes), Some(Ok(_)) | None) {
                        r.failures.push(format!("{label}: version 2 must parse"));
                    }
                } else {
                    r.expect(
                        &label,
                        &bytes,
                        |e| matches!(e, GgufError::UnsupportedVersion(_)),
                        &[],
                    );
                }
            } else {
                r.run(&label, &bytes);
            }
        }
    }
    r.finish(4 * l.header_end);
}

#[test]
fn huge_counts_lengths_and_dims() {
    let l = FileMap::new();
    let mut r = Runner::default();
    let len = l.bytes.len() as u64;
    let huge = [u64::MAX, u64::MAX / 2, 1 << 40, 1 << 32, len];
    for v in huge {
        r.expect(
            &format!("tensor count {v}"),
            &l.with(8, &v.to_le_bytes()),
            count_too_large,
            &["tensor count"],
        );
        r.expect(
            &format!("kv count {v}"),
            &l.with(16, &v.to_le_bytes()),
            count_too_large,
            &["metadata count"],
        );
    }
    for (what, at, n) in [
        ("tensor count", 8, TENSORS.len() as u64),
        ("kv count", 16, KEYS.len() as u64),
    ] {
        for v in [0, n - 1, n + 1, n + 2] {
            r.run(&format!("{what} {v}"), &l.with(at, &v.to_le_bytes()));
        }
    }
    // Array lengths, including the inner arrays of the nested one.
    let nested = l.key_value("test.arr.nested");
    let arrays = [
        ("test.arr.str", l.key_value("test.arr.str") + 4),
        ("test.arr.i32", l.key_value("test.arr.i32") + 4),
        ("test.arr.empty", l.key_value("test.arr.empty") + 4),
        ("test.arr.nested", nested + 4),
        ("test.arr.nested", nested + 12 + 4), // [u8; 2]
    ];
    for (key, at) in arrays {
        for v in huge {
            let label = format!("array length of {key} at {at} = {v}");
            r.expect(
                &label,
                &l.with(at, &v.to_le_bytes()),
                count_too_large,
                &[&q(key), "array length"],
            );
        }
        let n = l.read_u64(at);
        for v in [n + 1, n.saturating_sub(1), n + 1000] {
            r.run(
                &format!("array length of {key} = {v}"),
                &l.with(at, &v.to_le_bytes()),
            );
        }
    }
    // String lengths: key names, string values, array elements, tensor names.
    for (i, key) in KEYS.iter().enumerate() {
        let at = find_str(&l.bytes, key);
        for v in huge {
            let label = format!("key name length of {key} = {v}");
            r.expect(
                &label,
                &l.with(at, &v.to_le_bytes()),
                count_too_large,
                &[&format!("metadata key #{i}")],
            );
        }
        for v in [0, key.len() as u64 - 1, key.len() as u64 + 1] {
            r.run(
                &format!("key name length of {key} = {v}"),
                &l.with(at, &v.to_le_bytes()),
            );
        }
    }
    let strings = [
        ("general.architecture", l.key_value("general.architecture")),
        ("test.str", l.key_value("test.str")),
        ("test.arr.str", l.key_value("test.arr.str") + 12),
        ("test.arr.nested", nested + 12 + 14 + 12),
    ];
    for (key, at) in strings {
        for v in huge {
            let label = format!("string length in {key} = {v}");
            r.expect(
                &label,
                &l.with(at, &v.to_le_bytes()),
                count_too_large,
                &[&q(key)],
            );
        }
    }
    for (i, t) in TENSORS.iter().enumerate() {
        let at = l.tensor(t, TensorField::Name);
        for v in huge {
            let label = format!("tensor name length of {t} = {v}");
            r.expect(
                &label,
                &l.with(at, &v.to_le_bytes()),
                count_too_large,
                &[&format!("tensor name #{i}")],
            );
        }
        let nd = l.tensor(t, TensorField::NDims);
        for v in [0u32, 5, 255, 1 << 16, u32::MAX] {
            let label = format!("n_dims of {t} = {v}");
            r.expect(
                &label,
                &l.with(nd, &v.to_le_bytes()),
                bad_shape,
                &[&q(t), "dimensions"],
            );
        }
        for field in [TensorField::Dim(0), TensorField::LastDim] {
            let at = l.tensor(t, field);
            for v in [
                u64::MAX,
                u64::MAX - 31,
                1 << 62,
                1 << 40,
                1 << 33,
                len * 1024,
            ] {
                let label = format!("dim of {t} at {at} = {v}");
                r.expect(
                    &label,
                    &l.with(at, &v.to_le_bytes()),
                    bad_shape_or_data,
                    &[&q(t)],
                );
            }
            r.expect(
                &format!("dim of {t} = 0"),
                &l.with(at, &0u64.to_le_bytes()),
                bad_shape,
                &[&q(t), "zero"],
            );
        }
    }
    r.finish(200);
}

#[test]
fn bad_offsets_types_utf8_duplicates() {
    let l = FileMap::new();
    let mut r = Runner::default();
    let data_len = (l.bytes.len() - l.data_offset) as u64;
    let offsets: Vec<u64> = l
        .tensor_spans
        .iter()
        .map(|s| (s.1 - l.data_offset) as u64)
        .collect();
    for (i, t) in TENSORS.iter().enumerate() {
        let at = l.tensor(t, TensorField::Offset);
        let o = offsets[i];
        for v in [
            u64::MAX,
            u64::MAX - 31,
            u64::MAX - 63, // aligned, end fits in u64, data offset + it does not (found by fuzzing)
            u64::MAX - 31 - 256,
            1 << 40,
            1 << 63,
            data_len,
            data_len + 32,
            o + 1,
            o + 16,
            o + 31,
        ] {
            let label = format!("offset of {t} = {v}");
            r.expect(&label, &l.with(at, &v.to_le_bytes()), bad_data, &[&q(t)]);
        }
        // Overlap with the neighbours.
        for j in [i.wrapping_sub(1), i + 1] {
            if let Some(&other) = offsets.get(j) {
                let label = format!("offset of {t} = offset of {}", TENSORS[j]);
                r.expect(
                    &label,
                    &l.with(at, &other.to_le_bytes()),
                    bad_data,
                    &["overlaps"],
                );
            }
        }
        for v in [0u64, 32, 64, 96, 128, 256, 512] {
            r.run(
                &format!("offset of {t} = {v}"),
                &l.with(at, &v.to_le_bytes()),
            );
        }
        // Unknown tensor type ids, then every known one (sizes change: Ok or Err, no panic).
        let ty = l.tensor(t, TensorField::Type);
        for id in [4u32, 5, 16, 19, 23, 29, 31, 39, 40, 1000, u32::MAX] {
            let label = format!("type of {t} = {id}");
            r.expect(
                &label,
                &l.with(ty, &id.to_le_bytes()),
                |e| matches!(e, GgufError::UnknownTensorType { .. }),
                &[&q(t)],
            );
        }
        for id in (0..=30u32).filter(|id| GgmlType::from_id(*id).is_some()) {
            r.run(
                &format!("type of {t} = {id}"),
                &l.with(ty, &id.to_le_bytes()),
            );
        }
        // Bad UTF-8 in the name.
        let name = l.tensor(t, TensorField::Name) + 8;
        let label = format!("bad UTF-8 in tensor name {t}");
        r.expect(
            &label,
            &l.with(name, &[0xFF]),
            |e| matches!(e, GgufError::BadUtf8 { .. }),
            &[&format!("tensor name #{i}")],
        );
    }
    let unknown_value = |e: &GgufError| matches!(e, GgufError::UnknownValueType { .. });
    let bad_utf8 = |e: &GgufError| matches!(e, GgufError::BadUtf8 { .. });
    for (i, key) in KEYS.iter().enumerate() {
        let ty = l.key_type(key);
        for id in [13u32, 14, 255, 1 << 16, u32::MAX] {
            r.expect(
                &format!("type of {key} = {id}"),
                &l.with(ty, &id.to_le_bytes()),
                unknown_value,
                &[&q(key)],
            );
        }
        for id in 0..=12u32 {
            r.run(
                &format!("type of {key} = {id}"),
                &l.with(ty, &id.to_le_bytes()),
            );
        }
        let name = find_str(&l.bytes, key) + 8;
        for (what, at) in [("first", name), ("last", name + key.len() - 1)] {
            for b in [0xFFu8, 0xC3, 0x80] {
                let label = format!("bad UTF-8 {b:#x} at the {what} byte of key {key}");
                r.expect(
                    &label,
                    &l.with(at, &[b]),
                    bad_utf8,
                    &[&format!("metadata key #{i}")],
                );
            }
        }
    }
    for key in [
        "test.arr.str",
        "test.arr.i32",
        "test.arr.nested",
        "test.arr.empty",
    ] {
        let at = l.key_value(key);
        for id in [13u32, 99, u32::MAX] {
            r.expect(
                &format!("element type of {key} = {id}"),
                &l.with(at, &id.to_le_bytes()),
                unknown_value,
                &[&q(key)],
            );
        }
        for id in 0..=12u32 {
            r.run(
                &format!("element type of {key} = {id}"),
                &l.with(at, &id.to_le_bytes()),
            );
        }
    }
    // Bad UTF-8 in string values ("héllo" has a two-byte é at index 1..3).
    let s = l.key_value("test.str") + 8;
    for (label, at, b) in [
        ("lone continuation", s, 0x80u8),
        ("cut sequence", s + 2, 0x41),
        ("ff", s + 4, 0xFF),
    ] {
        r.expect(
            &format!("test.str: {label}"),
            &l.with(at, &[b]),
            bad_utf8,
            &[&q("test.str")],
        );
    }
    let elem = l.key_value("test.arr.str") + 12 + 8 + 5 + 8; // "beta"
    r.expect(
        "bad UTF-8 in array element",
        &l.with(elem, &[0xFE]),
        bad_utf8,
        &[&q("test.arr.str")],
    );
    // Duplicates made by renaming.
    let i8key = find_str(&l.bytes, "test.i8val") + 8;
    let dup_key = |e: &GgufError| matches!(e, GgufError::DuplicateKey { .. });
    r.expect(
        "duplicate key",
        &l.with(i8key, b"test.u8val"),
        dup_key,
        &[&q("test.u8val")],
    );
    let f16name = l.tensor("t.f16", TensorField::Name) + 8;
    let dup_tensor = |e: &GgufError| matches!(e, GgufError::DuplicateTensor { .. });
    r.expect(
        "duplicate tensor",
        &l.with(f16name, b"t.f32"),
        dup_tensor,
        &[&q("t.f32")],
    );
    // Bool bytes other than 0/1.
    let b = l.key_value("test.bool");
    for v in [2u8, 0x80, 0xFF] {
        let label = format!("bool byte {v}");
        r.expect(
            &label,
            &l.with(b, &[v]),
            |e| matches!(e, GgufError::BadKey { .. }),
            &[&q("test.bool")],
        );
    }
    // general.alignment: invalid values, and valid ones that move the data section.
    let a = l.key_value("general.alignment");
    for v in [0u32, 3, 48, 100, u32::MAX] {
        r.expect(
            &format!("alignment {v}"),
            &l.with(a, &v.to_le_bytes()),
            |e| matches!(e, GgufError::BadAlignment(_)),
            &[],
        );
    }
    for v in [1u32, 2, 8, 16, 64, 1 << 20, 1 << 31] {
        r.run(&format!("alignment {v}"), &l.with(a, &v.to_le_bytes()));
    }
    let at = l.key_type("general.alignment");
    r.expect(
        "alignment as i32",
        &l.with(at, &5u32.to_le_bytes()),
        |e| matches!(e, GgufError::BadAlignment(_)),
        &[],
    );
    // Versions.
    for v in [0u32, 1, 4, 0x0300_0000, u32::MAX] {
        let label = format!("version {v}");
        r.expect(
            &label,
            &l.with(4, &v.to_le_bytes()),
            |e| matches!(e, GgufError::UnsupportedVersion(_)),
            &[],
        );
    }
    if !matches!(
        r.run("version 2", &l.with(4, &2u32.to_le_bytes())),
        Some(Ok(_))
    ) {
        r.failures.push("version 2 must parse".into());
    }
    r.finish(300);
}

#[test]
fn nesting_and_random_splats() {
    let mut r = Runner::default();
    let max = cinder_gguf::MAX_ARRAY_NESTING;
    for depth in 1..=max {
        if !matches!(
            r.run(&format!("nesting {depth}"), &nested_file(depth, 0)),
            Some(Ok(_))
        ) {
            r.failures.push(format!("{depth} nested arrays must parse"));
        }
        r.expect(
            &format!("nesting {depth}, huge count"),
            &nested_file(depth, u64::MAX),
            count_too_large,
            &[&q("deep")],
        );
    }
    for depth in [max + 1, max + 2, 64] {
        let nesting = |e: &GgufError| matches!(e, GgufError::NestingTooDeep { .. });
        r.expect(
            &format!("nesting {depth}"),
            &nested_file(depth, 0),
            nesting,
            &[&q("deep")],
        );
    }
    // Deterministic random multi-byte splats, mostly in the header.
    let l = FileMap::new();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let specials = [u64::MAX, 1 << 40, 1 << 63, 0, 1 << 32, 31];
    for i in 0..600 {
        let mut bytes = l.bytes.clone();
        let n = 1 + (next() % 4) as usize;
        for _ in 0..n {
            let span = if next() % 4 == 0 {
                bytes.len()
            } else {
                l.header_end
            };
            let at = (next() as usize) % span;
            if i % 3 == 0 && at + 8 <= bytes.len() {
                let v = specials[(next() % specials.len() as u64) as usize];
                bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
            } else {
                bytes[at] = next() as u8;
            }
        }
        if i % 5 == 0 {
            let cut = (next() as usize) % bytes.len();
            bytes.truncate(cut);
        }
        r.run(&format!("random splat #{i}"), &bytes);
    }
    r.finish(600);
}

#[test]
fn open_from_disk_matches_from_bytes() {
    let l = FileMap::new();
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("ok.gguf", l.bytes.clone()),
        ("cut.gguf", l.bytes[..l.min_len - 1].to_vec()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let a = GgufFile::open(&path)
            .map(|f| f.tensors().len())
            .map_err(|e| e.to_string());
        let b = GgufFile::from_bytes(bytes)
            .map(|f| f.tensors().len())
            .map_err(|e| e.to_string());
        assert_eq!(a, b, "{name}");
    }
    let e = GgufFile::open(dir.path().join("missing.gguf")).unwrap_err();
    assert!(
        matches!(e, GgufError::Io { .. }) && e.to_string().contains("missing.gguf"),
        "{e}"
    );
}

/// The fuzz target's seed corpus: written to `CINDER_GGUF_FUZZ_CORPUS` when it names a directory
/// (`.ci/run` then runs the fuzz target over it), else to a temporary one; every seed must be a
/// valid file that the fuzz body reads through (a corpus of broken seeds would start the fuzzer
/// from nothing).
#[test]
fn write_fuzz_seed_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("CINDER_GGUF_FUZZ_CORPUS")
        .map_or_else(|| tmp.path().to_path_buf(), std::path::PathBuf::from);
    std::fs::create_dir_all(&dir).unwrap();
    let l = FileMap::new();
    std::fs::write(dir.join("base.gguf"), &l.bytes).unwrap();
    std::fs::write(
        dir.join("nested.gguf"),
        nested_file(cinder_gguf::MAX_ARRAY_NESTING, 0),
    )
    .unwrap();
    let mut w = base_writer();
    w.set_alignment(64).unwrap();
    std::fs::write(dir.join("align64.gguf"), w.to_bytes().unwrap()).unwrap();
    for ty in [
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q5_K,
        GgmlType::BF16,
    ] {
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", Value::String("llama".into()))
            .unwrap();
        let n = ty.block_size();
        w.add_tensor(
            "w",
            &[n, 2],
            ty,
            pattern(2 * ty.type_size() as usize, ty.id() as u8),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("{}.gguf", ty.name())),
            w.to_bytes().unwrap(),
        )
        .unwrap();
    }
    let mut seeds = 0;
    for name in [
        "base", "nested", "align64", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q5_K", "BF16",
    ] {
        let bytes = std::fs::read(dir.join(format!("{name}.gguf"))).unwrap();
        fuzz_body::parse_and_dequantize(&bytes)
            .unwrap_or_else(|e| panic!("seed {name}.gguf does not parse: {e}"));
        seeds += 1;
    }
    println!("{seeds} seeds written to {}", dir.display());
}

// ---- the real model -------------------------------------------------------------------------------

const SMOLLM2_HEAD: &[u8] = include_bytes!("data/smollm2_head.bin");

fn smollm2_head() -> Vec<(String, Vec<f32>)> {
    let b = SMOLLM2_HEAD;
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
    assert_eq!(&b[..4], b"CSMH");
    let mut at = 8;
    let mut out = Vec::new();
    for _ in 0..u32_at(4) {
        let len = u32_at(at);
        let name = String::from_utf8(b[at + 4..at + 4 + len].to_vec()).unwrap();
        at += 4 + len;
        let n = u32_at(at);
        at += 4;
        let v = b[at..at + 4 * n]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        at += 4 * n;
        out.push((name, v));
    }
    out
}

#[test]
fn real_model_smollm2() {
    // The catalog's sha256-verified copy (pulled on first use).
    let path = cinder_catalog::resolve("smollm2-135m").unwrap().path;
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(f.architecture().unwrap(), "llama");
    let head = smollm2_head();
    assert_eq!(head.len(), 2);
    for (name, want) in &head {
        let t = f.require_tensor(name).unwrap();
        let expected_type = if name == "token_embd.weight" {
            GgmlType::Q8_0
        } else {
            GgmlType::Q4_1
        };
        assert_eq!(t.ggml_type, expected_type, "{name}");
        let bytes = f.tensor_data(t);
        let n_bytes =
            want.len() / t.ggml_type.block_size() as usize * t.ggml_type.type_size() as usize;
        let mut got = vec![0.0f32; want.len()];
        dequantize_row_into(t.ggml_type, &bytes[..n_bytes], &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{name}[{i}]: {g} vs {w}");
        }
    }
    let q = f.require_tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(q.dims, vec![576, 576]);
    let all = f.dequantize(q).unwrap();
    assert_eq!(&all[..1024], &head[1].1[..]);
    assert!(all.iter().all(|v| v.is_finite()));
}
