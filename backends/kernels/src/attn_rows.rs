//! CPU attention for a block of query rows of one sequence and one KV head at consecutive positions
//! (a prefill chunk, a speculative verify): every row has its own visible span of one shared range
//! of K/V rows (causal: each position sees one more row than the one before; a sliding window moves
//! the start as well).
//!
//! [`crate::attn::attend_f16`] widens each f16 K/V row once per query position, and for a group of
//! one or two query heads the widening costs as much as the products. Here the K and V rows of the
//! shared range are widened once per block, a tile of `TILE` rows at a time, and every query row of
//! the block reads the f32 tile: for a 512-token prefill in blocks of 16 positions, a row is widened
//! 32 times instead of 512.
//!
//! Each row's result equals `attend_f16` over its own span bit for bit: its scores are the same
//! 8-lane dots (reduced eight at a time in the same order), its softmax is the same loop over its
//! span, and its output sums `p · v` in position order; the rows of the shared range outside a
//! row's span enter that sum as exact zeros (`p = 0`), which leave an f32 sum that started at `+0`
//! unchanged. (A K/V value of ±inf outside the span would turn such a zero into NaN, as it does in
//! llama.cpp's graph, which also multiplies the masked probabilities with every V row.)
use std::ops::Range;

#[cfg(target_arch = "x86_64")]
use half::slice::HalfFloatSliceExt;

use crate::Isa;
use crate::attn::{KvRun, ScoreParams, attend_f16};
#[cfg(target_arch = "x86_64")]
use crate::softmax::softmax_f16;

/// K/V rows widened per pass: 64 rows of a 128-wide head are 32 KiB of f32, an L1-sized tile that
/// every query row of the block reads.
#[cfg(target_arch = "x86_64")]
const TILE: usize = 64;

/// Query rows one pass of the SIMD loops serves (their accumulators stay in registers).
#[cfg(target_arch = "x86_64")]
const QR: usize = 4;

/// Buffers [`attend_f16_rows`] reuses across calls.
#[derive(Debug, Default)]
pub struct RowsScratch {
    scores: Vec<f32>,
    #[cfg(target_arch = "x86_64")]
    tile: Vec<f32>,
}

/// Attention of query rows `q` `[m, hd]` (f16-representable values) where row `i` sees rows
/// `spans[i]` of the K/V rows in `runs` (given in position order); `out` `[m, hd]` is overwritten.
#[allow(clippy::too_many_arguments)] // the shapes and buffers of one call, as attend_f16 takes them
pub fn attend_f16_rows(
    isa: Isa,
    q: &[f32],
    hd: usize,
    spans: &[Range<usize>],
    runs: &[KvRun<'_>],
    params: ScoreParams,
    scratch: &mut RowsScratch,
    out: &mut [f32],
) {
    let m = spans.len();
    let n: usize = runs.iter().map(|r| r.k.len() / hd.max(1)).sum();
    debug_assert!(q.len() == m * hd && out.len() == m * hd);
    debug_assert!(spans.iter().all(|s| s.start <= s.end && s.end <= n));
    out.fill(0.0);
    if hd == 0 || m == 0 || n == 0 {
        return;
    }
    // One position (decode, every span the same) has nothing to share across positions: the
    // per-position loops widen each row once for the whole group already.
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2
        && hd.is_multiple_of(8)
        && isa.is_available()
        && spans.iter().any(|s| *s != spans[0])
    {
        let fill = |keys: bool, t0: usize, t1: usize, tile: &mut Vec<f32>| {
            widen(runs, keys, hd, t0, t1, tile)
        };
        tiled(q, hd, spans, &fill, n, params, scratch, out, &mut []);
        return;
    }
    per_span(isa, q, hd, spans, runs, n, params, scratch, out);
}

impl RowsScratch {
    /// The scores buffer, for the per-span paths of other row formats.
    pub(crate) fn scores_mut(&mut self) -> &mut Vec<f32> {
        &mut self.scores
    }
}

/// Fills a tile with rows `t0..t1` of the shared range, keys (`true`) or values, widened to f32:
/// `[t1 - t0, hd]` values.
#[cfg(target_arch = "x86_64")]
pub(crate) type Fill<'f> = &'f dyn Fn(bool, usize, usize, &mut Vec<f32>);

/// The rows of `runs` in `span`, as runs, into `out`.
fn sub_runs<'a>(runs: &[KvRun<'a>], hd: usize, span: &Range<usize>, out: &mut Vec<KvRun<'a>>) {
    out.clear();
    let mut j0 = 0;
    for r in runs {
        let rows = r.k.len() / hd;
        let (a, b) = (span.start.max(j0), span.end.min(j0 + rows));
        if a < b {
            let (x, y) = ((a - j0) * hd, (b - j0) * hd);
            out.push(KvRun {
                k: &r.k[x..y],
                v: &r.v[x..y],
            });
        }
        j0 += rows;
    }
}

/// Consecutive rows with the same span (a position's query heads) as one `attend_f16` call: the
/// portable and NEON paths, and the reference the tiled path is tested against.
#[allow(clippy::too_many_arguments)]
fn per_span(
    isa: Isa,
    q: &[f32],
    hd: usize,
    spans: &[Range<usize>],
    runs: &[KvRun<'_>],
    n: usize,
    params: ScoreParams,
    scratch: &mut RowsScratch,
    out: &mut [f32],
) {
    let mut i = 0;
    let mut sub = Vec::new();
    while i < spans.len() {
        let e = i + spans[i..].iter().take_while(|s| **s == spans[i]).count();
        // a decode step's one span is every row: the runs as given
        let span_runs = if spans[i] == (0..n) {
            runs
        } else {
            sub_runs(runs, hd, &spans[i], &mut sub);
            &sub[..]
        };
        attend_f16(
            isa,
            &q[i * hd..e * hd],
            hd,
            span_runs,
            params,
            &mut scratch.scores,
            &mut out[i * hd..e * hd],
        );
        i = e;
    }
}

#[cfg(target_arch = "x86_64")]
/// Widens rows `t0..t1` of `runs` (keys or values) into `tile` `[t1 - t0, hd]`.
fn widen(runs: &[KvRun<'_>], keys: bool, hd: usize, t0: usize, t1: usize, tile: &mut Vec<f32>) {
    tile.clear();
    tile.resize((t1 - t0) * hd, 0.0);
    let mut j0 = 0;
    for r in runs {
        let src = if keys { r.k } else { r.v };
        let rows = src.len() / hd;
        let (a, b) = (t0.max(j0), t1.min(j0 + rows));
        if a < b {
            let (src, dst) = (
                &src[(a - j0) * hd..(b - j0) * hd],
                &mut tile[(a - t0) * hd..(b - t0) * hd],
            );
            widen_values(src, dst);
        }
        j0 += rows;
        if j0 >= t1 {
            break;
        }
    }
}

#[cfg(target_arch = "x86_64")]
/// `dst[i] = src[i]` widened to f32.
fn widen_values(src: &[half::f16], dst: &mut [f32]) {
    if Isa::Avx2.is_available() {
        // SAFETY: AVX2, FMA and F16C confirmed above.
        unsafe { avx2::widen(src, dst) };
        return;
    }
    src.convert_to_f32_slice(dst);
}

#[cfg(target_arch = "x86_64")]
/// The rows of tile `t0..t1` that some row of `spans` sees (empty when none does).
fn seen(spans: &[Range<usize>], t0: usize, t1: usize) -> Range<usize> {
    let lo = spans.iter().map(|s| s.start).min().unwrap_or(0).max(t0);
    let hi = spans.iter().map(|s| s.end).max().unwrap_or(0).min(t1);
    lo..hi.max(lo)
}

/// Walks the `n` shared rows (keys or values) in tiles of [`TILE`] rows widened by `fill` and,
/// for each pass of [`QR`] query rows that sees some of a tile, calls `f(g0, g1, j0, rows)` with
/// the widened rows `j0..` that the pass sees.
#[cfg(target_arch = "x86_64")]
fn each_tile(
    fill: Fill<'_>,
    keys: bool,
    hd: usize,
    n: usize,
    spans: &[Range<usize>],
    tile: &mut Vec<f32>,
    mut f: impl FnMut(usize, usize, usize, &[f32]),
) {
    for t0 in (0..n).step_by(TILE) {
        let t1 = (t0 + TILE).min(n);
        fill(keys, t0, t1, tile);
        for g0 in (0..spans.len()).step_by(QR) {
            let g1 = (g0 + QR).min(spans.len());
            let r = seen(&spans[g0..g1], t0, t1);
            if !r.is_empty() {
                f(
                    g0,
                    g1,
                    r.start,
                    &tile[(r.start - t0) * hd..(r.end - t0) * hd],
                );
            }
        }
    }
}

/// The AVX2 path: scores tile by tile, softmax per row, then `p · v` tile by tile (`fill` widens
/// the shared rows, whatever their storage; the caller has confirmed AVX2, FMA and F16C and that
/// `hd` is a multiple of 8). Row `i`'s log-sum-exp goes to `lse[i]` when `lse` holds it.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn tiled(
    q: &[f32],
    hd: usize,
    spans: &[Range<usize>],
    fill: Fill<'_>,
    n: usize,
    params: ScoreParams,
    scratch: &mut RowsScratch,
    out: &mut [f32],
    lse: &mut [f32],
) {
    let m = spans.len();
    let RowsScratch { scores, tile } = scratch;
    // No clearing: every value is written below (the scores of each row's span by `qk`, the rest
    // of its row zeroed after the softmax) before `pv` reads it.
    if scores.len() < m * n {
        scores.resize(m * n, 0.0);
    }
    let scores = &mut scores[..m * n];
    // 1. scores[i][j] = q_i · k_j for the rows a pass of QR query rows sees
    each_tile(fill, true, hd, n, spans, tile, |g0, g1, j0, k| {
        // SAFETY: AVX2, FMA and F16C were confirmed by the caller; hd is a multiple of 8, `k` is
        // whole rows, q holds rows g0..g1 and scores rows g0..g1 of n values each, with
        // j0 + k.len() / hd <= n.
        unsafe { avx2::qk(&q[g0 * hd..g1 * hd], hd, k, n, j0, &mut scores[g0 * n..]) };
    });
    // 2. softmax over each row's span; the rest of its row becomes exact zeros
    for (i, (row, span)) in scores.chunks_exact_mut(n).zip(spans).enumerate() {
        if !span.is_empty() {
            let l = softmax_f16(Isa::Avx2, &mut row[span.clone()], params);
            if let Some(x) = lse.get_mut(i) {
                *x = l as f32;
            }
        }
        row[..span.start].fill(0.0);
        row[span.end..].fill(0.0);
    }
    // 3. out[i] += Σ_j p[i][j] · v_j in position order, tile after tile
    each_tile(fill, false, hd, n, spans, tile, |g0, g1, j0, v| {
        // SAFETY: as for the scores; out holds rows g0..g1 of hd values.
        unsafe { avx2::pv(&scores[g0 * n..], n, j0, v, hd, &mut out[g0 * hd..g1 * hd]) };
    });
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::QR;
    use std::arch::x86_64::*;

    /// `dst[i] = src[i]` widened, 8 values at a time (the tail one by one).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn widen(src: &[half::f16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n values are readable in src and writable in dst.
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
            i += 8;
        }
        for (d, s) in dst[i..n].iter_mut().zip(&src[i..n]) {
            *d = s.to_f32();
        }
    }

    /// The 8-lane sums of `a[0..8]`, each `((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)) + 0.0` as the
    /// scalar dot reduces, in lanes `[0, 2, 4, 6, 1, 3, 5, 7]`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum8(a: [__m256; 8]) -> __m256 {
        // [a_i.lo + a_i.hi | a_{i+1}.lo + a_{i+1}.hi]: lanes a0+a4, a1+a5, a2+a6, a3+a7 of each
        let half = |x: __m256, y: __m256| {
            _mm256_add_ps(
                _mm256_permute2f128_ps::<0x20>(x, y),
                _mm256_permute2f128_ps::<0x31>(x, y),
            )
        };
        let (u01, u23, u45, u67) = (half(a[0], a[1]), half(a[2], a[3]), half(a[4], a[5]), {
            half(a[6], a[7])
        });
        // per 128-bit lane, pairs (a0+a4)+(a1+a5) and (a2+a6)+(a3+a7), then their sum
        let w0 = _mm256_hadd_ps(u01, u23);
        let w1 = _mm256_hadd_ps(u45, u67);
        _mm256_add_ps(_mm256_hadd_ps(w0, w1), _mm256_setzero_ps())
    }

    /// Scores of up to [`QR`] query rows `q` `[nq, hd]` against the f32 rows `k` `[rows, hd]`,
    /// which are rows `j0..j0 + rows` of `s` `[nq, n]`. Two K rows per pass, one accumulator per
    /// (query, row) in the 8-lane order of the scalar dot.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn qk(q: &[f32], hd: usize, k: &[f32], n: usize, j0: usize, s: &mut [f32]) {
        // SAFETY (all arms): as for `qk_rows`.
        unsafe {
            match q.len() / hd {
                1 => qk_rows::<1>(q, hd, k, n, j0, s),
                2 => qk_rows::<2>(q, hd, k, n, j0, s),
                3 => qk_rows::<3>(q, hd, k, n, j0, s),
                _ => qk_rows::<QR>(q, hd, k, n, j0, s),
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn qk_rows<const Q: usize>(
        q: &[f32],
        hd: usize,
        k: &[f32],
        n: usize,
        j0: usize,
        s: &mut [f32],
    ) {
        let rows = k.len() / hd;
        debug_assert!(q.len() >= Q * hd && s.len() >= (Q - 1) * n + j0 + rows);
        let mut r = 0;
        while r < rows {
            let two = r + 1 < rows;
            // SAFETY: rows r and r + 1 (when `two`) are inside `k`, c + 8 <= hd, and each of the Q
            // query rows holds hd values.
            let sums = unsafe {
                let k0 = k.as_ptr().add(r * hd);
                let k1 = k.as_ptr().add((r + usize::from(two)) * hd);
                let mut acc = [[_mm256_setzero_ps(); 2]; Q];
                for c in (0..hd).step_by(8) {
                    let kv = [_mm256_loadu_ps(k0.add(c)), _mm256_loadu_ps(k1.add(c))];
                    for (qi, a) in acc.iter_mut().enumerate() {
                        let qv = _mm256_loadu_ps(q.as_ptr().add(qi * hd + c));
                        a[0] = _mm256_fmadd_ps(qv, kv[0], a[0]);
                        a[1] = _mm256_fmadd_ps(qv, kv[1], a[1]);
                    }
                }
                let mut all = [_mm256_setzero_ps(); 8];
                for (qi, a) in acc.iter().enumerate() {
                    all[2 * qi] = a[0];
                    all[2 * qi + 1] = a[1];
                }
                let mut t = [0.0f32; 8];
                _mm256_storeu_ps(t.as_mut_ptr(), hsum8(all));
                t
            };
            // lane qi: (query qi, row r); lane 4 + qi: (query qi, row r + 1)
            for qi in 0..Q {
                s[qi * n + j0 + r] = sums[qi];
                if two {
                    s[qi * n + j0 + r + 1] = sums[4 + qi];
                }
            }
            r += 1 + usize::from(two);
        }
    }

    /// `o[qi] += Σ_r p[qi][j0 + r] · v_r` over the f32 rows `v` `[rows, hd]` in order, for up to
    /// [`QR`] query rows (`p` `[nq, n]`, `o` `[nq, hd]`).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn pv(p: &[f32], n: usize, j0: usize, v: &[f32], hd: usize, o: &mut [f32]) {
        // SAFETY (all arms): as for `pv_pass`.
        unsafe {
            match o.len() / hd {
                1 => pv_cols::<1, 4>(p, n, j0, v, hd, o),
                2 => pv_cols::<2, 4>(p, n, j0, v, hd, o),
                3 => pv_cols::<3, 2>(p, n, j0, v, hd, o),
                _ => pv_cols::<QR, 2>(p, n, j0, v, hd, o),
            }
        }
    }

    /// [`pv`] in passes of `W` blocks of 8 columns (fewer at the end).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn pv_cols<const Q: usize, const W: usize>(
        p: &[f32],
        n: usize,
        j0: usize,
        v: &[f32],
        hd: usize,
        o: &mut [f32],
    ) {
        let chunks = hd / 8;
        let mut c0 = 0;
        while c0 < chunks {
            // SAFETY: the blocks passed end at or before `chunks`; the caller's contract covers
            // the rest.
            if chunks - c0 >= W {
                unsafe { pv_pass::<Q, W>(p, n, j0, v, hd, o, c0) };
                c0 += W;
            } else {
                unsafe { pv_pass::<Q, 1>(p, n, j0, v, hd, o, c0) };
                c0 += 1;
            }
        }
    }

    /// Column blocks `c0..c0 + W` of every query row's output, continued over the rows of `v`.
    #[inline(always)]
    unsafe fn pv_pass<const Q: usize, const W: usize>(
        p: &[f32],
        n: usize,
        j0: usize,
        v: &[f32],
        hd: usize,
        o: &mut [f32],
        c0: usize,
    ) {
        let rows = v.len() / hd;
        debug_assert!(o.len() >= Q * hd && p.len() >= (Q - 1) * n + j0 + rows);
        // SAFETY: (c0 + W) · 8 <= hd for every row of v and o; j0 + r < n indexes p's rows.
        unsafe {
            let op = o.as_mut_ptr();
            let mut acc: [[__m256; W]; Q] = std::array::from_fn(|qi| {
                std::array::from_fn(|w| _mm256_loadu_ps(op.add(qi * hd + 8 * (c0 + w))))
            });
            for r in 0..rows {
                let vr = v.as_ptr().add(r * hd);
                let vv: [__m256; W] =
                    std::array::from_fn(|w| _mm256_loadu_ps(vr.add(8 * (c0 + w))));
                for (qi, a) in acc.iter_mut().enumerate() {
                    let wgt = _mm256_set1_ps(*p.get_unchecked(qi * n + j0 + r));
                    for w in 0..W {
                        a[w] = _mm256_fmadd_ps(wgt, vv[w], a[w]);
                    }
                }
            }
            for (qi, a) in acc.iter().enumerate() {
                for (w, x) in a.iter().enumerate() {
                    _mm256_storeu_ps(op.add(qi * hd + 8 * (c0 + w)), *x);
                }
            }
        }
    }
}
