//! Op group: the fused element-wise and normalization ops of a decoder step ([`FusedOps`]):
//! RMSNorm (alone and fused with the residual add), rotary embeddings, the SwiGLU/GEGLU gates.
//!
//! Each has a generic form in Burn ops (the trait's defaults). The host backends ([`host`]) run
//! them as single parallel passes with ggml's arithmetic (`cinder_kernels::elementwise`), so their
//! results are the CPU reference's bit for bit; the CubeCL backends run each as one kernel.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod cube;
#[cfg(any(feature = "flex", feature = "ndarray"))]
pub mod host;

use burn::tensor::Tensor;

use crate::quant::QuantOps;

/// The gate of a gated linear unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Glu {
    /// SwiGLU: `silu(g) · u`
    Silu,
    /// GEGLU: `gelu(g) · u`, tanh GELU as ggml's CPU op computes it
    Gelu,
}

/// How a checkpoint pairs the dimensions RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(x[2i], x[2i+1])`: llama.cpp's "normal" RoPE. GGUF Llama checkpoints store Q/K
    /// permuted for it.
    Interleaved,
    /// Halves `(x[i], x[i + n/2])`: GPT-NeoX style, used by Qwen2, Gemma, and HF-layout Llama weights.
    Neox,
}

impl RopeStyle {
    /// The dimension `j` is rotated with, of a head whose first `n_rot` dimensions rotate (`j`
    /// itself past them).
    pub fn partner(self, j: usize, n_rot: usize) -> usize {
        if j >= n_rot {
            return j;
        }
        match self {
            RopeStyle::Interleaved => j ^ 1,
            RopeStyle::Neox if j < n_rot / 2 => j + n_rot / 2,
            RopeStyle::Neox => j - n_rot / 2,
        }
    }
}

/// Fused decoder ops. One of the op groups that make up [`crate::InferenceBackend`]; the GLU of
/// two products takes [`QuantOps`]' weights.
pub trait FusedOps: QuantOps {
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

    /// The residual add fused with the norm after it: `s = x + r` (`x` alone without `r`) and
    /// `(s, rms_norm(s, w))`, each as [`FusedOps::rms_norm`] and a plain add compute them.
    fn add_rms_norm<const D: usize>(
        x: Tensor<Self, D>,
        r: Option<Tensor<Self, D>>,
        w: Tensor<Self, 1>,
        eps: f64,
    ) -> (Tensor<Self, D>, Tensor<Self, D>) {
        let s = match r {
            Some(r) => x + r,
            None => x,
        };
        (s.clone(), Self::rms_norm(s, w, eps))
    }

    /// [`FusedOps::add_rms_norm`] whose residual first passes its own RMSNorm (a post-norm, as
    /// Gemma's blocks have): `s = x + rms_norm(r, rw)` and `(s, rms_norm(s, w))`, one `eps` for
    /// both. One launch on a device; the host backends run the two ops.
    fn post_norm_add_rms_norm<const D: usize>(
        x: Tensor<Self, D>,
        r: Tensor<Self, D>,
        rw: Tensor<Self, 1>,
        w: Tensor<Self, 1>,
        eps: f64,
    ) -> (Tensor<Self, D>, Tensor<Self, D>) {
        let r = Self::rms_norm(r, rw, eps);
        Self::add_rms_norm(x, Some(r), w, eps)
    }

    /// Rotary embedding of `x` `[b, t, h, hd]` (Su et al., 2021, "RoFormer"): for each time step
    /// `i` and dimension `j`, `out[j] = x[j]·cos[i, j] + x[p(j)]·sin[i, j]` with `p` the partner
    /// of `j` in its rotation pair ([`RopeStyle::partner`] over the first `n_rot` dimensions).
    /// `cos`, `sin` `[t, hd]` carry the pair's sign, and `cos = 1`, `sin = 0` past `n_rot`.
    fn rope(
        x: Tensor<Self, 4>,
        cos: Tensor<Self, 2>,
        sin: Tensor<Self, 2>,
        style: RopeStyle,
        n_rot: usize,
    ) -> Tensor<Self, 4> {
        let [b, t, h, hd] = x.dims();
        let device = x.device();
        // The pair swap as a permutation matrix [hd, hd]: x·P puts x[p(j)] at j. Products with 1
        // and 0 are exact, so this is the same arithmetic as slicing the halves.
        let mut perm = vec![0.0f32; hd * hd];
        for j in 0..hd {
            perm[style.partner(j, n_rot) * hd + j] = 1.0;
        }
        let perm =
            Tensor::<Self, 2>::from_data(burn::tensor::TensorData::new(perm, [hd, hd]), &device);
        let x2: Tensor<Self, 2> = x.reshape([b * t * h, hd]);
        let swapped = x2.clone().matmul(perm);
        // [t, hd] -> [b·t·h, hd], rows in x's order.
        let rows = |c: Tensor<Self, 2>| {
            c.reshape([1, t, 1, hd])
                .repeat_dim(0, b)
                .repeat_dim(2, h)
                .reshape([b * t * h, hd])
        };
        (x2 * rows(cos) + swapped * rows(sin)).reshape([b, t, h, hd])
    }

    /// [`FusedOps::rope`] of a layer's Q `[b, t, h, hd]` and K `[b, t, kvh, hd]` with the same
    /// tables (one launch on a device).
    fn rope_pair(
        q: Tensor<Self, 4>,
        k: Tensor<Self, 4>,
        cos: Tensor<Self, 2>,
        sin: Tensor<Self, 2>,
        style: RopeStyle,
        n_rot: usize,
    ) -> (Tensor<Self, 4>, Tensor<Self, 4>) {
        (
            Self::rope(q, cos.clone(), sin.clone(), style, n_rot),
            Self::rope(k, cos, sin, style, n_rot),
        )
    }

    /// [`FusedOps::rope_pair`] after an RMSNorm of every head of Q and K over `hd` (`qw`, `kw`
    /// `[hd]`; the QK-norm of Gemma 3 and Qwen3), one `eps` for both. One launch on a device; the
    /// host backends run the three ops.
    #[allow(clippy::too_many_arguments)]
    fn norm_rope_pair(
        q: Tensor<Self, 4>,
        k: Tensor<Self, 4>,
        qw: Tensor<Self, 1>,
        kw: Tensor<Self, 1>,
        eps: f64,
        cos: Tensor<Self, 2>,
        sin: Tensor<Self, 2>,
        style: RopeStyle,
        n_rot: usize,
    ) -> (Tensor<Self, 4>, Tensor<Self, 4>) {
        let q = Self::rms_norm(q, qw, eps);
        let k = Self::rms_norm(k, kw, eps);
        Self::rope_pair(q, k, cos, sin, style, n_rot)
    }

    /// A gated linear unit over two products of `x` `[m, k]`: `glu(x·Gateᵀ, x·Upᵀ)` -> `[m, n]`
    /// ([`FusedOps::silu_mul`] or [`FusedOps::gelu_mul`] of the two). A device computes both
    /// products and the gate in one kernel.
    fn glu_matmul(
        x: Tensor<Self, 2>,
        gate: &Self::QMatrix,
        up: &Self::QMatrix,
        kind: Glu,
    ) -> Tensor<Self, 2> {
        let mut p = Self::qw_matmul_many(x, &[gate, up]).into_iter();
        let (Some(g), Some(u)) = (p.next(), p.next()) else {
            unreachable!("two weights give two products");
        };
        match kind {
            Glu::Silu => Self::silu_mul(g, u),
            Glu::Gelu => Self::gelu_mul(g, u),
        }
    }
}

/// GELU (tanh approximation) as ggml's CPU op computes it, with Burn ops: the input rounded to f16,
/// the formula in f32 in ggml's operation order, the result rounded to f16, `x ≤ −10 → 0` and
/// `x ≥ 10 → x` (ggml reads a precomputed f16 table; the host backends do too).
pub fn generic_gelu_tanh_f16<B: burn::tensor::backend::Backend, const D: usize>(
    x: Tensor<B, D>,
) -> Tensor<B, D> {
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
