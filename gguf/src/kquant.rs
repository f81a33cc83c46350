//! Reference quantizers for the K-quant super-blocks (Q4_K, Q5_K, Q6_K): the blocks ggml's
//! `quantize_row_q{4,5,6}_K_ref` write, i.e. what `llama-quantize` produces for these types without
//! an importance matrix.
//!
//! Bit-exactness needs the same float operations in the same order as ggml (no fused multiply-add,
//! the same left-to-right sums, the same round-by-magic-number): the scale searches below pick
//! between candidates by comparing float errors, so one ulp elsewhere can flip a whole sub-block.
//! Checked byte for byte against ggml's C built without FMA contraction (tests/quantize_ref.rs).
//!
//! Layouts (one super-block of 256 values):
//! - Q4_K (144 B): `d`, `dmin` (f16), 12 bytes of packed 6-bit (scale, min) for 8 sub-blocks of 32,
//!   128 bytes of 4-bit quants (two sub-blocks share a byte: low nibble first sub-block).
//! - Q5_K (176 B): as Q4_K plus 32 bytes holding the fifth bit of every quant.
//! - Q6_K (210 B): 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 signed 8-bit scales (one per
//!   16 values), `d` (f16).

use half::f16;

/// Values per super-block.
pub(crate) const QK_K: usize = 256;

/// Below this a group counts as all zero (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// Round to nearest (ties to even) by adding 1.5 * 2^23 and reading the mantissa, as ggml does.
/// Exact for |v| < 2^22; values outside come only from degenerate scales and are clamped by callers.
fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0f32).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

fn f16_round_trip(v: f32) -> (u16, f32) {
    let h = f16::from_f32(v);
    (h.to_bits(), h.to_f32())
}

/// Asymmetric (scale, min) fit of one group into `0..=nmax`, searching `nstep + 1` candidate
/// scales around the min/max one and keeping the one with the lowest weighted squared error.
/// Writes the levels to `l` and returns `(scale, -min)`; `min` is never positive.
fn make_qkx2(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.iter_mut().for_each(|q| *q = 0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l[i] = q as u8;
        let diff = scale * q as f32 + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    let mut aux = [0u8; 32];
    // As in ggml, later candidates are centred on the best min found so far.
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = q as u8;
            let (w, lf) = (weights[i], q as f32);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * aux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(&aux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Symmetric fit of one group into `-nmax..nmax-1` (stored as `0..2*nmax`), weights `x²`, trying
/// 18 scales around `-nmax / max`; returns the least-squares scale of the best candidate.
fn make_qx(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l.iter_mut().for_each(|q| *q = 0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = level(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (q, &v) in l.iter_mut().zip(x) {
        *q = (level(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (q, &v) in l.iter_mut().zip(x) {
                *q = (level(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// The 6-bit (scale, min) pair of sub-block `j` from Q4_K/Q5_K's 12 packed bytes.
fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Shared front half of Q4_K and Q5_K: fits each 32-value sub-block, packs the 6-bit scales and
/// mins, re-derives the levels `l` against the rounded scales, and writes the block header
/// (`d`, `dmin`, 12 scale bytes) to `out`.
fn fit_k4(x: &[f32], nmax: i32, rmin: f32, nstep: i32, l: &mut [u8; QK_K], out: &mut Vec<u8>) {
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    let mut weights = [0.0f32; 32];
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx2(
            nmax,
            xs,
            &weights,
            &mut l[32 * j..32 * j + 32],
            rmin,
            0.1,
            nstep,
        );
        scales[j] = s;
        mins[j] = m;
        max_scale = max_scale.max(s);
        max_min = max_min.max(m);
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut packed = [0u8; 12];
    for j in 0..8 {
        // C stores the int into a uint8_t (mod 256) before taking the min with 63.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let (d_bits, d) = f16_round_trip(max_scale / 63.0);
    let (dmin_bits, dmin) = f16_round_trip(max_min / 63.0);
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, &packed);
        let ds = d * sc as f32;
        if ds == 0.0 {
            continue; // levels from the fit stay, as in ggml
        }
        let dm = dmin * m as f32;
        for i in 0..32 {
            l[32 * j + i] = nearest_int((x[32 * j + i] + dm) / ds).clamp(0, nmax) as u8;
        }
    }
    out.extend_from_slice(&d_bits.to_le_bytes());
    out.extend_from_slice(&dmin_bits.to_le_bytes());
    out.extend_from_slice(&packed);
}

pub(crate) fn q4_k(x: &[f32], out: &mut Vec<u8>) {
    let mut l = [0u8; QK_K];
    fit_k4(x, 15, -1.0, 20, &mut l, out);
    for chunk in l.chunks_exact(64) {
        out.extend((0..32).map(|i| chunk[i] | (chunk[i + 32] << 4)));
    }
}

pub(crate) fn q5_k(x: &[f32], out: &mut Vec<u8>) {
    let mut l = [0u8; QK_K];
    fit_k4(x, 31, -0.5, 15, &mut l, out);
    let mut qh = [0u8; 32];
    let mut qs = [0u8; 128];
    for (n, chunk) in l.chunks_exact(64).enumerate() {
        let (m1, m2) = (1u8 << (2 * n), 2u8 << (2 * n));
        for j in 0..32 {
            let (mut l1, mut l2) = (chunk[j], chunk[j + 32]);
            if l1 > 15 {
                l1 -= 16;
                qh[j] |= m1;
            }
            if l2 > 15 {
                l2 -= 16;
                qh[j] |= m2;
            }
            qs[32 * n + j] = l1 | (l2 << 4);
        }
    }
    out.extend_from_slice(&qh);
    out.extend_from_slice(&qs);
}

pub(crate) fn q6_k(x: &[f32], out: &mut Vec<u8>) {
    let mut l = [0i8; QK_K];
    let mut scales = [0.0f32; 16];
    let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
    for (ib, s) in scales.iter_mut().enumerate() {
        *s = make_qx(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
        if s.abs() > max_abs_scale {
            max_abs_scale = s.abs();
            max_scale = *s;
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        out.extend(std::iter::repeat_n(0u8, 210));
        return;
    }
    let iscale = -128.0f32 / max_scale;
    let (d_bits, d) = f16_round_trip(1.0 / iscale);
    let mut sc = [0i8; 16];
    for (q, &s) in sc.iter_mut().zip(&scales) {
        *q = nearest_int(iscale * s).min(127) as i8;
    }
    for j in 0..16 {
        let ds = d * sc[j] as f32;
        if ds == 0.0 {
            continue;
        }
        for i in 0..16 {
            l[16 * j + i] = (nearest_int(x[16 * j + i] / ds).clamp(-32, 31) + 32) as i8;
        }
    }
    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for (h, chunk) in l.chunks_exact(128).enumerate() {
        let u = |k: usize| chunk[k] as u8;
        for i in 0..32 {
            ql[64 * h + i] = (u(i) & 0xF) | ((u(i + 64) & 0xF) << 4);
            ql[64 * h + i + 32] = (u(i + 32) & 0xF) | ((u(i + 96) & 0xF) << 4);
            qh[32 * h + i] = (u(i) >> 4)
                | ((u(i + 32) >> 4) << 2)
                | ((u(i + 64) >> 4) << 4)
                | ((u(i + 96) >> 4) << 6);
        }
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.iter().map(|&s| s as u8));
    out.extend_from_slice(&d_bits.to_le_bytes());
}
