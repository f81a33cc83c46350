//! aarch64 NEON dot products for the row-at-a-time formats (Q5_1, the K-quants and the float
//! formats). Each computes exactly what its [`crate::scalar`] twin does: the same 8 integer lanes per
//! 32 values (lane `j` = the 4 products of values `4j..4j+4`), kept as two 4-lane registers, the same
//! fused multiply-adds in the same order, and the same `hsum8` at the end; so the two agree bit for
//! bit, and a model says the same on an ARM server as on x86.
//!
//! The 4-product sums use `sdot` where the CPU has the dot-product extension (Armv8.2+, e.g. Apple
//! M-series, Graviton 2+, Ampere Altra), otherwise widening multiplies and pairwise adds, which give
//! the same integers. `sdot` is written in assembly: Rust's `vdotq_s32` is not stable yet.
//!
//! Q4_0, Q4_1, Q5_0 and Q8_0 never reach a row kernel ([`crate::matmul_with`] packs them): their
//! NEON group kernels are in [`crate::neon_packed`].
#![allow(unsafe_op_in_unsafe_fn)]
// Index loops mirror the scalar twin's lane layout.
#![allow(clippy::needless_range_loop)]

use std::arch::aarch64::*;
use std::arch::asm;
use std::sync::OnceLock;

use crate::act::{BlockQ8, BlockQ8K};
use crate::scalar::{add_kmins, unpack_scales_k4};

/// Whether the 4-product sums use `sdot` (`CINDER_KERNELS=neon` keeps the plain form, for
/// comparisons).
pub(crate) fn has_dotprod() -> bool {
    static DOT: OnceLock<bool> = OnceLock::new();
    *DOT.get_or_init(|| {
        !std::env::var("CINDER_KERNELS").is_ok_and(|v| v == "neon")
            && std::arch::is_aarch64_feature_detected!("dotprod")
    })
}

/// `acc + ` per 32-bit lane the sum of the 4 products of the signed bytes of `a` and `b` there.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut r = acc;
    asm!(
        "sdot {r:v}.4s, {a:v}.16b, {b:v}.16b",
        r = inout(vreg) r,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags),
    );
    r
}

/// Lane `i` = Σ of the products of bytes `4i..4i+4` of `a` and `b` (signed). Without `sdot` the
/// products are widened to 16 bits (|p| ≤ 128·128 fits) and added pairwise twice: same integers.
#[inline(always)]
pub(crate) unsafe fn quads<const D: bool>(a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if D {
        sdot(vdupq_n_s32(0), a, b)
    } else {
        let lo = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));
        let hi = vpaddlq_s16(vmull_high_s8(a, b));
        vpaddq_s32(lo, hi)
    }
}

/// Four f16 values at `p` (any alignment), widened exactly (`fcvtl` is base Armv8; Rust's f16
/// vector intrinsics are not stable yet).
#[inline(always)]
pub(crate) unsafe fn f16x4(p: *const u8) -> float32x4_t {
    let h = vcreate_u16(std::ptr::read_unaligned(p as *const u64));
    let out: float32x4_t;
    asm!(
        "fcvtl {o:v}.4s, {h:v}.4h",
        o = out(vreg) out,
        h = in(vreg) h,
        options(pure, nomem, nostack, preserves_flags),
    );
    out
}

/// ggml's `hsum_float_8` order over 8 lanes held as `lo` (0..4) and `hi` (4..8).
#[inline(always)]
unsafe fn hsum8(lo: float32x4_t, hi: float32x4_t) -> f32 {
    let r = vaddq_f32(lo, hi);
    let r = vadd_f32(vget_low_f32(r), vget_high_f32(r));
    vget_lane_f32::<0>(r) + vget_lane_f32::<1>(r)
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// 8 float lanes as two registers.
type Acc = [float32x4_t; 2];

#[inline(always)]
unsafe fn zero() -> Acc {
    [vdupq_n_f32(0.0); 2]
}

/// `acc[j] = fma(scale, lanes[j], acc[j])` for the 8 lanes.
#[inline(always)]
unsafe fn fma_lanes(acc: &mut Acc, scale: f32, lanes: [int32x4_t; 2]) {
    let s = vdupq_n_f32(scale);
    acc[0] = vfmaq_f32(acc[0], s, vcvtq_f32_s32(lanes[0]));
    acc[1] = vfmaq_f32(acc[1], s, vcvtq_f32_s32(lanes[1]));
}

/// The 8 lanes of one 32-value block: weights `w` (element order) against activations `x`.
#[inline(always)]
unsafe fn lanes32<const D: bool>(w: [int8x16_t; 2], x: &[i8]) -> [int32x4_t; 2] {
    let p = x.as_ptr();
    [
        quads::<D>(w[0], vld1q_s8(p)),
        quads::<D>(w[1], vld1q_s8(p.add(16))),
    ]
}

/// 16 bytes of nibbles -> 32 values in element order (low nibbles are values 0..16).
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> [uint8x16_t; 2] {
    let v = vld1q_u8(p);
    [vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v)]
}

/// Byte `i` = 16 where bit `i` of the 16 bits `h` is set, else 0 (the fifth bit of Q5 values).
#[inline(always)]
unsafe fn fifth_bits(h: u16) -> uint8x16_t {
    const MASK: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    let bytes = vcombine_u8(vdup_n_u8(h as u8), vdup_n_u8((h >> 8) as u8));
    vandq_u8(vtstq_u8(bytes, vld1q_u8(MASK.as_ptr())), vdupq_n_u8(0x10))
}

/// A Q5_0/Q5_1 block's 32 values (0..32) in element order: nibbles plus the fifth bits `qh`.
#[inline(always)]
unsafe fn q5_values(qh: &[u8], qs: *const u8) -> [uint8x16_t; 2] {
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let n = nibbles(qs);
    [
        vorrq_u8(n[0], fifth_bits(h as u16)),
        vorrq_u8(n[1], fifth_bits((h >> 16) as u16)),
    ]
}

#[inline(always)]
unsafe fn signed(v: [uint8x16_t; 2]) -> [int8x16_t; 2] {
    [vreinterpretq_s8_u8(v[0]), vreinterpretq_s8_u8(v[1])]
}

#[inline(always)]
unsafe fn q5_1<const D: bool>(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = zero();
    let mut summs = 0.0f32;
    for (b, xb) in w.chunks_exact(24).zip(x) {
        summs += f16_at(b, 2) * xb.s;
        let q = signed(q5_values(&b[4..8], b.as_ptr().add(8)));
        fma_lanes(&mut acc, f16_at(b, 0) * xb.d, lanes32::<D>(q, &xb.qs));
    }
    hsum8(acc[0], acc[1]) + summs
}

/// `lanes += sc · (4-product sums of one 32-value sub-block)`.
#[inline(always)]
unsafe fn scaled<const D: bool>(
    lanes: &mut [int32x4_t; 2],
    sc: [i32; 2],
    w: [int8x16_t; 2],
    x: &[i8],
) {
    let p = lanes32::<D>(w, x);
    lanes[0] = vmlaq_n_s32(lanes[0], p[0], sc[0]);
    lanes[1] = vmlaq_n_s32(lanes[1], p[1], sc[1]);
}

/// The min terms of a Q4_K/Q5_K super-block ([`crate::scalar::kmins`]'s integers and fused
/// multiply-adds, 4 lanes at once).
#[inline(always)]
unsafe fn kmins_v(sm: &[u8; 16], dmin: f32, xb: &BlockQ8K, accm: float32x4_t) -> float32x4_t {
    // the mins, bytes 8..16, widened to 2 × 4 i32
    let m16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm.as_ptr().add(8))));
    let (m_lo, m_hi) = (vmovl_s16(vget_low_s16(m16)), vmovl_high_s16(m16));
    let p = xb.bsums.as_ptr();
    // bs(s) = bsums[2s] + bsums[2s+1], then m[s]·bs(s), then pairs: mk[k]
    let lo = vmulq_s32(vpaddlq_s16(vld1q_s16(p)), m_lo);
    let hi = vmulq_s32(vpaddlq_s16(vld1q_s16(p.add(8))), m_hi);
    vfmaq_f32(accm, vdupq_n_f32(dmin), vcvtq_f32_s32(vpaddq_s32(lo, hi)))
}

/// Q4_K and Q5_K: 8 sub-blocks of 32 unsigned values with 6-bit scales and mins. `HIGH` is Q5_K
/// (176-byte super-blocks with 32 bytes of fifth bits), otherwise Q4_K (144 bytes).
#[inline(always)]
unsafe fn qk_mins<const D: bool, const HIGH: bool>(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let (bytes, qs_at) = if HIGH { (176, 48) } else { (144, 16) };
    let mut acc = zero();
    let mut accm = vdupq_n_f32(0.0);
    let m4 = vdupq_n_u8(0x0F);
    for (b, xb) in w.chunks_exact(bytes).zip(x) {
        let sm = unpack_scales_k4(&b[4..16]);
        let mut lanes = [vdupq_n_s32(0); 2];
        let qh = [vld1q_u8(b.as_ptr().add(16)), vld1q_u8(b.as_ptr().add(32))];
        for c in 0..4 {
            let raw = [
                vld1q_u8(b.as_ptr().add(qs_at + 32 * c)),
                vld1q_u8(b.as_ptr().add(qs_at + 32 * c + 16)),
            ];
            for half in 0..2 {
                let s = 2 * c + half;
                let mut q = if half == 0 {
                    [vandq_u8(raw[0], m4), vandq_u8(raw[1], m4)]
                } else {
                    [vshrq_n_u8::<4>(raw[0]), vshrq_n_u8::<4>(raw[1])]
                };
                if HIGH {
                    let bit = vdupq_n_u8(1 << s);
                    let sixteen = vdupq_n_u8(0x10);
                    for i in 0..2 {
                        q[i] = vorrq_u8(q[i], vandq_u8(vtstq_u8(qh[i], bit), sixteen));
                    }
                }
                let sc = sm[s] as i32;
                scaled::<D>(&mut lanes, [sc, sc], signed(q), &xb.qs[32 * s..]);
            }
        }
        fma_lanes(&mut acc, xb.d * f16_at(b, 0), lanes);
        accm = kmins_v(&sm, -xb.d * f16_at(b, 2), xb, accm);
    }
    let mut m = [0.0f32; 4];
    vst1q_f32(m.as_mut_ptr(), accm);
    add_kmins(hsum8(acc[0], acc[1]), m)
}

/// Q6_K: 16 values per signed scale, values `q − 32` from 4 low and 2 high bits.
#[inline(always)]
unsafe fn q6_k<const D: bool>(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = zero();
    let (m4, m30, three) = (vdupq_n_u8(0x0F), vdupq_n_u8(0x30), vdupq_n_u8(3));
    let off = vdupq_n_s8(32);
    for (b, xb) in w.chunks_exact(210).zip(x) {
        let p = b.as_ptr();
        let scales = &b[192..208];
        let mut lanes = [vdupq_n_s32(0); 2];
        for n in 0..2 {
            let ld = |at: usize| [vld1q_u8(p.add(at)), vld1q_u8(p.add(at + 16))];
            let (l0, l1, h) = (ld(64 * n), ld(64 * n + 32), ld(128 + 32 * n));
            for sub in 0..4 {
                let mut q = [vdupq_n_s8(0); 2];
                for i in 0..2 {
                    // (low 4 bits) | (high 2 bits) << 4, per the sub-block's place in the layout
                    let v = match sub {
                        0 => vorrq_u8(vandq_u8(l0[i], m4), vshlq_n_u8::<4>(vandq_u8(h[i], three))),
                        1 => vorrq_u8(vandq_u8(l1[i], m4), vandq_u8(vshlq_n_u8::<2>(h[i]), m30)),
                        2 => vorrq_u8(vshrq_n_u8::<4>(l0[i]), vandq_u8(h[i], m30)),
                        _ => vorrq_u8(vshrq_n_u8::<4>(l1[i]), vandq_u8(vshrq_n_u8::<2>(h[i]), m30)),
                    };
                    q[i] = vsubq_s8(vreinterpretq_s8_u8(v), off);
                }
                let s = 4 * n + sub;
                let sc = [scales[2 * s] as i8 as i32, scales[2 * s + 1] as i8 as i32];
                scaled::<D>(&mut lanes, sc, q, &xb.qs[32 * s..]);
            }
        }
        fma_lanes(&mut acc, xb.d * f16_at(b, 208), lanes);
    }
    hsum8(acc[0], acc[1])
}

/// The float formats (see [`crate::scalar::dot_float`]); `load(i)` reads weights `i..i+8`.
#[inline(always)]
unsafe fn dot_float(load: impl Fn(usize) -> Acc, w1: impl Fn(usize) -> f32, x: &[f32]) -> f32 {
    let k = x.len();
    let mut acc = [zero(); 4];
    let steps = k / 32;
    let xp = x.as_ptr();
    for t in 0..steps {
        for (a, av) in acc.iter_mut().enumerate() {
            let i = 32 * t + 8 * a;
            let w = load(i);
            av[0] = vfmaq_f32(av[0], w[0], vld1q_f32(xp.add(i)));
            av[1] = vfmaq_f32(av[1], w[1], vld1q_f32(xp.add(i + 4)));
        }
    }
    let sum = |h: usize| {
        vaddq_f32(
            vaddq_f32(acc[0][h], acc[1][h]),
            vaddq_f32(acc[2][h], acc[3][h]),
        )
    };
    let (lo, hi) = (sum(0), sum(1));
    let mut tail = 0.0f32;
    for i in 32 * steps..k {
        tail = w1(i).mul_add(x[i], tail);
    }
    hsum8(lo, hi) + tail
}

#[inline(always)]
unsafe fn f32_row<const D: bool>(w: &[u8], x: &[f32]) -> f32 {
    let p = w.as_ptr();
    dot_float(
        |i| {
            [
                vreinterpretq_f32_u8(vld1q_u8(p.add(4 * i))),
                vreinterpretq_f32_u8(vld1q_u8(p.add(4 * i + 16))),
            ]
        },
        |i| f32::from_le_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]),
        x,
    )
}

#[inline(always)]
unsafe fn f16_row<const D: bool>(w: &[u8], x: &[f32]) -> f32 {
    let p = w.as_ptr();
    dot_float(
        |i| [f16x4(p.add(2 * i)), f16x4(p.add(2 * i + 8))],
        |i| f16_at(w, 2 * i),
        x,
    )
}

#[inline(always)]
unsafe fn bf16_row<const D: bool>(w: &[u8], x: &[f32]) -> f32 {
    let p = w.as_ptr();
    dot_float(
        |i| {
            let h = vreinterpretq_u16_u8(vld1q_u8(p.add(2 * i)));
            [
                vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(h))),
                vreinterpretq_f32_u32(vshll_high_n_u16::<16>(h)),
            ]
        },
        |i| f32::from_bits((u16::from_le_bytes([w[2 * i], w[2 * i + 1]]) as u32) << 16),
        x,
    )
}

#[inline(always)]
unsafe fn q4_k<const D: bool>(w: &[u8], x: &[BlockQ8K]) -> f32 {
    qk_mins::<D, false>(w, x)
}

#[inline(always)]
unsafe fn q5_k<const D: bool>(w: &[u8], x: &[BlockQ8K]) -> f32 {
    qk_mins::<D, true>(w, x)
}

/// Safe entry points: each compiled twice, with and without `sdot`, and picked by [`has_dotprod`].
// SAFETY: NEON is part of the aarch64 baseline; the `sdot` form runs only where the CPU reports
// the dot-product extension. Weights are whole blocks with one activation block each (checked by
// `matmul_with`), which every loop above relies on through `chunks_exact` + `zip`.
macro_rules! entry {
    ($($name:ident = $body:ident: $act:ty),* $(,)?) => {$(
        pub(crate) fn $name(w: &[u8], x: &[$act]) -> f32 {
            #[target_feature(enable = "neon,dotprod")]
            unsafe fn dot(w: &[u8], x: &[$act]) -> f32 {
                $body::<true>(w, x)
            }
            #[target_feature(enable = "neon")]
            unsafe fn plain(w: &[u8], x: &[$act]) -> f32 {
                $body::<false>(w, x)
            }
            unsafe {
                if has_dotprod() { dot(w, x) } else { plain(w, x) }
            }
        }
    )*};
}

entry!(
    dot_q5_1 = q5_1: BlockQ8,
    dot_q4_k = q4_k: BlockQ8K,
    dot_q5_k = q5_k: BlockQ8K,
    dot_q6_k = q6_k: BlockQ8K,
    dot_f32 = f32_row: f32,
    dot_f16 = f16_row: f32,
    dot_bf16 = bf16_row: f32,
);
