//! Sentence embeddings with all-MiniLM-L6-v2: L2-normalized vectors, and the cosine similarity of
//! every pair (for unit vectors it is their dot product).
//!
//! `cargo run --release --example embed -- "A cat sits on the mat." "A kitten rests on a rug."
//! "Stock markets fell today."` Built with `--features cuda` or `--features wgpu` it runs there.

use cinder::Embedder;

const DEFAULT: [&str; 3] = [
    "A cat sits on the mat.",
    "A kitten rests on a rug.",
    "Stocks fell.",
];

fn main() -> Result<(), cinder::Error> {
    let mut texts: Vec<String> = std::env::args().skip(1).collect();
    if texts.is_empty() {
        texts = DEFAULT.map(String::from).to_vec();
    }
    let vectors = Embedder::load("all-minilm-l6-v2")?.embed(&texts)?;
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
