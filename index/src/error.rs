//! The index crate's one error type.

use std::path::PathBuf;

use crate::Metric;

/// Errors of vector indexes.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// A vector of the wrong length.
    #[error("{what} has {got} dimensions; the index holds {want}-dimensional vectors")]
    Dimension {
        /// which vector
        what: String,
        /// its length
        got: usize,
        /// the index's dimension
        want: usize,
    },
    /// A query stated another metric than the index's.
    #[error("the index compares by {index}, the query asked for {query}")]
    MetricMismatch {
        /// the index's metric
        index: Metric,
        /// the query's
        query: Metric,
    },
    /// An argument or value is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// An index file is damaged or not an index.
    #[error("{path}: not a valid Cinder index: {reason}")]
    Corrupt {
        /// the file
        path: PathBuf,
        /// what is wrong
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// the file
        path: PathBuf,
        /// the OS error
        source: std::io::Error,
    },
    /// The HNSW library reported an error.
    #[error("hnsw: {0}")]
    Hnsw(String),
}

/// Result alias for this crate.
pub type Result<T, E = IndexError> = std::result::Result<T, E>;
