//! Op group: products with quantized weights ([`QuantOps`]).
//!
//! A model's linear layers hold a [`QWeight`] (the checkpoint's blocks, usually the GGUF file's own
//! mapped pages) prepared by the backend into its [`QuantOps::QMatrix`]:
//! - CPU backends (flex, ndarray; [`host`]) keep the blocks as they are and run `cinder-kernels` (Q8
//!   activation blocks and integer dot products, AVX2/AVX-512/NEON where the CPU has them), so a
//!   4-bit weight is read as 4 bits.
//! - wgpu and cuda (`cube`) repack the quants for CubeCL kernels that read them directly.
//! - candle (`candle`) hands the blocks to candle's own quantized matmul.
//! - The generic fallback ([`dense`]): the weight dequantized once to f32 on the device, activations
//!   rounded as the kernels round them ([`crate::act`]), one Burn matmul. Correct everywhere, but it
//!   holds f32 weights; the others use it for types they have no kernel for.

#[cfg(feature = "candle")]
pub mod candle;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod cube;
pub mod dense;
#[cfg(any(feature = "flex", feature = "ndarray"))]
pub mod host;

use std::fmt;

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
pub use cinder_gguf::{GgmlType, SharedBytes};
use cinder_kernels::Weights;

use crate::BackendError;

/// A weight matrix as the checkpoint stores it: `n` output rows of `k` inputs in `ty`'s block format
/// (GGUF dims `[k, n]`).
#[derive(Clone)]
pub struct QWeight {
    /// storage type
    pub ty: GgmlType,
    /// output rows
    pub n: usize,
    /// inputs per row
    pub k: usize,
    /// the blocks, `n · row_bytes` bytes
    pub data: SharedBytes,
}

impl fmt::Debug for QWeight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QWeight({} {}×{})", self.ty.name(), self.n, self.k)
    }
}

impl QWeight {
    /// A row-major f32 weight `[n, k]` (tests, weights computed in memory).
    pub fn from_f32(values: &[f32], n: usize, k: usize) -> Self {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self {
            ty: GgmlType::F32,
            n,
            k,
            data: SharedBytes::from_vec(bytes),
        }
    }

    /// The weight as the CPU kernels take it.
    pub(crate) fn kernel_view(&self) -> Weights<'_> {
        Weights {
            ty: self.ty,
            data: &self.data,
            n: self.n,
            k: self.k,
        }
    }

    /// Checks the byte count against the shape.
    pub fn validate(&self, name: &str) -> Result<(), BackendError> {
        let expected =
            self.ty
                .bytes_for((self.n * self.k) as u64)
                .ok_or_else(|| BackendError::Weight {
                    name: name.to_string(),
                    reason: format!(
                        "{}×{} is not a whole number of {} blocks",
                        self.n,
                        self.k,
                        self.ty.name()
                    ),
                })?;
        if expected != self.data.len() as u64 {
            return Err(BackendError::Weight {
                name: name.to_string(),
                reason: format!(
                    "{} bytes for a {}×{} {} weight (expected {expected})",
                    self.data.len(),
                    self.n,
                    self.k,
                    self.ty.name()
                ),
            });
        }
        Ok(())
    }

    /// The weight in f32, row-major `[n, k]`, through the reference dequantizer.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, BackendError> {
        cinder_gguf::dequant::dequantize(self.ty, &self.data, self.n * self.k).map_err(|e| {
            BackendError::Weight {
                name: name.to_string(),
                reason: e.to_string(),
            }
        })
    }
}

/// Products with weights in a checkpoint's block formats. One of the op groups that make up
/// [`crate::InferenceBackend`].
pub trait QuantOps: Backend {
    /// A weight prepared for this backend's kernels.
    type QMatrix: Clone + fmt::Debug + Send + Sync + 'static;

    /// Prepares a weight (validated here: a bad byte count is an error naming `name`).
    fn qw_prepare(
        name: &str,
        w: QWeight,
        device: &Self::Device,
    ) -> Result<Self::QMatrix, BackendError>;

    /// `x` `[m, k]` · `Wᵀ` -> `[m, n]`.
    fn qw_matmul(x: Tensor<Self, 2>, w: &Self::QMatrix) -> Tensor<Self, 2>;

    /// `x` `[m, k]` · `W_iᵀ` for several weights of the same input width (a layer's Q/K/V, its
    /// gate/up): each result equals [`Self::qw_matmul`]'s. The host kernels quantize `x` once and
    /// run the products in one parallel section.
    fn qw_matmul_many(x: Tensor<Self, 2>, ws: &[&Self::QMatrix]) -> Vec<Tensor<Self, 2>> {
        ws.iter().map(|w| Self::qw_matmul(x.clone(), w)).collect()
    }

    /// Rows `ids` of `W` as f32 `[len, k]` (embedding lookups in a table that may double as the tied
    /// output projection).
    fn qw_rows(w: &Self::QMatrix, ids: Tensor<Self, 1, Int>) -> Tensor<Self, 2>;

    /// `(n, k)` of a prepared weight.
    fn qw_shape(w: &Self::QMatrix) -> (usize, usize);
}

/// A prepared weight with its backend type erased, so a Burn `Module` can hold it as a plain
/// (non-parameter) field: Burn's derive maps modules between a backend and its autodiff wrapper, which
/// an associated type of one backend cannot follow. [`PreparedWeight::get`] recovers it.
#[derive(Clone)]
pub struct PreparedWeight {
    inner: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    shape: (usize, usize),
    backend: &'static str,
}

impl fmt::Debug for PreparedWeight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PreparedWeight({}×{} for {})",
            self.shape.0, self.shape.1, self.backend
        )
    }
}

impl PreparedWeight {
    /// Prepares `w` for backend `B`.
    pub fn new<B: QuantOps>(
        name: &str,
        w: QWeight,
        device: &B::Device,
    ) -> Result<Self, BackendError> {
        let m = B::qw_prepare(name, w, device)?;
        Ok(Self {
            shape: B::qw_shape(&m),
            inner: std::sync::Arc::new(m),
            backend: std::any::type_name::<B>(),
        })
    }

    /// `(n, k)`: output rows, inputs per row.
    pub fn shape(&self) -> (usize, usize) {
        self.shape
    }

    /// The weight as backend `B` prepared it. A layer is used only with the backend it was loaded
    /// for; anything else is a bug in the caller, reported with both backend names.
    pub fn get<B: QuantOps>(&self) -> &B::QMatrix {
        match self.inner.downcast_ref::<B::QMatrix>() {
            Some(m) => m,
            None => panic!(
                "weight prepared for {} used with {}",
                self.backend,
                std::any::type_name::<B>()
            ),
        }
    }
}

/// Row numbers from an id tensor; a negative id becomes an out-of-range index, reported by the
/// lookup rather than clamped to row 0.
pub(crate) fn row_ids<B: Backend>(ids: Tensor<B, 1, Int>) -> Vec<usize> {
    let data = ids.into_data().convert::<i64>();
    data.as_slice::<i64>()
        .map(|s| {
            s.iter()
                .map(|&i| usize::try_from(i).unwrap_or(usize::MAX))
                .collect()
        })
        .unwrap_or_default()
}

/// Rows `ids` of `w` as f32 `[len, k]`, dequantized on the host from its blocks (embedding
/// lookups in a table that may double as the tied output projection).
#[cfg_attr(
    not(any(feature = "flex", feature = "ndarray", feature = "candle")),
    allow(dead_code)
)]
pub(crate) fn rows_from_blocks<B: Backend>(
    w: &QWeight,
    ids: Tensor<B, 1, Int>,
    device: &B::Device,
) -> Tensor<B, 2> {
    let ids = row_ids(ids);
    let mut out = vec![0.0f32; ids.len() * w.k];
    // An out-of-range id is a caller bug (token ids are checked against the vocabulary upstream).
    if let Err(e) = cinder_kernels::dequantize_rows(w.kernel_view(), &ids, &mut out) {
        panic!("qw_rows: {e}");
    }
    Tensor::from_data(TensorData::new(out, [ids.len(), w.k]), device)
}
