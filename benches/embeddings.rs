//! Criterion benchmarks of the embedding path: all-MiniLM-L6-v2 sentences/s at batch 1, 8 and 32 on
//! every compiled backend, and vector-index build and query throughput (flat and HNSW, 20,000 random
//! 384-d vectors; `cinder bench-index` measures 100,000 with recall).
//!
//! `cargo bench --bench embeddings` (add `--features ndarray,candle` for more backends).

use cinder::backends::BackendKind;
use cinder::index::{IndexKind, IndexOptions, Metric, VectorIndex};
use cinder::prelude::*;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn sentences() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/prompts/sentences.txt");
    std::fs::read_to_string(path)
        .expect("benches/prompts/sentences.txt")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

struct Embed<'a>(&'a mut Criterion, BackendKind);

impl BackendTask for Embed<'_> {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let (c, kind) = (self.0, self.1);
        let Ok(r) = cinder::catalog::resolve("all-minilm-l6-v2") else {
            eprintln!("all-minilm-l6-v2 not available: embedding bench skipped");
            return;
        };
        let mut e = cinder::importer::load_embedder::<B>("all-minilm-l6-v2", &r.path, &device)
            .expect("model loads");
        let all = sentences();
        let mut g = c.benchmark_group(format!("embed_minilm_l6_{kind}"));
        g.sample_size(10);
        for batch in [1usize, 8, 32] {
            e.set_max_batch(batch);
            let texts: Vec<&str> = all.iter().take(batch).map(String::as_str).collect();
            g.throughput(Throughput::Elements(batch as u64));
            g.bench_with_input(BenchmarkId::new("batch", batch), &texts, |b, t| {
                b.iter(|| e.embed(t, true).expect("embed"))
            });
        }
        g.finish();
    }
}

/// Deterministic pseudo-random vectors (uniform per component; the index normalizes them).
fn vectors(n: usize, dim: usize, mut s: u64) -> Vec<Vec<f32>> {
    (0..n)
        .map(|_| {
            (0..dim)
                .map(|_| {
                    s = s
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
                })
                .collect()
        })
        .collect()
}

fn index(c: &mut Criterion) {
    let (n, dim) = (20_000, 384);
    let data = vectors(n, dim, 1);
    let queries = vectors(64, dim, 2);
    let items = || -> Vec<(String, Vec<f32>, serde_json::Value)> {
        data.iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v.clone(), serde_json::Value::Null))
            .collect()
    };
    let mut g = c.benchmark_group("index_20k_384");
    g.sample_size(10);
    for kind in [IndexKind::Flat, IndexKind::Hnsw] {
        let opts = IndexOptions::new(dim, Metric::Cosine, kind);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::new("build", kind.to_string()), |b| {
            b.iter(|| {
                let mut ix = VectorIndex::new(opts.clone()).expect("index");
                ix.upsert_batch(items()).expect("insert");
                ix
            })
        });
        let mut ix = VectorIndex::new(opts).expect("index");
        ix.upsert_batch(items()).expect("insert");
        g.throughput(Throughput::Elements(queries.len() as u64));
        g.bench_function(BenchmarkId::new("query_k10", kind.to_string()), |b| {
            b.iter(|| {
                for q in &queries {
                    ix.search(q, 10, None).expect("search");
                }
            })
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    let _ = cinder::backends::set_threads(2);
    for kind in cinder::backends::compiled() {
        cinder::backends::dispatch(kind, Embed(c, kind)).expect("backend");
    }
    index(c);
}

criterion_group!(group, benches);
criterion_main!(group);
