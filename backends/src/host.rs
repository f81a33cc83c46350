//! Helpers the host (CPU) implementations of the op groups share.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// A tensor's values on the host as f32 (the host backends' ops and kernels read them from here).
pub fn host_values<B: Backend, const D: usize>(x: Tensor<B, D>) -> Vec<f32> {
    // `convert` is a no-op for f32 data and `into_vec` takes the buffer without copying it.
    x.into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .unwrap_or_default()
}
