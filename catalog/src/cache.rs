//! The on-disk cache: `<root>/models/<name>/<file>`, filled by [`Cache::pull_entry`].
//!
//! Crash safety: a file is assembled in a temp file (`.<file>.<random>.cinder-tmp`) in its final
//! directory, hashed while it is written, fsynced, compared with the pinned sha256 and only then
//! renamed to its final name (and the directory fsynced). A crash leaves at most a temp file, which
//! the next pull removes; a file under its final name is always complete. Pulls of one entry are
//! serialised by an exclusive lock on `<root>/models/<name>/.lock`, so temp files found while holding
//! it are stale.

use std::fs::{self, File, TryLockError};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::entry::{Entry, FileSpec, ModelKind, Source};
use crate::error::{CatalogError, IoContext, Result};
use crate::fetch::Fetcher;
use crate::hash::{self, HashingWriter};
use crate::progress::bytes_bar;

/// Suffix of the temp files a pull writes before renaming them into place.
pub(crate) const TMP_SUFFIX: &str = ".cinder-tmp";
/// A temp-file builder for files that end up in the cache: `TMP_SUFFIX`, and on unix the mode an
/// ordinary new file gets (0o666 less the umask; tempfile's default, 0o600, would make a shared
/// cache unreadable to other users).
pub(crate) fn temp_builder(prefix: &str) -> tempfile::Builder<'_, 'static> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix).suffix(TMP_SUFFIX);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(fs::Permissions::from_mode(0o666));
    }
    builder
}

/// Sidecar temp files are written without the entry lock; only old ones are removed.
const STALE_SIDECAR_TMP: Duration = Duration::from_secs(60);

/// Options of a pull.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PullOptions {
    /// Fetch every file again, even when a cached copy exists (and replace a corrupted one).
    pub force: bool,
}

/// One verified file in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledFile {
    /// The path relative to the entry's directory ([`crate::FileSpec::path`]).
    pub name: String,
    /// The absolute path in the cache.
    pub path: PathBuf,
    /// Its sha256 (equal to the pinned one), lowercase hex.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// Whether this pull fetched it (`false`: it was already cached and verified).
    pub fetched: bool,
}

/// The outcome of a pull: every file of the entry, present and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledModel {
    /// The catalog name.
    pub name: String,
    /// What the files are.
    pub kind: ModelKind,
    /// The entry's directory, `<cache>/models/<name>`.
    pub dir: PathBuf,
    /// The main file (see [`crate::Entry::main`]).
    pub main: PathBuf,
    /// All files, in table order.
    pub files: Vec<PulledFile>,
}

impl PulledModel {
    /// The file whose relative path is `name`, if the entry has one.
    pub fn file(&self, name: &str) -> Option<&PulledFile> {
        self.files.iter().find(|f| f.name == name)
    }

    /// The sha256 of the main file.
    pub fn main_sha256(&self) -> Option<&str> {
        self.files
            .iter()
            .find(|f| f.path == self.main)
            .map(|f| f.sha256.as_str())
    }
}

/// A MODEL argument turned into something to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// The catalog entry, when the argument was a catalog name (`None` for a path).
    pub entry: Option<&'static Entry>,
    /// The kind: the entry's, or guessed from the path ([`ModelKind::guess`]).
    pub kind: Option<ModelKind>,
    /// What to load: the entry's main file, or the given path as is (a file or a directory).
    pub path: PathBuf,
    /// The directory holding the model's files (the path itself when it is a directory).
    pub dir: PathBuf,
    /// The pull's result for a catalog name (`None` for a path).
    pub pulled: Option<PulledModel>,
}

/// A model cache rooted at a directory. [`crate::pull`] and [`crate::resolve`] use
/// [`Cache::from_env`]; tests and tools can point one anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// A cache rooted at `root` (created on the first pull).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Cache { root: root.into() }
    }

    /// The cache at [`crate::cache_dir`] (`$CINDER_HOME`, else `~/.cache/cinder`).
    pub fn from_env() -> Self {
        Cache::new(crate::cache_dir())
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/models/<name>`, where the files of entry `name` live.
    pub fn model_dir(&self, name: &str) -> PathBuf {
        self.root.join("models").join(name)
    }

    /// Whether every file of `entry` is present (not verified: cheap, for listings).
    pub fn is_present(&self, entry: &Entry) -> bool {
        let dir = self.model_dir(entry.name);
        entry.files.iter().all(|f| dir.join(f.path).is_file())
    }

    /// Pulls the catalog entry `name`; see [`Cache::pull_entry`].
    pub fn pull(&self, name: &str, opts: PullOptions) -> Result<PulledModel> {
        let entry = crate::lookup(name).ok_or_else(|| unknown(name))?;
        self.pull_entry(entry, opts)
    }

    /// Makes every file of `entry` present and verified in the cache, fetching what is missing (all
    /// of it with `force`). A cached file whose sha256 differs from the pinned one is an error
    /// ([`CatalogError::HashMismatch`]) unless `force` is set, which replaces it.
    pub fn pull_entry(&self, entry: &Entry, opts: PullOptions) -> Result<PulledModel> {
        let dir = self.model_dir(entry.name);
        // Without the lock first: the usual case (everything cached) needs no write access.
        let mut have: Vec<Option<PulledFile>> = vec![None; entry.files.len()];
        if !opts.force {
            for (slot, spec) in have.iter_mut().zip(entry.files) {
                *slot = verify_cached(entry, &dir, spec)?;
            }
            if have.iter().all(Option::is_some) {
                tracing::debug!("{}: all files cached and verified", entry.name);
                return Ok(assemble(entry, dir, have.into_iter().flatten().collect()));
            }
        }

        fs::create_dir_all(&dir).ctx("creating directory", &dir)?;
        let _lock = lock(&dir, entry.name)?;
        remove_stale_temps(&dir);
        let missing = entry.files.len() - have.iter().filter(|h| h.is_some()).count();
        tracing::info!(
            "pulling {} ({} of {} files) into {}",
            entry.name,
            missing,
            entry.files.len(),
            dir.display()
        );
        // Remaining uses of each source, so a wheel is deleted as soon as it is no longer needed.
        let mut uses: Vec<(Source, usize)> = Vec::new();
        let mut todo = Vec::new();
        for (i, spec) in entry.files.iter().enumerate() {
            if have[i].is_some() {
                continue;
            }
            // Another process may have fetched it while we waited for the lock.
            if !opts.force
                && let Some(f) = verify_cached(entry, &dir, spec)?
            {
                have[i] = Some(f);
                continue;
            }
            todo.push(i);
            for part in spec.parts {
                match uses.iter_mut().find(|(s, _)| *s == part.source) {
                    Some((_, n)) => *n += 1,
                    None => uses.push((part.source, 1)),
                }
            }
        }
        let mut fetcher = Fetcher::new(self.root.join("tmp"));
        for i in todo {
            let spec = &entry.files[i];
            have[i] = Some(fetch_file(entry, &dir, spec, &mut fetcher)?);
            for part in spec.parts {
                if let Some((_, n)) = uses.iter_mut().find(|(s, _)| *s == part.source) {
                    *n -= 1;
                    if *n == 0 {
                        fetcher.release(&part.source);
                    }
                }
            }
        }
        Ok(assemble(entry, dir, have.into_iter().flatten().collect()))
    }

    /// Resolves a MODEL argument: an existing path (file or directory) is used as is, without
    /// pulling; otherwise it must be a catalog name, which is pulled if not cached (and verified).
    pub fn resolve(&self, model: &str) -> Result<ResolvedModel> {
        let path = Path::new(model);
        if path.exists() {
            let dir = if path.is_dir() {
                path.to_path_buf()
            } else {
                match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                    _ => PathBuf::from("."),
                }
            };
            tracing::debug!("{model}: an existing path, used as is");
            return Ok(ResolvedModel {
                entry: None,
                kind: ModelKind::guess(path),
                path: path.to_path_buf(),
                dir,
                pulled: None,
            });
        }
        let Some(entry) = crate::lookup(model) else {
            if looks_like_path(model) {
                return Err(CatalogError::PathNotFound {
                    path: path.to_path_buf(),
                    known: crate::known_names(),
                });
            }
            return Err(unknown(model));
        };
        let pulled = self.pull_entry(entry, PullOptions::default())?;
        Ok(ResolvedModel {
            entry: Some(entry),
            kind: Some(entry.kind),
            path: pulled.main.clone(),
            dir: pulled.dir.clone(),
            pulled: Some(pulled),
        })
    }
}

fn unknown(name: &str) -> CatalogError {
    CatalogError::UnknownModel {
        name: name.to_owned(),
        known: crate::known_names(),
    }
}

fn looks_like_path(model: &str) -> bool {
    model.contains('/')
        || model.contains('\\')
        || model.starts_with('.')
        || model.starts_with('~')
        || [".gguf", ".onnx", ".safetensors"]
            .iter()
            .any(|ext| model.to_ascii_lowercase().ends_with(ext))
}

fn assemble(entry: &Entry, dir: PathBuf, files: Vec<PulledFile>) -> PulledModel {
    PulledModel {
        name: entry.name.to_owned(),
        kind: entry.kind,
        main: dir.join(entry.main),
        dir,
        files,
    }
}

/// The verified cached copy of `spec`, `None` if absent; a mismatch is an error.
fn verify_cached(entry: &Entry, dir: &Path, spec: &FileSpec) -> Result<Option<PulledFile>> {
    let path = dir.join(spec.path);
    if !path.is_file() {
        return Ok(None);
    }
    let sha256 = hash::cached_sha256(&path)?;
    if !sha256.eq_ignore_ascii_case(spec.sha256) {
        return Err(CatalogError::HashMismatch {
            model: entry.name,
            path,
            expected: spec.sha256,
            actual: sha256,
        });
    }
    Ok(Some(PulledFile {
        name: spec.path.to_owned(),
        path,
        sha256,
        size: spec.size,
        fetched: false,
    }))
}

/// Assembles `spec` from its parts into a temp file, verifies it, and renames it into place.
fn fetch_file(
    entry: &Entry,
    dir: &Path,
    spec: &FileSpec,
    fetcher: &mut Fetcher,
) -> Result<PulledFile> {
    // Download first, so the extraction bar below measures extraction only.
    for part in spec.parts {
        fetcher.prepare(&part.source)?;
    }
    let path = dir.join(spec.path);
    let parent = path.parent().unwrap_or(dir);
    fs::create_dir_all(parent).ctx("creating directory", parent)?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{file_name}.");
    let tmp = temp_builder(&prefix)
        .tempfile_in(parent)
        .ctx("creating a temp file in", parent)?;
    let bar = bytes_bar(spec.size, format!("extracting {file_name}"));
    let mut out = HashingWriter::new(BufWriter::with_capacity(1 << 20, tmp), bar);
    for part in spec.parts {
        tracing::debug!(
            "{}: appending {} from {}",
            spec.path,
            part.member,
            part.source
        );
        fetcher.copy_part(part, &mut out)?;
    }
    let (buf, sha256, size) = out.finish();
    let tmp = buf
        .into_inner()
        .map_err(|e| e.into_error())
        .ctx("writing a temp file for", &path)?;
    tmp.as_file().sync_all().ctx("syncing", tmp.path())?;
    if sha256 != spec.sha256.to_ascii_lowercase() || size != spec.size {
        let source_desc = spec
            .parts
            .iter()
            .map(|p| p.source.to_string())
            .collect::<Vec<_>>()
            .join(" + ");
        return Err(CatalogError::FetchedMismatch {
            model: entry.name,
            file: spec.path,
            source_desc,
            expected: spec.sha256,
            actual: sha256,
            size,
        });
    }
    tmp.persist(&path)
        .map_err(|e| e.error)
        .ctx("renaming a temp file to", &path)?;
    sync_dir(parent);
    hash::record(&path, &sha256);
    tracing::info!("{}: {} bytes, sha256 {sha256}", path.display(), size);
    Ok(PulledFile {
        name: spec.path.to_owned(),
        path,
        sha256,
        size,
        fetched: true,
    })
}

/// Makes a rename in `dir` durable (best effort; a no-op where directories cannot be opened).
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
        tracing::warn!("could not sync directory {}: {e}", dir.display());
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// Takes the entry's exclusive lock, waiting for another pull of it to finish.
fn lock(dir: &Path, name: &str) -> Result<File> {
    let path = dir.join(".lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .ctx("opening lock file", &path)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            tracing::info!("waiting for another pull of {name} to finish");
            file.lock().ctx("locking", &path)?;
        }
        Err(TryLockError::Error(e)) => return Err(e).ctx("locking", &path),
    }
    Ok(file)
}

/// Removes the temp files of interrupted pulls under `dir` (call with the entry's lock held).
fn remove_stale_temps(dir: &Path) {
    let Ok(items) = fs::read_dir(dir) else {
        return;
    };
    for item in items.filter_map(|i| i.ok()) {
        let path = item.path();
        let Ok(kind) = item.file_type() else {
            continue;
        };
        if kind.is_dir() {
            remove_stale_temps(&path);
            continue;
        }
        let name = item.file_name().to_string_lossy().into_owned();
        if !name.ends_with(TMP_SUFFIX) {
            continue;
        }
        // Sidecar temps are written without the lock (by verifications); only old ones are stale.
        if name.starts_with(".sidecar.") {
            let age = item
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok());
            if age.is_none_or(|a| a <= STALE_SIDECAR_TMP) {
                continue;
            }
        }
        tracing::info!("removing {} left by an interrupted pull", path.display());
        if let Err(e) = fs::remove_file(&path) {
            tracing::warn!("could not remove {}: {e}", path.display());
        }
    }
}
