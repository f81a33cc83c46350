//! The models crate's one error type.

/// Errors building or loading a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A configuration value is missing or inconsistent.
    #[error("invalid {arch} config: {reason}")]
    Config {
        /// architecture
        arch: String,
        /// what is wrong
        reason: String,
    },
    /// A weight is missing or has the wrong shape or type.
    #[error("weight {path:?}: {reason}")]
    Weight {
        /// module path of the weight
        path: String,
        /// what is wrong
        reason: String,
    },
    /// An error from the runtime layer (e.g. building a linear layer).
    #[error(transparent)]
    Runtime(#[from] cinder_runtime::RuntimeError),
}

/// Result alias for this crate.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
