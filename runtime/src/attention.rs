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

/// Attention over one whole sequence per forward with every token seeing every other: a decoder
/// stack run as an encoder (EmbeddingGemma). A sliding window becomes symmetric: a window of `w`
/// covers `w / 2` tokens on either side (`|i - j| ≤ w / 2`), as llama.cpp's symmetric window does
/// and as Hugging Face's Gemma 3 does with `use_bidirectional_attention` (it sets its exclusive
/// window to `w / 2 + 1`). A layer without a window sees the whole sequence. Nothing is stored
/// between forwards: each forward is a sequence of its own, at positions `0..t`.
#[derive(Debug, Default)]
pub struct BidirectionalAttention<B: Backend> {
    /// Masks built during the current forward, by window.
    masks: Vec<(Option<usize>, Option<Tensor<B, 4>>)>,
}

impl<B: Backend> BidirectionalAttention<B> {
    /// Attention for one forward at a time.
    pub fn new() -> Self {
        Self { masks: Vec::new() }
    }
}

/// The additive mask `[b, kvh, group·t, t]` hiding keys more than `window / 2` positions away from
/// the query on either side; `None` when no window bites (every query sees every key).
pub fn symmetric_window_mask<B: Backend>(
    [b, kvh, rows, t]: [usize; 4],
    window: Option<usize>,
    device: &B::Device,
) -> Option<Tensor<B, 4>> {
    let half = window.map(|w| w / 2).filter(|&h| t > h + 1)?;
    // finite, as in `causal_mask`
    const HIDDEN: f32 = -1.0e30;
    let one: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if i.abs_diff(j) <= half { 0.0 } else { HIDDEN }))
        .collect();
    let copies = b * kvh * (rows / t);
    let mut full = Vec::with_capacity(copies * one.len());
    for _ in 0..copies {
        full.extend_from_slice(&one);
    }
    Some(Tensor::from_data(
        burn::tensor::TensorData::new(full, [b, kvh, rows, t]),
        device,
    ))
}

impl<B: Backend> AttentionCache<B> for BidirectionalAttention<B> {
    fn positions(&self, t: usize) -> Vec<usize> {
        (0..t).collect()
    }

    fn attend(
        &mut self,
        _layer: usize,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        params: &AttentionParams,
    ) -> Tensor<B, 4> {
        let [b, h, t, _] = q.dims();
        let kvh = k.dims()[1];
        let window = params.sliding_window;
        let mask = match self.masks.iter().find(|(w, _)| *w == window) {
            Some((_, m)) => m.clone(),
            None => {
                let m = symmetric_window_mask::<B>([b, kvh, (h / kvh) * t, t], window, &q.device());
                self.masks.push((window, m.clone()));
                m
            }
        };
        attention_masked(q, k, v, mask, params)
    }

    fn advance(&mut self, _t: usize) {
        self.masks.clear();
    }

    fn layout(&mut self, t: usize) -> CacheLayout {
        single_sequence_layout(0, t, t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type B = burn_flex::Flex;

    /// A window of 2 (3 and 2 alike: one token each side) over 4 tokens: each token sees itself
    /// and its direct neighbours, no more; a window of 6 covers 4 tokens whole.
    #[test]
    fn the_window_is_symmetric() {
        let dev = Default::default();
        let m = symmetric_window_mask::<B>([1, 1, 4, 4], Some(2), &dev).expect("the window bites");
        let m3 = symmetric_window_mask::<B>([1, 1, 4, 4], Some(3), &dev).expect("the window bites");
        assert_eq!(m3.into_data(), m.clone().into_data());
        let v: Vec<f32> = m.into_data().to_vec().expect("f32");
        let seen: Vec<Vec<bool>> = v
            .chunks(4)
            .map(|r| r.iter().map(|&x| x == 0.0).collect())
            .collect();
        assert_eq!(
            seen,
            [
                [true, true, false, false],
                [true, true, true, false],
                [false, true, true, true],
                [false, false, true, true],
            ]
        );
        assert!(symmetric_window_mask::<B>([1, 1, 4, 4], Some(4), &dev).is_some());
        assert!(symmetric_window_mask::<B>([1, 1, 4, 4], Some(6), &dev).is_none());
        assert!(symmetric_window_mask::<B>([1, 1, 4, 4], None, &dev).is_none());
    }

    /// Without a window the first token's output mixes every value: it sees the future too.
    #[test]
    fn the_first_token_sees_the_last() {
        let dev = Default::default();
        let q = Tensor::<B, 4>::zeros([1, 1, 3, 2], &dev);
        let k = Tensor::<B, 4>::zeros([1, 1, 3, 2], &dev);
        let v = Tensor::<B, 4>::from_floats([[[[0.0, 0.0], [0.0, 0.0], [3.0, 6.0]]]], &dev);
        let params = AttentionParams {
            scale: 1.0,
            sliding_window: None,
            softcap: None,
        };
        let out = BidirectionalAttention::<B>::new().attend(0, q, k, v, &params);
        let first: Vec<f32> = out
            .slice([0..1, 0..1, 0..1])
            .into_data()
            .to_vec()
            .expect("f32");
        // equal scores: the mean of the three values
        assert!(
            (first[0] - 1.0).abs() < 1e-6 && (first[1] - 2.0).abs() < 1e-6,
            "{first:?}"
        );
    }
}
