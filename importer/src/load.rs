//! Loading a language model: [`load_model`] for any path (a GGUF file, a record directory, an HF
//! SafeTensors checkpoint), whole on one backend or split across two ([`load_model_offloaded`]).
//!
//! Each format's reader finds the model's config, tensors and tokenizer; what is built from them
//! (the whole model, or one device's share) is decided here, once for every format.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use cinder_backends::{BackendKind, BackendTask, dispatch};
use cinder_gguf::GgufFile;
use cinder_models::gemma3::{Gemma3, Gemma3Blocks, Gemma3Config};
use cinder_models::llama::{Llama, LlamaBlocks, LlamaConfig};
use cinder_models::{AnyModel, Blocks, Decoder, Split};
use cinder_runtime::InferenceBackend;
use cinder_tokenizer::Tokenizer;
use serde::{Deserialize, Serialize};

use crate::arch::{self, GEMMA3_GGUF_NAMES, LLAMA_FAMILY, LLAMA_GGUF_NAMES};
use crate::error::{ImportError, Result};
use crate::fused::FusedSplit;
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

/// What a model file gives before anything is built from it: the built share `T`, the tokenizer
/// (checked against the config's vocabulary) and the file facts.
pub(crate) struct Loaded<T> {
    pub(crate) built: T,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) info: ModelInfo,
}

/// How a format's reader hands its config and tensors to whatever is built from them.
pub(crate) type Build<'a, T> = Box<dyn FnOnce(&ArchConfig, &dyn TensorStore) -> Result<T> + 'a>;

/// A decoder's config, whichever architecture (what a record's `config.json` holds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "architecture", content = "config", rename_all = "lowercase")]
pub enum ArchConfig {
    /// Llama 2/3, SmolLM, Mistral, Qwen2, Qwen3, Phi-3
    Llama(LlamaConfig),
    /// Gemma 3
    Gemma3(Gemma3Config),
}

impl ArchConfig {
    /// The config a GGUF file's metadata describes.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let arch_name = file.architecture()?;
        if LLAMA_FAMILY.contains(&arch_name) {
            let tables = arch::llama_family_tables(file, arch_name)?;
            arch::check_tensor_names(file, arch_name, tables)?;
            Ok(Self::Llama(arch::llama_config(file)?))
        } else if arch_name == "gemma3" {
            arch::check_tensor_names(file, arch_name, arch::GEMMA3_GGUF_NAMES)?;
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

    /// Builds the whole model from GGUF-named tensors.
    pub fn build<B: InferenceBackend, S: TensorStore + ?Sized>(
        &self,
        store: &S,
        device: &B::Device,
    ) -> Result<AnyModel<B>> {
        Ok(match self {
            Self::Llama(cfg) => {
                let split = FusedSplit::new(store, cfg);
                let mut src = TableWeights::new(&split, LLAMA_GGUF_NAMES, device.clone());
                AnyModel::new(Llama::load(cfg.clone(), &mut src)?)
            }
            Self::Gemma3(cfg) => {
                let mut src = TableWeights::<B, S>::new(store, GEMMA3_GGUF_NAMES, device.clone());
                AnyModel::new(Gemma3::load(cfg.clone(), &mut src)?)
            }
        })
    }

    /// Builds the embedding and head with blocks `layers` only (the CPU's share of a split model).
    pub fn build_decoder<B: InferenceBackend, S: TensorStore + ?Sized>(
        &self,
        store: &S,
        device: &B::Device,
        layers: Range<usize>,
    ) -> Result<Box<dyn Decoder<B>>> {
        Ok(match self {
            Self::Llama(cfg) => {
                let split = FusedSplit::new(store, cfg);
                let mut src = TableWeights::new(&split, LLAMA_GGUF_NAMES, device.clone());
                Box::new(Llama::load_layers(cfg.clone(), &mut src, layers)?)
            }
            Self::Gemma3(cfg) => {
                let mut src = TableWeights::<B, S>::new(store, GEMMA3_GGUF_NAMES, device.clone());
                Box::new(Gemma3::load_layers(cfg.clone(), &mut src, layers)?)
            }
        })
    }

    /// Builds blocks `layers` alone (the accelerator's share of a split model).
    pub fn build_blocks<B: InferenceBackend, S: TensorStore + ?Sized>(
        &self,
        store: &S,
        device: &B::Device,
        layers: Range<usize>,
    ) -> Result<Box<dyn Blocks<B>>> {
        Ok(match self {
            Self::Llama(cfg) => {
                let split = FusedSplit::new(store, cfg);
                let mut src = TableWeights::new(&split, LLAMA_GGUF_NAMES, device.clone());
                Box::new(LlamaBlocks::load(cfg.clone(), &mut src, layers)?)
            }
            Self::Gemma3(cfg) => {
                let mut src = TableWeights::<B, S>::new(store, GEMMA3_GGUF_NAMES, device.clone());
                Box::new(Gemma3Blocks::load(cfg.clone(), &mut src, layers)?)
            }
        })
    }

    /// The number of transformer blocks.
    pub fn n_layers(&self) -> usize {
        match self {
            Self::Llama(c) => c.n_layers,
            Self::Gemma3(c) => c.n_layers,
        }
    }
}

/// Reads the model at `path` (a record directory, an HF SafeTensors checkpoint directory, or a GGUF
/// file) and builds `build` from it.
fn load_source<T>(path: &Path, build: Build<'_, T>) -> Result<Loaded<T>> {
    crate::embedding::refuse_pickle(path)?;
    if crate::record::is_record(path) {
        crate::record::load_record_with(path, build)
    } else if path.is_dir() && crate::hf_llama::is_hf_checkpoint(path) {
        crate::record::load_hf_with(path, build)
    } else if path.is_dir() {
        Err(ImportError::Record {
            path: path.to_path_buf(),
            reason: "a directory that is neither a Cinder record (manifest.json) nor an HF \
                     checkpoint (config.json + model.safetensors)"
                .into(),
        })
    } else {
        load_gguf_with(path, build)
    }
}

/// A GGUF file: validated, its tokenizer checked against the embedding, then `build`.
fn load_gguf_with<T>(path: &Path, build: Build<'_, T>) -> Result<Loaded<T>> {
    let file = GgufFile::open(path)?;
    let info = ModelInfo::from_gguf(path, &file);
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let rows = arch::embedding_rows(&file)?;
    tokenizer
        .validate_against_model(rows)
        .map_err(|e| ImportError::TokenizerMismatch(e.to_string()))?;
    let built = build(&ArchConfig::from_gguf(&file)?, &file)?;
    Ok(Loaded {
        built,
        tokenizer,
        info,
    })
}

/// Loads any LLM path (a record directory, an HF SafeTensors checkpoint directory, or a GGUF file)
/// whole on `device`. A record's checksums are verified before the model is handed out.
pub fn load_model<B: InferenceBackend>(path: &Path, device: &B::Device) -> Result<LoadedModel<B>> {
    let l = load_source(path, Box::new(|c, s| c.build::<B, _>(s, device)))?;
    tracing::info!(arch = %l.info.arch, params = l.info.n_params, "model loaded");
    Ok(LoadedModel {
        model: l.built,
        tokenizer: std::sync::Arc::new(l.tokenizer),
        info: l.info,
    })
}

/// Layer offload: the first `layers` transformer blocks on the accelerator backend `accel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offload {
    /// the accelerator (wgpu or cuda)
    pub accel: BackendKind,
    /// how many blocks it runs (more than the model has: all of them)
    pub layers: usize,
}

/// [`load_model`] with the first `offload.layers` transformer blocks on the accelerator
/// `offload.accel` and the rest, with the embedding and the head, on the CPU backend `C`
/// ([`Split`]). 0 layers loads the model whole on `C`. Each backend builds only its share of the
/// weights.
pub fn load_model_offloaded<C: InferenceBackend>(
    path: &Path,
    cpu_device: &C::Device,
    offload: Offload,
) -> Result<LoadedModel<C>> {
    if offload.layers == 0 {
        return load_model(path, cpu_device);
    }
    let accel = offload.accel;
    if accel.is_cpu() || !C::KIND.is_cpu() {
        return Err(ImportError::Offload(format!(
            "layer offload runs the first layers on an accelerator (wgpu, cuda) and the rest on a \
             CPU backend (flex, ndarray, candle), not {accel} + {}",
            C::KIND
        )));
    }
    let Loaded {
        built: model,
        tokenizer,
        info,
    } = dispatch(
        accel,
        Front::<C> {
            path,
            cpu_device,
            layers: offload.layers,
        },
    )??;
    if let Some(p) = model.placement() {
        tracing::info!(placement = %p, "model split between backends");
    }
    Ok(LoadedModel {
        model,
        tokenizer: std::sync::Arc::new(tokenizer),
        info,
    })
}

/// Builds both shares of a split model from one read of the file: blocks `0..n` on the
/// accelerator `A` it is dispatched to, the rest with the ends on `C`.
struct Front<'a, C: InferenceBackend> {
    path: &'a Path,
    cpu_device: &'a C::Device,
    layers: usize,
}

impl<C: InferenceBackend> BackendTask for Front<'_, C> {
    type Output = Result<Loaded<AnyModel<C>>>;

    fn run<A: InferenceBackend>(self, device: A::Device) -> Self::Output {
        let cpu_device = self.cpu_device;
        let layers = self.layers;
        load_source(
            self.path,
            Box::new(move |c, s| {
                let n = layers.min(c.n_layers());
                let front = c.build_blocks::<A, _>(s, &device, 0..n)?;
                let back = c.build_decoder::<C, _>(s, cpu_device, n..usize::MAX)?;
                let names = (A::KIND.name(), C::KIND.name());
                Ok(AnyModel::new(Split::new(front, device, back, names)?))
            }),
        )
    }
}
