//! A [`WeightSource`] over f32 tensors held under HF checkpoint names, shared by the SafeTensors and
//! ONNX readers (both turn their file into this map first).

use std::collections::HashMap;

use burn::tensor::{Tensor, TensorData};
use cinder_models::{ModelError, WeightSource};
use cinder_runtime::InferenceBackend;
use cinder_runtime::quant::QLinear;

use crate::arch::{NameTable, map_name};

/// One tensor: row-major f32 values of `dims`.
#[derive(Debug, Clone)]
pub struct F32Tensor {
    /// shape, outermost first (HF/PyTorch order: a linear weight is `[out, in]`)
    pub dims: Vec<usize>,
    /// values
    pub values: Vec<f32>,
}

/// HF-named tensors seen through an architecture's module-path table, under a name prefix.
pub struct NamedWeights<B: InferenceBackend> {
    tensors: HashMap<String, F32Tensor>,
    prefix: String,
    tables: &'static [NameTable],
    device: B::Device,
}

impl<B: InferenceBackend> NamedWeights<B> {
    /// A source over `tensors`, whose names are `prefix` + the table's names.
    pub fn new(
        tensors: HashMap<String, F32Tensor>,
        prefix: String,
        tables: &'static [NameTable],
        device: B::Device,
    ) -> Self {
        Self {
            tensors,
            prefix,
            tables,
            device,
        }
    }

    /// The names of the tensors no module took, sorted (after loading: what the model did not use).
    pub fn remaining(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.tensors.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// Takes `<base>.<one of suffixes>` out of the map (weights are used once), checking its shape.
    fn take(
        &mut self,
        path: &str,
        suffixes: &[&str],
        want: &[usize],
    ) -> Result<F32Tensor, ModelError> {
        let base = map_name(self.tables, path).ok_or_else(|| ModelError::Weight {
            path: path.to_string(),
            reason: "no checkpoint name for this module path in the architecture's table".into(),
        })?;
        let names: Vec<String> = suffixes
            .iter()
            .map(|s| format!("{}{base}.{s}", self.prefix))
            .collect();
        let t = names
            .iter()
            .find_map(|n| self.tensors.remove(n))
            .ok_or_else(|| ModelError::Weight {
                path: path.to_string(),
                reason: format!("tensor {:?} is missing from the checkpoint", names[0]),
            })?;
        if t.dims != want {
            return Err(ModelError::Weight {
                path: path.to_string(),
                reason: format!(
                    "tensor {:?} has shape {:?}, the config implies {want:?}",
                    names[0], t.dims
                ),
            });
        }
        Ok(t)
    }
}

impl<B: InferenceBackend> WeightSource<B> for NamedWeights<B> {
    fn has(&self, path: &str) -> bool {
        map_name(self.tables, path).is_some_and(|b| {
            self.tensors
                .contains_key(&format!("{}{b}.weight", self.prefix))
        })
    }

    fn linear(
        &mut self,
        path: &str,
        out_features: usize,
        in_features: usize,
        bias: bool,
    ) -> Result<QLinear<B>, ModelError> {
        let w = self.take(path, &["weight"], &[out_features, in_features])?;
        let b = if bias {
            Some(self.take(path, &["bias"], &[out_features])?.values)
        } else {
            None
        };
        Ok(QLinear::from_f32(
            path,
            &w.values,
            out_features,
            in_features,
            b,
            &self.device,
        )?)
    }

    fn vector(&mut self, path: &str, len: usize) -> Result<Tensor<B, 1>, ModelError> {
        // Old BERT checkpoints name LayerNorm parameters gamma/beta.
        let v = self.take(path, &["weight", "gamma"], &[len])?;
        Ok(Tensor::from_data(
            TensorData::new(v.values, [len]),
            &self.device,
        ))
    }

    fn bias_vector(&mut self, path: &str, len: usize) -> Result<Tensor<B, 1>, ModelError> {
        let v = self.take(path, &["bias", "beta"], &[len])?;
        Ok(Tensor::from_data(
            TensorData::new(v.values, [len]),
            &self.device,
        ))
    }

    fn device(&self) -> B::Device {
        self.device.clone()
    }
}

/// The prefix before `embeddings.word_embeddings.weight` (`""`, `"bert."`, `"0.auto_model."`, …),
/// which locates the encoder among a checkpoint's tensors.
pub fn bert_prefix<'a>(names: impl Iterator<Item = &'a String>) -> Option<String> {
    const KEY: &str = "embeddings.word_embeddings.weight";
    names
        .filter_map(|n| n.strip_suffix(KEY))
        .filter(|p| p.is_empty() || p.ends_with('.'))
        .min_by_key(|p| p.len())
        .map(str::to_string)
}
