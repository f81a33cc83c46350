//! Streams generated tokens over gRPC (`cinder.v1.Inference/Generate`) with the client Cinder's
//! server crate generates from `server/proto/cinder/v1/cinder.proto`.
//!
//! ```sh
//! cinder serve smollm2-135m &            # gRPC on 127.0.0.1:50051
//! cargo run --release --example grpc_client -- "The capital of France is"
//! ```

use std::io::Write;

use anyhow::Result;
use cinder::server::grpc::pb::{GenerateRequest, inference_client::InferenceClient};

fn main() -> Result<()> {
    let prompt = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "The capital of France is".into());
    let addr = std::env::var("CINDER_GRPC").unwrap_or_else(|_| "http://127.0.0.1:50051".into());
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let mut client = InferenceClient::connect(addr).await?;
        let mut stream = client
            .generate(GenerateRequest {
                prompt,
                max_tokens: 32,
                ..Default::default()
            })
            .await?
            .into_inner();
        let mut out = std::io::stdout();
        while let Some(m) = stream.message().await? {
            write!(out, "{}", m.text)?;
            out.flush()?;
            if let Some(u) = m.usage {
                writeln!(
                    out,
                    "\n[{}; {} prompt + {} generated tokens]",
                    m.finish_reason, u.prompt_tokens, u.completion_tokens
                )?;
            }
        }
        anyhow::Ok(())
    })
}
