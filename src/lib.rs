//! # Cinder
//!
//! LLM and embedding inference on [Burn](https://burn.dev): one model, written once against
//! Burn's `Backend` trait, runs on CPU (flex, ndarray, candle), wgpu and CUDA, chosen at run time.
//!
//! The front door is [`Llm`] and [`Embedder`]: handles with no backend type parameter, cheap to
//! clone and shared between threads; calls from many threads batch together in one engine.
//!
//! ```no_run
//! use cinder::{GenerateOptions, Llm, Message};
//!
//! let llm = Llm::load("smollm2-135m")?; // catalog name, GGUF file, record or HF directory
//! let out = llm.generate("The capital of France is", &GenerateOptions::greedy(16))?;
//! println!("{}", out.text);
//! let reply = llm.chat(&[Message::system("Be brief."), Message::user("Name three colours.")])?;
//! println!("{}", reply.text);
//! # Ok::<(), cinder::Error>(())
//! ```
//!
//! Underneath, the generic layer stays public for programs that want the backend type: a
//! [`backends::BackendTask`] run by [`backends::dispatch`], [`importer::load_model`] and the
//! engine in [`runtime::engine`].
//!
//! ## Features
//! `flex` (default) and `ndarray`, `candle`, `wgpu`, `cuda` pick the backends compiled in; `cli`
//! (default) builds the `cinder` binary and `server` the HTTP/gRPC server. A library that only
//! generates depends on `cinder = { default-features = false, features = ["flex"] }`.
#![warn(missing_docs)]

pub use cinder_backends as backends;
pub use cinder_catalog as catalog;
pub use cinder_eval as eval;
pub use cinder_gguf as gguf;
pub use cinder_importer as importer;
pub use cinder_index as index;
pub use cinder_models as models;
pub use cinder_runtime as runtime;
#[cfg(feature = "server")]
pub use cinder_server as server;
pub use cinder_tokenizer as tokenizer;

mod embedder;
mod error;
pub mod llm;

pub use cinder_backends::BackendKind;
pub use embedder::{Embedder, TextIndex};
pub use error::{Error, Result};
pub use llm::{
    AsyncTextStream, GenerateOptions, Llm, LlmBuilder, Message, Output, Role, Speculative,
    TextStream, Tool, ToolCall, ToolChoice, ToolReply,
};

/// A model name (catalog entry) or path as a local path: a catalog model is fetched and
/// verified on first use.
fn resolve_model(model: &str) -> Result<std::path::PathBuf> {
    Ok(cinder_catalog::resolve(model)?.path)
}

/// The generic layer's names: for programs that run a [`backends::BackendTask`] on a backend type.
pub mod prelude {
    pub use cinder_backends::{Backend, BackendKind, BackendTask, InferenceBackend, dispatch};
    pub use cinder_runtime::engine::FinishReason;
    pub use cinder_runtime::generate::{
        GenerateOptions, Generation, generate, generate_with_draft,
    };
    pub use cinder_runtime::model::{CausalLm, Logits};
    pub use cinder_runtime::sampler::{Sampler, SamplingParams};
}

/// Peak resident set size of this process in bytes (Linux `VmHWM`), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
