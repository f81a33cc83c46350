//! Token sampling on host logits.
//!
//! The chain follows llama.cpp's default order: repetition penalty over the last `repeat_last_n` tokens,
//! top-k, top-p (nucleus), min-p, temperature, then a draw from a seeded RNG (same seed, same logits =>
//! same token). `temperature == 0` is greedy (argmax after the penalty), and ties break to the lowest id.

use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::error::{Result, RuntimeError};

/// Sampling settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 => greedy; otherwise logits are divided by it.
    pub temperature: f32,
    /// Keep the `k` most likely tokens (0 = off).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `p` (1.0 = off).
    pub top_p: f32,
    /// Drop tokens below `min_p ×` the top probability (0.0 = off).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of recent tokens by this (1.0 = off).
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// RNG seed.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..Self::default()
        }
    }

    /// Checks every field's range.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(RuntimeError::Sampling(m));
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad(format!(
                "temperature {} must be finite and >= 0",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p {} must be in (0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p {} must be in [0, 1]", self.min_p));
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite()) {
            return bad(format!(
                "repeat_penalty {} must be finite and > 0",
                self.repeat_penalty
            ));
        }
        Ok(())
    }
}

/// A sampler with its own RNG stream.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    /// A sampler seeded from `params.seed`.
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        let rng = StdRng::seed_from_u64(params.seed);
        Ok(Self { params, rng })
    }

    /// The settings.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Whether every pick is the argmax of the logits as they come (greedy, no repetition
    /// penalty): then the argmax can be taken where the logits are, and only ids read back.
    pub fn is_plain_greedy(&self) -> bool {
        self.params.temperature == 0.0
            && (self.params.repeat_penalty == 1.0 || self.params.repeat_last_n == 0)
    }

    /// Picks the next token from `logits` (one per vocabulary entry) given the tokens so far.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> Result<u32> {
        match self.distribution(logits, history)? {
            Dist::Greedy(t) => Ok(t),
            Dist::Candidates(cand, probs) => {
                let r: f32 = self.rng.random::<f32>();
                Ok(draw(&cand, &probs, r))
            }
        }
    }

    /// Speculative decoding's verification of a drafted token `draft` (proposed deterministically,
    /// e.g. by prompt lookup): `Ok(None)` accepts it, `Ok(Some(t))` rejects it and returns the token
    /// to emit instead. Greedy: accepted exactly when it is the argmax, so the output equals
    /// non-speculative decoding token for token. Sampling: accepted with probability p(draft),
    /// otherwise a token is drawn from p with the draft removed, renormalized — the standard
    /// rejection rule for a one-hot draft distribution, which leaves every emitted token
    /// distributed exactly as `sample` would draw it.
    pub fn verify(&mut self, logits: &[f32], history: &[u32], draft: u32) -> Result<Option<u32>> {
        match self.distribution(logits, history)? {
            Dist::Greedy(t) => Ok((t != draft).then_some(t)),
            Dist::Candidates(cand, mut probs) => {
                let pd = cand
                    .iter()
                    .position(|&c| c == draft)
                    .map_or(0.0, |i| probs[i]);
                let u: f32 = self.rng.random::<f32>();
                if u < pd {
                    return Ok(None);
                }
                let rest = 1.0 - pd;
                if let Some(i) = cand.iter().position(|&c| c == draft) {
                    probs[i] = 0.0;
                }
                if rest <= 0.0 {
                    // p(draft) rounded to 1: nothing else can be drawn.
                    return Ok(None);
                }
                for p in &mut probs {
                    *p /= rest;
                }
                let r: f32 = self.rng.random::<f32>();
                Ok(Some(draw(&cand, &probs, r)))
            }
        }
    }

    /// The distribution `sample` draws from: penalties, top-k, top-p, min-p, temperature.
    fn distribution(&self, logits: &[f32], history: &[u32]) -> Result<Dist> {
        if logits.is_empty() {
            return Err(RuntimeError::Sampling("empty logits".into()));
        }
        let mut logits = logits.to_vec();
        self.apply_penalty(&mut logits, history);
        if self.params.temperature == 0.0 {
            return Ok(Dist::Greedy(argmax(&logits)));
        }
        // Candidates sorted by logit, descending (ties: lower id first, for determinism).
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.is_nan())
            .map(|(i, &l)| (i as u32, l))
            .collect();
        if cand.is_empty() {
            return Err(RuntimeError::Sampling("every logit is NaN".into()));
        }
        let k = if self.params.top_k == 0 {
            cand.len()
        } else {
            self.params.top_k.min(cand.len())
        };
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if k < cand.len() {
            cand.select_nth_unstable_by(k - 1, by_logit);
            cand.truncate(k);
        }
        cand.sort_unstable_by(by_logit);

        // Probabilities at temperature 1 for the truncation steps, as llama.cpp does.
        let probs = softmax_of(&cand, 1.0);
        let mut keep = cand.len();
        if self.params.top_p < 1.0 {
            let mut acc = 0.0f64;
            for (i, p) in probs.iter().enumerate() {
                acc += *p as f64;
                if acc >= self.params.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
        }
        if self.params.min_p > 0.0 {
            let floor = probs[0] * self.params.min_p;
            let n = probs[..keep].iter().take_while(|&&p| p >= floor).count();
            keep = n.max(1);
        }
        cand.truncate(keep.max(1));
        let probs = softmax_of(&cand, self.params.temperature);
        Ok(Dist::Candidates(
            cand.into_iter().map(|(t, _)| t).collect(),
            probs,
        ))
    }

    fn apply_penalty(&self, logits: &mut [f32], history: &[u32]) {
        let p = self.params.repeat_penalty;
        if p == 1.0 || self.params.repeat_last_n == 0 {
            return;
        }
        let start = history.len().saturating_sub(self.params.repeat_last_n);
        let mut seen = std::collections::HashSet::new();
        for &t in &history[start..] {
            if !seen.insert(t) {
                continue;
            }
            if let Some(l) = logits.get_mut(t as usize) {
                *l = if *l > 0.0 { *l / p } else { *l * p };
            }
        }
    }
}

/// What a sampler draws from.
enum Dist {
    /// temperature 0: this token
    Greedy(u32),
    /// candidates (most probable first) and their probabilities
    Candidates(Vec<u32>, Vec<f32>),
}

/// The candidate whose cumulative probability first exceeds `r` in [0, 1).
fn draw(cand: &[u32], probs: &[f32], r: f32) -> u32 {
    let mut acc = 0.0f32;
    for (i, p) in probs.iter().enumerate() {
        acc += p;
        if r < acc {
            return cand[i];
        }
    }
    // Rounding left `acc` a hair under 1: the last candidate with mass takes the remainder.
    cand.iter()
        .zip(probs)
        .rev()
        .find(|(_, p)| **p > 0.0)
        .map_or(cand[cand.len() - 1], |(c, _)| *c)
}

/// Index of the largest logit (lowest index on ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best as u32
}

/// Softmax over the whole vocabulary (f64 accumulation), e.g. for reporting top-k probabilities.
pub fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f64> = logits.iter().map(|&l| ((l - max) as f64).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|&e| (e / sum) as f32).collect()
}

/// `log_softmax(logits)[target]`, computed stably in f64.
pub fn log_prob(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    logits
        .get(target as usize)
        .map_or(f64::NEG_INFINITY, |&l| l as f64 - max - sum.ln())
}

/// The `k` most probable tokens with their probabilities, most probable first.
pub fn top_k_probs(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let probs = softmax(logits);
    let idx = top_k_of(&probs, (0..probs.len() as u32).collect(), k);
    idx.into_iter().map(|i| (i, probs[i as usize])).collect()
}

/// The `k` of `ids` with the largest `values[id]`, largest first (lowest id first on ties).
pub fn top_k_of(values: &[f32], mut ids: Vec<u32>, k: usize) -> Vec<u32> {
    let k = k.min(ids.len());
    if k == 0 {
        return Vec::new();
    }
    let cmp = |a: &u32, b: &u32| {
        values[*b as usize]
            .total_cmp(&values[*a as usize])
            .then(a.cmp(b))
    };
    ids.select_nth_unstable_by(k - 1, cmp);
    ids.truncate(k);
    ids.sort_unstable_by(cmp);
    ids
}

fn softmax_of(cand: &[(u32, f32)], temperature: f32) -> Vec<f32> {
    let max = cand[0].1;
    let exps: Vec<f32> = cand
        .iter()
        .map(|&(_, l)| ((l - max) / temperature).exp())
        .collect();
    let sum: f32 = exps.iter().sum();
    exps.iter().map(|e| e / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_argmax_lowest_on_ties() {
        let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
        assert_eq!(s.sample(&[0.1, 3.0, 3.0, -1.0], &[]).unwrap(), 1);
    }

    #[test]
    fn same_seed_same_tokens_different_seed_differs() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let params = SamplingParams {
            temperature: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..SamplingParams::default()
        };
        let draw = |seed| {
            let mut s = Sampler::new(SamplingParams {
                seed,
                ..params.clone()
            })
            .unwrap();
            (0..50)
                .map(|_| s.sample(&logits, &[]).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn top_k_one_is_greedy() {
        let logits = [0.0, 1.0, 5.0, 2.0];
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 1,
            ..SamplingParams::default()
        })
        .unwrap();
        for _ in 0..20 {
            assert_eq!(s.sample(&logits, &[]).unwrap(), 2);
        }
    }

    #[test]
    fn top_p_and_min_p_cut_the_tail() {
        // probs ≈ [0.64, 0.24, 0.09, 0.03]
        let logits = [3.0, 2.0, 1.0, 0.0];
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.7,
            min_p: 0.0,
            ..SamplingParams::default()
        })
        .unwrap();
        for _ in 0..200 {
            assert!(s.sample(&logits, &[]).unwrap() <= 1);
        }
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.3,
            ..SamplingParams::default()
        })
        .unwrap();
        for _ in 0..200 {
            assert!(s.sample(&logits, &[]).unwrap() <= 1);
        }
    }

    #[test]
    fn repetition_penalty_demotes_seen_tokens() {
        let mut s = Sampler::new(SamplingParams {
            repeat_penalty: 2.0,
            ..SamplingParams::greedy()
        })
        .unwrap();
        assert_eq!(s.sample(&[1.0, 1.5], &[]).unwrap(), 1);
        assert_eq!(s.sample(&[1.0, 1.5], &[1]).unwrap(), 0);
    }

    #[test]
    fn invalid_params_are_refused() {
        for p in [
            SamplingParams {
                temperature: -1.0,
                ..SamplingParams::default()
            },
            SamplingParams {
                top_p: 0.0,
                ..SamplingParams::default()
            },
            SamplingParams {
                min_p: 1.5,
                ..SamplingParams::default()
            },
            SamplingParams {
                repeat_penalty: 0.0,
                ..SamplingParams::default()
            },
            SamplingParams {
                temperature: f32::NAN,
                ..SamplingParams::default()
            },
        ] {
            assert!(Sampler::new(p).is_err());
        }
    }

    #[test]
    fn softmax_and_top_k_agree() {
        let logits = [1.0, 4.0, 2.0, 3.0];
        let top = top_k_probs(&logits, 2);
        assert_eq!(top[0].0, 1);
        assert_eq!(top[1].0, 3);
        let p = softmax(&logits);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((log_prob(&logits, 1).exp() as f32 - p[1]).abs() < 1e-6);
    }
}

#[cfg(test)]
mod speculative_tests {
    use super::*;

    /// Emitted-token frequencies of `trials` verifications of `draft` against fixed logits
    /// (a 6-token "model"), against the probabilities `sample` draws from.
    fn verify_frequencies(params: SamplingParams, logits: &[f32], draft: u32, trials: usize) {
        let mut want = vec![0usize; logits.len()];
        let mut got = vec![0usize; logits.len()];
        let mut plain = Sampler::new(params.clone()).expect("sampler");
        let mut spec = Sampler::new(SamplingParams {
            seed: params.seed ^ 0x5eed,
            ..params
        })
        .expect("sampler");
        for _ in 0..trials {
            want[plain.sample(logits, &[]).expect("sample") as usize] += 1;
            let t = spec
                .verify(logits, &[], draft)
                .expect("verify")
                .unwrap_or(draft);
            got[t as usize] += 1;
        }
        // Two independent samples of the same multinomial: every frequency within 4.5 standard
        // errors of the difference (a false alarm is < 1e-4 per test run).
        for (i, (&w, &g)) in want.iter().zip(&got).enumerate() {
            let (pw, pg) = (w as f64 / trials as f64, g as f64 / trials as f64);
            let p = (pw + pg) / 2.0;
            let se = (2.0 * p * (1.0 - p) / trials as f64).sqrt().max(1e-9);
            assert!(
                (pw - pg).abs() <= 4.5 * se + 1e-12,
                "token {i}: sample {pw:.4} vs speculative {pg:.4} (draft {draft})"
            );
        }
    }

    #[test]
    fn rejection_sampling_keeps_the_target_distribution() {
        let logits = [2.0f32, 1.5, 0.3, -0.5, 1.0, -2.0];
        let base = SamplingParams {
            temperature: 0.8,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..SamplingParams::default()
        };
        // A likely draft, an unlikely one, and one truncated away by top-k.
        for draft in [0u32, 3, 5] {
            verify_frequencies(base.clone(), &logits, draft, 40_000);
        }
        let truncated = SamplingParams {
            top_k: 3,
            top_p: 0.9,
            ..base
        };
        verify_frequencies(truncated.clone(), &logits, 1, 40_000);
        verify_frequencies(truncated, &logits, 5, 40_000);
    }

    #[test]
    fn greedy_verification_accepts_exactly_the_argmax() {
        let logits = [0.1f32, 3.0, 2.9, -1.0];
        let mut s = Sampler::new(SamplingParams::greedy()).expect("sampler");
        assert_eq!(s.verify(&logits, &[], 1).expect("verify"), None);
        assert_eq!(s.verify(&logits, &[], 2).expect("verify"), Some(1));
        // The repetition penalty applies as in `sample`.
        let mut p = Sampler::new(SamplingParams {
            repeat_penalty: 1.5,
            ..SamplingParams::greedy()
        })
        .expect("sampler");
        assert_eq!(p.verify(&logits, &[1], 1).expect("verify"), Some(2));
        assert_eq!(p.sample(&logits, &[1]).expect("sample"), 2);
    }
}
