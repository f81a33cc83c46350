//! # cinder-importer
//!
//! Turns checkpoint files into Cinder models: one [`Source`] that tells a path's [`Format`] and
//! reads a language model's parts from it, the architecture [`registry`] the loader consults
//! (built-ins and any crate's own), per-architecture configs and declarative name tables
//! ([`arch`]), a [`WeightSource`] over GGUF tensors (read by `cinder-gguf`), tokenizers (built by
//! `cinder-tokenizer`), sentence-embedding models from SafeTensors or ONNX ([`embedding`]),
//! Llama-family HF SafeTensors checkpoints ([`hf_llama`]), and Burn records with checksum manifests
//! ([`record`]). Catalog names are resolved by `cinder-catalog`.
//!
//! [`WeightSource`]: cinder_models::WeightSource
#![warn(missing_docs)]

pub mod arch;
mod builtin;
pub mod embedding;
mod error;
mod fused;
mod gguf_weights;
pub mod hf_llama;
mod import;
mod load;
pub mod record;
pub mod registry;
mod source;

pub use embedding::{EmbedderKind, EmbedderSource, load_embedder, load_text_embedder};
pub use error::{ImportError, Result};
pub use gguf_weights::{GgufWeights, StoredTensor, TableWeights, TensorStore};
pub use import::{ImportOptions, import};
pub use load::{LoadedModel, Offload, load_model, load_model_offloaded};
pub use registry::{ArchConfig, Architecture, ArchitectureConfig, register};
pub use source::{Format, ModelInfo, Source};
