//! Portable reference dot products, one weight row against one activation row.
//!
//! Each function reproduces the arithmetic of the SIMD kernels exactly (the "lane model"), so the SIMD
//! paths are tested against these bit for bit:
//! - Integer products are summed exactly into 8 lanes per block: lane `j` holds the products of values
//!   `4j..4j+4` of every 32-value (sub-)block, times the sub-block's integer scale for K-quants.
//! - Per block, `acc[j] = fma(scale, lane[j] as f32, acc[j])` with `scale = d_w·d_x` in f32.
//! - Block offsets (`m` of Q4_1/Q5_1, `dmin` of K-quants) are accumulated beside the lanes.
//! - The row's result is [`hsum8`] of the lanes plus those offset terms.
//!
//! This is also llama.cpp's AVX2 structure for these types, which keeps Cinder's sums close to the
//! reference outputs it is tested against.

// The loops index several arrays by the same position on purpose: the index arithmetic is the lane
// layout the SIMD kernels reproduce.
#![allow(clippy::needless_range_loop)]

use half::f16;

use crate::act::{BlockQ8, BlockQ8K, QK, QK_K};

/// ggml's `hsum_float_8` order: halves, then pairs, then the last two.
#[inline]
pub fn hsum8(a: [f32; 8]) -> f32 {
    let r = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    let r = [r[0] + r[2], r[1] + r[3]];
    r[0] + r[1]
}

#[inline]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Lanes of one 32-value block: lane `j` = Σ_{i=4j}^{4j+3} w_i·x_i.
#[inline]
fn lanes32(w: &[i32; QK], x: &[i8; QK]) -> [i32; 8] {
    let mut l = [0i32; 8];
    for (j, lane) in l.iter_mut().enumerate() {
        for i in 4 * j..4 * j + 4 {
            *lane += w[i] * x[i] as i32;
        }
    }
    l
}

#[inline]
fn fma_lanes(acc: &mut [f32; 8], scale: f32, lanes: [i32; 8]) {
    for (a, l) in acc.iter_mut().zip(lanes) {
        *a = scale.mul_add(l as f32, *a);
    }
}

/// Unpacks a Q4_0 / Q4_1 block's nibbles in element order (low nibbles are values 0..16).
#[inline]
fn nibbles(qs: &[u8]) -> [i32; QK] {
    let mut w = [0i32; QK];
    for i in 0..16 {
        w[i] = (qs[i] & 0x0F) as i32;
        w[i + 16] = (qs[i] >> 4) as i32;
    }
    w
}

/// Q4_0 (18-byte blocks: f16 d, 16 bytes of nibbles; value = d·(q−8)) · Q8_0.
pub fn dot_q4_0(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = [0.0f32; 8];
    for (b, xb) in w.chunks_exact(18).zip(x) {
        let mut q = nibbles(&b[2..18]);
        q.iter_mut().for_each(|v| *v -= 8);
        fma_lanes(&mut acc, f16_at(b, 0) * xb.d, lanes32(&q, &xb.qs));
    }
    hsum8(acc)
}

/// Q4_1 (20-byte blocks: f16 d, f16 m, nibbles; value = d·q + m) · Q8_1.
pub fn dot_q4_1(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut summs = 0.0f32;
    for (b, xb) in w.chunks_exact(20).zip(x) {
        summs += f16_at(b, 2) * xb.s;
        let q = nibbles(&b[4..20]);
        fma_lanes(&mut acc, f16_at(b, 0) * xb.d, lanes32(&q, &xb.qs));
    }
    hsum8(acc) + summs
}

/// The fifth bits of Q5_0/Q5_1: value `i` takes bit `i` of the little-endian u32 `qh`.
#[inline]
fn with_high_bits(mut q: [i32; QK], qh: &[u8]) -> [i32; QK] {
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    for (i, v) in q.iter_mut().enumerate() {
        *v |= (((h >> i) & 1) as i32) << 4;
    }
    q
}

/// Q5_0 (22-byte blocks: f16 d, u32 high bits, nibbles; value = d·(q−16)) · Q8_0.
pub fn dot_q5_0(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = [0.0f32; 8];
    for (b, xb) in w.chunks_exact(22).zip(x) {
        let mut q = with_high_bits(nibbles(&b[6..22]), &b[2..6]);
        q.iter_mut().for_each(|v| *v -= 16);
        fma_lanes(&mut acc, f16_at(b, 0) * xb.d, lanes32(&q, &xb.qs));
    }
    hsum8(acc)
}

/// Q5_1 (24-byte blocks: f16 d, f16 m, u32 high bits, nibbles; value = d·q + m) · Q8_1.
pub fn dot_q5_1(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut summs = 0.0f32;
    for (b, xb) in w.chunks_exact(24).zip(x) {
        summs += f16_at(b, 2) * xb.s;
        let q = with_high_bits(nibbles(&b[8..24]), &b[4..8]);
        fma_lanes(&mut acc, f16_at(b, 0) * xb.d, lanes32(&q, &xb.qs));
    }
    hsum8(acc) + summs
}

/// Q8_0 (34-byte blocks: f16 d, 32 i8) · Q8_0.
pub fn dot_q8_0(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = [0.0f32; 8];
    for (b, xb) in w.chunks_exact(34).zip(x) {
        let mut q = [0i32; QK];
        for (v, &byte) in q.iter_mut().zip(&b[2..34]) {
            *v = byte as i8 as i32;
        }
        fma_lanes(&mut acc, f16_at(b, 0) * xb.d, lanes32(&q, &xb.qs));
    }
    hsum8(acc)
}

/// The 6-bit scale and min of sub-block `j` of a Q4_K/Q5_K super-block (`get_scale_min_k4`).
#[inline]
pub fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// The shared tail of Q4_K/Q5_K: 8 sub-blocks of 32 unsigned values `q`, scales and mins.
#[inline]
fn dot_kmins(
    q: &[i32; QK_K],
    scales: &[u8],
    d: f32,
    dmin: f32,
    xb: &BlockQ8K,
    acc: &mut [f32; 8],
    accm: &mut [f32; 4],
) {
    let mut lanes = [0i32; 8];
    for s in 0..8 {
        let sc = scale_min_k4(s, scales).0;
        for (j, lane) in lanes.iter_mut().enumerate() {
            let mut p = 0i32;
            for i in 32 * s + 4 * j..32 * s + 4 * j + 4 {
                p += q[i] * xb.qs[i] as i32;
            }
            *lane += sc as i32 * p;
        }
    }
    fma_lanes(acc, d, lanes);
    kmins(scales, dmin, xb, accm);
}

/// The min terms of a Q4_K/Q5_K super-block, in 4 float lanes (shared by every instruction set:
/// they are a few operations per 256 values).
#[inline]
pub(crate) fn kmins(scales: &[u8], dmin: f32, xb: &BlockQ8K, accm: &mut [f32; 4]) {
    let mins: [u8; 8] = std::array::from_fn(|s| scale_min_k4(s, scales).1);
    kmins_of_row(&mins, dmin, xb, accm)
}

/// [`kmins`] from the 8 sub-blocks' mins already unpacked (the packed Q4_K layout stores them so).
#[inline]
pub(crate) fn kmins_of_row(mins: &[u8; 8], dmin: f32, xb: &BlockQ8K, accm: &mut [f32; 4]) {
    let bs = |s: usize| xb.bsums[2 * s] as i32 + xb.bsums[2 * s + 1] as i32;
    for (k, a) in accm.iter_mut().enumerate() {
        let mk = mins[2 * k] as i32 * bs(2 * k) + mins[2 * k + 1] as i32 * bs(2 * k + 1);
        *a = dmin.mul_add(mk as f32, *a);
    }
}

/// All 8 scales (bytes 0..8) and 8 mins (bytes 8..16) of a Q4_K/Q5_K super-block's 12 packed
/// bytes at once, without branches (ggml's `kmask` shuffle): the same values as
/// [`scale_min_k4`] for every sub-block (unit test).
#[inline]
pub fn unpack_scales_k4(s: &[u8]) -> [u8; 16] {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let w = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (u0, u1, u2) = (w(0), w(1), w(2));
    let scales_lo = u0 & KMASK1;
    let scales_hi = (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4);
    let mins_lo = u1 & KMASK1;
    let mins_hi = ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4);
    let mut out = [0u8; 16];
    for (i, v) in [scales_lo, scales_hi, mins_lo, mins_hi]
        .into_iter()
        .enumerate()
    {
        out[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// A Q4_K/Q5_K row's result: the lanes' sum plus the min terms, in the order every path uses.
#[inline]
pub(crate) fn add_kmins(total: f32, accm: [f32; 4]) -> f32 {
    total + ((accm[0] + accm[2]) + (accm[1] + accm[3]))
}

#[inline]
fn finish_kmins(acc: [f32; 8], accm: [f32; 4]) -> f32 {
    add_kmins(hsum8(acc), accm)
}

/// Q4_K (144-byte super-blocks: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles)
/// · Q8_K.
pub fn dot_q4_k(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut accm = [0.0f32; 4];
    for (b, xb) in w.chunks_exact(144).zip(x) {
        let qs = &b[16..144];
        let mut q = [0i32; QK_K];
        for c in 0..4 {
            for l in 0..32 {
                q[64 * c + l] = (qs[32 * c + l] & 0x0F) as i32;
                q[64 * c + 32 + l] = (qs[32 * c + l] >> 4) as i32;
            }
        }
        let d = xb.d * f16_at(b, 0);
        let dmin = -xb.d * f16_at(b, 2);
        dot_kmins(&q, &b[4..16], d, dmin, xb, &mut acc, &mut accm);
    }
    finish_kmins(acc, accm)
}

/// Q5_K (176-byte super-blocks: f16 d, f16 dmin, 12 bytes scales/mins, 32 bytes high bits, 128 bytes
/// nibbles) · Q8_K.
pub fn dot_q5_k(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut accm = [0.0f32; 4];
    for (b, xb) in w.chunks_exact(176).zip(x) {
        let qh = &b[16..48];
        let qs = &b[48..176];
        let mut q = [0i32; QK_K];
        for c in 0..4 {
            for l in 0..32 {
                let hi_lo = ((qh[l] >> (2 * c)) & 1) as i32;
                let hi_hi = ((qh[l] >> (2 * c + 1)) & 1) as i32;
                q[64 * c + l] = (qs[32 * c + l] & 0x0F) as i32 | (hi_lo << 4);
                q[64 * c + 32 + l] = (qs[32 * c + l] >> 4) as i32 | (hi_hi << 4);
            }
        }
        let d = xb.d * f16_at(b, 0);
        let dmin = -xb.d * f16_at(b, 2);
        dot_kmins(&q, &b[4..16], d, dmin, xb, &mut acc, &mut accm);
    }
    finish_kmins(acc, accm)
}

/// Unpacks a Q6_K super-block's values (0..64, before the −32 offset) in element order.
#[inline]
pub fn q6k_values(b: &[u8]) -> [i32; QK_K] {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let mut q = [0i32; QK_K];
    for n in 0..2 {
        let (ql, qh) = (&ql[64 * n..], &qh[32 * n..]);
        for l in 0..32 {
            let e = 128 * n + l;
            q[e] = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32;
            q[e + 32] = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32;
            q[e + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32;
            q[e + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32;
        }
    }
    q
}

/// Q6_K (210-byte super-blocks: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 i8 scales per 16
/// values, f16 d; value = d·scale·(q−32)) · Q8_K.
pub fn dot_q6_k(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = [0.0f32; 8];
    for (b, xb) in w.chunks_exact(210).zip(x) {
        let q = q6k_values(b);
        let scales = &b[192..208];
        let mut lanes = [0i32; 8];
        for s in 0..8 {
            for (j, lane) in lanes.iter_mut().enumerate() {
                let base = 32 * s + 4 * j;
                let sc = scales[base / 16] as i8 as i32;
                let mut p = 0i32;
                for i in base..base + 4 {
                    p += (q[i] - 32) * xb.qs[i] as i32;
                }
                *lane += sc * p;
            }
        }
        fma_lanes(&mut acc, xb.d * f16_at(b, 208), lanes);
    }
    hsum8(acc)
}

/// The float formats: 4 accumulators of 8 lanes over 32-value steps, combined `(a0+a1)+(a2+a3)` and
/// reduced with [`hsum8`]; a tail of `k % 32` values is summed in order and added last.
pub fn dot_float(w: impl Fn(usize) -> f32, x: &[f32]) -> f32 {
    let k = x.len();
    let mut acc = [[0.0f32; 8]; 4];
    let steps = k / 32;
    for t in 0..steps {
        for (a, lanes) in acc.iter_mut().enumerate() {
            for (j, lane) in lanes.iter_mut().enumerate() {
                let i = 32 * t + 8 * a + j;
                *lane = w(i).mul_add(x[i], *lane);
            }
        }
    }
    let mut sum = [0.0f32; 8];
    for j in 0..8 {
        sum[j] = (acc[0][j] + acc[1][j]) + (acc[2][j] + acc[3][j]);
    }
    let mut tail = 0.0f32;
    for i in 32 * steps..k {
        tail = w(i).mul_add(x[i], tail);
    }
    hsum8(sum) + tail
}

/// F32 weight row · f32 activations.
pub fn dot_f32(w: &[u8], x: &[f32]) -> f32 {
    dot_float(
        |i| f32::from_le_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]),
        x,
    )
}

/// F16 weight row · activations rounded to f16.
pub fn dot_f16(w: &[u8], x: &[f32]) -> f32 {
    dot_float(|i| f16_at(w, 2 * i), x)
}

/// BF16 weight row · activations rounded to bf16.
pub fn dot_bf16(w: &[u8], x: &[f32]) -> f32 {
    dot_float(
        |i| f32::from_bits((u16::from_le_bytes([w[2 * i], w[2 * i + 1]]) as u32) << 16),
        x,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The branch-free unpacking gives `get_scale_min_k4`'s values for every sub-block.
    #[test]
    fn unpacked_scales_equal_get_scale_min_k4() {
        let mut state = 0x1234_5678_9abc_def0u64;
        for _ in 0..10_000 {
            let s: [u8; 12] = std::array::from_fn(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            });
            let sm = unpack_scales_k4(&s);
            for j in 0..8 {
                assert_eq!(
                    (sm[j], sm[8 + j]),
                    scale_min_k4(j, &s),
                    "sub-block {j} of {s:?}"
                );
            }
        }
    }
}
