//! Loading a language model: [`load_model`] for any path (a GGUF file, a record directory, an HF
//! SafeTensors checkpoint), whole on one backend or split across two ([`load_model_offloaded`]).
//!
//! Each format's reader finds the model's config, tensors and tokenizer; what is built from them
//! (the whole model, or one device's share) is decided here, once for every format.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cinder_backends::{BackendKind, BackendTask, dispatch};
use cinder_gguf::GgufFile;
use cinder_models::{AnyModel, Split};
use cinder_runtime::InferenceBackend;
use cinder_tokenizer::Tokenizer;

use crate::arch;
use crate::error::{ImportError, Result};
use crate::gguf_weights::TensorStore;
pub use crate::registry::ArchConfig;

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
    let l = load_source(path, Box::new(|c, s| c.build::<B>(s, device)))?;
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
                let front = c.build_blocks::<A>(s, &device, 0..n)?;
                let back = c.build_decoder::<C>(s, cpu_device, n..usize::MAX)?;
                let names = (A::KIND.name(), C::KIND.name());
                Ok(AnyModel::new(Split::new(front, device, back, names)?))
            }),
        )
    }
}
