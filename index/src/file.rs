//! The index file: one self-checking file, replaced atomically.
//!
//! Layout (integers little-endian):
//! ```text
//! "CINDERVI"  u32 version  u64 meta_len  meta (JSON)  u64 body_len  body  sha256(everything before)
//! ```
//! `meta` holds the options (dim, metric, kind, HNSW parameters, model), the next key and every
//! point (key, id, payload). `body` is the flat index's rows (`f32`, one per point in `meta` order)
//! or usearch's serialized graph. The trailing sha256 is checked before any byte is interpreted, so
//! a torn or altered file is refused with a clear error instead of being half-read (usearch itself
//! trusts its input).
//!
//! Saving writes `<file>.tmp-<pid>`, fsyncs it, renames it over the old file and fsyncs the
//! directory: a crash at any point leaves the old file or the new one, never a mix.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{IndexError, Result};
use crate::flat::FlatStore;
use crate::hnsw::HnswStore;
use crate::{IndexKind, IndexOptions, Point, Store, VectorIndex};

const MAGIC: &[u8; 8] = b"CINDERVI";
const VERSION: u32 = 1;
/// magic + version + two lengths + checksum
const FIXED: usize = 8 + 4 + 8 + 8 + 32;

#[derive(Serialize, Deserialize)]
struct Meta {
    options: IndexOptions,
    next_key: u64,
    points: Vec<Point>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> IndexError + '_ {
    move |source| IndexError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl VectorIndex {
    /// Writes the index to `path` atomically (temp file, fsync, rename, directory fsync).
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut points: Vec<&Point> = self.points.values().collect();
        points.sort_by_key(|p| p.key);
        let body = match &self.store {
            Store::Flat(s) => {
                let rows: HashMap<u64, &[f32]> = s.rows().collect();
                let mut b = Vec::with_capacity(points.len() * self.options.dim * 4);
                for p in &points {
                    let row = rows.get(&p.key).ok_or_else(|| {
                        IndexError::Invalid(format!("point {:?} has no vector", p.id))
                    })?;
                    row.iter()
                        .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
                }
                b
            }
            Store::Hnsw(s) => s.to_bytes()?,
        };
        let meta = serde_json::to_vec(&serde_json::json!({
            "options": self.options,
            "next_key": self.next_key,
            "points": points,
        }))
        .map_err(|e| IndexError::Invalid(format!("index metadata does not serialize: {e}")))?;
        let mut out = Vec::with_capacity(FIXED + meta.len() + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(meta.len() as u64).to_le_bytes());
        out.extend_from_slice(&meta);
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
        let sum = Sha256::digest(&out);
        out.extend_from_slice(&sum);
        write_atomically(path, &out)
    }

    /// Reads an index written by [`VectorIndex::save`], refusing a damaged or foreign file.
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(io_err(path))?;
        Self::from_file_bytes(path, &bytes)
    }

    fn from_file_bytes(path: &Path, bytes: &[u8]) -> Result<Self> {
        let corrupt = |reason: String| IndexError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        if bytes.len() < FIXED || &bytes[..8] != MAGIC {
            return Err(corrupt(
                "it does not start with the index magic \"CINDERVI\" (not an index, or truncated)"
                    .into(),
            ));
        }
        let version = u32::from_le_bytes(le(&bytes[8..12]));
        if version != VERSION {
            return Err(corrupt(format!(
                "format version {version}; this build reads version {VERSION}"
            )));
        }
        let (content, sum) = bytes.split_at(bytes.len() - 32);
        if Sha256::digest(content).as_slice() != sum {
            return Err(corrupt(
                "checksum mismatch: the file was truncated or altered after it was written".into(),
            ));
        }
        let mut at = 12;
        let meta_bytes = section(content, &mut at).ok_or_else(|| corrupt("meta length".into()))?;
        let body = section(content, &mut at).ok_or_else(|| corrupt("body length".into()))?;
        if at != content.len() {
            return Err(corrupt(format!(
                "{} unexpected bytes after the body",
                content.len() - at
            )));
        }
        let meta: Meta = serde_json::from_slice(meta_bytes)
            .map_err(|e| corrupt(format!("metadata is not valid: {e}")))?;
        let mut index = VectorIndex::new(meta.options.clone())?;
        let n = meta.points.len();
        let (mut keys, mut ids) = (HashSet::new(), HashSet::new());
        for p in &meta.points {
            if p.key >= meta.next_key || !keys.insert(p.key) || !ids.insert(p.id.as_str()) {
                return Err(corrupt(format!(
                    "point {:?} (key {}) is duplicated or beyond the next key",
                    p.id, p.key
                )));
            }
        }
        let dim = meta.options.dim;
        index.store = match meta.options.kind {
            IndexKind::Flat => {
                if Some(body.len()) != n.checked_mul(dim).and_then(|x| x.checked_mul(4)) {
                    return Err(corrupt(format!(
                        "{} body bytes for {n} vectors of {dim} f32",
                        body.len()
                    )));
                }
                let mut s = FlatStore::new(dim, meta.options.metric);
                for (p, row) in meta.points.iter().zip(body.chunks_exact(dim * 4)) {
                    let v: Vec<f32> = row
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes(le(c)))
                        .collect();
                    s.add(p.key, &v);
                }
                Store::Flat(s)
            }
            IndexKind::Hnsw => {
                let s = HnswStore::from_bytes(dim, meta.options.metric, meta.options.hnsw, body, n)
                    .map_err(|e| corrupt(e.to_string()))?;
                if let Some(p) = meta.points.iter().find(|p| !s.contains(p.key)) {
                    return Err(corrupt(format!(
                        "point {:?} is missing from the graph",
                        p.id
                    )));
                }
                Store::Hnsw(s)
            }
        };
        index.next_key = meta.next_key;
        for p in meta.points {
            index.by_id.insert(p.id.clone(), p.key);
            index.points.insert(p.key, p);
        }
        Ok(index)
    }
}

/// Fixed-size little-endian field (callers pass exactly `N` bytes).
fn le<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

/// A `u64`-length-prefixed section at `*at`, bounds-checked.
fn section<'a>(content: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let len_end = at.checked_add(8)?;
    let len = u64::from_le_bytes(le(content.get(*at..len_end)?));
    let end = len_end.checked_add(usize::try_from(len).ok()?)?;
    let s = content.get(len_end..end)?;
    *at = end;
    Some(s)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let name = path
        .file_name()
        .map_or_else(|| "index".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(io_err(&tmp))?;
        f.write_all(bytes).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io_err(path))?;
        // The rename itself is durable only once the directory entry is.
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
pub(crate) fn parse_for_test(path: &Path, bytes: &[u8]) -> Result<VectorIndex> {
    VectorIndex::from_file_bytes(path, bytes)
}
