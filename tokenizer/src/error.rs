//! The one error type of the tokenizer crate.

/// Errors building a tokenizer or encoding/decoding with it.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The tokenizer metadata is missing, inconsistent, or of an unsupported kind; or a text or id
    /// cannot be encoded or decoded.
    #[error("tokenizer: {0}")]
    Invalid(String),
    /// A `tokenizer.json` could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// file path
        path: String,
        /// underlying error
        #[source]
        source: std::io::Error,
    },
    /// The GGUF file the tokenizer is read from is malformed.
    #[error(transparent)]
    Gguf(#[from] cinder_gguf::GgufError),
}

/// Result alias for this crate.
pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;
