//! `cinder perplexity`

use std::path::PathBuf;

use anyhow::{Context, Result};
use cinder::eval::kld::{BaseLogits, DEFAULT_TOP_K};
use cinder::eval::{PerplexityOptions, evaluate};
use cinder::prelude::*;
use cinder::runtime::kv::KvType;
use clap::Args;

/// `cinder perplexity MODEL --file PATH`
#[derive(Args, Debug)]
pub struct PerplexityArgs {
    /// Catalog name or path to a GGUF file.
    pub model: String,
    /// UTF-8 text to score (a catalog data name such as `lee-corpus` works too).
    #[arg(long)]
    pub file: String,
    /// Tokens per chunk (default 512, or the ctx of the --kl-divergence file).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// At most this many chunks.
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Save this model's distributions (top-k compressed, see --logits-top-k) as the base of later
    /// --kl-divergence runs.
    #[arg(long, value_name = "FILE")]
    pub save_logits: Option<PathBuf>,
    /// Tokens kept per position by --save-logits (the rest of the vocabulary is one bucket).
    #[arg(long, default_value_t = DEFAULT_TOP_K)]
    pub logits_top_k: usize,
    /// Compare against the distributions saved by --save-logits (same text): KL divergence, PPL
    /// ratio, ΔPPL, Δp and same-top-token statistics, as llama-perplexity reports them.
    #[arg(long, value_name = "FILE")]
    pub kl_divergence: Option<PathBuf>,
    /// Score through the engine's paged cache (f16 K/V): the log-probabilities of served requests
    /// (`logprobs`) on the same text.
    #[arg(long)]
    pub paged: bool,
    /// K/V cache storage of the paged cache: f16, q8_0 or q4_0 (a quantized type implies
    /// --paged); with --kl-divergence against an f16 run, the quality a quantized cache costs.
    #[arg(long, default_value = "f16", value_parser = crate::engine_flags::parse_kv_type)]
    pub kv_type: KvType,
}

/// The text to score: a file, or a catalog data name such as `lee-corpus`.
pub fn read_text(file: &str) -> Result<String> {
    let text_path = if PathBuf::from(file).exists() {
        PathBuf::from(file)
    } else {
        crate::resolve_model(file)?
    };
    std::fs::read_to_string(&text_path)
        .with_context(|| format!("reading {} as UTF-8 text", text_path.display()))
}

/// Runs on backend `B`.
pub struct Task(pub PerplexityArgs, pub crate::Loader);

impl BackendTask for Task {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let a = self.0;
        let text = read_text(&a.file)?;
        let m = self.1.load::<B>(&a.model, &device)?;
        // As llama-perplexity: tokenize the whole text, BOS at the very start only if the model adds it.
        let tokens = m.tokenizer.encode(&text, true)?;
        let bos = if m.tokenizer.add_bos {
            m.tokenizer.bos_id
        } else {
            None
        };
        let base = match &a.kl_divergence {
            Some(p) => Some(BaseLogits::load(p)?),
            None => None,
        };
        let opts = PerplexityOptions {
            ctx: a.ctx.or(base.as_ref().map(BaseLogits::ctx)).unwrap_or(512),
            max_chunks: a.chunks,
            bos,
            paged: a.paged,
            kv_type: a.kv_type,
        };
        let quiet = a.json;
        let save_k = a.save_logits.as_ref().map(|_| a.logits_top_k);
        let ev = evaluate(
            &m.model,
            &tokens,
            opts,
            save_k,
            base.as_ref(),
            &mut |i, n, p| {
                if !quiet {
                    eprint!("\rchunk {i}/{n}: running PPL {p:.4}   ");
                }
            },
        )
        .with_context(|| match &a.kl_divergence {
            Some(p) => format!("comparing with --kl-divergence {}", p.display()),
            None => "scoring the text".into(),
        })?;
        if !quiet {
            eprintln!();
        }
        if let (Some(path), Some(saved)) = (&a.save_logits, &ev.saved) {
            saved.save(path)?;
            if !quiet {
                eprintln!(
                    "saved {} positions (top-{}) to {}",
                    saved.rows(),
                    saved.top_k(),
                    path.display()
                );
            }
        }
        let r = ev.perplexity;
        if a.json {
            let mut v = serde_json::json!({"ppl": r.ppl, "stderr": r.stderr, "tokens": r.tokens, "chunks": r.chunks});
            if let Some(k) = &ev.kld {
                v["kl_divergence"] = serde_json::to_value(k)?;
            }
            println!("{v}");
        } else {
            println!("PPL = {:.4} +/- {:.5}", r.ppl, r.stderr);
            if let Some(k) = &ev.kld {
                println!("\n{k}");
            }
        }
        Ok(())
    }
}
