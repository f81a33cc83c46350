//! Generate text from the default model.
//!
//! `cargo run --release --example generate -- "Your prompt"` runs on the CPU; add `--features cuda`
//! or `--features wgpu` to run on that backend (`CINDER_BACKEND=flex|ndarray|candle|wgpu|cuda` picks
//! one explicitly).

use anyhow::Result;
use cinder::prelude::*;

struct Generate {
    prompt: String,
}

impl BackendTask for Generate {
    type Output = Result<String>;

    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<String> {
        // A catalog name is pulled (and verified) on first use; a path works too.
        let path = cinder::catalog::resolve("smollm2-135m")?.path;
        let m = cinder::importer::load_model::<B>(&path, &device)?;
        let ids = m.tokenizer.encode(&self.prompt, true)?;
        let opts = GenerateOptions {
            max_tokens: 32,
            sampling: SamplingParams::greedy(),
            ..Default::default()
        };
        let out = generate(&m.model, &m.tokenizer, &ids, &opts, &mut |piece| {
            print!("{piece}");
            true
        })?;
        println!();
        Ok(out.text)
    }
}

fn main() -> Result<()> {
    let prompt = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "The capital of France is".to_string());
    let kind = cinder::backends::preferred_kind()?;
    eprintln!("backend: {kind}");
    cinder::backends::dispatch(kind, Generate { prompt })??;
    Ok(())
}
