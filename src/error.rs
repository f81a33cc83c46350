//! The front door's one error type: every workspace crate's error converts into it, so `?` works
//! in a user's function without `anyhow`.

use cinder_backends::BackendError;
use cinder_catalog::CatalogError;
use cinder_eval::EvalError;
use cinder_gguf::GgufError;
use cinder_importer::ImportError;
use cinder_index::IndexError;
use cinder_models::ModelError;
use cinder_runtime::RuntimeError;
use cinder_runtime::engine::FinishReason;
use cinder_tokenizer::TokenizerError;

/// What can go wrong at Cinder's front door ([`crate::Llm`], [`crate::Embedder`]).
///
/// # Examples
///
/// ```no_run
/// fn first_words() -> Result<String, cinder::Error> {
///     let llm = cinder::Llm::load("smollm2-135m")?;
///     Ok(llm.generate("Once", &cinder::GenerateOptions::greedy(4))?.text)
/// }
/// match first_words() {
///     Err(cinder::Error::Catalog(e)) => eprintln!("could not fetch the model: {e}"),
///     Err(e) => eprintln!("{e}"),
///     Ok(t) => println!("{t}"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Choosing or starting a backend failed (not compiled in, no device, threads).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A model name that is neither in the catalog nor a path, or a failed fetch.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// Reading or validating a model file failed.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// Building a model from its weights failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Generation, templating, sampling or the engine refused or failed a request.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Tokenizing or detokenizing failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// A GGUF file could not be read or written.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The vector index refused an operation.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// Perplexity or KL-divergence evaluation failed.
    #[error(transparent)]
    Eval(#[from] EvalError),
    /// The engine ended the request early ([`FinishReason::Error`], `Timeout` or `Cancelled`).
    #[error("generation ended early: {0:?}")]
    Ended(FinishReason),
    /// The model's structured output did not deserialize into the asked-for type.
    #[error("the model's JSON does not fit the requested type: {reason} (text: {text:?})")]
    Json {
        /// serde's message
        reason: String,
        /// what the model wrote
        text: String,
    },
    /// A builder or option value that cannot work, named.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// The model was asked for something it cannot do (a chat without a template, a tool call
    /// from a model without a tool format), with the reason.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
