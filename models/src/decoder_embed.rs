//! Embeddings from a decoder-only model (Qwen3-Embedding and other GGUF embedding models): the text
//! tokenized as llama.cpp tokenizes it (BOS and EOS as the vocabulary says), run causally, the final
//! normed hidden states pooled — the last token's state, the mean, or the first token's — and L2
//! normalized, as llama.cpp's embedding path does for a file whose `{arch}.pooling_type` is set.
//!
//! Each text runs alone through its own contiguous cache, so a text's vector never depends on the
//! others of the request.

use std::sync::Arc;

use burn::tensor::{Tensor, TensorData};
use cinder_runtime::InferenceBackend;
use cinder_runtime::kv::SeqPagedCache;
use cinder_runtime::model::CausalLm;
use cinder_tokenizer::Tokenizer;

use crate::decoder::AnyModel;
use crate::embed::{MAX_INPUTS, SentenceEmbedder, input_err};
use crate::error::Result;
use crate::gemma3_embed::Gemma3Embedder;

/// How a decoder's token states become one vector (llama.cpp's `pooling_type` 1, 2 and 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderPooling {
    /// mean over the tokens
    Mean,
    /// the first token's state
    First,
    /// the last token's state (causal models: the only one that has seen the whole text)
    Last,
}

impl DecoderPooling {
    /// From GGUF's `{arch}.pooling_type`: 1 mean, 2 cls (the first token), 3 last; `None` for 0
    /// (none) and 4 (rank, a reranker's head).
    pub fn from_gguf(code: u64) -> Option<Self> {
        match code {
            1 => Some(Self::Mean),
            2 => Some(Self::First),
            3 => Some(Self::Last),
            _ => None,
        }
    }
}

/// A decoder-only model used as a text embedder.
#[derive(Debug)]
pub struct DecoderEmbedder<B: InferenceBackend> {
    model: AnyModel<B>,
    tokenizer: Arc<Tokenizer>,
    pooling: DecoderPooling,
    dim: usize,
    name: String,
}

impl<B: InferenceBackend> DecoderEmbedder<B> {
    /// A decoder with hidden states of `dim` values, its tokenizer and pooling.
    pub fn new(
        name: &str,
        model: AnyModel<B>,
        tokenizer: Arc<Tokenizer>,
        pooling: DecoderPooling,
        dim: usize,
    ) -> Self {
        Self {
            model,
            tokenizer,
            pooling,
            dim,
            name: name.to_string(),
        }
    }

    /// Vector width.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The name it was loaded under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pooling.
    pub fn pooling(&self) -> DecoderPooling {
        self.pooling
    }

    /// A text's token ids, as they are embedded (BOS/EOS as the vocabulary says).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer
            .encode(text, true)
            .map_err(|e| input_err(format!("tokenizing: {e}")))
    }

    /// One vector per text, in input order; L2-normalized when `normalize`.
    pub fn embed(&self, texts: &[&str], normalize: bool) -> Result<Vec<Vec<f32>>> {
        if texts.len() > MAX_INPUTS {
            return Err(input_err(format!(
                "{} texts in one request; at most {MAX_INPUTS} are accepted",
                texts.len()
            )));
        }
        texts
            .iter()
            .map(|t| {
                let ids = self.token_ids(t)?;
                self.embed_ids(&ids, normalize)
            })
            .collect()
    }

    /// The vector of one token sequence.
    pub fn embed_ids(&self, ids: &[u32], normalize: bool) -> Result<Vec<f32>> {
        if ids.is_empty() {
            return Err(input_err("an empty text has no tokens to embed".into()));
        }
        let ctx = self.model.context_length();
        if ids.len() > ctx {
            return Err(input_err(format!(
                "{} tokens; the model's context is {ctx}",
                ids.len()
            )));
        }
        let device = self.model.device();
        let v: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        let tokens = Tensor::from_data(TensorData::new(v, [1, ids.len()]), &device);
        // The paged cache stores K/V in f16 as llama.cpp's default cache does.
        let (kvh, hd) = self.model.kv_dims();
        let mut cache = SeqPagedCache::<B>::new(self.model.n_layers(), kvh, hd, ids.len(), &device)
            .map_err(|e| input_err(format!("attention cache: {e}")))?;
        let h = self
            .model
            .hidden_states(tokens, &mut cache)
            .ok_or_else(|| {
                input_err(format!(
                    "model {} cannot give hidden states (layers split between backends)",
                    self.name
                ))
            })?;
        // h: [1, t, d] -> the pooled [d]
        let t = ids.len();
        let pooled: Tensor<B, 1> = match self.pooling {
            DecoderPooling::Last => h.slice([0..1, t - 1..t]).reshape([self.dim]),
            DecoderPooling::First => h.slice([0..1, 0..1]).reshape([self.dim]),
            DecoderPooling::Mean => h.mean_dim(1).reshape([self.dim]),
        };
        let mut v: Vec<f32> =
            cinder_runtime::model::logits_to_vec(pooled.reshape([1, 1, self.dim]))
                .map_err(|e| input_err(format!("reading the embedding back: {e}")))?;
        if normalize {
            let norm = v
                .iter()
                .map(|x| (*x as f64) * (*x as f64))
                .sum::<f64>()
                .sqrt();
            if norm > 0.0 {
                for x in &mut v {
                    *x = (*x as f64 / norm) as f32;
                }
            }
        }
        Ok(v)
    }
}

/// A text embedder of any kind: a sentence-transformers BERT encoder, EmbeddingGemma, or a decoder
/// with pooling. What `cinder embed` and `/v1/embeddings` serve.
#[derive(Debug)]
pub enum Embedder<B: InferenceBackend> {
    /// BERT-style encoder ([`SentenceEmbedder`])
    Sentence(Box<SentenceEmbedder<B>>),
    /// Gemma 3 run bidirectionally with dense projections ([`Gemma3Embedder`])
    Gemma(Box<Gemma3Embedder<B>>),
    /// decoder-only model ([`DecoderEmbedder`])
    Decoder(DecoderEmbedder<B>),
}

impl<B: InferenceBackend> Embedder<B> {
    /// Vector width.
    pub fn dim(&self) -> usize {
        match self {
            Self::Sentence(e) => e.dim(),
            Self::Gemma(e) => e.dim(),
            Self::Decoder(e) => e.dim(),
        }
    }

    /// A text's token ids, as they are embedded.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Self::Sentence(e) => e.token_ids(text),
            Self::Gemma(e) => e.token_ids(text),
            Self::Decoder(e) => e.token_ids(text),
        }
    }

    /// One vector per text, in input order; L2-normalized when `normalize`.
    pub fn embed(&self, texts: &[&str], normalize: bool) -> Result<Vec<Vec<f32>>> {
        match self {
            Self::Sentence(e) => e.embed(texts, normalize),
            Self::Gemma(e) => e.embed(texts, normalize),
            Self::Decoder(e) => e.embed(texts, normalize),
        }
    }

    /// The most tokens of one text the model embeds (longer texts are truncated by the encoders,
    /// refused by a decoder past its context).
    pub fn max_tokens(&self) -> usize {
        match self {
            Self::Sentence(e) => e.max_tokens(),
            Self::Gemma(e) => e.max_tokens(),
            Self::Decoder(e) => e.model.context_length(),
        }
    }

    /// Sequences per forward pass (an encoder's packed batches; a causal decoder runs each text
    /// alone).
    pub fn set_max_batch(&mut self, n: usize) {
        match self {
            Self::Sentence(e) => e.set_max_batch(n),
            Self::Gemma(e) => e.set_max_batch(n),
            Self::Decoder(_) => {}
        }
    }
}
