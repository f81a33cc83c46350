//! The packed layout of Q4_K ([`crate::packed`] for the 32-wide formats): 8 weight rows interleaved
//! per 256-value super-block, so one group kernel call multiplies 8 rows with up to 4 activation
//! rows, sharing the nibble unpacking among the activation rows and the scale, min and float work
//! among the 8 weight rows (the row-at-a-time tile does that work per row).
//!
//! One chunk per (group of 8 rows, super-block), [`KCHUNK`] bytes (the GGUF rows' own size plus 32
//! bytes for the unpacked 6-bit scales and mins, +2.8%):
//!
//! | bytes | what |
//! |---|---|
//! | 0..16 | f16 `d` of rows 0..8 |
//! | 16..32 | f16 `dmin` of rows 0..8 |
//! | 32..96 | scale of sub-block `s`, row `r` at `32 + 8s + r` (6 bits, unpacked) |
//! | 96..160 | min of sub-block `s`, row `r` at `96 + 8s + r` |
//! | 160..1184 | quants: unit `(t, c)` (32 bytes) at `160 + 32·(4t + c)` |
//!
//! Unit `(t, c)` holds, for row `r` at bytes `4r..4r+4`, the row's quant bytes `32c + 4t ..+4`:
//! their low nibbles are values `64c + 4t ..+4` (sub-block `2c`), their high nibbles values
//! `64c + 32 + 4t ..+4` (sub-block `2c + 1`). Everything in unit `(t, ·)` belongs to lane `t` of
//! the row kernels (lane `t` of a super-block: values `4t..4t+4` of each of its 8 sub-blocks, each
//! 4-product sum times its sub-block's scale), so a kernel sums a lane's integers over the 4 units
//! of `t` and FMA-accumulates it with the super-block's scale, exactly as [`crate::scalar::dot_q4_k`]
//! does per row: the outputs equal the row kernels' bit for bit.

use crate::act::{BlockQ8K, QK_K};
use crate::packed::ROWS;
use crate::scalar::{add_kmins, hsum8, kmins_of_row, unpack_scales_k4};

/// Bytes of one packed (group, super-block) chunk.
pub const KCHUNK: usize = 160 + 8 * 128;

/// Source bytes of one Q4_K super-block.
const SRC: usize = 144;

fn f16_at(c: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([c[at], c[at + 1]]).to_f32()
}

/// Writes row `r`'s super-block `src` (144 GGUF bytes) into its group's chunk `dst`.
pub(crate) fn pack_block(src: &[u8], r: usize, dst: &mut [u8]) {
    dst[2 * r..2 * r + 2].copy_from_slice(&src[..2]);
    dst[16 + 2 * r..16 + 2 * r + 2].copy_from_slice(&src[2..4]);
    let sm = unpack_scales_k4(&src[4..16]);
    for s in 0..8 {
        dst[32 + 8 * s + r] = sm[s];
        dst[96 + 8 * s + r] = sm[8 + s];
    }
    let qs = &src[16..SRC];
    for t in 0..8 {
        for c in 0..4 {
            let at = 160 + 32 * (4 * t + c) + 4 * r;
            dst[at..at + 4].copy_from_slice(&qs[32 * c + 4 * t..32 * c + 4 * t + 4]);
        }
    }
}

/// Row `r`'s 256 quant values (0..16) of one chunk, in element order.
fn values(c: &[u8], r: usize) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for t in 0..8 {
        for cc in 0..4 {
            for i in 0..4 {
                let byte = c[160 + 32 * (4 * t + cc) + 4 * r + i];
                q[64 * cc + 4 * t + i] = byte & 0x0F;
                q[64 * cc + 32 + 4 * t + i] = byte >> 4;
            }
        }
    }
    q
}

/// Row `r`'s values of one chunk dequantized (`cinder_gguf`'s Q4_K formula, operation for
/// operation).
pub(crate) fn dequantize_block(c: &[u8], r: usize, y: &mut [f32]) {
    let (d, dmin) = (f16_at(c, 2 * r), f16_at(c, 16 + 2 * r));
    let q = values(c, r);
    for s in 0..8 {
        let d1 = d * c[32 + 8 * s + r] as f32;
        let m1 = dmin * c[96 + 8 * s + r] as f32;
        for l in 0..32 {
            y[32 * s + l] = d1 * q[32 * s + l] as f32 - m1;
        }
    }
}

/// The portable twin of the group kernels: each row's lanes from the chunk's values, multiplied as
/// [`crate::scalar::dot_q4_k`] multiplies a GGUF row.
pub(crate) fn scalar_group(gw: &[u8], x: &[&[BlockQ8K]], out: &mut [[f32; ROWS]]) {
    for (xr, o) in x.iter().zip(out.iter_mut()) {
        for (r, v) in o.iter_mut().enumerate() {
            let mut acc = [0.0f32; 8];
            let mut accm = [0.0f32; 4];
            for (c, xb) in gw.chunks_exact(KCHUNK).zip(xr.iter()) {
                let q = values(c, r);
                let mut lanes = [0i32; 8];
                for s in 0..8 {
                    let sc = c[32 + 8 * s + r] as i32;
                    for (t, lane) in lanes.iter_mut().enumerate() {
                        let p: i32 = (32 * s + 4 * t..32 * s + 4 * t + 4)
                            .map(|i| q[i] as i32 * xb.qs[i] as i32)
                            .sum();
                        *lane += sc * p;
                    }
                }
                let d = xb.d * f16_at(c, 2 * r);
                for (a, l) in acc.iter_mut().zip(lanes) {
                    *a = d.mul_add(l as f32, *a);
                }
                let mins: [u8; 8] = std::array::from_fn(|s| c[96 + 8 * s + r]);
                kmins_of_row(&mins, -xb.d * f16_at(c, 16 + 2 * r), xb, &mut accm);
            }
            *v = add_kmins(hsum8(acc), accm);
        }
    }
}

/// Bytes of one packed Q6_K (group, super-block) chunk: the GGUF rows' own size.
///
/// | bytes | what |
/// |---|---|
/// | 0..16 | f16 `d` of rows 0..8 |
/// | 16..144 | scale `i` (of values `16i..16i+16`), row `r` at `16 + 8i + r` (i8) |
/// | 144..1680 | unit `(n, t)` (96 bytes) at `144 + 96·(8n + t)`: three 32-byte parts `A`, `B`, `H` |
///
/// Row `r`'s bytes `4r..4r+4` of `A`, `B` and `H` are its `ql[64n + 4t..]`, `ql[64n + 32 + 4t..]`
/// and `qh[32n + 4t..]`: the 6-bit values `128n + 32j + 4t ..+4` for `j = 0..4` (GGUF's own
/// split of low nibbles and high bit pairs), all of them in lane `t` of the row kernels.
pub const KCHUNK6: usize = 144 + 16 * 96;

/// Source bytes of one Q6_K super-block.
const SRC6: usize = 210;

/// Writes row `r`'s Q6_K super-block `src` into its group's chunk `dst`.
pub(crate) fn pack_block_q6(src: &[u8], r: usize, dst: &mut [u8]) {
    dst[2 * r..2 * r + 2].copy_from_slice(&src[208..SRC6]);
    for i in 0..16 {
        dst[16 + 8 * i + r] = src[192 + i];
    }
    for n in 0..2 {
        for t in 0..8 {
            let u = 144 + 96 * (8 * n + t) + 4 * r;
            let ql = 64 * n + 4 * t;
            dst[u..u + 4].copy_from_slice(&src[ql..ql + 4]);
            dst[u + 32..u + 36].copy_from_slice(&src[ql + 32..ql + 36]);
            let qh = 128 + 32 * n + 4 * t;
            dst[u + 64..u + 68].copy_from_slice(&src[qh..qh + 4]);
        }
    }
}

/// Row `r`'s 256 Q6_K values (0..64, before the −32 offset) of one chunk, in element order.
fn values_q6(c: &[u8], r: usize) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for n in 0..2 {
        for t in 0..8 {
            let u = 144 + 96 * (8 * n + t) + 4 * r;
            for i in 0..4 {
                let (a, b, h) = (c[u + i], c[u + 32 + i], c[u + 64 + i]);
                let e = 128 * n + 4 * t + i;
                q[e] = (a & 0x0F) | ((h & 3) << 4);
                q[e + 32] = (b & 0x0F) | (((h >> 2) & 3) << 4);
                q[e + 64] = (a >> 4) | (((h >> 4) & 3) << 4);
                q[e + 96] = (b >> 4) | (((h >> 6) & 3) << 4);
            }
        }
    }
    q
}

/// Row `r`'s values of one Q6_K chunk dequantized (`cinder_gguf`'s formula, operation for
/// operation: `d · scale · (q − 32)`).
pub(crate) fn dequantize_block_q6(c: &[u8], r: usize, y: &mut [f32]) {
    let d = f16_at(c, 2 * r);
    let q = values_q6(c, r);
    for (e, v) in y.iter_mut().enumerate().take(QK_K) {
        let sc = c[16 + 8 * (e / 16) + r] as i8 as f32;
        *v = d * sc * (q[e] as i32 - 32) as f32;
    }
}

/// The portable twin of the Q6_K group kernels, as [`crate::scalar::dot_q6_k`] per row.
pub(crate) fn scalar_group_q6(gw: &[u8], x: &[&[BlockQ8K]], out: &mut [[f32; ROWS]]) {
    for (xr, o) in x.iter().zip(out.iter_mut()) {
        for (r, v) in o.iter_mut().enumerate() {
            let mut acc = [0.0f32; 8];
            for (c, xb) in gw.chunks_exact(KCHUNK6).zip(xr.iter()) {
                let q = values_q6(c, r);
                let mut lanes = [0i32; 8];
                for s in 0..8 {
                    for (t, lane) in lanes.iter_mut().enumerate() {
                        let base = 32 * s + 4 * t;
                        let sc = c[16 + 8 * (base / 16) + r] as i8 as i32;
                        let p: i32 = (base..base + 4)
                            .map(|i| (q[i] as i32 - 32) * xb.qs[i] as i32)
                            .sum();
                        *lane += sc * p;
                    }
                }
                let d = xb.d * f16_at(c, 2 * r);
                for (a, l) in acc.iter_mut().zip(lanes) {
                    *a = d.mul_add(l as f32, *a);
                }
            }
            *v = hsum8(acc);
        }
    }
}
