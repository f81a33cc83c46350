//! A multi-turn chat with the default chat model: the model's own chat template, replies streamed.
//!
//! `cargo run --release --example chat -- "First question" "A follow-up"` (no arguments: one
//! message per line from stdin). Built with `--features cuda` or `--features wgpu` it runs there.

use std::io::Write;

use cinder::{GenerateOptions, Llm, Message};

fn main() -> Result<(), cinder::Error> {
    let llm = Llm::load("smollm2-135m")?;
    let mut chat = vec![Message::system("You are a concise assistant.")];
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Without arguments, one turn per stdin line (read as they come: `take(0)` reads nothing).
    let n = if args.is_empty() { usize::MAX } else { 0 };
    let lines = std::io::stdin().lines().map_while(Result::ok).take(n);
    for user in args.into_iter().chain(lines) {
        println!("> {user}");
        chat.push(Message::user(user));
        let mut reply = String::new();
        for piece in llm.stream_chat(&chat, &GenerateOptions::greedy(128))? {
            let piece = piece?;
            print!("{piece}");
            std::io::stdout().flush().ok();
            reply.push_str(&piece);
        }
        println!();
        chat.push(Message::assistant(reply.trim()));
    }
    Ok(())
}
