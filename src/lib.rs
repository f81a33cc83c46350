//! # Cinder
//!
//! Backend-agnostic LLM and embedding inference on [Burn](https://burn.dev). One model, written once
//! against Burn's `Backend` trait, runs on CPU (flex, ndarray, candle), wgpu and CUDA.
//!
//! The facade re-exports the workspace crates; the `cinder` binary is built on them.
//!
//! ```no_run
//! use cinder::prelude::*;
//!
//! struct Hello;
//! impl BackendTask for Hello {
//!     type Output = anyhow::Result<String>;
//!     fn run<B: InferenceBackend>(self, device: B::Device) -> Self::Output {
//!         let path = cinder::catalog::resolve("smollm2-135m")?.path;
//!         let m = cinder::importer::load_model::<B>(&path, &device)?;
//!         let ids = m.tokenizer.encode("The capital of France is", true)?;
//!         let opts = GenerateOptions { max_tokens: 8, sampling: SamplingParams::greedy(), ..Default::default() };
//!         let out = generate(&m.model, &m.tokenizer, &ids, &opts, &mut |_| true)?;
//!         Ok(out.text)
//!     }
//! }
//! let text = cinder::backends::dispatch(cinder::backends::default_kind()?, Hello)??;
//! # Ok::<(), anyhow::Error>(())
//! ```
#![warn(missing_docs)]

pub use cinder_backends as backends;
pub use cinder_catalog as catalog;
pub use cinder_gguf as gguf;
pub use cinder_importer as importer;
pub use cinder_index as index;
pub use cinder_models as models;
pub use cinder_runtime as runtime;
pub use cinder_server as server;
pub use cinder_tokenizer as tokenizer;

/// The names most programs need.
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
