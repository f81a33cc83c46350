//! `manifest.json` of a record directory: what was imported, from what, and the sha256 of every
//! source and output file, so a load can prove it runs exactly what was imported.
//!
//! The manifest seals itself: `manifest_sha256` is the sha256 of the file's own bytes with that
//! field's value emptied. Editing any byte of it (a hash, a size, the config) is detected without a
//! second file. This is integrity, not authenticity: whoever can rewrite the whole directory can
//! also reseal it; pin sources with `--expect-sha256` and keep records where only you write.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{ImportError, Result};

/// Value of `format`.
pub const FORMAT: &str = "cinder-record";
/// The record layout this Cinder writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The manifest's file name in a record directory.
pub const MANIFEST: &str = "manifest.json";

/// Size and sha256 of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    /// the file (relative to the record directory for outputs; as given for sources)
    pub path: String,
    /// bytes
    pub size: u64,
    /// lowercase hex sha256
    pub sha256: String,
}

/// One tensor of the record (GGUF name and layout).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorEntry {
    /// GGUF-style name (`blk.0.attn_q.weight`)
    pub name: String,
    /// storage type (`Q4_1`, `F32`, …): quantized blocks are kept as they were
    #[serde(rename = "type")]
    pub ty: String,
    /// dims, innermost first (ggml `ne`)
    pub dims: Vec<u64>,
    /// bytes of data
    pub bytes: u64,
}

/// What the record was imported from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// `gguf` or `safetensors`
    pub kind: String,
    /// every file read (weights, config, tokenizer)
    pub files: Vec<FileDigest>,
}

/// The manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// always [`FORMAT`]
    pub format: String,
    /// [`FORMAT_VERSION`] when written
    pub format_version: u32,
    /// the Cinder version that wrote it
    pub cinder_version: String,
    /// the source's architecture name (`llama`, `mistral`, `qwen2`, `gemma3`)
    pub architecture: String,
    /// `general.name` or the HF model name, if known
    pub name: Option<String>,
    /// the model config, as in `config.json`
    pub config: serde_json::Value,
    /// `--quantize` type, if weights were quantized on import
    pub quantized_on_import: Option<String>,
    /// the inputs
    pub source: SourceInfo,
    /// every tensor of `model.bpk`
    pub tensors: Vec<TensorEntry>,
    /// every output file but the manifest
    pub files: Vec<FileDigest>,
    /// sha256 of this file with this value emptied
    pub manifest_sha256: String,
}

const SEAL_KEY: &str = "\"manifest_sha256\": \"";

impl Manifest {
    /// The sealed JSON text (pretty, with `manifest_sha256` filled in).
    pub fn to_sealed_json(&self) -> Result<String> {
        let mut m = self.clone();
        m.manifest_sha256 = String::new();
        let open = serde_json::to_string_pretty(&m).map_err(|e| ImportError::Record {
            path: MANIFEST.into(),
            reason: format!("cannot serialize: {e}"),
        })?;
        let digest = sha256_hex(open.as_bytes());
        let empty = format!("{SEAL_KEY}\"");
        Ok(open.replacen(&empty, &format!("{SEAL_KEY}{digest}\""), 1))
    }

    /// Reads and checks `dir/manifest.json`: its seal, format and version.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|source| ImportError::Io {
            path: path.clone(),
            source,
        })?;
        let bad = |reason: String| ImportError::Record {
            path: path.clone(),
            reason,
        };
        let m: Manifest =
            serde_json::from_str(&text).map_err(|e| bad(format!("not a Cinder manifest: {e}")))?;
        if m.format != FORMAT {
            return Err(bad(format!("format is {:?}, not {FORMAT:?}", m.format)));
        }
        if m.format_version != FORMAT_VERSION {
            return Err(bad(format!(
                "record format version {} (this Cinder reads version {FORMAT_VERSION}); \
                 re-import the model with this Cinder",
                m.format_version
            )));
        }
        let sealed = format!("{SEAL_KEY}{}\"", m.manifest_sha256);
        if m.manifest_sha256.len() != 64 || text.matches(&sealed).count() != 1 {
            return Err(bad(
                "the manifest's seal (manifest_sha256) is missing or malformed".into(),
            ));
        }
        let open = text.replacen(&sealed, &format!("{SEAL_KEY}\""), 1);
        let digest = sha256_hex(open.as_bytes());
        if digest != m.manifest_sha256 {
            return Err(bad(format!(
                "the manifest was modified after import: its sha256 is {digest}, its seal says {}",
                m.manifest_sha256
            )));
        }
        Ok(m)
    }

    /// The output file entry called `name`.
    pub fn file(&self, name: &str) -> Result<&FileDigest> {
        self.files
            .iter()
            .find(|f| f.path == name)
            .ok_or_else(|| ImportError::Record {
                path: MANIFEST.into(),
                reason: format!("lists no {name}"),
            })
    }
}

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Size and sha256 of a file (SHA-NI where the CPU has it: about 1.3 GB/s here). Hashed from a
/// read-only memory map: no copy through a read buffer.
pub fn digest_file(path: &Path, label: &str) -> Result<FileDigest> {
    let io = |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let size = f.metadata().map_err(io)?.len();
    let sha256 = if size == 0 {
        sha256_hex(&[])
    } else {
        // SAFETY: read-only, private map, dropped before returning; a file changed underneath
        // while being hashed can only give a hash that does not match, which is reported.
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(io)?;
        sha256_hex(&map)
    };
    Ok(FileDigest {
        path: label.to_string(),
        size,
        sha256,
    })
}

/// Checks `dir/entry.path` against its size and sha256; the error names the file.
pub fn verify_file(dir: &Path, entry: &FileDigest) -> Result<()> {
    let path = dir.join(&entry.path);
    let got = digest_file(&path, &entry.path)?;
    if got.size != entry.size || got.sha256 != entry.sha256 {
        return Err(ImportError::Record {
            path,
            reason: format!(
                "does not match the manifest (size {} sha256 {}; manifest: size {} sha256 {}): \
                 the file changed after import",
                got.size, got.sha256, entry.size, entry.sha256
            ),
        });
    }
    Ok(())
}
