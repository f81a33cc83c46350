//! `cinder index`: create, fill and query vector indexes on disk.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use cinder::index::{HnswParams, IndexKind, IndexOptions, Metric, VectorIndex};
use cinder::prelude::*;
use clap::{Args, Subcommand};

/// `cinder index ...`
#[derive(Args, Debug)]
pub struct IndexArgs {
    #[command(subcommand)]
    pub cmd: IndexCmd,
}

/// The index subcommands. NAME is a path (with a `/` or ending in `.cidx`) or a name kept under
/// `$CINDER_HOME/indexes/NAME.cidx`.
#[derive(Subcommand, Debug)]
pub enum IndexCmd {
    /// Create an empty index.
    Create {
        /// Index name or path.
        name: String,
        /// Vector dimension (384 for MiniLM models).
        #[arg(long)]
        dim: usize,
        /// cosine, dot or l2.
        #[arg(long, default_value = "cosine")]
        metric: String,
        /// hnsw (approximate, fast) or flat (exact).
        #[arg(long, default_value = "hnsw")]
        kind: String,
        /// Embedding model recorded for `add`/`search` (catalog name or path).
        #[arg(long)]
        model: Option<String>,
        /// HNSW links per node (M).
        #[arg(long, default_value_t = HnswParams::default().connectivity)]
        connectivity: usize,
        /// HNSW candidate list while inserting (ef_construction).
        #[arg(long, default_value_t = HnswParams::default().expansion_add)]
        ef_construction: usize,
        /// HNSW candidate list while searching (ef).
        #[arg(long, default_value_t = HnswParams::default().expansion_search)]
        ef_search: usize,
        /// Replace an existing index of that name.
        #[arg(long)]
        force: bool,
    },
    /// Embed and add documents from a JSONL file: one object per line with "id" and "text"; the
    /// other fields (and the text) become the point's payload. An existing id is replaced.
    Add {
        /// Index name or path.
        name: String,
        /// JSONL documents.
        #[arg(long)]
        file: PathBuf,
        /// Embedding model (default: the one the index records).
        #[arg(long)]
        model: Option<String>,
    },
    /// Search by text.
    Search {
        /// Index name or path.
        name: String,
        /// Query text.
        #[arg(long)]
        query: String,
        /// Results.
        #[arg(short = 'k', long = "top-k", default_value_t = 10)]
        k: usize,
        /// Embedding model (default: the one the index records).
        #[arg(long)]
        model: Option<String>,
        /// Print JSON lines `{"id":..,"score":..,"payload":..}`.
        #[arg(long)]
        json: bool,
    },
    /// Delete points by id.
    Delete {
        /// Index name or path.
        name: String,
        /// Ids to delete (repeatable).
        #[arg(long = "id", required = true)]
        ids: Vec<String>,
    },
    /// Show an index's dimension, metric, kind, model and size.
    Info {
        /// Index name or path.
        name: String,
    },
}

/// Where index NAME lives.
pub fn index_path(name: &str) -> PathBuf {
    if name.contains('/') || name.ends_with(".cidx") {
        PathBuf::from(name)
    } else {
        cinder::catalog::cache_dir()
            .join("indexes")
            .join(format!("{name}.cidx"))
    }
}

fn open(name: &str) -> Result<(PathBuf, VectorIndex)> {
    let path = index_path(name);
    if !path.exists() {
        bail!(
            "no index {name:?} at {} (create it with `cinder index create {name} --dim D`)",
            path.display()
        );
    }
    let ix = VectorIndex::open(&path)?;
    Ok((path, ix))
}

/// The model to embed with: the flag, else the index's; refusing a flag that contradicts the index.
fn model_for(ix: &VectorIndex, flag: &Option<String>) -> Result<String> {
    match (flag, &ix.options().model) {
        (Some(f), Some(m)) if f != m => bail!(
            "the index holds vectors of model {m:?}; embedding with {f:?} would mix two vector spaces"
        ),
        (Some(f), _) => Ok(f.clone()),
        (None, Some(m)) => Ok(m.clone()),
        (None, None) => bail!("the index records no model: pass --model MODEL"),
    }
}

/// Runs the subcommands that need no backend; returns the task for those that embed.
pub fn run_local(a: IndexArgs) -> Result<Option<IndexTask>> {
    match a.cmd {
        IndexCmd::Create {
            name,
            dim,
            metric,
            kind,
            model,
            connectivity,
            ef_construction,
            ef_search,
            force,
        } => {
            let path = index_path(&name);
            if path.exists() && !force {
                bail!(
                    "index {} exists (use --force to replace it)",
                    path.display()
                );
            }
            let mut opts =
                IndexOptions::new(dim, metric.parse::<Metric>()?, kind.parse::<IndexKind>()?);
            opts.model = model;
            opts.hnsw = HnswParams {
                connectivity,
                expansion_add: ef_construction,
                expansion_search: ef_search,
            };
            let ix = VectorIndex::new(opts)?;
            ix.save(&path)?;
            println!("created {} ({dim}-d, {metric}, {kind})", path.display());
            Ok(None)
        }
        IndexCmd::Delete { name, ids } => {
            let (path, mut ix) = open(&name)?;
            let mut gone = 0;
            for id in &ids {
                if ix.delete(id)? {
                    gone += 1;
                } else {
                    eprintln!("no point {id:?}");
                }
            }
            ix.save(&path)?;
            println!("deleted {gone}; {} points remain", ix.len());
            Ok(None)
        }
        IndexCmd::Info { name } => {
            let (path, ix) = open(&name)?;
            let o = ix.options();
            println!("path      {}", path.display());
            println!("points    {}", ix.len());
            println!("dim       {}", o.dim);
            println!("metric    {}", o.metric);
            println!("kind      {}", o.kind);
            println!("model     {}", o.model.as_deref().unwrap_or("-"));
            if o.kind == IndexKind::Hnsw {
                println!(
                    "hnsw      M {} ef_construction {} ef_search {}",
                    o.hnsw.connectivity, o.hnsw.expansion_add, o.hnsw.expansion_search
                );
            }
            Ok(None)
        }
        cmd => Ok(Some(IndexTask(cmd))),
    }
}

/// Reads `{"id":..,"text":..,...}` lines.
fn read_docs(file: &PathBuf) -> Result<Vec<(String, String, serde_json::Value)>> {
    let f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut docs = Vec::new();
    for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.with_context(|| format!("{}: line {}", file.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}: line {}", file.display(), n + 1);
        let v: serde_json::Value = serde_json::from_str(&line).with_context(at)?;
        let serde_json::Value::Object(mut obj) = v else {
            bail!("{}: expected a JSON object", at());
        };
        let id = match obj.remove("id") {
            Some(serde_json::Value::String(s)) => s,
            Some(serde_json::Value::Number(n)) => n.to_string(),
            _ => bail!("{}: needs an \"id\" (string or number)", at()),
        };
        let text = match obj.get("text") {
            Some(serde_json::Value::String(s)) if !s.trim().is_empty() => s.clone(),
            _ => bail!("{}: needs a non-empty \"text\" string", at()),
        };
        docs.push((id, text, serde_json::Value::Object(obj)));
    }
    if docs.is_empty() {
        bail!("{} holds no documents", file.display());
    }
    Ok(docs)
}

/// `add` and `search`, on backend `B`.
pub struct IndexTask(IndexCmd);

impl BackendTask for IndexTask {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        match self.0 {
            IndexCmd::Add { name, file, model } => {
                let (path, mut ix) = open(&name)?;
                let model = model_for(&ix, &model)?;
                let docs = read_docs(&file)?;
                let e = crate::embed_cmd::load_embedder::<B>(&model, &device)?;
                if e.dim() != ix.options().dim {
                    bail!(
                        "model {model:?} makes {}-d vectors; the index holds {}-d",
                        e.dim(),
                        ix.options().dim
                    );
                }
                let t0 = std::time::Instant::now();
                let mut items = Vec::with_capacity(docs.len());
                // Embed in slices so a huge file never holds one giant batch.
                for chunk in docs.chunks(cinder::models::embed::MAX_INPUTS) {
                    let texts: Vec<&str> = chunk.iter().map(|d| d.1.as_str()).collect();
                    let vs = e.embed(&texts, true)?;
                    for ((id, _, payload), v) in chunk.iter().zip(vs) {
                        items.push((id.clone(), v, payload.clone()));
                    }
                }
                let embed_s = t0.elapsed().as_secs_f64();
                let n = items.len();
                ix.set_model(Some(model));
                ix.upsert_batch(items)?;
                ix.save(&path)?;
                println!(
                    "added {n} documents in {:.2}s ({:.0}/s embedding); {} points",
                    t0.elapsed().as_secs_f64(),
                    n as f64 / embed_s.max(1e-9),
                    ix.len()
                );
                Ok(())
            }
            IndexCmd::Search {
                name,
                query,
                k,
                model,
                json,
            } => {
                let (_, ix) = open(&name)?;
                let model = model_for(&ix, &model)?;
                let e = crate::embed_cmd::load_embedder::<B>(&model, &device)?;
                let q = e.embed(&[query.as_str()], true)?.remove(0);
                let hits = ix.search(&q, k, Some(ix.options().metric))?;
                let mut out = std::io::stdout().lock();
                for h in hits {
                    if json {
                        writeln!(out, "{}", serde_json::to_string(&h)?)?;
                    } else {
                        let text = h.payload.get("text").and_then(|t| t.as_str()).unwrap_or("");
                        let short: String = text.chars().take(80).collect();
                        writeln!(out, "{:>8.4}  {:<16}  {short}", h.score, h.id)?;
                    }
                }
                Ok(())
            }
            IndexCmd::Create { .. } | IndexCmd::Delete { .. } | IndexCmd::Info { .. } => {
                unreachable!("handled by run_local")
            }
        }
    }
}
