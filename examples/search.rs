//! Semantic search: embed a few documents with all-MiniLM-L6-v2 into an index, then query it.
//!
//! `cargo run --release --example search -- "how do plants make food?"` Built with
//! `--features cuda` or `--features wgpu` it embeds there.

use cinder::Embedder;

const DOCS: [&str; 6] = [
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "The French Revolution began in 1789 with the storming of the Bastille.",
    "Rust's borrow checker prevents data races at compile time.",
    "Glaciers form where snow accumulates faster than it melts.",
    "Chlorophyll absorbs red and blue light and reflects green.",
    "A hash map gives average constant-time lookups.",
];

fn main() -> Result<(), cinder::Error> {
    let query = std::env::args().nth(1);
    let query = query.as_deref().unwrap_or("how do plants make food?");
    let mut index = Embedder::load("all-minilm-l6-v2")?.index()?;
    let ids: Vec<String> = (0..DOCS.len()).map(|i| format!("doc-{i}")).collect();
    index.add_all(ids.iter().map(String::as_str).zip(DOCS))?;
    println!("query: {query:?}");
    for hit in index.search(query, 3)? {
        println!("{:.3}  {}  {}", hit.score, hit.id, hit.payload["text"]);
    }
    Ok(())
}
