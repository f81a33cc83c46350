//! Gemma 3 text decoder.
//!
//! References: Gemma Team, 2025, "Gemma 3 Technical Report"; llama.cpp's `llm_build_gemma3_iswa` graph for
//! the GGUF conventions (the converter stores RMSNorm weights as `1 + w`, so norms here are plain
//! `x · w`). Differences from Llama: the embedding is scaled by `sqrt(d_model)`; Q and K get their own
//! per-head RMSNorm before RoPE; attention and MLP outputs pass a post-norm before the residual add; the
//! MLP is GeGLU (tanh GELU); five of every six layers use sliding-window attention with their own RoPE
//! base, the sixth is global.

use std::ops::Range;

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Int, Tensor};
use cinder_runtime::InferenceBackend;
use cinder_runtime::attention::{AttentionCache, AttentionParams};
use cinder_runtime::model::{CausalLm, Logits};
use cinder_runtime::quant::QLinear;

use crate::decoder::{Blocks, Decoder, LanguageModel, decoder_forward, decoder_hidden_states};
use crate::error::{ModelError, Result, check_shape};
use crate::layers::{
    Ends, RmsNorm, Rope, RopeStyle, block_range, geglu, heads, merge_heads, project, split_heads,
};
use crate::loader::WeightSource;

/// Hyper-parameters of a Gemma 3 model.
#[derive(Config, Debug, PartialEq)]
pub struct Gemma3Config {
    /// vocabulary size
    pub vocab_size: usize,
    /// model width
    pub d_model: usize,
    /// transformer blocks
    pub n_layers: usize,
    /// query heads
    pub n_heads: usize,
    /// key/value heads
    pub n_kv_heads: usize,
    /// per-head width (`key_length`)
    pub head_dim: usize,
    /// MLP hidden width
    pub ffn_dim: usize,
    /// RMSNorm epsilon
    #[config(default = 1e-6)]
    pub rms_eps: f64,
    /// RoPE base of the global layers
    #[config(default = 1_000_000.0)]
    pub rope_theta_global: f64,
    /// RoPE base of the sliding-window layers
    #[config(default = 10_000.0)]
    pub rope_theta_local: f64,
    /// linear RoPE scaling of the global layers (1 = none)
    #[config(default = 1.0)]
    pub rope_linear_scale_global: f64,
    /// sliding window of the local layers
    #[config(default = 512)]
    pub sliding_window: usize,
    /// every `swa_pattern`-th layer is global (layer `i` is global when `(i + 1) % swa_pattern == 0`)
    #[config(default = 6)]
    pub swa_pattern: usize,
    /// attention scale is `1 / sqrt(query_pre_attn_scalar)`
    pub query_pre_attn_scalar: f64,
    /// trained context length
    #[config(default = 32768)]
    pub context_length: usize,
}

impl Gemma3Config {
    /// Checks the shapes fit together.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| {
            Err(ModelError::Config {
                arch: "gemma3".into(),
                reason,
            })
        };
        check_shape(
            "gemma3",
            &[
                ("vocab_size", self.vocab_size),
                ("d_model", self.d_model),
                ("n_layers", self.n_layers),
                ("n_heads", self.n_heads),
                ("n_kv_heads", self.n_kv_heads),
                ("head_dim", self.head_dim),
                ("ffn_dim", self.ffn_dim),
                ("sliding_window", self.sliding_window),
                ("swa_pattern", self.swa_pattern),
                ("context_length", self.context_length),
            ],
            self.n_heads,
            self.n_kv_heads,
        )?;
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!("head_dim {} must be even", self.head_dim));
        }
        if !(self.query_pre_attn_scalar > 0.0 && self.query_pre_attn_scalar.is_finite()) {
            return bad(format!(
                "query_pre_attn_scalar {} out of range",
                self.query_pre_attn_scalar
            ));
        }
        if !(self.rms_eps > 0.0 && self.rms_eps < 1.0) {
            return bad(format!("rms_eps {} out of range", self.rms_eps));
        }
        Ok(())
    }

    /// Whether layer `i` attends globally (otherwise through the sliding window).
    pub fn is_global(&self, i: usize) -> bool {
        (i + 1).is_multiple_of(self.swa_pattern)
    }
}

/// One transformer block.
#[derive(Module, Debug)]
pub struct Gemma3Block<B: InferenceBackend> {
    attn_norm: RmsNorm<B>,
    wq: QLinear<B>,
    wk: QLinear<B>,
    wv: QLinear<B>,
    wo: QLinear<B>,
    q_norm: RmsNorm<B>,
    k_norm: RmsNorm<B>,
    post_attn_norm: RmsNorm<B>,
    ffn_norm: RmsNorm<B>,
    w_gate: QLinear<B>,
    w_up: QLinear<B>,
    w_down: QLinear<B>,
    post_ffn_norm: RmsNorm<B>,
}

/// Blocks `first_layer..first_layer + blocks.len()` of a Gemma 3 model.
#[derive(Module, Debug)]
pub struct Gemma3Blocks<B: InferenceBackend> {
    blocks: Vec<Gemma3Block<B>>,
    /// absolute index of the first block held (which layers are global depends on it)
    #[module(skip)]
    first_layer: usize,
    #[module(skip)]
    config: Gemma3Config,
}

/// A Gemma 3 model: the embedding and head around its blocks (all of them, or blocks `N..` when
/// the first `N` run elsewhere: [`crate::split`]).
#[derive(Module, Debug)]
pub struct Gemma3<B: InferenceBackend> {
    ends: Ends<B>,
    blocks: Gemma3Blocks<B>,
}

impl<B: InferenceBackend> Gemma3Blocks<B> {
    /// Loads blocks `layers` (clamped to the model's depth; at least one) by module path: the
    /// Llama names plus `layers.{i}.{attn.q_norm, attn.k_norm, post_attn_norm, post_ffn_norm}`.
    pub fn load(
        config: Gemma3Config,
        src: &mut dyn WeightSource<B>,
        layers: Range<usize>,
    ) -> Result<Self> {
        config.validate()?;
        let layers = block_range("gemma3", config.n_layers, layers)?;
        if layers.is_empty() {
            return Err(ModelError::Config {
                arch: "gemma3".into(),
                reason: format!("no blocks in {layers:?}"),
            });
        }
        Self::load_range(config, src, layers)
    }

    fn load_range(
        config: Gemma3Config,
        src: &mut dyn WeightSource<B>,
        layers: Range<usize>,
    ) -> Result<Self> {
        let c = &config;
        let (d, hd) = (c.d_model, c.head_dim);
        let mut blocks = Vec::with_capacity(layers.len());
        for i in layers.clone() {
            let p = |s: &str| format!("layers.{i}.{s}");
            let norm =
                |src: &mut dyn WeightSource<B>, name: &str, len: usize| -> Result<RmsNorm<B>> {
                    Ok(RmsNorm::new(src.vector(&p(name), len)?, c.rms_eps))
                };
            blocks.push(Gemma3Block {
                attn_norm: norm(src, "attn_norm", d)?,
                wq: src.linear(&p("attn.wq"), c.n_heads * hd, d, false)?,
                wk: src.linear(&p("attn.wk"), c.n_kv_heads * hd, d, false)?,
                wv: src.linear(&p("attn.wv"), c.n_kv_heads * hd, d, false)?,
                wo: src.linear(&p("attn.wo"), d, c.n_heads * hd, false)?,
                q_norm: norm(src, "attn.q_norm", hd)?,
                k_norm: norm(src, "attn.k_norm", hd)?,
                post_attn_norm: norm(src, "post_attn_norm", d)?,
                ffn_norm: norm(src, "ffn_norm", d)?,
                w_gate: src.linear(&p("mlp.gate"), c.ffn_dim, d, false)?,
                w_up: src.linear(&p("mlp.up"), c.ffn_dim, d, false)?,
                w_down: src.linear(&p("mlp.down"), d, c.ffn_dim, false)?,
                post_ffn_norm: norm(src, "post_ffn_norm", d)?,
            });
        }
        Ok(Self {
            blocks,
            first_layer: layers.start,
            config,
        })
    }
}

impl<B: InferenceBackend> Blocks<B> for Gemma3Blocks<B> {
    fn run(&self, mut x: Tensor<B, 3>, cache: &mut dyn AttentionCache<B>) -> Tensor<B, 3> {
        let c = &self.config;
        let t = x.dims()[1];
        let (h, kvh, hd) = (c.n_heads, c.n_kv_heads, c.head_dim);
        let positions = cache.positions(t);
        let device = x.device();
        // Sliding-window layers and global layers rotate with different bases: one table each.
        let rope_local = Rope {
            n_rot: hd,
            theta: c.rope_theta_local,
            style: RopeStyle::Neox,
            linear_scale: 1.0,
            freq_factors: None,
            attn_factor: 1.0,
            yarn: None,
        }
        .angles::<B>(&positions, hd, &device);
        let rope_global = Rope {
            n_rot: hd,
            theta: c.rope_theta_global,
            style: RopeStyle::Neox,
            linear_scale: c.rope_linear_scale_global,
            freq_factors: None,
            attn_factor: 1.0,
            yarn: None,
        }
        .angles::<B>(&positions, hd, &device);
        let scale = (1.0 / c.query_pre_attn_scalar.sqrt()) as f32;
        // x: [b, t, d], the residual stream; cache layer j is block first_layer + j. Each block's
        // last product is added to it by the next block's first norm (the add fused with the norm).
        let mut pending = None;
        for (j, blk) in self.blocks.iter().enumerate() {
            let global = c.is_global(self.first_layer + j);
            let rope = if global { &rope_global } else { &rope_local };
            let params = AttentionParams {
                scale,
                sliding_window: (!global).then_some(c.sliding_window),
                softcap: None,
            };
            let (xs, n) = blk.attn_norm.forward_post_add(x, pending.take());
            // q [b, h, t, hd]; k, v [b, kvh, t, hd]; QK-norm over hd, then RoPE (one op)
            let [q, k, v] = project(n, [&blk.wq, &blk.wk, &blk.wv]);
            let (q, k) = rope.apply_pair_normed(
                heads(q, h, hd),
                heads(k, kvh, hd),
                &blk.q_norm,
                &blk.k_norm,
            );
            let v = split_heads(v, kvh, hd);
            let (q, k) = (q.swap_dims(1, 2), k.swap_dims(1, 2));
            let a = merge_heads(cache.attend(j, q, k, v, &params));
            // the post-norms run fused with the next residual add and norm
            let attn = blk.wo.forward(a);
            let (xs, n) = blk
                .ffn_norm
                .forward_post_add(xs, Some((attn, &blk.post_attn_norm)));
            let g = geglu(n, &blk.w_gate, &blk.w_up);
            x = xs;
            pending = Some((blk.w_down.forward(g), &blk.post_ffn_norm));
        }
        match pending {
            Some((p, post)) => x + post.forward(p),
            None => x,
        }
    }

    fn len(&self) -> usize {
        self.blocks.len()
    }

    fn first_layer(&self) -> usize {
        self.first_layer
    }

    fn kv_dims(&self) -> (usize, usize) {
        (self.config.n_kv_heads, self.config.head_dim)
    }
}

impl<B: InferenceBackend> Gemma3<B> {
    /// Loads the whole model by module path: `embed`, `norm`, `lm_head` (absent => tied), and the
    /// blocks ([`Gemma3Blocks::load`]).
    pub fn load(config: Gemma3Config, src: &mut dyn WeightSource<B>) -> Result<Self> {
        Self::load_layers(config, src, 0..usize::MAX)
    }

    /// Loads the ends and blocks `layers` only (clamped to the model's depth; may be empty when
    /// every block runs elsewhere).
    pub fn load_layers(
        config: Gemma3Config,
        src: &mut dyn WeightSource<B>,
        layers: Range<usize>,
    ) -> Result<Self> {
        config.validate()?;
        let layers = block_range("gemma3", config.n_layers, layers)?;
        let ends = Ends::load(src, config.vocab_size, config.d_model, config.rms_eps, true)?;
        let blocks = Gemma3Blocks::load_range(config, src, layers)?;
        Ok(Self { ends, blocks })
    }

    /// The configuration.
    pub fn config(&self) -> &Gemma3Config {
        &self.blocks.config
    }
}

impl<B: InferenceBackend> CausalLm<B> for Gemma3<B> {
    fn forward(
        &self,
        tokens: Tensor<B, 2, Int>,
        cache: &mut dyn AttentionCache<B>,
        logits: Logits,
    ) -> Tensor<B, 3> {
        decoder_forward(self, tokens, cache, logits)
    }

    fn n_layers(&self) -> usize {
        self.blocks.len()
    }

    fn kv_dims(&self) -> (usize, usize) {
        self.blocks.kv_dims()
    }

    fn vocab_size(&self) -> usize {
        self.config().vocab_size
    }

    fn context_length(&self) -> usize {
        self.config().context_length
    }

    fn device(&self) -> B::Device {
        self.ends.device()
    }
}

impl<B: InferenceBackend> LanguageModel<B> for Gemma3<B> {
    fn arch(&self) -> &'static str {
        "gemma3"
    }

    fn hidden_states(
        &self,
        tokens: Tensor<B, 2, Int>,
        cache: &mut dyn AttentionCache<B>,
    ) -> Option<Tensor<B, 3>> {
        Some(decoder_hidden_states(self, tokens, cache, &self.ends.norm))
    }
}

impl<B: InferenceBackend> Decoder<B> for Gemma3<B> {
    fn embed(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        // scaled by sqrt(d) as Gemma does
        let d = self.config().d_model as f64;
        self.ends.embed.forward(tokens).mul_scalar(d.sqrt() as f32)
    }

    fn blocks(&self) -> &dyn Blocks<B> {
        &self.blocks
    }

    fn output(&self, x: Tensor<B, 3>, logits: Logits) -> Tensor<B, 3> {
        self.ends.logits(x, logits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sixth_layer_is_global() {
        let c = Gemma3Config::new(262144, 640, 18, 4, 1, 256, 2048, 256.0);
        assert!(c.validate().is_ok());
        let global: Vec<usize> = (0..18).filter(|&i| c.is_global(i)).collect();
        assert_eq!(global, [5, 11, 17]);
        let bad = Gemma3Config {
            swa_pattern: 0,
            ..c
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("swa_pattern is 0")
        );
    }
}
