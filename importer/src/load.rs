//! Loading a GGUF file into a ready model + tokenizer.

use cinder_runtime::InferenceBackend;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cinder_gguf::GgufFile;
use cinder_models::gemma3::{Gemma3, Gemma3Config};
use cinder_models::llama::{Llama, LlamaConfig};
use cinder_models::{AnyModel, ModelPart};
use cinder_tokenizer::Tokenizer;
use serde::{Deserialize, Serialize};

use crate::arch::{self, GEMMA3_GGUF_NAMES, LLAMA_FAMILY, LLAMA_GGUF_NAMES};
use crate::error::{ImportError, Result};
use crate::gguf_weights::{TableWeights, TensorStore};

/// What `cinder info` reports about a file.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// the file
    pub path: PathBuf,
    /// `general.architecture`
    pub arch: String,
    /// `general.name`, if set
    pub name: Option<String>,
    /// GGUF version
    pub gguf_version: u32,
    /// file size in bytes
    pub file_bytes: u64,
    /// total parameters (elements of all tensors)
    pub n_params: u64,
    /// tensor count by storage type
    pub type_histogram: BTreeMap<String, usize>,
    /// tokenizer model (`gpt2`, `llama`, `bert`)
    pub tokenizer_model: String,
}

impl ModelInfo {
    /// Collects the info from an open file.
    pub fn from_gguf(path: &Path, f: &GgufFile) -> Self {
        let mut type_histogram = BTreeMap::new();
        for t in f.tensors() {
            *type_histogram
                .entry(t.ggml_type.name().to_string())
                .or_insert(0) += 1;
        }
        Self {
            path: path.to_path_buf(),
            arch: f.architecture().unwrap_or("?").to_string(),
            name: f
                .get("general.name")
                .and_then(|v| v.as_str())
                .map(str::to_string),
            gguf_version: f.version(),
            file_bytes: f.bytes().len() as u64,
            n_params: f.tensors().iter().map(|t| t.n_elements()).sum(),
            type_histogram,
            tokenizer_model: f
                .get("tokenizer.ggml.model")
                .and_then(|v| v.as_str())
                .unwrap_or("none")
                .to_string(),
        }
    }
}

/// A model ready to run, with its tokenizer and the file it came from.
pub struct LoadedModel<B: InferenceBackend> {
    /// the network
    pub model: AnyModel<B>,
    /// the tokenizer built from the same file (shared with engines)
    pub tokenizer: std::sync::Arc<Tokenizer>,
    /// file facts
    pub info: ModelInfo,
}

/// A decoder's config, whichever architecture (what a record's `config.json` holds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "architecture", content = "config", rename_all = "lowercase")]
pub enum ArchConfig {
    /// Llama, SmolLM, Mistral, Qwen2
    Llama(LlamaConfig),
    /// Gemma 3
    Gemma3(Gemma3Config),
}

impl ArchConfig {
    /// The config a GGUF file's metadata describes.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let arch_name = file.architecture()?;
        if LLAMA_FAMILY.contains(&arch_name) {
            Ok(Self::Llama(arch::llama_config(file)?))
        } else if arch_name == "gemma3" {
            Ok(Self::Gemma3(arch::gemma3_config(file)?))
        } else {
            Err(ImportError::UnsupportedArch(
                arch_name.to_string(),
                format!("{}, gemma3", LLAMA_FAMILY.join(", ")),
            ))
        }
    }

    /// Embedding rows (the vocabulary the tokenizer must fit).
    pub fn vocab_size(&self) -> usize {
        match self {
            Self::Llama(c) => c.vocab_size,
            Self::Gemma3(c) => c.vocab_size,
        }
    }

    /// Builds the model from GGUF-named tensors.
    pub fn build<B: InferenceBackend, S: TensorStore + ?Sized>(
        &self,
        store: &S,
        device: &B::Device,
    ) -> Result<AnyModel<B>> {
        self.build_part(store, device, &ModelPart::whole())
    }

    /// Builds `part` of the model (one device's share when layers are offloaded).
    pub fn build_part<B: InferenceBackend, S: TensorStore + ?Sized>(
        &self,
        store: &S,
        device: &B::Device,
        part: &ModelPart,
    ) -> Result<AnyModel<B>> {
        Ok(match self {
            Self::Llama(cfg) => {
                let mut src = TableWeights::<B, S>::new(store, LLAMA_GGUF_NAMES, device.clone());
                AnyModel::Llama(Llama::load_part(cfg.clone(), &mut src, part)?)
            }
            Self::Gemma3(cfg) => {
                let mut src = TableWeights::<B, S>::new(store, GEMMA3_GGUF_NAMES, device.clone());
                AnyModel::Gemma3(Gemma3::load_part(cfg.clone(), &mut src, part)?)
            }
        })
    }
}

/// Opens `path`, validates it, builds the tokenizer and the model on `device`.
pub fn load_gguf<B: InferenceBackend>(path: &Path, device: &B::Device) -> Result<LoadedModel<B>> {
    load_gguf_part(path, device, &ModelPart::whole())
}

/// [`load_gguf`], building only `part` of the model.
pub fn load_gguf_part<B: InferenceBackend>(
    path: &Path,
    device: &B::Device,
    part: &ModelPart,
) -> Result<LoadedModel<B>> {
    let file = GgufFile::open(path)?;
    let info = ModelInfo::from_gguf(path, &file);
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let rows = arch::embedding_rows(&file)?;
    tokenizer
        .validate_against_model(rows)
        .map_err(|e| ImportError::TokenizerMismatch(e.to_string()))?;
    let model = ArchConfig::from_gguf(&file)?.build_part::<B, _>(&file, device, part)?;
    tracing::info!(arch = %info.arch, params = info.n_params, "model loaded");
    Ok(LoadedModel {
        model,
        tokenizer: std::sync::Arc::new(tokenizer),
        info,
    })
}
