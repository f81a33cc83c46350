//! NEON group kernels for [`crate::packed`]: 8 interleaved weight rows against 1–4 activation rows,
//! computing what the row-at-a-time kernels (and their scalar twins) compute — ggml's 8 lanes of
//! 4-value integer sums per block, each lane its own fused multiply-add accumulator, summed in
//! `hsum_float_8` order — so packing on ARM changes the speed, not one bit of any output.
//!
//! A packed chunk holds 4 bytes of each of the 8 rows per 32 bytes; a 128-bit register takes the
//! first or the second 4 rows. The kernel runs the group as two halves of 4 rows, so the 8 quad
//! accumulators per activation row fit the 32 vector registers (two rows per call: 16 accumulators,
//! 8 weight registers).
#![allow(unsafe_op_in_unsafe_fn)]
// Index loops mirror the lane layout (j: activation row, g: quad), as in `avx2_packed.rs`.
#![allow(clippy::needless_range_loop)]

use std::arch::aarch64::*;

use crate::act::BlockQ8;
use crate::neon::{f16x4, has_dotprod, quads};
use crate::packed::{ROWS, chunk_bytes};
use cinder_gguf::GgmlType;

/// Activation rows per group call on NEON (see the module docs).
pub(crate) const TILE: usize = 2;

/// The 4 activation bytes `4g..4g+4` of `xb`, in every 32-bit lane.
#[inline(always)]
unsafe fn quad(xb: &BlockQ8, g: usize) -> int8x16_t {
    let v = std::ptr::read_unaligned(xb.qs.as_ptr().add(4 * g) as *const i32);
    vreinterpretq_s8_s32(vdupq_n_s32(v))
}

/// ggml's `hsum_float_8` order across the 8 quad accumulators, for 4 rows at once.
#[inline(always)]
unsafe fn hsum_quads(a: &[float32x4_t; 8]) -> float32x4_t {
    let lo = vaddq_f32(vaddq_f32(a[0], a[4]), vaddq_f32(a[2], a[6]));
    let hi = vaddq_f32(vaddq_f32(a[1], a[5]), vaddq_f32(a[3], a[7]));
    vaddq_f32(lo, hi)
}

/// The 8 quads' weights of block `c` for rows `4h..4h+4`, as signed bytes.
#[inline(always)]
unsafe fn weights(ty: GgmlType, c: *const u8, qoff: usize, h: usize) -> [int8x16_t; 8] {
    let mut w = [vdupq_n_s8(0); 8];
    if ty == GgmlType::Q8_0 {
        for g in 0..8 {
            w[g] = vld1q_s8(c.add(qoff + 32 * g + 16 * h) as *const i8);
        }
        return w;
    }
    let m4 = vdupq_n_u8(0x0F);
    for t in 0..4 {
        // chunk t: low nibbles are values 4t..4t+4 (quad t), high nibbles quad t+4
        let v = vld1q_u8(c.add(qoff + 32 * t + 16 * h));
        let (lo, hi) = (
            vreinterpretq_s8_u8(vandq_u8(v, m4)),
            vreinterpretq_s8_u8(vshrq_n_u8::<4>(v)),
        );
        if ty == GgmlType::Q4_0 {
            let eight = vdupq_n_s8(8);
            w[t] = vsubq_s8(lo, eight);
            w[t + 4] = vsubq_s8(hi, eight);
        } else {
            w[t] = lo;
            w[t + 4] = hi;
        }
    }
    w
}

/// One group against `J` activation rows. `ty` is a constant at every call site, so each kernel
/// keeps only its own format's unpacking.
#[inline(always)]
unsafe fn group<const J: usize, const D: bool>(
    ty: GgmlType,
    gw: &[u8],
    x: &[&[BlockQ8]],
    out: &mut [[f32; ROWS]],
) {
    let (cb, qoff) = chunk_bytes(ty);
    let nb = gw.len() / cb;
    for h in 0..2 {
        // acc[j][g]: quad g's lane of ggml's 8-lane accumulator, for rows 4h..4h+4.
        let mut acc = [[vdupq_n_f32(0.0); 8]; J];
        let mut summs = [vdupq_n_f32(0.0); J];
        for b in 0..nb {
            let c = gw.as_ptr().add(b * cb);
            let d = f16x4(c.add(8 * h));
            let w = weights(ty, c, qoff, h);
            for j in 0..J {
                let xb = x.get_unchecked(j).get_unchecked(b);
                let sc = vmulq_n_f32(d, xb.d);
                if ty == GgmlType::Q4_1 {
                    let m = f16x4(c.add(16 + 8 * h));
                    summs[j] = vaddq_f32(summs[j], vmulq_n_f32(m, xb.s));
                }
                for g in 0..8 {
                    let l = quads::<D>(w[g], quad(xb, g));
                    acc[j][g] = vfmaq_f32(acc[j][g], sc, vcvtq_f32_s32(l));
                }
            }
        }
        for j in 0..J {
            let mut s = hsum_quads(&acc[j]);
            if ty == GgmlType::Q4_1 {
                s = vaddq_f32(s, summs[j]);
            }
            vst1q_f32(out[j].as_mut_ptr().add(4 * h), s);
        }
    }
}

// SAFETY (the entry points): NEON is part of the aarch64 baseline and the `sdot` form runs only where
// `has_dotprod` saw the extension; `gw` is whole chunks of one group and every activation row has
// one block per chunk (asserted), `x.len() == out.len()` in 1..=4.
macro_rules! entry {
    ($($name:ident: $ty:expr),* $(,)?) => {$(
        pub(crate) fn $name(gw: &[u8], x: &[&[BlockQ8]], out: &mut [[f32; ROWS]]) {
            #[target_feature(enable = "neon,dotprod")]
            unsafe fn dot<const J: usize>(gw: &[u8], x: &[&[BlockQ8]], out: &mut [[f32; ROWS]]) {
                group::<J, true>($ty, gw, x, out)
            }
            #[target_feature(enable = "neon")]
            unsafe fn plain<const J: usize>(gw: &[u8], x: &[&[BlockQ8]], out: &mut [[f32; ROWS]]) {
                group::<J, false>($ty, gw, x, out)
            }
            let cb = chunk_bytes($ty).0;
            assert!(
                x.len() == out.len() && x.iter().all(|r| r.len() * cb == gw.len()),
                "packed group kernel: {} activation rows for {} outputs over {} bytes",
                x.len(),
                out.len(),
                gw.len()
            );
            let d = has_dotprod();
            unsafe {
                match (x.len(), d) {
                    (1, true) => dot::<1>(gw, x, out),
                    (2, true) => dot::<2>(gw, x, out),
                    (3, true) => dot::<3>(gw, x, out),
                    (4, true) => dot::<4>(gw, x, out),
                    (1, false) => plain::<1>(gw, x, out),
                    (2, false) => plain::<2>(gw, x, out),
                    (3, false) => plain::<3>(gw, x, out),
                    (4, false) => plain::<4>(gw, x, out),
                    _ => unreachable!("group kernels take 1 to 4 activation rows"),
                }
            }
        }
    )*};
}

entry!(q4_0: GgmlType::Q4_0, q4_1: GgmlType::Q4_1, q8_0: GgmlType::Q8_0);
