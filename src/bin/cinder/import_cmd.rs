//! `cinder import`: a GGUF file or an HF SafeTensors checkpoint into a verified record directory.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use cinder::backends::{BackendTask, InferenceBackend};
use cinder::importer::ImportOptions;
use clap::Args;

/// `cinder import SRC --out DIR`
#[derive(Args, Debug)]
pub struct ImportArgs {
    /// A GGUF file (or catalog name), or an HF checkpoint directory (config.json,
    /// model.safetensors or model.safetensors.index.json, tokenizer.json).
    pub src: String,
    /// The record directory to create (must not exist, or be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// The architecture the source must be (llama, mistral, qwen2, gemma3).
    #[arg(long)]
    pub arch: Option<String>,
    /// Pin the source: the sha256 (hex) its weight file must have (repeat for sharded checkpoints).
    #[arg(long)]
    pub expect_sha256: Vec<String>,
    /// Quantize 2-D weights on import (f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1).
    #[arg(long)]
    pub quantize: Option<String>,
    /// Print the manifest as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the import (the model is built once on the chosen backend to prove it loads).
pub struct ImportTask(pub ImportArgs);

impl BackendTask for ImportTask {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let a = self.0;
        let src = if std::path::Path::new(&a.src).exists() {
            PathBuf::from(&a.src)
        } else {
            crate::resolve_model(&a.src)?
        };
        for h in &a.expect_sha256 {
            if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                anyhow::bail!("--expect-sha256 {h:?} is not 64 hex digits");
            }
        }
        let opts = ImportOptions {
            arch: a.arch.clone(),
            expect_sha256: a.expect_sha256.clone(),
            quantize: a
                .quantize
                .as_deref()
                .map(|q| crate::quantize::target(q).map(|(t, _)| t))
                .transpose()?,
        };
        let t0 = Instant::now();
        let m = cinder::importer::import::<B>(&src, &a.out, &opts, &device)
            .with_context(|| format!("importing {} into {}", src.display(), a.out.display()))?;
        if a.json {
            println!("{}", serde_json::to_string(&m)?);
        } else {
            println!(
                "{} ({}) -> {}: {} tensors, {} files, {:.1} s",
                src.display(),
                m.architecture,
                a.out.display(),
                m.tensors.len(),
                m.files.len() + 1,
                t0.elapsed().as_secs_f64()
            );
            for f in &m.files {
                println!("  {}  {:>12}  {}", f.sha256, f.size, f.path);
            }
        }
        Ok(())
    }
}
