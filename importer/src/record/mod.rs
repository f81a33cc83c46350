//! Records: a model imported once into a directory Cinder can load and prove.
//!
//! `cinder import SRC --out DIR` reads a GGUF file or an HF SafeTensors checkpoint and writes:
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

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use cinder_gguf::writer::GgufWriter;
use cinder_gguf::{GgmlType, GgufFile, SharedBytes};
use cinder_runtime::InferenceBackend;
use cinder_tokenizer::Tokenizer;

use crate::error::{ImportError, Result};
use crate::gguf_weights::StoredTensor;
use crate::gguf_weights::TensorStore;
use crate::load::{ArchConfig, Build, Loaded, ModelInfo};
use manifest::{FileDigest, MANIFEST, Manifest, SourceInfo, TensorEntry};

/// What `import` may be told.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// the architecture the source must be (`llama`, `mistral`, `qwen2`, `gemma3`)
    pub arch: Option<String>,
    /// sha256 (hex) the source weight files must have; every weight file must match one
    pub expect_sha256: Vec<String>,
    /// quantize 2-D weights to this type on import (`Q8_0`, `Q4_0`, …)
    pub quantize: Option<GgmlType>,
}

/// Whether `path` is a record directory.
pub fn is_record(path: &Path) -> bool {
    path.is_dir() && path.join(MANIFEST).is_file()
}

fn rec_err(path: &Path, reason: impl Into<String>) -> ImportError {
    ImportError::Record {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
    move |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A model read from its source, ready to be written.
struct Parts {
    kind: &'static str,
    arch: String,
    name: Option<String>,
    config: ArchConfig,
    tensors: Vec<(String, StoredTensor)>,
    sources: Vec<PathBuf>,
    /// which sources are weights (pinned by `--expect-sha256`)
    weight_sources: Vec<PathBuf>,
    /// files to write beside the weights: name -> bytes
    extra: Vec<(String, Vec<u8>)>,
    /// the tokenizer, built from the files that will be written (so a record rebuilds it exactly)
    tokenizer: Tokenizer,
}

impl Parts {
    /// Checks the tokenizer against the model and builds `build` from the tensors.
    fn build<T>(&self, build: Build<'_, T>) -> Result<T> {
        self.tokenizer
            .validate_against_model(self.config.vocab_size())
            .map_err(|e| ImportError::TokenizerMismatch(e.to_string()))?;
        let store: HashMap<String, StoredTensor> = self.tensors.iter().cloned().collect();
        build(&self.config, &store as &dyn TensorStore)
    }

    /// Parameter count and tensors per storage type.
    fn summary(&self) -> (u64, BTreeMap<String, usize>) {
        summarize(
            self.tensors
                .iter()
                .map(|(_, t)| (t.ty.name(), t.dims.as_slice())),
        )
    }
}

/// Parameter count and tensor count per type name of `(type, dims)` pairs.
fn summarize<'a>(
    tensors: impl Iterator<Item = (&'a str, &'a [u64])>,
) -> (u64, BTreeMap<String, usize>) {
    let mut hist = BTreeMap::new();
    let mut params = 0u64;
    for (ty, dims) in tensors {
        *hist.entry(ty.to_string()).or_insert(0) += 1;
        params += dims.iter().product::<u64>();
    }
    (params, hist)
}

fn gguf_parts(path: &Path, arch: Option<&str>) -> Result<Parts> {
    let file = GgufFile::open(path)?;
    let arch_name = file.architecture()?.to_string();
    if let Some(a) = arch
        && a != arch_name
    {
        return Err(rec_err(
            path,
            format!("--arch {a} but the file is {arch_name}"),
        ));
    }
    let config = ArchConfig::from_gguf(&file)?;
    // The tokenizer's metadata, without tensors: rebuilt exactly as from the GGUF on load. Built
    // here from those very bytes, which proves they suffice.
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata() {
        if (k.starts_with("tokenizer.") || k.starts_with("general.")) && k != "general.alignment" {
            w.add_kv(k.clone(), v.clone())?;
        }
    }
    let tok_gguf = w.to_bytes()?;
    let tok = Tokenizer::from_gguf(&GgufFile::from_bytes(tok_gguf.clone())?)?;
    let tok_json = tok
        .hf_tokenizer()?
        .to_string(false)
        .map_err(|e| rec_err(path, format!("cannot serialize the tokenizer: {e}")))?;
    let tensors = file
        .tensors()
        .iter()
        .map(|i| {
            (
                i.name.clone(),
                StoredTensor {
                    ty: i.ggml_type,
                    dims: i.dims.clone(),
                    data: file.tensor_shared(i),
                },
            )
        })
        .collect();
    Ok(Parts {
        kind: "gguf",
        name: file
            .get("general.name")
            .and_then(|v| v.as_str())
            .map(str::to_string),
        arch: arch_name,
        config,
        tensors,
        sources: vec![path.to_path_buf()],
        weight_sources: vec![path.to_path_buf()],
        extra: vec![
            ("tokenizer.gguf".into(), tok_gguf),
            ("tokenizer.json".into(), tok_json.into_bytes()),
        ],
        tokenizer: tok,
    })
}

fn hf_parts(dir: &Path, arch: Option<&str>) -> Result<Parts> {
    let ck = crate::hf_llama::read(dir, arch)?;
    let mut extra = Vec::new();
    let mut sources = ck.sources.clone();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        let p = dir.join(f);
        if p.is_file() {
            extra.push((f.to_string(), std::fs::read(&p).map_err(io_err(&p))?));
            sources.push(p);
        } else if f == "tokenizer.json" {
            return Err(rec_err(
                dir,
                "tokenizer.json is missing (Cinder needs the model's own tokenizer)",
            ));
        }
    }
    let weight_sources = ck
        .sources
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .cloned()
        .collect();
    Ok(Parts {
        kind: "safetensors",
        arch: ck.arch,
        name: ck.name,
        config: ArchConfig::new("llama", ck.config)?,
        tensors: ck.tensors,
        sources,
        weight_sources,
        extra,
        tokenizer: Tokenizer::from_tokenizer_json(dir.join("tokenizer.json"))?,
    })
}

/// The directory holding a source's companion files.
fn src_dir(src: &Path) -> &Path {
    if src.is_dir() {
        src
    } else {
        src.parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }
}

fn source_parts(src: &Path, arch: Option<&str>) -> Result<Parts> {
    crate::embedding::refuse_pickle(src)?;
    if src.is_dir() {
        if crate::hf_llama::is_hf_checkpoint(src) {
            return hf_parts(src, arch);
        }
        return Err(rec_err(
            src,
            "not a checkpoint directory: expected config.json with model.safetensors or \
             model.safetensors.index.json (pickle .bin checkpoints are refused: convert them to \
             SafeTensors)",
        ));
    }
    let ext = src
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "safetensors" => hf_parts(src_dir(src), arch),
        "onnx" => Err(rec_err(
            src,
            "ONNX graphs are not imported into records: sentence-embedding ONNX models load directly \
             (`cinder embed MODEL.onnx`), and whole graphs become Burn code with burn-import (book: \
             Importing models)",
        )),
        _ => gguf_parts(src, arch),
    }
}

/// Quantizes every 2-D weight whose rows are whole blocks of `ty` (norms and odd shapes stay).
fn quantize_tensors(tensors: &mut [(String, StoredTensor)], ty: GgmlType) -> Result<()> {
    for (name, t) in tensors.iter_mut() {
        if t.dims.len() != 2 || t.ty == ty || !t.dims[0].is_multiple_of(ty.block_size()) {
            continue;
        }
        let n = (t.dims[0] * t.dims[1]) as usize;
        let values = cinder_gguf::dequant::dequantize(t.ty, &t.data, n)?;
        let q = cinder_gguf::quantize::quantize(ty, &values, t.dims[0] as usize)
            .map_err(|e| rec_err(Path::new(name.as_str()), format!("cannot quantize: {e}")))?;
        t.ty = ty;
        t.data = SharedBytes::from_vec(q);
    }
    Ok(())
}

/// Imports `src` into the new directory `out` (see the module docs) and returns its manifest. The
/// model is built once on `device` before anything is written, so a record always loads.
pub fn import<B: InferenceBackend>(
    src: &Path,
    out: &Path,
    opts: &ImportOptions,
    device: &B::Device,
) -> Result<Manifest> {
    if out.exists()
        && std::fs::read_dir(out)
            .map_err(io_err(out))?
            .next()
            .is_some()
    {
        return Err(rec_err(
            out,
            "exists and is not empty; choose a new directory",
        ));
    }
    let mut parts = source_parts(src, opts.arch.as_deref())?;
    // Hash every source (and check pins) before anything is written.
    let mut source_digests = Vec::new();
    for p in &parts.sources {
        let d = manifest::digest_file(p, &p.display().to_string())?;
        if parts.weight_sources.contains(p)
            && !opts.expect_sha256.is_empty()
            && !opts
                .expect_sha256
                .iter()
                .any(|h| h.eq_ignore_ascii_case(&d.sha256))
        {
            return Err(rec_err(
                p,
                format!(
                    "sha256 is {}, not the pinned {} (--expect-sha256)",
                    d.sha256,
                    opts.expect_sha256.join(" or ")
                ),
            ));
        }
        source_digests.push(d);
    }
    if let Some(ty) = opts.quantize {
        quantize_tensors(&mut parts.tensors, ty)?;
    }
    // Validate before writing: the model must build from these tensors, and the tokenizer fit it.
    drop(parts.build(Box::new(|c, s| c.build::<B>(s, device)))?);

    let tmp = out.with_extension(format!("partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
    let result = write_record(&tmp, &parts, source_digests, opts);
    match result {
        Ok(m) => {
            if out.exists() {
                std::fs::remove_dir(out).map_err(io_err(out))?;
            }
            std::fs::rename(&tmp, out).map_err(io_err(out))?;
            tracing::info!(out = %out.display(), tensors = m.tensors.len(), "record written");
            Ok(m)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

fn write_record(
    dir: &Path,
    parts: &Parts,
    source_digests: Vec<FileDigest>,
    opts: &ImportOptions,
) -> Result<Manifest> {
    let config = serde_json::to_value(&parts.config)
        .map_err(|e| rec_err(dir, format!("cannot serialize the config: {e}")))?;
    let write = |name: &str, bytes: &[u8]| -> Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, bytes).map_err(io_err(&p))
    };
    let pretty = serde_json::to_string_pretty(&config)
        .map_err(|e| rec_err(dir, format!("cannot serialize the config: {e}")))?;
    write("config.json", pretty.as_bytes())?;
    for (name, bytes) in &parts.extra {
        write(name, bytes)?;
    }
    let arch = parts.arch.as_str();
    pack::write(
        &dir.join(pack::PACK),
        &parts.tensors,
        &[("format", manifest::FORMAT), ("architecture", arch)],
    )?;
    let mut names: Vec<&str> = vec![pack::PACK, "config.json"];
    names.extend(parts.extra.iter().map(|(n, _)| n.as_str()));
    let files = names
        .iter()
        .map(|n| manifest::digest_file(&dir.join(n), n))
        .collect::<Result<Vec<_>>>()?;
    let m = Manifest {
        format: manifest::FORMAT.into(),
        format_version: manifest::FORMAT_VERSION,
        cinder_version: env!("CARGO_PKG_VERSION").into(),
        architecture: parts.arch.clone(),
        name: parts.name.clone(),
        config,
        quantized_on_import: opts.quantize.map(|t| t.name().to_string()),
        source: SourceInfo {
            kind: parts.kind.into(),
            files: source_digests,
        },
        tensors: parts
            .tensors
            .iter()
            .map(|(name, t)| TensorEntry {
                name: name.clone(),
                ty: t.ty.name().into(),
                dims: t.dims.clone(),
                bytes: t.data.len() as u64,
            })
            .collect(),
        files,
        manifest_sha256: String::new(),
    };
    write(MANIFEST, m.to_sealed_json()?.as_bytes())?;
    Ok(m)
}

/// Reads a record directory and builds `build` from it, verifying the manifest's seal and every
/// file's sha256.
///
/// The hashing runs beside the parsing (`model.bpk` on one thread, the small files on another,
/// tokenizer and model built on this one), so verification costs no wall time on a 2-core machine;
/// the model is handed out only after every hash matched, and a changed file is reported as such
/// even if parsing it failed first.
pub(crate) fn load_record_with<T>(dir: &Path, build: Build<'_, T>) -> Result<Loaded<T>> {
    let m = Manifest::read(dir)?;
    let pack_entry = m.file(pack::PACK)?.clone();
    let small: Vec<&FileDigest> = m.files.iter().filter(|f| f.path != pack::PACK).collect();
    let (built, verified) = std::thread::scope(|s| {
        let big = s.spawn(|| manifest::verify_file(dir, &pack_entry));
        let rest = s.spawn(|| small.iter().try_for_each(|f| manifest::verify_file(dir, f)));
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            build_from_record(dir, &m, build)
        }));
        let joined = |h: std::thread::ScopedJoinHandle<'_, Result<()>>| {
            h.join()
                .unwrap_or_else(|_| Err(rec_err(dir, "a hashing thread failed")))
        };
        let verified = joined(rest).and(joined(big));
        (built, verified)
    });
    verified?;
    let (built, tokenizer) = built.map_err(|_| {
        rec_err(
            dir,
            "the record could not be parsed (panic while reading it)",
        )
    })??;
    let (n_params, type_histogram) =
        summarize(m.tensors.iter().map(|t| (t.ty.as_str(), t.dims.as_slice())));
    let info = ModelInfo {
        path: dir.to_path_buf(),
        arch: m.architecture.clone(),
        name: m.name.clone(),
        gguf_version: 0,
        file_bytes: pack_entry.size,
        n_params,
        type_histogram,
        tokenizer_model: format!("{:?}", tokenizer.kind).to_lowercase(),
    };
    tracing::info!(arch = %info.arch, params = info.n_params, "record read and verified");
    Ok(Loaded {
        built,
        tokenizer,
        info,
    })
}

/// Parses `config.json`, the tokenizer and `model.bpk` (the caller proves their hashes).
fn build_from_record<T>(dir: &Path, m: &Manifest, build: Build<'_, T>) -> Result<(T, Tokenizer)> {
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
    tokenizer
        .validate_against_model(config.vocab_size())
        .map_err(|e| ImportError::TokenizerMismatch(e.to_string()))?;
    let tensors = pack::read(&dir.join(pack::PACK), &m.tensors)?;
    let built = build(&config, &tensors as &dyn TensorStore)?;
    Ok((built, tokenizer))
}

/// Reads an HF SafeTensors checkpoint directory (converted in memory as `import` would) and builds
/// `build` from it.
pub(crate) fn load_hf_with<T>(dir: &Path, build: Build<'_, T>) -> Result<Loaded<T>> {
    let parts = hf_parts(dir, None)?;
    let built = parts.build(build)?;
    let (n_params, type_histogram) = parts.summary();
    Ok(Loaded {
        built,
        info: ModelInfo {
            path: dir.to_path_buf(),
            arch: parts.arch,
            name: parts.name,
            gguf_version: 0,
            file_bytes: parts.tensors.iter().map(|(_, t)| t.data.len() as u64).sum(),
            n_params,
            type_histogram,
            tokenizer_model: format!("{:?}", parts.tokenizer.kind).to_lowercase(),
        },
        tokenizer: parts.tokenizer,
    })
}
