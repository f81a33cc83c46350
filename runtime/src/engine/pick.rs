//! Picking a sequence's next tokens from its logits rows: the sampler, the grammar a constrained
//! sequence must follow, and the log-probabilities a request asked for.

use crate::constraint::TokenMatcher;
use crate::error::{Result, RuntimeError};
use crate::sampler::{Sampler, top_k_of};

/// The most alternatives a token's log-probabilities list (OpenAI's `top_logprobs` limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// A generated token's log-probability and the most likely alternatives at its position, from the
/// model's logits before penalties, truncation and temperature (as OpenAI reports them).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// `log p(token)`
    pub logprob: f32,
    /// The `top` most likely tokens and their log-probabilities, most likely first (lowest id
    /// first on ties).
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprob {
    /// The log-probability of `tok` under `logits` (one per vocabulary entry) and the `top` most
    /// likely tokens, in f64 for the normalizer.
    pub fn of(logits: &[f32], tok: u32, top: usize) -> Self {
        let max = logits
            .iter()
            .copied()
            .filter(|l| !l.is_nan())
            .fold(f32::NEG_INFINITY, f32::max) as f64;
        let lse = max
            + logits
                .iter()
                .filter(|l| !l.is_nan())
                .map(|&l| (l as f64 - max).exp())
                .sum::<f64>()
                .ln();
        let lp = |t: u32| {
            logits
                .get(t as usize)
                .filter(|l| !l.is_nan())
                .map_or(f32::NEG_INFINITY, |&l| (l as f64 - lse) as f32)
        };
        let idx = if top == 0 {
            Vec::new()
        } else {
            let ids = (0..logits.len() as u32)
                .filter(|&i| !logits[i as usize].is_nan())
                .collect();
            top_k_of(logits, ids, top)
        };
        Self {
            logprob: lp(tok),
            top: idx.into_iter().map(|i| (i, lp(i))).collect(),
        }
    }
}

/// Samples the next token from `logits`; a constrained sequence's pick is checked against its
/// grammar and, only when the grammar rejects it, drawn again from the allowed tokens. The
/// matcher is advanced past the token returned.
pub(super) fn pick(
    sampler: &mut Sampler,
    matcher: Option<&mut TokenMatcher>,
    logits: &[f32],
    history: &[u32],
) -> Result<u32> {
    let tok = sampler.sample(logits, history)?;
    let Some(m) = matcher else {
        return Ok(tok);
    };
    if m.check(tok)? {
        m.advance(tok)?;
        return Ok(tok);
    }
    let tok = resample(sampler, m, logits, history)?;
    m.advance(tok)?;
    Ok(tok)
}

/// The slow path: masks what the grammar forbids and samples again.
pub(super) fn resample(
    sampler: &mut Sampler,
    m: &mut TokenMatcher,
    logits: &[f32],
    history: &[u32],
) -> Result<u32> {
    let mut masked = logits.to_vec();
    m.mask_logits(&mut masked)?;
    let tok = sampler.sample(&masked, history)?;
    if !m.check(tok)? {
        return Err(RuntimeError::Constraint(format!(
            "token {tok} was drawn from the grammar's mask but the grammar refuses it"
        )));
    }
    Ok(tok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_the_log_softmax_and_top_is_ordered() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let lp = TokenLogprob::of(&logits, 2, 3);
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        assert!((lp.logprob as f64 - (2.0 - z.ln())).abs() < 1e-6);
        let ids: Vec<u32> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![1, 3, 2], "ties break to the lower id");
        let total: f64 = (0..5)
            .map(|t| (TokenLogprob::of(&logits, t, 0).logprob as f64).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-6);
    }
}
