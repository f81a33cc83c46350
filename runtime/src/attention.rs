//! The attention op and the KV cache behind it.
//!
//! Models hand each layer's freshly projected (and RoPE'd) Q, K, V to an [`AttentionCache`]; the cache
//! stores K/V however it likes and returns the attention output: [`ContiguousKvCache`] for one sequence
//! (perplexity, tests), [`crate::kv::PagedKvCache`] for a ragged batch of many sequences (the engine).
//! A model never sees how the cache is laid out.

use std::any::Any;

use burn::tensor::{Tensor, backend::Backend};

pub use cinder_backends::attention::{
    AttentionParams, MaskKey, PagedBatch, attention, attention_masked, causal_mask,
};

/// A slot in which a model split across two devices keeps its other device's cache (layer
/// offload): the slot lives in the cache the caller passes, so that state lives and dies with it.
pub type OffloadSlot = Option<Box<dyn Any + Send>>;

/// How a paged cache lays out the next forward, for a model that mirrors it into a second store on
/// another device (layer offload).
#[derive(Debug, Clone)]
pub struct PagedLayout {
    /// The ragged batch of the next forward.
    pub batch: PagedBatch,
    /// Blocks per layer in the store.
    pub num_blocks: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// Copy-on-write block copies made since the previous call, in order, to repeat there.
    pub copies: Vec<(u32, u32)>,
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

    /// The paged layout of the next forward of `t` tokens (`None`: a contiguous cache). Forgets the
    /// block copies it returns.
    fn paged_layout(&mut self, _t: usize) -> Option<PagedLayout> {
        None
    }

    /// The slot a split model keeps its other device's cache in (see [`OffloadSlot`]).
    fn offload_slot(&mut self) -> &mut OffloadSlot;
}

/// A contiguous K/V cache for one sequence: per layer, K and V grow along the time axis.
#[derive(Debug)]
pub struct ContiguousKvCache<B: Backend> {
    layers: Vec<Option<(Tensor<B, 4>, Tensor<B, 4>)>>,
    position: usize,
    capacity: usize,
    /// Masks built during the current forward, shared by the layers that need the same one.
    masks: Vec<(MaskKey, Option<Tensor<B, 4>>)>,
    offload: OffloadSlot,
}

impl<B: Backend> ContiguousKvCache<B> {
    /// An empty cache for `n_layers` layers holding at most `capacity` tokens.
    pub fn new(n_layers: usize, capacity: usize) -> Self {
        Self {
            layers: (0..n_layers).map(|_| None).collect(),
            position: 0,
            capacity,
            masks: Vec::new(),
            offload: None,
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
        self.offload = None;
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

    fn offload_slot(&mut self) -> &mut OffloadSlot {
        &mut self.offload
    }
}
