//! # cinder-eval
//!
//! Evaluation: perplexity scored the way `llama-perplexity` does, and KL divergence against a
//! base model's saved logits ([`kld`]). A floor of its own above the runtime: serving needs none of
//! it.
//!
//! The text is tokenized once; it is cut into chunks of `ctx` tokens; when the model adds BOS, each
//! chunk's first token is replaced by BOS; each chunk is run from an empty cache and scored on its second
//! half (positions `ctx/2 .. ctx-1` predicting the next token), so every prediction has at least `ctx/2`
//! tokens of context. PPL = exp(mean NLL); the ± is llama.cpp's standard error of that estimate.

#![warn(missing_docs)]

mod error;
pub mod kld;

pub use error::{EvalError, Result};

use cinder_backends::InferenceBackend;
use cinder_runtime::attention::{AttentionCache, ContiguousKvCache};
use cinder_runtime::kv::SeqPagedCache;
use cinder_runtime::model::{CausalLm, Logits};
use cinder_runtime::model::{logits_to_vec, token_tensor};
use cinder_runtime::sampler::log_prob;

/// Perplexity settings.
#[derive(Debug, Clone, Copy)]
pub struct PerplexityOptions {
    /// tokens per chunk
    pub ctx: usize,
    /// at most this many chunks (None = all that fit)
    pub max_chunks: Option<usize>,
    /// replace each chunk's first token with this BOS id (models that add BOS)
    pub bos: Option<u32>,
    /// Run each chunk through a paged cache (the engine's arithmetic: the log-probabilities then
    /// equal the ones served requests report) instead of the contiguous one.
    pub paged: bool,
    /// How the paged cache stores K/V (f16 as the engine's default; Q8_0 / Q4_0 to measure a
    /// quantized cache's cost in quality). A quantized type implies `paged`.
    pub kv_type: cinder_runtime::kv::KvType,
}

/// The result.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Perplexity {
    /// exp(mean negative log-likelihood)
    pub ppl: f64,
    /// standard error of `ppl`
    pub stderr: f64,
    /// tokens scored
    pub tokens: usize,
    /// chunks run
    pub chunks: usize,
}

/// Scores `tokens` (the whole tokenized text). `on_chunk(i, n, running_ppl)` reports progress.
pub fn perplexity<B: InferenceBackend, M: CausalLm<B> + ?Sized>(
    model: &M,
    tokens: &[u32],
    opts: PerplexityOptions,
    on_chunk: &mut dyn FnMut(usize, usize, f64),
) -> Result<Perplexity> {
    perplexity_rows(model, tokens, opts, on_chunk, &mut |_, _| Ok(()))
}

/// [`perplexity`], handing every scored position's logits (`[vocab]`) and target token to
/// `on_row`, in order (chunk by chunk, position by position): what KL-divergence runs compare.
pub fn perplexity_rows<B: InferenceBackend, M: CausalLm<B> + ?Sized>(
    model: &M,
    tokens: &[u32],
    opts: PerplexityOptions,
    on_chunk: &mut dyn FnMut(usize, usize, f64),
    on_row: &mut dyn FnMut(&[f32], u32) -> Result<()>,
) -> Result<Perplexity> {
    let ctx = opts.ctx;
    if ctx < 4 {
        return Err(EvalError::Invalid(format!(
            "perplexity ctx {ctx} must be at least 4"
        )));
    }
    if ctx > model.context_length() {
        return Err(EvalError::ContextOverflow {
            ctx,
            max: model.context_length(),
        });
    }
    let available = tokens.len() / ctx;
    let n_chunks = opts.max_chunks.map_or(available, |m| m.min(available));
    if n_chunks == 0 {
        return Err(EvalError::Invalid(format!(
            "text has {} tokens: perplexity needs at least ctx = {ctx}",
            tokens.len()
        )));
    }
    let first = ctx / 2;
    let scored = ctx - 1 - first;
    let device = model.device();
    let (mut nll, mut nll2, mut count) = (0.0f64, 0.0f64, 0usize);
    let vocab = model.vocab_size();
    for c in 0..n_chunks {
        let mut chunk = tokens[c * ctx..(c + 1) * ctx].to_vec();
        if let Some(bos) = opts.bos {
            chunk[0] = bos;
        }
        let mut contiguous;
        let mut paged;
        let cache: &mut dyn AttentionCache<B> =
            if opts.paged || opts.kv_type != cinder_runtime::kv::KvType::F16 {
                let (kvh, hd) = model.kv_dims();
                paged = SeqPagedCache::<B>::with_type(
                    model.n_layers(),
                    kvh,
                    hd,
                    ctx,
                    opts.kv_type,
                    &device,
                )?;
                &mut paged
            } else {
                contiguous = ContiguousKvCache::<B>::new(model.n_layers(), ctx);
                &mut contiguous
            };
        // Logits for positions first .. ctx-1 (the last one predicts past the chunk and is unused).
        let n_out = ctx - first;
        let logits = logits_to_vec(model.forward(
            token_tensor::<B>(&chunk, &device),
            cache,
            Logits::Tail(n_out),
        ))?;
        for j in 0..scored {
            let row = &logits[j * vocab..(j + 1) * vocab];
            // position first + j predicts the original token at first + j + 1
            let target = tokens[c * ctx + first + j + 1];
            on_row(row, target)?;
            let lp = log_prob(row, target);
            nll -= lp;
            nll2 += lp * lp;
            count += 1;
        }
        on_chunk(c + 1, n_chunks, (nll / count as f64).exp());
    }
    let mean = nll / count as f64;
    let mean2 = nll2 / count as f64;
    let ppl = mean.exp();
    let var = ((mean2 - mean * mean) / (count.max(2) - 1) as f64).max(0.0);
    Ok(Perplexity {
        ppl,
        stderr: var.sqrt() * ppl,
        tokens: count,
        chunks: n_chunks,
    })
}

/// What [`evaluate`] measured.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// perplexity of the model
    pub perplexity: Perplexity,
    /// its distributions, when asked to keep them (a base for later KL-divergence runs)
    pub saved: Option<kld::BaseLogits>,
    /// the comparison against a base, when one was given
    pub kld: Option<kld::KldReport>,
}

/// Perplexity, optionally keeping the model's top-`save_top_k` distributions and optionally
/// comparing every position against `base` (which must come from the same text, tokenized the same
/// way, at the same ctx: checked, with the difference named).
pub fn evaluate<B: InferenceBackend, M: CausalLm<B> + ?Sized>(
    model: &M,
    tokens: &[u32],
    mut opts: PerplexityOptions,
    save_top_k: Option<usize>,
    base: Option<&kld::BaseLogits>,
    on_chunk: &mut dyn FnMut(usize, usize, f64),
) -> Result<Evaluation> {
    let mismatch = |reason: String| EvalError::LogitsFile {
        path: "(the saved base)".into(),
        reason,
    };
    if let Some(b) = base {
        if b.ctx() != opts.ctx {
            return Err(mismatch(format!(
                "saved at ctx {}, this run uses ctx {}",
                b.ctx(),
                opts.ctx
            )));
        }
        if b.vocab() != model.vocab_size() {
            return Err(mismatch(format!(
                "saved from a vocabulary of {}, this model has {}",
                b.vocab(),
                model.vocab_size()
            )));
        }
        let n = b.tokens().len();
        if tokens.get(..n) != Some(b.tokens()) {
            return Err(mismatch(
                "the text tokenizes differently (another text, or another tokenizer)".into(),
            ));
        }
        opts.max_chunks = Some(n / opts.ctx);
    }
    let available = tokens.len() / opts.ctx.max(1);
    let chunks = opts.max_chunks.map_or(available, |m| m.min(available));
    let mut saved = match save_top_k {
        Some(k) => Some(kld::BaseLogits::new(
            model.vocab_size(),
            opts.ctx,
            k,
            tokens[..(chunks * opts.ctx).min(tokens.len())].to_vec(),
        )?),
        None => None,
    };
    let mut acc = kld::KldAccumulator::default();
    let mut row = 0usize;
    let perplexity = perplexity_rows(model, tokens, opts, on_chunk, &mut |logits, target| {
        if let Some(s) = saved.as_mut() {
            s.push_row(logits, target)?;
        }
        if let Some(b) = base {
            if row >= b.rows() {
                return Err(mismatch(format!(
                    "holds {} positions, fewer than scored",
                    b.rows()
                )));
            }
            acc.add(b.row(row), logits, target);
        }
        row += 1;
        Ok(())
    })?;
    if let Some(b) = base
        && row != b.rows()
    {
        return Err(mismatch(format!(
            "holds {} positions, this run scored {row}",
            b.rows()
        )));
    }
    Ok(Evaluation {
        perplexity,
        saved,
        kld: base.map(|_| acc.report()),
    })
}
