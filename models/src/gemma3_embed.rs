//! EmbeddingGemma: a [`Gemma3`] stack read as an encoder — sentence-transformers' recipe of a Gemma 3
//! transformer, mean pooling, dense projections and L2 normalization.
//!
//! What differs from the generative Gemma 3: attention is bidirectional (Hugging Face's
//! `use_bidirectional_attention`): the global layers see the whole text, the sliding-window layers
//! the tokens at most `window / 2` positions away on either side (EmbeddingGemma: 256)
//! ([`cinder_runtime::attention::BidirectionalAttention`]); the final normed hidden states are
//! pooled, then passed through the folder's `Dense` modules (EmbeddingGemma: 768 → 3072 → 768, no
//! bias, identity activation).
//!
//! A request's texts run packed, as the BERT embedder's do: up to [`Gemma3Embedder::max_batch`]
//! consecutive texts (and [`PACK_TOKENS`] tokens) go back to back through one forward, each at its
//! own positions and attending only within itself, so every per-token product runs on many rows at
//! once and no padding is computed. A text's vector does not depend on the others of its pack
//! beyond summation order (tested: equal to the text alone).

use burn::tensor::{Int, Tensor, TensorData};
use cinder_runtime::InferenceBackend;
use cinder_runtime::attention::{BidirectionalAttention, ContiguousKvCache};
use cinder_runtime::model::CausalLm;
use cinder_tokenizer::Tokenizer;

use crate::decoder::LanguageModel;
use crate::embed::{Pooling, check_texts, input_err};
use crate::error::{ModelError, Result};
use crate::gemma3::Gemma3;

/// The most tokens one packed forward holds (a single text may be as long as the model allows).
pub const PACK_TOKENS: usize = 2048;

/// The activation after a sentence-transformers `Dense` module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenseActivation {
    /// `torch.nn.Identity`
    Identity,
    /// `torch.nn.Tanh` (the module's default)
    Tanh,
}

/// One sentence-transformers `Dense` module: `y = act(W x + b)`.
#[derive(Debug)]
pub struct Dense<B: InferenceBackend> {
    /// `[in, out]` (transposed from the checkpoint's `[out, in]`, so a row vector multiplies it)
    weight: Tensor<B, 2>,
    /// `[1, out]`
    bias: Option<Tensor<B, 2>>,
    activation: DenseActivation,
}

impl<B: InferenceBackend> Dense<B> {
    /// A module from its checkpoint weight (`[out, in]`, row-major) and optional bias (`[out]`).
    pub fn new(
        weight: Vec<f32>,
        out_features: usize,
        in_features: usize,
        bias: Option<Vec<f32>>,
        activation: DenseActivation,
        device: &B::Device,
    ) -> Result<Self> {
        if weight.len() != out_features * in_features
            || bias.as_ref().is_some_and(|b| b.len() != out_features)
        {
            return Err(ModelError::Config {
                arch: "dense".into(),
                reason: format!(
                    "{} weights and {:?} biases for {out_features} × {in_features}",
                    weight.len(),
                    bias.as_ref().map(Vec::len)
                ),
            });
        }
        let weight =
            Tensor::<B, 2>::from_data(TensorData::new(weight, [out_features, in_features]), device)
                .transpose();
        let bias =
            bias.map(|b| Tensor::<B, 2>::from_data(TensorData::new(b, [1, out_features]), device));
        Ok(Self {
            weight,
            bias,
            activation,
        })
    }

    /// Output width.
    pub fn out_features(&self) -> usize {
        self.weight.dims()[1]
    }

    /// Input width.
    pub fn in_features(&self) -> usize {
        self.weight.dims()[0]
    }

    /// `x` `[n, in]` -> `[n, out]`.
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let y = x.matmul(self.weight.clone());
        let y = match &self.bias {
            Some(b) => y + b.clone(),
            None => y,
        };
        match self.activation {
            DenseActivation::Identity => y,
            DenseActivation::Tanh => y.tanh(),
        }
    }
}

/// A Gemma 3 model used as a sentence embedder (EmbeddingGemma).
#[derive(Debug)]
pub struct Gemma3Embedder<B: InferenceBackend> {
    model: Gemma3<B>,
    tokenizer: Tokenizer,
    pooling: Pooling,
    dense: Vec<Dense<B>>,
    bidirectional: bool,
    max_tokens: usize,
    max_batch: usize,
    name: String,
}

impl<B: InferenceBackend> Gemma3Embedder<B> {
    /// Puts the parts together. `bidirectional` is the checkpoint's `use_bidirectional_attention`
    /// (causal otherwise); inputs are truncated to `max_tokens` (clamped to the model's context);
    /// the dense modules must chain from the model's width.
    pub fn new(
        name: &str,
        model: Gemma3<B>,
        tokenizer: Tokenizer,
        pooling: Pooling,
        dense: Vec<Dense<B>>,
        bidirectional: bool,
        max_tokens: usize,
    ) -> Result<Self> {
        let bad = |reason: String| ModelError::Config {
            arch: "gemma3-embedder".into(),
            reason,
        };
        let cfg = model.config();
        let vocab = tokenizer.vocab_size;
        if vocab > cfg.vocab_size + 1 {
            // EmbeddingGemma's tokenizer has one added token past the table (`<image_soft_token>`),
            // which text never produces; more than that and the two do not belong together.
            return Err(bad(format!(
                "the tokenizer has {vocab} tokens but the model embeds only {}",
                cfg.vocab_size
            )));
        }
        let mut width = cfg.d_model;
        for (i, d) in dense.iter().enumerate() {
            if d.in_features() != width {
                return Err(bad(format!(
                    "dense module {i} takes {} values, the previous stage gives {width}",
                    d.in_features()
                )));
            }
            width = d.out_features();
        }
        let max_tokens = max_tokens.clamp(2, cfg.context_length);
        Ok(Self {
            model,
            tokenizer,
            pooling,
            dense,
            bidirectional,
            max_tokens,
            max_batch: 32,
            name: name.to_string(),
        })
    }

    /// Vector width (the last dense module's output, or the model's width).
    pub fn dim(&self) -> usize {
        self.dense
            .last()
            .map_or(self.model.config().d_model, Dense::out_features)
    }

    /// The name it was loaded under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Pooling mode.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Longest input in tokens (longer inputs are truncated).
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Texts per packed forward.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Sets the texts per packed forward (at least 1).
    pub fn set_max_batch(&mut self, n: usize) {
        self.max_batch = n.max(1);
    }

    /// Token ids of one text (`<bos>` … `<eos>` as the tokenizer's post-processor adds them,
    /// truncated).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer
            .encode_truncated(text, self.max_tokens)
            .map_err(|e| input_err(format!("tokenizing: {e}")))
    }

    /// One vector per text, in input order; L2-normalized when `normalize`.
    pub fn embed(&self, texts: &[&str], normalize: bool) -> Result<Vec<Vec<f32>>> {
        check_texts(texts)?;
        let ids: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| self.token_ids(t))
            .collect::<Result<_>>()?;
        // A causal checkpoint runs each text alone (its cache holds one sequence).
        let (per_pack, budget) = if self.bidirectional {
            (self.max_batch, PACK_TOKENS)
        } else {
            (1, 0)
        };
        let mut out = Vec::with_capacity(ids.len());
        let mut i = 0;
        while i < ids.len() {
            let mut j = i + 1;
            let mut tokens = ids[i].len();
            while j < ids.len() && j - i < per_pack && tokens + ids[j].len() <= budget {
                tokens += ids[j].len();
                j += 1;
            }
            out.extend(self.embed_packed(&ids[i..j], normalize)?);
            i = j;
        }
        Ok(out)
    }

    /// The vector of one token sequence (with its special tokens).
    pub fn embed_ids(&self, ids: &[u32], normalize: bool) -> Result<Vec<f32>> {
        let mut v = self.embed_packed(&[ids.to_vec()], normalize)?;
        v.pop()
            .ok_or_else(|| input_err("no vector for the sequence".into()))
    }

    /// One forward over `seqs` packed back to back (bidirectional checkpoints; a causal one takes
    /// a single sequence): a vector per sequence.
    fn embed_packed(&self, seqs: &[Vec<u32>], normalize: bool) -> Result<Vec<Vec<f32>>> {
        let cfg = self.model.config();
        for ids in seqs {
            if ids.is_empty() || ids.len() > self.max_tokens {
                return Err(input_err(format!(
                    "sequence of {} tokens; the model takes 1..={}",
                    ids.len(),
                    self.max_tokens
                )));
            }
            if let Some(id) = ids.iter().find(|&&id| id as usize >= cfg.vocab_size) {
                return Err(input_err(format!(
                    "token id {id} is outside the model's vocabulary of {}",
                    cfg.vocab_size
                )));
            }
        }
        let lengths: Vec<usize> = seqs.iter().map(Vec::len).collect();
        let t: usize = lengths.iter().sum();
        let device = self.model.device();
        let flat: Vec<i32> = seqs.iter().flatten().map(|&i| i as i32).collect();
        let tokens = Tensor::<B, 2, Int>::from_data(TensorData::new(flat, [1, t]), &device);
        // h: [1, t, d], the final norm applied
        let h = if self.bidirectional {
            self.model
                .hidden_states(tokens, &mut BidirectionalAttention::packed(lengths.clone()))
        } else if seqs.len() == 1 {
            self.model
                .hidden_states(tokens, &mut ContiguousKvCache::new(cfg.n_layers, t))
        } else {
            return Err(input_err(
                "a causal model embeds one sequence per forward".into(),
            ));
        }
        .ok_or_else(|| input_err("the model gives no hidden states".into()))?;
        let d = cfg.d_model;
        // [s, d]: each sequence's rows pooled
        let mut pooled = Vec::with_capacity(seqs.len());
        let mut at = 0;
        for &len in &lengths {
            let rows = h.clone().slice([0..1, at..at + len]);
            pooled.push(match self.pooling {
                Pooling::Mean => rows.mean_dim(1).reshape([1, d]),
                Pooling::Cls => rows.slice([0..1, 0..1]).reshape([1, d]),
            });
            at += len;
        }
        let mut x: Tensor<B, 2> = Tensor::cat(pooled, 0);
        for dense in &self.dense {
            x = dense.forward(x);
        }
        if normalize {
            // sentence-transformers' Normalize: x / max(‖x‖, 1e-12)
            let norm = x.clone().powi_scalar(2).sum_dim(1).sqrt().clamp_min(1e-12);
            x = x / norm;
        }
        let dim = self.dim();
        let v = x
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .map_err(|e| input_err(format!("reading the embeddings back: {e:?}")))?;
        Ok(v.chunks_exact(dim).map(<[f32]>::to_vec).collect())
    }
}
