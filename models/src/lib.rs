//! # cinder-models
//!
//! Model architectures written once against Burn's `Backend` trait: [`llama`] (Llama 2/3, SmolLM, Mistral,
//! Qwen2, Qwen3, Phi-3; Qwen3-MoE with [`moe`]), [`gemma3`] and the [`bert`] encoder behind [`embed`]'s sentence embeddings; [`decoder_embed`] pools a
//! decoder's hidden states into embeddings; [`gemma3_embed`] runs Gemma 3 bidirectionally as EmbeddingGemma. Each has a `Config` with `validate()`, a `load` from a [`WeightSource`], and a
//! `forward` that goes through the runtime's linear layer and attention op, so models never branch on
//! backend, quantization or cache layout.
#![warn(missing_docs)]

pub mod bert;
pub mod decoder;
pub mod decoder_embed;
pub mod embed;
mod error;
pub mod gemma3;
pub mod gemma3_embed;
pub mod layers;
pub mod llama;
mod loader;
pub mod moe;
pub mod split;

pub use decoder::{AnyModel, Blocks, Decoder, LanguageModel};
pub use error::{ModelError, Result};
pub use loader::WeightSource;
pub use split::Split;
