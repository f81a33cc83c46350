//! Streams a chat completion from `cinder serve` with plain HTTP (reqwest) and prints the tokens as
//! they arrive. Any OpenAI client library works the same way (`base_url = http://127.0.0.1:8080/v1`).
//!
//! ```sh
//! cinder serve smollm2-135m &
//! cargo run --release --example openai_client -- "Why is the sky blue?"
//! ```

use std::io::{BufRead, BufReader, Write};

use anyhow::{Context, Result, bail};

fn main() -> Result<()> {
    let question = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "What is the capital of France?".into());
    let url = std::env::var("CINDER_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let mut req = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .json(&serde_json::json!({
            "model": "smollm2-135m",
            "messages": [{"role": "user", "content": question}],
            "max_tokens": 128, "temperature": 0.7, "stream": true,
        }));
    if let Ok(key) = std::env::var("CINDER_API_KEY") {
        req = req.bearer_auth(key);
    }
    let resp = req.send().context("is `cinder serve` running?")?;
    if !resp.status().is_success() {
        let status = resp.status();
        bail!("{status}: {}", resp.text().unwrap_or_default());
    }
    let mut out = std::io::stdout().lock();
    for line in BufReader::new(resp).lines() {
        let line = line?;
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let chunk: serde_json::Value = serde_json::from_str(data)?;
        if let Some(t) = chunk["choices"][0]["delta"]["content"].as_str() {
            write!(out, "{t}")?;
            out.flush()?;
        }
    }
    writeln!(out)?;
    Ok(())
}
