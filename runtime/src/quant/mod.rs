//! The linear layer every model uses, whatever the weight's storage type.
//!
//! Rule: quantization belongs to the linear layer, never to the model. [`QLinear`] is built from a
//! GGUF-typed weight (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, K-quants) and a model calls
//! [`QLinear::forward`] without knowing what it holds. In this first version every type is expanded to
//! f32 at load time through the reference dequantizer, and activations are rounded the way the
//! quantized kernels see them ([`act`]); the kernel work keeps weights in their block format behind this
//! same interface.

pub mod act;

use burn::module::{Module, Param};
use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
use cinder_gguf::GgmlType;

use crate::error::{Result, RuntimeError};
use act::ActQuant;

/// `y = x · Wᵀ + b` for a weight of `out_features × in_features`.
#[derive(Module, Debug)]
pub struct QLinear<B: Backend> {
    /// `[in_features, out_features]`: stored transposed so `forward` is one plain matmul.
    weight: Param<Tensor<B, 2>>,
    /// `[out_features]`
    bias: Option<Param<Tensor<B, 1>>>,
    /// The checkpoint's storage type (reported by `cinder info`; kernels dispatch on it).
    #[module(skip)]
    source_type: String,
    /// How inputs are rounded before the product (see [`act`]).
    #[module(skip)]
    act: ActQuant,
}

impl<B: Backend> QLinear<B> {
    /// Builds the layer from a GGUF-typed weight of `out_features` rows of `in_features` elements (GGUF
    /// dims `[in_features, out_features]`), plus an optional f32 bias of `out_features`.
    pub fn from_ggml(
        name: &str,
        ty: GgmlType,
        data: &[u8],
        out_features: usize,
        in_features: usize,
        bias: Option<Vec<f32>>,
        device: &B::Device,
    ) -> Result<Self> {
        let w = cinder_gguf::dequant::dequantize(ty, data, out_features * in_features)?;
        let mut layer = Self::from_f32(name, &w, out_features, in_features, bias, device)?;
        layer.source_type = ty.name().to_string();
        layer.act = ActQuant::for_weight(ty);
        Ok(layer)
    }

    /// Builds the layer from a row-major f32 weight `[out_features, in_features]` (f32 activations).
    pub fn from_f32(
        name: &str,
        w: &[f32],
        out_features: usize,
        in_features: usize,
        bias: Option<Vec<f32>>,
        device: &B::Device,
    ) -> Result<Self> {
        if w.len() != out_features * in_features {
            return Err(RuntimeError::Weight {
                name: name.to_string(),
                reason: format!(
                    "{} values for a {out_features}×{in_features} weight",
                    w.len()
                ),
            });
        }
        if let Some(b) = &bias
            && b.len() != out_features
        {
            return Err(RuntimeError::Weight {
                name: name.to_string(),
                reason: format!("bias of {} values for {out_features} outputs", b.len()),
            });
        }
        // Transpose on the host once, so the hot path never does.
        let mut t = vec![0.0f32; w.len()];
        for (o, row) in w.chunks_exact(in_features).enumerate() {
            for (i, &x) in row.iter().enumerate() {
                t[i * out_features + o] = x;
            }
        }
        let weight = Tensor::from_data(TensorData::new(t, [in_features, out_features]), device);
        let bias = bias.map(|b| {
            Param::from_tensor(Tensor::from_data(
                TensorData::new(b, [out_features]),
                device,
            ))
        });
        Ok(Self {
            weight: Param::from_tensor(weight),
            bias,
            source_type: "F32".to_string(),
            act: ActQuant::None,
        })
    }

    /// Input width.
    pub fn in_features(&self) -> usize {
        self.weight.dims()[0]
    }

    /// Output width.
    pub fn out_features(&self) -> usize {
        self.weight.dims()[1]
    }

    /// The device the weight lives on.
    pub fn device(&self) -> B::Device {
        self.weight.val().device()
    }

    /// The checkpoint's storage type name (`Q4_1`, `F32`, …).
    pub fn source_type(&self) -> &str {
        &self.source_type
    }

    /// `x` `[..., in_features]` -> `[..., out_features]`.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let dims = x.dims();
        let rows: usize = dims[..D - 1].iter().product();
        let x2: Tensor<B, 2> = x.reshape([rows, dims[D - 1]]);
        let mut y = self.act.apply(x2).matmul(self.weight.val());
        if let Some(b) = &self.bias {
            y = y + b.val().unsqueeze::<2>();
        }
        let mut out = dims;
        out[D - 1] = self.out_features();
        y.reshape(out)
    }

    /// Rows of the logical `[out_features, in_features]` weight, e.g. token embeddings looked up in a
    /// table that doubles as the tied output projection. `ids` `[n]` -> `[n, in_features]`.
    pub fn rows(&self, ids: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        self.weight.val().select(1, ids).transpose()
    }
}
