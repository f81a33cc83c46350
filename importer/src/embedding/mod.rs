//! Sentence-embedding models from HF SafeTensors directories or ONNX exports, and GGUF decoder
//! embedding models ([`load_text_embedder`]).
//!
//! A model directory holds `model.safetensors` + `config.json` + `tokenizer.json` (and, from
//! sentence-transformers, `1_Pooling/config.json` and `sentence_bert_config.json`, read when
//! present). An ONNX model is a `.onnx` file with a `tokenizer.json` beside it; its config comes from
//! the graph ([`onnx`]). Pickle checkpoints are refused.

mod gemma;
mod named;
pub mod onnx;
mod onnx_proto;
pub mod safetensors;
mod source;

use std::path::{Path, PathBuf};

use cinder_models::bert::{Bert, BertConfig};
use cinder_models::decoder_embed::Embedder;
use cinder_models::embed::{Pooling, SentenceEmbedder};
#[cfg(doc)]
use cinder_models::{decoder_embed::DecoderEmbedder, gemma3_embed::Gemma3Embedder};
use cinder_runtime::InferenceBackend;
use cinder_tokenizer::Tokenizer;

pub use named::{F32Tensor, NamedWeights, bert_prefix};
pub use source::{EmbedderKind, EmbedderSource};

use crate::arch::BERT_HF_NAMES;
use crate::error::{ImportError, Result};
use crate::source::{Format, onnx_files};

fn file_err(path: &Path, reason: impl Into<String>) -> ImportError {
    ImportError::File {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The weights file an embedding model path designates, `(weights, directory)`, by its
/// [`Format`] (detected once by the caller): a sentence-transformers folder's `model.safetensors` (or the `.safetensors` file
/// named), or the ONNX graph named or alone in its folder.
fn locate(path: &Path, format: Format) -> Result<(PathBuf, PathBuf)> {
    let (weights, dir) = match (format, path.is_dir()) {
        (Format::SentenceTransformers, true) => {
            (path.join("model.safetensors"), path.to_path_buf())
        }
        (Format::Onnx, true) => {
            let mut onnx = onnx_files(path)?;
            (onnx.remove(0), path.to_path_buf())
        }
        (Format::SentenceTransformers | Format::Onnx, false) => {
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
            (path.to_path_buf(), dir)
        }
        (other, _) => {
            return Err(file_err(
                path,
                format!(
                    "a {other} model, not a sentence-embedding model (a .safetensors \
                     sentence-transformers folder or an .onnx graph)"
                ),
            ));
        }
    };
    if !weights.is_file() {
        return Err(file_err(
            path,
            "no model.safetensors here (sharded encoder checkpoints are not read)",
        ));
    }
    Ok((weights, dir))
}

/// Loads a sentence-embedding model (see the module docs for what `path` may be). `name` is how
/// the model is reported (e.g. its catalog name).
pub fn load_embedder<B: InferenceBackend>(
    name: &str,
    path: &Path,
    device: &B::Device,
) -> Result<SentenceEmbedder<B>> {
    let format = Format::detect(path)?;
    locate(path, format)?;
    let src = EmbedderSource::open_as(path, format)?;
    if src.kind() != EmbedderKind::Bert {
        return Err(file_err(
            path,
            "a Gemma 3 embedding model, not a BERT encoder: load it with load_text_embedder",
        ));
    }
    match src.build::<B>(name, device)? {
        Embedder::Sentence(e) => Ok(*e),
        _ => Err(file_err(path, "not a BERT encoder")),
    }
}

/// A BERT encoder as read from a sentence-transformers folder or an ONNX graph, not yet on a
/// device.
pub(crate) struct BertParts {
    pub config: BertConfig,
    tensors: std::collections::HashMap<String, F32Tensor>,
    prefix: String,
    pub pooling: Pooling,
    pub max_tokens: usize,
}

/// Reads a BERT encoder from its located weights file and folder.
pub(crate) fn read_bert(weights: &Path, dir: &Path) -> Result<BertParts> {
    let is_onnx = weights
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"));
    let (config, tensors, prefix) = if is_onnx {
        let (config, tensors) = onnx::read_onnx_bert(weights)?;
        (config, tensors, String::new())
    } else {
        let cfg_path = dir.join("config.json");
        if !cfg_path.is_file() {
            return Err(file_err(
                dir,
                "config.json is missing beside model.safetensors",
            ));
        }
        // (a Gemma 3 folder never comes here: `EmbedderSource` tells it apart first)
        let text = read_text(&cfg_path)?;
        if let Some(m) = gemma::modules(dir)?
            .iter()
            .find(|m| !matches!(m.kind.as_str(), "Transformer" | "Pooling" | "Normalize"))
        {
            return Err(ImportError::Unsupported(format!(
                "{}: a `{}` module after the encoder; Cinder's BERT embedder runs Transformer, \
                 Pooling and Normalize",
                dir.join("modules.json").display(),
                m.kind
            )));
        }
        let config =
            BertConfig::from_hf_json(&text).map_err(|e| file_err(&cfg_path, e.to_string()))?;
        let tensors = safetensors::read_f32_tensors(weights)?;
        let prefix = bert_prefix(tensors.keys()).ok_or_else(|| {
            file_err(
                weights,
                "no `embeddings.word_embeddings.weight` tensor: not a BERT checkpoint",
            )
        })?;
        (config, tensors, prefix)
    };
    let pooling_path = dir.join("1_Pooling").join("config.json");
    let pooling = if pooling_path.is_file() {
        Pooling::from_sentence_transformers(&read_text(&pooling_path)?)?
    } else {
        Pooling::Mean
    };
    let max_tokens = sentence_max_tokens(dir)?.unwrap_or(config.max_position_embeddings);
    Ok(BertParts {
        config,
        tensors,
        prefix,
        pooling,
        max_tokens,
    })
}

/// Builds the embedder of [`read_bert`]'s parts on `device`.
pub(crate) fn build_bert<B: InferenceBackend>(
    parts: BertParts,
    name: &str,
    tokenizer: Tokenizer,
    device: &B::Device,
) -> Result<SentenceEmbedder<B>> {
    let BertParts {
        config,
        tensors,
        prefix,
        pooling,
        max_tokens,
    } = parts;
    let mut src = NamedWeights::<B>::new(tensors, prefix, BERT_HF_NAMES, device.clone());
    let model = Bert::load(config, &mut src)?;
    let embedder =
        SentenceEmbedder::new(name, model, tokenizer, pooling, max_tokens, device.clone())
            .map_err(|e| ImportError::TokenizerMismatch(e.to_string()))?;
    tracing::info!(
        model = name,
        dim = embedder.dim(),
        pooling = ?embedder.pooling(),
        max_tokens = embedder.max_tokens(),
        "embedding model loaded"
    );
    Ok(embedder)
}

/// `max_seq_length` from sentence-transformers' `sentence_bert_config.json`, when present.
fn sentence_max_tokens(dir: &Path) -> Result<Option<usize>> {
    let p = dir.join("sentence_bert_config.json");
    if !p.is_file() {
        return Ok(None);
    }
    let v: serde_json::Value =
        serde_json::from_str(&read_text(&p)?).map_err(|e| file_err(&p, e.to_string()))?;
    Ok(v.get("max_seq_length")
        .and_then(serde_json::Value::as_u64)
        .and_then(|n| usize::try_from(n).ok()))
}

/// Loads any text embedder: a sentence-transformers BERT folder or ONNX export ([`load_embedder`]),
/// a Gemma 3 sentence-transformers folder (EmbeddingGemma: [`Gemma3Embedder`]), or a GGUF decoder whose `{arch}.pooling_type` makes it an embedding model (Qwen3-Embedding and the
/// like: [`DecoderEmbedder`]). A GGUF file without a pooling type is a generative model and is
/// refused, as is a pooling type Cinder does not pool by (none, rank).
pub fn load_text_embedder<B: InferenceBackend>(
    name: &str,
    path: &Path,
    device: &B::Device,
) -> Result<Embedder<B>> {
    EmbedderSource::open(path)?.build::<B>(name, device)
}
