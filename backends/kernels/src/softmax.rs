//! Attention's softmax over one query's scores, with an exponential of Cinder's own: a degree-7
//! polynomial after a Cody–Waite range reduction, all in fused multiply-adds, so the AVX2 loop (8
//! lanes) and the portable one (`f32::mul_add`, one `fmadd` on aarch64) give the same bits. libm's
//! `expf` is correctly rounded but scalar, and it was the largest share of CPU attention in a
//! 512-token prefill; this one is within 2 ulp of it (tested), as llama.cpp's vectorized
//! exponential is.
//!
//! The exponential sum is f64 in 8 lanes (element `i` in lane `i % 8`), reduced as
//! `((s0+s4)+(s1+s5))+((s2+s6)+(s3+s7))`; the probabilities are `f16(e · (1 / sum))`.
use crate::Isa;
use crate::attn::{ScoreParams, scale_round_f16};

/// Below this `exp(x)` is under 2^-125 and flushed to zero: a probability that small rounds to
/// zero in f16 anyway (the sum is at least 1: the largest score contributes `exp(0)`).
const EXP_MIN: f32 = -87.0;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split in two: the high part has 16 significant bits, so `n · LN2_HI` is exact for |n| < 256.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// 1/k! for k = 7 down to 0: the Taylor series on |r| <= ln 2 / 2 (truncation below 1e-8).
const POLY: [f32; 8] = [
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

/// `exp(x)` for `x <= 0` (a score minus the row's maximum), in the operations the AVX2 loop runs.
#[inline]
pub fn exp_nonpositive(x: f32) -> f32 {
    if x < EXP_MIN {
        return 0.0;
    }
    let n = (x * LOG2E).round_ties_even();
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = POLY[0];
    for &c in &POLY[1..] {
        p = p.mul_add(r, c);
    }
    // 2^n for n in -126..=0, built in the exponent field
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Scores `row` (one query's `q·k` over its visible rows) into probabilities rounded to f16: scale,
/// soft-cap, `exp(x - max)`, then `f16(e · (1 / sum))`. Returns the log-sum-exp of the scaled
/// scores, `max + ln(sum)`, with which softmaxes over parts of a row combine.
pub(crate) fn softmax_f16(isa: Isa, row: &mut [f32], params: ScoreParams) -> f64 {
    #[cfg(target_arch = "x86_64")]
    let (mut max, done) = if params.softcap.is_none() && isa == Isa::Avx2 && isa.is_available() {
        // SAFETY: AVX2, FMA and F16C confirmed above.
        unsafe { avx2::scale_max(row, params.scale) }
    } else {
        (f32::NEG_INFINITY, 0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let (mut max, done) = (f32::NEG_INFINITY, 0);
    for x in row.iter_mut().skip(done) {
        *x *= params.scale;
        if let Some(cap) = params.softcap {
            *x = (*x / cap).tanh() * cap;
        }
        max = max.max(*x);
    }
    let sum = exp_sum(isa, row, max);
    let inv = (1.0 / sum) as f32;
    scale_round_f16(isa, row, inv);
    max as f64 + sum.ln()
}

/// `x[i] = exp(x[i] - max)` and their sum in 8 f64 lanes.
fn exp_sum(isa: Isa, x: &mut [f32], max: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    let (mut lanes, done) = if isa == Isa::Avx2 && isa.is_available() {
        // SAFETY: AVX2, FMA and F16C confirmed above.
        unsafe { avx2::exp_sum(x, max) }
    } else {
        ([0.0f64; 8], 0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let (mut lanes, done) = ([0.0f64; 8], 0);
    let _ = isa;
    for (i, v) in x.iter_mut().enumerate().skip(done) {
        *v = exp_nonpositive(*v - max);
        lanes[i % 8] += *v as f64;
    }
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{EXP_MIN, LN2_HI, LN2_LO, LOG2E, POLY};
    use std::arch::x86_64::*;

    /// [`super::exp_sum`] over the whole 8-value chunks of `x`: the 8 lane sums and how many
    /// values were done.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn exp_sum(x: &mut [f32], max: f32) -> ([f64; 8], usize) {
        let m = _mm256_set1_ps(max);
        let done = x.len() / 8 * 8;
        let (mut lo, mut hi) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        for c in x.chunks_exact_mut(8) {
            // SAFETY: c holds 8 values.
            unsafe {
                let e = exp(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), m));
                _mm256_storeu_ps(c.as_mut_ptr(), e);
                lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
                hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
            }
        }
        let mut lanes = [0.0f64; 8];
        // SAFETY: lanes holds 8 values.
        unsafe {
            _mm256_storeu_pd(lanes.as_mut_ptr(), lo);
            _mm256_storeu_pd(lanes.as_mut_ptr().add(4), hi);
        }
        (lanes, done)
    }

    /// `x[i] *= scale` over the whole 8-value chunks of `x`: their maximum (the maximum of exact
    /// values does not depend on the order) and how many values were done.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn scale_max(x: &mut [f32], scale: f32) -> (f32, usize) {
        let s = _mm256_set1_ps(scale);
        let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
        for c in x.chunks_exact_mut(8) {
            // SAFETY: c holds 8 values.
            unsafe {
                let v = _mm256_mul_ps(_mm256_loadu_ps(c.as_ptr()), s);
                _mm256_storeu_ps(c.as_mut_ptr(), v);
                m = _mm256_max_ps(m, v);
            }
        }
        let mut lanes = [0.0f32; 8];
        // SAFETY: lanes holds 8 values.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), m) };
        (
            lanes.into_iter().fold(f32::NEG_INFINITY, f32::max),
            x.len() / 8 * 8,
        )
    }

    /// [`super::exp_nonpositive`] in 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn exp(x: __m256) -> __m256 {
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
        );
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), x);
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
        let mut p = _mm256_set1_ps(POLY[0]);
        for &c in &POLY[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        let e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
        // lanes below EXP_MIN become +0 (NaN compares false and stays NaN)
        let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_MIN));
        _mm256_andnot_ps(under, e)
    }
}
