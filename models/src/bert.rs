//! BERT-family encoder, as sentence-embedding models use it (all-MiniLM-L6-v2, paraphrase-MiniLM).
//!
//! References: Devlin et al., 2019, "BERT: Pre-training of Deep Bidirectional Transformers"; Wang et
//! al., 2020, "MiniLM"; Reimers & Gurevych, 2019, "Sentence-BERT" (mean pooling). Post-norm blocks:
//! `x = LN(x + Attn(x))`, `x = LN(x + W2·gelu(W1·x))`, learned absolute positions, token-type
//! embeddings, bidirectional attention with a padding mask, biases everywhere.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::tensor::activation::relu;
use burn::tensor::{Int, Tensor, TensorData};
use cinder_runtime::InferenceBackend;
use cinder_runtime::quant::QLinear;
use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result, check_shape};
use crate::loader::WeightSource;

/// The feed-forward activation (`hidden_act` in an HF config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BertActivation {
    /// exact GELU, `x·Φ(x)` (erf): HF `gelu`
    Gelu,
    /// tanh-approximated GELU: HF `gelu_new` / `gelu_pytorch_tanh`
    GeluTanh,
    /// HF `relu`
    Relu,
}

impl BertActivation {
    /// Parses an HF `hidden_act` value.
    pub fn from_hf(name: &str) -> Result<Self> {
        match name {
            "gelu" => Ok(Self::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Self::GeluTanh),
            "relu" => Ok(Self::Relu),
            other => Err(ModelError::Config {
                arch: "bert".into(),
                reason: format!("hidden_act {other:?} is not supported (gelu, gelu_new, relu)"),
            }),
        }
    }
}

/// Hyper-parameters of a BERT encoder (the HF `config.json` fields of the same meaning).
#[derive(Config, Debug, PartialEq)]
pub struct BertConfig {
    /// vocabulary size
    pub vocab_size: usize,
    /// model width
    pub hidden_size: usize,
    /// encoder blocks
    pub num_layers: usize,
    /// attention heads
    pub num_heads: usize,
    /// feed-forward width
    pub intermediate_size: usize,
    /// learned positions (the longest input)
    pub max_position_embeddings: usize,
    /// token-type (segment) embeddings
    #[config(default = 2)]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon
    #[config(default = 1e-12)]
    pub layer_norm_eps: f64,
    /// feed-forward activation
    #[config(default = "BertActivation::Gelu")]
    pub activation: BertActivation,
}

/// The subset of an HF BERT `config.json` Cinder reads.
#[derive(Deserialize)]
struct HfBertConfig {
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    #[serde(default = "two")]
    type_vocab_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default)]
    position_embedding_type: Option<String>,
}

fn two() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".into()
}

impl BertConfig {
    /// Reads an HF `config.json` of a BERT-family model (`bert`, or a model type with BERT's
    /// layout such as MiniLM exports).
    pub fn from_hf_json(text: &str) -> Result<Self> {
        let bad = |reason: String| ModelError::Config {
            arch: "bert".into(),
            reason,
        };
        let hf: HfBertConfig =
            serde_json::from_str(text).map_err(|e| bad(format!("config.json: {e}")))?;
        if let Some(t) = hf.model_type.as_deref()
            && !matches!(t, "bert" | "minilm")
        {
            return Err(bad(format!(
                "model_type {t:?} is not a BERT encoder (supported: bert)"
            )));
        }
        if let Some(p) = hf.position_embedding_type.as_deref()
            && p != "absolute"
        {
            return Err(bad(format!(
                "position_embedding_type {p:?} is not supported (absolute)"
            )));
        }
        let c = BertConfig::new(
            hf.vocab_size,
            hf.hidden_size,
            hf.num_hidden_layers,
            hf.num_attention_heads,
            hf.intermediate_size,
            hf.max_position_embeddings,
        )
        .with_type_vocab_size(hf.type_vocab_size)
        .with_layer_norm_eps(hf.layer_norm_eps)
        .with_activation(BertActivation::from_hf(&hf.hidden_act)?);
        c.validate()?;
        Ok(c)
    }

    /// Checks sizes are non-zero and the width splits into the heads.
    pub fn validate(&self) -> Result<()> {
        check_shape(
            "bert",
            &[
                ("vocab_size", self.vocab_size),
                ("hidden_size", self.hidden_size),
                ("num_layers", self.num_layers),
                ("num_heads", self.num_heads),
                ("intermediate_size", self.intermediate_size),
                ("max_position_embeddings", self.max_position_embeddings),
                ("type_vocab_size", self.type_vocab_size),
            ],
            self.num_heads,
            1,
        )?;
        if !self.hidden_size.is_multiple_of(self.num_heads) {
            return Err(ModelError::Config {
                arch: "bert".into(),
                reason: format!(
                    "hidden_size {} is not a multiple of num_heads {}",
                    self.hidden_size, self.num_heads
                ),
            });
        }
        Ok(())
    }

    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }
}

/// LayerNorm with a bias: `(x - mean) / sqrt(var + eps) * w + b` over the last axis.
#[derive(Module, Debug)]
pub struct LayerNorm<B: InferenceBackend> {
    /// `[d]`
    pub weight: Param<Tensor<B, 1>>,
    /// `[d]`
    pub bias: Param<Tensor<B, 1>>,
    /// epsilon inside the square root
    pub eps: f64,
}

impl<B: InferenceBackend> LayerNorm<B> {
    fn load(w: &mut impl WeightSource<B>, path: &str, d: usize, eps: f64) -> Result<Self> {
        Ok(Self {
            weight: Param::from_tensor(w.vector(path, d)?),
            bias: Param::from_tensor(w.bias_vector(path, d)?),
            eps,
        })
    }

    /// `x` `[..., d]` -> same shape.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        B::encoder_layer_norm(x, self.weight.val(), self.bias.val(), self.eps)
    }
}

/// One post-norm encoder block.
#[derive(Module, Debug)]
pub struct BertLayer<B: InferenceBackend> {
    q: QLinear<B>,
    k: QLinear<B>,
    v: QLinear<B>,
    o: QLinear<B>,
    attn_norm: LayerNorm<B>,
    up: QLinear<B>,
    down: QLinear<B>,
    ffn_norm: LayerNorm<B>,
}

impl<B: InferenceBackend> BertLayer<B> {
    /// Everything after attention: `x = LN(x + O·ctx)`, then `x = LN(x + W2·act(W1·x))`. `x`,
    /// `ctx` `[..., d]`, padded `[b, t, d]` or packed `[n, d]`.
    fn after_attention<const D: usize>(
        &self,
        x: Tensor<B, D>,
        ctx: Tensor<B, D>,
        activation: BertActivation,
    ) -> Tensor<B, D> {
        let x = self.attn_norm.forward(x + self.o.forward(ctx));
        let h = self.up.forward(x.clone());
        let h = match activation {
            BertActivation::Gelu => B::encoder_gelu(h),
            BertActivation::GeluTanh => gelu_tanh(h),
            BertActivation::Relu => relu(h),
        };
        self.ffn_norm.forward(x + self.down.forward(h))
    }
}

/// A BERT encoder: embeddings and blocks (no pooler; sentence models pool the hidden states).
#[derive(Module, Debug)]
pub struct Bert<B: InferenceBackend> {
    word: QLinear<B>,
    position: QLinear<B>,
    token_type: QLinear<B>,
    emb_norm: LayerNorm<B>,
    layers: Vec<BertLayer<B>>,
    #[module(skip)]
    config: BertConfig,
}

impl<B: InferenceBackend> Bert<B> {
    /// Loads the weights at the module paths `embeddings.{word,position,token_type,norm}` and
    /// `layers.{i}.{attn.q,attn.k,attn.v,attn.o,attn_norm,ffn.up,ffn.down,ffn_norm}`.
    pub fn load(config: BertConfig, w: &mut impl WeightSource<B>) -> Result<Self> {
        config.validate()?;
        let (d, ff, eps) = (
            config.hidden_size,
            config.intermediate_size,
            config.layer_norm_eps,
        );
        let word = w.linear("embeddings.word", config.vocab_size, d, false)?;
        let position = w.linear(
            "embeddings.position",
            config.max_position_embeddings,
            d,
            false,
        )?;
        let token_type = w.linear("embeddings.token_type", config.type_vocab_size, d, false)?;
        let emb_norm = LayerNorm::load(w, "embeddings.norm", d, eps)?;
        let layers = (0..config.num_layers)
            .map(|i| {
                let p = |s: &str| format!("layers.{i}.{s}");
                Ok(BertLayer {
                    q: w.linear(&p("attn.q"), d, d, true)?,
                    k: w.linear(&p("attn.k"), d, d, true)?,
                    v: w.linear(&p("attn.v"), d, d, true)?,
                    o: w.linear(&p("attn.o"), d, d, true)?,
                    attn_norm: LayerNorm::load(w, &p("attn_norm"), d, eps)?,
                    up: w.linear(&p("ffn.up"), ff, d, true)?,
                    down: w.linear(&p("ffn.down"), d, ff, true)?,
                    ffn_norm: LayerNorm::load(w, &p("ffn_norm"), d, eps)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            word,
            position,
            token_type,
            emb_norm,
            layers,
            config,
        })
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// Hidden states of every position.
    ///
    /// `ids`, `type_ids` `[b, t]` (t ≤ `max_position_embeddings`, padding on the right), `mask`
    /// `[b, t]` (1 for tokens, 0 for padding) -> `[b, t, hidden]`. Padding positions attend to
    /// nothing that matters: their keys get a large negative bias, so real tokens never see them.
    pub fn forward(
        &self,
        ids: Tensor<B, 2, Int>,
        type_ids: Tensor<B, 2, Int>,
        mask: Tensor<B, 2>,
    ) -> Tensor<B, 3> {
        let [b, t] = ids.dims();
        let (d, heads) = (self.config.hidden_size, self.config.num_heads);
        let device = ids.device();
        let rows = |table: &QLinear<B>, ids: Tensor<B, 2, Int>| {
            table.rows(ids.reshape([b * t])).reshape([b, t, d])
        };
        let positions = Tensor::<B, 1, Int>::arange(0..t as i64, &device)
            .unsqueeze::<2>()
            .expand([b, t]);
        let x = rows(&self.word, ids)
            + rows(&self.position, positions)
            + rows(&self.token_type, type_ids);
        let mut x = self.emb_norm.forward(x);
        for l in &self.layers {
            // [b, t, heads·hd] each; padded keys get no attention weight (HF adds the dtype's
            // minimum to their scores: the same weights after the softmax).
            let ctx = B::encoder_attention(
                l.q.forward(x.clone()),
                l.k.forward(x.clone()),
                l.v.forward(x.clone()),
                mask.clone(),
                heads,
            );
            x = l.after_attention(x, ctx, self.config.activation);
        }
        x
    }

    /// [`Bert::forward`] on a batch packed without padding: the sequences' tokens back to back.
    ///
    /// `ids`, `type_ids` `[n]`, `lengths` the sequences' lengths in order (each in
    /// `1..=max_position_embeddings`, summing to `n`) -> `[n, hidden]`. Every per-token layer
    /// (projections, feed-forward, norms) runs on the `n` real tokens only, and attention stays
    /// within each sequence ([`EncoderOps::encoder_attention_packed`](cinder_runtime::InferenceBackend)). Same values as the
    /// padded form's real rows.
    pub fn forward_packed(
        &self,
        ids: Tensor<B, 1, Int>,
        type_ids: Tensor<B, 1, Int>,
        lengths: &[usize],
    ) -> Tensor<B, 2> {
        let [n] = ids.dims();
        let heads = self.config.num_heads;
        let device = ids.device();
        // each token's position within its own sequence
        let positions: Vec<i64> = lengths.iter().flat_map(|&l| 0..l as i64).collect();
        assert_eq!(
            positions.len(),
            n,
            "forward_packed: lengths do not sum to the tokens"
        );
        let positions = Tensor::<B, 1, Int>::from_data(TensorData::new(positions, [n]), &device);
        // [n, d]
        let x =
            self.word.rows(ids) + self.position.rows(positions) + self.token_type.rows(type_ids);
        let mut x = self.emb_norm.forward(x);
        for l in &self.layers {
            // [n, heads·hd] each
            let ctx = B::encoder_attention_packed(
                l.q.forward(x.clone()),
                l.k.forward(x.clone()),
                l.v.forward(x.clone()),
                lengths,
                heads,
            );
            x = l.after_attention(x, ctx, self.config.activation);
        }
        x
    }
}

/// GELU, tanh approximation, in plain f32: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
fn gelu_tanh<B: InferenceBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let inner = x
        .clone()
        .mul(
            x.clone()
                .powi_scalar(2)
                .mul_scalar(0.044_715)
                .add_scalar(1.0),
        )
        .mul_scalar(SQRT_2_OVER_PI);
    x.mul_scalar(0.5) * inner.tanh().add_scalar(1.0)
}
