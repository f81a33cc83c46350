//! Reading `tokenizer.ggml.*` metadata into a [`Tokenizer`], with llama.cpp's defaults and fix-ups
//! (`llama_vocab::impl::load`): special-token defaults per model kind, auto-detected EOT/EOM/FIM tokens,
//! the end-of-generation set, and per-model lstrip/rstrip attributes.

use std::collections::BTreeSet;

use super::bpe::Bpe;
use super::vocab::{Pool, Vocab};
use super::{Engine, Tokenizer, TokenizerKind, attr, gpt2_char_byte, hf, pre, tok_err};
use crate::error::{Result, TokenizerError};
use cinder_gguf::{GgufError, GgufFile, Value};

const KEY_MODEL: &str = "tokenizer.ggml.model";
pub(super) const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TYPES: &str = "tokenizer.ggml.token_type";
pub(super) const KEY_MERGES: &str = "tokenizer.ggml.merges";

/// Texts llama.cpp takes as EOT when `tokenizer.ggml.eot_token_id` is absent.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
/// Texts that end generation (llama.cpp `special_eog_ids`).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
/// FIM tokens llama.cpp detects by text (and marks as control): pre, suf, mid, pad, rep, sep.
const FIM_TEXTS: [&[&str]; 6] = [
    &[
        "<|fim_prefix|>",
        "<fim-prefix>",
        "<fim_prefix>",
        "<｜fim▁begin｜>",
        "<PRE>",
        "▁<PRE>",
        "<|code_prefix|>",
        "<|prefix|>",
    ],
    &[
        "<|fim_suffix|>",
        "<fim-suffix>",
        "<fim_suffix>",
        "<｜fim▁hole｜>",
        "<SUF>",
        "▁<SUF>",
        "<|code_suffix|>",
        "<|suffix|>",
    ],
    &[
        "<|fim_middle|>",
        "<fim-middle>",
        "<fim_middle>",
        "<｜fim▁end｜>",
        "<MID>",
        "▁<MID>",
        "<|code_middle|>",
        "<|middle|>",
    ],
    &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    &[
        "<|fim_repo|>",
        "<|repo_name|>",
        "<fim-repo>",
        "<REPO>",
        "<reponame>",
    ],
    &["<|file_sep|>"],
];
const FIM_KEYS: [&str; 6] = [
    "tokenizer.ggml.fim_pre_token_id",
    "tokenizer.ggml.fim_suf_token_id",
    "tokenizer.ggml.fim_mid_token_id",
    "tokenizer.ggml.fim_pad_token_id",
    "tokenizer.ggml.fim_rep_token_id",
    "tokenizer.ggml.fim_sep_token_id",
];

fn bad_key(e: GgufError) -> TokenizerError {
    match e {
        GgufError::BadKey { key, reason } => tok_err(format!("{key}: {reason}")),
        GgufError::MissingKey(key) => tok_err(format!("missing {key}")),
        e => TokenizerError::Gguf(e),
    }
}

fn opt_str<'a>(f: &'a GgufFile, key: &str) -> Result<Option<&'a str>> {
    match f.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| tok_err(format!("{key} must be a string, found {v}"))),
    }
}

pub(super) fn opt_bool(f: &GgufFile, key: &str) -> Result<Option<bool>> {
    f.opt_bool(key).map_err(bad_key)
}

/// A token id key: absent is `None`; a non-integer or an id outside the vocabulary is an error.
fn opt_id(f: &GgufFile, key: &str, n: usize) -> Result<Option<u32>> {
    let Some(v) = f.get(key) else { return Ok(None) };
    let id = v
        .as_u64()
        .ok_or_else(|| tok_err(format!("{key} must be a non-negative integer, found {v}")))?;
    if id >= n as u64 {
        return Err(tok_err(format!(
            "{key} = {id} is outside the vocabulary of {n} tokens"
        )));
    }
    Ok(Some(id as u32))
}

/// An array key with its elements; present but not an array of length `want` (when given) is an error.
pub(super) fn opt_array<'a>(
    f: &'a GgufFile,
    key: &str,
    want: Option<usize>,
) -> Result<Option<&'a [Value]>> {
    let Some(v) = f.get(key) else { return Ok(None) };
    let items = v
        .as_array()
        .ok_or_else(|| tok_err(format!("{key} must be an array, found {v}")))?;
    if let Some(n) = want
        && items.len() != n
    {
        return Err(tok_err(format!(
            "{key} has {} entries but {KEY_TOKENS} has {n}",
            items.len()
        )));
    }
    Ok(Some(items))
}

pub(super) fn build(f: &GgufFile) -> Result<Tokenizer> {
    let model = opt_str(f, KEY_MODEL)?.ok_or_else(|| tok_err(format!("missing {KEY_MODEL}")))?;
    let kind = match model {
        "gpt2" => TokenizerKind::Bpe,
        "llama" => TokenizerKind::SentencePiece,
        "bert" => TokenizerKind::WordPiece,
        other => {
            return Err(tok_err(format!(
                "{KEY_MODEL} = {other:?} is not supported (supported: \"gpt2\", \"llama\", \"bert\")"
            )));
        }
    };
    let pre_name = opt_str(f, KEY_PRE)?.unwrap_or("").to_string();

    // tokens, scores, types
    let items =
        opt_array(f, KEY_TOKENS, None)?.ok_or_else(|| tok_err(format!("missing {KEY_TOKENS}")))?;
    let n = items.len();
    if n == 0 || n > u32::MAX as usize {
        return Err(tok_err(format!("{KEY_TOKENS} has {n} entries")));
    }
    let mut texts = Pool::with_capacity(n);
    for (i, v) in items.iter().enumerate() {
        let s = v
            .as_str()
            .ok_or_else(|| tok_err(format!("{KEY_TOKENS}[{i}] must be a string, found {v}")))?;
        if s.is_empty() {
            texts.push(format!("[EMPTY_{i}]").as_bytes())?;
        } else {
            texts.push(s.as_bytes())?;
        }
    }
    let scores = match opt_array(f, KEY_SCORES, Some(n))? {
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_f64().map(|x| x as f32).ok_or_else(|| {
                    tok_err(format!("{KEY_SCORES}[{i}] must be a number, found {v}"))
                })
            })
            .collect::<Result<Vec<f32>>>()?,
        None if kind == TokenizerKind::SentencePiece => {
            return Err(tok_err(format!(
                "missing {KEY_SCORES} (required for a SentencePiece vocabulary)"
            )));
        }
        None => vec![0.0; n],
    };
    let mut attrs = match opt_array(f, KEY_TYPES, Some(n))? {
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v.as_i64() {
                Some(0) => Ok(0),
                Some(1) => Ok(attr::NORMAL),
                Some(2) => Ok(attr::UNKNOWN),
                Some(3) => Ok(attr::CONTROL),
                Some(4) => Ok(attr::USER_DEFINED),
                Some(5) => Ok(attr::UNUSED),
                Some(6) => Ok(attr::BYTE),
                _ => Err(tok_err(format!(
                    "{KEY_TYPES}[{i}] must be a token type 0..=6, found {v}"
                ))),
            })
            .collect::<Result<Vec<u16>>>()?,
        None => vec![attr::NORMAL; n],
    };

    // flags: llama.cpp's defaults per kind, then the keys
    let mut spec = None;
    let (mut add_space_prefix, mut clean_spaces, mut add_bos, mut add_sep) = match kind {
        TokenizerKind::Bpe => {
            let name = if pre_name.is_empty() {
                "default"
            } else {
                pre_name.as_str()
            };
            let s = pre::pre_spec(name).ok_or_else(|| {
                tok_err(format!(
                    "{KEY_PRE} = {name:?} is not a pre-tokenizer Cinder knows"
                ))
            })?;
            spec = Some(s);
            (false, s.clean_spaces, s.add_bos, false)
        }
        TokenizerKind::SentencePiece => (true, false, true, false),
        TokenizerKind::WordPiece => (false, true, true, true),
    };
    let mut add_eos = false;
    if let Some(v) = opt_bool(f, "tokenizer.ggml.add_space_prefix")? {
        add_space_prefix = v;
    }
    if let Some(v) = opt_bool(f, "tokenizer.ggml.add_bos_token")? {
        add_bos = v;
    }
    if let Some(v) = opt_bool(f, "tokenizer.ggml.add_eos_token")? {
        add_eos = v;
    }
    if let Some(v) = opt_bool(f, "tokenizer.ggml.add_sep_token")? {
        add_sep = v;
    }
    if kind != TokenizerKind::Bpe {
        clean_spaces = kind == TokenizerKind::WordPiece;
    }

    // special ids: llama.cpp's defaults (kept only when inside the vocabulary), then the keys
    let dflt = |id: u32| (id < n as u32).then_some(id);
    let (mut bos, mut eos, mut unk, mut sep, mut pad) = match kind {
        TokenizerKind::SentencePiece => (dflt(1), dflt(2), dflt(0), None, None),
        TokenizerKind::WordPiece => (dflt(101), None, dflt(100), dflt(102), dflt(0)),
        TokenizerKind::Bpe => (None, None, None, None, None),
    };
    let or = |key: &str, d: Option<u32>| -> Result<Option<u32>> { Ok(opt_id(f, key, n)?.or(d)) };
    if kind == TokenizerKind::WordPiece {
        bos = or("tokenizer.ggml.cls_token_id", bos)?;
    }
    bos = or("tokenizer.ggml.bos_token_id", bos)?;
    eos = or("tokenizer.ggml.eos_token_id", eos)?;
    unk = or("tokenizer.ggml.unknown_token_id", unk)?;
    sep = or("tokenizer.ggml.seperator_token_id", sep)?;
    pad = or("tokenizer.ggml.padding_token_id", pad)?;
    let mut eot = opt_id(f, "tokenizer.ggml.eot_token_id", n)?;
    let mut eom = opt_id(f, "tokenizer.ggml.eom_token_id", n)?;
    let mut fim = [None; 6];
    for (slot, key) in fim.iter_mut().zip(FIM_KEYS) {
        *slot = opt_id(f, key, n)?;
    }
    for (what, on, id) in [
        ("bos", add_bos, bos),
        ("eos", add_eos, eos),
        ("sep", add_sep, sep),
    ] {
        if on && id.is_none() {
            return Err(tok_err(format!(
                "tokenizer.ggml.add_{what}_token is true (or defaulted), but there is no {what} token id"
            )));
        }
    }

    // auto-detection by text, in id order (llama.cpp walks a hash map; the lists rarely overlap)
    let mark = |attrs: &mut Vec<u16>, id: u32| attrs[id as usize] |= attr::CONTROL;
    let text = |id: usize| texts.str(id).unwrap_or("");
    let find = |list: &[&str]| -> Option<u32> {
        (0..n)
            .position(|i| list.contains(&text(i)))
            .map(|i| i as u32)
    };
    if eot.is_none() {
        eot = find(EOT_TEXTS);
        if let Some(id) = eot {
            mark(&mut attrs, id);
        }
    }
    if eom.is_none() {
        eom = find(&["<|eom_id|>"]);
        if let Some(id) = eom {
            mark(&mut attrs, id);
        }
    }
    for (slot, list) in fim.iter_mut().zip(FIM_TEXTS) {
        if slot.is_none() {
            *slot = find(list);
            if let Some(id) = *slot {
                mark(&mut attrs, id);
            }
        }
    }
    let mut eog: BTreeSet<u32> = fim[3..].iter().flatten().copied().collect();
    for (i, a) in attrs.iter_mut().enumerate() {
        if EOG_TEXTS.contains(&text(i)) {
            eog.insert(i as u32);
            *a |= attr::CONTROL;
        }
    }
    for (i, a) in attrs.iter_mut().enumerate() {
        if matches!(
            text(i),
            "<|channel|>" | "<|message|>" | "<|start|>" | "<|constrain|>"
        ) {
            *a = attr::USER_DEFINED;
        }
    }
    eog.extend([eos, eot, eom].into_iter().flatten());
    let in_eog =
        |eog: &BTreeSet<u32>, s: &str| eog.iter().copied().find(|&id| text(id as usize) == s);
    if let Some(end) = in_eog(&eog, "<|end|>") {
        let call = in_eog(&eog, "<|call|>").is_some() || in_eog(&eog, "<|calls|>").is_some();
        let ret = in_eog(&eog, "<|return|>").is_some();
        let flush = in_eog(&eog, "<|flush|>").is_some();
        if call && (ret || flush) {
            eog.remove(&end);
            attrs[end as usize] = attr::USER_DEFINED;
        }
    }
    if in_eog(&eog, "<|tool_response>").is_some()
        && let Some(s) = in_eog(&eog, "</s>")
    {
        eog.remove(&s);
        attrs[s as usize] = attr::NORMAL;
    }

    let partition = (0..n as u32)
        .filter(|&i| attrs[i as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0)
        .collect();
    let pieces = pieces(kind, &texts, &attrs)?;
    let mut vocab = Vocab::new(texts, attrs, scores, pieces, partition);
    if let Some((prev, i)) = vocab.first_duplicate() {
        return Err(tok_err(format!(
            "{KEY_TOKENS}: duplicate token {:?} at ids {prev} and {i}",
            vocab.text(i)
        )));
    }
    if kind == TokenizerKind::SentencePiece {
        vocab.byte_tokens = byte_tokens(&vocab);
    }
    per_model_attrs(f, &pre_name, &mut vocab)?;

    let special_ids: Vec<u32> = (0..n as u32)
        .filter(|&i| vocab.attrs[i as usize] & attr::CONTROL != 0)
        .collect();
    let chat_template = opt_str(f, "tokenizer.chat_template")?.map(str::to_string);
    let engine = match kind {
        TokenizerKind::Bpe => {
            let spec = spec.ok_or_else(|| tok_err("internal: BPE without a pre-tokenizer"))?;
            let lines = opt_array(f, KEY_MERGES, None)?
                .ok_or_else(|| tok_err(format!("missing {KEY_MERGES}")))?;
            Engine::Bpe {
                pre: Box::new(hf::pre_splits(spec)?),
                spec,
                merges: Box::new(Bpe::from_merges(&vocab, lines, spec.ignore_merges)?),
            }
        }
        TokenizerKind::SentencePiece => Engine::Spm,
        TokenizerKind::WordPiece => {
            let specials = hf::Specials {
                bos: bos.filter(|_| add_bos),
                eos: eos.filter(|_| add_eos),
                sep: sep.filter(|_| add_sep),
            };
            Engine::WordPiece(Box::new(hf::wpm(f, &vocab, unk, &specials)?))
        }
    };
    Ok(Tokenizer {
        kind,
        pre: pre_name,
        bos_id: bos,
        eos_id: eos,
        eot_ids: eog.into_iter().collect(),
        add_bos,
        add_eos,
        vocab_size: n,
        chat_template,
        special_ids,
        sep_id: sep,
        add_sep,
        unk_id: unk,
        pad_id: pad,
        add_space_prefix,
        clean_spaces,
        vocab,
        engine,
    })
}

/// llama.cpp's per-model token attributes (`general.name` / pre-tokenizer / architecture based).
fn per_model_attrs(f: &GgufFile, pre_name: &str, vocab: &mut Vocab) -> Result<()> {
    let name = opt_str(f, "general.name")?.unwrap_or("").to_lowercase();
    let arch = opt_str(f, "general.architecture")?.unwrap_or("");
    let set = |vocab: &mut Vocab, text: &str, bit: u16, on: bool| {
        if let Some(id) = vocab.id(text) {
            let a = &mut vocab.attrs[id as usize];
            *a = if on { *a | bit } else { *a & !bit };
        }
    };
    let any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
    if any(pre_name, &["jina-v2-de", "jina-v2-es", "jina-v2-code"])
        || any(arch, &["nomic-bert-moe", "jina-bert-v3"])
    {
        set(vocab, "<mask>", attr::LSTRIP, true);
    } else if any(&name, &["phi-3", "phi3"]) {
        for i in 0..vocab.partition.len() {
            let id = vocab.partition[i] as usize;
            vocab.attrs[id] |= attr::RSTRIP;
        }
        set(vocab, "</s>", attr::RSTRIP, true);
        for t in ["<unk>", "<s>", "<|endoftext|>"] {
            set(vocab, t, attr::RSTRIP, false);
        }
    } else if name.contains("modern-bert") {
        set(vocab, "[MASK]", attr::LSTRIP, true);
    }
    Ok(())
}

/// What each token decodes to (llama.cpp `token_to_piece` with `special = true`).
fn pieces(kind: TokenizerKind, texts: &Pool, attrs: &[u16]) -> Result<Pool> {
    let mut out = Pool::with_capacity(texts.len());
    let mut piece = Vec::new();
    for (i, &a) in attrs.iter().enumerate() {
        let t = texts.str(i).unwrap_or("");
        piece.clear();
        if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
            piece.extend_from_slice(t.as_bytes());
        } else if a & attr::NORMAL != 0 {
            match kind {
                TokenizerKind::Bpe => {
                    for c in t.chars() {
                        match gpt2_char_byte(c) {
                            Some(b) => piece.push(b),
                            None => piece.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                        }
                    }
                }
                _ => piece.extend_from_slice(t.replace('\u{2581}', " ").as_bytes()),
            }
        } else if a & attr::BYTE != 0 {
            match super::parse_byte_token(t) {
                Some(b) => piece.push(b),
                None => piece.extend_from_slice(t.as_bytes()),
            }
        }
        out.push(&piece)?;
    }
    Ok(out)
}

/// SentencePiece byte-fallback tokens: `<0xNN>`, else the one-byte text (llama.cpp `byte_to_token`).
fn byte_tokens(vocab: &Vocab) -> Vec<Option<u32>> {
    (0..=255u8)
        .map(|b| {
            vocab.id(&format!("<0x{b:02X}>")).or_else(|| {
                let s = [b];
                std::str::from_utf8(&s).ok().and_then(|s| vocab.id(s))
            })
        })
        .collect()
}
