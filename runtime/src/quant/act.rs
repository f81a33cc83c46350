//! Activation quantization, as the integer-dot kernels of llama.cpp (and Cinder's CPU kernels) see the
//! input of a quantized matmul.
//!
//! A quantized weight is multiplied with activations rounded to 8-bit blocks: 32-wide blocks with an f16
//! scale for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 (`block_q8_0`/`block_q8_1`), 256-wide blocks with an f32 scale for
//! the K-quants (`block_q8_K`); F16 weights see activations rounded to f16. Doing the same in the generic
//! path keeps every backend numerically equal to the kernels and to llama.cpp's reference outputs (the
//! greedy conformance tests depend on it: f32 activations flip near-tied tokens).

use burn::tensor::{Tensor, backend::Backend};
use cinder_gguf::GgmlType;

/// How activations are rounded before a matmul with a weight of some storage type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActQuant {
    /// f32 activations (F32 and BF16 weights).
    None,
    /// rounded to f16 (F16 weights)
    F16,
    /// `block_q8_K`: 256-wide blocks, f32 scale `1/iscale` with `iscale = 127/amax`, ties to even
    /// (`quantize_row_q8_K_ref`)
    Q8K,
    /// symmetric 8-bit blocks of `block` values; the scale is rounded to f16 when `f16_scale`
    Q8 {
        /// block width
        block: usize,
        /// scale stored as f16 (Q8_0/Q8_1) rather than f32 (Q8_K)
        f16_scale: bool,
    },
}

impl ActQuant {
    /// The activation format llama.cpp's CPU backend pairs with a weight type (`vec_dot_type`).
    pub fn for_weight(ty: GgmlType) -> Self {
        use GgmlType::*;
        match ty {
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 => ActQuant::Q8 {
                block: 32,
                f16_scale: true,
            },
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K => ActQuant::Q8K,
            F16 => ActQuant::F16,
            _ => ActQuant::None,
        }
    }

    /// Rounds `x` `[n, k]` as the kernel would see it. A `k` that is not a whole number of blocks (which
    /// a validated quantized weight never has) is passed through unchanged.
    pub fn apply<B: Backend>(self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        match self {
            ActQuant::None => x,
            ActQuant::F16 => round_to_f16(x),
            ActQuant::Q8K => {
                const QK_K: usize = 256;
                let [n, k] = x.dims();
                if k % QK_K != 0 {
                    return x;
                }
                let xb: Tensor<B, 3> = x.reshape([n, k / QK_K, QK_K]);
                let amax = xb.clone().abs().max_dim(2);
                let zero = amax.clone().equal_elem(0.0);
                // iscale = 127 / amax (the sign ggml gives it cancels out), q = nearest_int(iscale·x),
                // value = q · (1 / iscale).
                let safe = amax.mask_fill(zero.clone(), 1.0);
                let iscale =
                    (safe.ones_like().mul_scalar(127.0) / safe).mask_fill(zero.clone(), 0.0);
                let d = iscale
                    .clone()
                    .mask_fill(zero.clone(), 1.0)
                    .recip()
                    .mask_fill(zero, 0.0);
                ((xb * iscale).round() * d).reshape([n, k])
            }
            ActQuant::Q8 { block, f16_scale } => {
                let [n, k] = x.dims();
                if k % block != 0 {
                    return x;
                }
                // [n, k/block, block]; amax and scale per block: [n, k/block, 1]
                let xb: Tensor<B, 3> = x.reshape([n, k / block, block]);
                let amax = xb.clone().abs().max_dim(2);
                let d = amax.div_scalar(127.0);
                // As ggml's reference quantizer (`quantize_row_q8_0_ref`), which llama.cpp's reference
                // outputs follow: id = 1/d (0 for an all-zero block, so no 0 * inf), q = roundf(x * id).
                let zero = d.clone().equal_elem(0.0);
                let id = d
                    .clone()
                    .mask_fill(zero.clone(), 1.0)
                    .recip()
                    .mask_fill(zero, 0.0);
                let d = if f16_scale { round_to_f16(d) } else { d };
                let q = round_half_away(xb * id);
                (q * d).reshape([n, k])
            }
        }
    }
}

/// Rounds to the nearest integer with ties away from zero (C's `roundf`); Burn's `round` breaks ties to
/// even. Ties are detected exactly: `|y| - floor(|y|)` is exact in f32.
pub fn round_half_away<B: Backend, const D: usize>(y: Tensor<B, D>) -> Tensor<B, D> {
    let a = y.clone().abs();
    let fl = a.clone().floor();
    let tie = (a - fl.clone()).equal_elem(0.5);
    let away = (fl + 1.0) * y.clone().sign();
    y.round().mask_where(tie, away)
}

/// Rounds f32 values to the nearest f16-representable value (11 significant bits) with a Veltkamp
/// split, in plain arithmetic every backend has. Exact for the f16 normal range, which is where scales
/// and activations live; below it (|x| < 6.1e-5) the result keeps 11 bits rather than flushing to
/// f16 subnormals, a difference far below the 8-bit activation rounding.
pub fn round_to_f16<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    // 2^(24 - 11) + 1: splits a 24-bit f32 mantissa into an 11-bit high part.
    const SPLIT: f32 = 8193.0;
    let c = x.clone().mul_scalar(SPLIT);
    c.clone() - (c - x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    type B = burn_flex::Flex<f32>;

    #[test]
    fn f16_rounding_matches_half() {
        let dev = Default::default();
        let vals: Vec<f32> = (0..2000)
            .map(|i| ((i as f32) * 0.7311).sin() * 10f32.powi((i % 9) as i32 - 4))
            .filter(|v| v.abs() > 6.2e-5)
            .collect();
        let n = vals.len();
        let t = Tensor::<B, 1>::from_data(TensorData::new(vals.clone(), [n]), &dev);
        let got: Vec<f32> = round_to_f16(t).into_data().to_vec().unwrap();
        for (v, g) in vals.iter().zip(got) {
            let want = half::f16::from_f32(*v).to_f32();
            assert_eq!(g, want, "f16 rounding of {v}");
        }
    }

    #[test]
    fn q8_blocks_match_ggml_reference_rounding() {
        let dev = Default::default();
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 7919) % 113) as f32 / 17.0 - 3.0)
            .collect();
        let mut x = x;
        x[32..].iter_mut().for_each(|v| *v = 0.0); // second block all zero
        let t = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [1, 64]), &dev);
        let got: Vec<f32> = ActQuant::for_weight(GgmlType::Q4_1)
            .apply(t)
            .into_data()
            .to_vec()
            .unwrap();
        let amax = x[..32].iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let dh = half::f16::from_f32(d).to_f32();
        for j in 0..32 {
            assert_eq!(got[j], (x[j] * (1.0 / d)).round() * dh);
        }
        assert!(got[32..].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn q8_many_rows_match_host() {
        let dev = Default::default();
        let (n, k) = (5usize, 576usize);
        let x: Vec<f32> = (0..n * k)
            .map(|i| ((i as f32) * 0.61).sin() * (1.0 + (i % 7) as f32))
            .collect();
        let t = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [n, k]), &dev);
        let got: Vec<f32> = ActQuant::Q8 {
            block: 32,
            f16_scale: true,
        }
        .apply(t)
        .into_data()
        .to_vec()
        .unwrap();
        let mut bad = Vec::new();
        for (bi, b) in x.chunks(32).enumerate() {
            let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
            let id = 1.0 / (amax / 127.0);
            let dh = half::f16::from_f32(amax / 127.0).to_f32();
            for j in 0..32 {
                let want = (b[j] * id).round() * dh;
                if got[bi * 32 + j] != want {
                    bad.push((bi, j, got[bi * 32 + j], want));
                }
            }
        }
        assert!(
            bad.is_empty(),
            "{} mismatches, first {:?}",
            bad.len(),
            bad.first()
        );
    }

    #[test]
    fn q8k_matches_ggml_reference() {
        let dev = Default::default();
        let (n, k) = (3usize, 1024usize);
        let x: Vec<f32> = (0..n * k)
            .map(|i| ((i as f32) * 0.37).cos() * (0.5 + (i % 13) as f32))
            .collect();
        let t = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [n, k]), &dev);
        let got: Vec<f32> = ActQuant::Q8K.apply(t).into_data().to_vec().unwrap();
        for (bi, b) in x.chunks(256).enumerate() {
            // quantize_row_q8_K_ref: signed max, iscale = -127/max, nearest_int, d = 1/iscale
            let (mut amax, mut max) = (0f32, 0f32);
            for &v in b {
                if v.abs() > amax {
                    amax = v.abs();
                    max = v;
                }
            }
            let iscale = -127.0 / max;
            let d = 1.0 / iscale;
            for j in 0..256 {
                let q = ((iscale * b[j]).round_ties_even() as i32).min(127);
                assert_eq!(got[bi * 256 + j], q as f32 * d, "block {bi} elem {j}");
            }
        }
    }

    #[test]
    fn ties_round_away_from_zero() {
        let dev = Default::default();
        let v = vec![0.5f32, 1.5, 2.5, -0.5, -2.5, 0.499_999_97, 126.5, -3.2, 0.0];
        let t = Tensor::<B, 1>::from_data(TensorData::new(v.clone(), [v.len()]), &dev);
        let got: Vec<f32> = round_half_away(t).into_data().to_vec().unwrap();
        let want: Vec<f32> = v.iter().map(|x| x.round()).collect();
        assert_eq!(got, want);
    }
}
