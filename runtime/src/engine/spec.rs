//! Speculative decoding by prompt lookup (n-gram drafting), inside the continuous-batching engine.
//!
//! Each step, a decoding sequence may carry up to `draft_tokens` proposed tokens: the continuation
//! of the most recent earlier occurrence of its last n tokens (n from `max_ngram` down to
//! `min_ngram`) in its own prompt and output. No second model is involved. The scheduler runs the
//! sequence's last token plus the drafts in the same batched forward as everyone else (1 + k
//! positions instead of 1), the engine verifies the drafts left to right against the logits
//! ([`crate::sampler::Sampler::verify`]: exact match for greedy, the rejection rule when sampling),
//! emits the accepted ones plus one token sampled after them, and the scheduler rolls the rejected
//! ones out of the KV cache. Output is unchanged (greedy: token for token; sampling: in
//! distribution); only the number of forwards drops when the text repeats itself.

use crate::constraint::TokenMatcher;
use crate::error::Result;
use crate::sampler::Sampler;

/// Speculative-decoding settings of an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeculativeConfig {
    /// Most tokens proposed per step and sequence.
    pub draft_tokens: usize,
    /// Longest suffix looked up.
    pub max_ngram: usize,
    /// Shortest suffix looked up.
    pub min_ngram: usize,
    /// Fewer drafts than this are not worth a wider forward: decode normally instead.
    pub min_draft_tokens: usize,
}

/// The defaults come from replaying greedy SmolLM2 outputs of three repetitive prompts (code to
/// rewrite, code to annotate, prose to correct; `benches/prompts/`) through the drafting rule:
/// verification is exact-match, so which drafts a rule gets accepted follows from the output alone.
/// On the CPU kernels a verifying forward of `r` rows costs about `0.64 + 0.36·r` single-row
/// forwards (fitted to the measured 3- and 4-draft runs). Short suffixes were the loss: a 1- or
/// 2-gram (`self .`, `) {`) recurs everywhere and its most recent continuation is usually wrong, so
/// those drafts cost a wide forward for nothing. Looking up 5 down to 3 tokens and drafting 4 took
/// the three prompts from 1.40/1.20/1.24× (3 down to 1, 3 drafts) to 1.80/1.37/1.43× in the replay;
/// 5 to 8 drafts gained on the first and lost on the others.
impl Default for SpeculativeConfig {
    fn default() -> Self {
        Self {
            draft_tokens: 4,
            max_ngram: 5,
            min_ngram: 3,
            min_draft_tokens: 1,
        }
    }
}

/// Prompt-lookup drafting: the up to `cfg.draft_tokens` tokens that followed the most recent
/// earlier occurrence of the longest suffix of `tokens` (between `min_ngram` and `max_ngram`
/// tokens long) that occurred before. Empty when nothing matches.
pub fn ngram_draft(tokens: &[u32], cfg: &SpeculativeConfig) -> Vec<u32> {
    let len = tokens.len();
    if cfg.draft_tokens == 0 {
        return Vec::new();
    }
    for n in (cfg.min_ngram.max(1)..=cfg.max_ngram).rev() {
        if len <= n {
            continue;
        }
        let suffix = &tokens[len - n..];
        // Most recent first; the match must end before the suffix starts to have a continuation
        // that is not the suffix itself.
        for start in (0..len - n).rev() {
            if &tokens[start..start + n] == suffix {
                let from = start + n;
                let to = (from + cfg.draft_tokens).min(len);
                return tokens[from..to].to_vec();
            }
        }
    }
    Vec::new()
}

/// Verifies `drafts` against `rows` (logits after the last accepted token, then after each
/// draft: `drafts.len() + 1` rows) and returns the tokens to emit: the accepted drafts, then the
/// token sampled where the first draft was rejected (or after the last one).
///
/// A constrained sequence's drafts were cut to what its grammar accepts, so an accepted draft is a
/// valid token; the token drawn where a draft is rejected (or after the last) is checked and, when
/// the grammar refuses it, drawn again under the grammar's mask. The matcher advances past every
/// token returned; rejected drafts never reach it.
pub fn verify_drafts(
    sampler: &mut Sampler,
    mut matcher: Option<&mut TokenMatcher>,
    history: &[u32],
    rows: &[&[f32]],
    drafts: &[u32],
) -> Result<Vec<u32>> {
    let mut hist = history.to_vec();
    let mut out = Vec::with_capacity(drafts.len() + 1);
    for (j, row) in rows.iter().enumerate() {
        let replacement = match drafts.get(j) {
            Some(&d) => sampler.verify(row, &hist, d)?,
            None => Some(sampler.sample(row, &hist)?),
        };
        let (t, last) = match replacement {
            None => (drafts[j], false),
            Some(t) => match matcher.as_deref_mut() {
                Some(m) => {
                    let ok = m.check(t)?;
                    let t = if ok {
                        t
                    } else {
                        super::pick::resample(sampler, m, row, &hist)?
                    };
                    (t, true)
                }
                None => (t, true),
            },
        };
        let mut complete = false;
        if let Some(m) = matcher.as_deref_mut() {
            m.advance(t)?;
            complete = m.is_done();
        }
        out.push(t);
        hist.push(t);
        // Nothing follows a complete grammar: the accepted drafts after it are dropped.
        if last || complete {
            return Ok(out);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_continue_the_most_recent_longest_match() {
        let cfg = SpeculativeConfig {
            draft_tokens: 3,
            max_ngram: 3,
            min_ngram: 1,
            ..SpeculativeConfig::default()
        };
        // "... 1 2 3 [4 5 6] ... 1 2 3": the 3-gram matches, its continuation is proposed.
        assert_eq!(
            ngram_draft(&[1, 2, 3, 4, 5, 6, 9, 1, 2, 3], &cfg),
            vec![4, 5, 6]
        );
        // Only a 1-gram matches; the most recent occurrence wins.
        assert_eq!(ngram_draft(&[7, 8, 0, 7, 9, 1, 7], &cfg), vec![9, 1, 7]);
        // Continuations stop at the end of the tokens.
        assert_eq!(ngram_draft(&[5, 6, 5], &cfg), vec![6, 5]);
        assert!(ngram_draft(&[1, 2, 3], &cfg).is_empty());
        assert!(ngram_draft(&[], &cfg).is_empty());
    }

    #[test]
    fn the_longest_suffix_picks_the_continuation_and_short_ones_draft_nothing() {
        let cfg = SpeculativeConfig::default();
        // "9 1 2 3" occurred before "1 2 3" did with another continuation: the 4-gram decides.
        let t = [9, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 8, 8, 8, 8, 9, 1, 2, 3];
        assert_eq!(ngram_draft(&t, &cfg), vec![4, 5, 6, 7]);
        // Only a 2-gram recurs: below `min_ngram`, no drafts.
        assert!(ngram_draft(&[1, 2, 5, 6, 7, 1, 2], &cfg).is_empty());
    }

    #[test]
    fn greedy_verification_stops_at_the_first_mismatch() {
        let mut s = Sampler::new(crate::sampler::SamplingParams::greedy()).expect("sampler");
        let one_hot = |t: usize| {
            let mut v = vec![0.0f32; 8];
            v[t] = 5.0;
            v
        };
        let rows = [one_hot(3), one_hot(4), one_hot(6), one_hot(7)];
        let refs: Vec<&[f32]> = rows.iter().map(|r| r.as_slice()).collect();
        // Drafts 3, 4 accepted; 5 rejected for 6.
        assert_eq!(
            verify_drafts(&mut s, None, &[], &refs, &[3, 4, 5]).expect("verify"),
            vec![3, 4, 6]
        );
        // All accepted: the bonus token from the last row.
        assert_eq!(
            verify_drafts(&mut s, None, &[], &refs, &[3, 4, 6]).expect("verify"),
            vec![3, 4, 6, 7]
        );
        assert_eq!(
            verify_drafts(&mut s, None, &[], &refs[..1], &[]).expect("verify"),
            vec![3]
        );
    }
}
