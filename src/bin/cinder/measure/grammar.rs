//! `cinder bench --json-schema FILE`: what constrained decoding costs. The same chat prompt asking
//! for JSON runs with and without the schema, alternating, at batch 1 and with `--concurrency`
//! sequences at once (the largest level given, else 8); each run is timed over the tokens after
//! the first. The constrained runs end where the JSON is complete, the free ones at as many tokens.
//! Reports the decode rates, their ratio, and the grammar's work: tokens checked, full masks
//! computed and the time of each.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use cinder::prelude::*;
use cinder::runtime::constraint::{Constraint, GrammarCost, Grammars};
use cinder::runtime::engine::{Engine, EngineConfig, EngineHandle, Event, Request};
use cinder::runtime::tokenizer::{ChatMessage, apply_chat_template};

/// What the grammar test measured at one concurrency level.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GrammarLevel {
    /// sequences at once
    pub concurrency: usize,
    /// median aggregate decode tokens/s without the schema
    pub free_tps: f64,
    /// median aggregate decode tokens/s with it
    pub constrained_tps: f64,
    /// constrained / free (ratio of the medians)
    pub ratio: f64,
    /// tokens per constrained sequence (median)
    pub tokens: usize,
}

/// The whole test.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GrammarResult {
    /// the levels
    pub levels: Vec<GrammarLevel>,
    /// microseconds to compile the schema (median)
    pub compile_us: f64,
    /// tokens checked against the grammar in the constrained runs
    pub checks: u64,
    /// mean µs per check (and advance)
    pub us_per_check: f64,
    /// full masks computed (a pick the grammar refused)
    pub masks: u64,
    /// mean µs per mask
    pub us_per_mask: f64,
    /// masks per constrained token
    pub masks_per_token: f64,
}

/// Runs `n` copies of the request at once; returns the aggregate decode tokens/s (tokens after
/// each one's first, over the span from the first of those to the last token) and the tokens of
/// each.
fn run_level(h: &EngineHandle, reqs: Vec<Request>) -> Result<(f64, Vec<usize>)> {
    let streams = reqs
        .into_iter()
        .map(|r| h.submit(r))
        .collect::<Result<Vec<_>, _>>()
        .context("submitting grammar bench requests")?;
    let threads: Vec<_> = streams
        .into_iter()
        .map(|mut s| {
            std::thread::spawn(move || -> Result<(Vec<Instant>, FinishReason)> {
                let mut t = Vec::new();
                while let Some(ev) = s.blocking_next() {
                    match ev {
                        Event::Token { .. } => t.push(Instant::now()),
                        Event::Finished { reason, .. } => return Ok((t, reason)),
                    }
                }
                bail!("stream ended without a finish")
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in threads {
        let (times, reason) = t
            .join()
            .map_err(|_| anyhow::anyhow!("bench thread panicked"))??;
        if reason == FinishReason::Error {
            bail!("a grammar bench request failed");
        }
        all.push(times);
    }
    let start = all.iter().filter_map(|t| t.first()).min().copied();
    let end = all.iter().filter_map(|t| t.last()).max().copied();
    let tokens: Vec<usize> = all.iter().map(Vec::len).collect();
    let decoded: usize = tokens.iter().map(|n| n.saturating_sub(1)).sum();
    let (Some(s), Some(e)) = (start, end) else {
        bail!("no token generated");
    };
    Ok((decoded as f64 / (e - s).as_secs_f64().max(1e-9), tokens))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs the test with the schema in `schema_text`.
pub fn run<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    base: &EngineConfig,
    schema_text: &str,
    concurrency: usize,
    max_tokens: usize,
    reps: usize,
) -> Result<GrammarResult> {
    let schema: serde_json::Value =
        serde_json::from_str(schema_text).context("the --json-schema file is not JSON")?;
    let grammars = Grammars::new(&m.tokenizer, m.model.vocab_size())?;
    let constraint = Constraint::JsonSchema(schema.clone());
    let mut compile = Vec::new();
    for _ in 0..reps.max(1) {
        let t0 = Instant::now();
        grammars.compile(&constraint)?;
        compile.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let text = format!("Fill in a JSON object for this schema:\n{schema}");
    let chat = apply_chat_template(&m.tokenizer, &[ChatMessage::new("user", text)], true)?;
    let prompt = m.tokenizer.tokenize(&chat, false, true)?;
    let cfg = EngineConfig {
        prefix_caching: false,
        scheduler: cinder::runtime::scheduler::SchedulerConfig {
            max_seqs: concurrency.max(base.scheduler.max_seqs),
            ..base.scheduler
        },
        max_waiting: concurrency.max(base.max_waiting),
        ..base.clone()
    };
    let engine = Engine::start::<B, _>(m.model.clone(), m.tokenizer.clone(), cfg)?;
    let h = engine.handle();
    let req = |i: usize, constrained: bool, n: usize| -> Result<Request> {
        Ok(Request {
            sampling: SamplingParams {
                seed: i as u64,
                ..SamplingParams::default()
            },
            stop_on_eos: false,
            constraint: if constrained {
                Some(grammars.compile(&constraint)?)
            } else {
                None
            },
            ..Request::greedy(prompt.clone(), n)
        })
    };
    // Warm-up, untimed.
    run_level(&h, vec![req(0, true, max_tokens)?])?;
    let before = h.stats().grammar;
    let mut levels = Vec::new();
    for c in [1, concurrency.max(2)] {
        let (mut free, mut on, mut toks) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..reps.max(1) {
            let reqs = (0..c)
                .map(|i| req(r * c + i, true, max_tokens))
                .collect::<Result<_>>()?;
            let (tps, n) = run_level(&h, reqs)?;
            on.push(tps);
            // The free run generates as many tokens as the constrained one did.
            let n_free = (n.iter().sum::<usize>() / n.len()).max(2);
            toks.push(n_free as f64);
            let reqs = (0..c)
                .map(|i| req(r * c + i, false, n_free))
                .collect::<Result<_>>()?;
            free.push(run_level(&h, reqs)?.0);
        }
        let (f, o) = (median(free), median(on));
        levels.push(GrammarLevel {
            concurrency: c,
            free_tps: f,
            constrained_tps: o,
            ratio: o / f,
            tokens: median(toks) as usize,
        });
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    let after = h.stats().grammar;
    let d = GrammarCost {
        checks: after.checks - before.checks,
        check_micros: after.check_micros - before.check_micros,
        masks: after.masks - before.masks,
        mask_micros: after.mask_micros - before.mask_micros,
    };
    Ok(GrammarResult {
        levels,
        compile_us: median(compile),
        checks: d.checks,
        us_per_check: d.check_micros as f64 / d.checks.max(1) as f64,
        masks: d.masks,
        us_per_mask: d.mask_micros as f64 / d.masks.max(1) as f64,
        masks_per_token: d.masks as f64 / d.checks.max(1) as f64,
    })
}
