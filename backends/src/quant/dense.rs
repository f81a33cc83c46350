//! The generic fallback for quantized weights: the weight dequantized once to f32 on the device
//! (stored transposed, `[k, n]`), activations rounded as the CPU kernels round them
//! ([`ActQuant`]), one Burn matmul. Every backend can run it; the CubeCL and candle backends use it
//! for the types they have no kernel for.

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};

use super::QWeight;
use crate::BackendError;
use crate::act::ActQuant;

/// The generic fallback: f32 weight on the device, stored transposed `[k, n]` for a plain matmul.
#[derive(Clone, Debug)]
pub struct DenseQMatrix<B: Backend> {
    weight: Tensor<B, 2>,
    act: ActQuant,
}

/// Prepares the generic fallback.
pub fn dense_prepare<B: Backend>(
    name: &str,
    w: QWeight,
    device: &B::Device,
) -> Result<DenseQMatrix<B>, BackendError> {
    w.validate(name)?;
    let v = w.dequantize(name)?;
    // Transpose on the host once, so the hot path never does.
    let (n, k) = (w.n, w.k);
    let mut t = vec![0.0f32; v.len()];
    for (o, row) in v.chunks_exact(k).enumerate() {
        for (i, &x) in row.iter().enumerate() {
            t[i * n + o] = x;
        }
    }
    Ok(DenseQMatrix {
        weight: Tensor::from_data(TensorData::new(t, [k, n]), device),
        act: ActQuant::for_weight(w.ty),
    })
}

/// The generic fallback's product.
pub fn dense_matmul<B: Backend>(x: Tensor<B, 2>, w: &DenseQMatrix<B>) -> Tensor<B, 2> {
    w.act.apply(x).matmul(w.weight.clone())
}

/// The generic fallback's row lookup: columns of the stored `Wᵀ`.
pub fn dense_rows<B: Backend>(w: &DenseQMatrix<B>, ids: Tensor<B, 1, Int>) -> Tensor<B, 2> {
    w.weight.clone().select(1, ids).transpose()
}

/// `(n, k)` of a generic-fallback weight.
pub fn dense_shape<B: Backend>(w: &DenseQMatrix<B>) -> (usize, usize) {
    let [k, n] = w.weight.dims();
    (n, k)
}
