//! Prints a model's rendered chat prompt and its token ids (debugging chat templates).
//!
//! `cargo run --release --example chat_render -- gemma3-270m "Hello"`
use anyhow::Result;
use cinder::gguf::GgufFile;
use cinder::runtime::tokenizer::{ChatMessage, apply_chat_template};
use cinder::tokenizer::Tokenizer;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let model = args.next().unwrap_or_else(|| "smollm2-135m".into());
    let user = args.next().unwrap_or_else(|| "Hello".into());
    let f = GgufFile::open(cinder::catalog::resolve(&model)?.path)?;
    let tok = Tokenizer::from_gguf(&f)?;
    let msgs = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", user),
    ];
    let text = apply_chat_template(&tok, &msgs, true)?;
    println!("{text:?}");
    println!("{:?}", tok.tokenize(&text, false, true)?);
    Ok(())
}
