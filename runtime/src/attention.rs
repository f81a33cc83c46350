//! The attention op and the KV cache behind it.
//!
//! Models hand each layer's freshly projected (and RoPE'd) Q, K, V to an [`AttentionCache`]; the cache
//! stores K/V however it likes and returns the attention output: [`ContiguousKvCache`] for one sequence
//! (perplexity, tests), [`crate::kv::PagedKvCache`] for a ragged batch of many sequences (the engine).
//! A model never sees how the cache is laid out.

use burn::tensor::{Tensor, backend::Backend};

pub use cinder_backends::attention::{
    AttentionParams, MaskKey, PagedBatch, SeqSlice, attention, attention_masked, causal_mask,
};

/// Where a cache puts the next forward's tokens, as a paged layout whatever the cache is (a
/// contiguous cache is one sequence over blocks `0..n` in order). A model that keeps some layers'
/// K/V in a store of its own lays its tokens out the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheLayout {
    /// The ragged batch of the next forward.
    pub batch: PagedBatch,
    /// Blocks per layer the cache's tables address.
    pub num_blocks: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// Copy-on-write block copies made since the previous forward, in order, to repeat in such a
    /// store.
    pub copies: Vec<(u32, u32)>,
}

/// Tokens per block of the layout a contiguous cache reports.
const CONTIGUOUS_LAYOUT_BLOCK: usize = 16;

/// The layout of `t` tokens after `past` of one sequence with room for `capacity`: blocks `0..n`
/// in order.
pub fn single_sequence_layout(past: usize, t: usize, capacity: usize) -> CacheLayout {
    let bs = CONTIGUOUS_LAYOUT_BLOCK;
    let num_blocks = capacity.max(past + t).div_ceil(bs).max(1);
    CacheLayout {
        batch: PagedBatch {
            block_size: bs,
            seqs: vec![SeqSlice {
                q_start: 0,
                q_len: t,
                past,
                blocks: (0..num_blocks as u32).collect(),
            }],
        },
        num_blocks,
        block_size: bs,
        copies: Vec::new(),
    }
}

/// Stores K/V across steps and computes causal attention for new tokens.
pub trait AttentionCache<B: Backend> {
    /// The positions of the `t` new tokens of the next forward, one per step of its time axis (for
    /// RoPE). A single sequence gives `past .. past + t`; a ragged batch gives each sequence's own.
    fn positions(&self, t: usize) -> Vec<usize>;

    /// Appends `k`, `v` for `layer` and attends the new queries to everything cached so far.
    ///
    /// Shapes: `q` `[batch, n_heads, t, head_dim]`, `k`/`v` `[batch, n_kv_heads, t, head_dim]` with
    /// `n_heads % n_kv_heads == 0` (grouped-query attention); returns `[batch, n_heads, t, head_dim]`.
    fn attend(
        &mut self,
        layer: usize,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        params: &AttentionParams,
    ) -> Tensor<B, 4>;

    /// Marks the `t` tokens just attended (all layers) as part of the cache. Models call this once per
    /// forward, after the last layer.
    fn advance(&mut self, t: usize);

    /// The layout of the next forward of `t` tokens ([`CacheLayout`]). Forgets the block copies it
    /// returns.
    fn layout(&mut self, t: usize) -> CacheLayout;
}

/// A contiguous K/V cache for one sequence: per layer, K and V grow along the time axis.
#[derive(Debug)]
pub struct ContiguousKvCache<B: Backend> {
    layers: Vec<Option<(Tensor<B, 4>, Tensor<B, 4>)>>,
    position: usize,
    capacity: usize,
    /// Masks built during the current forward, shared by the layers that need the same one.
    masks: Vec<(MaskKey, Option<Tensor<B, 4>>)>,
}

impl<B: Backend> ContiguousKvCache<B> {
    /// An empty cache for `n_layers` layers holding at most `capacity` tokens.
    pub fn new(n_layers: usize, capacity: usize) -> Self {
        Self {
            layers: (0..n_layers).map(|_| None).collect(),
            position: 0,
            capacity,
            masks: Vec::new(),
        }
    }

    /// Maximum number of tokens.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Drops everything (the next forward starts at position 0).
    pub fn clear(&mut self) {
        self.layers.iter_mut().for_each(|l| *l = None);
        self.position = 0;
        self.masks.clear();
    }
}

impl<B: Backend> AttentionCache<B> for ContiguousKvCache<B> {
    fn positions(&self, t: usize) -> Vec<usize> {
        (self.position..self.position + t).collect()
    }

    fn attend(
        &mut self,
        layer: usize,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        params: &AttentionParams,
    ) -> Tensor<B, 4> {
        let slot = &mut self.layers[layer];
        let (k_all, v_all) = match slot.take() {
            None => (k, v),
            Some((pk, pv)) => (Tensor::cat(vec![pk, k], 2), Tensor::cat(vec![pv, v], 2)),
        };
        let [b, h, t, _] = q.dims();
        let [_, kvh, total, _] = k_all.dims();
        let key = (
            [b, kvh, (h / kvh) * t, total],
            self.position,
            params.sliding_window,
        );
        let mask = match self.masks.iter().find(|(k, _)| *k == key) {
            Some((_, m)) => m.clone(),
            None => {
                let m = causal_mask::<B>(key, &q.device());
                self.masks.push((key, m.clone()));
                m
            }
        };
        let out = attention_masked(q, k_all.clone(), v_all.clone(), mask, params);
        *slot = Some((k_all, v_all));
        out
    }

    fn advance(&mut self, t: usize) {
        self.position += t;
        self.masks.clear();
    }

    fn layout(&mut self, t: usize) -> CacheLayout {
        single_sequence_layout(self.position, t, self.capacity)
    }
}
