//! Activation rounding with plain Burn ops: what the quantized kernels see, for backends that multiply
//! with f32 weights instead (the generic fallback). Keeps every backend numerically equal to the CPU
//! kernels (`cinder-kernels`) and to llama.cpp, whose reference outputs the conformance tests compare
//! against: f32 activations flip near-tied tokens.
//!
//! The formats are those of [`cinder_kernels::act`]: 32-wide blocks with an f16 scale (`id = 127/amax`,
//! round half to even) for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, 256-wide blocks with an f32 scale
//! (`iscale = -127/max`, round half to even, `d = 1/iscale`) for the K-quants, f16 or bf16 rounding for
//! F16/BF16 weights. Rounding ties are resolved explicitly: backends disagree on `round`'s tie rule.

use burn::tensor::{Tensor, backend::Backend};
use cinder_gguf::GgmlType;
use cinder_kernels::act::ActKind;

/// How activations are rounded before a matmul with a weight of some storage type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActQuant {
    /// f32 activations (F32 weights).
    None,
    /// rounded to f16 (F16 weights)
    F16,
    /// rounded to bf16 (BF16 weights)
    BF16,
    /// `block_q8_K`: 256-wide blocks, f32 scale
    Q8K,
    /// `block_q8_0`/`block_q8_1`: 32-wide blocks, f16 scale
    Q8,
}

impl ActQuant {
    /// The activation format llama.cpp's CPU backend pairs with a weight type (`vec_dot_type`).
    pub fn for_weight(ty: GgmlType) -> Self {
        match cinder_kernels::act_kind(ty) {
            Some(ActKind::F16) => ActQuant::F16,
            Some(ActKind::BF16) => ActQuant::BF16,
            Some(ActKind::Q8) => ActQuant::Q8,
            Some(ActKind::Q8K) => ActQuant::Q8K,
            Some(ActKind::F32) | None => ActQuant::None,
        }
    }

    /// Rounds `x` `[n, k]` as the kernel would see it. A `k` that is not a whole number of blocks (which
    /// a validated quantized weight never has) is passed through unchanged.
    pub fn apply<B: Backend>(self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        match self {
            ActQuant::None => x,
            ActQuant::F16 => round_to_f16(x),
            ActQuant::BF16 => round_to_bits(x, 8),
            ActQuant::Q8K => {
                const QK_K: usize = 256;
                let [n, k] = x.dims();
                if k % QK_K != 0 {
                    return x;
                }
                let xb: Tensor<B, 3> = x.reshape([n, k / QK_K, QK_K]);
                let amax = xb.clone().abs().max_dim(2);
                let zero = amax.clone().equal_elem(0.0);
                // |iscale| = 127 / amax; the sign ggml gives it (that of the largest value) cancels in
                // q·d, and rounding is symmetric, so the magnitude alone gives the same values.
                let safe = amax.mask_fill(zero.clone(), 1.0);
                let iscale =
                    (safe.ones_like().mul_scalar(127.0) / safe).mask_fill(zero.clone(), 0.0);
                let d = iscale
                    .clone()
                    .mask_fill(zero.clone(), 1.0)
                    .recip()
                    .mask_fill(zero, 0.0);
                (round_half_even(xb * iscale) * d).reshape([n, k])
            }
            ActQuant::Q8 => {
                const QK: usize = 32;
                let [n, k] = x.dims();
                if k % QK != 0 {
                    return x;
                }
                // [n, k/32, 32]; amax and scale per block: [n, k/32, 1]
                let xb: Tensor<B, 3> = x.reshape([n, k / QK, QK]);
                let amax = xb.clone().abs().max_dim(2);
                let zero = amax.clone().equal_elem(0.0);
                let safe = amax.clone().mask_fill(zero.clone(), 1.0);
                let id = (safe.ones_like().mul_scalar(127.0) / safe).mask_fill(zero, 0.0);
                let d = round_to_f16(amax.div_scalar(127.0));
                (round_half_even(xb * id) * d).reshape([n, k])
            }
        }
    }
}

/// Rounds to the nearest integer with ties to even (IEEE's default, and the x86 rounding ggml's SIMD
/// quantizers use), whatever tie rule the backend's `round` has. Ties are detected exactly:
/// `|y| - floor(|y|)` is exact in f32, and so is `2·floor(y/2 + 1/2)` for a tie.
pub fn round_half_even<B: Backend, const D: usize>(y: Tensor<B, D>) -> Tensor<B, D> {
    let a = y.clone().abs();
    let tie = (a.clone() - a.floor()).equal_elem(0.5);
    let even = (y.clone().mul_scalar(0.5).add_scalar(0.5))
        .floor()
        .mul_scalar(2.0);
    y.round().mask_where(tie, even)
}

/// Rounds f32 values to the nearest f16-representable value (11 significant bits) with a Veltkamp
/// split, in plain arithmetic every backend has. Exact for the f16 normal range, which is where scales
/// and activations live; below it (|x| < 6.1e-5) the result keeps 11 bits rather than flushing to
/// f16 subnormals, a difference far below the 8-bit activation rounding.
pub fn round_to_f16<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    round_to_bits(x, 11)
}

/// Rounds to `bits` significant bits (11: f16, 8: bf16) by a Veltkamp split with `2^(24-bits) + 1`.
fn round_to_bits<B: Backend, const D: usize>(x: Tensor<B, D>, bits: i32) -> Tensor<B, D> {
    let split = 2f32.powi(24 - bits) + 1.0;
    let c = x.clone().mul_scalar(split);
    c.clone() - (c - x)
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use super::*;
    use burn::tensor::TensorData;
    use cinder_kernels::act::fake_quantize;

    type B = crate::types::Flex;

    fn apply(a: ActQuant, x: &[f32], n: usize, k: usize) -> Vec<f32> {
        let t = Tensor::<B, 2>::from_data(TensorData::new(x.to_vec(), [n, k]), &Default::default());
        a.apply(t).into_data().to_vec().unwrap()
    }

    #[test]
    fn every_format_matches_the_kernels_rounding() {
        let (n, k) = (3usize, 1024usize);
        let mut x: Vec<f32> = (0..n * k)
            .map(|i| ((i as f32) * 0.37).cos() * (0.5 + (i % 13) as f32))
            .collect();
        // exact ties after scaling: a block whose max is 127 maps x to x exactly
        for (j, v) in x[..32].iter_mut().enumerate() {
            *v = j as f32 + 0.5;
        }
        x[0] = 127.0;
        x[256..288].iter_mut().for_each(|v| *v = 0.0);
        for (ty, kind) in [
            (GgmlType::Q4_1, ActKind::Q8),
            (GgmlType::Q6_K, ActKind::Q8K),
            (GgmlType::F16, ActKind::F16),
            (GgmlType::BF16, ActKind::BF16),
        ] {
            let got = apply(ActQuant::for_weight(ty), &x, n, k);
            let want = fake_quantize(kind, &x, k);
            let bad: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
            assert!(
                bad.is_empty(),
                "{}: {} mismatches, first {:?}",
                ty.name(),
                bad.len(),
                bad.first().map(|&i| (x[i], got[i], want[i]))
            );
        }
    }

    #[test]
    fn ties_round_to_even() {
        let v = vec![
            0.5f32,
            1.5,
            2.5,
            -0.5,
            -2.5,
            -3.5,
            0.499_999_97,
            126.5,
            -3.2,
            0.0,
        ];
        let t =
            Tensor::<B, 1>::from_data(TensorData::new(v.clone(), [v.len()]), &Default::default());
        let got: Vec<f32> = round_half_even(t).into_data().to_vec().unwrap();
        let want: Vec<f32> = v.iter().map(|x| x.round_ties_even()).collect();
        assert_eq!(got, want);
    }
}
