//! Per-architecture knowledge: config from GGUF metadata and the declarative table mapping a model's
//! module paths to GGUF tensor names.

use cinder_gguf::{GgufError, GgufFile};
use cinder_models::gemma3::Gemma3Config;
use cinder_models::layers::Yarn;
use cinder_models::llama::{LlamaConfig, QkNorm, RopeLayout};
use cinder_models::moe::MoeConfig;

use crate::error::{ImportError, Result};

/// GGUF `general.architecture` values served by [`cinder_models::llama`].
pub const LLAMA_FAMILY: &[&str] = &[
    "llama", "mistral", "qwen2", "qwen3", "qwen3moe", "olmoe", "phi3",
];

/// Module path pattern -> GGUF tensor name pattern (`{i}` = block index).
pub type NameTable = &'static [(&'static str, &'static str)];

/// The names every Llama-style decoder block shares.
const DECODER_NAMES: NameTable = &[
    ("embed", "token_embd"),
    ("norm", "output_norm"),
    ("lm_head", "output"),
    ("layers.{i}.attn_norm", "blk.{i}.attn_norm"),
    ("layers.{i}.attn.wq", "blk.{i}.attn_q"),
    ("layers.{i}.attn.wk", "blk.{i}.attn_k"),
    ("layers.{i}.attn.wv", "blk.{i}.attn_v"),
    ("layers.{i}.attn.wo", "blk.{i}.attn_output"),
    ("layers.{i}.ffn_norm", "blk.{i}.ffn_norm"),
];

/// A dense SwiGLU MLP (every decoder but the mixtures of experts).
const MLP_NAMES: NameTable = &[
    ("layers.{i}.mlp.gate", "blk.{i}.ffn_gate"),
    ("layers.{i}.mlp.up", "blk.{i}.ffn_up"),
    ("layers.{i}.mlp.down", "blk.{i}.ffn_down"),
];

/// Per-head RMSNorms of Q and K (Qwen3, Gemma 3).
const QK_NORM_NAMES: NameTable = &[
    ("layers.{i}.attn.q_norm", "blk.{i}.attn_q_norm"),
    ("layers.{i}.attn.k_norm", "blk.{i}.attn_k_norm"),
];

/// Phi-3's fused projections: Q, K and V in one tensor (its fused gate-up is stored as `ffn_up` of
/// twice the width); split into the Llama block's parts on load ([`crate::fused`]).
const FUSED_QKV_NAMES: NameTable = &[("layers.{i}.attn.wqkv", "blk.{i}.attn_qkv")];

/// LongRoPE's two sets of RoPE frequency factors (Phi-3.5, Phi-4-mini): one is read into the config
/// by the context the model runs at ([`rope_freq_factors`]).
const LONGROPE_NAMES: NameTable = &[
    ("rope_factors_long", "rope_factors_long"),
    ("rope_factors_short", "rope_factors_short"),
];

/// Llama 3's RoPE frequency factors: read into the config ([`LlamaConfig::rope_freq_factors`]),
/// not loaded as a module weight.
const ROPE_FREQS_NAMES: NameTable = &[("rope_freqs", "rope_freqs")];

/// What Gemma 3 adds besides QK-norms: post-norms.
const GEMMA3_POST_NORM_NAMES: NameTable = &[
    ("layers.{i}.post_attn_norm", "blk.{i}.post_attention_norm"),
    ("layers.{i}.post_ffn_norm", "blk.{i}.post_ffw_norm"),
];

/// Mixture-of-experts layers: the router and the 3-D expert tensors (`[in, out, n_experts]`),
/// expert `{e}` a zero-copy slice of its tensor ([`crate::fused`]).
const MOE_NAMES: NameTable = &[
    ("layers.{i}.moe.router", "blk.{i}.ffn_gate_inp"),
    ("layers.{i}.moe.gate.{e}", "blk.{i}.ffn_gate_exps.{e}"),
    ("layers.{i}.moe.up.{e}", "blk.{i}.ffn_up_exps.{e}"),
    ("layers.{i}.moe.down.{e}", "blk.{i}.ffn_down_exps.{e}"),
];

/// Name tables the Llama family's weights load through (every member's tensors).
pub const LLAMA_GGUF_NAMES: &[NameTable] = &[DECODER_NAMES, MLP_NAMES, QK_NORM_NAMES, MOE_NAMES];

/// The tensors a file of one Llama-family architecture may hold: what llama.cpp's graph for that
/// architecture reads, so a file is never run without a tensor its own engine would apply. A Llama
/// file is a mixture of experts (Mixtral) when it says so (`llama.expert_count`); then it may hold
/// experts and no dense MLP, otherwise the reverse.
pub fn llama_family_tables(f: &GgufFile, arch: &str) -> Result<&'static [NameTable]> {
    let with_experts = opt_usize(f, &key(arch, "expert_count"))?.is_some_and(|n| n > 0);
    Ok(match arch {
        "qwen2" => &[DECODER_NAMES, MLP_NAMES],
        "qwen3" => &[DECODER_NAMES, MLP_NAMES, QK_NORM_NAMES],
        "qwen3moe" | "olmoe" => &[DECODER_NAMES, QK_NORM_NAMES, MOE_NAMES],
        "phi3" => &[DECODER_NAMES, MLP_NAMES, FUSED_QKV_NAMES, LONGROPE_NAMES],
        _ if with_experts => &[DECODER_NAMES, ROPE_FREQS_NAMES, MOE_NAMES],
        _ => &[DECODER_NAMES, MLP_NAMES, ROPE_FREQS_NAMES],
    })
}

/// Name tables of Gemma 3.
pub const GEMMA3_GGUF_NAMES: &[NameTable] = &[
    DECODER_NAMES,
    MLP_NAMES,
    QK_NORM_NAMES,
    GEMMA3_POST_NORM_NAMES,
];

/// Maps a module path (`layers.3.attn.wq`) to its GGUF base name (`blk.3.attn_q`) through `tables`.
pub fn map_name(tables: &[NameTable], path: &str) -> Option<String> {
    // Split a leading `layers.N.` into the index and the rest.
    let (index, pattern) = match path.strip_prefix("layers.") {
        Some(rest) => {
            let (n, tail) = rest.split_once('.')?;
            let _: usize = n.parse().ok()?;
            (Some(n), format!("layers.{{i}}.{tail}"))
        }
        None => (None, path.to_string()),
    };
    let find = |pattern: &str| {
        tables
            .iter()
            .flat_map(|t| t.iter())
            .find(|(m, _)| *m == pattern)
            .map(|(_, g)| *g)
    };
    let with_layer = |gguf: &str| match index {
        Some(n) => gguf.replace("{i}", n),
        None => gguf.to_string(),
    };
    if let Some(gguf) = find(&pattern) {
        return Some(with_layer(gguf));
    }
    // An expert: `layers.N.moe.gate.E` through the pattern `layers.{i}.moe.gate.{e}`.
    let (head, e) = pattern.rsplit_once('.')?;
    let _: usize = e.parse().ok()?;
    let gguf = find(&format!("{head}.{{e}}"))?;
    Some(with_layer(gguf).replace("{e}", e))
}

/// Key `{arch}.{suffix}`.
fn key(arch: &str, suffix: &str) -> String {
    format!("{arch}.{suffix}")
}

/// A usize-valued key (refusing absurd values that would overflow later arithmetic).
fn get_usize(f: &GgufFile, k: &str) -> Result<usize> {
    let v = f.get_u64(k)?;
    checked_usize(k, v)
}

fn opt_usize(f: &GgufFile, k: &str) -> Result<Option<usize>> {
    f.opt_u64(k)?.map(|v| checked_usize(k, v)).transpose()
}

fn checked_usize(k: &str, v: u64) -> Result<usize> {
    if v > (1 << 32) {
        return Err(GgufError::BadKey {
            key: k.to_string(),
            reason: format!("value {v} is implausibly large"),
        }
        .into());
    }
    Ok(v as usize)
}

/// The embedding table's rows (the vocabulary size the weights were trained with).
pub fn embedding_rows(f: &GgufFile) -> Result<usize> {
    let t = f.require_tensor("token_embd.weight")?;
    match t.dims.as_slice() {
        [_, rows] => Ok(*rows as usize),
        dims => Err(GgufError::BadTensorShape {
            name: t.name.clone(),
            reason: format!("expected 2 dims, found {dims:?}"),
            offset: 0,
        }
        .into()),
    }
}

/// The transformer shape every decoder architecture stores under `{arch}.*`.
struct Dims {
    d_model: usize,
    n_layers: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

fn dims(f: &GgufFile, arch: &str) -> Result<Dims> {
    let d_model = get_usize(f, &key(arch, "embedding_length"))?;
    let n_layers = get_usize(f, &key(arch, "block_count"))?;
    let n_heads = get_usize(f, &key(arch, "attention.head_count"))?;
    let n_kv_heads = opt_usize(f, &key(arch, "attention.head_count_kv"))?.unwrap_or(n_heads);
    if n_heads == 0 {
        return Err(GgufError::BadKey {
            key: key(arch, "attention.head_count"),
            reason: "is 0".into(),
        }
        .into());
    }
    let head_dim = opt_usize(f, &key(arch, "attention.key_length"))?.unwrap_or(d_model / n_heads);
    Ok(Dims {
        d_model,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
    })
}

/// The RoPE scaling of a Llama-family file: linear (a factor), YaRN, or none (`(1, None)`).
fn rope_scaling(f: &GgufFile, arch: &str) -> Result<(f64, Option<Yarn>)> {
    let k = key(arch, "rope.scaling.type");
    match f.get(&k).map(|v| v.as_str()) {
        Some(Some("yarn")) => Ok((1.0, Some(gguf_yarn(f, arch)?))),
        _ => Ok((rope_linear_scale(f, arch)?, None)),
    }
}

/// YaRN from `rope.scaling.*`, as llama.cpp reads it for the Llama family: the factor and the
/// original context are required (without the original context the ramp has no anchor; llama.cpp
/// would fall back to the trained context, which the converter sets to the extended one), the betas
/// default to 32 and 1, and the attention factor is `1 + 0.1 · ln(factor)` (times
/// `rope.scaling.attn_factor`, applied as for any file).
fn gguf_yarn(f: &GgufFile, arch: &str) -> Result<Yarn> {
    let missing = |what: &str| {
        ImportError::Config(format!(
            "{} = yarn but {} is missing: YaRN needs the scaling factor and the original context",
            key(arch, "rope.scaling.type"),
            key(arch, what)
        ))
    };
    let factor = f
        .opt_f64(&key(arch, "rope.scaling.factor"))?
        .ok_or_else(|| missing("rope.scaling.factor"))?;
    let original = opt_usize(f, &key(arch, "rope.scaling.original_context_length"))?
        .ok_or_else(|| missing("rope.scaling.original_context_length"))?;
    let mut y = Yarn::new(factor, original);
    if let Some(b) = f.opt_f64(&key(arch, "rope.scaling.yarn_beta_fast"))? {
        y.beta_fast = b;
    }
    if let Some(b) = f.opt_f64(&key(arch, "rope.scaling.yarn_beta_slow"))? {
        y.beta_slow = b;
    }
    y.validate().map_err(ImportError::Config)?;
    Ok(y)
}

/// Linear RoPE scaling factor (`rope.scaling.type = linear`), 1 when absent or `none`. Any other
/// scaling type (YaRN where the architecture has no use for it, LongRoPE) changes every angle: a
/// file asking for one is refused rather than run with plain RoPE. (Llama 3's scaling is not a
/// type: its factors are the `rope_freqs` tensor.)
fn rope_linear_scale(f: &GgufFile, arch: &str) -> Result<f64> {
    let k = key(arch, "rope.scaling.type");
    match f.get(&k).map(|v| v.as_str()) {
        None | Some(Some("none")) => Ok(1.0),
        Some(Some("linear")) => Ok(f.opt_f64(&key(arch, "rope.scaling.factor"))?.unwrap_or(1.0)),
        Some(other) => Err(ImportError::Unsupported(format!(
            "{k} = {:?}: only linear RoPE scaling is implemented here (YaRN for the Llama family)",
            other.unwrap_or("(not a string)")
        ))),
    }
}

/// Refuses a file holding a tensor the architecture's graph would not use (Llama 3's
/// `rope_freqs`, an MoE router, a fused QKV): running without it would be silently wrong. Every
/// tensor must be `<name>.weight` or `<name>.bias` with `<name>` a GGUF pattern of `tables`.
pub fn check_tensor_names(f: &GgufFile, arch: &str, tables: &[NameTable]) -> Result<()> {
    let known = |base: &str| {
        tables
            .iter()
            .flat_map(|t| t.iter())
            // an expert's pattern names its 3-D tensor without the expert index
            .map(|(_, pattern)| pattern.strip_suffix(".{e}").unwrap_or(pattern))
            .any(|pattern| match pattern.split_once("{i}") {
                Some((pre, post)) => base
                    .strip_prefix(pre)
                    .and_then(|rest| rest.strip_suffix(post))
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
                None => base == pattern,
            })
    };
    for t in f.tensors() {
        let base = t
            .name
            .strip_suffix(".weight")
            .or_else(|| t.name.strip_suffix(".bias"));
        if !base.is_some_and(known) {
            return Err(ImportError::Unsupported(format!(
                "tensor {:?} is not part of Cinder's {arch} graph; refusing to run without it",
                t.name
            )));
        }
    }
    Ok(())
}

/// Per-pair RoPE frequency factors, if the file has any: Llama 3's `rope_freqs`, or LongRoPE's
/// `rope_factors_long` / `rope_factors_short`, chosen as llama.cpp chooses them: the long ones when
/// the context the model runs at (`context_length`: Cinder serves the trained context) exceeds
/// `rope.scaling.original_context_length`.
fn rope_freq_factors(
    f: &GgufFile,
    arch: &str,
    rope_dim: usize,
    context_length: usize,
) -> Result<Option<Vec<f32>>> {
    let original =
        opt_usize(f, &key(arch, "rope.scaling.original_context_length"))?.unwrap_or(context_length);
    let long = if context_length > original {
        "rope_factors_long.weight"
    } else {
        "rope_factors_short.weight"
    };
    // Both LongRoPE sets are checked, as llama.cpp loads both.
    for name in ["rope_factors_long.weight", "rope_factors_short.weight"] {
        if f.tensor(name).is_some() {
            factors_tensor(f, name, rope_dim)?;
        }
    }
    for name in ["rope_freqs.weight", long] {
        if f.tensor(name).is_some() {
            return factors_tensor(f, name, rope_dim).map(Some);
        }
    }
    Ok(None)
}

/// RoPE attention factor (`rope.scaling.attn_factor`, LongRoPE files): llama.cpp multiplies every
/// rotated Q and K value by it.
fn rope_attn_factor(f: &GgufFile, arch: &str) -> Result<Option<f64>> {
    Ok(f.opt_f64(&key(arch, "rope.scaling.attn_factor"))?
        .filter(|&a| a != 1.0))
}

/// A `[rope_dim / 2]` factors tensor, as f32.
fn factors_tensor(f: &GgufFile, name: &str, rope_dim: usize) -> Result<Vec<f32>> {
    let t = f.require_tensor(name)?;
    let bad = |reason: String| -> ImportError {
        GgufError::BadTensorShape {
            name: t.name.clone(),
            reason,
            offset: 0,
        }
        .into()
    };
    if t.dims.as_slice() != [(rope_dim / 2) as u64] {
        return Err(bad(format!(
            "dims {:?}, expected [{}] (rope dimension count / 2)",
            t.dims,
            rope_dim / 2
        )));
    }
    let data = f.tensor_shared(t);
    Ok(cinder_gguf::dequant::dequantize(
        t.ggml_type,
        &data,
        rope_dim / 2,
    )?)
}

/// The mixture-of-experts layout (`{arch}.expert_count` and friends), for the architectures whose
/// blocks are MoE (Qwen3-MoE, OLMoE, and Llama files with experts: Mixtral). As in llama.cpp's
/// graphs, Qwen3-MoE and Llama renormalize the chosen experts' weights, OLMoE does not.
fn moe_config(f: &GgufFile, arch: &str) -> Result<Option<MoeConfig>> {
    let declared = opt_usize(f, &key(arch, "expert_count"))?;
    let is_moe = match arch {
        "qwen3moe" | "olmoe" => true,
        "llama" | "mistral" => declared.is_some_and(|n| n > 0),
        _ => false,
    };
    if !is_moe {
        return Ok(None);
    }
    let n_experts = get_usize(f, &key(arch, "expert_count"))?;
    let n_experts_used = get_usize(f, &key(arch, "expert_used_count"))?;
    // llama.cpp: the expert width key, else (Qwen3-MoE) the dense width split over the used
    // experts, else (Llama, OLMoE) the dense width itself
    let ff = get_usize(f, &key(arch, "feed_forward_length"));
    let expert_ffn_dim = match opt_usize(f, &key(arch, "expert_feed_forward_length"))? {
        Some(n) => n,
        None if arch == "qwen3moe" => ff? / n_experts_used.max(1),
        None => ff?,
    };
    Ok(Some(MoeConfig {
        n_experts,
        n_experts_used,
        expert_ffn_dim,
        normalize_weights: arch != "olmoe",
    }))
}

/// Builds a [`LlamaConfig`] from GGUF metadata (`llama.*`, `mistral.*`, `qwen2.*`, `qwen3.*`).
pub fn llama_config(f: &GgufFile) -> Result<LlamaConfig> {
    let arch = f.architecture()?;
    if !LLAMA_FAMILY.contains(&arch) {
        return Err(ImportError::UnsupportedArch(
            arch.to_string(),
            LLAMA_FAMILY.join(", "),
        ));
    }
    let Dims {
        d_model,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
    } = dims(f, arch)?;
    let ffn_dim = get_usize(f, &key(arch, "feed_forward_length"))?;
    let rms_eps = f
        .opt_f64(&key(arch, "attention.layer_norm_rms_epsilon"))?
        .unwrap_or(1e-5);
    let rope_theta = f.opt_f64(&key(arch, "rope.freq_base"))?.unwrap_or(10000.0);
    let rope_dim = opt_usize(f, &key(arch, "rope.dimension_count"))?.unwrap_or(head_dim);
    let context_length = opt_usize(f, &key(arch, "context_length"))?.unwrap_or(4096);
    let (rope_linear_scale, rope_yarn) = rope_scaling(f, arch)?;
    // llama.cpp: LLAMA_ROPE_TYPE_NORM for llama/mistral (the converter permuted Q/K), NEOX for
    // qwen2, qwen3 and phi3.
    let rope_layout = match arch {
        "qwen2" | "qwen3" | "qwen3moe" | "olmoe" | "phi3" => RopeLayout::Neox,
        _ => RopeLayout::Interleaved,
    };
    let cfg = LlamaConfig::new(
        embedding_rows(f)?,
        d_model,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn_dim,
        rope_dim,
    )
    .with_rms_eps(rms_eps)
    .with_rope_theta(rope_theta)
    .with_rope_layout(rope_layout)
    .with_rope_linear_scale(rope_linear_scale)
    .with_context_length(context_length)
    .with_qkv_bias(f.tensor("blk.0.attn_q.bias").is_some())
    .with_tie_embeddings(f.tensor("output.weight").is_none())
    .with_rope_freq_factors(rope_freq_factors(f, arch, rope_dim, context_length)?)
    .with_rope_attn_factor(rope_attn_factor(f, arch)?)
    .with_rope_yarn(rope_yarn)
    .with_qk_norm(match arch {
        "qwen3" | "qwen3moe" => Some(QkNorm::RmsPerHead),
        "olmoe" => Some(QkNorm::RmsFull),
        _ => None,
    })
    .with_moe(moe_config(f, arch)?);
    cfg.validate()?;
    Ok(cfg)
}

/// Builds a [`Gemma3Config`] from `gemma3.*` metadata.
pub fn gemma3_config(f: &GgufFile) -> Result<Gemma3Config> {
    let arch = "gemma3";
    let Dims {
        d_model,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
    } = dims(f, arch)?;
    // Gemma 3 scales queries by 1/sqrt(query_pre_attn_scalar): head_dim for every size but 27B (62
    // layers), which uses d_model / n_heads — the same rule llama.cpp applies.
    let query_pre_attn_scalar = if n_layers == 62 {
        (d_model / n_heads) as f64
    } else {
        head_dim as f64
    };
    let rope_linear_scale = rope_linear_scale(f, arch)?;
    let cfg = Gemma3Config::new(
        embedding_rows(f)?,
        d_model,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        get_usize(f, &key(arch, "feed_forward_length"))?,
        query_pre_attn_scalar,
    )
    .with_rms_eps(
        f.opt_f64(&key(arch, "attention.layer_norm_rms_epsilon"))?
            .unwrap_or(1e-6),
    )
    .with_rope_theta_global(
        f.opt_f64(&key(arch, "rope.freq_base"))?
            .unwrap_or(1_000_000.0),
    )
    .with_rope_linear_scale_global(rope_linear_scale)
    .with_sliding_window(opt_usize(f, &key(arch, "attention.sliding_window"))?.unwrap_or(512))
    .with_swa_pattern(opt_usize(f, &key(arch, "attention.sliding_window_pattern"))?.unwrap_or(6))
    .with_context_length(opt_usize(f, &key(arch, "context_length"))?.unwrap_or(32768));
    cfg.validate()?;
    Ok(cfg)
}

/// BERT module paths -> HF checkpoint names (after the checkpoint's own prefix such as `bert.`).
pub const BERT_HF_NAMES: &[NameTable] = &[&[
    ("embeddings.word", "embeddings.word_embeddings"),
    ("embeddings.position", "embeddings.position_embeddings"),
    ("embeddings.token_type", "embeddings.token_type_embeddings"),
    ("embeddings.norm", "embeddings.LayerNorm"),
    (
        "layers.{i}.attn.q",
        "encoder.layer.{i}.attention.self.query",
    ),
    ("layers.{i}.attn.k", "encoder.layer.{i}.attention.self.key"),
    (
        "layers.{i}.attn.v",
        "encoder.layer.{i}.attention.self.value",
    ),
    (
        "layers.{i}.attn.o",
        "encoder.layer.{i}.attention.output.dense",
    ),
    (
        "layers.{i}.attn_norm",
        "encoder.layer.{i}.attention.output.LayerNorm",
    ),
    ("layers.{i}.ffn.up", "encoder.layer.{i}.intermediate.dense"),
    ("layers.{i}.ffn.down", "encoder.layer.{i}.output.dense"),
    ("layers.{i}.ffn_norm", "encoder.layer.{i}.output.LayerNorm"),
]];

/// Gemma 3 in a Hugging Face checkpoint (`Gemma3TextModel`, as EmbeddingGemma ships), module path
/// -> checkpoint name without its prefix (`""` or `model.`).
pub const GEMMA3_HF_NAMES: &[NameTable] = &[&[
    ("embed", "embed_tokens"),
    ("norm", "norm"),
    ("layers.{i}.attn_norm", "layers.{i}.input_layernorm"),
    ("layers.{i}.attn.wq", "layers.{i}.self_attn.q_proj"),
    ("layers.{i}.attn.wk", "layers.{i}.self_attn.k_proj"),
    ("layers.{i}.attn.wv", "layers.{i}.self_attn.v_proj"),
    ("layers.{i}.attn.wo", "layers.{i}.self_attn.o_proj"),
    ("layers.{i}.attn.q_norm", "layers.{i}.self_attn.q_norm"),
    ("layers.{i}.attn.k_norm", "layers.{i}.self_attn.k_norm"),
    (
        "layers.{i}.post_attn_norm",
        "layers.{i}.post_attention_layernorm",
    ),
    (
        "layers.{i}.ffn_norm",
        "layers.{i}.pre_feedforward_layernorm",
    ),
    ("layers.{i}.mlp.gate", "layers.{i}.mlp.gate_proj"),
    ("layers.{i}.mlp.up", "layers.{i}.mlp.up_proj"),
    ("layers.{i}.mlp.down", "layers.{i}.mlp.down_proj"),
    (
        "layers.{i}.post_ffn_norm",
        "layers.{i}.post_feedforward_layernorm",
    ),
]];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_through_the_table() {
        assert_eq!(
            map_name(LLAMA_GGUF_NAMES, "layers.12.attn.wq").as_deref(),
            Some("blk.12.attn_q")
        );
        assert_eq!(
            map_name(LLAMA_GGUF_NAMES, "embed").as_deref(),
            Some("token_embd")
        );
        assert_eq!(map_name(LLAMA_GGUF_NAMES, "layers.x.attn.wq"), None);
        assert_eq!(map_name(LLAMA_GGUF_NAMES, "layers.1.nope"), None);
        assert_eq!(
            map_name(GEMMA3_GGUF_NAMES, "layers.0.post_ffn_norm").as_deref(),
            Some("blk.0.post_ffw_norm")
        );
    }
}
