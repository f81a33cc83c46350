//! The inner loops of CPU attention over an f16 KV cache: scores `q·k`, softmax, and the
//! probability-weighted sum of V, for a few query heads that share one KV head and one visible
//! range of positions (grouped-query attention: the heads of a group read the same K/V rows, so each
//! row is widened from f16 once and used by all of them).
//!
//! Arithmetic as llama.cpp's CPU graph does it without flash attention, and as the scalar
//! reference here spells out: the query is f16-representable (the caller rounds it), `q·k` sums in
//! 8 lanes (lane `l` takes elements `l, l+8, …`) reduced as `((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7))`,
//! the exponential and its sum as [`crate::softmax`] computes them, the probabilities rounded to
//! f16 before the product with V, and V accumulated row by row in position order. Products of two
//! f16 values are exact in f32, so a fused multiply-add gives the same result as a multiply then an
//! add: the AVX2 and NEON paths equal the scalar one bit for bit (tested).
use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::Isa;
use crate::softmax::softmax_f16;

/// K and V rows `[rows, head_dim]` of one KV head for consecutive positions (one cache block's
/// share of the visible range; runs are given in position order).
#[derive(Clone, Copy, Debug)]
pub struct KvRun<'a> {
    /// keys, `rows · head_dim` values
    pub k: &'a [f16],
    /// values, `rows · head_dim` values
    pub v: &'a [f16],
}

/// Scale and optional logit soft-capping (`tanh(x / cap) · cap`, Gemma 2) applied to `q·k`.
#[derive(Clone, Copy, Debug)]
pub struct ScoreParams {
    /// usually `1/√head_dim`
    pub scale: f32,
    /// soft-cap of the scaled scores
    pub softcap: Option<f32>,
}

/// Most query heads one pass of the SIMD loops serves (accumulators held in registers).
const NQ: usize = 4;

/// Attention of `q` `[nq, hd]` (f16-representable values) over the rows of `runs`; `out`
/// `[nq, hd]` is overwritten. `scores` is scratch, reused across calls to avoid an allocation.
pub fn attend_f16(
    isa: Isa,
    q: &[f32],
    hd: usize,
    runs: &[KvRun<'_>],
    params: ScoreParams,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    attend_f16_lse(isa, q, hd, runs, params, scores, out, &mut []);
}

/// [`attend_f16`], also writing each query's log-sum-exp of its scaled scores into `lse` (when
/// it holds `nq` values): attention over a range of positions split into parts is the parts'
/// outputs weighted by `exp(lse_part − lse_all)` (split-K decoding).
#[allow(clippy::too_many_arguments)]
pub fn attend_f16_lse(
    isa: Isa,
    q: &[f32],
    hd: usize,
    runs: &[KvRun<'_>],
    params: ScoreParams,
    scores: &mut Vec<f32>,
    out: &mut [f32],
    lse: &mut [f32],
) {
    let nq = q.len() / hd.max(1);
    let n: usize = runs.iter().map(|r| r.k.len() / hd.max(1)).sum();
    out.fill(0.0);
    if hd == 0 || nq == 0 || n == 0 {
        return;
    }
    scores.clear();
    scores.resize(nq * n, 0.0);
    // 1. scores[qi][j] = q_qi · k_j
    for (qc, sc) in q.chunks(NQ * hd).zip(scores.chunks_mut(NQ * n)) {
        qk(isa, qc, hd, runs, n, sc);
    }
    // 2. softmax per query, probabilities rounded to f16
    for (i, row) in scores.chunks_exact_mut(n).enumerate() {
        let l = softmax_f16(isa, row, params);
        if let Some(x) = lse.get_mut(i) {
            *x = l as f32;
        }
    }
    // 3. out[qi] = Σ_j p[qi][j] · v_j
    for (pc, oc) in scores.chunks(NQ * n).zip(out.chunks_mut(NQ * hd)) {
        pv(isa, pc, n, runs, hd, oc);
    }
}

/// `x[i] = f16(x[i])` widened back to f32: a query rounded as ggml's f16 matmuls round their f32
/// operand.
pub fn round_f16(isa: Isa, x: &mut [f32]) {
    scale_round_f16(isa, x, 1.0); // x · 1 is exact
}

/// `x[i] = f16(x[i] · s)` widened back to f32 (IEEE round to nearest even both ways, so the F16C
/// conversion equals the portable one).
pub(crate) fn scale_round_f16(isa: Isa, x: &mut [f32], s: f32) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && isa.is_available() {
        // SAFETY: AVX2, FMA and F16C confirmed above.
        unsafe { avx2::scale_round_f16(x, s) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        // SAFETY: NEON is the aarch64 baseline.
        unsafe { neon::scale_round_f16(x, s) };
        return;
    }
    let _ = isa;
    for v in x.iter_mut() {
        *v = f16::from_f32(*v * s).to_f32();
    }
}

/// Scores of up to [`NQ`] queries `q` `[nq, hd]` against every row: `s` `[nq, n]`.
fn qk(isa: Isa, q: &[f32], hd: usize, runs: &[KvRun<'_>], n: usize, s: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && hd.is_multiple_of(8) && isa.is_available() {
        // SAFETY: AVX2, FMA and F16C confirmed above; `hd` is a multiple of 8 and every slice is
        // whole rows of `hd` (the loops index inside them).
        unsafe { avx2::qk(q, hd, runs, n, s) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon && hd.is_multiple_of(8) {
        // SAFETY: as above, with NEON the aarch64 baseline.
        unsafe { neon::qk(q, hd, runs, n, s) };
        return;
    }
    let _ = isa;
    let mut kf = vec![0.0f32; hd];
    let mut j = 0;
    for run in runs {
        for kr in run.k.chunks_exact(hd) {
            kr.convert_to_f32_slice(&mut kf);
            for (qi, qr) in q.chunks_exact(hd).enumerate() {
                s[qi * n + j] = dot(qr, &kf);
            }
            j += 1;
        }
    }
}

/// `o[qi] = Σ_j p[qi][j] · v_j` for up to [`NQ`] queries (`p` `[nq, n]`, `o` `[nq, hd]`, zeroed).
fn pv(isa: Isa, p: &[f32], n: usize, runs: &[KvRun<'_>], hd: usize, o: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && hd.is_multiple_of(8) && isa.is_available() {
        // SAFETY: as in `qk`.
        unsafe { avx2::pv(p, n, runs, hd, o) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon && hd.is_multiple_of(8) {
        // SAFETY: as in `qk`.
        unsafe { neon::pv(p, n, runs, hd, o) };
        return;
    }
    let _ = isa;
    let mut vf = vec![0.0f32; hd];
    let mut j = 0;
    for run in runs {
        for vr in run.v.chunks_exact(hd) {
            vr.convert_to_f32_slice(&mut vf);
            for (qi, orow) in o.chunks_exact_mut(hd).enumerate() {
                let w = p[qi * n + j];
                for (acc, &x) in orow.iter_mut().zip(&vf) {
                    *acc += w * x;
                }
            }
            j += 1;
        }
    }
}

/// `a·b` in 8 lanes summed in a fixed order (the order the SIMD path reproduces).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{KvRun, NQ};
    use std::arch::x86_64::*;

    /// `((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7))`, then `+ 0.0` as the scalar dot adds its empty tail.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum(a: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        let h = _mm_hadd_ps(s, s); // [s0+s1, s2+s3, ..]
        let h = _mm_hadd_ps(h, h); // [(s0+s1)+(s2+s3), ..]
        _mm_cvtss_f32(h) + 0.0
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_h(p: *const half::f16) -> __m256 {
        // SAFETY: the caller points at 8 readable f16 values.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }

    /// See [`super::scale_round_f16`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn scale_round_f16(x: &mut [f32], s: f32) {
        let sv = _mm256_set1_ps(s);
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: c holds 8 values.
            unsafe {
                let v = _mm256_mul_ps(_mm256_loadu_ps(c.as_ptr()), sv);
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
            }
        }
        for v in chunks.into_remainder() {
            *v = half::f16::from_f32(*v * s).to_f32();
        }
    }

    /// See [`super::qk`]. Two K rows at a time, each widened once per 8 values and multiplied with
    /// every query (one accumulator per query and row: the same sums as one row at a time).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn qk(q: &[f32], hd: usize, runs: &[KvRun<'_>], n: usize, s: &mut [f32]) {
        let nq = q.len() / hd;
        debug_assert!(nq <= NQ && s.len() >= nq * n);
        // SAFETY (all arms): as for `qk_rows`.
        unsafe {
            match nq {
                1 => qk_rows::<1>(q, hd, runs, n, s),
                2 => qk_rows::<2>(q, hd, runs, n, s),
                3 => qk_rows::<3>(q, hd, runs, n, s),
                _ => qk_rows::<4>(q, hd, runs, n, s),
            }
        }
    }

    /// [`qk`] for `Q` queries: rows in pairs inside each run, a run's odd last row alone.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn qk_rows<const Q: usize>(
        q: &[f32],
        hd: usize,
        runs: &[KvRun<'_>],
        n: usize,
        s: &mut [f32],
    ) {
        // SAFETY: every pointer stays inside its run's rows (r, and r + 1 only when `two`) or a
        // query row of hd values, for c + 8 <= hd.
        unsafe {
            let mut j = 0;
            for run in runs {
                let rows = run.k.len() / hd;
                let mut r = 0;
                while r < rows {
                    let two = r + 1 < rows;
                    let k0 = run.k.as_ptr().add(r * hd);
                    let k1 = run.k.as_ptr().add((r + usize::from(two)) * hd);
                    let mut acc = [[_mm256_setzero_ps(); 2]; Q];
                    for c in (0..hd).step_by(8) {
                        // SAFETY: c + 8 <= hd, rows r and r + 1 (when `two`) are inside the run, and
                        // each query row holds hd values.
                        let kv = [load_h(k0.add(c)), load_h(k1.add(c))];
                        for (qi, a) in acc.iter_mut().enumerate() {
                            let qv = _mm256_loadu_ps(q.as_ptr().add(qi * hd + c));
                            a[0] = _mm256_fmadd_ps(qv, kv[0], a[0]);
                            a[1] = _mm256_fmadd_ps(qv, kv[1], a[1]);
                        }
                    }
                    for (qi, a) in acc.iter().enumerate() {
                        s[qi * n + j] = hsum(a[0]);
                        if two {
                            s[qi * n + j + 1] = hsum(a[1]);
                        }
                    }
                    let step = 1 + usize::from(two);
                    j += step;
                    r += step;
                }
            }
        }
    }

    /// See [`super::pv`]. Per block of output columns (32 for up to 2 queries, 16 for more: the
    /// accumulators stay in the 16 registers), each V row is widened once and feeds every query;
    /// each (query, column) sums its rows in position order, as one column block at a time does.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn pv(p: &[f32], n: usize, runs: &[KvRun<'_>], hd: usize, o: &mut [f32]) {
        let nq = o.len() / hd;
        debug_assert!(nq <= NQ && p.len() >= nq * n);
        // SAFETY (all arms): as for `pv_cols`.
        unsafe {
            match nq {
                1 => pv_cols::<1, 4>(p, n, runs, hd, o),
                2 => pv_cols::<2, 4>(p, n, runs, hd, o),
                3 => pv_cols::<3, 2>(p, n, runs, hd, o),
                _ => pv_cols::<4, 2>(p, n, runs, hd, o),
            }
        }
    }

    /// [`pv`] for `Q` queries, `W` blocks of 8 columns per pass over the rows (fewer at the end).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pv_cols<const Q: usize, const W: usize>(
        p: &[f32],
        n: usize,
        runs: &[KvRun<'_>],
        hd: usize,
        o: &mut [f32],
    ) {
        let chunks = hd / 8;
        let mut c0 = 0;
        while c0 < chunks {
            // SAFETY: the blocks passed end at or before `chunks` (hd / 8); the caller's contract
            // covers the rest.
            if chunks - c0 >= W {
                unsafe { pv_pass::<Q, W>(p, n, runs, hd, o, c0) };
                c0 += W;
            } else {
                unsafe { pv_pass::<Q, 1>(p, n, runs, hd, o, c0) };
                c0 += 1;
            }
        }
    }

    /// Column blocks `c0..c0 + W` (of 8) of every query's output, over all rows.
    #[inline(always)]
    unsafe fn pv_pass<const Q: usize, const W: usize>(
        p: &[f32],
        n: usize,
        runs: &[KvRun<'_>],
        hd: usize,
        o: &mut [f32],
        c0: usize,
    ) {
        // SAFETY: (c0 + W) · 8 <= hd for every V row and output row; j < n indexes p's rows.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); W]; Q];
            let mut j = 0;
            for run in runs {
                for vr in run.v.chunks_exact(hd) {
                    // SAFETY: (c0 + W) · 8 <= hd = vr.len(); j < n indexes p's rows.
                    let vv: [__m256; W] =
                        std::array::from_fn(|w| load_h(vr.as_ptr().add(8 * (c0 + w))));
                    for (qi, a) in acc.iter_mut().enumerate() {
                        let wgt = _mm256_set1_ps(p[qi * n + j]);
                        for w in 0..W {
                            a[w] = _mm256_fmadd_ps(wgt, vv[w], a[w]);
                        }
                    }
                    j += 1;
                }
            }
            for (qi, a) in acc.iter().enumerate() {
                for (w, v) in a.iter().enumerate() {
                    // SAFETY: (c0 + w) · 8 + 8 <= hd, inside row qi of o.
                    _mm256_storeu_ps(o.as_mut_ptr().add(qi * hd + 8 * (c0 + w)), *v);
                }
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    //! The NEON twin of the AVX2 loops: 8 lanes as two 4-lane registers, the same sums in the same
    //! order.
    #![allow(unsafe_op_in_unsafe_fn)]
    use super::{KvRun, NQ};
    use crate::neon::f16x4;
    use std::arch::aarch64::*;

    /// `((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7))`, then `+ 0.0` as the scalar dot adds its empty tail.
    #[inline(always)]
    unsafe fn hsum(a: [float32x4_t; 2]) -> f32 {
        let s = vaddq_f32(a[0], a[1]);
        let h = vpaddq_f32(s, s); // [s0+s1, s2+s3, ..]
        (vgetq_lane_f32::<0>(h) + vgetq_lane_f32::<1>(h)) + 0.0
    }

    /// 8 f16 values at `p`, widened.
    #[inline(always)]
    unsafe fn load_h(p: *const half::f16) -> [float32x4_t; 2] {
        [f16x4(p as *const u8), f16x4(p.add(4) as *const u8)]
    }

    /// See [`super::scale_round_f16`]: `fcvtn` rounds to nearest even (the default FPCR mode).
    #[target_feature(enable = "neon")]
    pub(super) unsafe fn scale_round_f16(x: &mut [f32], s: f32) {
        let mut chunks = x.chunks_exact_mut(4);
        for c in &mut chunks {
            let v = vmulq_n_f32(vld1q_f32(c.as_ptr()), s);
            let r: float32x4_t;
            std::arch::asm!(
                "fcvtn {t:v}.4h, {v:v}.4s",
                "fcvtl {r:v}.4s, {t:v}.4h",
                v = in(vreg) v,
                t = out(vreg) _,
                r = out(vreg) r,
                options(pure, nomem, nostack, preserves_flags),
            );
            vst1q_f32(c.as_mut_ptr(), r);
        }
        for v in chunks.into_remainder() {
            *v = half::f16::from_f32(*v * s).to_f32();
        }
    }

    /// See [`super::qk`].
    #[target_feature(enable = "neon")]
    pub(super) unsafe fn qk(q: &[f32], hd: usize, runs: &[KvRun<'_>], n: usize, s: &mut [f32]) {
        let nq = q.len() / hd;
        debug_assert!(nq <= NQ && s.len() >= nq * n);
        let mut j = 0;
        for run in runs {
            for kr in run.k.chunks_exact(hd) {
                let mut acc = [[vdupq_n_f32(0.0); 2]; NQ];
                for c in (0..hd).step_by(8) {
                    let kv = load_h(kr.as_ptr().add(c));
                    for (qi, a) in acc.iter_mut().enumerate().take(nq) {
                        let qp = q.as_ptr().add(qi * hd + c);
                        a[0] = vfmaq_f32(a[0], vld1q_f32(qp), kv[0]);
                        a[1] = vfmaq_f32(a[1], vld1q_f32(qp.add(4)), kv[1]);
                    }
                }
                for (qi, a) in acc.iter().enumerate().take(nq) {
                    s[qi * n + j] = hsum(*a);
                }
                j += 1;
            }
        }
    }

    /// See [`super::pv`].
    #[target_feature(enable = "neon")]
    pub(super) unsafe fn pv(p: &[f32], n: usize, runs: &[KvRun<'_>], hd: usize, o: &mut [f32]) {
        let nq = o.len() / hd;
        debug_assert!(nq <= NQ && p.len() >= nq * n);
        for c in (0..hd).step_by(8) {
            let mut acc = [[vdupq_n_f32(0.0); 2]; NQ];
            let mut j = 0;
            for run in runs {
                for vr in run.v.chunks_exact(hd) {
                    let vv = load_h(vr.as_ptr().add(c));
                    for (qi, a) in acc.iter_mut().enumerate().take(nq) {
                        let w = vdupq_n_f32(p[qi * n + j]);
                        a[0] = vfmaq_f32(a[0], w, vv[0]);
                        a[1] = vfmaq_f32(a[1], w, vv[1]);
                    }
                    j += 1;
                }
            }
            for (qi, a) in acc.iter().enumerate().take(nq) {
                let op = o.as_mut_ptr().add(qi * hd + c);
                vst1q_f32(op, a[0]);
                vst1q_f32(op.add(4), a[1]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    /// The score and weighted-sum loops alone, bit for bit against scalar: through `attend_f16` a
    /// one-ulp difference in a score is mostly absorbed by the f16-rounded probabilities.
    #[test]
    fn qk_and_pv_paths_agree_bit_for_bit() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut halves = |n: usize| -> Vec<f16> {
            (0..n)
                .map(|_| f16::from_f32(rng.random_range(-2.0..2.0)))
                .collect()
        };
        for (hd, nq, n) in [
            (64, 4, 37),
            (256, 3, 16),
            (8, 1, 5),
            (128, 2, 33),
            (40, 1, 17),
            (24, 3, 2),
        ] {
            let (k, v) = (halves(n * hd), halves(n * hd));
            let q: Vec<f32> = halves(nq * hd).iter().map(|x| x.to_f32()).collect();
            let p: Vec<f32> = halves(nq * n).iter().map(|x| x.to_f32()).collect();
            let runs: Vec<KvRun<'_>> = k
                .chunks(16 * hd)
                .zip(v.chunks(16 * hd))
                .map(|(k, v)| KvRun { k, v })
                .collect();
            let mut want = (vec![0.0; nq * n], vec![0.0; nq * hd]);
            qk(Isa::Scalar, &q, hd, &runs, n, &mut want.0);
            pv(Isa::Scalar, &p, n, &runs, hd, &mut want.1);
            for isa in Isa::ALL
                .into_iter()
                .filter(|i| *i != Isa::Scalar && i.is_available())
            {
                let mut got = (vec![0.0; nq * n], vec![0.0; nq * hd]);
                qk(isa, &q, hd, &runs, n, &mut got.0);
                pv(isa, &p, n, &runs, hd, &mut got.1);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got.0), bits(&want.0), "{isa:?} scores hd {hd}");
                assert_eq!(bits(&got.1), bits(&want.1), "{isa:?} sums hd {hd}");
                let mut r = want.1.clone();
                scale_round_f16(isa, &mut r, 0.37);
                let mut rs = want.1.clone();
                scale_round_f16(Isa::Scalar, &mut rs, 0.37);
                assert_eq!(bits(&r), bits(&rs), "{isa:?} f16 rounding");
            }
        }
    }
}
