//! The linear layer every model uses, whatever the weight's storage type.
//!
//! Rule: quantization belongs to the linear layer, never to the model. [`QLinear`] holds a weight in the
//! checkpoint's own format (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, K-quants; loaded zero-copy
//! from the mapped GGUF file) prepared by the backend ([`QuantOps::qw_prepare`](cinder_backends::QuantOps::qw_prepare)), and a model
//! calls [`QLinear::forward`] without knowing what it holds. On the CPU backends the product runs on
//! the blocks themselves (`cinder-kernels`); elsewhere through the backend's kernel or the generic
//! fallback.

pub use cinder_backends::act;
pub use cinder_backends::quant::{GgmlType, PreparedWeight, QWeight, SharedBytes};

use burn::module::{Module, Param};
use burn::tensor::{Int, Tensor, TensorData};
use cinder_backends::InferenceBackend;
use cinder_backends::fused::Glu;

use crate::error::{Result, RuntimeError};

/// `y = x · Wᵀ + b` for a weight of `out_features × in_features`.
#[derive(Module, Debug)]
pub struct QLinear<B: InferenceBackend> {
    /// The weight as the backend keeps it (not a Burn parameter: it is never trained, and a quantized
    /// block format is not a float tensor).
    #[module(skip)]
    weight: PreparedWeight,
    /// `[out_features]`
    bias: Option<Param<Tensor<B, 1>>>,
    /// The checkpoint's storage type (reported by `cinder info`).
    #[module(skip)]
    source_type: GgmlType,
}

impl<B: InferenceBackend> QLinear<B> {
    /// Builds the layer from a weight in its stored format, plus an optional f32 bias of `out_features`.
    pub fn new(name: &str, w: QWeight, bias: Option<Vec<f32>>, device: &B::Device) -> Result<Self> {
        let n = w.n;
        if let Some(b) = &bias
            && b.len() != n
        {
            return Err(RuntimeError::Weight {
                name: name.to_string(),
                reason: format!("bias of {} values for {n} outputs", b.len()),
            });
        }
        let source_type = w.ty;
        let weight =
            PreparedWeight::new::<B>(name, w, device).map_err(|e| RuntimeError::Weight {
                name: name.to_string(),
                reason: e.to_string(),
            })?;
        let bias =
            bias.map(|b| Param::from_tensor(Tensor::from_data(TensorData::new(b, [n]), device)));
        Ok(Self {
            weight,
            bias,
            source_type,
        })
    }

    /// Builds the layer from a GGUF-typed weight of `out_features` rows of `in_features` elements (GGUF
    /// dims `[in_features, out_features]`).
    pub fn from_ggml(
        name: &str,
        ty: GgmlType,
        data: SharedBytes,
        out_features: usize,
        in_features: usize,
        bias: Option<Vec<f32>>,
        device: &B::Device,
    ) -> Result<Self> {
        let w = QWeight {
            ty,
            n: out_features,
            k: in_features,
            data,
        };
        Self::new(name, w, bias, device)
    }

    /// Builds the layer from a row-major f32 weight `[out_features, in_features]`.
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
        let q = QWeight::from_f32(w, out_features, in_features);
        Self::new(name, q, bias, device)
    }

    /// Input width.
    pub fn in_features(&self) -> usize {
        self.weight.shape().1
    }

    /// Output width.
    pub fn out_features(&self) -> usize {
        self.weight.shape().0
    }

    /// The checkpoint's storage type name (`Q4_1`, `F32`, …).
    pub fn source_type(&self) -> &str {
        self.source_type.name()
    }

    /// `x` `[..., in_features]` -> `[..., out_features]`.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let dims = x.dims();
        let rows: usize = dims[..D - 1].iter().product();
        let x2: Tensor<B, 2> = x.reshape([rows, dims[D - 1]]);
        let mut y = B::qw_matmul(x2, self.weight.get::<B>());
        if let Some(b) = &self.bias {
            y = y + b.val().unsqueeze::<2>();
        }
        let mut out = dims;
        out[D - 1] = self.out_features();
        y.reshape(out)
    }

    /// `[layer.forward(x) for layer in layers]`, with the products of layers that share the input
    /// computed together ([`QuantOps::qw_matmul_many`](cinder_backends::QuantOps::qw_matmul_many): one activation quantization and
    /// one parallel section on the CPU kernels). Every layer must take `x`'s width.
    pub fn forward_many<const D: usize>(layers: &[&Self], x: Tensor<B, D>) -> Vec<Tensor<B, D>> {
        let dims = x.dims();
        let rows: usize = dims[..D - 1].iter().product();
        let x2: Tensor<B, 2> = x.reshape([rows, dims[D - 1]]);
        let ws: Vec<&B::QMatrix> = layers.iter().map(|l| l.weight.get::<B>()).collect();
        B::qw_matmul_many(x2, &ws)
            .into_iter()
            .zip(layers)
            .map(|(mut y, l)| {
                if let Some(b) = &l.bias {
                    y = y + b.val().unsqueeze::<2>();
                }
                let mut out = dims;
                out[D - 1] = l.out_features();
                y.reshape(out)
            })
            .collect()
    }

    /// A gated linear unit of two layers of the same input: `glu(gate(x), up(x))` (SwiGLU's
    /// `silu(g)·u` or GEGLU's `gelu(g)·u`), fused with the products where the backend can
    /// ([`FusedOps::glu_matmul`](cinder_backends::FusedOps::glu_matmul)); layers with biases
    /// take their products first.
    pub fn glu<const D: usize>(gate: &Self, up: &Self, x: Tensor<B, D>, kind: Glu) -> Tensor<B, D> {
        if gate.bias.is_some() || up.bias.is_some() {
            let mut p = Self::forward_many(&[gate, up], x).into_iter();
            let (Some(g), Some(u)) = (p.next(), p.next()) else {
                unreachable!("two layers give two outputs");
            };
            return match kind {
                Glu::Silu => B::silu_mul(g, u),
                Glu::Gelu => B::gelu_mul(g, u),
            };
        }
        let dims = x.dims();
        let rows: usize = dims[..D - 1].iter().product();
        let x2: Tensor<B, 2> = x.reshape([rows, dims[D - 1]]);
        let y = B::glu_matmul(x2, gate.weight.get::<B>(), up.weight.get::<B>(), kind);
        let mut out = dims;
        out[D - 1] = gate.out_features();
        y.reshape(out)
    }

    /// Rows of the logical `[out_features, in_features]` weight, e.g. token embeddings looked up in a
    /// table that doubles as the tied output projection. `ids` `[n]` -> `[n, in_features]`.
    pub fn rows(&self, ids: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        B::qw_rows(self.weight.get::<B>(), ids)
    }
}
