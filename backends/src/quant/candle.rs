//! The candle backend's quantized matmul: candle's own (`candle_core::quantized::QMatMul`), on the
//! GGUF blocks as they are, instead of the generic fallback's f32 expansion.
//!
//! - **Memory.** candle keeps its own copy of the blocks (Q4_1 stays ~4.5 bits per weight);
//!   F32/F16/BF16 weights become candle's dense tensor, as `QMatMul` does for them.
//! - **Prefill.** Products of 16 rows or more dequantize the weight for the call and run candle's
//!   f32 gemm (candle's quantized kernel is one dot product per output); decode stays quantized.
//! - **Arithmetic.** candle's CPU kernels quantize the activations to Q8 blocks and take integer
//!   dot products, as ggml and the host kernels do (an exact tie rounds away from zero, as in
//!   ggml's scalar reference, where llama.cpp's x86 path and the host kernels round it to even).
//!   For F16/BF16 weights the activations are rounded to that type here, as ggml does.
//! - **Tensors.** burn-candle 0.21 keeps a tensor's inner `candle_core::Tensor` crate-private, so
//!   the activations `[m, k]` cross as host data (one copy of m·k floats); the result is handed back
//!   without a copy (`CandleTensor::new`).
//! - **Row lookups** (tied embeddings) dequantize just the asked rows from the original bytes.

// burn-candle is deprecated upstream (Burn 0.21) but is still one of the backends Cinder serves.
#![allow(deprecated)]

use std::fmt;
use std::sync::Arc;

use burn::tensor::{Int, Tensor, TensorPrimitive};
use burn_candle::{CandleDevice, CandleTensor};
use candle_core::Module;
use candle_core::quantized::{GgmlDType, QMatMul, ggml_file::qtensor_from_ggml};
use cinder_gguf::GgmlType;

use super::{QWeight, QuantOps};
use crate::BackendError;
use crate::act::ActQuant;
use crate::types::Candle;

/// A weight prepared for candle's quantized matmul.
#[derive(Clone)]
pub struct CandleQMatrix {
    /// The original blocks (row lookups read them; the GGUF mapping keeps them off the heap).
    w: QWeight,
    mm: Arc<QMatMul>,
    device: candle_core::Device,
}

impl fmt::Debug for CandleQMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CandleQMatrix({:?})", self.w)
    }
}

/// candle's name for a GGUF block type, where candle has kernels for it.
fn candle_dtype(ty: GgmlType) -> Option<GgmlDType> {
    Some(match ty {
        GgmlType::F32 => GgmlDType::F32,
        GgmlType::F16 => GgmlDType::F16,
        GgmlType::BF16 => GgmlDType::BF16,
        GgmlType::Q4_0 => GgmlDType::Q4_0,
        GgmlType::Q4_1 => GgmlDType::Q4_1,
        GgmlType::Q5_0 => GgmlDType::Q5_0,
        GgmlType::Q5_1 => GgmlDType::Q5_1,
        GgmlType::Q8_0 => GgmlDType::Q8_0,
        GgmlType::Q2_K => GgmlDType::Q2K,
        GgmlType::Q3_K => GgmlDType::Q3K,
        GgmlType::Q4_K => GgmlDType::Q4K,
        GgmlType::Q5_K => GgmlDType::Q5K,
        GgmlType::Q6_K => GgmlDType::Q6K,
        _ => return None,
    })
}

fn candle_err(name: &str, e: candle_core::Error) -> BackendError {
    BackendError::Weight {
        name: name.to_string(),
        reason: format!("candle: {e}"),
    }
}

/// [`QuantOps::qw_prepare`] for candle.
pub fn candle_prepare(
    name: &str,
    w: QWeight,
    device: &CandleDevice,
) -> Result<CandleQMatrix, BackendError> {
    w.validate(name)?;
    // Types candle or the row lookup cannot read (F64, I8, …) become F32 first.
    let w = match candle_dtype(w.ty) {
        Some(_) if cinder_kernels::supports(w.ty) => w,
        _ => {
            tracing::debug!(name, ty = w.ty.name(), "no candle kernel: expanding to f32");
            QWeight::from_f32(&w.dequantize(name)?, w.n, w.k)
        }
    };
    let dtype = candle_dtype(w.ty).ok_or_else(|| BackendError::Weight {
        name: name.to_string(),
        reason: format!("{} has no candle type", w.ty.name()),
    })?;
    let device = candle_core::Device::from(device.clone());
    // candle reads the bytes as its block structs, whose alignment is at most 4 (an f32 scale).
    // GGUF data is 32-byte aligned; anything else is copied into an aligned buffer first.
    let bytes: &[u8] = &w.data;
    let aligned: Vec<u32>;
    let bytes = if (bytes.as_ptr() as usize).is_multiple_of(4) {
        bytes
    } else {
        aligned = bytes
            .chunks(4)
            .map(|c| {
                let mut b = [0u8; 4];
                b[..c.len()].copy_from_slice(c);
                u32::from_ne_bytes(b)
            })
            .collect();
        // SAFETY: a u32 buffer viewed as the bytes it holds (at least `bytes.len()` of them).
        unsafe { std::slice::from_raw_parts(aligned.as_ptr().cast::<u8>(), w.data.len()) }
    };
    let q = qtensor_from_ggml(dtype, bytes, vec![w.n, w.k], &device)
        .map_err(|e| candle_err(name, e))?;
    let mm = QMatMul::from_qtensor(q).map_err(|e| candle_err(name, e))?;
    Ok(CandleQMatrix {
        w,
        mm: Arc::new(mm),
        device,
    })
}

/// Rows from which a product of a block-quantized weight runs as an f32 gemm on a copy of the weight
/// dequantized for that call. candle's quantized kernel is a dot product per output (and scalar in
/// a build that does not target AVX2): at 128 rows it ran 4× slower than f32 expansion had, while
/// dequantizing a weight costs about as much as a few rows of its product.
const F32_GEMM_MIN_ROWS: usize = 16;

/// `x` `[m, k]` · `Wᵀ` -> `[m, n]`: candle's quantized matmul for decode-sized `m`; for prefill-sized
/// `m`, the weight dequantized for this call and candle's f32 matmul, with the activations rounded
/// as the quantized kernels round them ([`ActQuant`]).
pub fn candle_matmul(x: Tensor<Candle, 2>, w: &CandleQMatrix) -> Tensor<Candle, 2> {
    let [m, k] = x.dims();
    assert_eq!(
        k, w.w.k,
        "qw_matmul: input width {k} for a weight of {} inputs",
        w.w.k
    );
    let float = matches!(w.w.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
    if m >= F32_GEMM_MIN_ROWS && !float {
        let xs = host_tensor(ActQuant::for_weight(w.w.ty).apply(x), (m, k), &w.device);
        // Validated when the weight was prepared.
        let wf =
            w.w.dequantize("qw_matmul")
                .unwrap_or_else(|e| panic!("qw_matmul on a validated weight failed: {e}"));
        let y = candle_core::Tensor::from_vec(wf, (w.w.n, k), &w.device)
            .and_then(|wt| xs.and_then(|xs| xs.matmul(&wt.t()?)))
            .unwrap_or_else(|e| panic!("qw_matmul on validated shapes failed: {e}"));
        return Tensor::from_primitive(TensorPrimitive::Float(CandleTensor::new(y)));
    }
    // candle multiplies F16/BF16 weights as f32; ggml (and the other backends) round the
    // activations to the weight's type first. Quantized types: candle's kernel quantizes them.
    let x = if float {
        ActQuant::for_weight(w.w.ty).apply(x)
    } else {
        x
    };
    // Shapes were validated when the weight was prepared and just above.
    let y = host_tensor(x, (m, k), &w.device)
        .and_then(|xs| w.mm.forward(&xs))
        .unwrap_or_else(|e| panic!("qw_matmul on validated shapes failed: {e}"));
    Tensor::from_primitive(TensorPrimitive::Float(CandleTensor::new(y)))
}

/// A Burn tensor's values as a candle tensor of `shape` on `device` (one host copy).
fn host_tensor(
    x: Tensor<Candle, 2>,
    shape: (usize, usize),
    device: &candle_core::Device,
) -> candle_core::Result<candle_core::Tensor> {
    let v = x
        .into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .unwrap_or_default();
    candle_core::Tensor::from_vec(v, shape, device)
}

/// Rows `ids` of `W` as f32 `[len, k]`, dequantized from the original blocks.
pub fn candle_rows(w: &CandleQMatrix, ids: Tensor<Candle, 1, Int>) -> Tensor<Candle, 2> {
    let device = ids.device();
    super::rows_from_blocks(&w.w, ids, &device)
}

/// `(n, k)` of a prepared weight.
pub fn candle_shape(w: &CandleQMatrix) -> (usize, usize) {
    (w.w.n, w.w.k)
}

impl QuantOps for Candle {
    type QMatrix = CandleQMatrix;
    fn qw_prepare(
        name: &str,
        w: QWeight,
        device: &Self::Device,
    ) -> Result<Self::QMatrix, BackendError> {
        candle_prepare(name, w, device)
    }
    fn qw_matmul(x: Tensor<Self, 2>, w: &Self::QMatrix) -> Tensor<Self, 2> {
        candle_matmul(x, w)
    }
    fn qw_rows(w: &Self::QMatrix, ids: Tensor<Self, 1, Int>) -> Tensor<Self, 2> {
        candle_rows(w, ids)
    }
    fn qw_shape(w: &Self::QMatrix) -> (usize, usize) {
        candle_shape(w)
    }
}
