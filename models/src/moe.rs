//! Mixture-of-experts feed-forward (Qwen3-MoE; llama.cpp's `build_moe_ffn`): a router scores every
//! expert per token, the `n_experts_used` best run a SwiGLU MLP each, and their outputs are summed
//! with the router's weights.
//!
//! Routing happens on the host: the router's logits (`[tokens, n_experts]`, small) are read back, the
//! softmax, top-k and renormalization are computed in f32, and the step's tokens are grouped by
//! expert so each routed expert runs one product over all of its tokens. Experts no token picked are
//! not touched, so their weights stay in the memory-mapped file (or untouched on a device).

use burn::module::Module;
use burn::tensor::{Int, Tensor, TensorData};
use cinder_runtime::InferenceBackend;
use cinder_runtime::quant::QLinear;
use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};
use crate::layers::swiglu;
use crate::loader::WeightSource;

/// How a mixture-of-experts layer routes (the GGUF `{arch}.expert_*` keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoeConfig {
    /// experts per layer
    pub n_experts: usize,
    /// experts each token runs
    pub n_experts_used: usize,
    /// hidden width of one expert's MLP
    pub expert_ffn_dim: usize,
    /// the chosen experts' softmax weights are divided by their sum (Qwen3-MoE: `norm_topk_prob`)
    pub normalize_weights: bool,
}

impl MoeConfig {
    /// Checks the counts fit together.
    pub fn validate(&self) -> Result<()> {
        if self.n_experts == 0
            || self.n_experts_used == 0
            || self.n_experts_used > self.n_experts
            || self.expert_ffn_dim == 0
        {
            return Err(ModelError::Config {
                arch: "moe".into(),
                reason: format!(
                    "{} experts, {} used per token, expert width {}: need 1 ≤ used ≤ experts and a \
                     non-zero width",
                    self.n_experts, self.n_experts_used, self.expert_ffn_dim
                ),
            });
        }
        Ok(())
    }
}

/// One expert: a SwiGLU MLP.
#[derive(Module, Debug)]
pub struct Expert<B: InferenceBackend> {
    gate: QLinear<B>,
    up: QLinear<B>,
    down: QLinear<B>,
}

/// A mixture-of-experts feed-forward layer.
#[derive(Module, Debug)]
pub struct MoeFfn<B: InferenceBackend> {
    /// `[n_experts, d]`: one logit per expert
    router: QLinear<B>,
    experts: Vec<Expert<B>>,
    #[module(skip)]
    n_used: usize,
    #[module(skip)]
    normalize: bool,
}

impl<B: InferenceBackend> MoeFfn<B> {
    /// Loads `{prefix}.router` and experts `{prefix}.{gate,up,down}.{e}` for a model of width `d`.
    pub fn load(
        cfg: &MoeConfig,
        src: &mut dyn WeightSource<B>,
        prefix: &str,
        d: usize,
    ) -> Result<Self> {
        cfg.validate()?;
        let ff = cfg.expert_ffn_dim;
        let router = src.linear(&format!("{prefix}.router"), cfg.n_experts, d, false)?;
        let experts = (0..cfg.n_experts)
            .map(|e| {
                Ok(Expert {
                    gate: src.linear(&format!("{prefix}.gate.{e}"), ff, d, false)?,
                    up: src.linear(&format!("{prefix}.up.{e}"), ff, d, false)?,
                    down: src.linear(&format!("{prefix}.down.{e}"), d, ff, false)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            router,
            experts,
            n_used: cfg.n_experts_used,
            normalize: cfg.normalize_weights,
        })
    }

    /// `x` `[b, t, d]` (the normed residual) -> the experts' weighted sum `[b, t, d]`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [b, t, d] = x.dims();
        let n = b * t;
        let device = x.device();
        let flat: Tensor<B, 2> = x.reshape([n, d]);
        // Router logits to the host: [n, n_experts] (one host sync per MoE layer, counted with the
        // step's others). A failed read routes nothing: the layer then adds zero.
        let n_experts = self.experts.len();
        let logits = cinder_runtime::model::logits_to_vec(
            self.router.forward(flat.clone()).reshape([1, n, n_experts]),
        )
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "reading the expert router's logits failed");
            Vec::new()
        });
        let routes = route(&logits, n_experts, self.n_used, self.normalize);
        // Each expert's (token, weight) pairs, gathered in one pass over the routes.
        let mut by_expert: Vec<Vec<(usize, f32)>> = vec![Vec::new(); n_experts];
        for (tok, r) in routes.iter().enumerate() {
            for &(e, w) in r {
                by_expert[e].push((tok, w));
            }
        }
        let mut out = Tensor::<B, 2>::zeros([n, d], &device);
        for (expert, picked) in self.experts.iter().zip(&by_expert) {
            if picked.is_empty() {
                continue;
            }
            let m = picked.len();
            let ids: Vec<i32> = picked.iter().map(|(tok, _)| *tok as i32).collect();
            let idx = Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [m]), &device);
            let weights: Vec<f32> = picked.iter().map(|(_, w)| *w).collect();
            let w = Tensor::<B, 2>::from_data(TensorData::new(weights, [m, 1]), &device);
            // [m, d] -> [m, ff] -> [m, d], scaled by each token's weight for this expert
            let xs = flat.clone().select(0, idx.clone());
            let h = swiglu(xs, &expert.gate, &expert.up);
            let y = expert.down.forward(h) * w;
            out = out.select_assign(0, idx, y, burn::tensor::IndexingUpdateOp::Add);
        }
        out.reshape([b, t, d])
    }
}

/// Per token, the `k` chosen experts and their weights: softmax over all experts' logits, the `k`
/// largest probabilities (lowest index first on ties), divided by their sum when `normalize`
/// (clamped as llama.cpp clamps it, at the smallest normal f16).
pub fn route(
    logits: &[f32],
    n_experts: usize,
    k: usize,
    normalize: bool,
) -> Vec<Vec<(usize, f32)>> {
    logits
        .chunks_exact(n_experts)
        .map(|row| {
            let mx = row.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
            let exps: Vec<f32> = row.iter().map(|&x| (x - mx).exp()).collect();
            let sum: f32 = exps.iter().sum();
            let probs: Vec<f32> = exps.iter().map(|&e| e / sum).collect();
            let mut order: Vec<usize> = (0..n_experts).collect();
            order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
            let mut chosen: Vec<(usize, f32)> = order[..k].iter().map(|&e| (e, probs[e])).collect();
            if normalize {
                let s: f32 = chosen
                    .iter()
                    .map(|(_, p)| p)
                    .sum::<f32>()
                    .max(6.103_515_6e-5);
                for c in &mut chosen {
                    c.1 /= s;
                }
            }
            chosen
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_pick_the_top_k_and_renormalize() {
        // two tokens, four experts, two used
        let logits = [0.0, 2.0, 1.0, -1.0, 3.0, 3.0, 0.0, 0.0];
        let r = route(&logits, 4, 2, true);
        assert_eq!(r[0].iter().map(|x| x.0).collect::<Vec<_>>(), [1, 2]);
        let e = (1.0f32).exp();
        assert!((r[0][0].1 - e / (e + 1.0)).abs() < 1e-6);
        assert!((r[0][0].1 + r[0][1].1 - 1.0).abs() < 1e-6);
        // a tie keeps the lower index first
        assert_eq!(r[1].iter().map(|x| x.0).collect::<Vec<_>>(), [0, 1]);
        let raw = route(&logits, 4, 2, false);
        assert!(raw[0][0].1 + raw[0][1].1 < 1.0);
    }

    #[test]
    fn bad_counts_are_named() {
        let c = MoeConfig {
            n_experts: 4,
            n_experts_used: 5,
            expert_ffn_dim: 8,
            normalize_weights: true,
        };
        assert!(c.validate().unwrap_err().to_string().contains("5 used"));
    }
}
