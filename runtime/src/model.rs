//! The interface between a model architecture and the runtime.

use burn::tensor::{Int, Tensor};
use cinder_backends::InferenceBackend;

use crate::attention::AttentionCache;

/// Which positions' logits a forward pass returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logits {
    /// Every position (perplexity, speculative verification).
    All,
    /// Only the last position of each sequence (generation): skips the vocabulary projection elsewhere.
    Last,
    /// The last `n` positions (perplexity scores only the second half of each window).
    Tail(usize),
    /// These time steps, in this order (a ragged batch: the last new token of each sequence that
    /// needs a next token).
    Rows(Vec<usize>),
}

impl Logits {
    /// How many trailing positions of a `t`-token forward get logits.
    pub fn count(&self, t: usize) -> usize {
        match self {
            Logits::All => t,
            Logits::Last => t.min(1),
            Logits::Tail(n) => (*n).min(t),
            Logits::Rows(r) => r.len(),
        }
    }
}

/// A decoder-only language model. Implementations hold weights only; the cache is passed in.
pub trait CausalLm<B: InferenceBackend> {
    /// Runs `tokens` `[batch, t]`, which continue the sequence held in `cache`, and returns logits
    /// `[batch, n, vocab]` for the last `n = logits.count(t)` positions. Advances the cache by `t`.
    fn forward(
        &self,
        tokens: Tensor<B, 2, Int>,
        cache: &mut dyn AttentionCache<B>,
        logits: Logits,
    ) -> Tensor<B, 3>;

    /// Number of transformer layers whose K/V the cache passed to [`CausalLm::forward`] holds (it
    /// needs one slot per layer): all of them, except for a model split across two devices.
    fn n_layers(&self) -> usize;

    /// Layers a split model runs on another device, with their K/V in a store of its own there
    /// (layer offload: `--gpu-layers`); 0 for a model on one device.
    fn offloaded_layers(&self) -> usize {
        0
    }

    /// Bytes per cached token of those layers' store (K and V, as that device stores them); the KV
    /// budget counts them beside the cache's own.
    fn offloaded_kv_bytes_per_token(&self) -> usize {
        0
    }

    /// Sets up what the model keeps beside `cache` (a split model allocates its other device's KV
    /// store here, so that a budget the device cannot hold is refused before any request). Callers
    /// that skip it get the same set-up on the first forward.
    fn prepare_cache(&self, _cache: &mut dyn AttentionCache<B>) -> crate::Result<()> {
        Ok(())
    }

    /// `(kv_heads, head_dim)`: the K/V width per token and layer (sizes the paged cache).
    fn kv_dims(&self) -> (usize, usize);

    /// Vocabulary size (rows of the output projection).
    fn vocab_size(&self) -> usize;

    /// The longest context the model was trained for.
    fn context_length(&self) -> usize;

    /// The device the weights live on.
    fn device(&self) -> B::Device;
}
