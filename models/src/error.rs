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
    /// An input the model cannot take (empty text, too many texts, an out-of-range token).
    #[error("bad input: {0}")]
    Input(String),
    /// An error from the runtime layer (e.g. building a linear layer).
    #[error(transparent)]
    Runtime(#[from] cinder_runtime::RuntimeError),
}

/// Result alias for this crate.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;

/// Refuses a config whose named sizes include a zero, or whose query heads are not a multiple of its
/// key/value heads (shared by every architecture's `validate`).
pub(crate) fn check_shape(
    arch: &str,
    sizes: &[(&str, usize)],
    n_heads: usize,
    n_kv_heads: usize,
) -> Result<()> {
    let bad = |reason: String| {
        Err(ModelError::Config {
            arch: arch.into(),
            reason,
        })
    };
    if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
        return bad(format!("{name} is 0"));
    }
    if n_kv_heads == 0 || !n_heads.is_multiple_of(n_kv_heads) {
        return bad(format!(
            "n_heads {n_heads} is not a multiple of n_kv_heads {n_kv_heads}"
        ));
    }
    Ok(())
}
