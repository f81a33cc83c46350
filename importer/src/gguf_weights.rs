//! A [`WeightSource`] over the tensors of a GGUF file, addressed through an architecture's name table.

use burn::tensor::{Tensor, TensorData};
use cinder_gguf::{GgufFile, TensorInfo};
use cinder_models::{ModelError, WeightSource};
use cinder_runtime::InferenceBackend;
use cinder_runtime::quant::QLinear;

use crate::arch::{NameTable, map_name};

/// GGUF tensors seen through a module-path -> tensor-name table.
pub struct GgufWeights<'a, B: InferenceBackend> {
    file: &'a GgufFile,
    tables: &'static [NameTable],
    device: B::Device,
}

impl<'a, B: InferenceBackend> GgufWeights<'a, B> {
    /// A source over `file` using `tables` (see [`crate::arch`]).
    pub fn new(file: &'a GgufFile, tables: &'static [NameTable], device: B::Device) -> Self {
        Self {
            file,
            tables,
            device,
        }
    }

    fn info(&self, path: &str, suffix: &str) -> Result<&'a TensorInfo, ModelError> {
        let base = map_name(self.tables, path).ok_or_else(|| ModelError::Weight {
            path: path.to_string(),
            reason: "no GGUF name for this module path in the architecture's table".into(),
        })?;
        let name = format!("{base}.{suffix}");
        self.file.tensor(&name).ok_or_else(|| ModelError::Weight {
            path: path.to_string(),
            reason: format!("tensor {name:?} is missing from the GGUF file"),
        })
    }

    fn f32_values(&self, path: &str, info: &TensorInfo) -> Result<Vec<f32>, ModelError> {
        self.file.dequantize(info).map_err(|e| ModelError::Weight {
            path: path.to_string(),
            reason: e.to_string(),
        })
    }
}

fn check_dims(path: &str, info: &TensorInfo, want: &[u64]) -> Result<(), ModelError> {
    if info.dims != want {
        return Err(ModelError::Weight {
            path: path.to_string(),
            reason: format!(
                "tensor {:?} has GGUF dims {:?}, the config implies {:?}",
                info.name, info.dims, want
            ),
        });
    }
    Ok(())
}

impl<B: InferenceBackend> WeightSource<B> for GgufWeights<'_, B> {
    fn has(&self, path: &str) -> bool {
        map_name(self.tables, path)
            .is_some_and(|base| self.file.tensor(&format!("{base}.weight")).is_some())
    }

    fn linear(
        &mut self,
        path: &str,
        out_features: usize,
        in_features: usize,
        bias: bool,
    ) -> Result<QLinear<B>, ModelError> {
        let w = self.info(path, "weight")?;
        // GGUF dims are innermost first: [in, out].
        check_dims(path, w, &[in_features as u64, out_features as u64])?;
        let b = if bias {
            let bi = self.info(path, "bias")?;
            check_dims(path, bi, &[out_features as u64])?;
            Some(self.f32_values(path, bi)?)
        } else {
            None
        };
        Ok(QLinear::from_ggml(
            path,
            w.ggml_type,
            self.file.tensor_shared(w),
            out_features,
            in_features,
            b,
            &self.device,
        )?)
    }

    fn vector(&mut self, path: &str, len: usize) -> Result<Tensor<B, 1>, ModelError> {
        let info = self.info(path, "weight")?;
        check_dims(path, info, &[len as u64])?;
        let v = self.f32_values(path, info)?;
        Ok(Tensor::from_data(TensorData::new(v, [len]), &self.device))
    }

    fn device(&self) -> B::Device {
        self.device.clone()
    }
}
