//! `cinder perplexity`

use std::path::PathBuf;

use anyhow::{Context, Result};
use cinder::prelude::*;
use cinder::runtime::eval::{PerplexityOptions, perplexity};
use clap::Args;

/// `cinder perplexity MODEL --file PATH`
#[derive(Args, Debug)]
pub struct PerplexityArgs {
    /// Catalog name or path to a GGUF file.
    pub model: String,
    /// UTF-8 text to score (a catalog data name such as `lee-corpus` works too).
    #[arg(long)]
    pub file: String,
    /// Tokens per chunk.
    #[arg(long, default_value_t = 512)]
    pub ctx: usize,
    /// At most this many chunks.
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs on backend `B`.
pub struct Task(pub PerplexityArgs);

impl BackendTask for Task {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let a = self.0;
        let text_path = if PathBuf::from(&a.file).exists() {
            PathBuf::from(&a.file)
        } else {
            crate::resolve_model(&a.file)?
        };
        let text = std::fs::read_to_string(&text_path)
            .with_context(|| format!("reading {} as UTF-8 text", text_path.display()))?;
        let m = crate::load_model::<B>(&a.model, &device)?;
        // As llama-perplexity: tokenize the whole text, BOS at the very start only if the model adds it.
        let tokens = m.tokenizer.encode(&text, true)?;
        let bos = if m.tokenizer.add_bos {
            m.tokenizer.bos_id
        } else {
            None
        };
        let opts = PerplexityOptions {
            ctx: a.ctx,
            max_chunks: a.chunks,
            bos,
        };
        let quiet = a.json;
        let r = perplexity(&m.model, &tokens, opts, &mut |i, n, p| {
            if !quiet {
                eprint!("\rchunk {i}/{n}: running PPL {p:.4}   ");
            }
        })?;
        if !quiet {
            eprintln!();
        }
        if a.json {
            println!(
                "{}",
                serde_json::json!({"ppl": r.ppl, "stderr": r.stderr, "tokens": r.tokens, "chunks": r.chunks})
            );
        } else {
            println!("PPL = {:.4} +/- {:.5}", r.ppl, r.stderr);
        }
        Ok(())
    }
}
