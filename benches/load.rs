//! Criterion benchmark of model loading: SmolLM2-135M from its GGUF file and from a record of it
//! (`cinder import`), the record path including the sha256 check of every file. Both from a warm
//! page cache (what a restart sees); the record is written to a temporary directory first.
//!
//! `cargo bench --bench load`

use std::path::PathBuf;

use cinder::importer::{ImportOptions, import, load_model};
use cinder::prelude::*;
use criterion::{Criterion, criterion_group, criterion_main};

struct Load<'a>(&'a mut Criterion, &'static str);

impl BackendTask for Load<'_> {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let (c, name) = (self.0, self.1);
        let Ok(r) = cinder::catalog::resolve(name) else {
            eprintln!("{name} not available: load bench skipped");
            return;
        };
        let tmp = tempfile::tempdir().expect("tmp");
        let rec: PathBuf = tmp.path().join("rec");
        import::<B>(&r.path, &rec, &ImportOptions::default(), &device).expect("import");
        let mut g = c.benchmark_group(format!("load_{name}"));
        g.sample_size(20);
        g.bench_function("gguf", |b| {
            b.iter(|| load_model::<B>(&r.path, &device).expect("gguf loads"))
        });
        g.bench_function("record_verified", |b| {
            b.iter(|| load_model::<B>(&rec, &device).expect("record loads"))
        });
        g.finish();
    }
}

fn bench(c: &mut Criterion) {
    let kind = cinder::backends::default_kind().expect("a CPU backend");
    for name in ["smollm2-135m", "gemma3-270m"] {
        dispatch(kind, Load(c, name)).expect("backend");
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
