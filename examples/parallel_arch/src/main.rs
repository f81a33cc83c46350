//! Registers the GPT-NeoX-style architecture and generates through the front door from a file of
//! it: `cargo run --release -p cinder-example-neox -- [MODEL.gguf] [PROMPT]` (default: the tiny
//! random-weight file in `data/`, so the text is gibberish; a real GPT-NeoX GGUF reads the same).

use cinder::{GenerateOptions, Llm};

fn main() -> Result<(), cinder::Error> {
    cinder_example_neox::register();
    let mut args = std::env::args().skip(1);
    let default = concat!(env!("CARGO_MANIFEST_DIR"), "/data/neox-tiny.gguf");
    let model = args.next().unwrap_or_else(|| default.to_string());
    let prompt = args
        .next()
        .unwrap_or_else(|| "The capital of France is".to_string());
    let llm = Llm::load(&model)?;
    let out = llm.generate(&prompt, &GenerateOptions::greedy(16))?;
    println!(
        "{} ({}, {} tokens)",
        out.text,
        llm.info().arch,
        out.tokens.len()
    );
    Ok(())
}
