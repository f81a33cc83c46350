//! Layer offload: one model split across two backends (`--gpu-layers N`).
//!
//! The first `N` transformer blocks run on an accelerator backend `A` (wgpu, CUDA); the token
//! embedding, the remaining blocks, the final norm and the output head run on a CPU backend `C`
//! (llama.cpp's `-ngl` split: the embedding lookup stays on the CPU). Each side is the same model code,
//! loaded with only its share of the weights ([`ModelPart`]). A forward crosses the device boundary
//! twice, with the hidden states `[batch, t, d_model]` as host data: `C -> A` after the embedding,
//! `A -> C` after block `N - 1`.
//!
//! The offloaded blocks keep their K/V in a store of their own on `A`, mirrored from the cache the
//! caller passes: for a paged cache the same block tables, block count and copy-on-write copies
//! ([`PagedLayout`]), for a contiguous one a contiguous store. That store lives in the caller's cache
//! ([`AttentionCache::offload_slot`]), so every cache has its own and drops it with itself.

use std::ops::Range;
use std::sync::Arc;

use burn::tensor::{Int, Tensor};
use cinder_runtime::InferenceBackend;
use cinder_runtime::attention::{AttentionCache, ContiguousKvCache, PagedLayout};
use cinder_runtime::kv::PagedKvCache;
use cinder_runtime::model::{CausalLm, Logits};

use crate::any::AnyModel;
use crate::error::{ModelError, Result};

/// The share of a model one device holds: blocks `layers` (clamped to the model's depth) and, if
/// `ends`, the token embedding, final norm and output head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPart {
    /// transformer blocks, by absolute index
    pub layers: Range<usize>,
    /// embedding, final norm and head
    pub ends: bool,
}

impl ModelPart {
    /// Everything: a model on one device.
    pub fn whole() -> Self {
        Self {
            layers: 0..usize::MAX,
            ends: true,
        }
    }

    /// The accelerator's share when `n` layers are offloaded: blocks `0..n`, no ends.
    pub fn offloaded(n: usize) -> Self {
        Self {
            layers: 0..n,
            ends: false,
        }
    }

    /// The CPU's share when `n` layers are offloaded: the ends and blocks `n..`.
    pub fn host(n: usize) -> Self {
        Self {
            layers: n..usize::MAX,
            ends: true,
        }
    }

    /// The blocks of a model with `n_layers` layers this part holds; refuses a part that holds
    /// nothing.
    pub fn resolve(&self, arch: &str, n_layers: usize) -> Result<Range<usize>> {
        let r = self.layers.start.min(n_layers)..self.layers.end.min(n_layers);
        if r.is_empty() && !self.ends {
            return Err(ModelError::Config {
                arch: arch.into(),
                reason: format!(
                    "a model part with blocks {:?} of {n_layers} and no embedding holds nothing",
                    self.layers
                ),
            });
        }
        Ok(r)
    }
}

/// A model, or one device's share of it, run a stage at a time. [`CausalLm::forward`] is
/// [`staged_forward`] over these.
pub trait Staged<B: InferenceBackend> {
    /// Token ids `[b, t]` -> hidden states `[b, t, d_model]` (the part holding the ends).
    fn embed(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3>;

    /// Runs the blocks this part holds on `x` `[b, t, d_model]`. The cache's layer `j` is the
    /// `j`-th block held; positions come from the cache. Does not advance it.
    fn run_blocks(&self, x: Tensor<B, 3>, cache: &mut dyn AttentionCache<B>) -> Tensor<B, 3>;

    /// Final norm and head: `[b, t, d_model]` -> `[b, n, vocab]` (the part holding the ends).
    fn output(&self, x: Tensor<B, 3>, logits: Logits) -> Tensor<B, 3>;
}

/// Embedding, blocks, head: the forward of a part that holds all three.
pub fn staged_forward<B: InferenceBackend, M: Staged<B> + ?Sized>(
    model: &M,
    tokens: Tensor<B, 2, Int>,
    cache: &mut dyn AttentionCache<B>,
    logits: Logits,
) -> Tensor<B, 3> {
    let t = tokens.dims()[1];
    let x = model.embed(tokens);
    let x = model.run_blocks(x, cache);
    cache.advance(t);
    model.output(x, logits)
}

/// The message of the panic when a part without the ends is asked for them (a bug in the caller:
/// [`Split`] never does).
pub(crate) const NO_ENDS: &str =
    "this model part holds no embedding or head (the offloaded share of a split model)";

/// A split model as the CPU side sees it (what [`AnyModel::Offloaded`] holds).
pub trait OffloadedModel<C: InferenceBackend>: CausalLm<C> + std::fmt::Debug + Send + Sync {
    /// The architecture's short name.
    fn arch(&self) -> &'static str;
    /// Where the layers run, e.g. `"layers 0..10 on wgpu, 10..30 + embedding/head on flex"`.
    fn placement(&self) -> String;
}

/// The offloaded blocks' K/V on the accelerator, mirroring the caller's cache.
enum FrontKv<A: InferenceBackend> {
    Paged(PagedKvCache<A>),
    Contiguous(ContiguousKvCache<A>),
}

/// A model whose first blocks run on `A` and the rest, with the ends, on `C`.
#[derive(Debug, Clone)]
pub struct Split<A: InferenceBackend, C: InferenceBackend> {
    front: AnyModel<A>,
    back: AnyModel<C>,
    names: (&'static str, &'static str),
}

impl<A: InferenceBackend, C: InferenceBackend> Split<A, C> {
    /// Joins an accelerator share (`ModelPart::offloaded(n)`) and a CPU share (`ModelPart::host(n)`)
    /// of the same model. `names` are the two backends' names, for logs.
    pub fn new(
        front: AnyModel<A>,
        back: AnyModel<C>,
        names: (&'static str, &'static str),
    ) -> Result<Self> {
        if matches!(front, AnyModel::Offloaded(_)) || matches!(back, AnyModel::Offloaded(_)) {
            return Err(ModelError::Config {
                arch: back.arch().into(),
                reason: "a share of a split model cannot itself be split".into(),
            });
        }
        if front.arch() != back.arch() || front.kv_dims() != back.kv_dims() {
            return Err(ModelError::Config {
                arch: back.arch().into(),
                reason: format!(
                    "the two shares of a split model differ ({} {:?} vs {} {:?})",
                    front.arch(),
                    front.kv_dims(),
                    back.arch(),
                    back.kv_dims()
                ),
            });
        }
        Ok(Self { front, back, names })
    }

    /// A fresh accelerator store matching the caller's cache.
    fn new_front(&self, layout: Option<&PagedLayout>) -> cinder_runtime::Result<FrontKv<A>> {
        let n = self.front.n_layers();
        Ok(match layout {
            Some(l) => {
                let (kvh, hd) = self.front.kv_dims();
                let kv = PagedKvCache::<A>::new(
                    n,
                    kvh,
                    hd,
                    l.num_blocks,
                    l.block_size,
                    &self.front.device(),
                )?;
                tracing::info!(
                    layers = n,
                    blocks = l.num_blocks,
                    mib = kv.bytes() >> 20,
                    backend = self.names.0,
                    "offloaded layers' KV cache allocated"
                );
                FrontKv::Paged(kv)
            }
            None => FrontKv::Contiguous(ContiguousKvCache::new(n, self.back.context_length())),
        })
    }

    /// The accelerator store kept in `cache`, set up for the next forward of `t` tokens (created on
    /// first use; the layout's block copies repeated).
    fn front_kv(
        &self,
        cache: &mut dyn AttentionCache<C>,
        t: usize,
    ) -> cinder_runtime::Result<Box<FrontKv<A>>> {
        let layout = cache.paged_layout(t);
        let kept = cache
            .offload_slot()
            .take()
            .and_then(|b| b.downcast::<FrontKv<A>>().ok());
        let fits = |f: &FrontKv<A>| match (f, &layout) {
            (FrontKv::Paged(p), Some(l)) => {
                p.num_blocks() == l.num_blocks && p.block_size() == l.block_size
            }
            (FrontKv::Contiguous(_), None) => true,
            _ => false,
        };
        let mut front = match kept {
            Some(f) if fits(&f) => f,
            _ => Box::new(self.new_front(layout.as_ref())?),
        };
        if let (FrontKv::Paged(p), Some(l)) = (front.as_mut(), layout) {
            p.copy_blocks(&l.copies);
            p.set_batch(l.batch);
        }
        Ok(front)
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
        // [b, t, d] on C, then on A for the offloaded blocks, then back.
        let x = self.back.embed(tokens);
        let mut front = match self.front_kv(cache, t) {
            Ok(f) => f,
            // Only reachable when the caller skipped `prepare_cache` and the device cannot hold
            // the store; the forward has no error channel.
            Err(e) => panic!("cannot allocate the offloaded layers' KV cache: {e}"),
        };
        let xa = Tensor::<A, 3>::from_data(x.into_data(), &self.front.device());
        let xa = match front.as_mut() {
            FrontKv::Paged(kv) => self.front.run_blocks(xa, kv),
            FrontKv::Contiguous(kv) => {
                let y = self.front.run_blocks(xa, kv);
                kv.advance(t);
                y
            }
        };
        *cache.offload_slot() = Some(front);
        let x = Tensor::<C, 3>::from_data(xa.into_data(), &self.back.device());
        let x = self.back.run_blocks(x, cache);
        cache.advance(t);
        self.back.output(x, logits)
    }

    fn n_layers(&self) -> usize {
        self.back.n_layers()
    }

    fn offloaded_layers(&self) -> usize {
        self.front.n_layers()
    }

    fn offloaded_kv_bytes_per_token(&self) -> usize {
        let (kvh, hd) = self.front.kv_dims();
        self.front.n_layers() * 2 * kvh * hd * A::KV_BYTES_PER_VALUE
    }

    fn prepare_cache(&self, cache: &mut dyn AttentionCache<C>) -> cinder_runtime::Result<()> {
        let front = self.front_kv(cache, 0)?;
        *cache.offload_slot() = Some(front);
        Ok(())
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

impl<A: InferenceBackend, C: InferenceBackend> OffloadedModel<C> for Split<A, C> {
    fn arch(&self) -> &'static str {
        self.back.arch()
    }

    fn placement(&self) -> String {
        let n = self.front.n_layers();
        format!(
            "layers 0..{n} on {}, {n}..{} and embedding/head on {}",
            self.names.0,
            n + self.back.n_layers(),
            self.names.1
        )
    }
}

impl<A: InferenceBackend, C: InferenceBackend> From<Split<A, C>> for AnyModel<C> {
    fn from(s: Split<A, C>) -> Self {
        AnyModel::Offloaded(Arc::new(s))
    }
}
