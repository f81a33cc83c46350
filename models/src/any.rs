//! One type for "whichever architecture the file holds", so callers stay generic over the backend only.

use std::sync::Arc;

use burn::tensor::{Int, Tensor};
use cinder_runtime::InferenceBackend;
use cinder_runtime::attention::AttentionCache;
use cinder_runtime::model::{CausalLm, Logits};

use crate::gemma3::Gemma3;
use crate::llama::Llama;
use crate::split::{NO_ENDS, OffloadedModel, Staged};

/// A loaded language model of any supported architecture.
#[derive(Debug, Clone)]
pub enum AnyModel<B: InferenceBackend> {
    /// Llama, SmolLM, Mistral, Qwen2
    Llama(Llama<B>),
    /// Gemma 3
    Gemma3(Gemma3<B>),
    /// A model whose first layers run on an accelerator backend ([`crate::split::Split`]); `B` is
    /// its CPU side.
    Offloaded(Arc<dyn OffloadedModel<B>>),
}

impl<B: InferenceBackend> AnyModel<B> {
    /// Short architecture name.
    pub fn arch(&self) -> &'static str {
        match self {
            AnyModel::Llama(_) => "llama",
            AnyModel::Gemma3(_) => "gemma3",
            AnyModel::Offloaded(m) => m.arch(),
        }
    }

    /// Where the layers run, when they are split between two backends.
    pub fn placement(&self) -> Option<String> {
        match self {
            AnyModel::Offloaded(m) => Some(m.placement()),
            _ => None,
        }
    }

    fn inner(&self) -> &dyn CausalLm<B> {
        match self {
            AnyModel::Llama(m) => m,
            AnyModel::Gemma3(m) => m,
            AnyModel::Offloaded(m) => m.as_ref(),
        }
    }

    fn staged(&self) -> &dyn Staged<B> {
        match self {
            AnyModel::Llama(m) => m,
            AnyModel::Gemma3(m) => m,
            AnyModel::Offloaded(_) => panic!("{NO_ENDS}: a split model is not split again"),
        }
    }
}

impl<B: InferenceBackend> Staged<B> for AnyModel<B> {
    fn embed(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        self.staged().embed(tokens)
    }

    fn run_blocks(&self, x: Tensor<B, 3>, cache: &mut dyn AttentionCache<B>) -> Tensor<B, 3> {
        self.staged().run_blocks(x, cache)
    }

    fn output(&self, x: Tensor<B, 3>, logits: Logits) -> Tensor<B, 3> {
        self.staged().output(x, logits)
    }
}

impl<B: InferenceBackend> CausalLm<B> for AnyModel<B> {
    fn forward(
        &self,
        tokens: Tensor<B, 2, Int>,
        cache: &mut dyn AttentionCache<B>,
        logits: Logits,
    ) -> Tensor<B, 3> {
        self.inner().forward(tokens, cache, logits)
    }

    fn n_layers(&self) -> usize {
        self.inner().n_layers()
    }

    fn offloaded_layers(&self) -> usize {
        self.inner().offloaded_layers()
    }

    fn offloaded_kv_bytes_per_token(&self) -> usize {
        self.inner().offloaded_kv_bytes_per_token()
    }

    fn prepare_cache(&self, cache: &mut dyn AttentionCache<B>) -> cinder_runtime::Result<()> {
        self.inner().prepare_cache(cache)
    }

    fn kv_dims(&self) -> (usize, usize) {
        self.inner().kv_dims()
    }

    fn vocab_size(&self) -> usize {
        self.inner().vocab_size()
    }

    fn context_length(&self) -> usize {
        self.inner().context_length()
    }

    fn device(&self) -> B::Device {
        self.inner().device()
    }
}
