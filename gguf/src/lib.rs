//! # cinder-gguf
//!
//! A validating reader for GGUF (v2, v3), the model format of llama.cpp, with scalar reference
//! (de)quantization of the ggml block formats and a GGUF writer. The tokenizers built from
//! `tokenizer.ggml.*` metadata live beside it, in `cinder-tokenizer`.
//!
//! Everything in a file is checked before it is used: counts against the bytes left, string lengths,
//! tensor offsets inside the data section, dims × type size against the bytes, no overlaps. A bad file
//! yields a [`GgufError`] naming the key or tensor and the offset; it never panics and never allocates by
//! an unchecked count.
#![warn(missing_docs)]

pub mod dequant;
mod error;
mod kquant;
pub mod quantize;
mod reader;
mod types;
pub mod writer;

pub use error::{GgufError, Result};
pub use reader::{GgufFile, MAX_ARRAY_NESTING, SharedBytes};
pub use types::{GgmlType, TensorInfo, Value, ValueType};
