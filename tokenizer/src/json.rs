//! A [`Tokenizer`] from a Hugging Face `tokenizer.json` (and, when it sits beside it,
//! `tokenizer_config.json` for BOS/EOS names and the chat template). Encoding and decoding go through the
//! Hugging Face tokenizer itself; the metadata fields are filled in from its JSON.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value as Json;

use super::vocab::{Pool, Vocab};
use super::{Engine, Tokenizer, TokenizerKind, attr, gpt2_char_byte, parse_byte_token, tok_err};
use crate::error::{Result, TokenizerError};

/// Texts that end generation, as for GGUF vocabularies.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<eos>",
    "<｜end▁of▁sentence｜>",
];

/// BOS/EOS/SEP found in a post-processor.
#[derive(Default)]
struct Post {
    bos: Option<u32>,
    eos: Option<u32>,
    sep: Option<u32>,
}

fn special_id(map: &Json, name: &str) -> Option<u32> {
    map.get(name)?
        .get("ids")?
        .get(0)?
        .as_u64()
        .map(|v| v as u32)
}

fn read_post(p: &Json, kind: TokenizerKind, out: &mut Post) {
    match p.get("type").and_then(Json::as_str) {
        Some("TemplateProcessing") => {
            let Some(single) = p.get("single").and_then(Json::as_array) else {
                return;
            };
            let specials = p.get("special_tokens").cloned().unwrap_or(Json::Null);
            let seq_at = single.iter().position(|x| x.get("Sequence").is_some());
            for (i, piece) in single.iter().enumerate() {
                let Some(name) = piece
                    .get("SpecialToken")
                    .and_then(|s| s.get("id"))
                    .and_then(Json::as_str)
                else {
                    continue;
                };
                let id = special_id(&specials, name);
                match seq_at {
                    Some(s) if i < s => out.bos = out.bos.or(id),
                    _ if kind == TokenizerKind::WordPiece => out.sep = id.or(out.sep),
                    _ => out.eos = id.or(out.eos),
                }
            }
        }
        Some("BertProcessing" | "RobertaProcessing") => {
            let id = |k: &str| {
                p.get(k)
                    .and_then(|v| v.get(1))
                    .and_then(Json::as_u64)
                    .map(|v| v as u32)
            };
            out.bos = id("cls");
            if kind == TokenizerKind::WordPiece {
                out.sep = id("sep");
            } else {
                out.eos = id("sep");
            }
        }
        Some("Sequence") => {
            for q in p
                .get("processors")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                read_post(q, kind, out);
            }
        }
        _ => {}
    }
}

/// Whether a decoder (or one in a decoder sequence) has type `ty`.
fn has_decoder(d: &Json, ty: &str) -> bool {
    match d.get("type").and_then(Json::as_str) {
        Some("Sequence") => d
            .get("decoders")
            .and_then(Json::as_array)
            .is_some_and(|v| v.iter().any(|x| has_decoder(x, ty))),
        Some(t) => t == ty,
        None => false,
    }
}

/// A `tokenizer_config.json` token entry: a string or `{ "content": ... }`.
fn config_token(cfg: &Json, key: &str) -> Option<String> {
    let v = cfg.get(key)?;
    v.as_str()
        .or_else(|| v.get("content").and_then(Json::as_str))
        .map(str::to_string)
}

fn config_template(cfg: &Json) -> Option<String> {
    match cfg.get("chat_template")? {
        Json::String(s) => Some(s.clone()),
        Json::Array(list) => {
            let named = |n: &str| {
                list.iter()
                    .find(|t| t.get("name").and_then(Json::as_str) == Some(n))
            };
            named("default")
                .or_else(|| list.first())
                .and_then(|t| t.get("template"))
                .and_then(Json::as_str)
                .map(str::to_string)
        }
        _ => None,
    }
}

fn pool<'a>(items: impl ExactSizeIterator<Item = &'a [u8]>) -> Result<Pool> {
    let mut p = Pool::with_capacity(items.len());
    for item in items {
        p.push(item)?;
    }
    Ok(p)
}

pub(super) fn build(path: &Path) -> Result<Tokenizer> {
    let io = |source| TokenizerError::Io {
        path: path.display().to_string(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(io)?;
    let json: Json = serde_json::from_str(&text)
        .map_err(|e| tok_err(format!("{}: not valid JSON: {e}", path.display())))?;
    let mut tokenizer: tokenizers::Tokenizer = text
        .parse()
        .map_err(|e| tok_err(format!("{}: not a tokenizer.json: {e}", path.display())))?;
    // A file's own truncation and padding (sentence-transformers exports carry both) would cut or pad
    // every encoding; lengths are the caller's to set (`encode_truncated`).
    tokenizer
        .with_truncation(None)
        .map_err(|e| tok_err(format!("{}: {e}", path.display())))?;
    tokenizer.with_padding(None);
    let cfg: Option<Json> = path
        .parent()
        .map(|d| d.join("tokenizer_config.json"))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|s| serde_json::from_str(&s).ok());

    let model = &json["model"];
    let decoder = &json["decoder"];
    let kind = match model.get("type").and_then(Json::as_str) {
        Some("BPE")
            if model.get("byte_fallback").and_then(Json::as_bool) == Some(true)
                || has_decoder(decoder, "Metaspace")
                || has_decoder(decoder, "ByteFallback") =>
        {
            TokenizerKind::SentencePiece
        }
        Some("BPE") => TokenizerKind::Bpe,
        Some("Unigram") => TokenizerKind::SentencePiece,
        Some("WordPiece") => TokenizerKind::WordPiece,
        other => {
            return Err(tok_err(format!(
                "{}: model type {other:?} is not supported (BPE, Unigram, WordPiece)",
                path.display()
            )));
        }
    };
    let byte_level = has_decoder(decoder, "ByteLevel");

    // vocabulary, with added tokens as control (special) or user-defined
    let ids: HashMap<String, u32> = tokenizer.get_vocab(true);
    let n = ids.values().map(|&i| i as usize + 1).max().unwrap_or(0);
    if n == 0 {
        return Err(tok_err(format!("{}: empty vocabulary", path.display())));
    }
    let mut texts = vec![String::new(); n];
    for (t, &i) in &ids {
        texts[i as usize] = t.clone();
    }
    let mut attrs: Vec<u16> = texts
        .iter()
        .map(|t| match t.as_str() {
            "" => attr::UNUSED,
            t if kind == TokenizerKind::SentencePiece && parse_byte_token(t).is_some() => {
                attr::BYTE
            }
            _ => attr::NORMAL,
        })
        .collect();
    for (id, tok) in tokenizer.get_added_tokens_decoder() {
        if let Some(a) = attrs.get_mut(id as usize) {
            *a = if tok.special {
                attr::CONTROL
            } else {
                attr::USER_DEFINED
            };
            if tok.lstrip {
                *a |= attr::LSTRIP;
            }
            if tok.rstrip {
                *a |= attr::RSTRIP;
            }
        }
    }
    let pieces: Vec<Vec<u8>> = texts
        .iter()
        .zip(&attrs)
        .map(|(t, &a)| {
            if a & attr::BYTE != 0 {
                return parse_byte_token(t).map(|b| vec![b]).unwrap_or_default();
            }
            if a & attr::NORMAL == 0 {
                return t.as_bytes().to_vec();
            }
            match kind {
                _ if byte_level => t
                    .chars()
                    .flat_map(|c| match gpt2_char_byte(c) {
                        Some(b) => vec![b],
                        None => c.to_string().into_bytes(),
                    })
                    .collect(),
                TokenizerKind::WordPiece => match t.strip_prefix("##") {
                    Some(rest) => rest.as_bytes().to_vec(),
                    None => format!(" {t}").into_bytes(),
                },
                _ => t.replace('\u{2581}', " ").into_bytes(),
            }
        })
        .collect();

    let mut post = Post::default();
    if let Some(p) = json.get("post_processor") {
        read_post(p, kind, &mut post);
    }
    let by_name = |key: &str| {
        cfg.as_ref()
            .and_then(|c| config_token(c, key))
            .and_then(|t| ids.get(&t).copied())
    };
    let bos_id = post.bos.or_else(|| by_name("bos_token"));
    let eos_id = by_name("eos_token").or(post.eos);
    let unk_id = model
        .get("unk_token")
        .and_then(Json::as_str)
        .and_then(|t| ids.get(t).copied())
        .or_else(|| model.get("unk_id").and_then(Json::as_u64).map(|v| v as u32));
    let pad_id = by_name("pad_token");
    let mut eog: BTreeSet<u32> = texts
        .iter()
        .enumerate()
        .filter(|(i, t)| EOG_TEXTS.contains(&t.as_str()) && attrs[*i] & attr::CONTROL != 0)
        .map(|(i, _)| i as u32)
        .collect();
    eog.extend(eos_id);
    let special_ids = (0..n as u32)
        .filter(|&i| attrs[i as usize] & attr::CONTROL != 0)
        .collect();

    let partition = (0..n as u32)
        .filter(|&i| attrs[i as usize] & (attr::CONTROL | attr::USER_DEFINED) != 0)
        .collect();
    let vocab = Vocab::new(
        pool(texts.iter().map(String::as_bytes))?,
        attrs,
        vec![0.0; n],
        pool(pieces.iter().map(Vec::as_slice))?,
        partition,
    );
    Ok(Tokenizer {
        kind,
        pre: String::new(),
        bos_id,
        eos_id,
        eot_ids: eog.into_iter().collect(),
        add_bos: post.bos.is_some(),
        add_eos: post.eos.is_some(),
        vocab_size: n,
        chat_template: cfg.as_ref().and_then(config_template),
        special_ids,
        sep_id: post.sep,
        add_sep: post.sep.is_some(),
        unk_id,
        pad_id,
        add_space_prefix: false,
        clean_spaces: false,
        vocab,
        engine: Engine::HfJson {
            tok: Box::new(tokenizer),
            plain: Box::new(OnceLock::new()),
        },
    })
}
