//! One type for "whichever architecture the file holds", so callers stay generic over the backend only.

use burn::tensor::{Int, Tensor};
use cinder_runtime::InferenceBackend;
use cinder_runtime::attention::AttentionCache;
use cinder_runtime::model::{CausalLm, Logits};

use crate::gemma3::Gemma3;
use crate::llama::Llama;

/// A loaded language model of any supported architecture.
#[derive(Debug, Clone)]
pub enum AnyModel<B: InferenceBackend> {
    /// Llama, SmolLM, Mistral, Qwen2
    Llama(Llama<B>),
    /// Gemma 3
    Gemma3(Gemma3<B>),
}

impl<B: InferenceBackend> AnyModel<B> {
    /// Short architecture name.
    pub fn arch(&self) -> &'static str {
        match self {
            AnyModel::Llama(_) => "llama",
            AnyModel::Gemma3(_) => "gemma3",
        }
    }

    fn inner(&self) -> &dyn CausalLm<B> {
        match self {
            AnyModel::Llama(m) => m,
            AnyModel::Gemma3(m) => m,
        }
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
