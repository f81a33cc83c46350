//! `model.bpk`: the record's tensors in Burn's own store format (Burnpack, from `burn-store`), one
//! `U8` tensor per weight holding its bytes exactly as stored (quantized blocks stay blocks); the
//! type and GGUF dims of each live in the manifest.
//!
//! Burnpack aligns every tensor to 256 bytes, and `burn-store` memory-maps the file and hands out
//! zero-copy views, so loaded weights are the file's own pages (as with GGUF).

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use burn::module::ParamId;
use burn::tensor::{DType, TensorData};
use burn_store::{BurnpackStore, BurnpackWriter, ModuleStore, TensorSnapshot};
use cinder_gguf::{GgmlType, SharedBytes};

use super::manifest::TensorEntry;
use crate::error::{ImportError, Result};
use crate::gguf_weights::StoredTensor;

/// The weights file's name in a record directory.
pub const PACK: &str = "model.bpk";

fn pack_err(path: &Path, reason: impl Into<String>) -> ImportError {
    ImportError::Record {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Writes `tensors` (name order kept) with string metadata. Each tensor's bytes are copied into the
/// writer only when it is written, so peak memory is one tensor, not the model.
pub fn write(path: &Path, tensors: &[(String, StoredTensor)], meta: &[(&str, &str)]) -> Result<()> {
    let snapshots = tensors
        .iter()
        .map(|(name, t)| {
            let data = t.data.clone();
            let len = data.len();
            let mut snap = TensorSnapshot::from_closure(
                Rc::new(move || Ok(TensorData::from_bytes_vec(data.to_vec(), [len], DType::U8))),
                DType::U8,
                [len].into(),
                name.split('.').map(str::to_string).collect(),
                Vec::new(),
                ParamId::new(),
            );
            // No random parameter ids: the same import writes the same bytes.
            snap.tensor_id = None;
            snap
        })
        .collect();
    let mut w = BurnpackWriter::new(snapshots);
    for (k, v) in meta {
        w = w.with_metadata(k, v);
    }
    w.write_to_file(path)
        .map_err(|e| pack_err(path, format!("cannot write: {e}")))
}

/// A tensor's bytes held by the store's memory map.
struct Mapped(TensorData);

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// Reads every tensor the manifest lists, zero-copy, checking that each exists with exactly the
/// bytes its type and dims need. Tensors in the file but not in the manifest are refused.
pub fn read(path: &Path, entries: &[TensorEntry]) -> Result<HashMap<String, StoredTensor>> {
    let mut store = BurnpackStore::from_file(path)
        .auto_extension(false)
        .zero_copy(true);
    let keys = store
        .keys()
        .map_err(|e| pack_err(path, format!("not a readable Burnpack file: {e}")))?;
    if keys.len() != entries.len() {
        return Err(pack_err(
            path,
            format!(
                "holds {} tensors, the manifest lists {}",
                keys.len(),
                entries.len()
            ),
        ));
    }
    let mut out = HashMap::with_capacity(entries.len());
    for e in entries {
        let ty = type_by_name(&e.ty)
            .ok_or_else(|| pack_err(path, format!("tensor {}: unknown type {:?}", e.name, e.ty)))?;
        let need = e
            .dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .and_then(|n| ty.bytes_for(n));
        if need != Some(e.bytes) {
            return Err(pack_err(
                path,
                format!(
                    "tensor {}: {:?} of {} is not {} bytes",
                    e.name, e.dims, e.ty, e.bytes
                ),
            ));
        }
        let snap = store
            .get_snapshot(&e.name)
            .map_err(|err| pack_err(path, format!("tensor {}: {err}", e.name)))?
            .ok_or_else(|| pack_err(path, format!("tensor {} is missing", e.name)))?;
        let data = snap
            .to_data()
            .map_err(|err| pack_err(path, format!("tensor {}: {err:?}", e.name)))?;
        if data.dtype != DType::U8 || data.as_bytes().len() as u64 != e.bytes {
            return Err(pack_err(
                path,
                format!(
                    "tensor {}: {:?} of {} bytes, the manifest says U8 of {}",
                    e.name,
                    data.dtype,
                    data.as_bytes().len(),
                    e.bytes
                ),
            ));
        }
        out.insert(
            e.name.clone(),
            StoredTensor {
                ty,
                dims: e.dims.clone(),
                data: SharedBytes::from_owner(Mapped(data)),
            },
        );
    }
    Ok(out)
}

/// The storage type called `name` (`GgmlType::name`).
pub fn type_by_name(name: &str) -> Option<GgmlType> {
    (0..64)
        .filter_map(GgmlType::from_id)
        .find(|t| t.name() == name)
}
