//! The attention inner loops: the AVX2 path equals the scalar one bit for bit, and both equal a
//! plain softmax-weighted sum (f64) within f16 rounding.
use cinder_kernels::Isa;
use cinder_kernels::attn::{KvRun, ScoreParams, attend_f16};
use half::f16;
use rand::{Rng, SeedableRng, rngs::StdRng};

fn halves(n: usize, rng: &mut StdRng) -> Vec<f16> {
    (0..n)
        .map(|_| f16::from_f32(rng.random_range(-2.0f32..2.0)))
        .collect()
}

/// `rows` K/V rows split into runs of at most `block` rows (as a paged cache hands them over).
fn runs<'a>(k: &'a [f16], v: &'a [f16], hd: usize, block: usize) -> Vec<KvRun<'a>> {
    k.chunks(block * hd)
        .zip(v.chunks(block * hd))
        .map(|(k, v)| KvRun { k, v })
        .collect()
}

#[test]
fn simd_equals_scalar_and_reference() {
    let mut rng = StdRng::seed_from_u64(7);
    // head widths (64: SmolLM2, 256: Gemma-3, 12: not a multiple of 8), query heads per KV head
    // (1..6 crosses the 4-query register chunk), context lengths (1, a block, ragged).
    for &hd in &[64usize, 256, 12] {
        for &nq in &[1usize, 3, 4, 6] {
            for &n in &[1usize, 16, 37] {
                let q: Vec<f32> = halves(nq * hd, &mut rng)
                    .iter()
                    .map(|x| x.to_f32())
                    .collect();
                let (k, v) = (halves(n * hd, &mut rng), halves(n * hd, &mut rng));
                let r = runs(&k, &v, hd, 16);
                for softcap in [None, Some(1.5f32)] {
                    let p = ScoreParams {
                        scale: 1.0 / (hd as f32).sqrt(),
                        softcap,
                    };
                    let mut scratch = Vec::new();
                    let mut scalar = vec![f32::NAN; nq * hd];
                    attend_f16(Isa::Scalar, &q, hd, &r, p, &mut scratch, &mut scalar);
                    for isa in Isa::ALL
                        .into_iter()
                        .filter(|i| *i != Isa::Scalar && i.is_available())
                    {
                        let mut simd = vec![f32::NAN; nq * hd];
                        attend_f16(isa, &q, hd, &r, p, &mut scratch, &mut simd);
                        let (a, b): (Vec<u32>, Vec<u32>) = (
                            scalar.iter().map(|x| x.to_bits()).collect(),
                            simd.iter().map(|x| x.to_bits()).collect(),
                        );
                        assert_eq!(a, b, "{isa:?} hd {hd} nq {nq} n {n} softcap {softcap:?}");
                    }
                    // Reference: f64 softmax of the scaled (capped) scores, weighted sum of V.
                    for qi in 0..nq {
                        let qr = &q[qi * hd..(qi + 1) * hd];
                        let s: Vec<f64> = (0..n)
                            .map(|j| {
                                let x: f64 = (0..hd)
                                    .map(|d| qr[d] as f64 * k[j * hd + d].to_f64())
                                    .sum::<f64>()
                                    * p.scale as f64;
                                softcap.map_or(x, |c| (x / c as f64).tanh() * c as f64)
                            })
                            .collect();
                        let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                        let sum: f64 = e.iter().sum();
                        for d in 0..hd {
                            let want: f64 =
                                (0..n).map(|j| e[j] / sum * v[j * hd + d].to_f64()).sum();
                            let got = scalar[qi * hd + d] as f64;
                            // probabilities rounded to f16: relative 2^-11 each, |v| <= 2
                            assert!(
                                (got - want).abs() < 4e-3,
                                "hd {hd} nq {nq} n {n}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn empty_inputs_give_zeros() {
    let mut scratch = Vec::new();
    let mut out = vec![f32::NAN; 64];
    let p = ScoreParams {
        scale: 0.125,
        softcap: None,
    };
    attend_f16(
        Isa::detect(),
        &[0.5; 64],
        64,
        &[],
        p,
        &mut scratch,
        &mut out,
    );
    assert!(out.iter().all(|&x| x == 0.0));
}

/// Blocks of consecutive positions (causal, with and without a sliding window, a cached prefix,
/// GQA groups of 1-4 heads): the tiled rows path equals the portable per-position path bit for bit.
#[test]
fn rows_equal_per_position_bit_for_bit() {
    use cinder_kernels::attn_rows::{RowsScratch, attend_f16_rows};
    let mut rng = StdRng::seed_from_u64(11);
    for &hd in &[64usize, 128, 256, 12] {
        for &group in &[1usize, 2, 3, 4] {
            for &(past, positions) in &[(0usize, 1usize), (0, 2), (0, 19), (7, 16), (70, 37)] {
                for window in [None, Some(9usize)] {
                    let hi = past + positions;
                    let lo = window.map_or(0, |w| (past + 1).saturating_sub(w));
                    let n = hi - lo;
                    let (k, v) = (halves(n * hd, &mut rng), halves(n * hd, &mut rng));
                    let m = positions * group;
                    let q: Vec<f32> = halves(m * hd, &mut rng)
                        .iter()
                        .map(|x| x.to_f32())
                        .collect();
                    let spans: Vec<_> = (0..positions)
                        .flat_map(|i| {
                            let pos = past + i;
                            let first = window.map_or(0, |w| (pos + 1).saturating_sub(w));
                            std::iter::repeat_n(first - lo..pos + 1 - lo, group)
                        })
                        .collect();
                    let r = runs(&k, &v, hd, 16);
                    let p = ScoreParams {
                        scale: 1.0 / (hd as f32).sqrt(),
                        softcap: (group == 3).then_some(1.5),
                    };
                    let mut scratch = RowsScratch::default();
                    let mut want = vec![f32::NAN; m * hd];
                    attend_f16_rows(Isa::Scalar, &q, hd, &spans, &r, p, &mut scratch, &mut want);
                    // the scalar rows path is attend_f16 per position
                    let mut one = Vec::new();
                    for (i, span) in spans.iter().enumerate() {
                        let sub: Vec<f16> = k[span.start * hd..span.end * hd].to_vec();
                        let subv: Vec<f16> = v[span.start * hd..span.end * hd].to_vec();
                        let mut o = vec![f32::NAN; hd];
                        let qi = &q[i * hd..(i + 1) * hd];
                        attend_f16(
                            Isa::Scalar,
                            qi,
                            hd,
                            &runs(&sub, &subv, hd, 16),
                            p,
                            &mut one,
                            &mut o,
                        );
                        assert_eq!(
                            o.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                            want[i * hd..(i + 1) * hd]
                                .iter()
                                .map(|x| x.to_bits())
                                .collect::<Vec<_>>(),
                            "scalar row {i}"
                        );
                    }
                    for isa in Isa::ALL
                        .into_iter()
                        .filter(|i| *i != Isa::Scalar && i.is_available())
                    {
                        let mut got = vec![f32::NAN; m * hd];
                        attend_f16_rows(isa, &q, hd, &spans, &r, p, &mut scratch, &mut got);
                        let (a, b): (Vec<u32>, Vec<u32>) = (
                            want.iter().map(|x| x.to_bits()).collect(),
                            got.iter().map(|x| x.to_bits()).collect(),
                        );
                        assert_eq!(
                            a, b,
                            "{isa:?} hd {hd} group {group} past {past} positions {positions} window {window:?}"
                        );
                    }
                }
            }
        }
    }
}

/// Cinder's exponential is within 2 ulp of libm's over the softmax domain, flushes below -87, and
/// is exactly 1 at 0.
#[test]
fn exponential_is_within_two_ulp_of_libm() {
    use cinder_kernels::softmax::exp_nonpositive;
    assert_eq!(exp_nonpositive(0.0), 1.0);
    assert_eq!(exp_nonpositive(-87.5), 0.0);
    assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
    let mut worst = 0u32;
    let mut x = -87.0f32;
    while x <= 0.0 {
        let (got, want) = (exp_nonpositive(x), x.exp());
        worst = worst.max(got.to_bits().abs_diff(want.to_bits()));
        x += 1.3e-4;
    }
    assert!(worst <= 2, "worst {worst} ulp");
}
