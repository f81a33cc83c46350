//! A multi-turn chat with the default chat model: the model's own chat template, the conversation
//! re-rendered every turn, replies streamed as they are generated.
//!
//! `cargo run --release --example chat -- "First question" "A follow-up"` (no arguments: read one
//! message per line from stdin). Add `--features cuda` or `--features wgpu` to run on that backend
//! (`CINDER_BACKEND=flex|ndarray|candle|wgpu|cuda` picks one explicitly).

use std::io::{BufRead, Write};

use anyhow::Result;
use cinder::prelude::*;
use cinder::runtime::tokenizer::{ChatMessage, apply_chat_template};

struct Chat {
    turns: Vec<String>,
}

impl BackendTask for Chat {
    type Output = Result<()>;

    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let path = cinder::catalog::resolve("smollm2-135m")?.path;
        let m = cinder::importer::load_model::<B>(&path, &device)?;
        let opts = GenerateOptions {
            max_tokens: 128,
            sampling: SamplingParams::greedy(),
            ..Default::default()
        };
        let mut messages = vec![ChatMessage::new("system", "You are a concise assistant.")];
        let mut turn = |user: String| -> Result<()> {
            println!("> {user}");
            messages.push(ChatMessage::new("user", user));
            // The template writes the control tokens (`<|im_start|>`), which must be parsed as
            // special tokens, not as text.
            let text = apply_chat_template(&m.tokenizer, &messages, true)?;
            let ids = m.tokenizer.tokenize(&text, false, true)?;
            let out = generate(&m.model, &m.tokenizer, &ids, &opts, &mut |piece| {
                print!("{piece}");
                std::io::stdout().flush().is_ok()
            })?;
            println!();
            messages.push(ChatMessage::new("assistant", out.text.trim().to_string()));
            Ok(())
        };
        if !self.turns.is_empty() {
            return self.turns.into_iter().try_for_each(&mut turn);
        }
        for line in std::io::stdin().lock().lines() {
            let line = line?;
            if !line.trim().is_empty() {
                turn(line)?;
            }
        }
        Ok(())
    }
}

fn main() -> Result<()> {
    let turns: Vec<String> = std::env::args().skip(1).collect();
    let kind = cinder::backends::preferred_kind()?;
    eprintln!("backend: {kind}");
    cinder::backends::dispatch(kind, Chat { turns })??;
    Ok(())
}
