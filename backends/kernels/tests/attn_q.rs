//! Attention over quantized K/V rows (Q8_0, Q4_0): the row quantizer writes ggml's reference blocks,
//! the kernel equals a plain softmax-weighted sum (f64) over the dequantized rows within f16
//! rounding, the instruction-set paths agree bit for bit, and a prefill chunk's tiled path equals
//! attending each query row's span alone.
use cinder_gguf::GgmlType;
use cinder_kernels::Isa;
use cinder_kernels::attn::ScoreParams;
use cinder_kernels::attn_q::{KvQuant, QKvRun, attend_q_lse, attend_q_rows};
use cinder_kernels::attn_rows::RowsScratch;
use half::f16;
use rand::{Rng, SeedableRng, rngs::StdRng};

fn values(n: usize, rng: &mut StdRng) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-2.0f32..2.0)).collect()
}

fn quantized(kind: KvQuant, x: &[f32], hd: usize) -> Vec<u8> {
    let rb = kind.row_bytes(hd);
    let mut out = vec![0u8; x.len() / hd * rb];
    for (r, o) in x.chunks_exact(hd).zip(out.chunks_exact_mut(rb)) {
        kind.quantize_row(r, o);
    }
    out
}

fn runs<'a>(k: &'a [u8], v: &'a [u8], rb: usize, block: usize) -> Vec<QKvRun<'a>> {
    k.chunks(block * rb)
        .zip(v.chunks(block * rb))
        .map(|(k, v)| QKvRun { k, v })
        .collect()
}

const KINDS: [(KvQuant, GgmlType); 2] = [
    (KvQuant::Q8_0, GgmlType::Q8_0),
    (KvQuant::Q4_0, GgmlType::Q4_0),
];

#[test]
fn rows_are_ggml_reference_blocks() {
    let mut rng = StdRng::seed_from_u64(3);
    let x = values(4 * 64, &mut rng);
    for (kind, ty) in KINDS {
        let got = quantized(kind, &x, 64);
        let want = cinder_gguf::quantize::quantize(ty, &x, 64).expect("quantize");
        assert_eq!(got, want, "{kind:?}");
        let mut back = vec![0.0f32; x.len()];
        for (r, o) in got
            .chunks_exact(kind.row_bytes(64))
            .zip(back.chunks_exact_mut(64))
        {
            kind.dequantize_row(r, o);
        }
        let want = cinder_gguf::dequant::dequantize(ty, &want, x.len()).expect("dequantize");
        assert_eq!(back, want, "{kind:?}");
    }
}

#[test]
fn attention_over_quantized_rows_matches_the_reference() {
    let mut rng = StdRng::seed_from_u64(11);
    for (kind, _) in KINDS {
        for &hd in &[64usize, 256] {
            for &nq in &[1usize, 3, 4] {
                for &n in &[1usize, 16, 37] {
                    let q: Vec<f32> = values(nq * hd, &mut rng)
                        .iter()
                        .map(|&x| f16::from_f32(x).to_f32())
                        .collect();
                    let (kf, vf) = (values(n * hd, &mut rng), values(n * hd, &mut rng));
                    let (kq, vq) = (quantized(kind, &kf, hd), quantized(kind, &vf, hd));
                    let rb = kind.row_bytes(hd);
                    let r = runs(&kq, &vq, rb, 16);
                    let p = ScoreParams {
                        scale: 1.0 / (hd as f32).sqrt(),
                        softcap: None,
                    };
                    let mut scratch = Vec::new();
                    let (mut scalar, mut lse) = (vec![f32::NAN; nq * hd], vec![0.0f32; nq]);
                    attend_q_lse(
                        Isa::Scalar,
                        kind,
                        &q,
                        hd,
                        &r,
                        p,
                        &mut scratch,
                        &mut scalar,
                        &mut lse,
                    );
                    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
                        let mut other = vec![f32::NAN; nq * hd];
                        attend_q_lse(isa, kind, &q, hd, &r, p, &mut scratch, &mut other, &mut []);
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&scalar), bits(&other), "{kind:?} {isa:?}");
                    }
                    // f64 reference over the dequantized rows
                    let deq = |b: &[u8]| {
                        let mut o = vec![0.0f32; n * hd];
                        for (r, d) in b.chunks_exact(rb).zip(o.chunks_exact_mut(hd)) {
                            kind.dequantize_row(r, d);
                        }
                        o
                    };
                    let (kd, vd) = (deq(&kq), deq(&vq));
                    for qi in 0..nq {
                        let qr = &q[qi * hd..(qi + 1) * hd];
                        let s: Vec<f64> = (0..n)
                            .map(|j| {
                                (0..hd)
                                    .map(|d| qr[d] as f64 * kd[j * hd + d] as f64)
                                    .sum::<f64>()
                                    * p.scale as f64
                            })
                            .collect();
                        let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                        let sum: f64 = e.iter().sum();
                        assert!(
                            (lse[qi] as f64 - (max + sum.ln())).abs() < 1e-3,
                            "{kind:?} log-sum-exp"
                        );
                        for d in 0..hd {
                            let want: f64 =
                                (0..n).map(|j| e[j] / sum * vd[j * hd + d] as f64).sum();
                            let got = scalar[qi * hd + d] as f64;
                            assert!(
                                (got - want).abs() < 4e-3,
                                "{kind:?} hd {hd} nq {nq} n {n}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// A prefill chunk: 20 positions after 23 cached ones, causal spans, 2 query heads per position.
/// The tiled path (AVX2) gives every row what attending its span alone gives, bit for bit.
#[test]
fn a_chunk_equals_each_span_alone() {
    let mut rng = StdRng::seed_from_u64(5);
    for (kind, _) in KINDS {
        let (hd, past, m, group) = (64usize, 23usize, 20usize, 2usize);
        let n = past + m;
        let (kf, vf) = (values(n * hd, &mut rng), values(n * hd, &mut rng));
        let (kq, vq) = (quantized(kind, &kf, hd), quantized(kind, &vf, hd));
        let rb = kind.row_bytes(hd);
        let r = runs(&kq, &vq, rb, 16);
        let q: Vec<f32> = values(m * group * hd, &mut rng)
            .iter()
            .map(|&x| f16::from_f32(x).to_f32())
            .collect();
        let spans: Vec<_> = (0..m)
            .flat_map(|i| std::iter::repeat_n(0..past + i + 1, group))
            .collect();
        let p = ScoreParams {
            scale: 0.125,
            softcap: None,
        };
        let isa = Isa::detect();
        let mut out = vec![f32::NAN; m * group * hd];
        attend_q_rows(
            isa,
            kind,
            &q,
            hd,
            &spans,
            &r,
            p,
            &mut RowsScratch::default(),
            &mut out,
        );
        for (i, span) in spans.iter().enumerate() {
            let rows = QKvRun {
                k: &kq[..span.end * rb],
                v: &vq[..span.end * rb],
            };
            let mut alone = vec![f32::NAN; hd];
            attend_q_lse(
                isa,
                kind,
                &q[i * hd..(i + 1) * hd],
                hd,
                &[rows],
                p,
                &mut Vec::new(),
                &mut alone,
                &mut [],
            );
            let got = &out[i * hd..(i + 1) * hd];
            assert!(
                got.iter()
                    .zip(&alone)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{kind:?} row {i}"
            );
        }
    }
}

/// The rotation a quantized store applies: its own inverse, dot products kept, and the blocks
/// llama.cpp picks (K by the largest power of two dividing the head width, V by 64).
#[test]
fn hadamard_rotation_is_orthonormal() {
    use cinder_kernels::attn_q::{hadamard, rotation_blocks};
    let mut rng = StdRng::seed_from_u64(9);
    for block in [64usize, 128, 256] {
        let (a, b) = (values(2 * block, &mut rng), values(2 * block, &mut rng));
        let (mut ra, mut rb) = (a.clone(), b.clone());
        hadamard(&mut ra, block);
        hadamard(&mut rb, block);
        let dot = |x: &[f32], y: &[f32]| -> f64 {
            x.iter()
                .zip(y)
                .map(|(p, q)| f64::from(*p) * f64::from(*q))
                .sum()
        };
        assert!((dot(&a, &b) - dot(&ra, &rb)).abs() < 1e-3, "block {block}");
        hadamard(&mut ra, block);
        assert!(
            a.iter().zip(&ra).all(|(x, y)| (x - y).abs() < 1e-5),
            "block {block}: not its own inverse"
        );
    }
    assert_eq!(rotation_blocks(64), Some((64, 64)));
    assert_eq!(rotation_blocks(256), Some((256, 64)));
    assert_eq!(rotation_blocks(192), Some((64, 64)));
    assert_eq!(rotation_blocks(96), None);
}
