//! `cinder bench-embed` (sentences/s per batch size) and `cinder bench-index` (HNSW against exact
//! search on random unit vectors: build time, query latency, recall@k).

use std::time::Instant;

use anyhow::{Context, Result, bail};
use cinder::index::{HnswParams, IndexKind, IndexOptions, Metric, VectorIndex};
use cinder::prelude::*;
use clap::Args;

/// `cinder bench-embed MODEL --file SENTENCES`
#[derive(Args, Debug)]
pub struct BenchEmbedArgs {
    /// Embedding model (catalog name or path).
    pub model: String,
    /// One sentence per line (default: benches/prompts/sentences.txt).
    #[arg(long, default_value = "benches/prompts/sentences.txt")]
    pub file: String,
    /// Batch sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 8, 32])]
    pub batch: Vec<usize>,
    /// Sentences embedded per repetition (taken from the file in order, cycling).
    #[arg(long, default_value_t = 128)]
    pub sentences: usize,
    /// Repetitions (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Print one JSON line per batch size.
    #[arg(long)]
    pub json: bool,
    /// Embed all the sentences in one call, sorted by length and cut into batches of the batch
    /// size (an offline corpus, as sentence-transformers' `encode` does), instead of one call per
    /// batch in file order (clients sending requests of that many texts).
    #[arg(long)]
    pub sorted: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs on backend `B`.
pub struct BenchEmbedTask(pub BenchEmbedArgs);

impl BackendTask for BenchEmbedTask {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let a = self.0;
        let lines: Vec<String> = std::fs::read_to_string(&a.file)
            .with_context(|| format!("reading the sentences file {}", a.file))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect();
        if lines.is_empty() || a.reps == 0 || a.sentences == 0 {
            bail!(
                "need sentences in {}, --reps ≥ 1 and --sentences ≥ 1",
                a.file
            );
        }
        let texts: Vec<&str> = (0..a.sentences)
            .map(|i| lines[i % lines.len()].as_str())
            .collect();
        let mut e = crate::embed_cmd::load_embedder::<B>(&a.model, &device)?;
        e.embed(&texts[..texts.len().min(8)], true)?; // warm-up
        for &b in &a.batch {
            e.set_max_batch(b);
            let mut rates = Vec::new();
            for _ in 0..a.reps {
                let t = Instant::now();
                if a.sorted {
                    // `embed` sorts by length and runs batches of at most `b`.
                    e.embed(&texts, true)?;
                } else {
                    // Batches of `b` in file order, as a client sending requests of `b` texts would.
                    for chunk in texts.chunks(b) {
                        e.embed(chunk, true)?;
                    }
                }
                rates.push(texts.len() as f64 / t.elapsed().as_secs_f64());
            }
            let med = median(rates.clone());
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({"model": a.model, "batch": b, "sorted": a.sorted,
                        "sentences_per_s": med, "reps": rates})
                );
            } else {
                println!(
                    "{:<32} batch {b:>3}{}: {med:>8.1} sentences/s (median of {})",
                    a.model,
                    if a.sorted { " sorted" } else { "" },
                    a.reps
                );
            }
        }
        Ok(())
    }
}

/// `cinder bench-index`
#[derive(Args, Debug)]
pub struct BenchIndexArgs {
    /// Points.
    #[arg(long, default_value_t = 100_000)]
    pub n: usize,
    /// Dimension.
    #[arg(long, default_value_t = 384)]
    pub dim: usize,
    /// Queries.
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    /// Neighbours per query.
    #[arg(short, default_value_t = 10)]
    pub k: usize,
    /// HNSW links per node (M).
    #[arg(long, default_value_t = HnswParams::default().connectivity)]
    pub connectivity: usize,
    /// HNSW candidate list while inserting.
    #[arg(long, default_value_t = HnswParams::default().expansion_add)]
    pub ef_construction: usize,
    /// HNSW search candidate lists to measure, comma-separated (one build, several ef).
    #[arg(long, value_delimiter = ',', default_values_t = [HnswParams::default().expansion_search])]
    pub ef_search: Vec<usize>,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Deterministic standard-normal vectors (xorshift + Box–Muller), normalized by the index.
fn gaussian_vectors(n: usize, dim: usize, mut seed: u64) -> Vec<Vec<f32>> {
    let mut uniform = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ((seed >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            (0..dim)
                .map(|_| {
                    let (u, v) = (uniform(), uniform());
                    ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
                })
                .collect()
        })
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Runs `cinder bench-index`.
pub fn bench_index(a: &BenchIndexArgs) -> Result<()> {
    if a.n == 0 || a.queries == 0 || a.k == 0 {
        bail!("--n, --queries and -k must be ≥ 1");
    }
    let data = gaussian_vectors(a.n, a.dim, 0x9E37_79B9_7F4A_7C15);
    let queries = gaussian_vectors(a.queries, a.dim, 0xD1B5_4A32_D192_ED03);
    let items = |d: &[Vec<f32>]| -> Vec<(String, Vec<f32>, serde_json::Value)> {
        d.iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v.clone(), serde_json::Value::Null))
            .collect()
    };
    let mut report = serde_json::Map::new();
    // Exact neighbours first: the flat index is the reference.
    let mut flat = VectorIndex::new(IndexOptions::new(a.dim, Metric::Cosine, IndexKind::Flat))?;
    let t = Instant::now();
    flat.upsert_batch(items(&data))?;
    let flat_build = t.elapsed().as_secs_f64();
    let (exact, flat_stats) = run_queries(&flat, &queries, a.k)?;
    report.insert("flat".into(), flat_stats.json(flat_build, None));
    if !a.json {
        println!("{}", flat_stats.line("flat", a.n, a.dim, flat_build, None));
    }
    let mut opts = IndexOptions::new(a.dim, Metric::Cosine, IndexKind::Hnsw);
    opts.hnsw.connectivity = a.connectivity;
    opts.hnsw.expansion_add = a.ef_construction;
    let mut hnsw = VectorIndex::new(opts)?;
    let t = Instant::now();
    hnsw.upsert_batch(items(&data))?;
    let build = t.elapsed().as_secs_f64();
    let mut runs = Vec::new();
    for &ef in &a.ef_search {
        hnsw.set_ef_search(ef);
        let (ids, stats) = run_queries(&hnsw, &queries, a.k)?;
        let found: usize = exact
            .iter()
            .zip(&ids)
            .map(|(e, h)| h.iter().filter(|id| e.contains(id)).count())
            .sum();
        let recall = found as f64 / (exact.len() * a.k) as f64;
        let label = format!(
            "hnsw M {} efC {} ef {ef}",
            a.connectivity, a.ef_construction
        );
        if !a.json {
            println!(
                "{}",
                stats.line(&label, a.n, a.dim, build, Some((a.k, recall)))
            );
        }
        let mut j = stats.json(build, Some(recall));
        j["ef_search"] = ef.into();
        runs.push(j);
    }
    report.insert(
        "hnsw".into(),
        serde_json::json!({"connectivity": a.connectivity, "ef_construction": a.ef_construction,
            "build_s": build, "k": a.k, "runs": runs}),
    );
    if a.json {
        println!("{}", serde_json::Value::Object(report));
    }
    Ok(())
}

/// Latency statistics of one query run (single thread, one query at a time).
struct QueryStats {
    p50: f64,
    p99: f64,
    qps: f64,
}

impl QueryStats {
    fn json(&self, build_s: f64, recall: Option<f64>) -> serde_json::Value {
        serde_json::json!({"build_s": build_s, "p50_ms": self.p50, "p99_ms": self.p99,
            "qps": self.qps, "recall": recall})
    }

    fn line(
        &self,
        label: &str,
        n: usize,
        dim: usize,
        build_s: f64,
        recall: Option<(usize, f64)>,
    ) -> String {
        let r = recall.map_or(String::new(), |(k, r)| format!(", recall@{k} {r:.4}"));
        format!(
            "{label}: n {n} dim {dim}, build {build_s:.1}s ({:.0} points/s), query p50 {:.3} ms p99 {:.3} ms ({:.0} queries/s){r}",
            n as f64 / build_s,
            self.p50,
            self.p99,
            self.qps
        )
    }
}

fn run_queries(
    ix: &VectorIndex,
    queries: &[Vec<f32>],
    k: usize,
) -> Result<(Vec<Vec<String>>, QueryStats)> {
    let mut lat = Vec::with_capacity(queries.len());
    let mut ids = Vec::with_capacity(queries.len());
    for q in queries {
        let t = Instant::now();
        let hits = ix.search(q, k, None)?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        ids.push(hits.into_iter().map(|h| h.id).collect());
    }
    let total_s = lat.iter().sum::<f64>() / 1e3;
    lat.sort_by(f64::total_cmp);
    Ok((
        ids,
        QueryStats {
            p50: percentile(&lat, 0.5),
            p99: percentile(&lat, 0.99),
            qps: queries.len() as f64 / total_s,
        },
    ))
}
