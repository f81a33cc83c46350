//! The attention op and the KV cache behind it.
//!
//! Models hand each layer's freshly projected (and RoPE'd) Q, K, V to an [`AttentionCache`]; the cache
//! stores K/V however it likes and returns the attention output: [`ContiguousKvCache`] for one sequence
//! (perplexity, tests), [`crate::kv::PagedKvCache`] for a ragged batch of many sequences (the engine).
//! A model never sees how the cache is laid out.

#[cfg(test)]
use burn::tensor::TensorData;
use burn::tensor::{Tensor, backend::Backend};

pub use cinder_backends::attention::{
    AttentionParams, MaskKey, PagedBatch, SeqSlice, attention, attention_masked, causal_mask,
    symmetric_window_mask,
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

/// Attention over whole sequences with every token seeing every other: a decoder stack run as an
/// encoder (EmbeddingGemma). A forward holds one sequence, or several packed back to back
/// ([`BidirectionalAttention::packed`]: each at positions `0..len`, attending within itself only).
/// A sliding window becomes symmetric: a window of `w` covers `w / 2` tokens on either side
/// (`|i - j| ≤ w / 2`), as llama.cpp's symmetric window does and as Hugging Face's Gemma 3 does
/// with `use_bidirectional_attention` (it sets its exclusive window to `w / 2 + 1`). A layer
/// without a window sees its whole sequence. Nothing is stored between forwards. The op is the
/// backend's [`EncoderOps::encoder_attention_windowed`](cinder_backends::EncoderOps).
#[derive(Debug, Default)]
pub struct BidirectionalAttention {
    /// The packed sequences' lengths; empty: one sequence, the whole forward.
    lengths: Vec<usize>,
}

impl BidirectionalAttention {
    /// One sequence per forward.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sequences of `lengths` tokens packed back to back in the next forward.
    pub fn packed(lengths: Vec<usize>) -> Self {
        Self { lengths }
    }

    fn lengths(&self, t: usize) -> Vec<usize> {
        if self.lengths.is_empty() {
            vec![t]
        } else {
            self.lengths.clone()
        }
    }
}

impl<B: crate::InferenceBackend> AttentionCache<B> for BidirectionalAttention {
    fn positions(&self, t: usize) -> Vec<usize> {
        self.lengths(t).into_iter().flat_map(|len| 0..len).collect()
    }

    fn attend(
        &mut self,
        _layer: usize,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        params: &AttentionParams,
    ) -> Tensor<B, 4> {
        let [b, h, t, hd] = q.dims();
        let kvh = k.dims()[1];
        assert_eq!(
            b, 1,
            "bidirectional attention packs its sequences on the time axis"
        );
        // [1, heads, t, hd] -> [t, heads·hd]: the projections' own layout (the model's head split
        // is a view, so these are views too)
        let rows = |x: Tensor<B, 4>, heads: usize| x.swap_dims(1, 2).reshape([t, heads * hd]);
        let p = cinder_backends::EncoderAttention {
            heads: h,
            kv_heads: kvh,
            scale: params.scale,
            window: params.sliding_window,
        };
        assert!(
            params.softcap.is_none(),
            "no soft-capping in bidirectional attention"
        );
        B::encoder_attention_windowed(rows(q, h), rows(k, kvh), rows(v, kvh), &self.lengths(t), &p)
            .reshape([1, t, h, hd])
            .swap_dims(1, 2)
    }

    fn advance(&mut self, _t: usize) {}

    fn layout(&mut self, t: usize) -> CacheLayout {
        single_sequence_layout(0, t, t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type B = cinder_backends::types::Flex;

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
        let out =
            AttentionCache::<B>::attend(&mut BidirectionalAttention::new(), 0, q, k, v, &params);
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

    /// Two sequences packed in one forward give what each gives alone, with positions restarting.
    #[test]
    fn packed_sequences_attend_within_themselves() {
        let dev = Default::default();
        let vals = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * 37 + seed * 11) % 17) as f32 / 8.0 - 1.0)
                .collect()
        };
        // [1, heads, t, hd] as the model passes them: a view of [1, t, heads, hd]
        let t4 = |v: Vec<f32>, t: usize, h: usize| {
            Tensor::<B, 4>::from_data(TensorData::new(v, [1, t, h, 4]), &dev).swap_dims(1, 2)
        };
        let params = AttentionParams {
            scale: 0.5,
            sliding_window: Some(2),
            softcap: None,
        };
        let (q, k, v) = (vals(5 * 2 * 4, 1), vals(5 * 4, 2), vals(5 * 4, 3));
        let mut packed = BidirectionalAttention::packed(vec![3, 2]);
        assert_eq!(AttentionCache::<B>::positions(&packed, 5), [0, 1, 2, 0, 1]);
        let all = AttentionCache::<B>::attend(
            &mut packed,
            0,
            t4(q.clone(), 5, 2),
            t4(k.clone(), 5, 1),
            t4(v.clone(), 5, 1),
            &params,
        );
        for (start, len) in [(0, 3), (3, 2)] {
            let cut = |x: &[f32], w: usize| x[start * w..(start + len) * w].to_vec();
            let alone = AttentionCache::<B>::attend(
                &mut BidirectionalAttention::new(),
                0,
                t4(cut(&q, 8), len, 2),
                t4(cut(&k, 4), len, 1),
                t4(cut(&v, 4), len, 1),
                &params,
            );
            let part = all.clone().slice([0..1, 0..2, start..start + len]);
            assert_eq!(part.into_data(), alone.into_data(), "sequence at {start}");
        }
    }
}
