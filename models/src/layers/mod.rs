//! Blocks shared by the architectures: RMSNorm, rotary embeddings, activations, the token embedding and
//! the output projection.

use cinder_runtime::InferenceBackend;
use burn::module::{Module, Param};
use burn::tensor::{Int, Tensor, TensorData};
use cinder_runtime::model::Logits;
use cinder_runtime::quant::QLinear;
use cinder_runtime::quant::act::round_to_f16;

/// Root-mean-square layer norm: `x / sqrt(mean(x²) + eps) * w` over the last axis.
#[derive(Module, Debug)]
pub struct RmsNorm<B: InferenceBackend> {
    /// `[d]`
    pub weight: Param<Tensor<B, 1>>,
    /// epsilon inside the square root
    pub eps: f64,
}

impl<B: InferenceBackend> RmsNorm<B> {
    /// A norm with the given weight.
    pub fn new(weight: Tensor<B, 1>, eps: f64) -> Self {
        Self {
            weight: Param::from_tensor(weight),
            eps,
        }
    }

    /// `x` `[..., d]` -> same shape.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let ms = x.clone().powi_scalar(2).mean_dim(D - 1);
        let inv = ms.add_scalar(self.eps).sqrt().recip();
        x * inv * self.weight.val().unsqueeze::<D>()
    }
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

/// Rotary position embedding (Su et al., 2021, "RoFormer"), applied to the first `n_rot` dims of each
/// head. Angles are computed on the host per call: `t × n_rot/2` values, cheaper than slicing a table.
#[derive(Debug, Clone, Copy)]
pub struct Rope {
    /// rotated dims per head (≤ head_dim, even)
    pub n_rot: usize,
    /// frequency base θ
    pub theta: f64,
    /// pairing of dims
    pub style: RopeStyle,
    /// positions are divided by this (linear RoPE scaling; 1.0 = none)
    pub linear_scale: f64,
}

impl Rope {
    /// The rotation angles for positions `start .. start + t`, computed once per forward on the host
    /// (`t × n_rot/2` values) and shared by every layer's Q and K.
    pub fn angles<B: InferenceBackend>(&self, start: usize, t: usize, device: &B::Device) -> RopeAngles<B> {
        let half = self.n_rot / 2;
        let mut cos = Vec::with_capacity(t * half);
        let mut sin = Vec::with_capacity(t * half);
        for p in start..start + t {
            let p = p as f64 / self.linear_scale;
            for i in 0..half {
                let freq = self.theta.powf(-2.0 * i as f64 / self.n_rot as f64);
                let (s, c) = (p * freq).sin_cos();
                cos.push(c as f32);
                sin.push(s as f32);
            }
        }
        RopeAngles {
            cos: Tensor::from_data(TensorData::new(cos, [1, 1, t, half, 1]), device),
            sin: Tensor::from_data(TensorData::new(sin, [1, 1, t, half, 1]), device),
            style: self.style,
            n_rot: self.n_rot,
        }
    }
}

/// RoPE angles for one forward's positions: `cos`/`sin` `[1, 1, t, n_rot/2, 1]`.
#[derive(Debug, Clone)]
pub struct RopeAngles<B: InferenceBackend> {
    cos: Tensor<B, 5>,
    sin: Tensor<B, 5>,
    style: RopeStyle,
    n_rot: usize,
}

impl<B: InferenceBackend> RopeAngles<B> {
    /// Rotates the first `n_rot` dims of each head of `x` `[b, h, t, head_dim]`.
    pub fn apply(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let [b, h, t, hd] = x.dims();
        let half = self.n_rot / 2;
        let (rot, pass) = if self.n_rot < hd {
            (
                x.clone().narrow(3, 0, self.n_rot),
                Some(x.narrow(3, self.n_rot, hd - self.n_rot)),
            )
        } else {
            (x, None)
        };
        let (c, s) = (self.cos.clone(), self.sin.clone());
        let rotated = match self.style {
            RopeStyle::Neox => {
                let c: Tensor<B, 4> = c.reshape([1, 1, t, half]);
                let s: Tensor<B, 4> = s.reshape([1, 1, t, half]);
                let x0 = rot.clone().narrow(3, 0, half);
                let x1 = rot.narrow(3, half, half);
                let o0 = x0.clone() * c.clone() - x1.clone() * s.clone();
                let o1 = x0 * s + x1 * c;
                Tensor::cat(vec![o0, o1], 3)
            }
            RopeStyle::Interleaved => {
                let pairs: Tensor<B, 5> = rot.reshape([b, h, t, half, 2]);
                let x0 = pairs.clone().narrow(4, 0, 1);
                let x1 = pairs.narrow(4, 1, 1);
                let o0 = x0.clone() * c.clone() - x1.clone() * s.clone();
                let o1 = x0 * s + x1 * c;
                Tensor::cat(vec![o0, o1], 4).reshape([b, h, t, self.n_rot])
            }
        };
        match pass {
            Some(p) => Tensor::cat(vec![rotated, p], 3),
            None => rotated,
        }
    }
}

/// `[b, t, heads * head_dim]` -> `[b, heads, t, head_dim]` (the layout the attention op takes).
pub fn split_heads<B: InferenceBackend>(x: Tensor<B, 3>, heads: usize, head_dim: usize) -> Tensor<B, 4> {
    let [b, t, _] = x.dims();
    x.reshape([b, t, heads, head_dim]).swap_dims(1, 2)
}

/// `[b, heads, t, head_dim]` -> `[b, t, heads * head_dim]`.
pub fn merge_heads<B: InferenceBackend>(x: Tensor<B, 4>) -> Tensor<B, 3> {
    let [b, h, t, hd] = x.dims();
    x.swap_dims(1, 2).reshape([b, t, h * hd])
}

/// The decoder tail shared by every architecture: keep the positions `logits` asks for, final norm,
/// vocabulary projection. `x` `[b, t, d]` -> `[b, n, vocab]`.
pub fn final_logits<B: InferenceBackend>(
    x: Tensor<B, 3>,
    logits: Logits,
    norm: &RmsNorm<B>,
    head: &OutputHead<B>,
    embed: &Embedding<B>,
) -> Tensor<B, 3> {
    let [b, t, d] = x.dims();
    let n = logits.count(t);
    let x = if n == t { x } else { x.narrow(1, t - n, n) };
    let x = norm.forward(x).reshape([b * n, d]);
    let vocab = embed.vocab_size();
    head.forward(x, embed).reshape([b, n, vocab])
}

/// SiLU (swish): `x · σ(x)`.
pub fn silu<B: InferenceBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    burn::tensor::activation::silu(x)
}

/// GELU, tanh approximation (`gelu_pytorch_tanh`), as ggml's CPU op computes it: the input rounded to
/// f16, the formula in f32, the result rounded to f16 (ggml reads a precomputed f16 table), with
/// `x <= -10 -> 0` and `x >= 10 -> x`. Matching that rounding keeps Gemma's outputs on llama.cpp's.
pub fn gelu_tanh<B: InferenceBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044_715;
    let xh = round_to_f16(x.clone());
    // 0.5·x·(1 + tanh(√(2/π)·x·(1 + a·x²)))
    let inner = xh
        .clone()
        .mul(xh.clone().powi_scalar(2).mul_scalar(COEF_A).add_scalar(1.0))
        .mul_scalar(SQRT_2_OVER_PI);
    let g = round_to_f16(xh.mul_scalar(0.5) * inner.tanh().add_scalar(1.0));
    let low = x.clone().lower_equal_elem(-10.0);
    let high = x.clone().greater_equal_elem(10.0);
    g.mask_fill(low, 0.0).mask_where(high, x)
}

/// Token embedding table `[vocab, d]`, held as a [`QLinear`] of `vocab × d` so the same weights serve
/// as the tied output projection (one copy in memory, and the projection rounds its input exactly as a
/// separate quantized `lm_head` would).
#[derive(Module, Debug)]
pub struct Embedding<B: InferenceBackend> {
    /// `vocab × d`
    pub table: QLinear<B>,
}

impl<B: InferenceBackend> Embedding<B> {
    /// Wraps a table.
    pub fn new(table: QLinear<B>) -> Self {
        Self { table }
    }

    /// `ids` `[b, t]` -> `[b, t, d]`.
    pub fn forward(&self, ids: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let [b, t] = ids.dims();
        let d = self.table.in_features();
        self.table.rows(ids.reshape([b * t])).reshape([b, t, d])
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.table.out_features()
    }
}

/// The vocabulary projection: its own weight, or (when `separate` is `None`) the token embedding reused
/// (tied embeddings).
#[derive(Module, Debug)]
pub struct OutputHead<B: InferenceBackend> {
    /// A separate `lm_head` / `output.weight`.
    pub separate: Option<QLinear<B>>,
}

impl<B: InferenceBackend> OutputHead<B> {
    /// `x` `[n, d]` -> logits `[n, vocab]`.
    pub fn forward(&self, x: Tensor<B, 2>, embedding: &Embedding<B>) -> Tensor<B, 2> {
        match &self.separate {
            Some(l) => l.forward(x),
            None => embedding.table.forward(x),
        }
    }
}
