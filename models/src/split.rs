//! Layer offload: one model split across two backends (`--gpu-layers N`), as a wrapper around the
//! models.
//!
//! The first `N` transformer blocks run on an accelerator backend `A` (wgpu, CUDA); the token
//! embedding, the remaining blocks, the final norm and the output head run on a CPU backend `C`
//! (llama.cpp's `-ngl` split: the embedding lookup stays on the CPU). Each side is the same model
//! code, loaded with only its share of the weights: a [`Blocks`] of blocks `0..N` on `A`, a
//! [`Decoder`] of blocks `N..` with the ends on `C`. A forward crosses the device boundary twice,
//! with the hidden states `[batch, t, d_model]` as host data: `C -> A` after the embedding,
//! `A -> C` after block `N - 1`.
//!
//! [`Split`] owns the accelerator's K/V store for its blocks. It is paged, laid out as the caller's
//! cache describes its next forward ([`CacheLayout`]: the same block tables and block count, the
//! same copy-on-write copies repeated; a contiguous cache describes itself as one sequence over
//! blocks in order), so the offloaded blocks run the one paged attention call whatever cache the
//! caller passes. The store serves one cache at a time: a cache of another shape replaces it, at
//! the start of its sequences.

use std::sync::{Mutex, PoisonError};

use burn::tensor::{Int, Tensor};
use cinder_runtime::InferenceBackend;
use cinder_runtime::attention::{AttentionCache, CacheLayout};
use cinder_runtime::kv::PagedKvCache;
use cinder_runtime::model::{CausalLm, Logits};

use crate::decoder::{Blocks, Decoder, LanguageModel};
use crate::error::{ModelError, Result};

/// A model whose first blocks run on `A` and the rest, with the ends, on `C`.
pub struct Split<A: InferenceBackend, C: InferenceBackend> {
    /// blocks `0..N` on the accelerator
    front: Box<dyn Blocks<A>>,
    front_device: A::Device,
    /// the ends and blocks `N..` on the CPU backend
    back: Box<dyn Decoder<C>>,
    /// the front blocks' K/V, laid out like the caller's cache (allocated on first use)
    kv: Mutex<Option<PagedKvCache<A>>>,
    /// the two backends' names, for logs
    names: (&'static str, &'static str),
}

impl<A: InferenceBackend, C: InferenceBackend> std::fmt::Debug for Split<A, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Split")
            .field("front", &self.front)
            .field("back", &self.back)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl<A: InferenceBackend, C: InferenceBackend> Split<A, C> {
    /// Joins the accelerator's blocks `0..N` and the CPU's decoder holding blocks `N..` with the
    /// ends, of the same model. `names` are the two backends' names, for logs.
    pub fn new(
        front: Box<dyn Blocks<A>>,
        front_device: A::Device,
        back: Box<dyn Decoder<C>>,
        names: (&'static str, &'static str),
    ) -> Result<Self> {
        let held = back.blocks();
        if front.first_layer() != 0
            || front.len() != held.first_layer()
            || front.kv_dims() != held.kv_dims()
        {
            return Err(ModelError::Config {
                arch: back.arch().into(),
                reason: format!(
                    "the two shares of a split model do not fit: blocks {}..{} {:?} and {}..{} {:?}",
                    front.first_layer(),
                    front.first_layer() + front.len(),
                    front.kv_dims(),
                    held.first_layer(),
                    held.first_layer() + held.len(),
                    held.kv_dims()
                ),
            });
        }
        Ok(Self {
            front,
            front_device,
            back,
            kv: Mutex::new(None),
            names,
        })
    }

    /// The accelerator store, set up for the forward `layout` describes: allocated (or replaced
    /// by one of the layout's shape, at the start of its sequences), the layout's block copies
    /// repeated, its batch set.
    fn front_store<'s>(
        &self,
        kv: &'s mut Option<PagedKvCache<A>>,
        layout: CacheLayout,
    ) -> cinder_runtime::Result<&'s mut PagedKvCache<A>> {
        let fits = |s: &PagedKvCache<A>| {
            s.block_size() == layout.block_size && s.num_blocks() >= layout.num_blocks
        };
        if !kv.as_ref().is_some_and(fits) {
            if kv.is_some() && layout.batch.seqs.iter().any(|s| s.past > 0) {
                return Err(cinder_runtime::RuntimeError::KvCache(format!(
                    "the offloaded layers' store ({} blocks) cannot take a cache of {} blocks of {} \
                     tokens in the middle of its sequences",
                    kv.as_ref().map_or(0, |s| s.num_blocks()),
                    layout.num_blocks,
                    layout.block_size
                )));
            }
            *kv = None;
            let (kvh, hd) = self.front.kv_dims();
            let store = PagedKvCache::<A>::new(
                self.front.len(),
                kvh,
                hd,
                layout.num_blocks,
                layout.block_size,
                &self.front_device,
            )?;
            tracing::info!(
                layers = self.front.len(),
                blocks = layout.num_blocks,
                mib = store.bytes() >> 20,
                backend = self.names.0,
                "offloaded layers' KV cache allocated"
            );
            *kv = Some(store);
        }
        let Some(store) = kv.as_mut() else {
            unreachable!("the store was allocated just above");
        };
        store.copy_blocks(&layout.copies);
        store.set_batch(layout.batch);
        Ok(store)
    }
}

impl<A: InferenceBackend, C: InferenceBackend> CausalLm<C> for Split<A, C> {
    fn forward(
        &self,
        tokens: Tensor<C, 2, Int>,
        cache: &mut dyn AttentionCache<C>,
        logits: Logits,
    ) -> Tensor<C, 3> {
        let t = tokens.dims()[1];
        let layout = cache.layout(t);
        // [b, t, d] on C, then on A for the front blocks, then back.
        let x = self.back.embed(tokens);
        let xa = Tensor::<A, 3>::from_data(x.into_data(), &self.front_device);
        let ya = {
            let mut kv = self.kv.lock().unwrap_or_else(PoisonError::into_inner);
            let store = match self.front_store(&mut kv, layout) {
                Ok(s) => s,
                // Only reachable when the caller skipped `prepare_cache` and the device cannot
                // hold the store; the forward has no error channel.
                Err(e) => panic!("layer offload: {e}"),
            };
            self.front.run(xa, store)
        };
        let x = Tensor::<C, 3>::from_data(ya.into_data(), &self.back.device());
        let x = self.back.blocks().run(x, cache);
        cache.advance(t);
        self.back.output(x, logits)
    }

    fn n_layers(&self) -> usize {
        self.back.blocks().len()
    }

    fn kv_bytes_per_token(&self) -> usize {
        self.kv_bytes_per_token_as(cinder_runtime::kv::KvType::F16)
    }

    /// The CPU layers' rows as `dtype`; the accelerator's own store stays f16.
    fn kv_bytes_per_token_as(&self, dtype: cinder_runtime::kv::KvType) -> usize {
        let (kvh, hd) = self.front.kv_dims();
        self.back.kv_bytes_per_token_as(dtype)
            + self.front.len() * 2 * kvh * hd * A::KV_BYTES_PER_VALUE
    }

    fn prepare_cache(&self, cache: &mut dyn AttentionCache<C>) -> cinder_runtime::Result<()> {
        let layout = cache.layout(0);
        let mut kv = self.kv.lock().unwrap_or_else(PoisonError::into_inner);
        self.front_store(&mut kv, layout).map(|_| ())
    }

    fn kv_dims(&self) -> (usize, usize) {
        self.back.kv_dims()
    }

    fn vocab_size(&self) -> usize {
        self.back.vocab_size()
    }

    fn context_length(&self) -> usize {
        self.back.context_length()
    }

    fn device(&self) -> C::Device {
        self.back.device()
    }
}

impl<A: InferenceBackend, C: InferenceBackend> LanguageModel<C> for Split<A, C> {
    fn arch(&self) -> &'static str {
        self.back.arch()
    }

    fn placement(&self) -> Option<String> {
        let n = self.front.len();
        Some(format!(
            "layers 0..{n} on {}, {n}..{} and embedding/head on {}",
            self.names.0,
            n + self.back.blocks().len(),
            self.names.1
        ))
    }
}
