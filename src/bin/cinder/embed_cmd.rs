//! `cinder embed`: sentence embeddings from the command line.

use std::io::Write;

use anyhow::{Context, Result, bail};
use cinder::models::decoder_embed::Embedder;
use cinder::prelude::*;
use clap::Args;

/// `cinder embed MODEL --text ... | --file PATH`
#[derive(Args, Debug)]
pub struct EmbedArgs {
    /// Catalog name (e.g. all-minilm-l6-v2) or a directory holding model.safetensors + config.json +
    /// tokenizer.json (or an .onnx file with tokenizer.json beside it), or a GGUF decoder embedding
    /// model (one whose metadata sets a pooling type, e.g. Qwen3-Embedding).
    pub model: String,
    /// A text to embed (repeatable; order is kept).
    #[arg(long = "text", conflicts_with = "file")]
    pub texts: Vec<String>,
    /// A UTF-8 file with one text per line (empty lines are skipped).
    #[arg(long)]
    pub file: Option<String>,
    /// Print one JSON line `{"model":..,"dim":..,"embeddings":[[..],..]}`.
    #[arg(long)]
    pub json: bool,
    /// Keep the pooled vectors' own lengths (default: L2-normalized).
    #[arg(long)]
    pub no_normalize: bool,
    /// Sequences per forward pass.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
}

/// Resolves MODEL (catalog name or path) and loads it as a text embedder on `device`: a sentence
/// encoder, or a GGUF decoder with a pooling type.
pub fn load_embedder<B: InferenceBackend>(model: &str, device: &B::Device) -> Result<Embedder<B>> {
    let r =
        cinder::catalog::resolve(model).with_context(|| format!("resolving model {model:?}"))?;
    cinder::importer::load_text_embedder::<B>(model, &r.path, device)
        .with_context(|| format!("loading embedding model {}", r.path.display()))
}

/// The texts of `--text`/`--file`.
fn texts(a: &EmbedArgs) -> Result<Vec<String>> {
    let texts = match &a.file {
        Some(f) => std::fs::read_to_string(f)
            .with_context(|| format!("reading {f} as UTF-8 text"))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect(),
        None => a.texts.clone(),
    };
    if texts.is_empty() {
        bail!("nothing to embed: give --text TEXT (repeatable) or --file PATH");
    }
    Ok(texts)
}

/// Runs on backend `B`.
pub struct EmbedTask(pub EmbedArgs);

impl BackendTask for EmbedTask {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let a = self.0;
        let texts = texts(&a)?;
        let mut e = load_embedder::<B>(&a.model, &device)?;
        e.set_max_batch(a.batch);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = e.embed(&refs, !a.no_normalize)?;
        let mut out = std::io::stdout().lock();
        if a.json {
            let line = serde_json::json!({
                "model": a.model,
                "dim": e.dim(),
                "embeddings": vectors,
            });
            writeln!(out, "{line}")?;
        } else {
            for (t, v) in texts.iter().zip(&vectors) {
                let head: Vec<String> = v.iter().take(6).map(|x| format!("{x:+.5}")).collect();
                let short: String = t.chars().take(48).collect();
                writeln!(out, "{short:<48}  [{}, …] dim {}", head.join(", "), v.len())?;
            }
        }
        Ok(())
    }
}
