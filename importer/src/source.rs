//! What a model path holds, told once ([`Format::detect`]), and a language model's parts read from
//! it whatever the format ([`Source::open`]): its config, its tensors, its tokenizer (checked
//! against the config's vocabulary) and the facts `cinder info` reports ([`ModelInfo`]).
//!
//! Every loader asks [`Format::detect`]: [`crate::load_model`] (through [`Source`]), the record
//! importer and the embedding loaders, so a path means the same thing to all of them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use cinder_gguf::GgufFile;
use cinder_tokenizer::Tokenizer;

use crate::error::{ImportError, Result};
use crate::gguf_weights::{StoredTensor, TensorStore};
use crate::registry::ArchConfig;

/// The formats Cinder reads models from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// a GGUF file (and any file that is not one of the others: the GGUF reader names what is
    /// wrong with it)
    Gguf,
    /// a Cinder record directory (`manifest.json`, written by `cinder import`)
    Record,
    /// a Hugging Face checkpoint of a language model: `config.json` naming a `*ForCausalLM`
    /// architecture beside `model.safetensors` or its shards
    HfCheckpoint,
    /// a sentence-transformers or HF encoder folder (BERT, EmbeddingGemma), or its
    /// `.safetensors` file
    SentenceTransformers,
    /// an ONNX graph: a `.onnx` file, or a folder holding exactly one
    Onnx,
}

/// Extensions of pickle-based checkpoints, which can run code when loaded.
const PICKLE_EXTENSIONS: &[&str] = &["bin", "pt", "pth", "ckpt", "pkl", "pickle"];

fn file_err(path: &Path, reason: impl Into<String>) -> ImportError {
    ImportError::File {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn ext(p: &Path) -> String {
    p.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Refuses pickle-based checkpoints (`.bin`, `.pt`, `.pth`, `.ckpt`, `.pkl`, `.pickle`): loading one can run
/// arbitrary code.
pub(crate) fn refuse_pickle(path: &Path) -> Result<()> {
    if PICKLE_EXTENSIONS.contains(&ext(path).as_str()) {
        return Err(file_err(
            path,
            "pickle checkpoints can execute arbitrary code when loaded and are refused; convert \
             the model to SafeTensors (e.g. `save_pretrained(..., safe_serialization=True)`)",
        ));
    }
    Ok(())
}

/// The `.onnx` files directly in `dir`, sorted.
pub(crate) fn onnx_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|source| ImportError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut onnx: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| ext(p) == "onnx")
        .collect();
    onnx.sort();
    Ok(onnx)
}

/// The `architectures[0]` the `config.json` in `dir` declares ("" when it declares none).
fn declared_architecture(dir: &Path) -> Result<String> {
    let p = dir.join("config.json");
    let text = std::fs::read_to_string(&p).map_err(|source| ImportError::Io {
        path: p.clone(),
        source,
    })?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| file_err(&p, format!("not JSON: {e}")))?;
    Ok(v.get("architectures")
        .and_then(|a| a.get(0))
        .and_then(serde_json::Value::as_str)
        .unwrap_or("")
        .to_string())
}

/// Whether the `config.json` in `dir` declares a language model (`*ForCausalLM`, or an
/// architecture a registered [`crate::Architecture`] reads), rather than an encoder.
fn declares_language_model(dir: &Path) -> Result<bool> {
    let declared = declared_architecture(dir)?;
    Ok(declared.ends_with("ForCausalLM")
        || crate::registry::hf_architectures().contains(&declared.as_str()))
}

impl Format {
    /// Tells what `path` holds. Pickle checkpoints are refused here, for every loader.
    ///
    /// A directory is a [`Format::Record`] when it has `manifest.json`; with `config.json` and
    /// SafeTensors weights it is an [`Format::HfCheckpoint`] when the config declares a language
    /// model and a [`Format::SentenceTransformers`] folder otherwise; with one `.onnx` file, that
    /// [`Format::Onnx`] graph. A file is told by its extension (`.onnx`, `.safetensors`, as its
    /// folder) or is read as GGUF.
    ///
    /// # Examples
    ///
    /// ```
    /// use cinder_importer::Format;
    /// let dir = tempfile::tempdir()?;
    /// let onnx = dir.path().join("model.onnx");
    /// std::fs::write(&onnx, b"")?;
    /// assert_eq!(Format::detect(&onnx)?, Format::Onnx);
    /// assert_eq!(Format::detect(dir.path())?, Format::Onnx);
    /// assert!(Format::detect(&dir.path().join("pytorch_model.bin")).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn detect(path: &Path) -> Result<Format> {
        refuse_pickle(path)?;
        if path.is_dir() {
            if crate::record::is_record(path) {
                return Ok(Format::Record);
            }
            if crate::hf_llama::is_hf_checkpoint(path) {
                return Ok(if declares_language_model(path)? {
                    Format::HfCheckpoint
                } else {
                    Format::SentenceTransformers
                });
            }
            if path.join("model.safetensors").is_file() {
                // the embedding loader names the missing config.json
                return Ok(Format::SentenceTransformers);
            }
            return match onnx_files(path)?.len() {
                1 => Ok(Format::Onnx),
                0 => Err(file_err(
                    path,
                    "a directory that is neither a Cinder record (manifest.json), a Hugging Face \
                     checkpoint (config.json + model.safetensors), nor a folder with one .onnx \
                     file (pickle .bin checkpoints are refused: convert them to SafeTensors)",
                )),
                _ => Err(file_err(
                    path,
                    "several .onnx files here: name the one to load",
                )),
            };
        }
        if !path.is_file() {
            return Err(file_err(path, "no such file or directory"));
        }
        match ext(path).as_str() {
            "onnx" => Ok(Format::Onnx),
            "safetensors" => {
                let dir = path
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                if dir.join("config.json").is_file() && declares_language_model(dir)? {
                    Ok(Format::HfCheckpoint)
                } else {
                    Ok(Format::SentenceTransformers)
                }
            }
            _ => Ok(Format::Gguf),
        }
    }

    /// The short name reports use (`gguf`, `record`, `safetensors`, `sentence-transformers`,
    /// `onnx`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Gguf => "gguf",
            Format::Record => "record",
            Format::HfCheckpoint => "safetensors",
            Format::SentenceTransformers => "sentence-transformers",
            Format::Onnx => "onnx",
        }
    }

    /// Whether a language model (a decoder [`crate::load_model`] builds) comes in this format.
    pub fn holds_language_model(self) -> bool {
        matches!(self, Format::Gguf | Format::Record | Format::HfCheckpoint)
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What `cinder info` reports about a model, whatever its format.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// the file or directory
    pub path: PathBuf,
    /// what it is
    pub format: Format,
    /// the format's own version, where it has one (GGUF's version, a record's format version)
    pub format_version: Option<u32>,
    /// the architecture (GGUF's `general.architecture` names: `llama`, `qwen2`, `gemma3`, …)
    pub arch: String,
    /// the model's name, if the source gives one
    pub name: Option<String>,
    /// bytes of weights read (the GGUF file, the record's pack, the SafeTensors tensors)
    pub file_bytes: u64,
    /// total parameters (elements of all tensors)
    pub n_params: u64,
    /// tensor count by storage type
    pub type_histogram: BTreeMap<String, usize>,
    /// tokenizer model (`gpt2`, `llama`, `bert`, or the HF tokenizer's kind)
    pub tokenizer_model: String,
}

impl ModelInfo {
    /// Collects the info from an open GGUF file.
    pub fn from_gguf(path: &Path, f: &GgufFile) -> Self {
        let (n_params, type_histogram) = summarize(
            f.tensors()
                .iter()
                .map(|t| (t.ggml_type.name(), t.dims.as_slice())),
        );
        Self {
            path: path.to_path_buf(),
            format: Format::Gguf,
            format_version: Some(f.version()),
            arch: f.architecture().unwrap_or("?").to_string(),
            name: f
                .get("general.name")
                .and_then(|v| v.as_str())
                .map(str::to_string),
            file_bytes: f.bytes().len() as u64,
            n_params,
            type_histogram,
            tokenizer_model: f
                .get("tokenizer.ggml.model")
                .and_then(|v| v.as_str())
                .unwrap_or("none")
                .to_string(),
        }
    }
}

/// Parameter count and tensor count per type name of `(type, dims)` pairs.
pub(crate) fn summarize<'a>(
    tensors: impl Iterator<Item = (&'a str, &'a [u64])>,
) -> (u64, BTreeMap<String, usize>) {
    let mut hist = BTreeMap::new();
    let mut params = 0u64;
    for (ty, dims) in tensors {
        *hist.entry(ty.to_string()).or_insert(0) += 1;
        params += dims.iter().product::<u64>();
    }
    (params, hist)
}

/// A source's tensors: a GGUF file's own, or a list read from SafeTensors or a record's pack.
pub(crate) enum Tensors {
    Gguf(GgufFile),
    Stored {
        list: Vec<(String, StoredTensor)>,
        index: HashMap<String, usize>,
    },
}

impl Tensors {
    pub(crate) fn stored(list: Vec<(String, StoredTensor)>) -> Self {
        let index = list
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i))
            .collect();
        Tensors::Stored { list, index }
    }
}

impl TensorStore for Tensors {
    fn stored(&self, name: &str) -> Option<StoredTensor> {
        match self {
            Tensors::Gguf(f) => f.stored(name),
            Tensors::Stored { list, index } => index.get(name).map(|&i| list[i].1.clone()),
        }
    }
}

/// How a format's reader hands its config and tensors to whatever is built from them.
pub(crate) type Build<'a, T> = Box<dyn FnOnce(&ArchConfig, &dyn TensorStore) -> Result<T> + 'a>;

/// What a model source gives once something is built from it: the built share `T`, the tokenizer
/// and the facts.
pub(crate) struct Loaded<T> {
    pub(crate) built: T,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) info: ModelInfo,
}

/// A language model's parts, read from a GGUF file, a record or an HF checkpoint: the config, the
/// tensors, the tokenizer (checked against the config's vocabulary) and the facts. Nothing is built
/// yet; [`Source::build`] builds the model on a backend.
///
/// A record's checksums are verified on background threads from the moment it is opened;
/// [`Source::build`] (or [`Source::verify`]) waits for them, so a model is never handed out from a
/// changed file.
///
/// # Examples
///
/// ```no_run
/// use cinder_backends::InferenceBackend;
/// use cinder_importer::{Format, Source};
/// fn load<B: InferenceBackend>(device: &B::Device) -> cinder_importer::Result<()> {
///     let src = Source::open(std::path::Path::new("model.gguf"))?;
///     assert_eq!(src.format(), Format::Gguf);
///     tracing::info!(arch = %src.info().arch, params = src.info().n_params, "opened");
///     let model = src.build::<B>(device)?;
///     Ok(())
/// }
/// ```
pub struct Source {
    pub(crate) config: ArchConfig,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) tensors: Tensors,
    pub(crate) info: ModelInfo,
    /// every file read (weights, config, tokenizer files)
    pub(crate) files: Vec<PathBuf>,
    pending: Option<crate::record::PendingVerification>,
}

impl Source {
    /// Reads the language model at `path` (a GGUF file, a record directory, an HF checkpoint
    /// folder); an embedding model's folder or ONNX graph is refused with the loader to use.
    pub fn open(path: &Path) -> Result<Source> {
        Self::open_as(path, None)
    }

    /// [`Source::open`], with the architecture the source must be (`cinder import --arch`).
    pub(crate) fn open_as(path: &Path, arch: Option<&str>) -> Result<Source> {
        let format = Format::detect(path)?;
        let src = match format {
            Format::Gguf => Self::gguf(path, arch)?,
            Format::Record => {
                let r = crate::record::open(path)?;
                let src = Source {
                    config: r.config,
                    tokenizer: r.tokenizer,
                    tensors: Tensors::stored(r.tensors),
                    info: r.info,
                    files: r.files,
                    pending: Some(r.pending),
                };
                if let Some(a) = arch.filter(|a| *a != src.info.arch) {
                    return Err(file_err(
                        path,
                        format!("--arch {a} but the record is {}", src.info.arch),
                    ));
                }
                src.checked()?
            }
            Format::HfCheckpoint => Self::hf(path, arch)?.checked()?,
            Format::SentenceTransformers | Format::Onnx => {
                return Err(file_err(
                    path,
                    format!(
                        "a sentence-embedding model ({format}), not a language model: load it as \
                         an embedder (`cinder embed`, `cinder::Embedder`)"
                    ),
                ));
            }
        };
        Ok(src)
    }

    /// Checks the tokenizer against the config's vocabulary (a GGUF file's is checked against
    /// its embedding rows as it is read). A record's hashes are waited for first when it fails,
    /// so a changed file is named as such.
    fn checked(mut self) -> Result<Source> {
        if let Err(e) = self
            .tokenizer
            .validate_against_model(self.config.vocab_size())
        {
            self.verify()?;
            return Err(ImportError::TokenizerMismatch(e.to_string()));
        }
        Ok(self)
    }

    fn gguf(path: &Path, arch: Option<&str>) -> Result<Source> {
        let file = GgufFile::open(path)?;
        let info = ModelInfo::from_gguf(path, &file);
        if let Some(a) = arch.filter(|a| *a != info.arch) {
            return Err(file_err(
                path,
                format!("--arch {a} but the file is {}", info.arch),
            ));
        }
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let rows = crate::arch::embedding_rows(&file)?;
        tokenizer
            .validate_against_model(rows)
            .map_err(|e| ImportError::TokenizerMismatch(e.to_string()))?;
        Ok(Source {
            config: ArchConfig::from_gguf(&file)?,
            tokenizer,
            tensors: Tensors::Gguf(file),
            info,
            files: vec![path.to_path_buf()],
            pending: None,
        })
    }

    fn hf(path: &Path, arch: Option<&str>) -> Result<Source> {
        let dir = if path.is_dir() {
            path
        } else {
            path.parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
        };
        let declared = declared_architecture(dir)?;
        let (config, ck) = crate::registry::read_hf(dir, &declared, arch)?;
        let tok_path = dir.join("tokenizer.json");
        if !tok_path.is_file() {
            return Err(file_err(
                dir,
                "tokenizer.json is missing (Cinder needs the model's own tokenizer)",
            ));
        }
        let tokenizer = Tokenizer::from_tokenizer_json(&tok_path)?;
        let mut files = ck.sources.clone();
        for f in ["tokenizer.json", "tokenizer_config.json"] {
            if dir.join(f).is_file() {
                files.push(dir.join(f));
            }
        }
        let (n_params, type_histogram) = summarize(
            ck.tensors
                .iter()
                .map(|(_, t)| (t.ty.name(), t.dims.as_slice())),
        );
        let info = ModelInfo {
            path: dir.to_path_buf(),
            format: Format::HfCheckpoint,
            format_version: None,
            arch: ck.arch.clone(),
            name: ck.name.clone(),
            file_bytes: ck.tensors.iter().map(|(_, t)| t.data.len() as u64).sum(),
            n_params,
            type_histogram,
            tokenizer_model: format!("{:?}", tokenizer.kind).to_lowercase(),
        };
        Ok(Source {
            config,
            tokenizer,
            tensors: Tensors::stored(ck.tensors),
            info,
            files,
            pending: None,
        })
    }

    /// What the source is.
    pub fn format(&self) -> Format {
        self.info.format
    }

    /// The model config (the registered architecture's own config inside).
    pub fn config(&self) -> &ArchConfig {
        &self.config
    }

    /// The tokenizer, already checked against the config's vocabulary.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The tensors, by GGUF name, as stored (quantized blocks stay blocks).
    pub fn tensors(&self) -> &dyn TensorStore {
        &self.tensors
    }

    /// The facts `cinder info` reports.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Every file read: weights, config, tokenizer files.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Waits for a record's checksums (nothing to wait for in other formats): `Err` names the
    /// file that changed.
    pub fn verify(&mut self) -> Result<()> {
        match self.pending.take() {
            Some(p) => p.wait(),
            None => Ok(()),
        }
    }

    /// Builds the whole model on `device`. A record's checksums must all have matched first.
    pub fn build<B: cinder_runtime::InferenceBackend>(
        self,
        device: &B::Device,
    ) -> Result<crate::LoadedModel<B>> {
        let l = self.build_with(Box::new(|c, s| c.build::<B>(s, device)))?;
        Ok(crate::LoadedModel {
            model: l.built,
            tokenizer: std::sync::Arc::new(l.tokenizer),
            info: l.info,
        })
    }

    /// Builds `build` from the config and tensors; with a record, the hashing threads are joined
    /// after it, and a changed file is reported as such even where building from it failed.
    pub(crate) fn build_with<T>(mut self, build: Build<'_, T>) -> Result<Loaded<T>> {
        let built = if self.pending.is_some() {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                build(&self.config, &self.tensors)
            }))
        } else {
            Ok(build(&self.config, &self.tensors))
        };
        self.verify()?;
        let built = built.map_err(|_| {
            file_err(
                &self.info.path,
                "the model could not be built (panic while reading it)",
            )
        })??;
        Ok(Loaded {
            built,
            tokenizer: self.tokenizer,
            info: self.info,
        })
    }
}
