//! Semantic search: embed a few documents with all-MiniLM-L6-v2, put them in a cosine HNSW index
//! with JSON payloads, save it (crash-safe), reopen it and query it.
//!
//! `cargo run --release --example search -- "how do plants make food?"` Add `--features cuda` or
//! `--features wgpu` to embed on that backend.

use anyhow::Result;
use cinder::index::{IndexKind, IndexOptions, Metric, VectorIndex};
use cinder::prelude::*;
use serde_json::json;

const DOCS: [&str; 6] = [
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "The French Revolution began in 1789 with the storming of the Bastille.",
    "Rust's borrow checker prevents data races at compile time.",
    "Glaciers form where snow accumulates faster than it melts.",
    "Chlorophyll absorbs red and blue light and reflects green.",
    "A hash map gives average constant-time lookups.",
];

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
    let query = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "how do plants make food?".to_string());
    let kind = cinder::backends::preferred_kind()?;
    eprintln!("backend: {kind}");
    // The documents and the query in one call: the model loads once.
    let mut texts: Vec<String> = DOCS.map(String::from).to_vec();
    texts.push(query.clone());
    let mut vectors = cinder::backends::dispatch(kind, Embed { texts })??;
    let q = vectors.pop().unwrap_or_default();

    // Cosine: the index normalizes on insert and on query, and records the metric in its file.
    let mut index = VectorIndex::new(IndexOptions::new(q.len(), Metric::Cosine, IndexKind::Hnsw))?;
    for (i, (doc, v)) in DOCS.iter().zip(&vectors).enumerate() {
        index.upsert(&format!("doc-{i}"), v, json!({ "text": doc }))?;
    }
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("docs.cindex");
    index.save(&file)?;
    let index = VectorIndex::open(&file)?;

    println!("query: {query:?}");
    for hit in index.search(&q, 3, None)? {
        println!("{:.3}  {}  {}", hit.score, hit.id, hit.payload["text"]);
    }
    Ok(())
}
