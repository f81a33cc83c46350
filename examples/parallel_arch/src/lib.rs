//! A GPT-NeoX-style decoder, defined outside Cinder's crates and registered with its loader.
//!
//! References: Black et al., 2022, "GPT-NeoX-20B"; llama.cpp's `llm_build_neox` for the GGUF
//! conventions (architecture `gptneox`, fused QKV stored as Q, K, V rows). Each block runs
//! attention and the MLP side by side on the same input, each behind its own LayerNorm (with
//! bias), and adds both to the residual: `x + attn(ln1(x)) + mlp(ln2(x))`. Rotary embedding
//! (NeoX pairing) covers the first `n_rot` dims of each head; the MLP is `down(gelu(up(x)))` with
//! biases; a final LayerNorm and a separate output head end the model.
//!
//! Everything here is Cinder's public API: the weights come through a [`TableWeights`] over the
//! file's tensors, the projections are [`QLinear`]s (quantized or not, as stored), attention goes
//! through the paged KV cache ([`AttentionCache::attend`]), and [`register`] makes `gptneox` files
//! load through `cinder::Llm` like a built-in architecture's.
//!
//! ```no_run
//! cinder_example_neox::register();
//! let llm = cinder::Llm::load("neox-tiny.gguf")?;
//! # Ok::<(), cinder::Error>(())
//! ```

use burn::tensor::{Int, Tensor};
use cinder::backends::InferenceBackend;
use cinder::gguf::GgufFile;
use cinder::importer::arch::NameTable;
use cinder::importer::registry::{Architecture, ArchitectureConfig};
use cinder::importer::{ImportError, TableWeights, TensorStore};
use cinder::models::decoder::decoder_forward;
use cinder::models::layers::{Embedding, Rope, RopeStyle, heads, merge_heads, split_heads};
use cinder::models::{AnyModel, Blocks, Decoder, LanguageModel, WeightSource};
use cinder::runtime::attention::{AttentionCache, AttentionParams};
use cinder::runtime::model::{CausalLm, Logits};
use cinder::runtime::quant::QLinear;
use serde::{Deserialize, Serialize};

/// Module path -> GGUF tensor name (`{i}`: block index), llama.cpp's names for `gptneox`.
const NAMES: &[NameTable] = &[&[
    ("embed", "token_embd"),
    ("norm", "output_norm"),
    ("lm_head", "output"),
    ("layers.{i}.attn_norm", "blk.{i}.attn_norm"),
    ("layers.{i}.attn.wqkv", "blk.{i}.attn_qkv"),
    ("layers.{i}.attn.wo", "blk.{i}.attn_output"),
    ("layers.{i}.ffn_norm", "blk.{i}.ffn_norm"),
    ("layers.{i}.mlp.up", "blk.{i}.ffn_up"),
    ("layers.{i}.mlp.down", "blk.{i}.ffn_down"),
]];

/// Hyper-parameters, from the GGUF's `gptneox.*` keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeoxConfig {
    /// embedding rows
    pub vocab_size: usize,
    /// model width
    pub d_model: usize,
    /// transformer blocks
    pub n_layers: usize,
    /// attention heads (as many K/V heads)
    pub n_heads: usize,
    /// rotated dims per head
    pub n_rot: usize,
    /// MLP width
    pub ffn: usize,
    /// LayerNorm epsilon
    pub eps: f64,
    /// RoPE base
    pub theta: f64,
    /// trained context
    pub context_length: usize,
}

impl ArchitectureConfig for NeoxConfig {
    fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    fn n_layers(&self) -> usize {
        self.n_layers
    }
}

impl NeoxConfig {
    fn head_dim(&self) -> usize {
        self.d_model / self.n_heads
    }
}

/// LayerNorm with bias over the last axis: `(x - mean) / sqrt(var + eps) * w + b`.
#[derive(Debug)]
struct LayerNorm<B: InferenceBackend> {
    /// `[d]`
    weight: Tensor<B, 1>,
    /// `[d]`
    bias: Tensor<B, 1>,
    eps: f64,
}

impl<B: InferenceBackend> LayerNorm<B> {
    fn load(
        src: &mut dyn WeightSource<B>,
        path: &str,
        d: usize,
        eps: f64,
    ) -> cinder::models::Result<Self> {
        Ok(Self {
            weight: src.vector(path, d)?,
            bias: src.bias_vector(path, d)?,
            eps,
        })
    }

    /// `x` `[b, t, d]` -> same shape.
    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let centred = x.clone() - x.mean_dim(2);
        let var = centred.clone().powi_scalar(2).mean_dim(2);
        let w = self.weight.clone().unsqueeze::<3>();
        let b = self.bias.clone().unsqueeze::<3>();
        centred / (var + self.eps).sqrt() * w + b
    }
}

/// GELU, tanh form: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
fn gelu<B: InferenceBackend>(x: Tensor<B, 3>) -> Tensor<B, 3> {
    let inner =
        (x.clone() + x.clone().powi_scalar(3) * 0.044715) * (2.0 / std::f64::consts::PI).sqrt();
    x * (inner.tanh() + 1.0) * 0.5
}

#[derive(Debug)]
struct Block<B: InferenceBackend> {
    ln_attn: LayerNorm<B>,
    /// `[3d, d]`: Q, K, V rows
    wqkv: QLinear<B>,
    wo: QLinear<B>,
    ln_mlp: LayerNorm<B>,
    up: QLinear<B>,
    down: QLinear<B>,
}

/// Every block of the model.
#[derive(Debug)]
pub struct NeoxBlocks<B: InferenceBackend> {
    blocks: Vec<Block<B>>,
    config: NeoxConfig,
}

impl<B: InferenceBackend> NeoxBlocks<B> {
    fn load(c: &NeoxConfig, src: &mut dyn WeightSource<B>) -> cinder::models::Result<Self> {
        let d = c.d_model;
        let blocks = (0..c.n_layers)
            .map(|i| {
                let p = |n: &str| format!("layers.{i}.{n}");
                Ok(Block {
                    ln_attn: LayerNorm::load(src, &p("attn_norm"), d, c.eps)?,
                    wqkv: src.linear(&p("attn.wqkv"), 3 * d, d, true)?,
                    wo: src.linear(&p("attn.wo"), d, d, true)?,
                    ln_mlp: LayerNorm::load(src, &p("ffn_norm"), d, c.eps)?,
                    up: src.linear(&p("mlp.up"), c.ffn, d, true)?,
                    down: src.linear(&p("mlp.down"), d, c.ffn, true)?,
                })
            })
            .collect::<cinder::models::Result<_>>()?;
        Ok(Self {
            blocks,
            config: c.clone(),
        })
    }
}

impl<B: InferenceBackend> Blocks<B> for NeoxBlocks<B> {
    fn run(&self, mut x: Tensor<B, 3>, cache: &mut dyn AttentionCache<B>) -> Tensor<B, 3> {
        let c = &self.config;
        let (t, d, h, hd) = (x.dims()[1], c.d_model, c.n_heads, c.head_dim());
        let rope = Rope {
            n_rot: c.n_rot,
            theta: c.theta,
            style: RopeStyle::Neox,
            linear_scale: 1.0,
            freq_factors: None,
            attn_factor: 1.0,
            yarn: None,
        }
        .angles::<B>(&cache.positions(t), hd, &x.device());
        let params = AttentionParams {
            scale: 1.0 / (hd as f32).sqrt(),
            sliding_window: None,
            softcap: None,
        };
        for (i, blk) in self.blocks.iter().enumerate() {
            // qkv [b, t, 3d] -> q, k [b, h, t, hd] after RoPE; v [b, h, t, hd]
            let qkv = blk.wqkv.forward(blk.ln_attn.forward(x.clone()));
            let (q, k, v) = (
                qkv.clone().narrow(2, 0, d),
                qkv.clone().narrow(2, d, d),
                qkv.narrow(2, 2 * d, d),
            );
            let (q, k) = rope.apply_pair(heads(q, h, hd), heads(k, h, hd));
            let (q, k) = (q.swap_dims(1, 2), k.swap_dims(1, 2));
            let a = merge_heads(cache.attend(i, q, k, split_heads(v, h, hd), &params));
            let attn = blk.wo.forward(a);
            let mlp = blk
                .down
                .forward(gelu(blk.up.forward(blk.ln_mlp.forward(x.clone()))));
            // The parallel residual: both branches read the same x.
            x = x + attn + mlp;
        }
        x
    }

    fn len(&self) -> usize {
        self.blocks.len()
    }

    fn first_layer(&self) -> usize {
        0
    }

    fn kv_dims(&self) -> (usize, usize) {
        (self.config.n_heads, self.config.head_dim())
    }
}

/// The whole model: embedding, blocks, final LayerNorm and head.
#[derive(Debug)]
pub struct Neox<B: InferenceBackend> {
    embed: Embedding<B>,
    blocks: NeoxBlocks<B>,
    norm: LayerNorm<B>,
    /// `[vocab, d]`
    head: QLinear<B>,
}

impl<B: InferenceBackend> Neox<B> {
    /// Loads every weight by module path (the name table maps them to the file's names).
    pub fn load(c: &NeoxConfig, src: &mut dyn WeightSource<B>) -> cinder::models::Result<Self> {
        Ok(Self {
            embed: Embedding::new(src.linear("embed", c.vocab_size, c.d_model, false)?),
            blocks: NeoxBlocks::load(c, src)?,
            norm: LayerNorm::load(src, "norm", c.d_model, c.eps)?,
            head: src.linear("lm_head", c.vocab_size, c.d_model, false)?,
        })
    }
}

impl<B: InferenceBackend> CausalLm<B> for Neox<B> {
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
        self.blocks.config.vocab_size
    }
    fn context_length(&self) -> usize {
        self.blocks.config.context_length
    }
    fn device(&self) -> B::Device {
        self.norm.weight.device()
    }
}

impl<B: InferenceBackend> LanguageModel<B> for Neox<B> {
    fn arch(&self) -> &'static str {
        "gptneox"
    }
}

impl<B: InferenceBackend> Decoder<B> for Neox<B> {
    fn embed(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.embed.forward(tokens)
    }

    fn blocks(&self) -> &dyn Blocks<B> {
        &self.blocks
    }

    /// `x` `[b, t, d]` -> `[b, n, vocab]` for the positions `logits` asks for.
    fn output(&self, x: Tensor<B, 3>, logits: Logits) -> Tensor<B, 3> {
        let [b, t, d] = x.dims();
        let x = match &logits {
            Logits::Rows(rows) => {
                let ids: Vec<i32> = rows.iter().map(|&r| r as i32).collect();
                let n = ids.len();
                let idx = Tensor::<B, 1, Int>::from_data(
                    burn::tensor::TensorData::new(ids, [n]),
                    &x.device(),
                );
                x.select(1, idx)
            }
            l => {
                let n = l.count(t);
                x.narrow(1, t - n, n)
            }
        };
        let n = x.dims()[1];
        let y = self.head.forward(self.norm.forward(x).reshape([b * n, d]));
        y.reshape([b, n, self.blocks.config.vocab_size])
    }
}

/// The architecture as the registry takes it.
pub struct NeoxArch;

fn key(f: &GgufFile, k: &str) -> cinder::importer::Result<u64> {
    Ok(f.get_u64(&format!("gptneox.{k}"))?)
}

impl Architecture for NeoxArch {
    type Config = NeoxConfig;

    fn name(&self) -> &'static str {
        "gptneox"
    }

    fn gguf_architectures(&self) -> &'static [&'static str] {
        &["gptneox"]
    }

    fn config_from_gguf(&self, f: &GgufFile) -> cinder::importer::Result<NeoxConfig> {
        let d = key(f, "embedding_length")? as usize;
        let n_heads = key(f, "attention.head_count")? as usize;
        let c = NeoxConfig {
            vocab_size: cinder::importer::arch::embedding_rows(f)?,
            d_model: d,
            n_layers: key(f, "block_count")? as usize,
            n_heads,
            n_rot: key(f, "rope.dimension_count")? as usize,
            ffn: key(f, "feed_forward_length")? as usize,
            eps: f
                .opt_f64("gptneox.attention.layer_norm_epsilon")?
                .unwrap_or(1e-5),
            theta: f.opt_f64("gptneox.rope.freq_base")?.unwrap_or(10000.0),
            context_length: key(f, "context_length")? as usize,
        };
        if n_heads == 0
            || !d.is_multiple_of(n_heads)
            || c.n_rot > d / n_heads
            || !c.n_rot.is_multiple_of(2)
        {
            return Err(ImportError::Config(format!(
                "gptneox: {n_heads} heads of a {d}-wide model with {} rotated dims do not fit",
                c.n_rot
            )));
        }
        if f.get("gptneox.use_parallel_residual")
            .and_then(|v| v.as_bool())
            == Some(false)
        {
            return Err(ImportError::Unsupported(
                "gptneox with use_parallel_residual = false (sequential blocks)".into(),
            ));
        }
        Ok(c)
    }

    fn build<B: InferenceBackend>(
        &self,
        cfg: &NeoxConfig,
        store: &dyn TensorStore,
        device: &B::Device,
    ) -> cinder::importer::Result<AnyModel<B>> {
        let mut src = TableWeights::<B, _>::new(store, NAMES, device.clone());
        Ok(AnyModel::new(Neox::load(cfg, &mut src)?))
    }
}

/// Registers the architecture: `gptneox` GGUF files load from here on.
pub fn register() {
    cinder::importer::register(NeoxArch);
}
