//! Sentence embeddings with all-MiniLM-L6-v2: L2-normalized vectors, and the cosine similarity of
//! every pair (for unit vectors it is their dot product).
//!
//! `cargo run --release --example embed -- "A cat sits on the mat." "A kitten rests on a rug."
//! "Stock markets fell today."` Add `--features cuda` or `--features wgpu` to run on that backend.

use anyhow::Result;
use cinder::prelude::*;

struct Embed {
    texts: Vec<String>,
}

impl BackendTask for Embed {
    type Output = Result<Vec<Vec<f32>>>;

    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<Vec<Vec<f32>>> {
        let name = "all-minilm-l6-v2";
        let path = cinder::catalog::resolve(name)?.path;
        let e = cinder::importer::load_embedder::<B>(name, &path, &device)?;
        let texts: Vec<&str> = self.texts.iter().map(String::as_str).collect();
        Ok(e.embed(&texts, true)?)
    }
}

fn main() -> Result<()> {
    let mut texts: Vec<String> = std::env::args().skip(1).collect();
    if texts.is_empty() {
        texts = [
            "A cat sits on the mat.",
            "A kitten rests on a rug.",
            "Stock markets fell sharply today.",
        ]
        .map(String::from)
        .to_vec();
    }
    let kind = cinder::backends::preferred_kind()?;
    eprintln!("backend: {kind}");
    let vectors = cinder::backends::dispatch(
        kind,
        Embed {
            texts: texts.clone(),
        },
    )??;
    println!(
        "{} vectors of {} dimensions",
        vectors.len(),
        vectors[0].len()
    );
    for (i, a) in vectors.iter().enumerate() {
        for (j, b) in vectors.iter().enumerate().skip(i + 1) {
            let cos: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            println!("{cos:.3}  {:?} ~ {:?}", texts[i], texts[j]);
        }
    }
    Ok(())
}
