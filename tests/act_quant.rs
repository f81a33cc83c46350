//! Every backend computes quantized products like the CPU kernels' scalar reference: activation
//! rounding is bit-identical on every compiled backend, and `QLinear` (the host kernels on flex/ndarray,
//! the generic fallback elsewhere) agrees with `cinder-kernels`' scalar path for every weight type.

mod common;

use burn::tensor::{Tensor, TensorData};
use cinder::backends::kernels::{self, Isa, Weights, act::fake_quantize};
use cinder::gguf::GgmlType;
use cinder::prelude::*;
use cinder::runtime::quant::act::{ActQuant, round_half_even, round_to_f16};
use cinder::runtime::quant::{QLinear, SharedBytes};

const TYPES: [GgmlType; 11] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

fn readback<B: InferenceBackend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec().expect("readback")
}

/// Deterministic pseudo-random bytes (a tiny LCG: no test-only dependency needed).
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        })
        .collect()
}

/// A weight of `n × k` in `ty` with random quant bits and sane scales. Built by quantizing nothing:
/// the bits are random, the f16 scale fields are overwritten with small values.
fn weight(ty: GgmlType, n: usize, k: usize, seed: u64) -> Vec<u8> {
    let rb = kernels::row_bytes(ty, k).expect("whole blocks");
    let f16 = |v: f32| half::f16::from_f32(v).to_bits().to_le_bytes();
    let mut data = bytes(rb * n, seed);
    let vals = |i: usize| ((i as f32 * 0.731).sin()) * 0.5;
    match ty {
        GgmlType::F32 => {
            return (0..n * k).flat_map(|i| vals(i).to_le_bytes()).collect();
        }
        GgmlType::F16 => return (0..n * k).flat_map(|i| f16(vals(i))).collect(),
        GgmlType::BF16 => {
            return (0..n * k)
                .flat_map(|i| half::bf16::from_f32(vals(i)).to_bits().to_le_bytes())
                .collect();
        }
        _ => {}
    }
    let bs = ty.type_size() as usize;
    for (j, b) in data.chunks_exact_mut(bs).enumerate() {
        let d = 0.002 + (j % 17) as f32 * 0.001;
        match ty {
            GgmlType::Q6_K => b[208..210].copy_from_slice(&f16(d)),
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => {
                b[0..2].copy_from_slice(&f16(d));
                b[2..4].copy_from_slice(&f16(0.01 - (j % 5) as f32 * 0.004));
            }
            _ => b[0..2].copy_from_slice(&f16(d)),
        }
    }
    data
}

fn activations(n: usize, k: usize) -> Vec<f32> {
    let mut x: Vec<f32> = (0..n * k)
        .map(|i| ((i as f32) * 0.61).sin() * (1.0 + (i % 7) as f32))
        .collect();
    // exact ties after scaling: a block whose max is 127 maps x to x exactly
    for (j, v) in x[..32].iter_mut().enumerate() {
        *v = j as f32 + 0.5;
    }
    x[0] = 127.0;
    x
}

struct Rounding;

impl BackendTask for Rounding {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let (n, k) = (4usize, 512usize);
        let x = activations(n, k);
        for ty in TYPES {
            let t = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [n, k]), &device);
            let got = readback(ActQuant::for_weight(ty).apply(t));
            let want = fake_quantize(kernels::act_kind(ty).expect("kernel"), &x, k);
            let bad: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
            assert!(
                bad.is_empty(),
                "{}: {} mismatches, first at {:?}",
                ty.name(),
                bad.len(),
                bad.first().map(|&i| (x[i], got[i], want[i]))
            );
        }
        let v = vec![0.5f32, 1.5, 2.5, -0.5, -2.5, 0.499_999_97, 126.5, -3.2, 0.0];
        let t = Tensor::<B, 1>::from_data(TensorData::new(v.clone(), [v.len()]), &device);
        let want: Vec<f32> = v.iter().map(|x| x.round_ties_even()).collect();
        assert_eq!(readback(round_half_even(t)), want);
        // f16 normal range only (see round_to_f16: subnormals keep 11 bits)
        let v: Vec<f32> = (1..500)
            .map(|i| (i as f32 * 0.377).sin() * 3.0 + 0.01)
            .filter(|v| v.abs() > 6.2e-5)
            .collect();
        let t = Tensor::<B, 1>::from_data(TensorData::new(v.clone(), [v.len()]), &device);
        for (a, g) in v.iter().zip(readback(round_to_f16(t))) {
            assert_eq!(g, half::f16::from_f32(*a).to_f32(), "f16 rounding of {a}");
        }
    }
}

struct Products(BackendKind);

impl BackendTask for Products {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        // Many rows of an F32 weight take the host backends' blocked gemm (weight transposed once,
        // on the first such product): the same values as the dot kernel, twice in a row.
        let (m, n, k) = (21usize, 40usize, 512usize);
        let x = activations(m, k);
        let w = weight(GgmlType::F32, n, k, 99);
        let mut want = vec![0.0f32; m * n];
        kernels::matmul_with(
            Isa::Scalar,
            Weights {
                ty: GgmlType::F32,
                data: &w,
                n,
                k,
            },
            &x,
            m,
            &mut want,
        )
        .expect("scalar reference");
        let layer = QLinear::<B>::from_ggml(
            "w",
            GgmlType::F32,
            SharedBytes::from_vec(w),
            n,
            k,
            None,
            &device,
        )
        .expect("layer");
        for _ in 0..2 {
            let xt = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [m, k]), &device);
            let got = readback(layer.forward(xt));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                    "F32 gemm output {i}: {g} vs {w}"
                );
            }
        }
        // 3 rows: a decode-sized product; 21 rows: prefill-sized (candle dequantizes the weight
        // for the call and runs an f32 gemm from 16 rows on).
        for m in [3usize, 21] {
            let (n, k) = (40usize, 512usize);
            let mut x = activations(m, k);
            if self.0 == BackendKind::Candle {
                // candle's own kernels quantize activations as ggml's scalar reference does, rounding
                // an exact tie (x·127/max = j + 0.5) away from zero; llama.cpp's x86 SIMD path and
                // the host kernels round it to even. Off the ties they agree, so candle's products
                // are checked on activations without exact ties.
                for v in &mut x[..32] {
                    *v += 0.125;
                }
            }
            for (s, ty) in TYPES.into_iter().enumerate() {
                let w = weight(ty, n, k, s as u64 + 1);
                let mut want = vec![0.0f32; m * n];
                kernels::matmul_with(
                    Isa::Scalar,
                    Weights { ty, data: &w, n, k },
                    &x,
                    m,
                    &mut want,
                )
                .expect("scalar reference");
                let layer =
                    QLinear::<B>::from_ggml("w", ty, SharedBytes::from_vec(w), n, k, None, &device)
                        .expect("layer");
                let xt = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [m, k]), &device);
                let got = readback(layer.forward(xt));
                // The host kernels sum exactly like the scalar reference; the generic fallback multiplies
                // f32-expanded weights, and candle sums its integer products in its own order, so
                // their sums differ by rounding only.
                let scale = want.iter().fold(0.0f32, |a, v| a.max(v.abs())).max(1.0);
                // candle quantizes K-quant activations on its own grid (`-128/max`, ggml's older
                // `quantize_row_q8_K`; ggml now uses `-127/max`), so its sums carry different 8-bit
                // activation noise than the reference's. Both are held against the exact product of
                // the dequantized weights and the f32 activations: candle's error must stay within
                // twice the reference kernel's own (measured: Q4_K 55 vs 82, Q5_K 158 vs 230, Q6_K 177
                // vs 128, with outputs up to ~10^4).
                let k_quant = matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K);
                if self.0 == BackendKind::Candle && k_quant {
                    let mut deq = vec![0.0f32; n * k];
                    let all: Vec<usize> = (0..n).collect();
                    let wv = weight(ty, n, k, s as u64 + 1);
                    kernels::dequantize_rows(
                        Weights {
                            ty,
                            data: &wv,
                            n,
                            k,
                        },
                        &all,
                        &mut deq,
                    )
                    .expect("dequantize");
                    let (mut err_got, mut err_want) = (0.0f32, 0.0f32);
                    for r in 0..m {
                        for c in 0..n {
                            let exact: f32 = (0..k).map(|j| x[r * k + j] * deq[c * k + j]).sum();
                            err_got = err_got.max((got[r * n + c] - exact).abs());
                            err_want = err_want.max((want[r * n + c] - exact).abs());
                        }
                    }
                    assert!(
                        err_got <= 2.0 * err_want + 1e-3 * scale,
                        "{} on candle: off the exact product by {err_got}, the reference by {err_want}",
                        ty.name()
                    );
                } else {
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (g - w).abs() <= 2e-3 * scale,
                            "{}: output {i}: {g} vs scalar {w}",
                            ty.name()
                        );
                    }
                }
                // Embedding rows come back as the reference dequantizer gives them.
                let ids = Tensor::from_data(TensorData::new(vec![0i64, 7, 39], [3]), &device);
                let rows = readback(layer.rows(ids));
                let mut want_rows = vec![0.0f32; 3 * k];
                let wv = Weights {
                    ty,
                    data: &weight(ty, n, k, s as u64 + 1),
                    n,
                    k,
                };
                kernels::dequantize_rows(wv, &[0, 7, 39], &mut want_rows).expect("rows");
                assert_eq!(rows, want_rows, "{} rows", ty.name());
            }
        }
    }
}

#[test]
fn activation_rounding_is_identical_on_every_backend() {
    for kind in common::test_backends() {
        eprintln!("activation rounding on {kind}");
        cinder::backends::dispatch(kind, Rounding).expect("backend");
    }
}

#[test]
fn quantized_products_match_the_scalar_kernels_on_every_backend() {
    for kind in common::test_backends() {
        eprintln!("quantized products on {kind}");
        cinder::backends::dispatch(kind, Products(kind)).expect("backend");
    }
}

struct Geglu;

impl BackendTask for Geglu {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        // Every normal f16 value in (-11, 11) (both clamps and the table's whole range), and values
        // between f16 steps (rounded on the way in).
        let mut g: Vec<f32> = (0..=u16::MAX)
            .map(|b| half::f16::from_bits(b).to_f32())
            .filter(|v| v.is_finite() && v.abs() < 11.0 && v.abs() > 6.2e-5)
            .collect();
        g.extend((0..2000).map(|i| (i as f32 * 0.618_034).sin() * 12.0));
        let u: Vec<f32> = (0..g.len()).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let mut want = g.clone();
        kernels::elementwise::gelu_mul(&mut want, &u);
        let n = g.len();
        let t = |v: Vec<f32>| Tensor::<B, 1>::from_data(TensorData::new(v, [n]), &device);
        let got = readback(B::gelu_mul(t(g.clone()), t(u)));
        // The host backends read ggml's table itself; the others evaluate the formula with their
        // own `tanh`, which may move a result across an f16 rounding boundary (one f16 step).
        let exact = matches!(B::KIND, BackendKind::Flex | BackendKind::Ndarray);
        let bad: Vec<usize> = (0..n)
            .filter(|&i| {
                let d = (got[i] - want[i]).abs();
                if exact {
                    got[i].to_bits() != want[i].to_bits()
                } else {
                    d > want[i].abs() * 2f32.powi(-10) + 1e-6
                }
            })
            .collect();
        assert!(
            bad.is_empty(),
            "{:?}: {} of {n} GEGLU values off ggml's, first {:?}",
            B::KIND,
            bad.len(),
            bad.first().map(|&i| (g[i], got[i], want[i]))
        );
        // The table is ggml's: f16(gelu(f16(x))), zero at and below -10, the identity at 10 and up.
        assert_eq!(want[g.iter().position(|&v| v == -10.0).expect("-10")], 0.0);
        let at = |x: f32| g.iter().position(|&v| v == x).expect("value present");
        assert_eq!(want[at(10.0)] / (0.5 + (at(10.0) % 7) as f32 * 0.25), 10.0);
        let one = at(1.0);
        let gelu1 = half::f16::from_f32(kernels::elementwise::gelu_tanh(1.0)).to_f32();
        assert_eq!(want[one], gelu1 * (0.5 + (one % 7) as f32 * 0.25));
        assert!((gelu1 - 0.841_192).abs() < 1e-3, "gelu(1) = {gelu1}");
    }
}

#[test]
fn geglu_matches_ggml_table_on_every_backend() {
    for kind in common::test_backends() {
        eprintln!("GEGLU on {kind}");
        cinder::backends::dispatch(kind, Geglu).expect("backend");
    }
}
