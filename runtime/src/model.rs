//! The interface between a model architecture and the runtime.

use burn::tensor::{Int, Tensor, TensorData};
use cinder_backends::InferenceBackend;

use crate::attention::AttentionCache;
use crate::error::{Result, RuntimeError};

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
    /// needs one slot per layer). A model may keep other layers' K/V in a store of its own (a
    /// model split across two devices).
    fn n_layers(&self) -> usize;

    /// Bytes of K/V the model keeps per cached token: K and V of the cache's layers as `B` stores
    /// them, plus any store of its own. Sizes the cache from a memory budget.
    fn kv_bytes_per_token(&self) -> usize {
        self.kv_bytes_per_token_as(crate::kv::KvType::F16)
    }

    /// [`CausalLm::kv_bytes_per_token`] with the cache's rows stored as `dtype`.
    fn kv_bytes_per_token_as(&self, dtype: crate::kv::KvType) -> usize {
        let (kvh, hd) = self.kv_dims();
        self.n_layers() * 2 * kvh * dtype.row_bytes(hd, B::KV_BYTES_PER_VALUE)
    }

    /// Sets up what the model keeps beside `cache` (a model with a K/V store of its own allocates
    /// it here, sized after the cache's layout, so that a budget the device cannot hold is refused
    /// before any request). Callers that skip it get the same set-up on the first forward.
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

/// Reads one row of logits back to the host.
pub fn logits_to_vec<B: InferenceBackend>(logits: Tensor<B, 3>) -> Result<Vec<f32>> {
    cinder_backends::counters::read_back(logits)
        .convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| RuntimeError::Readback(format!("{e:?}")))
}

/// Token ids as a `[1, t]` tensor.
pub fn token_tensor<B: InferenceBackend>(ids: &[u32], device: &B::Device) -> Tensor<B, 2, Int> {
    let v: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
    Tensor::from_data(TensorData::new(v, [1, ids.len()]), device)
}
