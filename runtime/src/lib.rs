//! # cinder-runtime
//!
//! Backend-agnostic machinery between a model and a user: the attention op and its KV cache, the linear
//! layer abstraction, the paged KV cache, the continuous-batching scheduler and engine, sampling, the
//! generation loop, and the tokenizer wrapper (chat templates,
//! incremental detokenization). Models call into this crate; it never names a concrete backend.
#![warn(missing_docs)]

pub mod attention;
pub mod constraint;
pub mod engine;
mod error;
pub mod generate;
pub mod kv;
pub mod model;
pub mod quant;
pub mod reasoning;
pub mod scheduler;

pub use cinder_backends::InferenceBackend;
pub use cinder_backends::fused::{Glu, RopeStyle};
pub mod sampler;
pub mod tokenizer;
pub mod tools;

pub use error::{Result, RuntimeError};
