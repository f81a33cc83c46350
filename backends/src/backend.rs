//! [`InferenceBackend`]: Burn's `Backend` plus the operations inference needs, composed from op
//! groups the way Burn composes its `Backend` from `FloatTensorOps`, `ModuleOps`, … Each group is a
//! trait in its own module, with its host (flex, ndarray), CubeCL (wgpu, cuda) and candle
//! implementations beside it:
//!
//! | group | module | what |
//! |---|---|---|
//! | [`QuantOps`] | [`crate::quant`] | products with weights in the checkpoint's block formats |
//! | [`KvOps`] | [`crate::attention`] | one layer's paged K/V store and attention over it |
//! | [`FusedOps`] | [`crate::fused`] | RMSNorm, SwiGLU/GEGLU gates |
//! | [`EncoderOps`] | [`crate::encoder`] | layer norm, exact GELU, bidirectional attention |
//! | [`MemoryOps`] | [`crate::memory`] | the device's total and free memory |
//! | [`SampleOps`] | [`crate::sample`] | greedy sampling on the device |
//!
//! A new backend implements each group (the defaults of `FusedOps`, `EncoderOps` and `MemoryOps` are
//! generic Burn ops; `QuantOps` and `KvOps` have generic fallbacks in `quant::dense` and
//! `attention::dense` to delegate to) and names its [`BackendKind`] here.

use crate::BackendKind;
use crate::attention::KvOps;
use crate::encoder::EncoderOps;
use crate::fused::FusedOps;
use crate::memory::MemoryOps;
use crate::quant::QuantOps;
use crate::sample::SampleOps;

/// A Burn backend with every op group inference needs. Models and the runtime are written against
/// it; [`crate::dispatch`] picks the concrete one.
pub trait InferenceBackend:
    QuantOps + KvOps + FusedOps + EncoderOps + MemoryOps + SampleOps
{
    /// Which of Cinder's backends this is.
    const KIND: BackendKind;
}

#[cfg(feature = "flex")]
impl InferenceBackend for crate::types::Flex {
    const KIND: BackendKind = BackendKind::Flex;
}
#[cfg(feature = "ndarray")]
impl InferenceBackend for crate::types::NdArray {
    const KIND: BackendKind = BackendKind::Ndarray;
}
#[cfg(feature = "candle")]
impl InferenceBackend for crate::types::Candle {
    const KIND: BackendKind = BackendKind::Candle;
}
#[cfg(feature = "wgpu")]
impl InferenceBackend for crate::types::Wgpu {
    const KIND: BackendKind = BackendKind::Wgpu;
}
#[cfg(feature = "cuda")]
impl InferenceBackend for crate::types::Cuda {
    const KIND: BackendKind = BackendKind::Cuda;
}
