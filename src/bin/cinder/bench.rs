//! `cinder bench`: prompt processing and generation speed in the style of llama-bench.

use std::time::Instant;

use anyhow::Result;
use cinder::backends::BackendKind;
use cinder::prelude::*;
use cinder::runtime::attention::ContiguousKvCache;
use cinder::runtime::generate::{logits_to_vec, prefill, token_tensor};
use cinder::runtime::sampler::argmax;
use clap::Args;

/// `cinder bench MODEL`
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Catalog name or path to a GGUF file.
    pub model: String,
    /// Prompt length for the prompt-processing test (0 = skip).
    #[arg(long, default_value_t = 512)]
    pub prompt_tokens: usize,
    /// Tokens generated in the generation test (0 = skip).
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// Repetitions (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Runs on backend `B`.
pub struct Task {
    /// flags
    pub args: BenchArgs,
    /// backend name for the report
    pub kind: BackendKind,
    /// requested threads
    pub threads: Option<usize>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl BackendTask for Task {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let a = self.args;
        let m = crate::load_model::<B>(&a.model, &device)?;
        let model = &m.model;
        let vocab = model.vocab_size() as u32;
        // A deterministic, non-degenerate prompt: ids spread over the vocabulary.
        let prompt: Vec<u32> = (0..a.prompt_tokens.max(1))
            .map(|i| ((i as u64 * 2_654_435_761) % vocab as u64) as u32)
            .collect();
        let reps = a.reps.max(1);
        let (mut pp, mut tg) = (Vec::new(), Vec::new());
        // One untimed warm-up of each test (first-touch allocations, kernel compilation on GPUs).
        for rep in 0..=reps {
            if a.prompt_tokens > 0 {
                let mut cache = ContiguousKvCache::<B>::new(model.n_layers(), a.prompt_tokens);
                let t0 = Instant::now();
                prefill(model, &mut cache, &prompt)?;
                let s = t0.elapsed().as_secs_f64();
                if rep > 0 {
                    pp.push(a.prompt_tokens as f64 / s);
                }
            }
            if a.gen_tokens > 0 {
                let mut cache = ContiguousKvCache::<B>::new(model.n_layers(), a.gen_tokens + 1);
                let mut logits = prefill(model, &mut cache, &prompt[..1])?;
                let t0 = Instant::now();
                for _ in 0..a.gen_tokens {
                    let next = argmax(&logits);
                    let l = model.forward(
                        token_tensor::<B>(&[next], &device),
                        &mut cache,
                        Logits::Last,
                    );
                    logits = logits_to_vec(l)?;
                }
                let s = t0.elapsed().as_secs_f64();
                if rep > 0 {
                    tg.push(a.gen_tokens as f64 / s);
                }
            }
        }
        let threads = self
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let rss = cinder::peak_rss_bytes().unwrap_or(0);
        let (pp_med, tg_med) = (median(pp.clone()), median(tg.clone()));
        if a.json {
            let v = serde_json::json!({
                "model": m.info.path.display().to_string(),
                "backend": self.kind.name(),
                "pp_tokens": a.prompt_tokens, "tg_tokens": a.gen_tokens, "reps": reps,
                "pp_tps": pp_med, "tg_tps": tg_med,
                "pp_all": pp, "tg_all": tg,
                "threads": threads, "peak_rss_bytes": rss,
            });
            println!("{v}");
        } else {
            let range = |v: &[f64]| {
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(0.0, f64::max);
                format!("{lo:.2}–{hi:.2}")
            };
            println!(
                "model: {}  backend: {}  threads: {threads}",
                m.info.path.display(),
                self.kind
            );
            if a.prompt_tokens > 0 {
                println!(
                    "pp{:<5} {:>9.2} t/s  (min–max {}, {reps} reps)",
                    a.prompt_tokens,
                    pp_med,
                    range(&pp)
                );
            }
            if a.gen_tokens > 0 {
                println!(
                    "tg{:<5} {:>9.2} t/s  (min–max {}, {reps} reps)",
                    a.gen_tokens,
                    tg_med,
                    range(&tg)
                );
            }
            println!("peak RSS {:.1} MiB", rss as f64 / (1 << 20) as f64);
        }
        Ok(())
    }
}
