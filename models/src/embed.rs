//! Sentence embeddings: tokenizer + [`Bert`] encoder + pooling (+ optional L2 normalization), the
//! sentence-transformers recipe.
//!
//! Inputs are tokenized by Cinder's [`Tokenizer`] (the same type the decoders use; a
//! `tokenizer.json` runs end to end through it), truncated as sentence-transformers truncates them,
//! sorted by length and run in batches of at most [`SentenceEmbedder::max_batch`] sequences. A
//! batch is not padded at all: its sequences are packed back to back and each attends only to
//! itself (the shipped `tokenizer.json` of all-MiniLM-L6-v2 pads every input to 128 tokens; that
//! setting is dropped). Results come back in input order.

use burn::tensor::{IndexingUpdateOp, Int, Tensor, TensorData};
use cinder_runtime::InferenceBackend;
use cinder_tokenizer::Tokenizer;
use serde::{Deserialize, Serialize};

use crate::bert::Bert;
use crate::error::{ModelError, Result};

/// Largest number of texts one call accepts (OpenAI's embeddings endpoint has the same limit).
pub const MAX_INPUTS: usize = 2048;

/// How token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Mean over the real (unmasked) tokens.
    Mean,
    /// The first token's state (`[CLS]`).
    Cls,
}

impl Pooling {
    /// Reads a sentence-transformers `1_Pooling/config.json`.
    pub fn from_sentence_transformers(text: &str) -> Result<Self> {
        #[derive(Deserialize)]
        struct St {
            #[serde(default)]
            pooling_mode_cls_token: bool,
            #[serde(default)]
            pooling_mode_mean_tokens: bool,
            #[serde(default)]
            pooling_mode_max_tokens: bool,
        }
        let st: St = serde_json::from_str(text).map_err(|e| bad(format!("pooling config: {e}")))?;
        match (
            st.pooling_mode_mean_tokens,
            st.pooling_mode_cls_token,
            st.pooling_mode_max_tokens,
        ) {
            (true, false, false) => Ok(Pooling::Mean),
            (false, true, false) => Ok(Pooling::Cls),
            _ => Err(bad(
                "pooling config asks for a mode other than mean or cls alone".into(),
            )),
        }
    }
}

fn bad(reason: String) -> ModelError {
    ModelError::Config {
        arch: "sentence-embedder".into(),
        reason,
    }
}

/// A caller's input that cannot be embedded (shared with [`crate::decoder_embed`]).
pub(crate) fn input_err(reason: String) -> ModelError {
    ModelError::Input(reason)
}

/// A request's texts: at most [`MAX_INPUTS`], none empty (shared with [`crate::gemma3_embed`]).
pub(crate) fn check_texts(texts: &[&str]) -> Result<()> {
    if texts.len() > MAX_INPUTS {
        return Err(input_err(format!(
            "{} texts in one request; at most {MAX_INPUTS} are accepted",
            texts.len()
        )));
    }
    if let Some(i) = texts.iter().position(|t| t.trim().is_empty()) {
        return Err(input_err(format!("text {i} is empty")));
    }
    Ok(())
}

/// A sentence-embedding model ready to encode text.
#[derive(Debug)]
pub struct SentenceEmbedder<B: InferenceBackend> {
    model: Bert<B>,
    tokenizer: Tokenizer,
    pooling: Pooling,
    max_tokens: usize,
    max_batch: usize,
    name: String,
    device: B::Device,
}

impl<B: InferenceBackend> SentenceEmbedder<B> {
    /// Puts a model and its tokenizer together. Truncation is at `max_tokens` (clamped to the model's
    /// positions); a tokenizer whose vocabulary does not fit the model is refused.
    pub fn new(
        name: &str,
        model: Bert<B>,
        tokenizer: Tokenizer,
        pooling: Pooling,
        max_tokens: usize,
        device: B::Device,
    ) -> Result<Self> {
        let vocab = tokenizer.vocab_size;
        let model_vocab = model.config().vocab_size;
        if vocab > model_vocab {
            return Err(bad(format!(
                "the tokenizer has {vocab} tokens but the model embeds only {model_vocab}: they do \
                 not belong together"
            )));
        }
        let max_tokens = max_tokens.clamp(2, model.config().max_position_embeddings);
        Ok(Self {
            model,
            tokenizer,
            pooling,
            max_tokens,
            max_batch: 32,
            name: name.to_string(),
            device,
        })
    }

    /// The model's name (catalog name or directory).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Embedding width.
    pub fn dim(&self) -> usize {
        self.model.config().hidden_size
    }

    /// Pooling mode.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Longest input in tokens (longer inputs are truncated).
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Sequences per forward pass.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Sets the sequences per forward pass (at least 1).
    pub fn set_max_batch(&mut self, n: usize) {
        self.max_batch = n.max(1);
    }

    /// The encoder.
    pub fn model(&self) -> &Bert<B> {
        &self.model
    }

    /// The device the encoder runs on.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// Token ids of one text (with `[CLS]`/`[SEP]`, truncated, no padding).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer
            .encode_truncated(text, self.max_tokens)
            .map_err(|e| input_err(format!("tokenizing: {e}")))
    }

    /// One vector per text, in input order; L2-normalized when `normalize` is set.
    pub fn embed(&self, texts: &[&str], normalize: bool) -> Result<Vec<Vec<f32>>> {
        check_texts(texts)?;
        let encodings: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| self.token_ids(t))
            .collect::<Result<_>>()?;
        // Sort by length so each batch holds alike sequences; remember where each result goes.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| encodings[i].len());
        let mut out = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(self.max_batch) {
            let ids: Vec<Vec<u32>> = chunk.iter().map(|&i| encodings[i].clone()).collect();
            // One sentence per input: every token is of type 0 (BERT's template `[CLS]:0 $A:0 [SEP]:0`).
            let types: Vec<Vec<u32>> = ids.iter().map(|s| vec![0; s.len()]).collect();
            let vectors = self.embed_ids(&ids, &types, normalize)?;
            for (&i, v) in chunk.iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// Embeds already-tokenized sequences (each with its special tokens, no padding): one forward
    /// pass over the sequences packed back to back ([`Bert::forward_packed`]: no padding rows).
    pub fn embed_ids(
        &self,
        ids: &[Vec<u32>],
        type_ids: &[Vec<u32>],
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>> {
        let b = ids.len();
        if b == 0 {
            return Ok(Vec::new());
        }
        let t = ids.iter().map(Vec::len).max().unwrap_or(0);
        let cfg = self.model.config();
        if t == 0 || t > cfg.max_position_embeddings {
            return Err(input_err(format!(
                "sequence of {t} tokens; the model takes 1..={}",
                cfg.max_position_embeddings
            )));
        }
        // Packed without padding: the sequences' tokens back to back, `[n]`.
        let lengths: Vec<usize> = ids.iter().map(Vec::len).collect();
        let n: usize = lengths.iter().sum();
        let (mut flat_ids, mut flat_types) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (seq, types) in ids.iter().zip(type_ids) {
            if seq.is_empty() {
                return Err(input_err(
                    "an empty token sequence (every input keeps at least its special tokens)"
                        .into(),
                ));
            }
            for (c, &id) in seq.iter().enumerate() {
                if id as usize >= cfg.vocab_size {
                    return Err(input_err(format!(
                        "token id {id} is outside the model's vocabulary of {}",
                        cfg.vocab_size
                    )));
                }
                let ty = types.get(c).copied().unwrap_or(0);
                if ty as usize >= cfg.type_vocab_size {
                    return Err(input_err(format!("token type {ty} is out of range")));
                }
                flat_ids.push(i64::from(id));
                flat_types.push(i64::from(ty));
            }
        }
        let dev = &self.device;
        let ids_t = Tensor::<B, 1, Int>::from_data(TensorData::new(flat_ids, [n]), dev);
        let types_t = Tensor::<B, 1, Int>::from_data(TensorData::new(flat_types, [n]), dev);
        // [n, d]: only real tokens go through the encoder
        let h = self.model.forward_packed(ids_t, types_t, &lengths);
        // Sequence `s` owns rows `starts[s] .. starts[s] + lengths[s]` of `h`.
        let starts: Vec<i64> = lengths
            .iter()
            .scan(0i64, |at, &len| {
                let s = *at;
                *at += len as i64;
                Some(s)
            })
            .collect();
        // [b, d]
        let pooled = match self.pooling {
            Pooling::Mean => {
                // Sum each sequence's rows (scatter-add by sequence index, O(n·d)), then divide.
                let owner: Vec<i64> = lengths
                    .iter()
                    .enumerate()
                    .flat_map(|(s, &len)| std::iter::repeat_n(s as i64, len))
                    .collect();
                let owner = Tensor::<B, 1, Int>::from_data(TensorData::new(owner, [n]), dev);
                let counts: Vec<f32> = lengths.iter().map(|&l| l as f32).collect();
                let counts = Tensor::<B, 2>::from_data(TensorData::new(counts, [b, 1]), dev);
                Tensor::<B, 2>::zeros([b, cfg.hidden_size], dev).select_assign(
                    0,
                    owner,
                    h,
                    IndexingUpdateOp::Add,
                ) / counts
            }
            Pooling::Cls => h.select(
                0,
                Tensor::<B, 1, Int>::from_data(TensorData::new(starts, [b]), dev),
            ),
        };
        let pooled = if normalize {
            // sentence-transformers' Normalize: x / max(‖x‖, 1e-12)
            let norm = pooled
                .clone()
                .powi_scalar(2)
                .sum_dim(1)
                .sqrt()
                .clamp_min(1e-12);
            pooled / norm
        } else {
            pooled
        };
        let data = pooled.into_data().convert::<f32>();
        let values = data
            .as_slice::<f32>()
            .map_err(|e| input_err(format!("reading embeddings: {e:?}")))?;
        Ok(values
            .chunks_exact(cfg.hidden_size)
            .map(<[f32]>::to_vec)
            .collect())
    }
}
