//! [`PagedKvCache`]: every layer's K/V store, allocated once from a budget, behind the model-facing
//! [`AttentionCache`] interface. The engine sets the ragged batch of each forward
//! ([`PagedKvCache::set_batch`]); the models call `attend` as they would on a contiguous cache.

use burn::tensor::Tensor;
use cinder_backends::InferenceBackend;
use cinder_backends::attention::{KvShape, KvType, PagedBatch, SeqSlice};

use crate::attention::{AttentionCache, AttentionParams, CacheLayout};
use crate::error::{Result, RuntimeError};

/// How much memory the KV cache may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvBudget {
    /// At most this many bytes (K and V of every layer, as the backend stores them: f16 in the
    /// CPU kernels' store, f32 in the generic one; `KvOps::KV_BYTES_PER_VALUE`).
    Bytes(u64),
    /// Room for this many tokens (summed over all sequences).
    Tokens(usize),
}

impl KvBudget {
    /// Blocks of `block_size` tokens that fit, at `bytes_per_token` (K and V of every layer).
    pub fn blocks(self, bytes_per_token: u64, block_size: usize) -> usize {
        match self {
            KvBudget::Tokens(t) => t.div_ceil(block_size),
            KvBudget::Bytes(b) => {
                let per_block = bytes_per_token * block_size as u64;
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
    /// `batch` as the backend's attention reads it, made once per forward (`None` until asked).
    step: Option<B::Step>,
    device: B::Device,
    /// Block copies made since the last forward ended ([`AttentionCache::layout`] hands them out).
    copy_log: Vec<(u32, u32)>,
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
        Self::with_type(
            n_layers,
            kv_heads,
            head_dim,
            blocks,
            block_size,
            KvType::F16,
            device,
        )
    }

    /// [`PagedKvCache::new`] storing its rows as `dtype` (a quantized type on the CPU backends).
    pub fn with_type(
        n_layers: usize,
        kv_heads: usize,
        head_dim: usize,
        blocks: usize,
        block_size: usize,
        dtype: KvType,
        device: &B::Device,
    ) -> Result<Self> {
        let shape = KvShape {
            blocks,
            block_size,
            kv_heads,
            head_dim,
            dtype,
        };
        // The whole cache against the device's free memory first, so that a budget it cannot hold
        // is refused with the full size (each layer's allocation checks again as memory fills).
        cinder_backends::memory::check_fits(
            shape.bytes(B::KV_BYTES_PER_VALUE) * n_layers,
            B::device_memory(device),
            B::KIND,
        )
        .map_err(|e| RuntimeError::KvCache(format!("{n_layers} layers: {e}")))?;
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
            step: None,
            device: device.clone(),
            copy_log: Vec::new(),
        })
    }

    /// Bytes held (K and V of every layer).
    pub fn bytes(&self) -> usize {
        self.shape.bytes(B::KV_BYTES_PER_VALUE) * self.layers.len()
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
        self.step = None;
    }

    /// Copies blocks (copy-on-write) in every layer.
    pub fn copy_blocks(&mut self, copies: &[(u32, u32)]) {
        for kv in &mut self.layers {
            for &(s, d) in copies {
                B::kv_copy_block(kv, s, d);
            }
        }
        self.copy_log.extend_from_slice(copies);
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
        let step = self
            .step
            .get_or_insert_with(|| B::kv_step(&self.batch, &self.device));
        B::paged_attention(&mut self.layers[layer], q, k, v, &self.batch, step, params)
    }

    fn advance(&mut self, _t: usize) {
        // Positions live in the block manager's tables; the engine advances them. The forward is
        // over: its block copies were made in every layer here (and handed to whoever asked).
        self.copy_log.clear();
    }

    fn layout(&mut self, _t: usize) -> CacheLayout {
        CacheLayout {
            batch: self.batch.clone(),
            num_blocks: self.shape.blocks,
            block_size: self.shape.block_size,
            copies: std::mem::take(&mut self.copy_log),
        }
    }
}

/// A paged cache holding one sequence (blocks `0..n` in order): the engine's attention kernel behind
/// the single-sequence interface that perplexity and the conformance tests drive directly.
#[derive(Debug)]
pub struct SeqPagedCache<B: InferenceBackend> {
    inner: PagedKvCache<B>,
    past: usize,
}

impl<B: InferenceBackend> SeqPagedCache<B> {
    /// Room for `capacity` tokens of a model with `n_layers` layers of `kv_heads × head_dim`.
    pub fn new(
        n_layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        device: &B::Device,
    ) -> Result<Self> {
        Self::with_type(n_layers, kv_heads, head_dim, capacity, KvType::F16, device)
    }

    /// [`SeqPagedCache::new`] storing its rows as `dtype`.
    pub fn with_type(
        n_layers: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        dtype: KvType,
        device: &B::Device,
    ) -> Result<Self> {
        const BS: usize = 16;
        let blocks = capacity.div_ceil(BS).max(1);
        Ok(Self {
            inner: PagedKvCache::with_type(
                n_layers, kv_heads, head_dim, blocks, BS, dtype, device,
            )?,
            past: 0,
        })
    }
}

impl<B: InferenceBackend> SeqPagedCache<B> {
    /// Lays the next `t` tokens out after the past ones, over blocks `0..n` in order.
    fn set_layout(&mut self, t: usize) {
        let blocks = (0..self.inner.num_blocks() as u32).collect();
        self.inner.set_batch(PagedBatch {
            block_size: self.inner.block_size(),
            seqs: vec![SeqSlice {
                q_start: 0,
                q_len: t,
                past: self.past,
                blocks,
            }],
        });
    }
}

impl<B: InferenceBackend> AttentionCache<B> for SeqPagedCache<B> {
    fn positions(&self, t: usize) -> Vec<usize> {
        (self.past..self.past + t).collect()
    }

    fn attend(
        &mut self,
        layer: usize,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        params: &AttentionParams,
    ) -> Tensor<B, 4> {
        let t = q.dims()[2];
        if layer == 0 || self.inner.batch.rows() != t {
            self.set_layout(t);
        }
        self.inner.attend(layer, q, k, v, params)
    }

    fn advance(&mut self, t: usize) {
        self.past += t;
    }

    fn layout(&mut self, t: usize) -> CacheLayout {
        self.set_layout(t);
        self.inner.layout(t)
    }
}
