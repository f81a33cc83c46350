//! Streaming sha256 and the `.sha256` sidecars that spare re-hashing unchanged cached files.
//!
//! A sidecar `.<file>.sha256` (JSON) next to a cached file records the file's size, mtime, its sha256
//! and when that was recorded. It is trusted only while size and mtime still match *and* the mtime is
//! older than the recording by at least [`RACY_NS`]: a file modified within the same timestamp tick
//! as the recording keeps its mtime, so such "racily clean" sidecars (git's term) are re-hashed once.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{IoContext, Result};
use crate::progress::bytes_bar;

const BUF_BYTES: usize = 1 << 20;
/// How much older than its recording a file's mtime must be for the sidecar to be trusted
/// (covers coarse kernel timestamps and 2 s filesystem granularity).
pub(crate) const RACY_NS: u128 = 2_000_000_000;

/// The sha256 of a file, lowercase hex, read in 1 MiB chunks (constant memory for any size). Shows a
/// progress bar on stderr for large files when stderr is a terminal.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).ctx("opening", path)?;
    let len = file.metadata().ctx("reading metadata of", path)?.len();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let bar = bytes_bar(len, format!("verifying {name}"));
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF_BYTES];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).ctx("reading", path),
        };
        hasher.update(&buf[..n]);
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    Ok(hex::encode(hasher.finalize()))
}

/// A writer that hashes and counts what passes through it (and advances a bar).
pub(crate) struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
    bar: ProgressBar,
}

impl<W: Write> HashingWriter<W> {
    pub(crate) fn new(inner: W, bar: ProgressBar) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
            bar,
        }
    }

    /// The inner writer, the hex sha256 and the byte count of everything written.
    pub(crate) fn finish(self) -> (W, String, u64) {
        self.bar.finish_and_clear();
        (self.inner, hex::encode(self.hasher.finalize()), self.bytes)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        self.bar.inc(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Sidecar {
    size: u64,
    mtime_ns: u128,
    recorded_ns: u128,
    sha256: String,
}

/// `dir/.name.sha256` for `dir/name`.
pub(crate) fn sidecar_path(file: &Path) -> PathBuf {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    file.with_file_name(format!(".{name}.sha256"))
}

fn ns_since_epoch(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// `(size, mtime in ns)` of a file.
fn stamp(path: &Path) -> Result<(u64, u128)> {
    let meta = fs::metadata(path).ctx("reading metadata of", path)?;
    let mtime = meta.modified().map(ns_since_epoch).unwrap_or(0);
    Ok((meta.len(), mtime))
}

/// The hash a trustworthy sidecar records for `file`, if there is one.
fn trusted_sidecar(file: &Path) -> Option<String> {
    let text = fs::read_to_string(sidecar_path(file)).ok()?;
    let car: Sidecar = serde_json::from_str(&text).ok()?;
    let (size, mtime) = stamp(file).ok()?;
    let fresh = size == car.size
        && mtime != 0
        && mtime == car.mtime_ns
        && mtime.saturating_add(RACY_NS) <= car.recorded_ns;
    fresh.then_some(car.sha256)
}

/// Records `sha256` as the hash of `file` in its sidecar (best effort: a read-only cache only costs
/// a re-hash next time).
pub(crate) fn record(file: &Path, sha256: &str) {
    if let Err(e) = try_record(file, sha256) {
        tracing::warn!(
            "could not write the sha256 sidecar of {}: {e}",
            file.display()
        );
    }
}

fn try_record(file: &Path, sha256: &str) -> Result<()> {
    let (size, mtime_ns) = stamp(file)?;
    let car = Sidecar {
        size,
        mtime_ns,
        recorded_ns: ns_since_epoch(SystemTime::now()),
        sha256: sha256.to_owned(),
    };
    let path = sidecar_path(file);
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = crate::cache::temp_builder(".sidecar.")
        .tempfile_in(dir)
        .ctx("creating a temp file in", dir)?;
    let json = serde_json::to_vec(&car).map_err(io::Error::other);
    json.and_then(|j| tmp.write_all(&j))
        .ctx("writing", tmp.path())?;
    tmp.persist(&path)
        .map_err(|e| e.error)
        .ctx("renaming a temp file to", &path)?;
    Ok(())
}

/// The sha256 of a cached file: from its sidecar when that is still valid, else hashed (and the
/// sidecar refreshed).
pub(crate) fn cached_sha256(file: &Path) -> Result<String> {
    if let Some(sha) = trusted_sidecar(file) {
        tracing::debug!("{}: sha256 from sidecar", file.display());
        return Ok(sha);
    }
    let sha = sha256_file(file)?;
    record(file, &sha);
    Ok(sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_known_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("abc");
        fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn sidecar_is_trusted_only_when_not_racy_and_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.bin");
        fs::write(&p, b"hello").unwrap();
        let real = sha256_file(&p).unwrap();
        // Just written and recorded: racily clean, so not trusted yet.
        record(&p, &real);
        assert!(trusted_sidecar(&p).is_none());
        // An old file: trusted, even with a (deliberately) wrong hash, which proves no re-hash.
        let old = SystemTime::now() - std::time::Duration::from_secs(60);
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(old)
            .unwrap();
        record(&p, "not-the-hash");
        assert_eq!(trusted_sidecar(&p).as_deref(), Some("not-the-hash"));
        assert_eq!(cached_sha256(&p).unwrap(), "not-the-hash");
        // Touch it: the mtime changes, so the sidecar no longer applies and the file is re-hashed.
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(SystemTime::now())
            .unwrap();
        assert!(trusted_sidecar(&p).is_none());
        assert_eq!(cached_sha256(&p).unwrap(), real);
    }
}
