//! Structured output: generate JSON that is valid under a JSON schema, on any backend.
//!
//! `cargo run --release --example structured` runs on the CPU; add `--features cuda` or
//! `--features wgpu` to run on that backend. Against a running `cinder serve`, the same schema
//! goes in OpenAI's `response_format` (see `examples/clients/structured.py`).

use anyhow::Result;
use cinder::prelude::*;
use cinder::runtime::constraint::{Constraint, Grammars};
use cinder::runtime::tokenizer::{ChatMessage, apply_chat_template};

struct Structured;

impl BackendTask for Structured {
    type Output = Result<serde_json::Value>;

    fn run<B: InferenceBackend>(self, device: B::Device) -> Self::Output {
        let path = cinder::catalog::resolve("smollm2-135m")?.path;
        let m = cinder::importer::load_model::<B>(&path, &device)?;
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 30},
                "country": {"type": "string", "maxLength": 30},
                "population": {"type": "integer", "minimum": 0},
                "coastal": {"type": "boolean"}
            },
            "required": ["city", "country", "population", "coastal"],
            "additionalProperties": false
        });
        // The token trie is built once per model; each request compiles its own matcher.
        let grammars = Grammars::new(&m.tokenizer, m.model.vocab_size())?;
        let matcher = grammars.compile(&Constraint::JsonSchema(schema))?;
        let chat = apply_chat_template(
            &m.tokenizer,
            &[ChatMessage::new("user", "Describe a large city as JSON.")],
            true,
        )?;
        let ids = m.tokenizer.tokenize(&chat, false, true)?;
        let opts = GenerateOptions {
            max_tokens: 200,
            sampling: SamplingParams::greedy(),
            constraint: Some(matcher),
            ..Default::default()
        };
        let out = generate(&m.model, &m.tokenizer, &ids, &opts, &mut |_| true)?;
        // The grammar ends the request where the object is complete: the text parses.
        Ok(serde_json::from_str(&out.text)?)
    }
}

fn main() -> Result<()> {
    let kind = cinder::backends::preferred_kind()?;
    eprintln!("backend: {kind}");
    let v = cinder::backends::dispatch(kind, Structured)??;
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}
