//! Gemma 3 sentence-transformers folders (EmbeddingGemma): `config.json` of `model_type`
//! `gemma3_text` mapped to a [`Gemma3Config`], the checkpoint's tensors to module paths through
//! [`GEMMA3_HF_NAMES`], and the folder's `modules.json` pipeline (Transformer, Pooling, Dense…,
//! Normalize) to a [`Gemma3Embedder`].
//!
//! Norm weights: Hugging Face's Gemma RMSNorm multiplies by `1 + w`; Cinder's by `w` (as llama.cpp's
//! converter stores them), so `1` is added on load. Every tensor of the checkpoint must be taken by a
//! module; a leftover one is refused by name (the LM head of a causal checkpoint excepted: it does
//! not take part in an embedding).

use std::collections::HashMap;
use std::path::Path;

use cinder_models::embed::Pooling;
use cinder_models::gemma3::{Gemma3, Gemma3Config};
use cinder_models::gemma3_embed::{Dense, DenseActivation, Gemma3Embedder};
use cinder_runtime::InferenceBackend;
use cinder_tokenizer::Tokenizer;
use serde_json::Value;

use super::named::{F32Tensor, NamedWeights};
use super::{file_err, read_text, safetensors, sentence_max_tokens};
use crate::arch::GEMMA3_HF_NAMES;
use crate::error::{ImportError, Result};

/// Whether a parsed `config.json` is a Gemma 3 text model.
pub(super) fn is_gemma3(config: &Value) -> bool {
    config.get("model_type").and_then(Value::as_str) == Some("gemma3_text")
}

fn usize_of(cfg: &Value, path: &Path, key: &str) -> Result<usize> {
    cfg.get(key)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| file_err(path, format!("`{key}` is missing or not a count")))
}

fn f64_of(cfg: &Value, path: &Path, key: &str, default: f64) -> Result<f64> {
    match cfg.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_f64()
            .ok_or_else(|| file_err(path, format!("`{key}` is not a number"))),
    }
}

/// RoPE bases and the global layers' linear scale: `(global θ, local θ, linear scale)`, from the
/// 4.x keys (`rope_theta`, `rope_local_base_freq`, `rope_scaling`) or the 5.x `rope_parameters`
/// per layer type. Only linear scaling is applied; any other kind is refused.
fn rope(cfg: &Value, path: &Path) -> Result<(f64, f64, f64)> {
    let linear = |scaling: Option<&Value>, what: &str| -> Result<f64> {
        let Some(s) = scaling.filter(|s| !s.is_null()) else {
            return Ok(1.0);
        };
        let kind = s
            .get("rope_type")
            .or_else(|| s.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        match kind {
            "default" => Ok(1.0),
            "linear" => s.get("factor").and_then(Value::as_f64).ok_or_else(|| {
                file_err(
                    path,
                    format!("{what}: linear RoPE scaling without a factor"),
                )
            }),
            other => Err(ImportError::Unsupported(format!(
                "{}: {what} RoPE scaling `{other}`; Cinder applies linear scaling to Gemma 3",
                path.display()
            ))),
        }
    };
    if let Some(p) = cfg.get("rope_parameters").filter(|p| !p.is_null()) {
        let layer = |k: &str| {
            p.get(k)
                .ok_or_else(|| file_err(path, format!("`rope_parameters` has no `{k}` entry")))
        };
        let (g, l) = (layer("full_attention")?, layer("sliding_attention")?);
        let theta = |v: &Value| {
            v.get("rope_theta")
                .and_then(Value::as_f64)
                .ok_or_else(|| file_err(path, "a `rope_parameters` entry has no `rope_theta`"))
        };
        if linear(Some(l), "sliding-window layers'")? != 1.0 {
            return Err(ImportError::Unsupported(format!(
                "{}: scaled RoPE on the sliding-window layers",
                path.display()
            )));
        }
        return Ok((theta(g)?, theta(l)?, linear(Some(g), "global layers'")?));
    }
    Ok((
        f64_of(cfg, path, "rope_theta", 1_000_000.0)?,
        f64_of(cfg, path, "rope_local_base_freq", 10_000.0)?,
        linear(cfg.get("rope_scaling"), "global layers'")?,
    ))
}

/// Every `swa_pattern`-th layer global: read from `layer_types` when present (and checked to be
/// that pattern), else from `sliding_window_pattern`.
fn swa_pattern(cfg: &Value, path: &Path, n_layers: usize) -> Result<usize> {
    let Some(types) = cfg.get("layer_types").and_then(Value::as_array) else {
        return Ok(cfg
            .get("sliding_window_pattern")
            .or_else(|| cfg.get("_sliding_window_pattern"))
            .and_then(Value::as_u64)
            .map_or(6, |n| n as usize));
    };
    let global: Vec<bool> = types
        .iter()
        .map(|t| match t.as_str() {
            Some("full_attention") => Ok(true),
            Some("sliding_attention") => Ok(false),
            _ => Err(file_err(path, format!("layer type {t} is not known"))),
        })
        .collect::<Result<_>>()?;
    let pattern = global
        .iter()
        .position(|&g| g)
        .map_or(n_layers + 1, |i| i + 1);
    let regular = global.len() == n_layers
        && global
            .iter()
            .enumerate()
            .all(|(i, &g)| g == (i + 1).is_multiple_of(pattern));
    if !regular {
        return Err(ImportError::Unsupported(format!(
            "{}: `layer_types` is not one global layer every N; Cinder runs Gemma 3's regular \
             pattern",
            path.display()
        )));
    }
    Ok(pattern)
}

/// `config.json` -> the model's config and whether attention is bidirectional.
pub(super) fn gemma3_config(cfg: &Value, path: &Path) -> Result<(Gemma3Config, bool)> {
    let refuse = |what: String| {
        Err(ImportError::Unsupported(format!(
            "{}: {what}",
            path.display()
        )))
    };
    let act = cfg
        .get("hidden_activation")
        .or_else(|| cfg.get("hidden_act"))
        .and_then(Value::as_str)
        .unwrap_or("gelu_pytorch_tanh");
    if act != "gelu_pytorch_tanh" {
        return refuse(format!(
            "activation `{act}`; Gemma 3 runs tanh-approximated GELU"
        ));
    }
    if cfg.get("attention_bias").and_then(Value::as_bool) == Some(true) {
        return refuse("attention biases (`attention_bias`)".into());
    }
    for k in ["attn_logit_softcapping", "final_logit_softcapping"] {
        if cfg.get(k).is_some_and(|v| !v.is_null()) {
            return refuse(format!("`{k}` is set; Gemma 3 has none"));
        }
    }
    let n_layers = usize_of(cfg, path, "num_hidden_layers")?;
    let (global, local, scale) = rope(cfg, path)?;
    let head_dim = usize_of(cfg, path, "head_dim")?;
    let mut c = Gemma3Config::new(
        usize_of(cfg, path, "vocab_size")?,
        usize_of(cfg, path, "hidden_size")?,
        n_layers,
        usize_of(cfg, path, "num_attention_heads")?,
        usize_of(cfg, path, "num_key_value_heads")?,
        head_dim,
        usize_of(cfg, path, "intermediate_size")?,
        f64_of(cfg, path, "query_pre_attn_scalar", head_dim as f64)?,
    );
    c.rms_eps = f64_of(cfg, path, "rms_norm_eps", 1e-6)?;
    c.rope_theta_global = global;
    c.rope_theta_local = local;
    c.rope_linear_scale_global = scale;
    c.sliding_window = usize_of(cfg, path, "sliding_window")?;
    c.swa_pattern = swa_pattern(cfg, path, n_layers)?;
    c.context_length = usize_of(cfg, path, "max_position_embeddings")?;
    c.validate().map_err(|e| file_err(path, e.to_string()))?;
    let bidirectional = cfg
        .get("use_bidirectional_attention")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok((c, bidirectional))
}

/// One module of a sentence-transformers pipeline (`modules.json`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Module {
    /// the class name's last segment (`Transformer`, `Pooling`, `Dense`, `Normalize`)
    pub kind: String,
    /// its folder, relative to the model's
    pub path: String,
}

/// The pipeline of `modules.json` (absent: Transformer then mean pooling).
pub(super) fn modules(dir: &Path) -> Result<Vec<Module>> {
    let p = dir.join("modules.json");
    if !p.is_file() {
        return Ok(Vec::new());
    }
    let v: Value =
        serde_json::from_str(&read_text(&p)?).map_err(|e| file_err(&p, e.to_string()))?;
    let items = v
        .as_array()
        .ok_or_else(|| file_err(&p, "not a list of modules"))?;
    items
        .iter()
        .map(|m| {
            let kind = m
                .get("type")
                .and_then(Value::as_str)
                .and_then(|t| t.rsplit('.').next())
                .ok_or_else(|| file_err(&p, "a module without a `type`"))?;
            let path = m.get("path").and_then(Value::as_str).unwrap_or("");
            Ok(Module {
                kind: kind.to_string(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// A `Dense` module as read from its folder, not yet on a device.
pub(super) struct DenseParts {
    w: Vec<f32>,
    n_out: usize,
    n_in: usize,
    b: Option<Vec<f32>>,
    activation: DenseActivation,
}

impl DenseParts {
    fn build<B: InferenceBackend>(self, device: &B::Device) -> Result<Dense<B>> {
        Ok(Dense::new(
            self.w,
            self.n_out,
            self.n_in,
            self.b,
            self.activation,
            device,
        )?)
    }
}

/// A `Dense` module's folder: `config.json` and `model.safetensors` (`linear.weight`,
/// `linear.bias`).
fn dense(dir: &Path) -> Result<DenseParts> {
    let cfg_path = dir.join("config.json");
    let cfg: Value = serde_json::from_str(&read_text(&cfg_path)?)
        .map_err(|e| file_err(&cfg_path, e.to_string()))?;
    let n_in = usize_of(&cfg, &cfg_path, "in_features")?;
    let n_out = usize_of(&cfg, &cfg_path, "out_features")?;
    let bias = cfg.get("bias").and_then(Value::as_bool).unwrap_or(true);
    let act = cfg
        .get("activation_function")
        .and_then(Value::as_str)
        .unwrap_or("torch.nn.modules.activation.Tanh");
    let activation = match act.rsplit('.').next() {
        Some("Identity") => DenseActivation::Identity,
        Some("Tanh") => DenseActivation::Tanh,
        _ => {
            return Err(ImportError::Unsupported(format!(
                "{}: Dense activation `{act}`; Cinder applies Identity and Tanh",
                cfg_path.display()
            )));
        }
    };
    let weights = dir.join("model.safetensors");
    if !weights.is_file() {
        return Err(file_err(
            dir,
            "no model.safetensors in this Dense module (pickle checkpoints are not loaded)",
        ));
    }
    let mut t = safetensors::read_f32_tensors(&weights)?;
    let mut take = |name: &str, want: &[usize]| -> Result<Option<Vec<f32>>> {
        match t.remove(name) {
            None => Ok(None),
            Some(x) if x.dims == want => Ok(Some(x.values)),
            Some(x) => Err(file_err(
                &weights,
                format!("{name} has shape {:?}, the config implies {want:?}", x.dims),
            )),
        }
    };
    let w = take("linear.weight", &[n_out, n_in])?
        .ok_or_else(|| file_err(&weights, "no `linear.weight` tensor"))?;
    let b = if bias {
        Some(
            take("linear.bias", &[n_out])?
                .ok_or_else(|| file_err(&weights, "the config has a bias, the file none"))?,
        )
    } else {
        None
    };
    if let Some(extra) = t.keys().next() {
        return Err(file_err(
            &weights,
            format!("tensor {extra:?} is not part of a Dense module"),
        ));
    }
    Ok(DenseParts {
        w,
        n_out,
        n_in,
        b,
        activation,
    })
}

/// Adds 1 to every norm weight (`…norm.weight`): Hugging Face's Gemma norms scale by `1 + w`.
fn shift_norms(tensors: &mut HashMap<String, F32Tensor>) {
    for (name, t) in tensors.iter_mut() {
        if name.ends_with("norm.weight") {
            t.values.iter_mut().for_each(|w| *w += 1.0);
        }
    }
}

/// A Gemma 3 sentence-transformers folder as read (the encoder's config and tensors, the
/// pipeline's pooling and Dense modules), not yet on a device.
pub(super) struct GemmaParts {
    pub config: Gemma3Config,
    pub bidirectional: bool,
    pub pooling: Pooling,
    dense: Vec<DenseParts>,
    tensors: HashMap<String, F32Tensor>,
    prefix: String,
    /// `max_seq_length` of `sentence_bert_config.json`
    pub max_tokens: Option<usize>,
}

impl GemmaParts {
    /// The vector width: the last Dense module's output, or the model's width.
    pub fn dim(&self) -> usize {
        self.dense.last().map_or(self.config.d_model, |d| d.n_out)
    }
}

/// Reads a Gemma 3 sentence-transformers folder (`config` is its parsed `config.json`).
pub(super) fn read(weights: &Path, dir: &Path, config: &Value) -> Result<GemmaParts> {
    let cfg_path = dir.join("config.json");
    let (cfg, bidirectional) = gemma3_config(config, &cfg_path)?;
    let mut pooling = Pooling::Mean;
    let mut dense_layers = Vec::new();
    for (i, m) in modules(dir)?.iter().enumerate() {
        let at = dir.join(&m.path);
        match (i, m.kind.as_str()) {
            (0, "Transformer") => {}
            (_, "Pooling") if dense_layers.is_empty() => {
                pooling =
                    Pooling::from_sentence_transformers(&read_text(&at.join("config.json"))?)?;
            }
            (_, "Dense") => dense_layers.push(dense(&at)?),
            // the caller asks for normalization (the API's vectors are always normalized)
            (_, "Normalize") => {}
            (_, kind) => {
                return Err(ImportError::Unsupported(format!(
                    "{}: module {i} is `{kind}` at this place of the pipeline; Cinder runs \
                     Transformer, Pooling, Dense and Normalize in that order",
                    dir.join("modules.json").display()
                )));
            }
        }
    }
    let mut tensors = safetensors::read_f32_tensors(weights)?;
    let prefix = tensors
        .keys()
        .filter_map(|n| n.strip_suffix("embed_tokens.weight"))
        .filter(|p| p.is_empty() || p.ends_with('.'))
        .min_by_key(|p| p.len())
        .map(str::to_string)
        .ok_or_else(|| file_err(weights, "no `embed_tokens.weight`: not a Gemma checkpoint"))?;
    // a causal checkpoint's head (tied or not) does not take part in an embedding
    tensors.remove("lm_head.weight");
    shift_norms(&mut tensors);
    Ok(GemmaParts {
        config: cfg,
        bidirectional,
        pooling,
        dense: dense_layers,
        tensors,
        prefix,
        max_tokens: sentence_max_tokens(dir)?,
    })
}

/// Builds the embedder of [`read`]'s parts on `device` (`weights` names the file in errors).
pub(super) fn build<B: InferenceBackend>(
    parts: GemmaParts,
    name: &str,
    tokenizer: Tokenizer,
    weights: &Path,
    device: &B::Device,
) -> Result<Gemma3Embedder<B>> {
    let GemmaParts {
        config,
        bidirectional,
        pooling,
        dense,
        tensors,
        prefix,
        max_tokens,
    } = parts;
    let mut src = NamedWeights::<B>::new(tensors, prefix, GEMMA3_HF_NAMES, device.clone());
    let model = Gemma3::load(config, &mut src)?;
    let left = src.remaining();
    if !left.is_empty() {
        return Err(file_err(
            weights,
            format!(
                "{} tensors Cinder's Gemma 3 does not use, e.g. {:?}: refusing to run without them",
                left.len(),
                &left[..left.len().min(3)]
            ),
        ));
    }
    let dense = dense
        .into_iter()
        .map(|d| d.build::<B>(device))
        .collect::<Result<Vec<_>>>()?;
    let e = Gemma3Embedder::new(
        name,
        model,
        tokenizer,
        pooling,
        dense,
        bidirectional,
        max_tokens.unwrap_or(usize::MAX),
    )?;
    tracing::info!(
        model = name,
        dim = e.dim(),
        bidirectional,
        max_tokens = e.max_tokens(),
        "Gemma 3 embedding model loaded"
    );
    Ok(e)
}
