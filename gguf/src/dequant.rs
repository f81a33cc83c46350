//! Scalar reference dequantization for every block format Cinder reads.
//!
//! Reference: ggml's `ggml-quants.c` (`dequantize_row_*`) and the block structs of `ggml-common.h`.
//! Output is in GGUF element order, and each value is computed with the same f32 operations in the same
//! order as ggml's scalar code (`(q as f32) * d`, `d1 * q - m1`, `d * sc * q`), so results are
//! bit-identical to ggml's and to the `gguf` Python package's. Rust never contracts `a * b + c` into an
//! FMA, so no compiler flag can change that.
//!
//! All multi-byte fields are little-endian. `f16` below is an IEEE half (`ggml_half`), converted exactly.
//! Super-block types ("K-quants") hold `QK_K = 256` elements.
//!
//! The per-block functions (`dequantize_block_*`) take one block as a fixed-size byte array and write
//! its elements into a fixed-size output array; they cannot fail and are meant for reuse by the
//! runtime's kernels. [`dequantize_row_into`] and [`dequantize`] check lengths and dispatch on the type.

use crate::error::{GgufError, Result};
use crate::types::GgmlType;

pub use half::{bf16, f16};

/// Elements per block of the 32-element formats (`QK4_0`, `QK4_1`, `QK5_0`, `QK5_1`, `QK8_0`, `QK8_1`).
pub const QK: usize = 32;
/// Elements per super-block of the K-quant formats.
pub const QK_K: usize = 256;

/// Bytes of one `block_q4_0`.
pub const BLOCK_Q4_0_BYTES: usize = 18;
/// Bytes of one `block_q4_1`.
pub const BLOCK_Q4_1_BYTES: usize = 20;
/// Bytes of one `block_q5_0`.
pub const BLOCK_Q5_0_BYTES: usize = 22;
/// Bytes of one `block_q5_1`.
pub const BLOCK_Q5_1_BYTES: usize = 24;
/// Bytes of one `block_q8_0`.
pub const BLOCK_Q8_0_BYTES: usize = 34;
/// Bytes of one `block_q8_1`.
pub const BLOCK_Q8_1_BYTES: usize = 36;
/// Bytes of one `block_q2_K`.
pub const BLOCK_Q2_K_BYTES: usize = 84;
/// Bytes of one `block_q3_K`.
pub const BLOCK_Q3_K_BYTES: usize = 110;
/// Bytes of one `block_q4_K`.
pub const BLOCK_Q4_K_BYTES: usize = 144;
/// Bytes of one `block_q5_K`.
pub const BLOCK_Q5_K_BYTES: usize = 176;
/// Bytes of one `block_q6_K`.
pub const BLOCK_Q6_K_BYTES: usize = 210;
/// Bytes of one `block_q8_K`.
pub const BLOCK_Q8_K_BYTES: usize = 292;

/// An IEEE half given by its bits, as f32 (exact).
#[inline]
pub fn f16_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// A bfloat16 given by its bits, as f32 (exact: the bits become the top half of the f32).
#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    bf16::from_bits(bits).to_f32()
}

/// Reads the little-endian f16 at `b[at..at + 2]` as f32.
#[inline]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Dequantizes `n` elements of type `ty` from `data` into a new vector.
///
/// `data` must hold exactly the bytes of `n` elements (`n` a whole number of blocks); otherwise a
/// [`GgufError::Dequant`] naming the type is returned. The length is checked before anything is
/// allocated, so the output is never larger than a small multiple of `data`.
pub fn dequantize(ty: GgmlType, data: &[u8], n: usize) -> Result<Vec<f32>> {
    check_len(ty, data.len(), n)?;
    let mut out = vec![0.0f32; n];
    dequantize_row_into(ty, data, &mut out)?;
    Ok(out)
}

/// Dequantizes `data` into `out`, whose length gives the element count (a whole number of blocks).
/// Any number of whole blocks can be decoded at once, e.g. one row of a weight matrix.
pub fn dequantize_row_into(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<()> {
    check_len(ty, data.len(), out.len())?;
    match ty {
        GgmlType::F32 => elementwise::<4>(data, out, f32::from_le_bytes),
        GgmlType::F16 => elementwise::<2>(data, out, |b| f16_to_f32(u16::from_le_bytes(b))),
        GgmlType::BF16 => elementwise::<2>(data, out, |b| bf16_to_f32(u16::from_le_bytes(b))),
        GgmlType::F64 => elementwise::<8>(data, out, |b| f64::from_le_bytes(b) as f32),
        GgmlType::I8 => elementwise::<1>(data, out, |b| b[0] as i8 as f32),
        GgmlType::I16 => elementwise::<2>(data, out, |b| i16::from_le_bytes(b) as f32),
        GgmlType::I32 => elementwise::<4>(data, out, |b| i32::from_le_bytes(b) as f32),
        GgmlType::I64 => elementwise::<8>(data, out, |b| i64::from_le_bytes(b) as f32),
        GgmlType::Q4_0 => blocks(data, out, dequantize_block_q4_0),
        GgmlType::Q4_1 => blocks(data, out, dequantize_block_q4_1),
        GgmlType::Q5_0 => blocks(data, out, dequantize_block_q5_0),
        GgmlType::Q5_1 => blocks(data, out, dequantize_block_q5_1),
        GgmlType::Q8_0 => blocks(data, out, dequantize_block_q8_0),
        GgmlType::Q8_1 => blocks(data, out, dequantize_block_q8_1),
        GgmlType::Q2_K => blocks(data, out, dequantize_block_q2_k),
        GgmlType::Q3_K => blocks(data, out, dequantize_block_q3_k),
        GgmlType::Q4_K => blocks(data, out, dequantize_block_q4_k),
        GgmlType::Q5_K => blocks(data, out, dequantize_block_q5_k),
        GgmlType::Q6_K => blocks(data, out, dequantize_block_q6_k),
        GgmlType::Q8_K => blocks(data, out, dequantize_block_q8_k),
    }
    Ok(())
}

/// Checks that `n_bytes` bytes hold exactly `n` elements of `ty`.
fn check_len(ty: GgmlType, n_bytes: usize, n: usize) -> Result<()> {
    let err = |reason: String| GgufError::Dequant {
        ty: ty.to_string(),
        reason,
    };
    let block = ty.block_size();
    if !(n as u64).is_multiple_of(block) {
        return Err(err(format!(
            "{n} elements is not a multiple of the block size {block}"
        )));
    }
    match ty.bytes_for(n as u64) {
        Some(need) if need == n_bytes as u64 => Ok(()),
        Some(need) => Err(err(format!(
            "{n} elements need {need} bytes ({} per block of {block}), got {n_bytes}",
            ty.type_size()
        ))),
        None => Err(err(format!("byte size of {n} elements overflows"))),
    }
}

/// Applies `f` to each `W`-byte element. Lengths were checked by the caller.
#[inline]
fn elementwise<const W: usize>(data: &[u8], out: &mut [f32], f: impl Fn([u8; W]) -> f32) {
    let (chunks, _) = data.as_chunks::<W>();
    for (o, c) in out.iter_mut().zip(chunks) {
        *o = f(*c);
    }
}

/// Applies a per-block decoder to each `B`-byte block, writing `Q` elements each.
#[inline]
fn blocks<const B: usize, const Q: usize>(
    data: &[u8],
    out: &mut [f32],
    f: fn(&[u8; B], &mut [f32; Q]),
) {
    let (ins, _) = data.as_chunks::<B>();
    let (outs, _) = out.as_chunks_mut::<Q>();
    for (i, o) in ins.iter().zip(outs) {
        f(i, o);
    }
}

// ---------------------------------------------------------------------------------------------------
// 32-element formats. Element j of the block is in the low nibble of qs[j] for j < 16 and in the high
// nibble of qs[j - 16] for j >= 16 (4- and 5-bit types); the 5th bit of element j is bit j of qh.
// ---------------------------------------------------------------------------------------------------

/// `block_q4_0` (18 bytes): `d: f16` @0, `qs: [u8; 16]` @2 (two 4-bit quants per byte).
/// `y[j] = (q[j] - 8) * d`.
pub fn dequantize_block_q4_0(b: &[u8; BLOCK_Q4_0_BYTES], y: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    for j in 0..QK / 2 {
        let q = b[2 + j];
        y[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
        y[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// `block_q4_1` (20 bytes): `d: f16` @0, `m: f16` @2, `qs: [u8; 16]` @4. `y[j] = q[j] * d + m`.
pub fn dequantize_block_q4_1(b: &[u8; BLOCK_Q4_1_BYTES], y: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    for j in 0..QK / 2 {
        let q = b[4 + j];
        y[j] = (q & 0x0F) as f32 * d + m;
        y[j + QK / 2] = (q >> 4) as f32 * d + m;
    }
}

/// `block_q5_0` (22 bytes): `d: f16` @0, `qh: [u8; 4]` @2 (one u32, bit j = 5th bit of element j),
/// `qs: [u8; 16]` @6 (low 4 bits). `y[j] = (q[j] - 16) * d`.
pub fn dequantize_block_q5_0(b: &[u8; BLOCK_Q5_0_BYTES], y: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    for j in 0..QK / 2 {
        let q = b[6 + j];
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        y[j] = (((q & 0x0F) | (h0 << 4)) as i32 - 16) as f32 * d;
        y[j + QK / 2] = (((q >> 4) | (h1 << 4)) as i32 - 16) as f32 * d;
    }
}

/// `block_q5_1` (24 bytes): `d: f16` @0, `m: f16` @2, `qh: [u8; 4]` @4, `qs: [u8; 16]` @8.
/// `y[j] = q[j] * d + m`.
pub fn dequantize_block_q5_1(b: &[u8; BLOCK_Q5_1_BYTES], y: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    for j in 0..QK / 2 {
        let q = b[8 + j];
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        y[j] = ((q & 0x0F) | (h0 << 4)) as f32 * d + m;
        y[j + QK / 2] = ((q >> 4) | (h1 << 4)) as f32 * d + m;
    }
}

/// `block_q8_0` (34 bytes): `d: f16` @0, `qs: [i8; 32]` @2. `y[j] = q[j] * d`.
pub fn dequantize_block_q8_0(b: &[u8; BLOCK_Q8_0_BYTES], y: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    for (j, o) in y.iter_mut().enumerate() {
        *o = b[2 + j] as i8 as f32 * d;
    }
}

/// `block_q8_1` (36 bytes): `d: f16` @0, `s: f16` @2 (`d * sum(q)`, unused here), `qs: [i8; 32]` @4.
/// `y[j] = q[j] * d`. (ggml has no `dequantize_row_q8_1`; this is the type's definition.)
pub fn dequantize_block_q8_1(b: &[u8; BLOCK_Q8_1_BYTES], y: &mut [f32; QK]) {
    let d = f16_at(b, 0);
    for (j, o) in y.iter_mut().enumerate() {
        *o = b[4 + j] as i8 as f32 * d;
    }
}

// ---------------------------------------------------------------------------------------------------
// K-quants: a super-block of 256 elements in sub-blocks of 16 or 32, each with its own quantized scale.
// ---------------------------------------------------------------------------------------------------

/// `block_q2_K` (84 bytes): `scales: [u8; 16]` @0 (low nibble: scale, high nibble: min, one per 16
/// elements), `qs: [u8; 64]` @16 (2-bit quants), `d: f16` @80, `dmin: f16` @82.
///
/// Element `128n + 32j + 16h + l` (n < 2, j < 4, h < 2, l < 16) is bits `2j..2j+2` of
/// `qs[32n + 16h + l]`, with sub-block `s = 8n + 2j + h`:
/// `y = (d * (scales[s] & 15)) * q - dmin * (scales[s] >> 4)`.
pub fn dequantize_block_q2_k(b: &[u8; BLOCK_Q2_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    let (scales, qs) = (&b[0..16], &b[16..80]);
    for n in 0..2 {
        for j in 0..4 {
            let shift = 2 * j;
            for h in 0..2 {
                let sc = scales[8 * n + 2 * j + h];
                let dl = d * (sc & 0x0F) as f32;
                let ml = dmin * (sc >> 4) as f32;
                for l in 0..16 {
                    let q = (qs[32 * n + 16 * h + l] >> shift) & 3;
                    y[128 * n + 32 * j + 16 * h + l] = dl * q as f32 - ml;
                }
            }
        }
    }
}

/// The sixteen signed 6-bit scales of a `block_q3_K`, unpacked from its 12 scale bytes `s`: scale `i`
/// has its low 4 bits in `s[i] & 15` (i < 8) or `s[i - 8] >> 4` (i >= 8), and its high 2 bits in
/// bits `2 * (i / 4)..` of `s[8 + i % 4]`; the stored value is offset by 32.
pub fn q3_k_scales(s: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = if i < 8 { s[i] & 0x0F } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = ((low | (high << 4)) as i32 - 32) as i8;
    }
    out
}

/// `block_q3_K` (110 bytes): `hmask: [u8; 32]` @0 (high bits), `qs: [u8; 64]` @32 (low 2 bits),
/// `scales: [u8; 12]` @96 (sixteen 6-bit scales, see [`q3_k_scales`]), `d: f16` @108.
///
/// Element `128n + 32j + 16h + l` takes bits `2j..2j+2` of `qs[32n + 16h + l]` and bit `4n + j` of
/// `hmask[16h + l]`; a *clear* high bit subtracts 4: `q = low - (hbit ? 0 : 4)`, in -4..=3.
/// `y = (d * scale[8n + 2j + h]) * q`.
pub fn dequantize_block_q3_k(b: &[u8; BLOCK_Q3_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(b, 108);
    let (hmask, qs) = (&b[0..32], &b[32..96]);
    let mut sc_bytes = [0u8; 12];
    sc_bytes.copy_from_slice(&b[96..108]);
    let scales = q3_k_scales(&sc_bytes);
    for n in 0..2 {
        for j in 0..4 {
            let shift = 2 * j;
            let m = 1u8 << (4 * n + j);
            for h in 0..2 {
                let dl = d * scales[8 * n + 2 * j + h] as f32;
                for l in 0..16 {
                    let low = ((qs[32 * n + 16 * h + l] >> shift) & 3) as i32;
                    let q = low - if hmask[16 * h + l] & m != 0 { 0 } else { 4 };
                    y[128 * n + 32 * j + 16 * h + l] = dl * q as f32;
                }
            }
        }
    }
}

/// Scale and min `j` (0..8) of a `block_q4_K`/`block_q5_K`, 6 bits each, packed in 12 bytes `q`
/// (ggml's `get_scale_min_k4`): for j < 4, `q[j] & 63` and `q[j + 4] & 63`; for j >= 4 the low 4 bits
/// come from `q[j + 4]` (scale: low nibble, min: high nibble) and the high 2 bits from the top bits of
/// `q[j - 4]` (scale) and `q[j]` (min).
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The 12 packed scale bytes at `b[4..16]` of a Q4_K / Q5_K block.
#[inline]
fn k4_scales(b: &[u8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    s.copy_from_slice(&b[4..16]);
    s
}

/// `block_q4_K` (144 bytes): `d: f16` @0, `dmin: f16` @2, `scales: [u8; 12]` @4 (eight 6-bit
/// scale/min pairs, see [`scale_min_k4`]), `qs: [u8; 128]` @16.
///
/// For chunk c < 4 of 64 elements: element `64c + l` (l < 32) is the low nibble of `qs[32c + l]` with
/// pair `2c`, element `64c + 32 + l` the high nibble with pair `2c + 1`: `y = (d * sc) * q - dmin * m`.
pub fn dequantize_block_q4_k(b: &[u8; BLOCK_Q4_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = k4_scales(b);
    let qs = &b[16..144];
    for c in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * c, &scales);
        let (sc2, m2) = scale_min_k4(2 * c + 1, &scales);
        let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
        for l in 0..32 {
            let q = qs[32 * c + l];
            y[64 * c + l] = d1 * (q & 0x0F) as f32 - m1;
            y[64 * c + 32 + l] = d2 * (q >> 4) as f32 - m2;
        }
    }
}

/// `block_q5_K` (176 bytes): `d: f16` @0, `dmin: f16` @2, `scales: [u8; 12]` @4 (as Q4_K),
/// `qh: [u8; 32]` @16 (5th bits), `qs: [u8; 128]` @48 (low 4 bits).
///
/// As Q4_K, plus: element `64c + l` adds 16 if bit `2c` of `qh[l]` is set, element `64c + 32 + l`
/// if bit `2c + 1` is set.
pub fn dequantize_block_q5_k(b: &[u8; BLOCK_Q5_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = k4_scales(b);
    let (qh, qs) = (&b[16..48], &b[48..176]);
    for c in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * c, &scales);
        let (sc2, m2) = scale_min_k4(2 * c + 1, &scales);
        let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
        let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
        for l in 0..32 {
            let q = qs[32 * c + l];
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[64 * c + l] = d1 * ((q & 0x0F) + h1) as f32 - m1;
            y[64 * c + 32 + l] = d2 * ((q >> 4) + h2) as f32 - m2;
        }
    }
}

/// `block_q6_K` (210 bytes): `ql: [u8; 128]` @0 (low 4 bits), `qh: [u8; 64]` @128 (high 2 bits),
/// `scales: [i8; 16]` @192 (one per 16 elements), `d: f16` @208.
///
/// For half n < 2 and l < 32, with `ql' = ql[64n..]`, `qh' = qh[32n..]`, `sc' = scales[8n..]`:
/// element `128n + 32k + l` (k < 4) has low bits from `ql'[l + 32 (k & 1)]` (low nibble for k < 2,
/// high for k >= 2) and high bits `2k..2k+2` of `qh'[l]`; `q` is offset by 32 and
/// `y = (d * sc'[l / 16 + 2k]) * q`.
pub fn dequantize_block_q6_k(b: &[u8; BLOCK_Q6_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(b, 208);
    for n in 0..2 {
        let ql = &b[64 * n..64 * n + 64];
        let qh = &b[128 + 32 * n..128 + 32 * n + 32];
        let sc = &b[192 + 8 * n..192 + 8 * n + 8];
        for l in 0..32 {
            let is = l / 16;
            let h = qh[l];
            let q1 = ((ql[l] & 0x0F) | ((h & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((h >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((h >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((h >> 6) & 3) << 4)) as i32 - 32;
            let base = 128 * n + l;
            y[base] = d * sc[is] as i8 as f32 * q1 as f32;
            y[base + 32] = d * sc[is + 2] as i8 as f32 * q2 as f32;
            y[base + 64] = d * sc[is + 4] as i8 as f32 * q3 as f32;
            y[base + 96] = d * sc[is + 6] as i8 as f32 * q4 as f32;
        }
    }
}

/// `block_q8_K` (292 bytes): `d: f32` @0 (a full float, unlike the other types), `qs: [i8; 256]` @4,
/// `bsums: [i16; 16]` @260 (sums of 16 quants, unused here). `y[j] = d * q[j]`.
pub fn dequantize_block_q8_k(b: &[u8; BLOCK_Q8_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (j, o) in y.iter_mut().enumerate() {
        *o = d * b[4 + j] as i8 as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [GgmlType; 20] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_K,
        GgmlType::I8,
        GgmlType::I16,
        GgmlType::I32,
        GgmlType::I64,
        GgmlType::F64,
        GgmlType::BF16,
    ];

    #[test]
    fn block_constants_match_type_sizes() {
        let pairs = [
            (GgmlType::Q4_0, BLOCK_Q4_0_BYTES),
            (GgmlType::Q4_1, BLOCK_Q4_1_BYTES),
            (GgmlType::Q5_0, BLOCK_Q5_0_BYTES),
            (GgmlType::Q5_1, BLOCK_Q5_1_BYTES),
            (GgmlType::Q8_0, BLOCK_Q8_0_BYTES),
            (GgmlType::Q8_1, BLOCK_Q8_1_BYTES),
            (GgmlType::Q2_K, BLOCK_Q2_K_BYTES),
            (GgmlType::Q3_K, BLOCK_Q3_K_BYTES),
            (GgmlType::Q4_K, BLOCK_Q4_K_BYTES),
            (GgmlType::Q5_K, BLOCK_Q5_K_BYTES),
            (GgmlType::Q6_K, BLOCK_Q6_K_BYTES),
            (GgmlType::Q8_K, BLOCK_Q8_K_BYTES),
        ];
        for (ty, bytes) in pairs {
            assert_eq!(ty.type_size(), bytes as u64, "{ty}");
        }
    }

    #[test]
    fn wrong_lengths_are_errors_naming_the_type() {
        for ty in ALL {
            let bs = ty.block_size() as usize;
            let ts = ty.type_size() as usize;
            let ok = vec![0u8; 2 * ts];
            assert_eq!(dequantize(ty, &ok, 2 * bs).unwrap().len(), 2 * bs);
            let cases: [(usize, usize); 4] = [
                (2 * ts - 1, 2 * bs),
                (2 * ts + 1, 2 * bs),
                (ts, 2 * bs),
                (0, 1),
            ];
            for (len, n) in cases {
                let e = dequantize(ty, &vec![0u8; len], n).unwrap_err();
                assert!(matches!(e, GgufError::Dequant { .. }), "{ty}: {e}");
                assert!(e.to_string().contains(ty.name()), "{e}");
            }
            if bs > 1 {
                let e = dequantize(ty, &ok, bs + 1).unwrap_err();
                assert!(e.to_string().contains("multiple of the block size"), "{e}");
            }
            let e = dequantize(ty, &ok, usize::MAX).unwrap_err();
            assert!(matches!(e, GgufError::Dequant { .. }), "{ty}: {e}");
            let mut out = vec![0.0; bs];
            assert!(dequantize_row_into(ty, &ok, &mut out).is_err());
            assert!(dequantize_row_into(ty, &ok[..ts], &mut out).is_ok());
        }
        assert!(dequantize(GgmlType::Q4_0, &[], 0).unwrap().is_empty());
    }

    #[test]
    fn q4_0_by_hand() {
        let mut b = [0u8; BLOCK_Q4_0_BYTES];
        b[0..2].copy_from_slice(&f16::from_f32(0.5).to_bits().to_le_bytes());
        b[2] = 0xF0; // element 0: 0 -> -8 * 0.5, element 16: 15 -> 7 * 0.5
        b[3] = 0x98; // element 1: 8 -> 0, element 17: 9 -> 0.5
        let mut y = [0.0; QK];
        dequantize_block_q4_0(&b, &mut y);
        assert_eq!((y[0], y[16], y[1], y[17]), (-4.0, 3.5, 0.0, 0.5));
    }

    #[test]
    fn q3_k_scales_unpack() {
        // Scale i = i (+32 offset): low nibbles and high pairs packed as ggml does.
        let want: Vec<u8> = (0..16u8).map(|i| i * 4 + 1).collect(); // 6-bit raw values
        let mut s = [0u8; 12];
        for (i, &v) in want.iter().enumerate() {
            let low = v & 0x0F;
            if i < 8 {
                s[i] |= low;
            } else {
                s[i - 8] |= low << 4;
            }
            s[8 + i % 4] |= (v >> 4) << (2 * (i / 4));
        }
        let got = q3_k_scales(&s);
        for i in 0..16 {
            assert_eq!(got[i] as i32, want[i] as i32 - 32);
        }
    }
}
