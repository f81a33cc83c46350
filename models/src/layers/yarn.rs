//! YaRN RoPE scaling (Peng et al., 2023, "YaRN: Efficient Context Window Extension of Large Language
//! Models"), as llama.cpp's `rope_yarn` and transformers' `_compute_yarn_parameters` apply it.
//!
//! A rotation pair `i` of `n_rot` dims turns `r_i = L / (2π · base^(2i/n_rot))` times over the
//! original context `L`. Pairs that turn often (more than `beta_fast` times) keep their frequency
//! (extrapolation); pairs that turn rarely (fewer than `beta_slow`) are slowed by `factor`
//! (interpolation, as linear scaling would); the pairs in between blend the two along a linear ramp.
//! Every rotated value is multiplied by the attention factor (`1 + 0.1 · ln(factor)` unless the
//! checkpoint gives its own), so Q·K grows by its square and attention stays as sharp at the longer
//! context.

use serde::{Deserialize, Serialize};

/// YaRN's settings, from GGUF metadata (`rope.scaling.*`) or an HF `rope_scaling` of type `yarn`.
///
/// # Examples
///
/// ```
/// use cinder_models::layers::Yarn;
/// // Qwen2.5's 4× extension of a 32,768-token context
/// let y = Yarn::new(4.0, 32768);
/// assert!((y.attn_factor - (1.0 + 0.1 * 4f64.ln())).abs() < 1e-12);
/// // the fastest pairs keep their frequency, the slowest are divided by the factor
/// let f = y.frequency_scales(64, 1_000_000.0);
/// assert_eq!(f[0], 1.0);
/// assert_eq!(f[31], 0.25);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Yarn {
    /// the context extension (llama.cpp's `1 / freq_scale`), above 1
    pub factor: f64,
    /// the context the model was trained at before the extension
    pub original_context: usize,
    /// pairs turning more often than this over the original context keep their frequency (32)
    pub beta_fast: f64,
    /// pairs turning less often than this are fully interpolated (1)
    pub beta_slow: f64,
    /// every rotated value is multiplied by this
    pub attn_factor: f64,
    /// the ramp's ends are rounded outwards to whole pairs (transformers' `truncate`; llama.cpp
    /// always rounds)
    pub truncate: bool,
}

/// transformers' and llama.cpp's `get_mscale`: `1 + 0.1 · mscale · ln(scale)` above 1, else 1.
pub fn yarn_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

impl Yarn {
    /// YaRN with the default betas (32, 1), rounded ramp ends and the default attention factor.
    pub fn new(factor: f64, original_context: usize) -> Self {
        Self {
            factor,
            original_context,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attn_factor: yarn_mscale(factor, 1.0),
            truncate: true,
        }
    }

    /// Checks the values are usable; `Err` says which is not.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(self.factor.is_finite() && self.factor >= 1.0) {
            return Err(format!("YaRN factor {} must be at least 1", self.factor));
        }
        if self.original_context < 2 {
            return Err(format!(
                "YaRN original context {} is too small",
                self.original_context
            ));
        }
        if !(self.beta_fast.is_finite()
            && self.beta_slow.is_finite()
            && self.beta_slow > 0.0
            && self.beta_fast > self.beta_slow)
        {
            return Err(format!(
                "YaRN betas fast {} and slow {} (want fast > slow > 0)",
                self.beta_fast, self.beta_slow
            ));
        }
        if !(self.attn_factor.is_finite() && self.attn_factor > 0.0) {
            return Err(format!(
                "YaRN attention factor {} out of range",
                self.attn_factor
            ));
        }
        Ok(())
    }

    /// The pair index where `rotations` turns over the original context are made (llama.cpp's
    /// `ggml_rope_yarn_corr_dim`).
    fn correction_pair(&self, n_rot: usize, theta: f64, rotations: f64) -> f64 {
        n_rot as f64
            * (self.original_context as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln()
            / (2.0 * theta.ln())
    }

    /// The multiplier of each pair's frequency (`n_rot / 2` values): 1 for the pairs kept, `1 /
    /// factor` for the pairs interpolated, a linear blend between.
    pub fn frequency_scales(&self, n_rot: usize, theta: f64) -> Vec<f64> {
        let (mut low, mut high) = (
            self.correction_pair(n_rot, theta, self.beta_fast),
            self.correction_pair(n_rot, theta, self.beta_slow),
        );
        if self.truncate {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, high) = (low.max(0.0), high.min(n_rot as f64 - 1.0));
        (0..n_rot / 2)
            .map(|i| {
                // share of extrapolation: 1 below `low`, 0 above `high`
                let y = (i as f64 - low) / (high - low).max(0.001);
                let keep = 1.0 - y.clamp(0.0, 1.0);
                (1.0 - keep) / self.factor + keep
            })
            .collect()
    }
}
