//! The importer's one error type.

/// Errors turning a checkpoint into a model.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The GGUF file is malformed or lacks what the architecture needs.
    #[error(transparent)]
    Gguf(#[from] cinder_gguf::GgufError),
    /// The tokenizer metadata (or `tokenizer.json`) is malformed.
    #[error(transparent)]
    Tokenizer(#[from] cinder_tokenizer::TokenizerError),
    /// The model could not be built from the weights.
    #[error(transparent)]
    Model(#[from] cinder_models::ModelError),
    /// A backend could not be used (not compiled in, or it failed to start).
    #[error(transparent)]
    Backend(#[from] cinder_backends::BackendError),
    /// Layer offload was asked for in a way that cannot work.
    #[error("layer offload: {0}")]
    Offload(String),
    /// A catalog lookup or download failed.
    #[error(transparent)]
    Catalog(#[from] cinder_catalog::CatalogError),
    /// The architecture named in the file is not one Cinder implements.
    #[error("unsupported architecture {0:?} (supported: {1})")]
    UnsupportedArch(String, String),
    /// The file asks for something Cinder does not implement (a tensor or a scaling it would
    /// otherwise ignore).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A SafeTensors, ONNX or config file is malformed or not a model Cinder can build.
    #[error("{path}: {reason}")]
    File {
        /// the file
        path: std::path::PathBuf,
        /// what is wrong
        reason: String,
    },
    /// Reading a file failed.
    #[error("{path}: {source}")]
    Io {
        /// the file
        path: std::path::PathBuf,
        /// the OS error
        source: std::io::Error,
    },
    /// A record directory is incomplete, altered after import, or not one this Cinder reads; or an
    /// import was refused (unsafe format, pinned hash mismatch).
    #[error("{path}: {reason}")]
    Record {
        /// the file or directory
        path: std::path::PathBuf,
        /// what is wrong
        reason: String,
    },
    /// A model config that does not parse, or does not belong to the architecture it is given to.
    #[error("model config: {0}")]
    Config(String),
    /// The tokenizer does not fit the model.
    #[error("tokenizer does not match the model: {0}")]
    TokenizerMismatch(String),
}

/// Result alias for this crate.
pub type Result<T, E = ImportError> = std::result::Result<T, E>;
