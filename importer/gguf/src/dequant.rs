//! Scalar reference dequantization for every block format Cinder reads.
//!
//! Reference: ggml's `ggml-quants.c` (`dequantize_row_*`). Output is in GGUF element order.

use crate::error::{GgufError, Result};
use crate::types::GgmlType;

/// Dequantizes `n` elements of type `ty` from `data`.
pub fn dequantize(ty: GgmlType, data: &[u8], n: usize) -> Result<Vec<f32>> {
    let _ = (data, n);
    Err(GgufError::Dequant {
        ty: ty.to_string(),
        reason: "not yet implemented".into(),
    })
}
