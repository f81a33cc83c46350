//! Llama-family Hugging Face checkpoints (`LlamaForCausalLM`, `MistralForCausalLM`,
//! `Qwen2ForCausalLM`, `Qwen3ForCausalLM`, `Qwen3MoeForCausalLM`, `OlmoeForCausalLM`,
//! `MixtralForCausalLM`, `Phi3ForCausalLM`): `config.json` mapped to [`LlamaConfig`], tensors renamed
//! to GGUF names by a declarative table and put in GGUF layout, so the rest of Cinder sees what
//! llama.cpp's converter would have written. Llama 3's `rope_scaling` (type `llama3`) becomes the
//! per-pair frequency factors the converter would store as `rope_freqs`.
//!
//! RoPE layout: HF Llama/Mistral checkpoints rotate the two halves of each head (NeoX style), GGUF
//! Llama rotates adjacent pairs. llama.cpp's converter permutes the rows of `q_proj`/`k_proj`
//! (`reshape(heads, 2, hd/2, in).swapaxes(1, 2)`) and runs the model with interleaved RoPE; Cinder
//! does the same row permutation here, so a record of an HF checkpoint and the GGUF of the same
//! weights are laid out identically. Qwen2, Qwen3 and Phi-3 keep NeoX RoPE and are not permuted (as
//! in llama.cpp).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cinder_gguf::{GgmlType, SharedBytes};
use cinder_models::layers::{Yarn, yarn_mscale};
use cinder_models::llama::{LlamaConfig, QkNorm, RopeLayout};
use cinder_models::moe::MoeConfig;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

use crate::error::{ImportError, Result};
use crate::gguf_weights::StoredTensor;

/// HF tensor name pattern -> GGUF name pattern (`{i}` = layer index).
const HF_LLAMA_NAMES: &[(&str, &str)] = &[
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
    (
        "model.layers.{i}.input_layernorm.weight",
        "blk.{i}.attn_norm.weight",
    ),
    (
        "model.layers.{i}.self_attn.q_proj.weight",
        "blk.{i}.attn_q.weight",
    ),
    (
        "model.layers.{i}.self_attn.q_proj.bias",
        "blk.{i}.attn_q.bias",
    ),
    (
        "model.layers.{i}.self_attn.k_proj.weight",
        "blk.{i}.attn_k.weight",
    ),
    (
        "model.layers.{i}.self_attn.k_proj.bias",
        "blk.{i}.attn_k.bias",
    ),
    (
        "model.layers.{i}.self_attn.v_proj.weight",
        "blk.{i}.attn_v.weight",
    ),
    (
        "model.layers.{i}.self_attn.v_proj.bias",
        "blk.{i}.attn_v.bias",
    ),
    (
        "model.layers.{i}.self_attn.o_proj.weight",
        "blk.{i}.attn_output.weight",
    ),
    // Phi-3: Q, K and V in one projection, gate and up in another (split on load, as from GGUF)
    (
        "model.layers.{i}.self_attn.qkv_proj.weight",
        "blk.{i}.attn_qkv.weight",
    ),
    (
        "model.layers.{i}.mlp.gate_up_proj.weight",
        "blk.{i}.ffn_up.weight",
    ),
    // Qwen3-MoE: the router and each expert's projections (`{e}` = expert index)
    (
        "model.layers.{i}.mlp.gate.weight",
        "blk.{i}.ffn_gate_inp.weight",
    ),
    // Mixtral: the same under `block_sparse_moe`, the projections named w1 (gate), w3 (up), w2 (down)
    (
        "model.layers.{i}.block_sparse_moe.gate.weight",
        "blk.{i}.ffn_gate_inp.weight",
    ),
    (
        "model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight",
        "blk.{i}.ffn_gate_exps.{e}.weight",
    ),
    (
        "model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight",
        "blk.{i}.ffn_up_exps.{e}.weight",
    ),
    (
        "model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight",
        "blk.{i}.ffn_down_exps.{e}.weight",
    ),
    (
        "model.layers.{i}.mlp.experts.{e}.gate_proj.weight",
        "blk.{i}.ffn_gate_exps.{e}.weight",
    ),
    (
        "model.layers.{i}.mlp.experts.{e}.up_proj.weight",
        "blk.{i}.ffn_up_exps.{e}.weight",
    ),
    (
        "model.layers.{i}.mlp.experts.{e}.down_proj.weight",
        "blk.{i}.ffn_down_exps.{e}.weight",
    ),
    (
        "model.layers.{i}.self_attn.q_norm.weight",
        "blk.{i}.attn_q_norm.weight",
    ),
    (
        "model.layers.{i}.self_attn.k_norm.weight",
        "blk.{i}.attn_k_norm.weight",
    ),
    (
        "model.layers.{i}.post_attention_layernorm.weight",
        "blk.{i}.ffn_norm.weight",
    ),
    (
        "model.layers.{i}.mlp.gate_proj.weight",
        "blk.{i}.ffn_gate.weight",
    ),
    (
        "model.layers.{i}.mlp.up_proj.weight",
        "blk.{i}.ffn_up.weight",
    ),
    (
        "model.layers.{i}.mlp.down_proj.weight",
        "blk.{i}.ffn_down.weight",
    ),
];

/// The HF architecture names this reader maps (what the Llama family registers).
pub(crate) fn hf_names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| HF_ARCHITECTURES.iter().map(|(h, _)| *h).collect())
}

/// Buffers some exporters save that are not weights (recomputed from the config).
const IGNORED_SUFFIXES: &[&str] = &["rotary_emb.inv_freq"];

/// HF `architectures[0]` -> GGUF architecture name.
const HF_ARCHITECTURES: &[(&str, &str)] = &[
    ("LlamaForCausalLM", "llama"),
    ("MistralForCausalLM", "mistral"),
    ("Qwen2ForCausalLM", "qwen2"),
    ("Qwen3ForCausalLM", "qwen3"),
    ("Qwen3MoeForCausalLM", "qwen3moe"),
    ("OlmoeForCausalLM", "olmoe"),
    ("MixtralForCausalLM", "llama"),
    ("Phi3ForCausalLM", "phi3"),
];

/// The experts of a mixture-of-experts checkpoint, `None` for a dense one: Qwen3-MoE
/// (`num_experts`, `moe_intermediate_size`, `norm_topk_prob`, default on), OLMoE (`num_experts`,
/// `intermediate_size`, `norm_topk_prob`, default off) and Mixtral (`num_local_experts`,
/// `intermediate_size`, always renormalized); `num_experts_per_tok` for all. Checkpoints that keep
/// some layers dense (`decoder_sparse_step` above 1 or `mlp_only_layers`) are refused: every block
/// here is MoE, as in llama.cpp's graphs.
fn hf_moe(cfg: &Value, path: &Path, arch: &str) -> Result<Option<MoeConfig>> {
    let (count_key, width_key, normalize_default) = match arch {
        "qwen3moe" => ("num_experts", "moe_intermediate_size", true),
        "olmoe" => ("num_experts", "intermediate_size", false),
        _ if cfg.get("num_local_experts").is_some_and(|v| !v.is_null()) => {
            ("num_local_experts", "intermediate_size", true)
        }
        _ => return Ok(None),
    };
    let need = |key: &str| -> Result<usize> {
        usize_key(cfg, path, key)?.ok_or_else(|| bad(path, format!("{key} is missing")))
    };
    if usize_key(cfg, path, "decoder_sparse_step")?.is_some_and(|s| s != 1)
        || cfg
            .get("mlp_only_layers")
            .and_then(Value::as_array)
            .is_some_and(|l| !l.is_empty())
    {
        return Err(bad(
            path,
            "layers without experts (decoder_sparse_step, mlp_only_layers) are not supported",
        ));
    }
    Ok(Some(MoeConfig {
        n_experts: need(count_key)?,
        n_experts_used: need("num_experts_per_tok")?,
        expert_ffn_dim: need(width_key)?,
        normalize_weights: cfg
            .get("norm_topk_prob")
            .and_then(Value::as_bool)
            .unwrap_or(normalize_default),
    }))
}

/// LongRoPE (Phi-3.5, Phi-4-mini) as llama.cpp's converter and graph apply it: the long factors
/// when the trained context (`max_position_embeddings`, which Cinder serves) exceeds
/// `original_max_position_embeddings`, else the short ones, and every rotated value multiplied by
/// `sqrt(1 + ln(scale) / ln(original))`, `scale` the ratio of the two contexts.
fn longrope(
    cfg: &Value,
    rs: &Value,
    path: &Path,
    rope_dim: usize,
) -> Result<(Vec<f32>, Option<f64>)> {
    let ctx = usize_key(cfg, path, "max_position_embeddings")?
        .ok_or_else(|| bad(path, "max_position_embeddings is missing"))?;
    let original = match usize_key(cfg, path, "original_max_position_embeddings")? {
        Some(o) => o,
        None => usize_key(rs, path, "original_max_position_embeddings")?
            .ok_or_else(|| bad(path, "original_max_position_embeddings is missing"))?,
    };
    let which = if ctx > original {
        "long_factor"
    } else {
        "short_factor"
    };
    let factors: Vec<f32> = rs
        .get(which)
        .and_then(Value::as_array)
        .ok_or_else(|| bad(path, format!("rope_scaling.{which} is missing")))?
        .iter()
        .map(|v| v.as_f64().map(|x| x as f32))
        .collect::<Option<_>>()
        .ok_or_else(|| bad(path, format!("rope_scaling.{which} holds a non-number")))?;
    if factors.len() != rope_dim / 2 {
        return Err(bad(
            path,
            format!(
                "rope_scaling.{which} has {} values for {} rotation pairs",
                factors.len(),
                rope_dim / 2
            ),
        ));
    }
    let scale = ctx as f64 / original as f64;
    let attn = (scale > 1.0).then(|| (1.0 + scale.ln() / (original as f64).ln()).sqrt());
    Ok((factors, attn))
}

/// YaRN as transformers computes it (`_compute_yarn_parameters`): `original_max_position_embeddings`
/// (in `rope_scaling`, else the config's own; required), `factor` (else `max_position_embeddings`
/// over the original context), the
/// betas (32, 1 by default), `truncate` (true), and the attention factor: `attention_factor` when
/// given, else `get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)` when both are
/// given, else `get_mscale(factor)`.
fn hf_yarn(cfg: &Value, rs: &Value, path: &Path) -> Result<Yarn> {
    let original = match usize_key(rs, path, "original_max_position_embeddings")? {
        Some(o) => o,
        None => usize_key(cfg, path, "original_max_position_embeddings")?.ok_or_else(|| {
            bad(
                path,
                "rope_scaling of type yarn without original_max_position_embeddings (the \
                 context before the extension)",
            )
        })?,
    };
    // Without a factor, the ratio of the served context to the original one (DeepSeek-V3's way).
    let factor = match f64_key(rs, path, "factor")? {
        Some(f) => f,
        None => {
            let ctx = usize_key(cfg, path, "max_position_embeddings")?.ok_or_else(|| {
                bad(
                    path,
                    "rope_scaling of type yarn without a factor or max_position_embeddings",
                )
            })?;
            ctx as f64 / original as f64
        }
    };
    let mut y = Yarn::new(factor, original);
    if let Some(b) = f64_key(rs, path, "beta_fast")? {
        y.beta_fast = b;
    }
    if let Some(b) = f64_key(rs, path, "beta_slow")? {
        y.beta_slow = b;
    }
    if let Some(t) = rs.get("truncate").and_then(Value::as_bool) {
        y.truncate = t;
    }
    let (mscale, mscale_all) = (
        f64_key(rs, path, "mscale")?,
        f64_key(rs, path, "mscale_all_dim")?,
    );
    y.attn_factor = match (f64_key(rs, path, "attention_factor")?, mscale, mscale_all) {
        (Some(a), _, _) => a,
        (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
            yarn_mscale(factor, m) / yarn_mscale(factor, all)
        }
        _ => yarn_mscale(factor, 1.0),
    };
    y.validate().map_err(|e| bad(path, e))?;
    Ok(y)
}

/// Llama 3's RoPE scaling as per-pair frequency factors (what llama.cpp's converter stores as
/// `rope_freqs`): pairs whose wavelength is under `original_max_position_embeddings /
/// high_freq_factor` keep their frequency, those over `.. / low_freq_factor` are slowed by `factor`,
/// and those between are blended smoothly.
fn llama3_freq_factors(rs: &Value, path: &Path, theta: f64, rope_dim: usize) -> Result<Vec<f32>> {
    let factor = f64_key(rs, path, "factor")?.unwrap_or(8.0);
    let low = f64_key(rs, path, "low_freq_factor")?.unwrap_or(1.0);
    let high = f64_key(rs, path, "high_freq_factor")?.unwrap_or(4.0);
    let old_ctx = f64_key(rs, path, "original_max_position_embeddings")?.unwrap_or(8192.0);
    if high <= low {
        return Err(bad(
            path,
            format!("rope_scaling: high_freq_factor {high} must exceed low_freq_factor {low}"),
        ));
    }
    let (low_wavelen, high_wavelen) = (old_ctx / low, old_ctx / high);
    Ok((0..rope_dim / 2)
        .map(|i| {
            let freq = theta.powf(-2.0 * i as f64 / rope_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let f = if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            f as f32
        })
        .collect())
}

/// An HF checkpoint read into GGUF names and layout.
#[derive(Debug)]
pub struct HfCheckpoint {
    /// GGUF architecture name (`llama`, `mistral`, `qwen2`)
    pub arch: String,
    /// the model config
    pub config: LlamaConfig,
    /// tensors in GGUF names and layout, in a stable order
    pub tensors: Vec<(String, StoredTensor)>,
    /// the files read (config, weights, index)
    pub sources: Vec<PathBuf>,
    /// `_name_or_path` from the config, if any
    pub name: Option<String>,
}

fn bad(path: &Path, reason: impl Into<String>) -> ImportError {
    ImportError::File {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Whether `dir` looks like an HF checkpoint (`config.json` and SafeTensors weights).
pub fn is_hf_checkpoint(dir: &Path) -> bool {
    dir.join("config.json").is_file()
        && (dir.join("model.safetensors").is_file()
            || dir.join("model.safetensors.index.json").is_file())
}

/// Maps an HF name to its GGUF name.
fn gguf_name(hf: &str) -> Option<String> {
    if let Some(rest) = hf.strip_prefix("model.layers.") {
        let (n, tail) = rest.split_once('.')?;
        let i: usize = n.parse().ok()?;
        let pattern = format!("model.layers.{{i}}.{tail}");
        if let Some((_, g)) = HF_LLAMA_NAMES.iter().find(|(h, _)| *h == pattern) {
            return Some(g.replace("{i}", &i.to_string()));
        }
        // An expert: `mlp.experts.E.…` through the pattern `mlp.experts.{e}.…`.
        let (head, rest) = tail.split_once("experts.")?;
        let (e, after) = rest.split_once('.')?;
        let e: usize = e.parse().ok()?;
        let pattern = format!("model.layers.{{i}}.{head}experts.{{e}}.{after}");
        return HF_LLAMA_NAMES
            .iter()
            .find(|(h, _)| *h == pattern)
            .map(|(_, g)| {
                g.replace("{i}", &i.to_string())
                    .replace("{e}", &e.to_string())
            });
    }
    HF_LLAMA_NAMES
        .iter()
        .find(|(h, _)| *h == hf)
        .map(|(_, g)| g.to_string())
}

fn usize_key(cfg: &Value, path: &Path, key: &str) -> Result<Option<usize>> {
    match cfg.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|&n| n > 0)
            .map(|n| Some(n as usize))
            .ok_or_else(|| bad(path, format!("{key} is {v}, not a positive integer"))),
    }
}

fn f64_key(cfg: &Value, path: &Path, key: &str) -> Result<Option<f64>> {
    match cfg.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite() && *x > 0.0)
            .map(Some)
            .ok_or_else(|| bad(path, format!("{key} is {v}, not a positive number"))),
    }
}

/// `config.json` -> (GGUF arch, config without the tensor-dependent fields, name).
fn read_config(
    dir: &Path,
    arch_override: Option<&str>,
) -> Result<(String, LlamaConfig, Option<String>)> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|source| ImportError::Io {
        path: path.clone(),
        source,
    })?;
    let cfg: Value =
        serde_json::from_str(&text).map_err(|e| bad(&path, format!("not JSON: {e}")))?;
    let declared = cfg
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .unwrap_or("");
    let from_config = HF_ARCHITECTURES
        .iter()
        .find(|(h, _)| *h == declared)
        .map(|(_, g)| *g);
    let arch = match (arch_override, from_config) {
        (Some(a), Some(c)) if a != c => {
            return Err(bad(
                &path,
                format!("--arch {a} but the checkpoint is {declared} ({c})"),
            ));
        }
        (Some(a), _) if HF_ARCHITECTURES.iter().any(|(_, g)| *g == a) => a,
        (Some(a), _) => {
            return Err(ImportError::UnsupportedArch(
                a.to_string(),
                "llama, mistral, qwen2, qwen3, qwen3moe, olmoe, phi3 (SafeTensors)".into(),
            ));
        }
        (None, Some(c)) => c,
        (None, None) => {
            return Err(ImportError::UnsupportedArch(
                declared.to_string(),
                HF_ARCHITECTURES
                    .iter()
                    .map(|(h, _)| *h)
                    .collect::<Vec<_>>()
                    .join(", "),
            ));
        }
    };
    let need = |key: &str| -> Result<usize> {
        usize_key(&cfg, &path, key)?.ok_or_else(|| bad(&path, format!("{key} is missing")))
    };
    let d_model = need("hidden_size")?;
    let n_heads = need("num_attention_heads")?;
    let n_kv_heads = usize_key(&cfg, &path, "num_key_value_heads")?.unwrap_or(n_heads);
    let head_dim = usize_key(&cfg, &path, "head_dim")?.unwrap_or(d_model / n_heads);
    // transformers 5 writes the RoPE settings as one `rope_parameters` object (`rope_type`,
    // `rope_theta` and the scaling's own keys); earlier versions a top-level `rope_theta` and a
    // `rope_scaling` object. Either is read; the top-level keys win where both are present.
    let rope_params = cfg.get("rope_parameters").filter(|v| v.is_object());
    let rope_theta = match f64_key(&cfg, &path, "rope_theta")? {
        Some(t) => t,
        None => match rope_params {
            Some(rp) => f64_key(rp, &path, "rope_theta")?,
            None => None,
        }
        .unwrap_or(10000.0),
    };
    let mut rope_linear_scale = 1.0;
    let mut rope_freq_factors = None;
    let mut rope_attn_factor = None;
    let mut rope_yarn = None;
    // Phi-4-mini rotates 3/4 of each head (`partial_rotary_factor`); the rest pass through.
    let rope_dim = match cfg.get("partial_rotary_factor").and_then(Value::as_f64) {
        Some(f) if f > 0.0 && f <= 1.0 => ((head_dim as f64 * f) as usize) & !1,
        Some(f) => {
            return Err(bad(
                &path,
                format!("partial_rotary_factor {f} out of (0, 1]"),
            ));
        }
        None => head_dim,
    };
    let scaling = cfg
        .get("rope_scaling")
        .filter(|v| !v.is_null())
        .or(rope_params);
    if let Some(rs) = scaling {
        let kind = rs
            .get("rope_type")
            .or_else(|| rs.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("?");
        match kind {
            "linear" => {
                rope_linear_scale = f64_key(rs, &path, "factor")?
                    .ok_or_else(|| bad(&path, "rope_scaling.factor is missing"))?;
            }
            "llama3" => {
                rope_freq_factors = Some(llama3_freq_factors(rs, &path, rope_theta, rope_dim)?);
            }
            "longrope" | "su" => {
                let (factors, attn) = longrope(&cfg, rs, &path, rope_dim)?;
                rope_freq_factors = Some(factors);
                rope_attn_factor = attn;
            }
            "yarn" => rope_yarn = Some(hf_yarn(&cfg, rs, &path)?),
            "default" => {}
            other => {
                return Err(bad(
                    &path,
                    format!(
                        "rope_scaling type {other:?} is not supported (linear, llama3, longrope and yarn are)"
                    ),
                ));
            }
        }
    }
    let config = LlamaConfig::new(
        need("vocab_size")?,
        d_model,
        need("num_hidden_layers")?,
        n_heads,
        n_kv_heads,
        head_dim,
        need("intermediate_size")?,
        rope_dim,
    )
    .with_rms_eps(f64_key(&cfg, &path, "rms_norm_eps")?.unwrap_or(1e-5))
    .with_rope_theta(rope_theta)
    .with_rope_layout(
        if matches!(arch, "qwen2" | "qwen3" | "qwen3moe" | "olmoe" | "phi3") {
            RopeLayout::Neox
        } else {
            RopeLayout::Interleaved
        },
    )
    .with_rope_linear_scale(rope_linear_scale)
    .with_rope_freq_factors(rope_freq_factors)
    .with_rope_attn_factor(rope_attn_factor)
    .with_rope_yarn(rope_yarn)
    .with_qk_norm(match arch {
        "qwen3" | "qwen3moe" => Some(QkNorm::RmsPerHead),
        "olmoe" => Some(QkNorm::RmsFull),
        _ => None,
    })
    .with_moe(hf_moe(&cfg, &path, arch)?)
    .with_context_length(usize_key(&cfg, &path, "max_position_embeddings")?.unwrap_or(4096))
    .with_sliding_window(if arch == "mistral" {
        usize_key(&cfg, &path, "sliding_window")?
    } else {
        None
    });
    let name = cfg
        .get("_name_or_path")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    Ok((arch.to_string(), config, name))
}

/// The weight files: `model.safetensors`, or the shards named by `model.safetensors.index.json`.
fn weight_files(dir: &Path) -> Result<(Vec<PathBuf>, Option<PathBuf>)> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok((vec![single], None));
    }
    let index = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).map_err(|source| ImportError::Io {
        path: index.clone(),
        source,
    })?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| bad(&index, format!("not JSON: {e}")))?;
    let map = v
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| bad(&index, "no weight_map object"))?;
    let mut shards: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let f = file
            .as_str()
            .ok_or_else(|| bad(&index, format!("weight_map[{tensor:?}] is not a file name")))?;
        // Shards live beside the index: no paths that climb out of the directory.
        if f.contains('/') || f.contains('\\') || f.starts_with('.') || !f.ends_with(".safetensors")
        {
            return Err(bad(
                &index,
                format!("shard name {f:?} is not a .safetensors file here"),
            ));
        }
        if !shards.iter().any(|s| s == f) {
            shards.push(f.to_string());
        }
    }
    shards.sort();
    Ok((shards.iter().map(|s| dir.join(s)).collect(), Some(index)))
}

/// Reorders the rows of an HF q/k projection (`heads × hd` rows of `row_bytes`) into GGUF's
/// interleaved-RoPE order: row `h·hd + 2j + t` takes HF row `h·hd + t·hd/2 + j`.
pub fn permute_rope_rows(data: &[u8], heads: usize, hd: usize, row_bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; data.len()];
    let half = hd / 2;
    for h in 0..heads {
        for j in 0..half {
            for t in 0..2 {
                let dst = (h * hd + 2 * j + t) * row_bytes;
                let src = (h * hd + t * half + j) * row_bytes;
                out[dst..dst + row_bytes].copy_from_slice(&data[src..src + row_bytes]);
            }
        }
    }
    out
}

/// Reads an HF checkpoint directory (see the module docs).
pub fn read(dir: &Path, arch_override: Option<&str>) -> Result<HfCheckpoint> {
    let (arch, mut config, name) = read_config(dir, arch_override)?;
    let (files, index) = weight_files(dir)?;
    let permute = !matches!(
        arch.as_str(),
        "qwen2" | "qwen3" | "qwen3moe" | "olmoe" | "phi3"
    );
    let mut tensors: BTreeMap<String, StoredTensor> = BTreeMap::new();
    for file in &files {
        let bytes = SharedBytes::map_file(file).map_err(|source| ImportError::Io {
            path: file.clone(),
            source,
        })?;
        let st = SafeTensors::deserialize(&bytes)
            .map_err(|e| bad(file, format!("not a valid SafeTensors file: {e}")))?;
        let base = bytes.as_ptr() as usize;
        for (hf, view) in st.tensors() {
            if IGNORED_SUFFIXES.iter().any(|s| hf.ends_with(s)) {
                continue;
            }
            let gname = gguf_name(&hf).ok_or_else(|| {
                bad(
                    file,
                    format!("tensor {hf:?} has no mapping for a {arch} model"),
                )
            })?;
            let ty = match view.dtype() {
                Dtype::F32 => GgmlType::F32,
                Dtype::F16 => GgmlType::F16,
                Dtype::BF16 => GgmlType::BF16,
                other => {
                    return Err(bad(
                        file,
                        format!("tensor {hf:?} is {other:?}; F32, F16 and BF16 are read"),
                    ));
                }
            };
            // GGUF dims are the row-major shape reversed.
            let dims: Vec<u64> = view.shape().iter().rev().map(|&d| d as u64).collect();
            let raw = view.data();
            let start = raw.as_ptr() as usize - base;
            let mut data = bytes
                .slice(start, raw.len())
                .ok_or_else(|| bad(file, format!("tensor {hf:?} lies outside the file")))?;
            let heads = if gname.contains(".attn_q.") {
                Some(config.n_heads)
            } else if gname.contains(".attn_k.") {
                Some(config.n_kv_heads)
            } else {
                None
            };
            if let (true, Some(heads)) = (permute, heads) {
                let rows = view.shape().first().copied().unwrap_or(0);
                if rows != heads * config.head_dim || config.head_dim % 2 != 0 {
                    return Err(bad(
                        file,
                        format!(
                            "tensor {hf:?} has {rows} rows, not {heads} heads × {}",
                            config.head_dim
                        ),
                    ));
                }
                let row_bytes = raw.len() / rows;
                data = SharedBytes::from_vec(permute_rope_rows(
                    raw,
                    heads,
                    config.head_dim,
                    row_bytes,
                ));
            }
            if tensors
                .insert(gname.clone(), StoredTensor { ty, dims, data })
                .is_some()
            {
                return Err(bad(file, format!("tensor {gname} appears twice")));
            }
        }
    }
    let embd = tensors
        .get("token_embd.weight")
        .ok_or_else(|| bad(dir, "model.embed_tokens.weight is missing"))?;
    if embd.dims.len() != 2 || embd.dims[0] as usize != config.d_model {
        return Err(bad(
            dir,
            format!(
                "model.embed_tokens.weight has dims {:?}, hidden_size is {}",
                embd.dims, config.d_model
            ),
        ));
    }
    // The embedding's rows are the vocabulary (configs sometimes round vocab_size differently).
    config.vocab_size = embd.dims[1] as usize;
    config.qkv_bias = tensors.contains_key("blk.0.attn_q.bias");
    // QK-norm weights belong to Qwen3 and OLMoE; another architecture's graph would not apply them.
    if config.qk_norm.is_none()
        && let Some(name) = tensors
            .keys()
            .find(|n| n.contains(".attn_q_norm.") || n.contains(".attn_k_norm."))
    {
        return Err(bad(
            dir,
            format!("tensor {name} (a Q/K norm) is not part of a {arch} model"),
        ));
    }
    // Experts without a config that says how to route them would be ignored: refused instead.
    if config.moe.is_none()
        && let Some(name) = tensors.keys().find(|n| n.contains(".ffn_gate_inp."))
    {
        return Err(bad(
            dir,
            format!("tensor {name} (an expert router) but config.json names no experts"),
        ));
    }
    config.tie_embeddings = !tensors.contains_key("output.weight");
    config.validate()?;
    let mut sources = vec![dir.join("config.json")];
    sources.extend(index);
    sources.extend(files);
    Ok(HfCheckpoint {
        arch,
        config,
        tensors: tensors.into_iter().collect(),
        sources,
        name,
    })
}
