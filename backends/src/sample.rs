//! Op group: sampling on the device ([`SampleOps`]), so that a greedy step reads back token ids
//! instead of logits.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::BackendError;
use crate::counters::read_back;

/// Sampling ops. One of the op groups that make up [`crate::InferenceBackend`].
pub trait SampleOps: Backend {
    /// The index of each row's largest logit (`logits` `[n, vocab]` -> `n` ids), lowest on ties,
    /// as greedy sampling picks it. Reads back only the ids.
    fn argmax_rows(logits: Tensor<Self, 2>) -> Result<Vec<u32>, BackendError> {
        let ids = read_back(logits.argmax(1));
        let ids = ids
            .convert::<i64>()
            .into_vec::<i64>()
            .map_err(|e| BackendError::Readback(format!("{e:?}")))?;
        Ok(ids.into_iter().map(|i| i as u32).collect())
    }
}

/// The host form: the rows read back and scanned in order, so ties and NaNs go exactly as the
/// sampler's own argmax takes them.
#[cfg(any(feature = "flex", feature = "ndarray"))]
fn host_argmax_rows<B: Backend>(logits: Tensor<B, 2>) -> Result<Vec<u32>, BackendError> {
    let [_, vocab] = logits.dims();
    let v = read_back(logits)
        .convert::<f32>()
        .into_vec::<f32>()
        .map_err(|e| BackendError::Readback(format!("{e:?}")))?;
    Ok(v.chunks_exact(vocab.max(1))
        .map(|row| {
            let mut best = 0usize;
            let mut best_v = f32::NEG_INFINITY;
            for (i, &x) in row.iter().enumerate() {
                if x > best_v {
                    best = i;
                    best_v = x;
                }
            }
            best as u32
        })
        .collect())
}

#[cfg(feature = "flex")]
impl SampleOps for crate::types::Flex {
    fn argmax_rows(logits: Tensor<Self, 2>) -> Result<Vec<u32>, BackendError> {
        host_argmax_rows(logits)
    }
}
#[cfg(feature = "ndarray")]
impl SampleOps for crate::types::NdArray {
    fn argmax_rows(logits: Tensor<Self, 2>) -> Result<Vec<u32>, BackendError> {
        host_argmax_rows(logits)
    }
}
#[cfg(feature = "candle")]
impl SampleOps for crate::types::Candle {}
#[cfg(feature = "wgpu")]
impl SampleOps for crate::types::Wgpu {}
#[cfg(feature = "cuda")]
impl SampleOps for crate::types::Cuda {}
