//! [`PagedKvCache`]: every layer's K/V store, allocated once from a budget, behind the model-facing
//! [`AttentionCache`] interface. The engine sets the ragged batch of each forward
//! ([`PagedKvCache::set_batch`]); the models call `attend` as they would on a contiguous cache.

use burn::tensor::Tensor;
use cinder_backends::InferenceBackend;
use cinder_backends::attention::{KvShape, PagedBatch};

use crate::attention::{AttentionCache, AttentionParams};
use crate::error::{Result, RuntimeError};

/// How much memory the KV cache may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvBudget {
    /// At most this many bytes (K and V of every layer, f32).
    Bytes(u64),
    /// Room for this many tokens (summed over all sequences).
    Tokens(usize),
}

impl KvBudget {
    /// Blocks of `block_size` tokens that fit, for a model of `layers` layers with `kv_heads` ×
    /// `head_dim` K/V per token.
    pub fn blocks(
        self,
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        block_size: usize,
    ) -> usize {
        match self {
            KvBudget::Tokens(t) => t.div_ceil(block_size),
            KvBudget::Bytes(b) => {
                let per_block = (layers * 2 * kv_heads * head_dim * 4 * block_size) as u64;
                (b / per_block.max(1)) as usize
            }
        }
    }
}

/// All layers' paged K/V for one model.
#[derive(Debug)]
pub struct PagedKvCache<B: InferenceBackend> {
    layers: Vec<B::KvLayer>,
    shape: KvShape,
    batch: PagedBatch,
}

impl<B: InferenceBackend> PagedKvCache<B> {
    /// Allocates `blocks` blocks of `block_size` tokens for `n_layers` layers, all at once; it never
    /// grows.
    pub fn new(
        n_layers: usize,
        kv_heads: usize,
        head_dim: usize,
        blocks: usize,
        block_size: usize,
        device: &B::Device,
    ) -> Result<Self> {
        let shape = KvShape {
            blocks,
            block_size,
            kv_heads,
            head_dim,
        };
        let layers = (0..n_layers)
            .map(|_| B::kv_alloc(shape, device))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| RuntimeError::KvCache(e.to_string()))?;
        Ok(Self {
            layers,
            shape,
            batch: PagedBatch {
                block_size,
                seqs: Vec::new(),
            },
        })
    }

    /// Bytes held (K and V of every layer).
    pub fn bytes(&self) -> usize {
        self.shape.bytes() * self.layers.len()
    }

    /// Blocks per layer.
    pub fn num_blocks(&self) -> usize {
        self.shape.blocks
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.shape.block_size
    }

    /// The layout of the next forward.
    pub fn set_batch(&mut self, batch: PagedBatch) {
        self.batch = batch;
    }

    /// Copies blocks (copy-on-write) in every layer.
    pub fn copy_blocks(&mut self, copies: &[(u32, u32)]) {
        for kv in &mut self.layers {
            for &(s, d) in copies {
                B::kv_copy_block(kv, s, d);
            }
        }
    }
}

impl<B: InferenceBackend> AttentionCache<B> for PagedKvCache<B> {
    fn positions(&self, t: usize) -> Vec<usize> {
        let p = self.batch.positions();
        debug_assert_eq!(
            p.len(),
            t,
            "forward of {t} tokens on a {}-row layout",
            p.len()
        );
        p
    }

    fn attend(
        &mut self,
        layer: usize,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        params: &AttentionParams,
    ) -> Tensor<B, 4> {
        B::paged_attention(&mut self.layers[layer], q, k, v, &self.batch, params)
    }

    fn advance(&mut self, _t: usize) {
        // Positions live in the block manager's tables; the engine advances them.
    }
}
