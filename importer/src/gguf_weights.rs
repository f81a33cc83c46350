//! A [`WeightSource`] over GGUF-named tensors (a GGUF file, or a Cinder record holding the same
//! tensors), addressed through an architecture's name table.

use burn::tensor::{Tensor, TensorData};
use cinder_gguf::{GgmlType, GgufFile, SharedBytes};
use cinder_models::{ModelError, WeightSource};
use cinder_runtime::InferenceBackend;
use cinder_runtime::quant::QLinear;

use crate::arch::{NameTable, map_name};

/// One stored tensor: its type, GGUF dims (innermost first) and bytes (not copied).
#[derive(Debug, Clone)]
pub struct StoredTensor {
    /// storage type
    pub ty: GgmlType,
    /// dims, innermost first (ggml `ne`)
    pub dims: Vec<u64>,
    /// the blocks
    pub data: SharedBytes,
}

/// Tensors by GGUF name (`blk.3.attn_q.weight`).
pub trait TensorStore {
    /// The tensor called `name`, if any.
    fn stored(&self, name: &str) -> Option<StoredTensor>;
}

impl TensorStore for GgufFile {
    fn stored(&self, name: &str) -> Option<StoredTensor> {
        self.tensor(name).map(|i| StoredTensor {
            ty: i.ggml_type,
            dims: i.dims.clone(),
            data: self.tensor_shared(i),
        })
    }
}

impl TensorStore for std::collections::HashMap<String, StoredTensor> {
    fn stored(&self, name: &str) -> Option<StoredTensor> {
        self.get(name).cloned()
    }
}

/// Stored tensors seen through a module-path -> tensor-name table.
pub struct TableWeights<'a, B: InferenceBackend, S: TensorStore + ?Sized> {
    store: &'a S,
    tables: &'static [NameTable],
    device: B::Device,
}

/// The weights of a GGUF file.
pub type GgufWeights<'a, B> = TableWeights<'a, B, GgufFile>;

impl<'a, B: InferenceBackend, S: TensorStore + ?Sized> TableWeights<'a, B, S> {
    /// The `len` f32 values of `path`'s `part` (`weight` or `bias`) on the device.
    fn values(&self, path: &str, part: &str, len: usize) -> Result<Tensor<B, 1>, ModelError> {
        let (name, t) = self.get(path, part)?;
        check_dims(path, &name, &t, &[len as u64])?;
        let v = f32_values(path, &t)?;
        Ok(Tensor::from_data(TensorData::new(v, [len]), &self.device))
    }

    /// A source over `store` using `tables` (see [`crate::arch`]).
    pub fn new(store: &'a S, tables: &'static [NameTable], device: B::Device) -> Self {
        Self {
            store,
            tables,
            device,
        }
    }

    fn get(&self, path: &str, suffix: &str) -> Result<(String, StoredTensor), ModelError> {
        let base = map_name(self.tables, path).ok_or_else(|| ModelError::Weight {
            path: path.to_string(),
            reason: "no tensor name for this module path in the architecture's table".into(),
        })?;
        let name = format!("{base}.{suffix}");
        let t = self.store.stored(&name).ok_or_else(|| ModelError::Weight {
            path: path.to_string(),
            reason: format!("tensor {name:?} is missing"),
        })?;
        Ok((name, t))
    }
}

fn check_dims(path: &str, name: &str, t: &StoredTensor, want: &[u64]) -> Result<(), ModelError> {
    if t.dims != want {
        return Err(ModelError::Weight {
            path: path.to_string(),
            reason: format!(
                "tensor {name:?} has GGUF dims {:?}, the config implies {want:?}",
                t.dims
            ),
        });
    }
    Ok(())
}

fn f32_values(path: &str, t: &StoredTensor) -> Result<Vec<f32>, ModelError> {
    let n = t.dims.iter().product::<u64>() as usize;
    cinder_gguf::dequant::dequantize(t.ty, &t.data, n).map_err(|e| ModelError::Weight {
        path: path.to_string(),
        reason: e.to_string(),
    })
}

impl<B: InferenceBackend, S: TensorStore + ?Sized> WeightSource<B> for TableWeights<'_, B, S> {
    fn has(&self, path: &str) -> bool {
        map_name(self.tables, path)
            .is_some_and(|base| self.store.stored(&format!("{base}.weight")).is_some())
    }

    fn linear(
        &mut self,
        path: &str,
        out_features: usize,
        in_features: usize,
        bias: bool,
    ) -> Result<QLinear<B>, ModelError> {
        let (name, w) = self.get(path, "weight")?;
        // GGUF dims are innermost first: [in, out].
        check_dims(path, &name, &w, &[in_features as u64, out_features as u64])?;
        let b = if bias {
            let (bname, bi) = self.get(path, "bias")?;
            check_dims(path, &bname, &bi, &[out_features as u64])?;
            Some(f32_values(path, &bi)?)
        } else {
            None
        };
        Ok(QLinear::from_ggml(
            path,
            w.ty,
            w.data,
            out_features,
            in_features,
            b,
            &self.device,
        )?)
    }

    fn vector(&mut self, path: &str, len: usize) -> Result<Tensor<B, 1>, ModelError> {
        self.values(path, "weight", len)
    }

    fn bias_vector(&mut self, path: &str, len: usize) -> Result<Tensor<B, 1>, ModelError> {
        self.values(path, "bias", len)
    }

    fn device(&self) -> B::Device {
        self.device.clone()
    }
}
