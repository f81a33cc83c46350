//! Op group: the fused element-wise and normalization ops of a decoder step ([`FusedOps`]).
//!
//! Each has a generic form in Burn ops (the trait's defaults). The host backends ([`host`]) run
//! them as single parallel passes with ggml's arithmetic (`cinder_kernels::elementwise`), so their
//! results are the CPU reference's bit for bit.

#[cfg(any(feature = "flex", feature = "ndarray"))]
pub mod host;

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// Fused decoder ops. One of the op groups that make up [`crate::InferenceBackend`].
pub trait FusedOps: Backend {
    /// SwiGLU's gate: `silu(g) · u`, `silu(x) = x / (1 + e^-x)` (same shapes). The host backends
    /// fuse it into one parallel pass with the same arithmetic.
    fn silu_mul<const D: usize>(g: Tensor<Self, D>, u: Tensor<Self, D>) -> Tensor<Self, D> {
        burn::tensor::activation::silu(g) * u
    }

    /// GEGLU's gate: `gelu(g) · u` with the tanh GELU as ggml's CPU op computes it (input rounded
    /// to f16, result rounded to f16, `x ≤ −10 → 0`, `x ≥ 10 → x`). The host backends read ggml's
    /// f16 table; others run the formula with Burn ops ([`generic_gelu_tanh_f16`]).
    fn gelu_mul<const D: usize>(g: Tensor<Self, D>, u: Tensor<Self, D>) -> Tensor<Self, D> {
        generic_gelu_tanh_f16(g) * u
    }

    /// RMS norm over the last axis: `x / sqrt(mean(x²) + eps) · w`, `w` `[d]`. The host backends
    /// run ggml's arithmetic (a sequential f64 sum, so the result does not depend on the CPU's
    /// vector width), rows in parallel.
    fn rms_norm<const D: usize>(
        x: Tensor<Self, D>,
        w: Tensor<Self, 1>,
        eps: f64,
    ) -> Tensor<Self, D> {
        let ms = x.clone().powi_scalar(2).mean_dim(D - 1);
        let inv = ms.add_scalar(eps).sqrt().recip();
        x * inv * w.unsqueeze::<D>()
    }
}

/// GELU (tanh approximation) as ggml's CPU op computes it, with Burn ops: the input rounded to f16,
/// the formula in f32 in ggml's operation order, the result rounded to f16, `x ≤ −10 → 0` and
/// `x ≥ 10 → x` (ggml reads a precomputed f16 table; the host backends do too).
pub fn generic_gelu_tanh_f16<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044_715;
    let xh = crate::act::round_to_f16(x.clone());
    // 0.5·x·(1 + tanh(√(2/π)·x·(1 + a·x·x))), evaluated left to right as C does
    let poly = xh
        .clone()
        .mul_scalar(COEF_A)
        .mul(xh.clone())
        .add_scalar(1.0);
    let inner = xh.clone().mul_scalar(SQRT_2_OVER_PI).mul(poly);
    let g = crate::act::round_to_f16(xh.mul_scalar(0.5) * inner.tanh().add_scalar(1.0));
    let low = x.clone().lower_equal_elem(-10.0);
    let high = x.clone().greater_equal_elem(10.0);
    g.mask_fill(low, 0.0).mask_where(high, x)
}

#[cfg(feature = "candle")]
impl FusedOps for crate::types::Candle {}
#[cfg(feature = "wgpu")]
impl FusedOps for crate::types::Wgpu {}
#[cfg(feature = "cuda")]
impl FusedOps for crate::types::Cuda {}
