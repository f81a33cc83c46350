//! Records: a model imported once into a directory Cinder can load and prove.
//!
//! `cinder import SRC --out DIR` ([`crate::import`]) reads a GGUF file or an HF SafeTensors
//! checkpoint and writes:
//!
//! | file | what |
//! |---|---|
//! | `model.bpk` | every tensor, in Burn's store format ([`pack`]), bytes as stored (blocks stay blocks) |
//! | `config.json` | the model config ([`ArchConfig`]) |
//! | `tokenizer.json` | the Hugging Face tokenizer (+ `tokenizer_config.json` from HF sources) |
//! | `tokenizer.gguf` | from GGUF sources: the file's `general.*`/`tokenizer.*` metadata, no tensors, so the tokenizer is rebuilt exactly as from the GGUF |
//! | `manifest.json` | sha256 + size of every source and output file, the tensors and their types ([`manifest`]) |
//!
//! Loading a record checks the manifest's seal and every file's sha256 before the model is handed
//! out; `model.bpk` is hashed on a second thread while the model is built from its memory map.

pub mod manifest;
pub mod pack;

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use cinder_gguf::GgufFile;
use cinder_tokenizer::Tokenizer;

use crate::error::{ImportError, Result};
use crate::gguf_weights::StoredTensor;
use crate::registry::ArchConfig;
use crate::source::{Format, ModelInfo, summarize};
use manifest::{FileDigest, MANIFEST, Manifest};

/// Whether `path` is a record directory.
pub fn is_record(path: &Path) -> bool {
    path.is_dir() && path.join(MANIFEST).is_file()
}

pub(crate) fn rec_err(path: &Path, reason: impl Into<String>) -> ImportError {
    ImportError::Record {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
    move |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A record read and parsed, its checksums still being verified on two threads.
pub(crate) struct OpenedRecord {
    pub(crate) config: ArchConfig,
    pub(crate) tokenizer: Tokenizer,
    /// in the manifest's order
    pub(crate) tensors: Vec<(String, StoredTensor)>,
    pub(crate) info: ModelInfo,
    pub(crate) files: Vec<PathBuf>,
    pub(crate) pending: PendingVerification,
}

/// The hashing of a record's files, running beside the parsing (`model.bpk` on one thread, the
/// small files on another), so verification costs no wall time on a 2-core machine.
pub(crate) struct PendingVerification {
    dir: PathBuf,
    threads: Vec<JoinHandle<Result<()>>>,
}

impl PendingVerification {
    /// Waits for every hash: `Err` names the first file that changed.
    pub(crate) fn wait(self) -> Result<()> {
        let mut out = Ok(());
        for t in self.threads {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(rec_err(&self.dir, "a hashing thread failed")));
            if out.is_ok() {
                out = r;
            }
        }
        out
    }
}

/// Opens a record directory: checks the manifest's seal, starts hashing every file, and parses
/// the config, the tokenizer and `model.bpk` meanwhile. A changed file is reported as such even
/// if parsing it failed first; otherwise the hashes are waited for by whoever builds the model
/// ([`crate::Source::build`]), before it is handed out.
pub(crate) fn open(dir: &Path) -> Result<OpenedRecord> {
    let m = Manifest::read(dir)?;
    let pack_entry = m.file(pack::PACK)?.clone();
    let pack_bytes = pack_entry.size;
    let small: Vec<FileDigest> = m
        .files
        .iter()
        .filter(|f| f.path != pack::PACK)
        .cloned()
        .collect();
    let pending = {
        let (d1, d2) = (dir.to_path_buf(), dir.to_path_buf());
        let big = std::thread::spawn(move || manifest::verify_file(&d1, &pack_entry));
        let rest = std::thread::spawn(move || {
            small.iter().try_for_each(|f| manifest::verify_file(&d2, f))
        });
        PendingVerification {
            dir: dir.to_path_buf(),
            threads: vec![rest, big],
        }
    };
    let parsed =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parse(dir, &m))).map_err(|_| {
            rec_err(
                dir,
                "the record could not be parsed (panic while reading it)",
            )
        });
    let (config, tokenizer, tensors) = match parsed {
        Ok(Ok(p)) => p,
        Ok(Err(e)) | Err(e) => {
            pending.wait()?;
            return Err(e);
        }
    };
    let (n_params, type_histogram) =
        summarize(m.tensors.iter().map(|t| (t.ty.as_str(), t.dims.as_slice())));
    let info = ModelInfo {
        path: dir.to_path_buf(),
        format: Format::Record,
        format_version: Some(m.format_version),
        arch: m.architecture.clone(),
        name: m.name.clone(),
        file_bytes: pack_bytes,
        n_params,
        type_histogram,
        tokenizer_model: format!("{:?}", tokenizer.kind).to_lowercase(),
    };
    tracing::info!(arch = %info.arch, params = info.n_params, "record read");
    Ok(OpenedRecord {
        config,
        tokenizer,
        tensors,
        info,
        files: m.files.iter().map(|f| dir.join(&f.path)).collect(),
        pending,
    })
}

/// A record's parsed parts: config, tokenizer, tensors in the manifest's order.
type Parsed = (ArchConfig, Tokenizer, Vec<(String, StoredTensor)>);

/// Parses `config.json`, the tokenizer and `model.bpk` (the caller proves their hashes).
fn parse(dir: &Path, m: &Manifest) -> Result<Parsed> {
    let config: ArchConfig = {
        let p = dir.join("config.json");
        let text = std::fs::read_to_string(&p).map_err(io_err(&p))?;
        serde_json::from_str(&text).map_err(|e| rec_err(&p, format!("not a model config: {e}")))?
    };
    let tokenizer = if m.files.iter().any(|f| f.path == "tokenizer.gguf") {
        Tokenizer::from_gguf(&GgufFile::open(dir.join("tokenizer.gguf"))?)?
    } else {
        Tokenizer::from_tokenizer_json(dir.join("tokenizer.json"))?
    };
    let mut by_name = pack::read(&dir.join(pack::PACK), &m.tensors)?;
    let tensors = m
        .tensors
        .iter()
        .filter_map(|t| by_name.remove(&t.name).map(|s| (t.name.clone(), s)))
        .collect();
    Ok((config, tokenizer, tensors))
}
