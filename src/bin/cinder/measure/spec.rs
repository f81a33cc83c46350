//! `cinder bench --spec-prompt FILE`: batch-1 decode speed with speculation off and on (prompt
//! lookup, or the draft model of `--speculative draft:MODEL`), on a prompt of the user's choosing
//! (chat template applied), alternating so both see the same machine state. Reports medians, their
//! ratio and the acceptance rate.

use anyhow::{Context, Result, bail};
use cinder::prelude::*;
use cinder::runtime::engine::{Engine, EngineConfig, Event, Request, SpeculativeConfig};
use cinder::runtime::tokenizer::{ChatMessage, apply_chat_template};

/// What the speculation test measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SpecResult {
    /// `ngram` or `draft:MODEL`
    pub mode: String,
    /// prompt tokens (after the chat template)
    pub prompt_tokens: usize,
    /// tokens generated per run
    pub gen_tokens: usize,
    /// draft tokens per step
    pub draft_tokens: usize,
    /// median decode tokens/s without speculation
    pub off_tps: f64,
    /// median decode tokens/s with speculation
    pub on_tps: f64,
    /// on / off (ratio of the medians)
    pub speedup: f64,
    /// median of each repetition's on / off: the two runs of a repetition are back to back, so
    /// the machine's slow drifts cancel (on a shared 2-core VM the off rate alone moves by ±20%)
    pub paired_speedup: f64,
    /// accepted / drafted tokens over the speculative runs
    pub acceptance: f64,
    /// forwards per generated token in the speculative runs
    pub steps_per_token: f64,
    /// every run's decode tokens/s: (off, on) per repetition
    pub runs: Vec<(f64, f64)>,
}

/// Decode tokens/s of one greedy run: tokens after the first over the time after the first.
fn one_run(h: &cinder::runtime::engine::EngineHandle, prompt: &[u32], n_gen: usize) -> Result<f64> {
    let mut s = h.submit(Request {
        stop_on_eos: false,
        ..Request::greedy(prompt.to_vec(), n_gen + 1)
    })?;
    let (mut first, mut last, mut n) = (None, None, 0usize);
    while let Some(ev) = s.blocking_next() {
        match ev {
            Event::Token { .. } => {
                let now = std::time::Instant::now();
                first.get_or_insert(now);
                last = Some(now);
                n += 1;
            }
            Event::Finished { reason, .. } => {
                if reason != FinishReason::Length {
                    bail!("speculation bench request ended with {reason:?}");
                }
                break;
            }
        }
    }
    let (Some(f), Some(l)) = (first, last) else {
        bail!("no token generated");
    };
    Ok((n - 1) as f64 / (l - f).as_secs_f64().max(1e-9))
}

/// Runs the test.
pub fn run<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    base: &EngineConfig,
    text: &str,
    n_gen: usize,
    reps: usize,
    draft_tokens: usize,
    draft: Option<(&str, &cinder::importer::LoadedModel<B>)>,
) -> Result<SpecResult> {
    let chat = apply_chat_template(&m.tokenizer, &[ChatMessage::new("user", text)], true)?;
    let prompt = m.tokenizer.tokenize(&chat, false, true)?;
    let mk = |spec: Option<SpeculativeConfig>| -> Result<Engine> {
        let draft = match (spec, draft) {
            (Some(_), Some((_, d))) => {
                Some(Box::new(d.model.clone()) as Box<dyn CausalLm<B> + Send + Sync>)
            }
            _ => None,
        };
        let cfg = EngineConfig {
            prefix_caching: false,
            speculative: spec,
            ..base.clone()
        };
        Engine::start_with_draft::<B, _>(m.model.clone(), draft, m.tokenizer.clone(), cfg)
            .context("starting the engine")
    };
    let off = mk(None)?;
    let on = mk(Some(SpeculativeConfig {
        draft_tokens,
        ..SpeculativeConfig::default()
    }))?;
    let (ho, hs) = (off.handle(), on.handle());
    // One untimed warm-up each.
    one_run(&ho, &prompt, n_gen.min(8))?;
    one_run(&hs, &prompt, n_gen.min(8))?;
    let before = hs.stats();
    let mut runs = Vec::new();
    for _ in 0..reps.max(1) {
        let a = one_run(&ho, &prompt, n_gen)?;
        let b = one_run(&hs, &prompt, n_gen)?;
        runs.push((a, b));
    }
    // Let the engine thread publish its last step's figures.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let after = hs.stats();
    let drafted = after.spec_draft_tokens - before.spec_draft_tokens;
    let accepted = after.spec_accepted_tokens - before.spec_accepted_tokens;
    let steps = after.steps - before.steps;
    let generated = after.generated_tokens - before.generated_tokens;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let off_tps = median(runs.iter().map(|r| r.0).collect());
    let on_tps = median(runs.iter().map(|r| r.1).collect());
    Ok(SpecResult {
        mode: draft.map_or("ngram".into(), |(name, _)| format!("draft:{name}")),
        prompt_tokens: prompt.len(),
        gen_tokens: n_gen,
        draft_tokens,
        off_tps,
        on_tps,
        speedup: on_tps / off_tps,
        paired_speedup: median(runs.iter().map(|r| r.1 / r.0).collect()),
        acceptance: accepted as f64 / drafted.max(1) as f64,
        steps_per_token: steps as f64 / generated.max(1) as f64,
        runs,
    })
}
