//! Retrieval-augmented generation: embed documents into an index, retrieve the ones closest to a
//! question, and have the chat model answer from them, citing them by number.
//!
//! `cargo run --release --example rag -- "When did the French Revolution begin?"` Built with
//! `--features cuda` or `--features wgpu` both models run there.

use cinder::{Embedder, GenerateOptions, Llm, Message};

const DOCS: [&str; 5] = [
    "The French Revolution began in 1789 with the storming of the Bastille.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "Rust's borrow checker prevents data races at compile time.",
    "Napoleon crowned himself Emperor of the French in 1804.",
    "Glaciers form where snow accumulates faster than it melts.",
];

fn main() -> Result<(), cinder::Error> {
    let question = std::env::args().nth(1);
    let question = question
        .as_deref()
        .unwrap_or("When did the French Revolution begin?");
    let mut index = Embedder::load("all-minilm-l6-v2")?.index()?;
    let ids: Vec<String> = (1..=DOCS.len()).map(|i| i.to_string()).collect();
    index.add_all(ids.iter().map(String::as_str).zip(DOCS))?;
    let hits = index.search(question, 2)?;
    let context: String = hits
        .iter()
        .map(|h| {
            format!(
                "[{}] {}\n",
                h.id,
                h.payload["text"].as_str().unwrap_or_default()
            )
        })
        .collect();
    let llm = Llm::load("smollm2-135m")?;
    let prompt = [
        Message::system("Answer from the sources only, and cite them like [1]."),
        Message::user(format!("Sources:\n{context}\nQuestion: {question}")),
    ];
    let answer = llm.chat_with(&prompt, &GenerateOptions::greedy(96))?;
    println!("{}\n\nsources:\n{context}", answer.text.trim());
    Ok(())
}
