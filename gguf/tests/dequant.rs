//! Dequantization against reference vectors made by the `gguf` Python package.
//!
//! The vectors are in `tests/data/dequant_vectors.bin`, written by `tests/data/make_dequant_vectors.py`
//! (see its header for the format and where each expected value comes from). Every value must match
//! **bit for bit**: Cinder's decoders perform the same f32 operations in the same order as ggml's scalar
//! code and numpy (no FMA contraction on either side), so the bound is 0 ulp. The one allowance is NaN,
//! whose payload numpy may quiet differently: a NaN must decode to a NaN.

use cinder_gguf::dequant::{
    BLOCK_Q4_K_BYTES, QK_K, dequantize, dequantize_block_q4_k, dequantize_row_into,
};
use cinder_gguf::{GgmlType, GgufError};

const VECTORS: &[u8] = include_bytes!("data/dequant_vectors.bin");

struct Case {
    label: String,
    ty: GgmlType,
    raw: Vec<u8>,
    expected: Vec<f32>,
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
}

fn cases() -> Vec<Case> {
    let mut r = Reader(VECTORS);
    assert_eq!(r.take(4), b"CDQV");
    assert_eq!(r.u32(), 1, "fixture format version");
    let n = r.u32();
    let mut out = Vec::new();
    for _ in 0..n {
        let len = r.u32() as usize;
        let label = String::from_utf8(r.take(len).to_vec()).unwrap();
        let id = r.u32();
        let ty = GgmlType::from_id(id).unwrap_or_else(|| panic!("{label}: type id {id}"));
        let n_el = r.u32() as usize;
        let n_bytes = r.u32() as usize;
        let raw = r.take(n_bytes).to_vec();
        let expected = r
            .take(4 * n_el)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        out.push(Case {
            label,
            ty,
            raw,
            expected,
        });
    }
    assert!(r.0.is_empty(), "trailing fixture bytes");
    out
}

fn assert_bit_exact(label: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{label}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let same = if w.is_nan() {
            g.is_nan()
        } else {
            g.to_bits() == w.to_bits()
        };
        assert!(
            same,
            "{label}: element {i}: got {g:e} ({:#010x}), want {w:e} ({:#010x})",
            g.to_bits(),
            w.to_bits()
        );
    }
}

#[test]
fn every_type_matches_the_reference_bit_for_bit() {
    let cases = cases();
    let mut covered: Vec<GgmlType> = cases.iter().map(|c| c.ty).collect();
    covered.sort();
    covered.dedup();
    use GgmlType::*;
    for ty in [
        F32, F16, BF16, F64, I8, I16, I32, I64, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K,
        Q4_K, Q5_K, Q6_K, Q8_K,
    ] {
        assert!(covered.contains(&ty), "no reference vector for {ty}");
    }
    for c in &cases {
        let got = dequantize(c.ty, &c.raw, c.expected.len())
            .unwrap_or_else(|e| panic!("{}: {e}", c.label));
        assert_bit_exact(&c.label, &got, &c.expected);
        // The quantized cases must not be trivial: most values differ from zero.
        let nonzero = c.expected.iter().filter(|v| **v != 0.0).count();
        assert!(nonzero * 2 > c.expected.len(), "{}: mostly zeros", c.label);
    }
    println!("{} reference cases, {} types", cases.len(), covered.len());
}

#[test]
fn row_into_matches_block_by_block() {
    // Decoding any whole-block prefix, or one block at a time, gives the same values as the whole.
    for c in cases() {
        let (bs, ts) = (c.ty.block_size() as usize, c.ty.type_size() as usize);
        let n_blocks = c.raw.len() / ts;
        let mut out = vec![0.0f32; bs];
        for b in 0..n_blocks {
            dequantize_row_into(c.ty, &c.raw[b * ts..(b + 1) * ts], &mut out).unwrap();
            assert_bit_exact(
                &format!("{} block {b}", c.label),
                &out,
                &c.expected[b * bs..(b + 1) * bs],
            );
        }
    }
}

#[test]
fn per_block_helper_is_the_row_decoder() {
    let c = cases()
        .into_iter()
        .find(|c| c.ty == GgmlType::Q4_K)
        .unwrap();
    let block: &[u8; BLOCK_Q4_K_BYTES] = c.raw[..BLOCK_Q4_K_BYTES].try_into().unwrap();
    let mut y = [0.0f32; QK_K];
    dequantize_block_q4_k(block, &mut y);
    assert_bit_exact("Q4_K helper", &y, &c.expected[..QK_K]);
}

#[test]
fn reference_buffers_with_wrong_sizes_are_refused() {
    for c in cases() {
        let n = c.expected.len();
        let short = &c.raw[..c.raw.len() - 1];
        let e = dequantize(c.ty, short, n).unwrap_err();
        assert!(matches!(e, GgufError::Dequant { .. }), "{}: {e}", c.label);
        assert!(e.to_string().contains(c.ty.name()), "{}: {e}", c.label);
        if c.ty.block_size() > 1 {
            let e = dequantize(c.ty, &c.raw, n - 1).unwrap_err();
            assert!(e.to_string().contains("multiple of the block size"), "{e}");
        }
        let mut long = c.raw.clone();
        long.push(0);
        assert!(dequantize(c.ty, &long, n).is_err());
        let mut out = vec![0.0; n + c.ty.block_size() as usize];
        assert!(dequantize_row_into(c.ty, &c.raw, &mut out).is_err());
    }
}
