//! BERT weights out of an ONNX graph: initializers (f32, or int8/uint8 behind `DequantizeLinear` or
//! `Cast`·`Mul` by a scale), mapped onto [`cinder_models::bert`] by following the graph.
//!
//! Exporters rename weight matrices (`onnx::MatMul_470`, `val_49_q`), but keep the HF names of biases
//! and LayerNorm parameters. So a linear layer is found from its bias: the `Add` (or `Gemm`) that
//! consumes `encoder.layer.{i}.attention.self.query.bias` takes the output of the `MatMul` whose
//! second input is the weight `[in, out]`. The head count is read from the `Reshape` that splits
//! the query into heads. Arbitrary graphs are not the goal: anything else is refused by name.
//!
//! Why not `burn-import`/`onnx-ir`: they convert the whole graph into Burn code or IR and reject
//! graphs with ops they do not implement (the int8 export uses `IsNaN`, `GatherND`, …), while the
//! weights and a few shape constants are all this needs.

use std::collections::HashMap;
use std::path::Path;

use cinder_models::bert::{BertActivation, BertConfig};
use prost::Message;

use super::named::{F32Tensor, bert_prefix};
use super::onnx_proto::{GraphProto, ModelProto, NodeProto, TensorProto};
use crate::error::{ImportError, Result};

/// The graph, indexed for lookups by value name.
struct Graph<'a> {
    g: &'a GraphProto,
    constants: HashMap<&'a str, &'a TensorProto>,
    producer: HashMap<&'a str, &'a NodeProto>,
    consumers: HashMap<&'a str, Vec<&'a NodeProto>>,
}

type Fail = Box<dyn Fn(String) -> ImportError>;

/// Reads an ONNX BERT export: its config (from the weights' shapes and the graph) and its weights
/// under HF names (prefix stripped), linear weights as `[out, in]`.
pub fn read_onnx_bert(path: &Path) -> Result<(BertConfig, HashMap<String, F32Tensor>)> {
    let bytes = std::fs::read(path).map_err(|source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let p = path.to_path_buf();
    let bad: Fail = Box::new(move |reason| ImportError::File {
        path: p.clone(),
        reason,
    });
    let model = ModelProto::decode(bytes.as_slice())
        .map_err(|e| bad(format!("not an ONNX model (protobuf: {e})")))?;
    let g = model
        .graph
        .as_ref()
        .ok_or_else(|| bad("the ONNX model has no graph".into()))?;
    let graph = Graph::new(g);
    graph.read_bert(&bad)
}

impl<'a> Graph<'a> {
    fn new(g: &'a GraphProto) -> Self {
        let mut constants: HashMap<&str, &TensorProto> =
            g.initializer.iter().map(|t| (t.name.as_str(), t)).collect();
        let mut producer = HashMap::new();
        let mut consumers: HashMap<&str, Vec<&NodeProto>> = HashMap::new();
        for n in &g.node {
            if n.op_type == "Constant"
                && let (Some(out), Some(t)) = (
                    n.output.first(),
                    n.attribute
                        .iter()
                        .find(|a| a.name == "value")
                        .and_then(|a| a.t.as_ref()),
                )
            {
                constants.insert(out.as_str(), t);
            }
            for o in &n.output {
                producer.insert(o.as_str(), n);
            }
            for i in &n.input {
                consumers.entry(i.as_str()).or_default().push(n);
            }
        }
        Self {
            g,
            constants,
            producer,
            consumers,
        }
    }

    /// The value `name` computed from constants only (initializers through `Cast`, `Mul`,
    /// `DequantizeLinear`, `Transpose`, `Identity`), or `None` if it depends on an input.
    fn constant(&self, name: &str, depth: usize, bad: &Fail) -> Result<Option<F32Tensor>> {
        if depth > 8 {
            return Ok(None);
        }
        if let Some(t) = self.constants.get(name) {
            return decode(t, bad).map(Some);
        }
        let Some(n) = self.producer.get(name) else {
            return Ok(None);
        };
        let arg = |i: usize| -> Result<Option<F32Tensor>> {
            match n.input.get(i) {
                Some(x) if !x.is_empty() => self.constant(x, depth + 1, bad),
                _ => Ok(None),
            }
        };
        Ok(match n.op_type.as_str() {
            "Identity" | "Cast" => arg(0)?,
            "Mul" => match (arg(0)?, arg(1)?) {
                (Some(a), Some(b)) => Some(broadcast_mul(&a, &b, None, bad)?),
                _ => None,
            },
            "DequantizeLinear" => match (arg(0)?, arg(1)?) {
                (Some(x), Some(scale)) => {
                    let zero = arg(2)?;
                    let axis = n
                        .attribute
                        .iter()
                        .find(|a| a.name == "axis")
                        .map_or(1, |a| a.i);
                    Some(dequantize_linear(x, &scale, zero.as_ref(), axis, bad)?)
                }
                _ => None,
            },
            "Transpose" => arg(0)?.map(|x| transpose2(x, bad)).transpose()?,
            _ => None,
        })
    }

    /// The weight `[out, in]` and bias of the linear layer whose bias is the initializer `bias`.
    fn linear(&self, bias: &str, bad: &Fail) -> Result<(F32Tensor, F32Tensor)> {
        let b = self
            .constant(bias, 0, bad)?
            .ok_or_else(|| bad(format!("bias {bias:?} is not in the graph")))?;
        let missing = || bad(format!("no MatMul/Gemm found adding bias {bias:?}"));
        let user = self
            .consumers
            .get(bias)
            .and_then(|v| v.first())
            .ok_or_else(missing)?;
        let weight = match user.op_type.as_str() {
            "Gemm" => {
                let trans_b = user
                    .attribute
                    .iter()
                    .any(|a| a.name == "transB" && a.i == 1);
                let w = self.weight_input(user, bad)?;
                if trans_b { w } else { transpose2(w, bad)? }
            }
            "Add" => {
                let other = user.input.iter().find(|i| *i != bias).ok_or_else(missing)?;
                let mm = self
                    .producer
                    .get(other.as_str())
                    .filter(|n| n.op_type == "MatMul")
                    .ok_or_else(missing)?;
                transpose2(self.weight_input(mm, bad)?, bad)?
            }
            _ => return Err(missing()),
        };
        Ok((weight, b))
    }

    fn weight_input(&self, n: &NodeProto, bad: &Fail) -> Result<F32Tensor> {
        let name = n.input.get(1).map(String::as_str).unwrap_or("");
        self.constant(name, 0, bad)?
            .filter(|w| w.dims.len() == 2)
            .ok_or_else(|| {
                bad(format!(
                    "{} {:?}: input {name:?} is not a constant matrix",
                    n.op_type, n.name
                ))
            })
    }

    /// Integer values of a constant, or of a `Concat` of constants and non-constants (`-1` for an
    /// unknown part): what a `Reshape` target is built from.
    fn shape_values(&self, name: &str, bad: &Fail) -> Result<Vec<i64>> {
        if let Some(t) = self.constant(name, 0, bad)? {
            return Ok(t.values.iter().map(|&v| v as i64).collect());
        }
        let Some(n) = self.producer.get(name).filter(|n| n.op_type == "Concat") else {
            return Ok(vec![-1]);
        };
        let mut out = Vec::new();
        for i in &n.input {
            match self.constant(i, 0, bad)? {
                Some(t) => out.extend(t.values.iter().map(|&v| v as i64)),
                None => out.push(-1),
            }
        }
        Ok(out)
    }

    /// Heads, from the `Reshape` of a projection (its bias named) into `[.., .., heads, head_dim]`.
    fn heads(&self, query_bias: &str, hidden: usize, bad: &Fail) -> Result<Option<usize>> {
        let Some(add) = self.consumers.get(query_bias).and_then(|v| v.first()) else {
            return Ok(None);
        };
        let Some(out) = add.output.first() else {
            return Ok(None);
        };
        for r in self.consumers.get(out.as_str()).into_iter().flatten() {
            if r.op_type != "Reshape" {
                continue;
            }
            let shape = self.shape_values(r.input.get(1).map_or("", String::as_str), bad)?;
            // `[batch, seq, heads, head_dim]`, where any entry may be -1 (inferred) or unknown.
            let &[_, _, h, d] = shape.as_slice() else {
                continue;
            };
            let hidden = hidden as i64;
            let heads = match (h, d) {
                (h, d) if h > 0 && d > 0 && h * d == hidden => h,
                (h, -1) if h > 0 && hidden % h == 0 => h,
                (-1, d) if d > 0 && hidden % d == 0 => hidden / d,
                _ => continue,
            };
            return Ok(Some(heads as usize));
        }
        Ok(None)
    }

    fn read_bert(&self, bad: &Fail) -> Result<(BertConfig, HashMap<String, F32Tensor>)> {
        let names: Vec<String> = self
            .constants
            .keys()
            .map(|s| s.to_string())
            .chain(self.producer.keys().map(|s| s.to_string()))
            .collect();
        let prefix = bert_prefix(names.iter()).ok_or_else(|| {
            bad("no `embeddings.word_embeddings.weight` in the graph: not a BERT export".into())
        })?;
        let mut out = HashMap::new();
        let table = |out: &mut HashMap<String, F32Tensor>, hf: &str| -> Result<F32Tensor> {
            let name = format!("{prefix}{hf}");
            let t = self
                .constant(&name, 0, bad)?
                .filter(|t| t.dims.len() == 2)
                .ok_or_else(|| bad(format!("{name:?} is not a constant matrix")))?;
            out.insert(hf.to_string(), t.clone());
            Ok(t)
        };
        let word = table(&mut out, "embeddings.word_embeddings.weight")?;
        let position = table(&mut out, "embeddings.position_embeddings.weight")?;
        let token_type = table(&mut out, "embeddings.token_type_embeddings.weight")?;
        let (vocab, hidden) = (word.dims[0], word.dims[1]);
        let vector = |out: &mut HashMap<String, F32Tensor>, hf: String| -> Result<()> {
            let t = self
                .constant(&format!("{prefix}{hf}"), 0, bad)?
                .ok_or_else(|| bad(format!("{prefix}{hf} is missing")))?;
            out.insert(hf, t);
            Ok(())
        };
        for part in ["weight", "bias"] {
            vector(&mut out, format!("embeddings.LayerNorm.{part}"))?;
        }
        let mut layers = 0;
        let mut intermediate = 0;
        while self.constants.contains_key(
            format!("{prefix}encoder.layer.{layers}.attention.self.query.bias").as_str(),
        ) {
            let l = format!("encoder.layer.{layers}");
            for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
                for part in ["weight", "bias"] {
                    vector(&mut out, format!("{l}.{norm}.{part}"))?;
                }
            }
            for lin in [
                "attention.self.query",
                "attention.self.key",
                "attention.self.value",
                "attention.output.dense",
                "intermediate.dense",
                "output.dense",
            ] {
                let (w, b) = self.linear(&format!("{prefix}{l}.{lin}.bias"), bad)?;
                if lin == "intermediate.dense" {
                    intermediate = b.values.len();
                }
                out.insert(format!("{l}.{lin}.weight"), w);
                out.insert(format!("{l}.{lin}.bias"), b);
            }
            layers += 1;
        }
        if layers == 0 {
            return Err(bad("the graph has no encoder layers".into()));
        }
        let mut heads = None;
        for proj in ["query", "key", "value"] {
            let b = format!("{prefix}encoder.layer.0.attention.self.{proj}.bias");
            heads = heads.or(self.heads(&b, hidden, bad)?);
        }
        let heads = heads.ok_or_else(|| {
            bad("cannot find the attention head count (no Reshape of the query into heads)".into())
        })?;
        let eps = self
            .g
            .node
            .iter()
            .find(|n| n.op_type == "LayerNormalization")
            .and_then(|n| n.attribute.iter().find(|a| a.name == "epsilon"))
            .map_or(1e-12, |a| f64::from(a.f));
        let has = |op: &str| self.g.node.iter().any(|n| n.op_type == op);
        let activation = if has("Erf") || has("Gelu") {
            BertActivation::Gelu
        } else if has("Tanh") {
            BertActivation::GeluTanh
        } else if has("Relu") {
            BertActivation::Relu
        } else {
            return Err(bad(
                "no Erf, Gelu, Tanh or Relu: unknown feed-forward activation".into(),
            ));
        };
        let config = BertConfig::new(vocab, hidden, layers, heads, intermediate, position.dims[0])
            .with_type_vocab_size(token_type.dims[0])
            .with_layer_norm_eps(eps)
            .with_activation(activation);
        config.validate()?;
        Ok((config, out))
    }
}

/// Values of an initializer as f32 (integers converted exactly where they fit).
fn decode(t: &TensorProto, bad: &Fail) -> Result<F32Tensor> {
    if !t.external_data.is_empty() || t.data_location == 1 {
        return Err(bad(format!(
            "tensor {:?} keeps its data in an external file (not supported)",
            t.name
        )));
    }
    let dims: Vec<usize> = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| {
            bad(format!(
                "tensor {:?} has a negative dimension {:?}",
                t.name, t.dims
            ))
        })?;
    let n = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| bad(format!("tensor {:?}: dims {:?} overflow", t.name, t.dims)))?;
    let raw = &t.raw_data;
    let (width, from_raw): (usize, fn(&[u8]) -> f32) = match t.data_type {
        1 => (4, |c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        2 => (1, |c| f32::from(c[0])),
        3 => (1, |c| f32::from(c[0] as i8)),
        6 => (4, |c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32),
        7 => (8, |c| {
            i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
        }),
        10 => (2, |c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()),
        11 => (8, |c| {
            f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
        }),
        16 => (2, |c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()),
        other => {
            return Err(bad(format!(
                "tensor {:?} has ONNX data type {other}, not supported",
                t.name
            )));
        }
    };
    let values: Vec<f32> = if !raw.is_empty() {
        if Some(raw.len()) != n.checked_mul(width) {
            return Err(bad(format!(
                "tensor {:?}: {} raw bytes for dims {:?} of {width}-byte values",
                t.name,
                raw.len(),
                t.dims
            )));
        }
        raw.chunks_exact(width).map(from_raw).collect()
    } else if !t.float_data.is_empty() {
        t.float_data.clone()
    } else if !t.int64_data.is_empty() {
        t.int64_data.iter().map(|&v| v as f32).collect()
    } else if !t.int32_data.is_empty() {
        // int8/uint8/int32/f16 typed data all travel in int32_data.
        t.int32_data
            .iter()
            .map(|&v| match t.data_type {
                10 => half::f16::from_bits(v as u16).to_f32(),
                16 => half::bf16::from_bits(v as u16).to_f32(),
                _ => v as f32,
            })
            .collect()
    } else if !t.double_data.is_empty() {
        t.double_data.iter().map(|&v| v as f32).collect()
    } else {
        Vec::new()
    };
    if values.len() != n {
        return Err(bad(format!(
            "tensor {:?}: {} values for dims {:?}",
            t.name,
            values.len(),
            t.dims
        )));
    }
    Ok(F32Tensor { dims, values })
}

/// `a * b` with NumPy broadcasting of `b` against `a` (the shapes scale factors have: scalar,
/// `[n, 1]`, `[1, n]`, `[n]`). `sub` (a zero point) is subtracted from `a` first.
fn broadcast_mul(
    a: &F32Tensor,
    b: &F32Tensor,
    sub: Option<&F32Tensor>,
    bad: &Fail,
) -> Result<F32Tensor> {
    // `Mul` is commutative: broadcast the smaller operand (never with a zero point, which belongs to `a`).
    let (a, b) = if sub.is_none() && a.values.len() < b.values.len() {
        (b, a)
    } else {
        (a, b)
    };
    let rank = a.dims.len();
    // Per-axis strides of an operand broadcast against `a` (0 on its size-1 axes).
    let strides = |t: &F32Tensor, what: &str| -> Result<Vec<usize>> {
        let fits = t.dims.len() <= rank;
        let mut d = vec![1; rank.saturating_sub(t.dims.len())];
        d.extend(&t.dims);
        if !fits || !d.iter().zip(&a.dims).all(|(x, y)| x == y || *x == 1) {
            return Err(bad(format!(
                "cannot broadcast {what} {:?} against {:?}",
                t.dims, a.dims
            )));
        }
        let mut st = vec![0; rank];
        let mut stride = 1;
        for k in (0..rank).rev() {
            st[k] = if d[k] == 1 { 0 } else { stride };
            stride *= d[k];
        }
        Ok(st)
    };
    let index = |st: &[usize], flat: usize| -> usize {
        let (mut rem, mut idx) = (flat, 0);
        for k in (0..rank).rev() {
            idx += (rem % a.dims[k]) * st[k];
            rem /= a.dims[k];
        }
        idx
    };
    let bs = strides(b, "operand")?;
    let zs = sub.map(|z| strides(z, "zero point")).transpose()?;
    let values = (0..a.values.len())
        .map(|i| {
            let z = match (sub, &zs) {
                (Some(z), Some(st)) => z.values[index(st, i)],
                _ => 0.0,
            };
            (a.values[i] - z) * b.values[index(&bs, i)]
        })
        .collect();
    Ok(F32Tensor {
        dims: a.dims.clone(),
        values,
    })
}

/// ONNX `DequantizeLinear`: `(x - zero_point) * scale`, per tensor or per `axis`.
fn dequantize_linear(
    x: F32Tensor,
    scale: &F32Tensor,
    zero: Option<&F32Tensor>,
    axis: i64,
    bad: &Fail,
) -> Result<F32Tensor> {
    let rank = x.dims.len() as i64;
    let reshape = |t: &F32Tensor| -> F32Tensor {
        if t.values.len() <= 1 || t.dims.len() == x.dims.len() {
            return t.clone();
        }
        // A 1-D per-axis parameter: place it on `axis`.
        let ax = if axis < 0 { axis + rank } else { axis } as usize;
        let mut dims = vec![1; x.dims.len()];
        if ax < dims.len() {
            dims[ax] = t.values.len();
        }
        F32Tensor {
            dims,
            values: t.values.clone(),
        }
    };
    let s = reshape(scale);
    let z = zero.map(reshape);
    broadcast_mul(&x, &s, z.as_ref(), bad)
}

fn transpose2(x: F32Tensor, bad: &Fail) -> Result<F32Tensor> {
    let [r, c] = x.dims[..] else {
        return Err(bad(format!("expected a matrix, got dims {:?}", x.dims)));
    };
    let mut t = vec![0.0; x.values.len()];
    for (i, row) in x.values.chunks_exact(c).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            t[j * r + i] = v;
        }
    }
    Ok(F32Tensor {
        dims: vec![c, r],
        values: t,
    })
}
