//! Every kernel against the reference: SIMD equals scalar bit for bit, and scalar equals the f64 sum
//! over the reference dequantizer's weights and the rounded activations.

use cinder_gguf::GgmlType;
use cinder_kernels::{Isa, Weights, act, matmul_with, row_bytes};
use half::f16;
use rand::{Rng, SeedableRng, rngs::StdRng};

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

fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// Random weights of `n × k` in `ty`: random quant bits, sane scales (offsets from the GGUF layouts).
fn random_weights(ty: GgmlType, n: usize, k: usize, rng: &mut StdRng) -> Vec<u8> {
    let rb = row_bytes(ty, k).unwrap();
    let mut data = vec![0u8; rb * n];
    match ty {
        GgmlType::F32 => {
            for c in data.chunks_exact_mut(4) {
                c.copy_from_slice(&rng.random_range(-1.0f32..1.0).to_le_bytes());
            }
            return data;
        }
        GgmlType::F16 => {
            for c in data.chunks_exact_mut(2) {
                put_f16(c, 0, rng.random_range(-1.0f32..1.0));
            }
            return data;
        }
        GgmlType::BF16 => {
            for c in data.chunks_exact_mut(2) {
                let v = half::bf16::from_f32(rng.random_range(-1.0f32..1.0));
                c.copy_from_slice(&v.to_bits().to_le_bytes());
            }
            return data;
        }
        _ => {}
    }
    rng.fill(&mut data[..]);
    let bsz = ty.type_size() as usize;
    for b in data.chunks_exact_mut(bsz) {
        let d = rng.random_range(0.001f32..0.05);
        match ty {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => put_f16(b, 0, d),
            GgmlType::Q4_1 | GgmlType::Q5_1 => {
                put_f16(b, 0, d);
                put_f16(b, 2, rng.random_range(-0.3f32..0.3));
            }
            GgmlType::Q4_K | GgmlType::Q5_K => {
                put_f16(b, 0, d);
                put_f16(b, 2, rng.random_range(0.0f32..0.02));
            }
            GgmlType::Q6_K => put_f16(b, 208, d),
            _ => unreachable!(),
        }
    }
    data
}

fn random_acts(m: usize, k: usize, rng: &mut StdRng) -> Vec<f32> {
    (0..m * k)
        .map(|i| {
            // Mixed magnitudes, an outlier now and then, and an all-zero row, as real activations have.
            if i / k == 2 {
                0.0
            } else if rng.random_range(0..50) == 0 {
                rng.random_range(-20.0f32..20.0)
            } else {
                rng.random_range(-1.0f32..1.0)
            }
        })
        .collect()
}

/// The SIMD instruction sets this CPU runs (AVX2 on x86-64, NEON on aarch64).
fn simd_isas() -> Vec<Isa> {
    Isa::ALL
        .into_iter()
        .filter(|i| *i != Isa::Scalar && i.is_available())
        .collect()
}

#[test]
fn simd_equals_scalar_bit_for_bit() {
    let simd = simd_isas();
    assert!(
        !simd.is_empty() || !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")),
        "x86-64 and aarch64 CPUs have a SIMD path"
    );
    eprintln!(
        "comparing {simd:?} ({}) with scalar",
        cinder_kernels::describe()
    );
    let mut rng = StdRng::seed_from_u64(7);
    for (ty, isa) in TYPES
        .into_iter()
        .flat_map(|t| simd.iter().map(move |&i| (t, i)))
    {
        // k of 3 super-blocks, plus a width that is not a multiple of 32 for the float formats.
        let ks: &[usize] = match ty {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => &[768, 100],
            _ => &[768],
        };
        // m = 20: the row split of prefill-sized products
        for (&k, m) in ks.iter().flat_map(|k| [(k, 9), (k, 20)]) {
            let n = 37;
            let wd = random_weights(ty, n, k, &mut rng);
            let x = random_acts(m, k, &mut rng);
            let w = Weights {
                ty,
                data: &wd,
                n,
                k,
            };
            let mut ys = vec![0.0; m * n];
            let mut yv = vec![0.0; m * n];
            matmul_with(Isa::Scalar, w, &x, m, &mut ys).unwrap();
            matmul_with(isa, w, &x, m, &mut yv).unwrap();
            for (i, (a, b)) in ys.iter().zip(&yv).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{} {isa:?} k={k} element {i}: {a} vs {b}",
                    ty.name()
                );
            }
            // m == 1 (the decode path) gives the same numbers as each row of the batched product.
            for i in [0, m / 2, m - 1] {
                let mut y1 = vec![0.0; n];
                matmul_with(isa, w, &x[i * k..(i + 1) * k], 1, &mut y1).unwrap();
                let row = &yv[i * n..(i + 1) * n];
                assert_eq!(
                    &y1[..],
                    row,
                    "{} m={m}: decode vs batched row {i}",
                    ty.name()
                );
            }
        }
    }
}

#[test]
fn scalar_matches_dequantized_reference() {
    let mut rng = StdRng::seed_from_u64(11);
    for ty in TYPES {
        let (n, m, k) = (9, 3, 512);
        let wd = random_weights(ty, n, k, &mut rng);
        let x = random_acts(m, k, &mut rng);
        let w = Weights {
            ty,
            data: &wd,
            n,
            k,
        };
        let mut y = vec![0.0; m * n];
        matmul_with(Isa::Scalar, w, &x, m, &mut y).unwrap();
        let wf = cinder_gguf::dequant::dequantize(ty, &wd, n * k).unwrap();
        let kind = cinder_kernels::act_kind(ty).unwrap();
        let xq = act::fake_quantize(kind, &x, k);
        for i in 0..m {
            for r in 0..n {
                let (mut want, mut mag) = (0.0f64, 0.0f64);
                for j in 0..k {
                    let p = wf[r * k + j] as f64 * xq[i * k + j] as f64;
                    want += p;
                    mag += p.abs();
                }
                let got = y[i * n + r] as f64;
                // Q4_1/Q5_1 fold the offset through s = f16(d·Σq): one f16 rounding per block.
                let tol = match ty {
                    GgmlType::Q4_1 | GgmlType::Q5_1 => 2e-3 * mag + 1e-4,
                    _ => 1e-5 * mag + 1e-6,
                };
                assert!(
                    (got - want).abs() <= tol,
                    "{} row {r} act {i}: {got} vs {want} (tol {tol})",
                    ty.name()
                );
            }
        }
    }
}

#[test]
fn shape_errors_are_reported() {
    let wd = vec![0u8; 20 * 4];
    let w = Weights {
        ty: GgmlType::Q4_1,
        data: &wd,
        n: 4,
        k: 32,
    };
    let mut y = vec![0.0; 4];
    assert!(matmul_with(Isa::Scalar, w, &[0.0; 31], 1, &mut y).is_err());
    let short = Weights {
        data: &wd[..79],
        ..w
    };
    let err = matmul_with(Isa::Scalar, short, &[0.0; 32], 1, &mut y).unwrap_err();
    assert!(err.to_string().contains("weight bytes"), "{err}");
    let odd = Weights { k: 33, ..w };
    assert!(odd.validate().is_err());
    let unsupported = Weights {
        ty: GgmlType::Q2_K,
        ..w
    };
    assert!(
        unsupported
            .validate()
            .unwrap_err()
            .to_string()
            .contains("Q2_K")
    );
}

/// The packed (row-interleaved) kernels compute ggml's `vec_dot` arithmetic unchanged: every output
/// equals the row-at-a-time scalar dot of that GGUF row bit for bit, for every batch size (1–4 rows
/// per group call, remainders) and a row count that is not a multiple of 8.
#[test]
fn packed_products_equal_row_dots_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(11);
    let isas: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.is_available()).collect();
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
    ] {
        let (n, k) = (43, 320);
        let wd = random_weights(ty, n, k, &mut rng);
        let w = Weights {
            ty,
            data: &wd,
            n,
            k,
        };
        let p = cinder_kernels::Packed::new(w).unwrap().expect("packable");
        let rb = row_bytes(ty, k).unwrap();
        let dot: fn(&[u8], &[act::BlockQ8]) -> f32 = match ty {
            GgmlType::Q4_0 => cinder_kernels::scalar::dot_q4_0,
            GgmlType::Q4_1 => cinder_kernels::scalar::dot_q4_1,
            GgmlType::Q5_0 => cinder_kernels::scalar::dot_q5_0,
            _ => cinder_kernels::scalar::dot_q8_0,
        };
        // 16 and 37: the row split of prefill-sized products (remainder tiles included)
        for m in [1, 2, 3, 4, 5, 11, 16, 37] {
            let x = random_acts(m, k, &mut rng);
            let act::Activations::Q8(a) = act::quantize(act::ActKind::Q8, &x, k) else {
                panic!("Q8 activations")
            };
            for &isa in &isas {
                let mut y = vec![0.0; m * n];
                cinder_kernels::matmul_packed_with(isa, &p, &x, m, &mut y).unwrap();
                for i in 0..m {
                    for r in 0..n {
                        let want = dot(&wd[r * rb..(r + 1) * rb], &a[i * k / 32..(i + 1) * k / 32]);
                        assert_eq!(
                            y[i * n + r].to_bits(),
                            want.to_bits(),
                            "{} {isa:?} m={m} row {i} output {r}",
                            ty.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn many_products_equal_each_alone() {
    let mut rng = StdRng::seed_from_u64(12);
    let k = 256;
    // Different types and row counts (not multiples of 8) sharing one input, as Q/K/V do.
    let specs = [
        (GgmlType::Q4_1, 40),
        (GgmlType::Q4_0, 13),
        (GgmlType::Q8_0, 24),
        (GgmlType::Q5_0, 16),
    ];
    let data: Vec<Vec<u8>> = specs
        .iter()
        .map(|&(ty, n)| random_weights(ty, n, k, &mut rng))
        .collect();
    let packed: Vec<cinder_kernels::Packed> = specs
        .iter()
        .zip(&data)
        .map(|(&(ty, n), d)| {
            let w = Weights { ty, data: d, n, k };
            cinder_kernels::Packed::new(w).unwrap().expect("packable")
        })
        .collect();
    let refs: Vec<&cinder_kernels::Packed> = packed.iter().collect();
    for m in [1, 4, 9, 16, 70] {
        let x = random_acts(m, k, &mut rng);
        for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
            let mut ys: Vec<Vec<f32>> = specs.iter().map(|&(_, n)| vec![0.0; m * n]).collect();
            let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| y.as_mut_slice()).collect();
            cinder_kernels::matmul_packed_many_with(isa, &refs, &x, m, &mut outs).unwrap();
            for (p, y) in packed.iter().zip(&ys) {
                let mut alone = vec![0.0; y.len()];
                cinder_kernels::matmul_packed_with(isa, p, &x, m, &mut alone).unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(y), bits(&alone), "{isa:?} m={m} {}", p.ty().name());
            }
        }
    }
    // A weight of another width is refused, naming the problem.
    let narrow = random_weights(GgmlType::Q8_0, 8, 128, &mut rng);
    let w = Weights {
        ty: GgmlType::Q8_0,
        data: &narrow,
        n: 8,
        k: 128,
    };
    let pn = cinder_kernels::Packed::new(w).unwrap().expect("packable");
    let x = random_acts(1, k, &mut rng);
    let (mut a, mut b) = (vec![0.0; 40], vec![0.0; 8]);
    let err = cinder_kernels::matmul_packed_many_with(
        Isa::Scalar,
        &[&packed[0], &pn],
        &x,
        1,
        &mut [&mut a, &mut b],
    )
    .unwrap_err();
    assert!(err.to_string().contains("weight width"), "{err}");
}

/// Rows read back from a packed copy equal the reference dequantizer's, for every packed type (an
/// embedding table that doubles as the packed output head reads its rows there), and a bad index is
/// refused.
#[test]
fn packed_rows_equal_the_reference_dequantizer() {
    let mut rng = StdRng::seed_from_u64(13);
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
    ] {
        let (n, k) = (19, 96);
        let wd = random_weights(ty, n, k, &mut rng);
        let w = Weights {
            ty,
            data: &wd,
            n,
            k,
        };
        let p = cinder_kernels::Packed::new(w).unwrap().expect("packable");
        let rows = [0usize, 7, 8, 18, 3];
        let mut got = vec![0.0; rows.len() * k];
        p.dequantize_rows(&rows, &mut got).unwrap();
        let mut want = vec![0.0; rows.len() * k];
        cinder_kernels::dequantize_rows(w, &rows, &mut want).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "{}", ty.name());
        let err = p.dequantize_rows(&[n], &mut got[..k]).unwrap_err();
        assert!(err.to_string().contains("row index"), "{err}");
    }
}

/// Packed Q4_K and Q6_K (x86-64): every output equals the row-at-a-time scalar dot of its GGUF row
/// bit for bit, on every instruction set, batch size (group calls of 1–4 rows, the row split of
/// prefill) and a row count that is not a multiple of 8; rows read back equal the reference
/// dequantizer; mixed with a 32-wide format in one call, each output equals its own product.
#[test]
#[cfg(target_arch = "x86_64")]
fn packed_k_quants_equal_row_dots_bit_for_bit() {
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
        packed_k_quant_case(ty);
    }
}

#[cfg(target_arch = "x86_64")]
fn packed_k_quant_case(ty: GgmlType) {
    let mut rng = StdRng::seed_from_u64(14);
    let (n, k) = (45, 512);
    let wd = random_weights(ty, n, k, &mut rng);
    let w = Weights {
        ty,
        data: &wd,
        n,
        k,
    };
    let p = cinder_kernels::Packed::new(w).unwrap().expect("packable");
    let rb = row_bytes(ty, k).unwrap();
    let isas: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.is_available()).collect();
    for m in [1, 2, 3, 4, 5, 11, 16, 37] {
        let x = random_acts(m, k, &mut rng);
        let act::Activations::Q8K(a) = act::quantize(act::ActKind::Q8K, &x, k) else {
            panic!("Q8_K activations")
        };
        for &isa in &isas {
            let mut y = vec![0.0; m * n];
            cinder_kernels::matmul_packed_with(isa, &p, &x, m, &mut y).unwrap();
            for i in 0..m {
                for r in 0..n {
                    let dot = if ty == GgmlType::Q4_K {
                        cinder_kernels::scalar::dot_q4_k
                    } else {
                        cinder_kernels::scalar::dot_q6_k
                    };
                    let want = dot(
                        &wd[r * rb..(r + 1) * rb],
                        &a[i * k / 256..(i + 1) * k / 256],
                    );
                    assert_eq!(
                        y[i * n + r].to_bits(),
                        want.to_bits(),
                        "{} {isa:?} m={m} row {i} output {r}",
                        ty.name()
                    );
                }
            }
        }
    }
    let rows = [0usize, 7, 8, 44, 3];
    let mut got = vec![0.0; rows.len() * k];
    p.dequantize_rows(&rows, &mut got).unwrap();
    let mut want = vec![0.0; rows.len() * k];
    cinder_kernels::dequantize_rows(w, &rows, &mut want).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want), "{} rows", ty.name());
    // A K-quant beside Q8_0 in one call (their activations are quantized apart).
    let q8 = random_weights(GgmlType::Q8_0, 16, k, &mut rng);
    let p8 = cinder_kernels::Packed::new(Weights {
        ty: GgmlType::Q8_0,
        data: &q8,
        n: 16,
        k,
    })
    .unwrap()
    .expect("packable");
    let x = random_acts(5, k, &mut rng);
    let (mut y4, mut y8) = (vec![0.0; 5 * n], vec![0.0; 5 * 16]);
    cinder_kernels::matmul_packed_many_with(
        Isa::detect(),
        &[&p, &p8],
        &x,
        5,
        &mut [&mut y4, &mut y8],
    )
    .unwrap();
    let (mut a4, mut a8) = (vec![0.0; 5 * n], vec![0.0; 5 * 16]);
    cinder_kernels::matmul_packed_with(Isa::detect(), &p, &x, 5, &mut a4).unwrap();
    cinder_kernels::matmul_packed_with(Isa::detect(), &p8, &x, 5, &mut a8).unwrap();
    assert_eq!((bits(&y4), bits(&y8)), (bits(&a4), bits(&a8)));
}
