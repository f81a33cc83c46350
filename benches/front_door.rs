//! Criterion benchmark of the front door (`cinder::Llm`) on SmolLM2-135M, greedy:
//! - `one_sequence/generic` vs `one_sequence/front_door`: 32 tokens of one prompt through the
//!   generic path (`generate` stepping an engine core on the caller's thread) and through the
//!   handle (its engine thread and event channel): the front door's overhead;
//! - `threads/1` vs `threads/8`: 8 prompts of 32 tokens each, one after another from one thread,
//!   or from 8 threads at once on clones of one handle (batched in its engine): divide the times
//!   for the aggregate speed-up.
//!
//! `cargo bench --bench front_door` (`CINDER_BACKEND` picks the backend; default the CPU).

use std::time::Duration;

use cinder::prelude::{BackendTask, InferenceBackend, SamplingParams};
use cinder::{GenerateOptions, Llm};
use criterion::{Criterion, criterion_group, criterion_main};

const TOKENS: usize = 32;
const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "Once upon a time",
    "Rust is a systems programming language that",
    "The three primary colours are",
    "In 1969, astronauts",
    "def fibonacci(n):",
    "The best way to learn a language is",
    "Water boils at",
];

fn opts() -> GenerateOptions {
    GenerateOptions {
        ignore_eos: true,
        ..GenerateOptions::greedy(TOKENS)
    }
}

struct Generic<'a>(&'a mut Criterion);

impl BackendTask for Generic<'_> {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let path = cinder::catalog::resolve("smollm2-135m")
            .expect("model")
            .path;
        let m = cinder::importer::load_model::<B>(&path, &device).expect("loads");
        let ids = m.tokenizer.encode(PROMPTS[0], true).expect("encode");
        let o = cinder::prelude::GenerateOptions {
            max_tokens: TOKENS,
            sampling: SamplingParams::greedy(),
            stop_on_eos: false,
            ..Default::default()
        };
        let mut g = self.0.benchmark_group("one_sequence");
        g.sample_size(10).measurement_time(Duration::from_secs(8));
        g.bench_function("generic", |b| {
            b.iter(|| cinder::prelude::generate(&m.model, &m.tokenizer, &ids, &o, &mut |_| true))
        });
        g.finish();
    }
}

fn bench(c: &mut Criterion) {
    let kind = cinder::BackendKind::Auto.resolve().expect("a backend");
    cinder::backends::dispatch(kind, Generic(c)).expect("backend");
    let llm = Llm::builder("smollm2-135m")
        .backend(kind)
        .build()
        .expect("loads");
    let mut g = c.benchmark_group("one_sequence");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.bench_function("front_door", |b| {
        b.iter(|| llm.generate(PROMPTS[0], &opts()).expect("generate"))
    });
    g.finish();

    let mut g = c.benchmark_group("threads");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.bench_function("1", |b| {
        b.iter(|| {
            for p in PROMPTS {
                llm.generate(p, &opts()).expect("generate");
            }
        })
    });
    g.bench_function("8", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                for p in PROMPTS {
                    let llm = llm.clone();
                    s.spawn(move || llm.generate(p, &opts()).expect("generate"));
                }
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
