//! # cinder-importer
//!
//! Turns checkpoint files into Cinder models: the GGUF reader ([`gguf`], re-exported from `cinder-gguf`),
//! per-architecture configs and declarative name tables ([`arch`]), a [`WeightSource`] over GGUF tensors,
//! tokenizer construction, sentence-embedding models from SafeTensors or ONNX ([`embedding`]),
//! Llama-family HF SafeTensors checkpoints ([`hf_llama`]), Burn records with checksum manifests
//! ([`record`]), and the model [`catalog`].
//!
//! [`WeightSource`]: cinder_models::WeightSource
#![warn(missing_docs)]

pub mod arch;
pub mod embedding;
mod error;
mod gguf_weights;
pub mod hf_llama;
mod load;
mod offload;
pub mod record;

pub use cinder_catalog as catalog;
pub use cinder_gguf as gguf;
pub use embedding::load_embedder;
pub use error::{ImportError, Result};
pub use gguf_weights::{GgufWeights, StoredTensor, TableWeights, TensorStore};
pub use load::{ArchConfig, LoadedModel, ModelInfo, load_gguf};
pub use offload::load_model_offloaded;
pub use record::{ImportOptions, import, load_model, load_model_part, load_record};
