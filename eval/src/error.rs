//! The error type of `cinder-eval`.

use thiserror::Error;

/// Evaluation errors.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The settings or the text cannot be evaluated as asked (a context too small, too few tokens).
    #[error("{0}")]
    Invalid(String),
    /// A chunk does not fit the model's context.
    #[error("a chunk of {ctx} tokens exceeds the model's context length {max}")]
    ContextOverflow {
        /// tokens per chunk asked for
        ctx: usize,
        /// the model's context length
        max: usize,
    },
    /// A saved-logits file (KL-divergence base) is unreadable, corrupt or does not match the run.
    #[error("logits file {path}: {reason}")]
    LogitsFile {
        /// the file
        path: String,
        /// what is wrong
        reason: String,
    },
    /// The model's forward pass failed.
    #[error(transparent)]
    Runtime(#[from] cinder_runtime::RuntimeError),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, EvalError>;
