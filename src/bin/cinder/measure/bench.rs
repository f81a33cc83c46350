//! `cinder bench`: prompt processing and generation speed in the style of llama-bench.

use anyhow::{Context, Result};
use cinder::backends::BackendKind;
use cinder::prelude::*;
use clap::Args;

use super::engine::{self, run_batch};

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
    /// Tokens already in the KV cache before each prompt-processing and generation test (as
    /// llama-bench's `-d`): the tests run at that depth, and the report names them `pp512 @ d4096`.
    #[arg(long, default_value_t = 0)]
    pub depth: usize,
    /// Repetitions (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Concurrent-request levels to measure, comma-separated (e.g. 1,4,8,16): aggregate and
    /// per-sequence decode tokens/s and TTFT p50/p99, through the continuous-batching engine.
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// Prompt length of each request in the concurrency test.
    #[arg(long, default_value_t = 64)]
    pub concurrency_prompt_tokens: usize,
    /// Also measure TTFT with a cached prefix of this many tokens against the same request cold
    /// (0 = skip).
    #[arg(long, default_value_t = 0)]
    pub cached_prefix: usize,
    /// Speculation test: decode --gen-tokens tokens (batch 1, greedy, chat template) from this
    /// text file with prompt lookup off and on (--draft-tokens), alternating --reps times.
    #[arg(long, value_name = "FILE")]
    pub spec_prompt: Option<std::path::PathBuf>,
    /// Constrained-decoding test: a chat prompt asking for JSON, with this JSON schema and
    /// without, alternating --reps times, at batch 1 and at the largest --concurrency (else 8),
    /// up to --gen-tokens tokens; reports the decode rates and the grammar's time per mask.
    #[arg(long, value_name = "FILE")]
    pub json_schema: Option<std::path::PathBuf>,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: crate::engine_flags::EngineFlags,
}

/// Runs on backend `B`.
pub struct Task {
    /// flags
    pub args: BenchArgs,
    /// backend name for the report
    pub kind: BackendKind,
    /// requested threads
    pub threads: Option<usize>,
    /// how the model is loaded (`--gpu-layers`)
    pub loader: crate::Loader,
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
        let loader = self.loader;
        let m = loader.load::<B>(&a.model, &device)?;
        let model = &m.model;
        let vocab = model.vocab_size() as u32;
        let lens: Vec<usize> = a.prompt_tokens.iter().copied().filter(|&n| n > 0).collect();
        // A deterministic, non-degenerate prompt: ids spread over the vocabulary.
        let longest = lens.iter().copied().max().unwrap_or(1);
        let ids = |salt: u64, n: usize| -> Vec<u32> {
            (0..n as u64)
                .map(|i| (((i + salt) * 2_654_435_761) % vocab as u64) as u32)
                .collect()
        };
        let prompt = ids(0, longest);
        // At depth: the first `depth` tokens of every test are the same (taken from the prefix
        // cache after the warm-up), the tested tokens after them differ per repetition (so only
        // the depth is cached).
        let depth = a.depth;
        let context = model.context_length();
        let need = depth + longest.max(1) + a.gen_tokens + 1;
        if depth > 0 && need > context {
            anyhow::bail!(
                "--depth {depth} with prompts of up to {longest} tokens and --gen-tokens {} needs {need} positions; the model's context is {context}",
                a.gen_tokens
            );
        }
        let deep = ids(1 << 20, depth);
        let at_depth = |rep: usize, tail: Vec<u32>| -> Vec<u32> {
            if depth == 0 {
                return tail;
            }
            let mut p = deep.clone();
            p.extend(tail.iter().map(|&t| (t + 7919 * rep as u32) % vocab));
            p
        };
        let reps = a.reps.max(1);
        let mut pp: Vec<Vec<f64>> = vec![Vec::new(); lens.len()];
        let mut tg = Vec::new();
        // Every test runs through the engine (one request at a time here), prefix cache off.
        let cfg = a.engine.config()?;
        if depth > 0 && !cfg.prefix_caching {
            anyhow::bail!("--depth keeps its tokens in the prefix cache: drop --no-prefix-cache");
        }
        let engine = engine::start(&m, &cfg, 1, depth > 0)?;
        let h = engine.handle();
        if depth > 0 {
            // Fill the depth once; every test then finds it in the prefix cache.
            run_batch(&h, vec![deep.clone()], 1)?;
        }
        // One untimed warm-up of each test (first-touch allocations, kernel compilation on GPUs).
        for rep in 0..=reps {
            for (li, &n) in lens.iter().enumerate() {
                // Prefill and the first token: n prompt tokens over the time to first token.
                let t = run_batch(&h, vec![at_depth(rep, prompt[..n].to_vec())], 1)?.remove(0);
                if rep > 0 {
                    pp[li].push(n as f64 / t.ttft.as_secs_f64());
                }
            }
            if a.gen_tokens > 0 {
                // gen_tokens decode steps after the first token.
                let t = run_batch(
                    &h,
                    vec![at_depth(rep, prompt[..1].to_vec())],
                    a.gen_tokens + 1,
                )?
                .remove(0);
                if rep > 0 {
                    tg.push(a.gen_tokens as f64 / t.decode.as_secs_f64());
                }
            }
        }
        // Launches and host syncs per decoded token at batch 1: a request of gen_tokens + 1
        // tokens less one of a single token (the same prefill and first token).
        let per_token = if a.gen_tokens > 0 {
            use cinder::backends::counters::{host_syncs, launches};
            let count = |n: usize| -> Result<(u64, u64)> {
                let (l0, s0) = (launches(), host_syncs());
                run_batch(&h, vec![prompt[..1].to_vec()], n)?;
                Ok((launches() - l0, host_syncs() - s0))
            };
            let (l1, s1) = count(1)?;
            let (ln, sn) = count(a.gen_tokens + 1)?;
            let n = a.gen_tokens as f64;
            Some((
                ln.saturating_sub(l1) as f64 / n,
                sn.saturating_sub(s1) as f64 / n,
            ))
        } else {
            None
        };
        drop(engine);
        let counted = cinder::backends::counters::counts_launches()
            && matches!(B::KIND, BackendKind::Wgpu | BackendKind::Cuda);
        let dispatches = per_token.filter(|_| counted).map(|(l, _)| l);
        let layers = model.n_layers().max(1) as f64;
        let levels = a
            .concurrency
            .iter()
            .map(|&c| {
                engine::concurrency_level(
                    &m,
                    &cfg,
                    c,
                    a.concurrency_prompt_tokens,
                    a.gen_tokens.max(2),
                    reps,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let prefix = if a.cached_prefix > 0 {
            Some(engine::prefix_ttft(&m, &cfg, a.cached_prefix, reps)?)
        } else {
            None
        };
        let spec = match &a.spec_prompt {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading {}", p.display()))?;
                let draft = a.engine.spec.load_draft(&loader, &m, &device)?;
                Some(super::spec::run(
                    &m,
                    &cfg,
                    &text,
                    a.gen_tokens.max(8),
                    reps,
                    a.engine.spec.draft_tokens,
                    draft
                        .as_ref()
                        .zip(a.engine.spec.draft_name())
                        .map(|(d, name)| (name, d)),
                )?)
            }
            None => None,
        };
        let grammar = match &a.json_schema {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading {}", p.display()))?;
                let c = a.concurrency.iter().copied().max().unwrap_or(8);
                Some(super::grammar::run(
                    &m,
                    &cfg,
                    &text,
                    c,
                    a.gen_tokens.max(8),
                    reps,
                )?)
            }
            None => None,
        };
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
        if depth > 0 {
            for t in &mut tests {
                t.0 = format!("{} @ d{depth}", t.0);
            }
        }
        // The KV memory one sequence of the generation test holds at its end, in whole blocks.
        let kv_per_token = model.kv_bytes_per_token_as(cfg.kv_type);
        let bs = cfg.block_size.max(1);
        let held_tokens = (depth + a.gen_tokens + 1).div_ceil(bs) * bs;
        let kv_mib_held = (kv_per_token * held_tokens) as f64 / (1 << 20) as f64;
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
                "placement": m.model.placement(),
                "kernels": cinder::backends::kernels::describe(),
                "reps": reps,
                // the longest prompt test and the generation test, as single figures
                "pp_tokens": longest, "pp_tps": pp.last().map(|v| median(v.clone())).unwrap_or(0.0),
                "tg_tokens": a.gen_tokens, "tg_tps": median(tg.clone()),
                "depth": depth, "kv_type": cfg.kv_type.name(),
                "kv_bytes_per_token": kv_per_token, "kv_mib_held": kv_mib_held,
                "tests": list,
                "threads": threads, "peak_rss_bytes": rss,
                "concurrency": levels,
                "prefix_cache": prefix.map(|(cold, warm)| serde_json::json!({
                    "prefix_tokens": a.cached_prefix, "ttft_cold_ms": cold,
                    "ttft_cached_ms": warm, "ratio": warm / cold,
                })),
                "speculation": spec,
                "grammar": grammar,
                // kernel launches per decoded token at batch 1, and per layer (CubeCL backends)
                "dispatches_per_token": dispatches,
                "dispatches_per_layer": dispatches.map(|d| d / layers),
                "host_syncs_per_token": per_token.map(|(_, s)| s),
            });
            println!("{v}");
        } else {
            println!(
                "model: {}  backend: {}  threads: {threads}  kernels: {}",
                m.info.path.display(),
                self.kind,
                cinder::backends::kernels::describe()
            );
            if let Some(p) = m.model.placement() {
                println!("offload: {p}");
            }
            if depth > 0 {
                println!(
                    "depth {depth}: KV {kv_per_token} bytes per token, {kv_mib_held:.1} MiB held \
                     by the generation test's sequence"
                );
            }
            for (name, v) in &tests {
                println!(
                    "{name:<7} {:>9.2} t/s  (min–max {:.2}–{:.2}, {reps} reps)",
                    median(v.clone()),
                    lo(v),
                    hi(v)
                );
            }
            for l in &levels {
                println!(
                    "concurrency {:>3}: aggregate {:>8.2} t/s  (span {:>7.2})  per-seq {:>7.2} t/s  TTFT p50 {:>8.1} ms  p99 {:>8.1} ms",
                    l.concurrency,
                    l.aggregate_tg_tps,
                    l.span_tg_tps,
                    l.per_seq_tg_tps,
                    l.ttft_ms_p50,
                    l.ttft_ms_p99
                );
            }
            if let Some((cold, warm)) = prefix {
                println!(
                    "TTFT with a cached {}-token prefix: {warm:.1} ms vs {cold:.1} ms cold ({:.3}x)",
                    a.cached_prefix,
                    warm / cold
                );
            }
            if let Some(s) = &spec {
                println!(
                    "speculation ({}, {} draft tokens, {}-token prompt, {} tokens): \
                     {:.2} t/s on vs {:.2} t/s off ({:.2}x; paired {:.2}x), acceptance {:.0}%, \
                     {:.2} forwards per token",
                    s.mode,
                    s.draft_tokens,
                    s.prompt_tokens,
                    s.gen_tokens,
                    s.on_tps,
                    s.off_tps,
                    s.speedup,
                    s.paired_speedup,
                    100.0 * s.acceptance,
                    s.steps_per_token
                );
            }
            if let Some(g) = &grammar {
                for l in &g.levels {
                    println!(
                        "json schema, {} at once: {:.2} t/s constrained vs {:.2} t/s free ({:.3}x), {} tokens",
                        l.concurrency, l.constrained_tps, l.free_tps, l.ratio, l.tokens
                    );
                }
                println!(
                    "grammar: compile {:.0} µs; {} checks at {:.1} µs; {} masks at {:.0} µs ({:.3} per token)",
                    g.compile_us,
                    g.checks,
                    g.us_per_check,
                    g.masks,
                    g.us_per_mask,
                    g.masks_per_token
                );
            }
            if let Some(d) = dispatches {
                println!(
                    "decode: {d:.1} kernel launches per token ({:.2} per layer)",
                    d / layers
                );
            }
            if let Some((_, s)) = per_token {
                println!("decode: {s:.2} host syncs per token");
            }
            println!("peak RSS {:.1} MiB", rss as f64 / (1 << 20) as f64);
        }
        Ok(())
    }
}
