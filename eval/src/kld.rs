//! KL divergence of a model against a base model's saved distributions, with the statistics
//! `llama-perplexity --kl-divergence` reports (mean KLD, PPL ratio, ΔPPL, Δp, same top token).
//!
//! Saved distributions are **top-k compressed**: per scored position, the base model's `k` most
//! probable tokens with their log-probabilities, plus the log-probability of the actual next token.
//! The KL divergence is then computed over those `k` tokens plus one "rest" bucket holding the
//! remaining probability mass of each distribution. By the log-sum inequality this is a lower bound
//! of the full-vocabulary KLD; the gap is the divergence *inside* the base model's tail, which is
//! negligible when the tail mass is small (with k = 64 on SmolLM2 and the Lee corpus the base
//! tail mass averages a few percent). Everything else (PPL, Δp, same top) is exact.
//!
//! File layout (little endian): magic `CINDERLG`, version u32 = 1, vocab u32, ctx u32, k u32,
//! n_tokens u64, n_rows u64; the scored text's tokens (n_tokens × u32, chunks × ctx, as tokenized);
//! n_rows × (target log-prob f32, k × (token id u32, log-prob f32), most probable first);
//! FNV-1a 64 of everything before it. Written to a temporary file, fsynced, renamed.

use std::io::Write;
use std::path::Path;

use crate::error::{EvalError, Result};

const MAGIC: &[u8; 8] = b"CINDERLG";
const VERSION: u32 = 1;
const HEADER: usize = 8 + 4 * 4 + 8 * 2;
/// Most tokens kept per position (bounds the allocation of a file's rows).
pub const MAX_TOP_K: usize = 4096;
/// Tokens kept per position unless asked otherwise.
pub const DEFAULT_TOP_K: usize = 64;

/// The base model's distributions over a scored text (top-k compressed).
#[derive(Debug, Clone, PartialEq)]
pub struct BaseLogits {
    vocab: usize,
    ctx: usize,
    top_k: usize,
    tokens: Vec<u32>,
    target_logp: Vec<f32>,
    /// rows × k
    ids: Vec<u32>,
    /// rows × k
    logp: Vec<f32>,
}

/// One scored position of [`BaseLogits`].
#[derive(Debug, Clone, Copy)]
pub struct BaseRow<'a> {
    /// the base model's log-probability of the actual next token
    pub target_logp: f32,
    /// the k most probable tokens, most probable first
    pub ids: &'a [u32],
    /// their log-probabilities
    pub logp: &'a [f32],
}

/// log-sum-exp of a logits row, in f64.
fn log_sum_exp(row: &[f32]) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    max + row
        .iter()
        .map(|&l| (l as f64 - max).exp())
        .sum::<f64>()
        .ln()
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl BaseLogits {
    /// An empty record for a text scored in chunks of `ctx`; `tokens` are the scored chunks'
    /// tokens (chunks × ctx), kept so a comparison can check it scores the same text the same way.
    pub fn new(vocab: usize, ctx: usize, top_k: usize, tokens: Vec<u32>) -> Result<Self> {
        if top_k == 0 || top_k > MAX_TOP_K || top_k > vocab {
            return Err(EvalError::Invalid(format!(
                "logits top-k {top_k} must be 1..={} and at most the vocabulary ({vocab})",
                MAX_TOP_K
            )));
        }
        Ok(Self {
            vocab,
            ctx,
            top_k,
            tokens,
            target_logp: Vec::new(),
            ids: Vec::new(),
            logp: Vec::new(),
        })
    }

    /// Records one scored position from the base model's logits row (`[vocab]`).
    pub fn push_row(&mut self, logits: &[f32], target: u32) -> Result<()> {
        if logits.len() != self.vocab {
            return Err(EvalError::Invalid(format!(
                "logits row of {} values for a vocabulary of {}",
                logits.len(),
                self.vocab
            )));
        }
        let lse = log_sum_exp(logits);
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let k = self.top_k;
        let by_logit_desc = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]);
        if k < idx.len() {
            idx.select_nth_unstable_by(k - 1, by_logit_desc);
            idx.truncate(k);
        }
        idx.sort_by(by_logit_desc);
        for &i in &idx {
            self.ids.push(i);
            self.logp.push((logits[i as usize] as f64 - lse) as f32);
        }
        let t = logits
            .get(target as usize)
            .map_or(f64::NEG_INFINITY, |&l| l as f64 - lse);
        self.target_logp.push(t as f32);
        Ok(())
    }

    /// Scored positions recorded.
    pub fn rows(&self) -> usize {
        self.target_logp.len()
    }

    /// Position `i` (panics if `i >= rows()`; callers iterate `0..rows()`).
    pub fn row(&self, i: usize) -> BaseRow<'_> {
        let k = self.top_k;
        BaseRow {
            target_logp: self.target_logp[i],
            ids: &self.ids[i * k..(i + 1) * k],
            logp: &self.logp[i * k..(i + 1) * k],
        }
    }

    /// Tokens per chunk of the scored text.
    pub fn ctx(&self) -> usize {
        self.ctx
    }

    /// Vocabulary size of the base model.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// Tokens kept per position.
    pub fn top_k(&self) -> usize {
        self.top_k
    }

    /// The scored text's tokens (chunks × ctx).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Writes the file (temporary file, fsync, rename: a crash leaves the old file or none).
    pub fn save(&self, path: &Path) -> Result<()> {
        let io = |e: std::io::Error| EvalError::LogitsFile {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        let mut b = Vec::with_capacity(
            HEADER + self.tokens.len() * 4 + self.rows() * (4 + 8 * self.top_k) + 8,
        );
        b.extend_from_slice(MAGIC);
        for v in [
            VERSION,
            self.vocab as u32,
            self.ctx as u32,
            self.top_k as u32,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&(self.tokens.len() as u64).to_le_bytes());
        b.extend_from_slice(&(self.rows() as u64).to_le_bytes());
        for t in &self.tokens {
            b.extend_from_slice(&t.to_le_bytes());
        }
        for i in 0..self.rows() {
            let r = self.row(i);
            b.extend_from_slice(&r.target_logp.to_le_bytes());
            for (id, lp) in r.ids.iter().zip(r.logp) {
                b.extend_from_slice(&id.to_le_bytes());
                b.extend_from_slice(&lp.to_le_bytes());
            }
        }
        let h = fnv1a(&b);
        b.extend_from_slice(&h.to_le_bytes());
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".partial");
        let tmp = std::path::PathBuf::from(tmp);
        {
            let mut f = std::fs::File::create(&tmp).map_err(io)?;
            f.write_all(&b).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, path).map_err(io)?;
        Ok(())
    }

    /// Reads and checks a file written by [`BaseLogits::save`]: sizes against the file length
    /// before any allocation, the checksum, token ids inside the vocabulary, finite log-probs.
    pub fn load(path: &Path) -> Result<Self> {
        let bad = |reason: String| EvalError::LogitsFile {
            path: path.display().to_string(),
            reason,
        };
        let b = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        Self::parse(&b).map_err(bad)
    }

    fn parse(b: &[u8]) -> std::result::Result<Self, String> {
        if b.len() < HEADER + 8 || &b[..8] != MAGIC {
            return Err("not a Cinder logits file (bad magic or too short)".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let version = u32_at(8);
        if version != VERSION {
            return Err(format!("version {version}, this build reads {VERSION}"));
        }
        let (vocab, ctx, k) = (
            u32_at(12) as usize,
            u32_at(16) as usize,
            u32_at(20) as usize,
        );
        let (n_tokens, n_rows) = (u64_at(24), u64_at(32));
        if k == 0 || k > MAX_TOP_K || k > vocab {
            return Err(format!("top-k {k} out of range for vocabulary {vocab}"));
        }
        if ctx == 0 || n_tokens % ctx as u64 != 0 {
            return Err(format!("{n_tokens} tokens are not whole chunks of {ctx}"));
        }
        let expect = (n_tokens.checked_mul(4))
            .and_then(|t| {
                n_rows
                    .checked_mul(4 + 8 * k as u64)
                    .and_then(|r| r.checked_add(t))
            })
            .and_then(|x| x.checked_add((HEADER + 8) as u64));
        if expect != Some(b.len() as u64) {
            return Err(format!(
                "{} bytes, but the header announces {n_tokens} tokens and {n_rows} rows of top-{k} \
                 (truncated or corrupt)",
                b.len()
            ));
        }
        let body = b.len() - 8;
        if fnv1a(&b[..body]) != u64_at(body) {
            return Err("checksum mismatch (corrupt)".into());
        }
        let mut o = HEADER;
        let mut tokens = Vec::with_capacity(n_tokens as usize);
        for _ in 0..n_tokens {
            tokens.push(u32_at(o));
            o += 4;
        }
        let rows = n_rows as usize;
        let mut out = Self::new(vocab, ctx, k, tokens).map_err(|e| e.to_string())?;
        out.target_logp.reserve(rows);
        out.ids.reserve(rows * k);
        out.logp.reserve(rows * k);
        let f32_at = |o: usize| f32::from_bits(u32_at(o));
        for r in 0..rows {
            let t = f32_at(o);
            o += 4;
            if t.is_nan() || t > 1e-3 {
                return Err(format!(
                    "row {r}: target log-prob {t} is not a log-probability"
                ));
            }
            out.target_logp.push(t);
            for _ in 0..k {
                let (id, lp) = (u32_at(o), f32_at(o + 4));
                o += 8;
                if id as usize >= vocab || !lp.is_finite() || lp > 1e-3 {
                    return Err(format!(
                        "row {r}: entry ({id}, {lp}) is not a token log-prob"
                    ));
                }
                out.ids.push(id);
                out.logp.push(lp);
            }
        }
        Ok(out)
    }
}

/// Accumulates the comparison of a model's logits rows against [`BaseRow`]s.
#[derive(Debug, Clone, Default)]
pub struct KldAccumulator {
    kld: Vec<f64>,
    dp: Vec<f64>,
    nll_base: Vec<f64>,
    nll: Vec<f64>,
    same_top: usize,
}

/// `(label, value)` percentiles, highest first.
pub type Percentiles = Vec<(&'static str, f64)>;

/// What `--kl-divergence` reports (llama-perplexity's statistics).
#[derive(Debug, Clone, serde::Serialize)]
pub struct KldReport {
    /// positions compared
    pub positions: usize,
    /// perplexity of the model under test, ± standard error
    pub ppl: (f64, f64),
    /// perplexity of the base model on the same positions
    pub ppl_base: (f64, f64),
    /// correlation of the two models' per-token NLLs
    pub nll_correlation: f64,
    /// mean ln(PPL/PPL_base) ± standard error
    pub ln_ppl_ratio: (f64, f64),
    /// PPL / PPL_base
    pub ppl_ratio: f64,
    /// PPL − PPL_base ± standard error
    pub delta_ppl: (f64, f64),
    /// ΔPPL as a percentage of PPL_base
    pub delta_ppl_pct: f64,
    /// mean KL divergence (nats) ± standard error
    pub kld: (f64, f64),
    /// KLD percentiles
    pub kld_percentiles: Percentiles,
    /// mean Δp = p(target) − p_base(target) ± standard error
    pub delta_p: (f64, f64),
    /// root mean square of Δp
    pub delta_p_rms: f64,
    /// Δp percentiles
    pub delta_p_percentiles: Percentiles,
    /// percentage of positions whose most probable token is the base's, ± standard error
    pub same_top_pct: (f64, f64),
}

fn mean_err(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, (var / n).sqrt())
}

fn percentiles(v: &[f64], qs: &[(&'static str, f64)]) -> Percentiles {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    qs.iter()
        .map(|&(l, q)| {
            let i = ((s.len().saturating_sub(1)) as f64 * q).round() as usize;
            (l, s.get(i).copied().unwrap_or(f64::NAN))
        })
        .collect()
}

impl KldAccumulator {
    /// Compares one position: `logits` (`[vocab]`) of the model under test, `target` the next token.
    pub fn add(&mut self, base: BaseRow<'_>, logits: &[f32], target: u32) {
        let lse = log_sum_exp(logits);
        let lq = |i: u32| {
            logits
                .get(i as usize)
                .map_or(f64::NEG_INFINITY, |&l| l as f64 - lse)
        };
        let (mut kld, mut p_top, mut q_top) = (0.0f64, 0.0f64, 0.0f64);
        for (&id, &lp) in base.ids.iter().zip(base.logp) {
            let (lp, lqi) = (lp as f64, lq(id));
            let p = lp.exp();
            p_top += p;
            q_top += lqi.exp();
            if p > 0.0 {
                kld += p * (lp - lqi);
            }
        }
        // The rest of the vocabulary as one bucket on each side.
        let p_rest = (1.0 - p_top).max(0.0);
        if p_rest > 1e-12 {
            let q_rest = (1.0 - q_top).max(1e-30);
            kld += p_rest * (p_rest.ln() - q_rest.ln());
        }
        self.kld.push(kld.max(0.0));
        let lq_target = lq(target);
        self.dp
            .push(lq_target.exp() - (base.target_logp as f64).exp());
        self.nll_base.push(-(base.target_logp as f64));
        self.nll.push(-lq_target);
        let argmax = logits
            .iter()
            .enumerate()
            .fold((0usize, f32::NEG_INFINITY), |best, (i, &l)| {
                if l > best.1 { (i, l) } else { best }
            })
            .0;
        if base.ids.first().is_some_and(|&t| t as usize == argmax) {
            self.same_top += 1;
        }
    }

    /// Positions compared so far.
    pub fn len(&self) -> usize {
        self.kld.len()
    }

    /// Whether nothing was compared.
    pub fn is_empty(&self) -> bool {
        self.kld.is_empty()
    }

    /// The statistics so far.
    pub fn report(&self) -> KldReport {
        let n = self.len();
        let (nll, nll_err) = mean_err(&self.nll);
        let (nll_b, nll_b_err) = mean_err(&self.nll_base);
        let (ppl, ppl_b) = (nll.exp(), nll_b.exp());
        let diff: Vec<f64> = self
            .nll
            .iter()
            .zip(&self.nll_base)
            .map(|(a, b)| a - b)
            .collect();
        let (ln_ratio, ln_ratio_err) = mean_err(&diff);
        // Correlation of the per-token NLLs; with it, the delta-method error of PPL − PPL_base.
        let nf = (n.max(2) - 1) as f64;
        let cov = self
            .nll
            .iter()
            .zip(&self.nll_base)
            .map(|(a, b)| (a - nll) * (b - nll_b))
            .sum::<f64>()
            / nf;
        let sd = |v: &[f64], m: f64| (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / nf).sqrt();
        let (sd_q, sd_b) = (sd(&self.nll, nll), sd(&self.nll_base, nll_b));
        let cor = if sd_q > 0.0 && sd_b > 0.0 {
            cov / (sd_q * sd_b)
        } else {
            1.0
        };
        let var_delta = (ppl * ppl * sd_q * sd_q + ppl_b * ppl_b * sd_b * sd_b
            - 2.0 * ppl * ppl_b * cov)
            / n.max(1) as f64;
        let (dp, dp_err) = mean_err(&self.dp);
        let p = self.same_top as f64 / n.max(1) as f64;
        KldReport {
            positions: n,
            ppl: (ppl, ppl * nll_err),
            ppl_base: (ppl_b, ppl_b * nll_b_err),
            nll_correlation: cor,
            ln_ppl_ratio: (ln_ratio, ln_ratio_err),
            ppl_ratio: ln_ratio.exp(),
            delta_ppl: (ppl - ppl_b, var_delta.max(0.0).sqrt()),
            delta_ppl_pct: 100.0 * (ppl / ppl_b - 1.0),
            kld: mean_err(&self.kld),
            kld_percentiles: percentiles(
                &self.kld,
                &[
                    ("max", 1.0),
                    ("99.9%", 0.999),
                    ("99.0%", 0.99),
                    ("90.0%", 0.9),
                    ("median", 0.5),
                    ("10.0%", 0.1),
                    ("5.0%", 0.05),
                    ("1.0%", 0.01),
                    ("min", 0.0),
                ],
            ),
            delta_p: (dp, dp_err),
            delta_p_rms: (self.dp.iter().map(|x| x * x).sum::<f64>() / n.max(1) as f64).sqrt(),
            delta_p_percentiles: percentiles(
                &self.dp,
                &[
                    ("max", 1.0),
                    ("99.9%", 0.999),
                    ("99.0%", 0.99),
                    ("95.0%", 0.95),
                    ("90.0%", 0.9),
                    ("75.0%", 0.75),
                    ("median", 0.5),
                    ("25.0%", 0.25),
                    ("10.0%", 0.1),
                    ("5.0%", 0.05),
                    ("1.0%", 0.01),
                    ("0.1%", 0.001),
                    ("min", 0.0),
                ],
            ),
            same_top_pct: (100.0 * p, 100.0 * (p * (1.0 - p) / nf).sqrt()),
        }
    }
}

impl std::fmt::Display for KldReport {
    /// The report in llama-perplexity's layout.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "====== Perplexity statistics ======")?;
        writeln!(
            f,
            "Mean PPL(Q)                   : {:10.6} ± {:10.6}",
            self.ppl.0, self.ppl.1
        )?;
        writeln!(
            f,
            "Mean PPL(base)                : {:10.6} ± {:10.6}",
            self.ppl_base.0, self.ppl_base.1
        )?;
        writeln!(
            f,
            "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%",
            100.0 * self.nll_correlation
        )?;
        writeln!(
            f,
            "Mean ln(PPL(Q)/PPL(base))     : {:10.6} ± {:10.6}",
            self.ln_ppl_ratio.0, self.ln_ppl_ratio.1
        )?;
        writeln!(f, "Mean PPL(Q)/PPL(base)         : {:10.6}", self.ppl_ratio)?;
        writeln!(
            f,
            "Mean PPL(Q)-PPL(base)         : {:10.6} ± {:10.6} ({:+.3}%)",
            self.delta_ppl.0, self.delta_ppl.1, self.delta_ppl_pct
        )?;
        writeln!(f)?;
        writeln!(f, "====== KL divergence statistics ======")?;
        writeln!(f, "Mean    KLD: {:10.6} ± {:10.6}", self.kld.0, self.kld.1)?;
        for (l, v) in &self.kld_percentiles {
            writeln!(f, "{:<7} KLD: {v:10.6}", l)?;
        }
        writeln!(f)?;
        writeln!(f, "====== Token probability statistics ======")?;
        writeln!(
            f,
            "Mean    Δp: {:8.3} ± {:.3} %",
            100.0 * self.delta_p.0,
            100.0 * self.delta_p.1
        )?;
        for (l, v) in &self.delta_p_percentiles {
            writeln!(f, "{:<7} Δp: {:8.3}%", l, 100.0 * v)?;
        }
        writeln!(f, "RMS Δp    : {:8.3} %", 100.0 * self.delta_p_rms)?;
        write!(
            f,
            "Same top p: {:6.3} ± {:.3} %",
            self.same_top_pct.0, self.same_top_pct.1
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(seed: u32, n: usize, vocab: usize) -> Vec<Vec<f32>> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                (0..vocab)
                    .map(|_| {
                        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                        (x >> 8) as f32 / (1u32 << 24) as f32 * 8.0
                    })
                    .collect()
            })
            .collect()
    }

    /// The exact full-vocabulary KL divergence.
    fn exact_kld(p: &[f32], q: &[f32]) -> f64 {
        let (lp, lq) = (log_sum_exp(p), log_sum_exp(q));
        p.iter()
            .zip(q)
            .map(|(&a, &b)| {
                let la = a as f64 - lp;
                la.exp() * (la - (b as f64 - lq))
            })
            .sum()
    }

    #[test]
    fn identical_models_have_zero_divergence_and_same_top() {
        let r = rows(1, 20, 50);
        let mut base = BaseLogits::new(50, 10, 8, vec![0; 20]).expect("base");
        let mut acc = KldAccumulator::default();
        for (i, row) in r.iter().enumerate() {
            base.push_row(row, i as u32).expect("row");
        }
        for (i, row) in r.iter().enumerate() {
            acc.add(base.row(i), row, i as u32);
        }
        let rep = acc.report();
        assert!(rep.kld.0.abs() < 1e-6, "{}", rep.kld.0);
        assert!(rep.delta_p.0.abs() < 1e-6);
        assert_eq!(rep.same_top_pct.0, 100.0);
        assert!((rep.ppl_ratio - 1.0).abs() < 1e-6);
    }

    #[test]
    fn top_k_kld_is_a_close_lower_bound_and_exact_with_the_whole_vocabulary() {
        let p = rows(2, 30, 64);
        let q: Vec<Vec<f32>> = p
            .iter()
            .zip(rows(3, 30, 64))
            .map(|(a, n)| a.iter().zip(n).map(|(x, e)| x + 0.3 * (e - 4.0)).collect())
            .collect();
        for k in [64, 16] {
            let mut base = BaseLogits::new(64, 30, k, vec![0; 30]).expect("base");
            let mut acc = KldAccumulator::default();
            for (i, (a, b)) in p.iter().zip(&q).enumerate() {
                base.push_row(a, 5).expect("row");
                acc.add(base.row(i), b, 5);
            }
            let exact: f64 = p.iter().zip(&q).map(|(a, b)| exact_kld(a, b)).sum::<f64>() / 30.0;
            let got = acc.report().kld.0;
            if k == 64 {
                assert!((got - exact).abs() < 1e-6, "k = vocab: {got} vs {exact}");
            } else {
                assert!(
                    got <= exact + 1e-9 && got > 0.5 * exact,
                    "k = 16: {got} vs {exact}"
                );
            }
        }
    }

    #[test]
    fn files_round_trip_and_corruption_is_refused() {
        let dir = std::env::temp_dir().join(format!("cinder-kld-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("base.logits");
        let mut base = BaseLogits::new(40, 5, 4, (0..10).collect()).expect("base");
        for row in rows(4, 6, 40) {
            base.push_row(&row, 3).expect("row");
        }
        base.save(&path).expect("save");
        assert_eq!(BaseLogits::load(&path).expect("load"), base);
        let good = std::fs::read(&path).expect("read");
        let mut cases: Vec<(Vec<u8>, &str)> = vec![
            (good[..good.len() - 9].to_vec(), "truncated"),
            (b"GGUF".to_vec(), "magic"),
        ];
        let mut flipped = good.clone();
        flipped[HEADER + 13] ^= 0x40;
        cases.push((flipped, "checksum"));
        let mut huge = good.clone();
        huge[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        cases.push((huge, "truncated or corrupt"));
        for (bytes, want) in cases {
            std::fs::write(&path, &bytes).expect("write");
            let e = BaseLogits::load(&path)
                .expect_err("corrupt file")
                .to_string();
            assert!(e.contains(want) && e.contains("base.logits"), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
