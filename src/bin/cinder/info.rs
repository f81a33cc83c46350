//! `cinder info`

use anyhow::{Context, Result};
use cinder::gguf::GgufFile;
use cinder::importer::{Format, ModelInfo, Source};
use cinder::tokenizer::Tokenizer;
use clap::Args;

/// `cinder info MODEL`
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Catalog name or path to a GGUF file.
    pub model: String,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Prints the report (reads the header and metadata only; no backend needed).
pub fn run(a: &InfoArgs) -> Result<()> {
    let path = crate::resolve_model(&a.model)?;
    match Format::detect(&path)? {
        Format::Record => return record(a, &path),
        Format::Gguf => {}
        _ => return source(a, &path),
    }
    let f = GgufFile::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let info = ModelInfo::from_gguf(&path, &f);
    let sha = cinder::catalog::sha256_file(&path)?;
    let arch = info.arch.clone();
    let num = |k: &str| f.get(&format!("{arch}.{k}")).map(|v| v.to_string());
    let tok = Tokenizer::from_gguf(&f);
    let (tok_kind, vocab) = match &tok {
        Ok(t) => (
            format!("{:?} (pre: {})", t.kind, t.pre),
            t.vocab_size.to_string(),
        ),
        Err(e) => (format!("unusable: {e}"), "?".into()),
    };
    if a.json {
        let v = serde_json::json!({
            "path": path.display().to_string(),
            "arch": info.arch,
            "name": info.name,
            "format": info.format.name(),
            "gguf_version": info.format_version,
            "file_bytes": info.file_bytes,
            "n_params": info.n_params,
            "tensor_types": info.type_histogram,
            "tokenizer_model": info.tokenizer_model,
            "tokenizer": tok_kind,
            "vocab_size": vocab,
            "block_count": num("block_count"),
            "embedding_length": num("embedding_length"),
            "context_length": num("context_length"),
            "sha256": sha,
        });
        println!("{v}");
        return Ok(());
    }
    println!("file          {}", path.display());
    println!("sha256        {sha}");
    println!("name          {}", info.name.as_deref().unwrap_or("-"));
    println!("architecture  {}", info.arch);
    println!(
        "format        gguf v{}",
        info.format_version.unwrap_or_default()
    );
    println!(
        "file size     {:.1} MiB",
        info.file_bytes as f64 / (1 << 20) as f64
    );
    println!("parameters    {:.1} M", info.n_params as f64 / 1e6);
    for k in [
        "block_count",
        "embedding_length",
        "feed_forward_length",
        "attention.head_count",
        "attention.head_count_kv",
        "context_length",
        "rope.freq_base",
    ] {
        if let Some(v) = num(k) {
            println!(
                "{:<13} {v}",
                k.rsplit('.').next().unwrap_or(k).replace("_", " ")
            );
        }
    }
    print_types(&info.type_histogram);
    println!(
        "tokenizer     {} / {tok_kind}, vocab {vocab}",
        info.tokenizer_model
    );
    Ok(())
}

/// `cinder info DIR` for a Hugging Face checkpoint: what [`Source`] reads from it (an embedding
/// model's folder is refused with the loader to use).
fn source(a: &InfoArgs, path: &std::path::Path) -> Result<()> {
    let src = Source::open(path).with_context(|| format!("reading {}", path.display()))?;
    let info = src.info();
    let tok = src.tokenizer();
    if a.json {
        let v = serde_json::json!({
            "path": info.path.display().to_string(),
            "format": info.format.name(),
            "arch": info.arch,
            "name": info.name,
            "file_bytes": info.file_bytes,
            "n_params": info.n_params,
            "tensor_types": info.type_histogram,
            "tokenizer_model": info.tokenizer_model,
            "vocab_size": tok.vocab_size,
            "block_count": src.config().n_layers(),
            "files": src.files().iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        });
        println!("{v}");
        return Ok(());
    }
    println!("checkpoint    {}", info.path.display());
    println!("format        {}", info.format);
    println!("name          {}", info.name.as_deref().unwrap_or("-"));
    println!("architecture  {}", info.arch);
    println!(
        "weights       {:.1} MiB",
        info.file_bytes as f64 / (1 << 20) as f64
    );
    println!("parameters    {:.1} M", info.n_params as f64 / 1e6);
    println!("block count   {}", src.config().n_layers());
    print_types(&info.type_histogram);
    println!(
        "tokenizer     {}, vocab {}",
        info.tokenizer_model, tok.vocab_size
    );
    Ok(())
}

/// The `tensor types` line: count per storage type.
fn print_types(hist: &std::collections::BTreeMap<String, usize>) {
    let parts: Vec<String> = hist.iter().map(|(t, n)| format!("{t}: {n}")).collect();
    println!("tensor types  {}", parts.join(", "));
}

/// `cinder info RECORD_DIR`: the manifest, with every file checked against it.
fn record(a: &InfoArgs, dir: &std::path::Path) -> Result<()> {
    use cinder::importer::record::manifest::{Manifest, verify_file};
    let m = Manifest::read(dir).with_context(|| format!("reading {}", dir.display()))?;
    let checks: Vec<(String, Option<String>)> = m
        .files
        .iter()
        .map(|f| {
            (
                f.path.clone(),
                verify_file(dir, f).err().map(|e| e.to_string()),
            )
        })
        .collect();
    if a.json {
        let v = serde_json::json!({
            "path": dir.display().to_string(),
            "manifest": m,
            "verified": checks.iter().all(|(_, e)| e.is_none()),
            "errors": checks.iter().filter_map(|(_, e)| e.clone()).collect::<Vec<_>>(),
        });
        println!("{v}");
    } else {
        println!("record        {}", dir.display());
        println!("name          {}", m.name.as_deref().unwrap_or("-"));
        println!("architecture  {}", m.architecture);
        println!(
            "imported from {} by cinder {}",
            m.source.kind, m.cinder_version
        );
        for f in &m.source.files {
            println!("  source      {}  {}", f.sha256, f.path);
        }
        let mut hist = std::collections::BTreeMap::new();
        for t in &m.tensors {
            *hist.entry(t.ty.as_str()).or_insert(0) += 1;
        }
        let hist: Vec<String> = hist.iter().map(|(t, n)| format!("{t}: {n}")).collect();
        println!("tensor types  {}", hist.join(", "));
        for (path, err) in &checks {
            match err {
                None => println!("  ok          {path}"),
                Some(e) => println!("  CHANGED     {e}"),
            }
        }
    }
    if let Some((_, Some(e))) = checks.iter().find(|(_, e)| e.is_some()) {
        anyhow::bail!("the record does not match its manifest: {e}");
    }
    Ok(())
}
