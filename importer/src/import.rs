//! `cinder import`: a model read from any source [`Source`] opens (a GGUF file, an HF SafeTensors
//! checkpoint) written as a record ([`crate::record`]) with its checksum manifest.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cinder_gguf::writer::GgufWriter;
use cinder_gguf::{GgmlType, GgufFile, SharedBytes};
use cinder_runtime::InferenceBackend;
use cinder_tokenizer::Tokenizer;

use crate::error::Result;
use crate::gguf_weights::{StoredTensor, TensorStore};
use crate::record::manifest::{self, FileDigest, MANIFEST, Manifest, SourceInfo, TensorEntry};
use crate::record::{io_err, pack, rec_err};
use crate::registry::ArchConfig;
use crate::source::{Format, Source, Tensors};

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

/// Reads `src` for import: a GGUF file or an HF checkpoint (the formats a record is made from).
fn parts(src: &Path, arch: Option<&str>) -> Result<Parts> {
    match Format::detect(src)? {
        Format::Onnx => {
            return Err(rec_err(
                src,
                "ONNX graphs are not imported into records: sentence-embedding ONNX models load \
                 directly (`cinder embed MODEL.onnx`), and whole graphs become Burn code with \
                 burn-import (book: Importing models)",
            ));
        }
        Format::SentenceTransformers => {
            return Err(rec_err(
                src,
                "a sentence-embedding model, not a language model: it loads directly \
                 (`cinder embed`), no record needed",
            ));
        }
        Format::Record => {
            return Err(rec_err(src, "already a Cinder record"));
        }
        _ => {}
    }
    let s = Source::open_as(src, arch)?;
    let Source {
        config,
        tokenizer,
        tensors,
        info,
        files,
        ..
    } = s;
    let (kind, extra, tokenizer, tensors) = match tensors {
        Tensors::Gguf(file) => {
            // The tokenizer's metadata, without tensors: rebuilt exactly as from the GGUF on load.
            // Built here from those very bytes, which proves they suffice.
            let mut w = GgufWriter::new();
            for (k, v) in file.metadata() {
                if (k.starts_with("tokenizer.") || k.starts_with("general."))
                    && k != "general.alignment"
                {
                    w.add_kv(k.clone(), v.clone())?;
                }
            }
            let tok_gguf = w.to_bytes()?;
            let tok = Tokenizer::from_gguf(&GgufFile::from_bytes(tok_gguf.clone())?)?;
            let tok_json = tok
                .hf_tokenizer()?
                .to_string(false)
                .map_err(|e| rec_err(src, format!("cannot serialize the tokenizer: {e}")))?;
            let list = file
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
            let extra = vec![
                ("tokenizer.gguf".into(), tok_gguf),
                ("tokenizer.json".into(), tok_json.into_bytes()),
            ];
            ("gguf", extra, tok, list)
        }
        Tensors::Stored { list, .. } => {
            let mut extra = Vec::new();
            for p in &files {
                let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
                if let Some(n) =
                    name.filter(|n| n == "tokenizer.json" || n == "tokenizer_config.json")
                {
                    extra.push((n, std::fs::read(p).map_err(io_err(p))?));
                }
            }
            ("safetensors", extra, tokenizer, list)
        }
    };
    let weight_sources = files
        .iter()
        .filter(|p| kind == "gguf" || p.extension().is_some_and(|e| e == "safetensors"))
        .cloned()
        .collect();
    Ok(Parts {
        kind,
        arch: info.arch,
        name: info.name,
        config,
        tensors,
        sources: files,
        weight_sources,
        extra,
        tokenizer,
    })
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
    let mut parts = parts(src, opts.arch.as_deref())?;
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
    parts
        .tokenizer
        .validate_against_model(parts.config.vocab_size())
        .map_err(|e| crate::ImportError::TokenizerMismatch(e.to_string()))?;
    let store: HashMap<String, StoredTensor> = parts.tensors.iter().cloned().collect();
    drop(
        parts
            .config
            .build::<B>(&store as &dyn TensorStore, device)?,
    );

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
