//! The engine side of `cinder bench`: timed requests through [`Engine`], one at a time (llama-bench's
//! pp/tg) or many at once (`--concurrency`), and the prefix-cache TTFT test.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cinder::prelude::*;
use cinder::runtime::engine::{Engine, EngineConfig, EngineHandle, Event, Request};
use cinder::runtime::scheduler::SchedulerConfig;

/// What one request saw.
#[derive(Debug, Clone)]
pub struct Timing {
    /// submit → first token
    pub ttft: Duration,
    /// first token → last token
    pub decode: Duration,
    /// tokens generated
    pub tokens: usize,
    /// when each token arrived, from submit
    pub arrivals: Vec<Duration>,
}

/// Starts an engine for the bench from the user's settings, with room for `max_seqs` sequences.
/// Prefix caching is off unless asked for, so repetitions of one prompt measure computation, not
/// the cache.
pub fn start<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    base: &EngineConfig,
    max_seqs: usize,
    prefix_caching: bool,
) -> Result<Engine> {
    let cfg = EngineConfig {
        scheduler: SchedulerConfig {
            max_seqs: max_seqs.max(base.scheduler.max_seqs),
            ..base.scheduler
        },
        max_waiting: max_seqs.max(base.max_waiting),
        prefix_caching: prefix_caching && base.prefix_caching,
        ..base.clone()
    };
    Ok(Engine::start::<B, _>(
        m.model.clone(),
        m.tokenizer.clone(),
        cfg,
    )?)
}

/// A request that runs exactly `n_gen` tokens (no EOS stop).
fn request(prompt: Vec<u32>, n_gen: usize) -> Request {
    Request {
        stop_on_eos: false,
        ..Request::greedy(prompt, n_gen)
    }
}

/// Submits every prompt at once and times each request on its own thread.
pub fn run_batch(h: &EngineHandle, prompts: Vec<Vec<u32>>, n_gen: usize) -> Result<Vec<Timing>> {
    let t0 = Instant::now();
    let streams = prompts
        .into_iter()
        .map(|p| h.submit(request(p, n_gen)))
        .collect::<Result<Vec<_>, _>>()
        .context("submitting bench requests")?;
    let threads: Vec<_> = streams
        .into_iter()
        .map(|mut s| {
            std::thread::spawn(move || {
                let (mut first, mut last, mut n) = (None, t0, 0usize);
                let mut arrivals = Vec::with_capacity(n_gen);
                while let Some(ev) = s.blocking_next() {
                    match ev {
                        Event::Token { .. } => {
                            let now = Instant::now();
                            first.get_or_insert(now);
                            last = now;
                            n += 1;
                            arrivals.push(now - t0);
                        }
                        Event::Finished { reason, .. } => {
                            if reason != FinishReason::Length {
                                return Err(anyhow::anyhow!("bench request ended with {reason:?}"));
                            }
                            break;
                        }
                    }
                }
                let first = first.ok_or_else(|| anyhow::anyhow!("no token generated"))?;
                Ok(Timing {
                    ttft: first - t0,
                    decode: last - first,
                    tokens: n,
                    arrivals,
                })
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| {
            t.join()
                .map_err(|_| anyhow::anyhow!("bench thread panicked"))?
        })
        .collect()
}

/// Distinct prompts (no shared prefix) of `len` ids spread over the vocabulary.
pub fn prompts(n: usize, len: usize, vocab: u32, salt: u64) -> Vec<Vec<u32>> {
    (0..n as u64)
        .map(|r| {
            (0..len as u64)
                .map(|i| (((i + 1) * 2_654_435_761 + (r + salt) * 40_503) % vocab as u64) as u32)
                .collect()
        })
        .collect()
}

/// One concurrency level's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Level {
    /// concurrent requests
    pub concurrency: usize,
    /// decode tokens/s of all requests together while all of them decode ([`steady_decode_tps`];
    /// median over reps)
    pub aggregate_tg_tps: f64,
    /// all tokens after each request's first over the span from the first first-token to the last
    /// token, t/s (median over reps): includes the stalls while later requests are prefilled
    pub span_tg_tps: f64,
    /// median over requests of each request's own decode rate, t/s
    pub per_seq_tg_tps: f64,
    /// time to first token, median over requests, ms
    pub ttft_ms_p50: f64,
    /// time to first token, 99th percentile over requests, ms
    pub ttft_ms_p99: f64,
}

/// Aggregate decode rate while every request of the batch is decoding: tokens that arrived in the
/// window from the last first token to the first last token, over the window's length. Without the
/// window, a request that got its first token before the others were prefilled would count their
/// prefill as decode time (the engine admits a request as soon as it is submitted; that figure is
/// [`span_decode_tps`]). With fewer than two arrivals per request in the window (very short runs),
/// the span figure.
pub fn steady_decode_tps(t: &[Timing]) -> f64 {
    let from = t.iter().map(|x| x.ttft).max().unwrap_or_default();
    let to = t
        .iter()
        .map(|x| x.arrivals.last().copied().unwrap_or_default())
        .min()
        .unwrap_or_default();
    // Arrivals strictly after `from` up to `to`: the intervals that lie inside the window.
    let n: usize = t
        .iter()
        .map(|x| x.arrivals.iter().filter(|&&a| a > from && a <= to).count())
        .sum();
    if to > from && n >= 2 * t.len() {
        return n as f64 / (to - from).as_secs_f64();
    }
    span_decode_tps(t)
}

/// Tokens after each request's first over the span from the earliest first token to the last
/// token of all.
pub fn span_decode_tps(t: &[Timing]) -> f64 {
    let start = t.iter().map(|x| x.ttft).min().unwrap_or_default();
    let end = t
        .iter()
        .map(|x| x.ttft + x.decode)
        .max()
        .unwrap_or_default();
    let toks: usize = t.iter().map(|x| x.tokens.saturating_sub(1)).sum();
    toks as f64 / (end - start).as_secs_f64().max(1e-9)
}

/// Percentile `p` (0–100) of `v`, nearest rank.
pub fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Runs `level` concurrent requests `reps` times.
pub fn concurrency_level<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    base: &EngineConfig,
    level: usize,
    prompt_len: usize,
    n_gen: usize,
    reps: usize,
) -> Result<Level> {
    if level == 0 || n_gen < 2 {
        bail!("concurrency levels must be >= 1 and --n_gen-tokens >= 2");
    }
    let engine = start(m, base, level, false)?;
    let h = engine.handle();
    let vocab = m.model.vocab_size() as u32;
    let (mut agg, mut span, mut per, mut ttft) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for rep in 0..=reps {
        let t = run_batch(
            &h,
            prompts(level, prompt_len, vocab, rep as u64 * 1000),
            n_gen,
        )?;
        if rep == 0 {
            continue; // warm-up
        }
        agg.push(steady_decode_tps(&t));
        span.push(span_decode_tps(&t));
        per.push(percentile(
            t.iter()
                .map(|x| (x.tokens - 1) as f64 / x.decode.as_secs_f64().max(1e-9))
                .collect(),
            50.0,
        ));
        ttft.extend(t.iter().map(|x| x.ttft.as_secs_f64() * 1e3));
    }
    Ok(Level {
        concurrency: level,
        aggregate_tg_tps: percentile(agg, 50.0),
        span_tg_tps: percentile(span, 50.0),
        per_seq_tg_tps: percentile(per, 50.0),
        ttft_ms_p50: percentile(ttft.clone(), 50.0),
        ttft_ms_p99: percentile(ttft, 99.0),
    })
}

/// TTFT of a request whose `prefix`-token prefix is cached, against the same request cold (median
/// over `reps`, each with a fresh prefix): `(cold_ms, cached_ms)`.
pub fn prefix_ttft<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    base: &EngineConfig,
    prefix: usize,
    reps: usize,
) -> Result<(f64, f64)> {
    let engine = start(m, base, 4, true)?;
    let h = engine.handle();
    let vocab = m.model.vocab_size() as u32;
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for rep in 0..=reps {
        let base = prompts(1, prefix, vocab, 7_000 + rep as u64).remove(0);
        let suffix = |k: u64| prompts(1, 16, vocab, 90_000 + k + 10 * rep as u64).remove(0);
        let a: Vec<u32> = base.iter().copied().chain(suffix(1)).collect();
        let b: Vec<u32> = base.iter().copied().chain(suffix(2)).collect();
        let c = run_batch(&h, vec![a], 2)?.remove(0).ttft;
        let w = run_batch(&h, vec![b], 2)?.remove(0).ttft;
        if rep > 0 {
            cold.push(c.as_secs_f64() * 1e3);
            warm.push(w.as_secs_f64() * 1e3);
        }
    }
    Ok((percentile(cold, 50.0), percentile(warm, 50.0)))
}
