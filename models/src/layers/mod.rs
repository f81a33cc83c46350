//! Blocks shared by the architectures: RMSNorm, rotary embeddings, activations, the token embedding and
//! the output projection.

use std::ops::Range;

use burn::module::{Module, Param};
use burn::tensor::{Int, Tensor, TensorData};
use cinder_runtime::InferenceBackend;
use cinder_runtime::model::Logits;
use cinder_runtime::quant::QLinear;

use crate::error::{ModelError, Result};
use crate::loader::WeightSource;

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
        B::rms_norm(x, self.weight.val(), self.eps)
    }

    /// The residual add before the norm, fused with it: `s = x + r` (`x` without `r`) and
    /// `(s, norm(s))`.
    pub fn forward_add<const D: usize>(
        &self,
        x: Tensor<B, D>,
        r: Option<Tensor<B, D>>,
    ) -> (Tensor<B, D>, Tensor<B, D>) {
        B::add_rms_norm(x, r, self.weight.val(), self.eps)
    }

    /// [`RmsNorm::forward_add`] where the residual first passes its own post-norm `post` (Gemma's
    /// blocks): `s = x + post(r)` and `(s, norm(s))`, one launch on a device.
    pub fn forward_post_add<const D: usize>(
        &self,
        x: Tensor<B, D>,
        r: Option<(Tensor<B, D>, &RmsNorm<B>)>,
    ) -> (Tensor<B, D>, Tensor<B, D>) {
        match r {
            Some((r, post)) => {
                B::post_norm_add_rms_norm(x, r, post.weight.val(), self.weight.val(), self.eps)
            }
            None => self.forward_add(x, None),
        }
    }
}

pub use cinder_runtime::{Glu, RopeStyle};

mod yarn;
pub use yarn::{Yarn, yarn_mscale};

/// Rotary position embedding (Su et al., 2021, "RoFormer"), applied to the first `n_rot` dims of each
/// head. Angles are computed on the host per forward: `t × n_rot/2` values, cheaper than slicing a table.
#[derive(Debug, Clone, Copy)]
pub struct Rope<'a> {
    /// rotated dims per head (≤ head_dim, even)
    pub n_rot: usize,
    /// frequency base θ
    pub theta: f64,
    /// pairing of dims
    pub style: RopeStyle,
    /// positions are divided by this (linear RoPE scaling; 1.0 = none)
    pub linear_scale: f64,
    /// per rotation pair `i` (`n_rot/2` values), its frequency is divided by `freq_factors[i]`
    /// (Llama 3's `rope_freqs`: long-wavelength pairs slowed down, as llama.cpp's `ggml_rope_ext`)
    pub freq_factors: Option<&'a [f32]>,
    /// every rotated value is multiplied by this (1.0 = none): llama.cpp's `attn_factor`, which
    /// LongRoPE files carry (`rope.scaling.attn_factor`); Q·K is scaled by its square
    pub attn_factor: f32,
    /// YaRN scaling: each pair's frequency scaled by [`Yarn::frequency_scales`] (after
    /// `freq_factors`) and every rotated value by its attention factor too
    pub yarn: Option<Yarn>,
}

impl Rope<'_> {
    /// The rotation for the forward's `positions` (one per time step; consecutive for one sequence,
    /// each sequence's own in a ragged batch), computed once per forward on the host, uploaded once
    /// and shared by every layer's Q and K, for heads of `head_dim`.
    pub fn angles<B: InferenceBackend>(
        &self,
        positions: &[usize],
        head_dim: usize,
        device: &B::Device,
    ) -> RopeAngles<B> {
        let half = self.n_rot / 2;
        let t = positions.len();
        // Per position and output dim j: out[j] = x[j]·c[j] + x[p(j)]·s[j], with p the partner of
        // j in its rotation pair and s carrying the sign; dims past n_rot pass through (c = 1, s = 0).
        let mut c = vec![1.0f32; t * head_dim];
        let mut s = vec![0.0f32; t * head_dim];
        let yarn_scales = self
            .yarn
            .map(|y| y.frequency_scales(self.n_rot, self.theta));
        let freqs: Vec<f64> = (0..half)
            .map(|i| {
                let factor = self
                    .freq_factors
                    .and_then(|f| f.get(i))
                    .map_or(1.0, |&f| f as f64);
                let yarn = yarn_scales.as_ref().map_or(1.0, |s| s[i]);
                self.theta.powf(-2.0 * i as f64 / self.n_rot as f64) / factor * yarn
            })
            .collect();
        let mscale = self.attn_factor * self.yarn.map_or(1.0, |y| y.attn_factor as f32);
        for (pi, &p) in positions.iter().enumerate() {
            let p = p as f64 / self.linear_scale;
            for (i, &freq) in freqs.iter().enumerate() {
                let (sn, cs) = (p * freq).sin_cos();
                let (sn, cs) = (sn as f32 * mscale, cs as f32 * mscale);
                let (j0, j1) = match self.style {
                    RopeStyle::Neox => (i, i + half),
                    RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                };
                let row = pi * head_dim;
                c[row + j0] = cs;
                c[row + j1] = cs;
                s[row + j0] = -sn;
                s[row + j1] = sn;
            }
        }
        let table =
            |v: Vec<f32>| Tensor::<B, 2>::from_data(TensorData::new(v, [t, head_dim]), device);
        RopeAngles {
            cos: table(c),
            sin: table(s),
            style: self.style,
            n_rot: self.n_rot,
        }
    }
}

/// RoPE for one forward's positions: the cos/sin tables `[t, head_dim]`.
#[derive(Debug, Clone)]
pub struct RopeAngles<B: InferenceBackend> {
    cos: Tensor<B, 2>,
    sin: Tensor<B, 2>,
    style: RopeStyle,
    n_rot: usize,
}

impl<B: InferenceBackend> RopeAngles<B> {
    /// Rotates `x` `[b, t, h, head_dim]` (the layout a projection reshapes to)
    /// ([`FusedOps::rope`](cinder_runtime::InferenceBackend)).
    pub fn apply(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        B::rope(
            x,
            self.cos.clone(),
            self.sin.clone(),
            self.style,
            self.n_rot,
        )
    }

    /// Normalizes every head of `q` `[b, t, h, hd]` and `k` `[b, t, kvh, hd]` over `hd` with
    /// `q_norm` and `k_norm` (QK-norm), then rotates both: one launch on a device.
    pub fn apply_pair_normed(
        &self,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        q_norm: &RmsNorm<B>,
        k_norm: &RmsNorm<B>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>) {
        B::norm_rope_pair(
            q,
            k,
            q_norm.weight.val(),
            k_norm.weight.val(),
            q_norm.eps,
            self.cos.clone(),
            self.sin.clone(),
            self.style,
            self.n_rot,
        )
    }

    /// Rotates a layer's `q` `[b, t, h, hd]` and `k` `[b, t, kvh, hd]` together.
    pub fn apply_pair(&self, q: Tensor<B, 4>, k: Tensor<B, 4>) -> (Tensor<B, 4>, Tensor<B, 4>) {
        B::rope_pair(
            q,
            k,
            self.cos.clone(),
            self.sin.clone(),
            self.style,
            self.n_rot,
        )
    }
}

/// `[b, t, heads * head_dim]` -> `[b, t, heads, head_dim]` (contiguous: where RoPE and QK-norm run).
pub fn heads<B: InferenceBackend>(x: Tensor<B, 3>, heads: usize, head_dim: usize) -> Tensor<B, 4> {
    let [b, t, _] = x.dims();
    x.reshape([b, t, heads, head_dim])
}

/// `[b, t, heads * head_dim]` -> `[b, heads, t, head_dim]` (the layout the attention op takes).
pub fn split_heads<B: InferenceBackend>(
    x: Tensor<B, 3>,
    heads: usize,
    head_dim: usize,
) -> Tensor<B, 4> {
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
    let x = match &logits {
        Logits::Rows(rows) => {
            let ids: Vec<i32> = rows.iter().map(|&r| r as i32).collect();
            let idx =
                Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [rows.len()]), &x.device());
            x.select(1, idx)
        }
        _ => {
            let n = logits.count(t);
            if n == t { x } else { x.narrow(1, t - n, n) }
        }
    };
    let n = x.dims()[1];
    let x = norm.forward(x).reshape([b * n, d]);
    let vocab = embed.vocab_size();
    head.forward(x, embed).reshape([b, n, vocab])
}

/// Several projections of one input (Q/K/V, gate/up), computed together
/// ([`QLinear::forward_many`]: on the CPU kernels one activation quantization and one parallel
/// section for all of them).
pub fn project<B: InferenceBackend, const D: usize, const N: usize>(
    x: Tensor<B, D>,
    layers: [&QLinear<B>; N],
) -> [Tensor<B, D>; N] {
    let mut y = QLinear::forward_many(&layers, x).into_iter();
    // `forward_many` returns exactly one tensor per layer.
    std::array::from_fn(|_| y.next().expect("one output per layer"))
}

/// SwiGLU: `silu(x·Gateᵀ) · (x·Upᵀ)`, the gate fused with the products
/// ([`QLinear::glu`]).
pub fn swiglu<B: InferenceBackend, const D: usize>(
    x: Tensor<B, D>,
    gate: &QLinear<B>,
    up: &QLinear<B>,
) -> Tensor<B, D> {
    QLinear::glu(gate, up, x, Glu::Silu)
}

/// GEGLU: `gelu(x·Gateᵀ) · (x·Upᵀ)` with the tanh GELU as ggml's CPU op computes it (f16 in and
/// out), the gate fused with the products ([`QLinear::glu`]).
pub fn geglu<B: InferenceBackend, const D: usize>(
    x: Tensor<B, D>,
    gate: &QLinear<B>,
    up: &QLinear<B>,
) -> Tensor<B, D> {
    QLinear::glu(gate, up, x, Glu::Gelu)
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

/// The pieces at either end of a decoder: the token embedding, the final norm and the output head.
/// A model split across two devices keeps them on the CPU side ([`crate::split`]).
#[derive(Module, Debug)]
pub struct Ends<B: InferenceBackend> {
    /// token embedding (also the tied output projection)
    pub embed: Embedding<B>,
    /// the norm before the head
    pub norm: RmsNorm<B>,
    /// the vocabulary projection
    pub head: OutputHead<B>,
}

impl<B: InferenceBackend> Ends<B> {
    /// Loads `embed` `[vocab, d]`, `norm` `[d]` and, when `separate_head` allows it and the source
    /// has one, `lm_head` (otherwise the embedding is the tied head).
    pub fn load(
        src: &mut dyn WeightSource<B>,
        vocab: usize,
        d: usize,
        eps: f64,
        separate_head: bool,
    ) -> Result<Self> {
        let embed = Embedding::new(src.linear("embed", vocab, d, false)?);
        let norm = RmsNorm::new(src.vector("norm", d)?, eps);
        let separate = if separate_head && src.has("lm_head") {
            Some(src.linear("lm_head", vocab, d, false)?)
        } else {
            None
        };
        Ok(Self {
            embed,
            norm,
            head: OutputHead { separate },
        })
    }

    /// The device the weights live on.
    pub fn device(&self) -> B::Device {
        self.norm.weight.val().device()
    }

    /// Hidden states `[b, t, d]` -> logits `[b, n, vocab]` of the positions `logits` asks for.
    pub fn logits(&self, x: Tensor<B, 3>, logits: Logits) -> Tensor<B, 3> {
        final_logits(x, logits, &self.norm, &self.head, &self.embed)
    }
}

/// Blocks `layers` of a model of `n_layers`, clamped to its depth (`0..usize::MAX` is all of them);
/// a range that starts past the end is refused.
pub fn block_range(arch: &str, n_layers: usize, layers: Range<usize>) -> Result<Range<usize>> {
    if layers.start > n_layers || layers.start > layers.end {
        return Err(ModelError::Config {
            arch: arch.into(),
            reason: format!("blocks {layers:?} of a model of {n_layers}"),
        });
    }
    Ok(layers.start..layers.end.min(n_layers))
}
