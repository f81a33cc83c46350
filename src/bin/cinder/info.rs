//! `cinder info`

use anyhow::{Context, Result};
use cinder::gguf::GgufFile;
use cinder::importer::ModelInfo;
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
    if cinder::importer::record::is_record(&path) {
        return record(a, &path);
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
            "gguf_version": info.gguf_version,
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
    println!("gguf version  {}", info.gguf_version);
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
    let hist: Vec<String> = info
        .type_histogram
        .iter()
        .map(|(t, n)| format!("{t}: {n}"))
        .collect();
    println!("tensor types  {}", hist.join(", "));
    println!(
        "tokenizer     {} / {tok_kind}, vocab {vocab}",
        info.tokenizer_model
    );
    Ok(())
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
