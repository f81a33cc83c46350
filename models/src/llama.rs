//! Llama-family decoder (Llama 2/3, SmolLM, Mistral, Qwen2, Qwen3).
//!
//! References: Touvron et al., 2023, "LLaMA: Open and Efficient Foundation Language Models"; llama.cpp's
//! `llm_build_llama` / `llm_build_qwen2` / `llm_build_qwen3` graphs for the GGUF conventions. Pre-norm
//! blocks with RMSNorm, rotary embeddings, grouped-query attention and a SwiGLU MLP. The members differ
//! only in switches of [`LlamaConfig`]: Q/K/V biases (Qwen2), a per-head RMSNorm of Q and K before
//! RoPE (Qwen3), per-pair RoPE frequency factors (Llama 3's `rope_freqs`, LongRoPE), a sliding window
//! (Mistral), a mixture of experts in place of the MLP (Qwen3-MoE, OLMoE, Mixtral; [`crate::moe`]).

use std::ops::Range;

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Int, Tensor};
use cinder_runtime::InferenceBackend;
use cinder_runtime::attention::{AttentionCache, AttentionParams};
use cinder_runtime::model::{CausalLm, Logits};
use cinder_runtime::quant::QLinear;
use serde::{Deserialize, Serialize};

use crate::decoder::{Blocks, Decoder, LanguageModel, decoder_forward, decoder_hidden_states};
use crate::error::{ModelError, Result, check_shape};
use crate::layers::{
    Ends, RmsNorm, Rope, RopeStyle, Yarn, block_range, heads, merge_heads, project, split_heads,
    swiglu,
};
use crate::loader::WeightSource;
use crate::moe::{MoeConfig, MoeFfn};

/// RoPE pairing as stored in the checkpoint (serializable mirror of [`RopeStyle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RopeLayout {
    /// adjacent pairs (GGUF Llama/Mistral)
    Interleaved,
    /// halves (Qwen2, HF-layout weights)
    Neox,
}

impl From<RopeLayout> for RopeStyle {
    fn from(l: RopeLayout) -> Self {
        match l {
            RopeLayout::Interleaved => RopeStyle::Interleaved,
            RopeLayout::Neox => RopeStyle::Neox,
        }
    }
}

/// Hyper-parameters of a Llama-family model.
#[derive(Config, Debug, PartialEq)]
pub struct LlamaConfig {
    /// vocabulary size (embedding rows)
    pub vocab_size: usize,
    /// model width
    pub d_model: usize,
    /// transformer blocks
    pub n_layers: usize,
    /// query heads
    pub n_heads: usize,
    /// key/value heads (GQA)
    pub n_kv_heads: usize,
    /// per-head width
    pub head_dim: usize,
    /// MLP hidden width
    pub ffn_dim: usize,
    /// RMSNorm epsilon
    #[config(default = 1e-5)]
    pub rms_eps: f64,
    /// RoPE frequency base
    #[config(default = 10000.0)]
    pub rope_theta: f64,
    /// dims rotated per head
    pub rope_dim: usize,
    /// RoPE pairing
    #[config(default = "RopeLayout::Interleaved")]
    pub rope_layout: RopeLayout,
    /// linear RoPE scaling factor (1 = none)
    #[config(default = 1.0)]
    pub rope_linear_scale: f64,
    /// trained context length
    #[config(default = 4096)]
    pub context_length: usize,
    /// Q/K/V projections carry biases (Qwen2)
    #[config(default = false)]
    pub qkv_bias: bool,
    /// the output projection reuses the token embedding
    #[config(default = false)]
    pub tie_embeddings: bool,
    /// Mistral-style sliding-window attention
    #[config(default = "None")]
    pub sliding_window: Option<usize>,
    /// RoPE frequency of pair `i` divided by `rope_freq_factors[i]` (`rope_dim / 2` values; Llama 3's
    /// `rope_freqs` tensor or HF `rope_scaling` of type `llama3`; LongRoPE's long or short factors)
    #[config(default = "None")]
    pub rope_freq_factors: Option<Vec<f32>>,
    /// rotated Q and K values multiplied by this (LongRoPE's attention factor; `None` = 1)
    #[config(default = "None")]
    pub rope_attn_factor: Option<f64>,
    /// YaRN RoPE scaling (Qwen2.5 / Qwen3 past their original context); `None` = none
    #[config(default = "None")]
    pub rope_yarn: Option<Yarn>,
    /// a normalization of Q and K before RoPE (Qwen3); `None` for the other members
    #[config(default = "None")]
    pub qk_norm: Option<QkNorm>,
    /// every block's MLP is a mixture of experts (Qwen3-MoE); `ffn_dim` is then unused
    #[config(default = "None")]
    pub moe: Option<MoeConfig>,
}

/// How Q and K are normalized before RoPE. (An `Option` in [`LlamaConfig`], so records written
/// before the field existed still read: serde fills a missing `Option` with `None`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QkNorm {
    /// an RMSNorm over each head's `head_dim` values, one weight vector for all Q heads and one for
    /// all K heads (Qwen3, llama.cpp's `attn_q_norm` / `attn_k_norm`)
    RmsPerHead,
    /// an RMSNorm over the whole Q projection (`heads × head_dim`) and the whole K projection
    /// (`kv_heads × head_dim`) before they are split into heads (OLMoE)
    RmsFull,
}

impl LlamaConfig {
    /// Checks the shapes fit together.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| {
            Err(ModelError::Config {
                arch: "llama".into(),
                reason,
            })
        };
        check_shape(
            "llama",
            &[
                ("vocab_size", self.vocab_size),
                ("d_model", self.d_model),
                ("n_layers", self.n_layers),
                ("n_heads", self.n_heads),
                ("n_kv_heads", self.n_kv_heads),
                ("head_dim", self.head_dim),
                ("ffn_dim", self.ffn_dim),
                ("context_length", self.context_length),
            ],
            self.n_heads,
            self.n_kv_heads,
        )?;
        if self.rope_dim == 0 || !self.rope_dim.is_multiple_of(2) || self.rope_dim > self.head_dim {
            return bad(format!(
                "rope_dim {} must be even and in 1..={}",
                self.rope_dim, self.head_dim
            ));
        }
        if !(self.rms_eps > 0.0 && self.rms_eps < 1.0) {
            return bad(format!("rms_eps {} out of range", self.rms_eps));
        }
        if !(self.rope_theta > 1.0 && self.rope_theta.is_finite()) {
            return bad(format!("rope_theta {} out of range", self.rope_theta));
        }
        if !(self.rope_linear_scale > 0.0 && self.rope_linear_scale.is_finite()) {
            return bad(format!(
                "rope_linear_scale {} out of range",
                self.rope_linear_scale
            ));
        }
        if let Some(m) = &self.moe {
            m.validate()?;
        }
        if let Some(a) = self.rope_attn_factor
            && !(a > 0.0 && a.is_finite())
        {
            return bad(format!("rope_attn_factor {a} out of range"));
        }
        if let Some(y) = &self.rope_yarn {
            if let Err(e) = y.validate() {
                return bad(e);
            }
            if self.rope_linear_scale != 1.0 {
                return bad("YaRN and linear RoPE scaling together".into());
            }
        }
        if let Some(f) = &self.rope_freq_factors {
            if f.len() != self.rope_dim / 2 {
                return bad(format!(
                    "{} RoPE frequency factors for {} rotation pairs",
                    f.len(),
                    self.rope_dim / 2
                ));
            }
            if let Some(x) = f.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
                return bad(format!(
                    "RoPE frequency factor {x} is not a positive number"
                ));
            }
        }
        Ok(())
    }
}

/// One transformer block.
#[derive(Module, Debug)]
pub struct LlamaBlock<B: InferenceBackend> {
    attn_norm: RmsNorm<B>,
    wq: QLinear<B>,
    wk: QLinear<B>,
    wv: QLinear<B>,
    /// per-head RMSNorms of Q and K (`[head_dim]` each), with [`QkNorm::RmsPerHead`]
    qk_norm: Option<(RmsNorm<B>, RmsNorm<B>)>,
    wo: QLinear<B>,
    ffn_norm: RmsNorm<B>,
    ffn: Ffn<B>,
}

/// A block's feed-forward layer.
// One per block, and the dense variant is the common one: boxing it would add an indirection to
// every step for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Ffn<B: InferenceBackend> {
    /// one SwiGLU MLP
    Dense(DenseMlp<B>),
    /// a mixture of SwiGLU experts ([`crate::moe`])
    Moe(MoeFfn<B>),
}

/// SwiGLU MLP: `down(silu(gate·x) ⊙ up·x)`.
#[derive(Module, Debug)]
pub struct DenseMlp<B: InferenceBackend> {
    gate: QLinear<B>,
    up: QLinear<B>,
    down: QLinear<B>,
}

impl<B: InferenceBackend> Ffn<B> {
    /// `n` `[b, t, d]` (the normed residual) -> `[b, t, d]`.
    fn forward(&self, n: Tensor<B, 3>) -> Tensor<B, 3> {
        match self {
            Self::Dense(m) => m.down.forward(swiglu(n, &m.gate, &m.up)),
            Self::Moe(m) => m.forward(n),
        }
    }
}

/// Blocks `first_layer..first_layer + blocks.len()` of a Llama-family model.
#[derive(Module, Debug)]
pub struct LlamaBlocks<B: InferenceBackend> {
    blocks: Vec<LlamaBlock<B>>,
    #[module(skip)]
    first_layer: usize,
    #[module(skip)]
    config: LlamaConfig,
}

/// A Llama-family model: the embedding and head around its blocks (all of them, or blocks `N..`
/// when the first `N` run elsewhere: [`crate::split`]).
#[derive(Module, Debug)]
pub struct Llama<B: InferenceBackend> {
    ends: Ends<B>,
    blocks: LlamaBlocks<B>,
}

impl<B: InferenceBackend> LlamaBlocks<B> {
    /// Loads blocks `layers` (clamped to the model's depth; at least one) by module path:
    /// `layers.{i}.{attn_norm, attn.wq, attn.wk, attn.wv, attn.wo, ffn_norm, mlp.gate, mlp.up,
    /// mlp.down}`, and `layers.{i}.attn.{q_norm, k_norm}` with [`LlamaConfig::qk_norm`].
    pub fn load(
        config: LlamaConfig,
        src: &mut dyn WeightSource<B>,
        layers: Range<usize>,
    ) -> Result<Self> {
        config.validate()?;
        let layers = block_range("llama", config.n_layers, layers)?;
        if layers.is_empty() {
            return Err(ModelError::Config {
                arch: "llama".into(),
                reason: format!("no blocks in {layers:?}"),
            });
        }
        Self::load_range(config, src, layers)
    }

    fn load_range(
        config: LlamaConfig,
        src: &mut dyn WeightSource<B>,
        layers: Range<usize>,
    ) -> Result<Self> {
        let c = &config;
        let (d, hd) = (c.d_model, c.head_dim);
        let mut blocks = Vec::with_capacity(layers.len());
        for i in layers.clone() {
            let p = |s: &str| format!("layers.{i}.{s}");
            // per head: [hd] weights; full width: [h·hd] and [kvh·hd]
            let (q_len, k_len) = match c.qk_norm {
                Some(QkNorm::RmsFull) => (c.n_heads * hd, c.n_kv_heads * hd),
                _ => (hd, hd),
            };
            let qk_norm = match c.qk_norm {
                Some(_) => Some((
                    RmsNorm::new(src.vector(&p("attn.q_norm"), q_len)?, c.rms_eps),
                    RmsNorm::new(src.vector(&p("attn.k_norm"), k_len)?, c.rms_eps),
                )),
                None => None,
            };
            let ffn = match &c.moe {
                Some(moe) => Ffn::Moe(MoeFfn::load(moe, src, &p("moe"), d)?),
                None => Ffn::Dense(DenseMlp {
                    gate: src.linear(&p("mlp.gate"), c.ffn_dim, d, false)?,
                    up: src.linear(&p("mlp.up"), c.ffn_dim, d, false)?,
                    down: src.linear(&p("mlp.down"), d, c.ffn_dim, false)?,
                }),
            };
            blocks.push(LlamaBlock {
                attn_norm: RmsNorm::new(src.vector(&p("attn_norm"), d)?, c.rms_eps),
                wq: src.linear(&p("attn.wq"), c.n_heads * hd, d, c.qkv_bias)?,
                wk: src.linear(&p("attn.wk"), c.n_kv_heads * hd, d, c.qkv_bias)?,
                wv: src.linear(&p("attn.wv"), c.n_kv_heads * hd, d, c.qkv_bias)?,
                qk_norm,
                wo: src.linear(&p("attn.wo"), d, c.n_heads * hd, false)?,
                ffn_norm: RmsNorm::new(src.vector(&p("ffn_norm"), d)?, c.rms_eps),
                ffn,
            });
        }
        Ok(Self {
            blocks,
            first_layer: layers.start,
            config,
        })
    }

    fn rope(&self) -> Rope<'_> {
        Rope {
            n_rot: self.config.rope_dim,
            theta: self.config.rope_theta,
            style: self.config.rope_layout.into(),
            linear_scale: self.config.rope_linear_scale,
            freq_factors: self.config.rope_freq_factors.as_deref(),
            attn_factor: self.config.rope_attn_factor.unwrap_or(1.0) as f32,
            yarn: self.config.rope_yarn,
        }
    }
}

impl<B: InferenceBackend> Blocks<B> for LlamaBlocks<B> {
    fn run(&self, mut x: Tensor<B, 3>, cache: &mut dyn AttentionCache<B>) -> Tensor<B, 3> {
        let c = &self.config;
        let t = x.dims()[1];
        let (h, kvh, hd) = (c.n_heads, c.n_kv_heads, c.head_dim);
        let rope = self
            .rope()
            .angles::<B>(&cache.positions(t), hd, &x.device());
        let params = AttentionParams {
            scale: 1.0 / (hd as f32).sqrt(),
            sliding_window: c.sliding_window,
            softcap: None,
        };
        // x: [b, t, d], the residual stream; each block's last product is added to it by the
        // next block's first norm (the add fused with the norm).
        let mut pending = None;
        for (i, blk) in self.blocks.iter().enumerate() {
            let (xs, n) = blk.attn_norm.forward_add(x, pending.take());
            // q [b, h, t, hd]; k, v [b, kvh, t, hd]
            let [q, k, v] = project(n, [&blk.wq, &blk.wk, &blk.wv]);
            let (q, k) = match (&blk.qk_norm, c.qk_norm) {
                (Some((qn, kn)), Some(QkNorm::RmsFull)) => {
                    let (q, k) = (qn.forward(q), kn.forward(k));
                    rope.apply_pair(heads(q, h, hd), heads(k, kvh, hd))
                }
                (Some((qn, kn)), _) => {
                    rope.apply_pair_normed(heads(q, h, hd), heads(k, kvh, hd), qn, kn)
                }
                (None, _) => rope.apply_pair(heads(q, h, hd), heads(k, kvh, hd)),
            };
            let (q, k) = (q.swap_dims(1, 2), k.swap_dims(1, 2));
            let v = split_heads(v, kvh, hd);
            let a = merge_heads(cache.attend(i, q, k, v, &params));
            let (xs, n) = blk.ffn_norm.forward_add(xs, Some(blk.wo.forward(a)));
            x = xs;
            pending = Some(blk.ffn.forward(n));
        }
        match pending {
            Some(p) => x + p,
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

impl<B: InferenceBackend> Llama<B> {
    /// Loads the whole model by module path: `embed`, `norm`, `lm_head` (absent => tied), and the
    /// blocks ([`LlamaBlocks::load`]).
    pub fn load(config: LlamaConfig, src: &mut dyn WeightSource<B>) -> Result<Self> {
        Self::load_layers(config, src, 0..usize::MAX)
    }

    /// Loads the ends and blocks `layers` only (clamped to the model's depth; may be empty when
    /// every block runs elsewhere).
    pub fn load_layers(
        config: LlamaConfig,
        src: &mut dyn WeightSource<B>,
        layers: Range<usize>,
    ) -> Result<Self> {
        config.validate()?;
        let layers = block_range("llama", config.n_layers, layers)?;
        let c = &config;
        let ends = Ends::load(src, c.vocab_size, c.d_model, c.rms_eps, !c.tie_embeddings)?;
        let blocks = LlamaBlocks::load_range(config, src, layers)?;
        Ok(Self { ends, blocks })
    }

    /// The configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.blocks.config
    }
}

impl<B: InferenceBackend> CausalLm<B> for Llama<B> {
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

impl<B: InferenceBackend> LanguageModel<B> for Llama<B> {
    fn arch(&self) -> &'static str {
        match (&self.config().moe, &self.config().qk_norm) {
            (Some(_), Some(QkNorm::RmsFull)) => "olmoe",
            (Some(_), Some(QkNorm::RmsPerHead)) => "qwen3moe",
            (Some(_), None) => "llama-moe",
            (None, Some(_)) => "qwen3",
            _ => "llama",
        }
    }

    fn hidden_states(
        &self,
        tokens: Tensor<B, 2, Int>,
        cache: &mut dyn AttentionCache<B>,
    ) -> Option<Tensor<B, 3>> {
        Some(decoder_hidden_states(self, tokens, cache, &self.ends.norm))
    }
}

impl<B: InferenceBackend> Decoder<B> for Llama<B> {
    fn embed(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.ends.embed.forward(tokens)
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

    fn smollm2() -> LlamaConfig {
        LlamaConfig::new(49152, 576, 30, 9, 3, 64, 1536, 64)
    }

    #[test]
    fn configs_written_before_the_newer_switches_still_read() {
        // A record's config.json from before `rope_freq_factors` and `qk_norm` existed.
        let mut v = serde_json::to_value(smollm2()).expect("to json");
        let obj = v.as_object_mut().expect("object");
        obj.remove("rope_freq_factors");
        obj.remove("qk_norm");
        obj.remove("rope_attn_factor");
        obj.remove("rope_yarn");
        obj.remove("moe");
        let c: LlamaConfig = serde_json::from_value(v).expect("reads");
        assert_eq!(c, smollm2());
    }

    #[test]
    fn rope_freq_factors_must_fit_the_rotated_dims() {
        let with = |f: Vec<f32>| LlamaConfig {
            rope_freq_factors: Some(f),
            ..smollm2()
        };
        assert!(with(vec![1.0; 32]).validate().is_ok());
        let e = with(vec![1.0; 31]).validate().unwrap_err().to_string();
        assert!(e.contains("31 RoPE frequency factors"), "{e}");
        let mut bad = vec![1.0; 32];
        bad[3] = 0.0;
        let e = with(bad).validate().unwrap_err().to_string();
        assert!(e.contains("frequency factor 0"), "{e}");
    }

    #[test]
    fn valid_config_passes_and_bad_ones_are_named() {
        assert!(smollm2().validate().is_ok());
        let err = |c: LlamaConfig| c.validate().unwrap_err().to_string();
        assert!(
            err(LlamaConfig {
                n_kv_heads: 4,
                ..smollm2()
            })
            .contains("multiple of n_kv_heads")
        );
        assert!(
            err(LlamaConfig {
                ffn_dim: 0,
                ..smollm2()
            })
            .contains("ffn_dim is 0")
        );
        assert!(
            err(LlamaConfig {
                rope_dim: 65,
                ..smollm2()
            })
            .contains("rope_dim")
        );
        assert!(
            err(LlamaConfig {
                n_kv_heads: 0,
                ..smollm2()
            })
            .contains("n_kv_heads")
        );
        assert!(
            err(LlamaConfig {
                rms_eps: f64::NAN,
                ..smollm2()
            })
            .contains("rms_eps")
        );
    }
}
