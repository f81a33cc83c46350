//! Where a model's weights come from. A model asks for weights by its own module paths
//! (`layers.3.attn.wq`); the importer maps those to checkpoint names with a declarative table per
//! architecture and per format, and checks shapes.

use burn::tensor::Tensor;
use cinder_runtime::InferenceBackend;
use cinder_runtime::quant::QLinear;

use crate::error::Result;

/// A source of weights addressed by module path.
pub trait WeightSource<B: InferenceBackend> {
    /// Whether a weight exists (for optional tensors like a separate output projection or biases).
    fn has(&self, path: &str) -> bool;

    /// A linear layer `out × in` at `path` (its `.weight`, and `.bias` if `bias` is set).
    fn linear(
        &mut self,
        path: &str,
        out_features: usize,
        in_features: usize,
        bias: bool,
    ) -> Result<QLinear<B>>;

    /// A vector of `len` f32 values (norm weights).
    fn vector(&mut self, path: &str, len: usize) -> Result<Tensor<B, 1>>;

    /// The `len` f32 bias values of a norm at `path` (LayerNorm's `.bias`). Sources of architectures
    /// without norm biases need not provide it.
    fn bias_vector(&mut self, path: &str, _len: usize) -> Result<Tensor<B, 1>> {
        Err(crate::ModelError::Weight {
            path: path.to_string(),
            reason: "this weight source has no norm biases".into(),
        })
    }

    /// The device weights are placed on.
    fn device(&self) -> B::Device;
}
