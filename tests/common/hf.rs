//! HF SafeTensors checkpoints written from GGUF files (F32, HF names and layout, HF config and
//! tokenizer files), so the importer's HF path can be checked against the GGUF path on the same
//! weights.

use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use serde_json::json;

/// HF row order of a GGUF q/k weight: the inverse of the importer's permutation, written from the
/// definition (HF row `h·hd + t·hd/2 + j` is GGUF row `h·hd + 2j + t`).
fn unpermute(rows: &[f32], heads: usize, hd: usize, row_len: usize) -> Vec<f32> {
    let mut out = vec![0.0; rows.len()];
    for h in 0..heads {
        for j in 0..hd / 2 {
            for t in 0..2 {
                let gguf = (h * hd + 2 * j + t) * row_len;
                let hf = (h * hd + t * (hd / 2) + j) * row_len;
                out[hf..hf + row_len].copy_from_slice(&rows[gguf..gguf + row_len]);
            }
        }
    }
    out
}

/// An HF tensor to write: name, row-major shape, little-endian F32 bytes.
type HfTensor = (String, Vec<usize>, Vec<u8>);

/// Writes an HF checkpoint (2 shards + index, F32, HF names and layout, HF config and tokenizer
/// files) from a GGUF Llama (dense or Mixtral), Qwen3, Qwen3-MoE, OLMoE or Phi-3 model; `rope_scaling` goes into `config.json` as it is (a
/// `rope_freqs` tensor has no HF counterpart: the config's scaling stands for it). LongRoPE factors
/// and a partial rotation are written as Phi-3's config holds them.
pub fn write_hf_from_gguf(gguf: &Path, dir: &Path, rope_scaling: Option<serde_json::Value>) {
    use cinder::gguf::GgufFile;
    use cinder::tokenizer::Tokenizer;
    let f = GgufFile::open(gguf).expect("gguf");
    let arch = f.architecture().expect("arch").to_string();
    let opt_u = |k: &str| {
        f.get(&format!("{arch}.{k}"))
            .and_then(|v| v.as_u64())
            .map(|v| v as usize)
    };
    let u = |k: &str| opt_u(k).expect(k);
    let (d, heads, kv_heads, layers) = (
        u("embedding_length"),
        u("attention.head_count"),
        u("attention.head_count_kv"),
        u("block_count"),
    );
    let hd = opt_u("attention.key_length").unwrap_or(d / heads);
    // GGUF Llama rotates adjacent pairs (the converter permuted Q/K rows); Qwen keeps HF's halves.
    let permute = arch == "llama";
    // Mixtral: a Llama file with experts, named `block_sparse_moe.experts.E.w1/w3/w2` in HF
    let mixtral = arch == "llama" && opt_u("expert_count").is_some();
    let rename = |g: &str| -> String {
        let table = [
            ("token_embd.weight", "model.embed_tokens.weight"),
            ("output_norm.weight", "model.norm.weight"),
            ("output.weight", "lm_head.weight"),
        ];
        if let Some((_, h)) = table.iter().find(|(x, _)| *x == g) {
            return h.to_string();
        }
        let rest = g.strip_prefix("blk.").expect("block tensor");
        let (i, tail) = rest.split_once('.').expect("index");
        let hf = match tail {
            "attn_norm.weight" => "input_layernorm.weight",
            "attn_q.weight" => "self_attn.q_proj.weight",
            "attn_k.weight" => "self_attn.k_proj.weight",
            "attn_v.weight" => "self_attn.v_proj.weight",
            "attn_output.weight" => "self_attn.o_proj.weight",
            "attn_qkv.weight" => "self_attn.qkv_proj.weight",
            "ffn_gate_inp.weight" if mixtral => "block_sparse_moe.gate.weight",
            "ffn_gate_inp.weight" => "mlp.gate.weight",
            "attn_q_norm.weight" => "self_attn.q_norm.weight",
            "attn_k_norm.weight" => "self_attn.k_norm.weight",
            "ffn_norm.weight" => "post_attention_layernorm.weight",
            "ffn_gate.weight" => "mlp.gate_proj.weight",
            "ffn_up.weight" if arch == "phi3" => "mlp.gate_up_proj.weight",
            "ffn_up.weight" => "mlp.up_proj.weight",
            "ffn_down.weight" => "mlp.down_proj.weight",
            other => panic!("unexpected tensor {other}"),
        };
        format!("model.layers.{i}.{hf}")
    };
    std::fs::create_dir_all(dir).expect("mkdir");
    let mut shards: [Vec<HfTensor>; 2] = [Vec::new(), Vec::new()];
    // RoPE factors live in the HF config, not among the weights.
    for info in f.tensors().iter().filter(|t| !t.name.starts_with("rope_f")) {
        let mut v = f.dequantize(info).expect("dequantize");
        let shape: Vec<usize> = info.dims.iter().rev().map(|&x| x as usize).collect();
        let row_len = shape.last().copied().unwrap_or(1);
        if permute && info.name.contains(".attn_q.") {
            v = unpermute(&v, heads, hd, row_len);
        } else if permute && info.name.contains(".attn_k.") {
            v = unpermute(&v, kv_heads, hd, row_len);
        }
        let shard = usize::from(info.name.starts_with("blk.") && info.name.len() % 2 == 0);
        // A 3-D expert tensor `[n_experts, out, in]`: one HF tensor per expert.
        if let (Some(base), [n_exp, out, inp]) =
            (info.name.strip_suffix("_exps.weight"), shape.as_slice())
        {
            let (rest, proj) = base.rsplit_once(".ffn_").expect("expert tensor name");
            let layer = rest.strip_prefix("blk.").expect("block");
            for (e, w) in v.chunks_exact(out * inp).enumerate().take(*n_exp) {
                let name = if mixtral {
                    let wn = match proj {
                        "gate" => "w1",
                        "down" => "w2",
                        _ => "w3",
                    };
                    format!("model.layers.{layer}.block_sparse_moe.experts.{e}.{wn}.weight")
                } else {
                    format!("model.layers.{layer}.mlp.experts.{e}.{proj}_proj.weight")
                };
                let bytes = w.iter().flat_map(|x| x.to_le_bytes()).collect();
                shards[shard].push((name, vec![*out, *inp], bytes));
            }
            continue;
        }
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        shards[shard].push((rename(&info.name), shape, bytes));
    }
    let mut weight_map = serde_json::Map::new();
    for (k, shard) in shards.iter().enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", k + 1);
        let views: Vec<(String, TensorView)> = shard
            .iter()
            .map(|(n, s, b)| {
                weight_map.insert(n.clone(), json!(file));
                (
                    n.clone(),
                    TensorView::new(Dtype::F32, s.clone(), b).expect("view"),
                )
            })
            .collect();
        safetensors::serialize_to_file(views, None, &dir.join(&file)).expect("write shard");
    }
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        json!({"metadata": {}, "weight_map": weight_map}).to_string(),
    )
    .expect("index");
    let fl = |k: &str| f.get(&format!("{arch}.{k}")).and_then(|v| v.as_f64());
    let hf_arch = match arch.as_str() {
        "llama" if mixtral => "MixtralForCausalLM",
        "llama" => "LlamaForCausalLM",
        "olmoe" => "OlmoeForCausalLM",
        "qwen3" => "Qwen3ForCausalLM",
        "qwen3moe" => "Qwen3MoeForCausalLM",
        "phi3" => "Phi3ForCausalLM",
        other => panic!("no HF writer for {other}"),
    };
    let config = json!({
        "architectures": [hf_arch],
        "hidden_size": d,
        "head_dim": hd,
        "rope_scaling": rope_scaling,
        "intermediate_size": u("feed_forward_length"),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": f.tensor("token_embd.weight").expect("embd").dims[1],
        "rms_norm_eps": fl("attention.layer_norm_rms_epsilon").expect("eps"),
        "rope_theta": fl("rope.freq_base").unwrap_or(10000.0),
        "max_position_embeddings": u("context_length"),
        "tie_word_embeddings": f.tensor("output.weight").is_none(),
        "torch_dtype": "float32",
    });
    let mut config = config;
    let rope_dim = opt_u("rope.dimension_count").unwrap_or(hd);
    if rope_dim != hd {
        config["partial_rotary_factor"] = json!(rope_dim as f64 / hd as f64);
    }
    if let Some(n) = opt_u("expert_count") {
        config["num_experts_per_tok"] = json!(u("expert_used_count"));
        match arch.as_str() {
            // Qwen3-MoE: its own expert width key, weights renormalized
            "qwen3moe" => {
                config["num_experts"] = json!(n);
                config["moe_intermediate_size"] = json!(u("expert_feed_forward_length"));
                config["norm_topk_prob"] = json!(true);
            }
            // OLMoE: the expert width is `intermediate_size`, weights not renormalized
            "olmoe" => {
                config["num_experts"] = json!(n);
                config["norm_topk_prob"] = json!(false);
            }
            _ => config["num_local_experts"] = json!(n),
        }
    }
    if let Some(long) = f.tensor("rope_factors_long.weight") {
        let short = f
            .tensor("rope_factors_short.weight")
            .expect("short factors");
        config["rope_scaling"] = json!({"type": "longrope",
            "long_factor": f.dequantize(long).expect("long"),
            "short_factor": f.dequantize(short).expect("short")});
        config["original_max_position_embeddings"] =
            json!(u("rope.scaling.original_context_length"));
    }
    std::fs::write(dir.join("config.json"), config.to_string()).expect("config");
    let tok = Tokenizer::from_gguf(&f).expect("tokenizer");
    std::fs::write(
        dir.join("tokenizer.json"),
        tok.hf_tokenizer()
            .expect("hf tokenizer")
            .to_string(false)
            .expect("tokenizer json"),
    )
    .expect("tokenizer.json");
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).map(str::to_string);
    std::fs::write(
        dir.join("tokenizer_config.json"),
        json!({
            "bos_token": text(tok.bos_id),
            "eos_token": text(tok.eos_id),
            "add_bos_token": tok.add_bos,
            "chat_template": tok.chat_template,
        })
        .to_string(),
    )
    .expect("tokenizer_config.json");
}

/// The GGUF with every tensor dequantized to F32 (same metadata): "the GGUF" of exactly the
/// weights the HF checkpoint holds.
pub fn write_f32_gguf(src: &Path, dst: &Path) {
    use cinder::gguf::{GgufFile, Value, writer::GgufWriter};
    let f = GgufFile::open(src).expect("gguf");
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        match k.as_str() {
            "general.alignment" => {}
            "general.file_type" => {
                w.add_kv(k.clone(), Value::U32(0)).expect("kv");
            }
            _ => {
                w.add_kv(k.clone(), v.clone()).expect("kv");
            }
        }
    }
    for info in f.tensors() {
        let v = f.dequantize(info).expect("dequantize");
        w.add_f32_tensor(info.name.clone(), &info.dims, &v)
            .expect("tensor");
    }
    w.write_file(dst).expect("write gguf");
}
