//! An embedding model's parts read from its path whatever the format ([`EmbedderSource::open`]):
//! the encoder's config and tensors (or a decoder's [`Source`]), its pooling, its input limit and
//! its tokenizer — Cinder's one [`Tokenizer`] type, as for the language models. Nothing is built
//! until [`EmbedderSource::build`] puts it on a backend.

use std::path::{Path, PathBuf};

use cinder_models::decoder_embed::{DecoderEmbedder, DecoderPooling, Embedder};
use cinder_runtime::InferenceBackend;
use cinder_tokenizer::Tokenizer;

use super::gemma::{self, GemmaParts};
use super::{BertParts, build_bert, file_err, locate, read_bert, read_text};
use crate::error::{ImportError, Result};
use crate::source::{Format, Source};

/// Which embedding model a source holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EmbedderKind {
    /// a BERT encoder (sentence-transformers SafeTensors folder or ONNX graph)
    Bert,
    /// a Gemma 3 encoder with its Dense modules (EmbeddingGemma)
    Gemma3,
    /// a GGUF decoder that pools its hidden states (`{arch}.pooling_type`)
    Decoder,
}

enum Parts {
    Bert(BertParts, Tokenizer),
    Gemma(Box<GemmaParts>, Tokenizer),
    Decoder {
        source: Box<Source>,
        pooling: DecoderPooling,
        dim: usize,
    },
}

/// An embedding model read from a sentence-transformers folder (BERT or Gemma 3), an ONNX graph
/// or a GGUF decoder with a pooling type: config, tensors, tokenizer, pooling and input limit,
/// nothing built yet. [`Format::detect`] tells the format once, as for language models
/// ([`Source`]); a generative GGUF file or a language model's checkpoint is refused with the
/// loader to use.
///
/// # Examples
///
/// ```no_run
/// use cinder_backends::InferenceBackend;
/// use cinder_importer::{EmbedderKind, EmbedderSource};
/// fn load<B: InferenceBackend>(device: &B::Device) -> cinder_importer::Result<()> {
///     let src = EmbedderSource::open(std::path::Path::new("all-MiniLM-L6-v2"))?;
///     assert_eq!(src.kind(), EmbedderKind::Bert);
///     tracing::info!(dim = src.dim(), vocab = src.tokenizer().vocab_size, "opened");
///     let embedder = src.build::<B>("minilm", device)?;
///     let vectors = embedder.embed(&["a first text", "a second"], true)?;
///     assert_eq!(vectors.len(), 2);
///     Ok(())
/// }
/// ```
pub struct EmbedderSource {
    format: Format,
    /// the weights file (or the GGUF file) errors name
    weights: PathBuf,
    parts: Parts,
}

impl EmbedderSource {
    /// Reads the embedding model at `path`: a sentence-transformers folder or its `.safetensors`
    /// file, an `.onnx` graph or a folder holding one (each with `tokenizer.json` beside it), or
    /// a GGUF file whose `{arch}.pooling_type` makes it an embedding model.
    pub fn open(path: &Path) -> Result<EmbedderSource> {
        Self::open_as(path, Format::detect(path)?)
    }

    /// [`EmbedderSource::open`] of a path whose format is already told.
    pub(crate) fn open_as(path: &Path, format: Format) -> Result<EmbedderSource> {
        if format == Format::Gguf {
            return Self::decoder(path);
        }
        let (weights, dir) = locate(path, format)?;
        let cfg_path = dir.join("config.json");
        let gemma_config = match format {
            Format::SentenceTransformers if cfg_path.is_file() => {
                let json: serde_json::Value = serde_json::from_str(&read_text(&cfg_path)?)
                    .map_err(|e| file_err(&cfg_path, e.to_string()))?;
                gemma::is_gemma3(&json).then_some(json)
            }
            _ => None,
        };
        let tokenizer = || {
            let tok_path = dir.join("tokenizer.json");
            if !tok_path.is_file() {
                return Err(file_err(&dir, "tokenizer.json is missing beside the model"));
            }
            Tokenizer::from_tokenizer_json(&tok_path)
                .map_err(|e| file_err(&tok_path, e.to_string()))
        };
        // The checkpoint is read before the tokenizer, so a damaged one is named first.
        let parts = match gemma_config {
            Some(json) => {
                let g = gemma::read(&weights, &dir, &json)?;
                Parts::Gemma(Box::new(g), tokenizer()?)
            }
            None => {
                let b = read_bert(&weights, &dir)?;
                Parts::Bert(b, tokenizer()?)
            }
        };
        Ok(EmbedderSource {
            format,
            weights,
            parts,
        })
    }

    /// A GGUF decoder that declares how its hidden states are pooled.
    fn decoder(path: &Path) -> Result<EmbedderSource> {
        let f = cinder_gguf::GgufFile::open(path)?;
        let arch = f.architecture()?.to_string();
        let key = format!("{arch}.pooling_type");
        let code = f.opt_u64(&key)?.ok_or_else(|| {
            file_err(
                path,
                format!("no {key}: a generative model, not an embedding model"),
            )
        })?;
        let pooling = DecoderPooling::from_gguf(code).ok_or_else(|| {
            ImportError::Unsupported(format!(
                "{key} = {code}: Cinder pools by mean (1), first token (2) or last token (3)"
            ))
        })?;
        let dim = f.get_u64(&format!("{arch}.embedding_length"))? as usize;
        drop(f);
        Ok(EmbedderSource {
            format: Format::Gguf,
            weights: path.to_path_buf(),
            parts: Parts::Decoder {
                source: Box::new(Source::open(path)?),
                pooling,
                dim,
            },
        })
    }

    /// The format the model was read from.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Which embedding model it is.
    pub fn kind(&self) -> EmbedderKind {
        match self.parts {
            Parts::Bert(..) => EmbedderKind::Bert,
            Parts::Gemma(..) => EmbedderKind::Gemma3,
            Parts::Decoder { .. } => EmbedderKind::Decoder,
        }
    }

    /// The tokenizer the texts will go through.
    pub fn tokenizer(&self) -> &Tokenizer {
        match &self.parts {
            Parts::Bert(_, t) | Parts::Gemma(_, t) => t,
            Parts::Decoder { source, .. } => source.tokenizer(),
        }
    }

    /// The width of the vectors it will give.
    pub fn dim(&self) -> usize {
        match &self.parts {
            Parts::Bert(b, _) => b.config.hidden_size,
            Parts::Gemma(g, _) => g.dim(),
            Parts::Decoder { dim, .. } => *dim,
        }
    }

    /// Builds the embedder on `device`; `name` is how it reports itself (e.g. its catalog name).
    pub fn build<B: InferenceBackend>(self, name: &str, device: &B::Device) -> Result<Embedder<B>> {
        match self.parts {
            Parts::Decoder {
                source,
                pooling,
                dim,
            } => {
                let m = source.build::<B>(device)?;
                Ok(Embedder::Decoder(DecoderEmbedder::new(
                    name,
                    m.model,
                    m.tokenizer,
                    pooling,
                    dim,
                )))
            }
            Parts::Bert(b, tok) => Ok(Embedder::Sentence(Box::new(build_bert::<B>(
                b, name, tok, device,
            )?))),
            Parts::Gemma(g, tok) => Ok(Embedder::Gemma(Box::new(gemma::build::<B>(
                *g,
                name,
                tok,
                &self.weights,
                device,
            )?))),
        }
    }
}
