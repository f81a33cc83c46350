//! Generate text with the default model, streamed as it comes.
//!
//! `cargo run --release --example generate -- "Your prompt"` runs on the CPU; built with
//! `--features cuda` or `--features wgpu` it runs on that GPU (`CINDER_BACKEND=flex|wgpu|cuda|…`
//! picks one explicitly).

use std::io::Write;

use cinder::{GenerateOptions, Llm};

fn main() -> Result<(), cinder::Error> {
    let prompt = std::env::args().nth(1);
    let prompt = prompt.as_deref().unwrap_or("The capital of France is");
    let llm = Llm::load("smollm2-135m")?;
    eprintln!("backend: {}", llm.backend());
    for piece in llm.stream(prompt, &GenerateOptions::greedy(32))? {
        print!("{}", piece?);
        std::io::stdout().flush().ok();
    }
    println!();
    Ok(())
}
