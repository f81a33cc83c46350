//! The runtime's one error type.

/// Errors from generation, sampling, templating and tokenization.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A tokenizer operation failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A chat template failed to render.
    #[error("chat template: {0}")]
    Template(String),
    /// A sampling parameter is out of range.
    #[error("invalid sampling parameter: {0}")]
    Sampling(String),
    /// The prompt plus requested tokens do not fit the context.
    #[error("prompt of {prompt} tokens + {max_new} new tokens exceeds the context length {ctx}")]
    ContextOverflow {
        /// prompt tokens
        prompt: usize,
        /// requested new tokens
        max_new: usize,
        /// the model's / cache's context length
        ctx: usize,
    },
    /// Empty prompt (nothing to condition on).
    #[error("empty prompt: the model needs at least one token")]
    EmptyPrompt,
    /// Reading a tensor back from the device failed.
    #[error("device readback: {0}")]
    Readback(String),
    /// A weight could not be turned into a layer.
    #[error("weight {name:?}: {reason}")]
    Weight {
        /// weight name
        name: String,
        /// what is wrong
        reason: String,
    },
    /// The KV cache could not be set up.
    #[error("KV cache: {0}")]
    KvCache(String),
    /// The engine's waiting queue is full (backpressure: retry later).
    #[error("queue full: {waiting} requests already waiting (limit {limit})")]
    QueueFull {
        /// requests waiting
        waiting: usize,
        /// the limit
        limit: usize,
    },
    /// A request the engine cannot serve, with the reason.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A JSON schema, regular expression or grammar that cannot constrain generation, with the
    /// reason (the constraint's kind first).
    #[error("invalid constraint: {0}")]
    Constraint(String),
    /// The engine has stopped.
    #[error("the engine has shut down")]
    EngineStopped,
    /// The GGUF-level error (dequantization).
    #[error(transparent)]
    Gguf(#[from] cinder_gguf::GgufError),
}

impl From<cinder_tokenizer::TokenizerError> for RuntimeError {
    fn from(e: cinder_tokenizer::TokenizerError) -> Self {
        match e {
            cinder_tokenizer::TokenizerError::Invalid(m) => RuntimeError::Tokenizer(m),
            other => RuntimeError::Tokenizer(other.to_string()),
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
