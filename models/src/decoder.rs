//! The shape every decoder-only architecture shares, and [`AnyModel`], "whichever model was
//! loaded".
//!
//! A decoder is three stages: the token embedding, a stack of transformer blocks, and the final
//! norm with the vocabulary projection. Each architecture file defines its blocks ([`Blocks`]) and
//! its whole model ([`Decoder`]: the two ends around its blocks); [`decoder_forward`] runs the
//! stages in order. A wrapper can run the stages apart — [`crate::split::Split`] runs the first
//! blocks on another device — without the models knowing.

use std::fmt;
use std::sync::Arc;

use burn::tensor::{Int, Tensor};
use cinder_runtime::InferenceBackend;
use cinder_runtime::attention::AttentionCache;
use cinder_runtime::model::{CausalLm, Logits};

/// A run of consecutive transformer blocks of one model: all of them, or one device's share.
pub trait Blocks<B: InferenceBackend>: fmt::Debug + Send + Sync {
    /// Runs the blocks on `x` `[b, t, d_model]` -> `[b, t, d_model]`. The cache's layer `j` is the
    /// `j`-th block held; positions come from the cache, which this does not advance.
    fn run(&self, x: Tensor<B, 3>, cache: &mut dyn AttentionCache<B>) -> Tensor<B, 3>;

    /// How many blocks this holds.
    fn len(&self) -> usize;

    /// Whether it holds no block.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The absolute index of the first block held.
    fn first_layer(&self) -> usize;

    /// `(kv_heads, head_dim)` of every block.
    fn kv_dims(&self) -> (usize, usize);
}

/// A language model as loaded: one architecture on one device, or a wrapper around one.
pub trait LanguageModel<B: InferenceBackend>: CausalLm<B> + fmt::Debug + Send + Sync {
    /// The architecture's short name (`llama`, `gemma3`).
    fn arch(&self) -> &'static str;

    /// Where its layers run, when they are split between two backends.
    fn placement(&self) -> Option<String> {
        None
    }

    /// The final hidden states `[b, t, d_model]`, after the last norm and without the vocabulary
    /// projection (what decoder embedding models pool), advancing the cache past the tokens;
    /// `None` for a model that cannot give them (one split between two backends).
    fn hidden_states(
        &self,
        _tokens: Tensor<B, 2, Int>,
        _cache: &mut dyn AttentionCache<B>,
    ) -> Option<Tensor<B, 3>> {
        None
    }
}

/// A decoder-only model whose stages can be run one at a time.
pub trait Decoder<B: InferenceBackend>: LanguageModel<B> {
    /// Token ids `[b, t]` -> hidden states `[b, t, d_model]`.
    fn embed(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3>;

    /// The blocks this model holds.
    fn blocks(&self) -> &dyn Blocks<B>;

    /// Final norm and vocabulary projection: `[b, t, d_model]` -> `[b, n, vocab]` for the positions
    /// `logits` asks for.
    fn output(&self, x: Tensor<B, 3>, logits: Logits) -> Tensor<B, 3>;
}

/// Embedding, blocks, head, and the cache advanced past the `t` new tokens: the forward of every
/// [`Decoder`].
pub fn decoder_forward<B: InferenceBackend, M: Decoder<B> + ?Sized>(
    model: &M,
    tokens: Tensor<B, 2, Int>,
    cache: &mut dyn AttentionCache<B>,
    logits: Logits,
) -> Tensor<B, 3> {
    let t = tokens.dims()[1];
    let x = model.embed(tokens);
    let x = model.blocks().run(x, cache);
    cache.advance(t);
    model.output(x, logits)
}

/// Embedding, blocks and `norm` (the final norm, without the vocabulary projection), the cache
/// advanced past the `t` new tokens: [`LanguageModel::hidden_states`] of every [`Decoder`].
pub fn decoder_hidden_states<B: InferenceBackend, M: Decoder<B> + ?Sized>(
    model: &M,
    tokens: Tensor<B, 2, Int>,
    cache: &mut dyn AttentionCache<B>,
    norm: &crate::layers::RmsNorm<B>,
) -> Tensor<B, 3> {
    let t = tokens.dims()[1];
    let x = model.blocks().run(model.embed(tokens), cache);
    cache.advance(t);
    norm.forward(x)
}

/// A loaded language model of any supported architecture and placement; cheap to clone (the
/// weights are shared).
#[derive(Clone)]
pub struct AnyModel<B: InferenceBackend>(Arc<dyn LanguageModel<B>>);

impl<B: InferenceBackend> AnyModel<B> {
    /// Wraps a model.
    pub fn new(model: impl LanguageModel<B> + 'static) -> Self {
        Self(Arc::new(model))
    }

    /// Short architecture name.
    pub fn arch(&self) -> &'static str {
        self.0.arch()
    }

    /// Where the layers run, when they are split between two backends.
    pub fn placement(&self) -> Option<String> {
        self.0.placement()
    }

    /// The final hidden states ([`LanguageModel::hidden_states`]).
    pub fn hidden_states(
        &self,
        tokens: Tensor<B, 2, Int>,
        cache: &mut dyn AttentionCache<B>,
    ) -> Option<Tensor<B, 3>> {
        self.0.hidden_states(tokens, cache)
    }
}

impl<B: InferenceBackend> fmt::Debug for AnyModel<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<B: InferenceBackend> CausalLm<B> for AnyModel<B> {
    fn forward(
        &self,
        tokens: Tensor<B, 2, Int>,
        cache: &mut dyn AttentionCache<B>,
        logits: Logits,
    ) -> Tensor<B, 3> {
        self.0.forward(tokens, cache, logits)
    }

    fn n_layers(&self) -> usize {
        self.0.n_layers()
    }

    fn kv_bytes_per_token(&self) -> usize {
        self.0.kv_bytes_per_token()
    }

    fn kv_bytes_per_token_as(&self, dtype: cinder_runtime::kv::KvType) -> usize {
        self.0.kv_bytes_per_token_as(dtype)
    }

    fn prepare_cache(&self, cache: &mut dyn AttentionCache<B>) -> cinder_runtime::Result<()> {
        self.0.prepare_cache(cache)
    }

    fn kv_dims(&self) -> (usize, usize) {
        self.0.kv_dims()
    }

    fn vocab_size(&self) -> usize {
        self.0.vocab_size()
    }

    fn context_length(&self) -> usize {
        self.0.context_length()
    }

    fn device(&self) -> B::Device {
        self.0.device()
    }
}
