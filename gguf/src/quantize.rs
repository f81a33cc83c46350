//! Reference quantizers: f32 rows into GGUF block formats, producing the same blocks as ggml's
//! `quantize_row_*_ref` (what `llama-quantize` writes for these types without an importance matrix).
//!
//! Covered: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, and the K-quants Q4_K, Q5_K, Q6_K (in
//! `kquant`). Q2_K/Q3_K and the i-quants are not implemented: asking for one is an error.

use half::{bf16, f16};

use crate::dequant::{BLOCK_Q4_0_BYTES, BLOCK_Q8_0_BYTES};
use crate::error::{GgufError, Result};
use crate::kquant;
use crate::types::GgmlType;

/// Values per 32-wide block.
const QK: usize = 32;

/// Whether [`quantize`] produces `ty`.
pub fn supports(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q4_K | Q5_K | Q6_K
    )
}

fn err(ty: GgmlType, reason: impl Into<String>) -> GgufError {
    GgufError::Quantize {
        ty: ty.name().to_string(),
        reason: reason.into(),
    }
}

fn put_f16(out: &mut Vec<u8>, v: f32) {
    out.extend_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// `amax` and the value of largest magnitude (its sign kept), first one on ties, as ggml scans.
fn signed_max(b: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in b {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// C's float -> int8 conversion (truncation toward zero), for values the callers keep in range.
fn trunc_i8(v: f32) -> i32 {
    v.trunc() as i32
}

fn q8_0(b: &[f32], out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + BLOCK_Q8_0_BYTES, 0);
    quantize_block_q8_0(b, &mut out[at..]);
}

/// One Q8_0 block (32 values) written into `out` (34 bytes), as ggml's `quantize_row_q8_0_ref`:
/// `d = amax / 127`, each value `round(x / d)`.
pub fn quantize_block_q8_0(b: &[f32], out: &mut [u8]) {
    let amax = b[..QK].iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
    // roundf: half away from zero
    for (o, &v) in out[2..2 + QK].iter_mut().zip(&b[..QK]) {
        *o = ((v * id).round() as i32) as i8 as u8;
    }
}

fn q4_0(b: &[f32], out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + BLOCK_Q4_0_BYTES, 0);
    quantize_block_q4_0(b, &mut out[at..]);
}

/// One Q4_0 block (32 values) written into `out` (18 bytes), as ggml's `quantize_row_q4_0_ref`:
/// `d = max / -8` (`max` the value of largest magnitude), nibbles `x / d + 8` (values `j` and
/// `j + 16` share byte `j`).
pub fn quantize_block_q4_0(b: &[f32], out: &mut [u8]) {
    let (_, max) = signed_max(&b[..QK]);
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
    for j in 0..QK / 2 {
        let x0 = trunc_i8(b[j] * id + 8.5).min(15);
        let x1 = trunc_i8(b[j + QK / 2] * id + 8.5).min(15);
        out[2 + j] = (x0 | (x1 << 4)) as u8;
    }
}

fn q4_1(b: &[f32], out: &mut Vec<u8>) {
    let min = b.iter().copied().fold(f32::MAX, f32::min);
    let max = b.iter().copied().fold(-f32::MAX, f32::max);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(out, d);
    put_f16(out, min);
    for j in 0..QK / 2 {
        let x0 = trunc_i8((b[j] - min) * id + 0.5).min(15);
        let x1 = trunc_i8((b[j + QK / 2] - min) * id + 0.5).min(15);
        out.push((x0 | (x1 << 4)) as u8);
    }
}

/// The shared packing of Q5_0/Q5_1: low nibbles in `qs`, fifth bits in a little-endian u32.
fn pack5(q: impl Fn(usize) -> i32, out: &mut Vec<u8>) {
    let mut qh = 0u32;
    let mut qs = [0u8; QK / 2];
    for (j, byte) in qs.iter_mut().enumerate() {
        let (x0, x1) = (q(j), q(j + QK / 2));
        *byte = ((x0 & 0x0F) | ((x1 & 0x0F) << 4)) as u8;
        qh |= (((x0 & 0x10) >> 4) as u32) << j;
        qh |= (((x1 & 0x10) >> 4) as u32) << (j + QK / 2);
    }
    out.extend_from_slice(&qh.to_le_bytes());
    out.extend_from_slice(&qs);
}

fn q5_0(b: &[f32], out: &mut Vec<u8>) {
    let (_, max) = signed_max(b);
    let d = max / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(out, d);
    pack5(|j| trunc_i8(b[j] * id + 16.5).min(31), out);
}

fn q5_1(b: &[f32], out: &mut Vec<u8>) {
    let min = b.iter().copied().fold(f32::MAX, f32::min);
    let max = b.iter().copied().fold(-f32::MAX, f32::max);
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(out, d);
    put_f16(out, min);
    // (uint8_t)(x + 0.5f): truncation, in range by construction
    pack5(|j| trunc_i8((b[j] - min) * id + 0.5), out);
}

/// Quantizes `x` (rows of `row_len` values, GGUF element order) into `ty`'s blocks.
pub fn quantize(ty: GgmlType, x: &[f32], row_len: usize) -> Result<Vec<u8>> {
    if !supports(ty) {
        return Err(err(
            ty,
            "not implemented (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
        ));
    }
    let bs = ty.block_size() as usize;
    if row_len == 0 || !row_len.is_multiple_of(bs) || !x.len().is_multiple_of(row_len) {
        return Err(err(
            ty,
            format!(
                "{} values in rows of {row_len}: rows must be whole blocks of {bs}",
                x.len()
            ),
        ));
    }
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(err(
            ty,
            format!("value {} at index {i} is not finite", x[i]),
        ));
    }
    let cap = ty.bytes_for(x.len() as u64).unwrap_or(0) as usize;
    let mut out = Vec::with_capacity(cap);
    match ty {
        GgmlType::F32 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => x.iter().for_each(|&v| put_f16(&mut out, v)),
        GgmlType::BF16 => x
            .iter()
            .for_each(|&v| out.extend_from_slice(&bf16::from_f32(v).to_bits().to_le_bytes())),
        _ => {
            let f: fn(&[f32], &mut Vec<u8>) = match ty {
                GgmlType::Q8_0 => q8_0,
                GgmlType::Q4_0 => q4_0,
                GgmlType::Q4_1 => q4_1,
                GgmlType::Q5_0 => q5_0,
                GgmlType::Q4_K => kquant::q4_k,
                GgmlType::Q5_K => kquant::q5_k,
                GgmlType::Q6_K => kquant::q6_k,
                _ => q5_1,
            };
            x.chunks_exact(bs).for_each(|b| f(b, &mut out));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dequant::dequantize;

    fn sample(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as f32 * std::f32::consts::FRAC_1_SQRT_2).sin() * 3.0)
                    * if i.is_multiple_of(29) { 4.0 } else { 1.0 }
            })
            .collect()
    }

    #[test]
    fn round_trips_within_half_a_step() {
        let x = sample(32 * 16);
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::F16,
        ] {
            let q = quantize(ty, &x, 64).unwrap();
            assert_eq!(q.len() as u64, ty.bytes_for(x.len() as u64).unwrap());
            let y = dequantize(ty, &q, x.len()).unwrap();
            for (b, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
                let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let levels = match ty {
                    GgmlType::Q8_0 => 127.0,
                    GgmlType::Q4_0 | GgmlType::Q4_1 => 7.5,
                    GgmlType::F16 => 1000.0,
                    _ => 15.5,
                };
                // one step of the block's grid (plus f16 rounding of the scale)
                let step = 2.0 * amax / levels;
                for (a, b2) in xb.iter().zip(yb) {
                    assert!(
                        (a - b2).abs() <= step * 0.51 + 1e-3,
                        "{} block {b}: {a} vs {b2}",
                        ty.name()
                    );
                }
            }
        }
    }

    #[test]
    fn k_quants_round_trip_within_their_grid() {
        let x = sample(256 * 6);
        for (ty, levels) in [
            (GgmlType::Q4_K, 15.0f32),
            (GgmlType::Q5_K, 31.0),
            (GgmlType::Q6_K, 63.0),
        ] {
            let q = quantize(ty, &x, 512).unwrap();
            assert_eq!(q.len() as u64, ty.bytes_for(x.len() as u64).unwrap());
            let y = dequantize(ty, &q, x.len()).unwrap();
            // Sub-block scales are 6- or 8-bit multiples of a super-block scale, so bound the
            // error by a step of the super-block's range with room for that rounding.
            for (xb, yb) in x.chunks(256).zip(y.chunks(256)) {
                let (lo, hi) = xb
                    .iter()
                    .fold((0.0f32, 0.0f32), |(l, h), &v| (l.min(v), h.max(v)));
                let step = (hi - lo) / levels;
                let worst = xb
                    .iter()
                    .zip(yb)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert!(worst <= step, "{}: error {worst} > step {step}", ty.name());
            }
        }
    }

    #[test]
    fn bad_requests_are_errors() {
        assert!(
            quantize(GgmlType::Q3_K, &[0.0; 256], 256)
                .unwrap_err()
                .to_string()
                .contains("Q3_K")
        );
        assert!(quantize(GgmlType::Q8_0, &[0.0; 48], 48).is_err());
        assert!(
            quantize(GgmlType::Q8_0, &[f32::NAN; 32], 32)
                .unwrap_err()
                .to_string()
                .contains("finite")
        );
        // all-zero blocks are fine (d = 0)
        let q = quantize(GgmlType::Q4_0, &[0.0; 32], 32).unwrap();
        assert!(
            dequantize(GgmlType::Q4_0, &q, 32)
                .unwrap()
                .iter()
                .all(|&v| v == 0.0)
        );
    }
}
