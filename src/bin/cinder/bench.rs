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
    /// Prompt lengths for the prompt-processing tests, comma-separated (0 = skip), as llama-bench's
    /// `-p`.
    #[arg(long, value_delimiter = ',', default_values_t = [128usize, 512])]
    pub prompt_tokens: Vec<usize>,
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
        let lens: Vec<usize> = a.prompt_tokens.iter().copied().filter(|&n| n > 0).collect();
        // A deterministic, non-degenerate prompt: ids spread over the vocabulary.
        let longest = lens.iter().copied().max().unwrap_or(1);
        let prompt: Vec<u32> = (0..longest)
            .map(|i| ((i as u64 * 2_654_435_761) % vocab as u64) as u32)
            .collect();
        let reps = a.reps.max(1);
        let mut pp: Vec<Vec<f64>> = vec![Vec::new(); lens.len()];
        let mut tg = Vec::new();
        // One untimed warm-up of each test (first-touch allocations, kernel compilation on GPUs).
        for rep in 0..=reps {
            for (li, &n) in lens.iter().enumerate() {
                let mut cache = ContiguousKvCache::<B>::new(model.n_layers(), n);
                let t0 = Instant::now();
                prefill(model, &mut cache, &prompt[..n])?;
                let s = t0.elapsed().as_secs_f64();
                if rep > 0 {
                    pp[li].push(n as f64 / s);
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
        let lo = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let mut tests: Vec<(String, Vec<f64>)> = lens
            .iter()
            .zip(&pp)
            .map(|(n, v)| (format!("pp{n}"), v.clone()))
            .collect();
        if a.gen_tokens > 0 {
            tests.push((format!("tg{}", a.gen_tokens), tg.clone()));
        }
        if a.json {
            let list: Vec<serde_json::Value> = tests
                .iter()
                .map(|(name, v)| {
                    serde_json::json!({
                        "test": name, "tps_median": median(v.clone()),
                        "tps_min": lo(v), "tps_max": hi(v), "tps_all": v,
                    })
                })
                .collect();
            let v = serde_json::json!({
                "model": m.info.path.display().to_string(),
                "backend": self.kind.name(),
                "kernels": cinder::backends::kernels::Isa::detect().name(),
                "reps": reps,
                // the longest prompt test and the generation test, as single figures
                "pp_tokens": longest, "pp_tps": pp.last().map(|v| median(v.clone())).unwrap_or(0.0),
                "tg_tokens": a.gen_tokens, "tg_tps": median(tg.clone()),
                "tests": list,
                "threads": threads, "peak_rss_bytes": rss,
            });
            println!("{v}");
        } else {
            println!(
                "model: {}  backend: {}  threads: {threads}  kernels: {}",
                m.info.path.display(),
                self.kind,
                cinder::backends::kernels::Isa::detect().name()
            );
            for (name, v) in &tests {
                println!(
                    "{name:<7} {:>9.2} t/s  (min–max {:.2}–{:.2}, {reps} reps)",
                    median(v.clone()),
                    lo(v),
                    hi(v)
                );
            }
            println!("peak RSS {:.1} MiB", rss as f64 / (1 << 20) as f64);
        }
        Ok(())
    }
}
