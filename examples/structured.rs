//! Structured output: a typed Rust value from the model. The type's JSON schema constrains
//! generation (through the grammar matcher), so the text always parses.
//!
//! `cargo run --release --example structured`; built with `--features cuda` or `--features wgpu` it
//! runs there. Against `cinder serve` the same schema goes in OpenAI's `response_format`
//! (`examples/clients/structured.py`).

use cinder::{GenerateOptions, Llm, Message};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)] // printed through Debug
struct City {
    name: String,
    country: String,
    population: u64,
    coastal: bool,
}

fn main() -> Result<(), cinder::Error> {
    let llm = Llm::load("smollm2-135m")?;
    let ask = [Message::user("Describe a large city as JSON.")];
    let city: City = llm.chat_json_with(&ask, &GenerateOptions::greedy(200))?;
    println!("{city:#?}");
    Ok(())
}
