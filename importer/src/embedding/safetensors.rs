//! SafeTensors checkpoints, read through the `safetensors` crate (which validates the header: its
//! length, every tensor's dtype, shape and byte range) over a memory map.

use std::collections::HashMap;
use std::path::Path;

use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};

use super::named::F32Tensor;
use crate::error::{ImportError, Result};

/// Every tensor of a SafeTensors file as f32 (F32, F16 and BF16 are accepted).
pub fn read_f32_tensors(path: &Path) -> Result<HashMap<String, F32Tensor>> {
    let file = std::fs::File::open(path).map_err(|source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    // SAFETY: the map is read-only and private to this call; a file changed underneath by another
    // process can only yield wrong values, which the shape checks and the model's output expose.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |reason: String| ImportError::File {
        path: path.to_path_buf(),
        reason,
    };
    let st = SafeTensors::deserialize(&map)
        .map_err(|e| bad(format!("not a valid SafeTensors file: {e}")))?;
    let mut out = HashMap::new();
    for (name, view) in st.tensors() {
        let data = view.data();
        let values: Vec<f32> = match view.dtype() {
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::F16 => data
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Dtype::BF16 => data
                .chunks_exact(2)
                .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            // Integer tensors (e.g. BERT's `position_ids` buffer) are not weights.
            Dtype::I64 | Dtype::I32 | Dtype::U8 | Dtype::BOOL => continue,
            other => {
                return Err(bad(format!(
                    "tensor {name:?} has dtype {other:?}; Cinder reads F32, F16 and BF16 weights"
                )));
            }
        };
        out.insert(
            name,
            F32Tensor {
                dims: view.shape().to_vec(),
                values,
            },
        );
    }
    Ok(out)
}
