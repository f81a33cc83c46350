//! The Hugging Face tokenizer built beside a GGUF vocabulary ([`crate::Tokenizer::hf_tokenizer`]): byte-level
//! BPE with the pre-tokenizer's regexes, WordPiece with BERT normalization, and SentencePiece approximated as
//! Hugging Face's `LlamaTokenizerFast` does; added tokens, post-processor and decoder as llama.cpp would.

use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{BPE, Vocab as HfVocab};
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::{NormalizerWrapper, Prepend, Replace, bert::BertNormalizer};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use super::bpe::Bpe;
use super::gguf::{KEY_PRE, opt_bool};
use super::{Vocab, attr, pre, tok_err};
use crate::error::{Result, TokenizerError};
use cinder_gguf::GgufFile;

/// BOS/EOS/SEP that the post-processor adds (only those the vocabulary adds).
pub(super) struct Specials {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub sep: Option<u32>,
}

fn hf(what: &str) -> impl Fn(tokenizers::Error) -> TokenizerError + '_ {
    move |e| tok_err(format!("building the {what} tokenizer: {e}"))
}

/// Text -> id for the Hugging Face model (the lowest id where texts repeat).
fn hf_vocab(vocab: &Vocab) -> HfVocab {
    let mut hv = HfVocab::with_capacity(vocab.texts.len());
    for id in (0..vocab.texts.len() as u32).rev() {
        hv.insert(vocab.text(id).to_string(), id);
    }
    hv
}

/// Added tokens and post-processor shared by all kinds.
fn finish(
    mut tok: Tokenizer,
    vocab: &Vocab,
    name: impl Fn(u32) -> String,
    sp: &Specials,
    what: &str,
) -> Result<Tokenizer> {
    let mut special = Vec::new();
    let mut plain = Vec::new();
    for &id in &vocab.partition {
        let a = vocab.attrs[id as usize];
        // special (matched in text only with parse_special) exactly when llama.cpp's partition
        // skips it without parse_special: control or unknown, even if also user-defined (an
        // end-of-generation text that the file typed user-defined gets the control bit added)
        let is_special = a & (attr::CONTROL | attr::UNKNOWN) != 0;
        let t = AddedToken::from(name(id), is_special)
            .lstrip(a & attr::LSTRIP != 0)
            .rstrip(a & attr::RSTRIP != 0)
            .normalized(false);
        if is_special {
            special.push(t)
        } else {
            plain.push(t)
        }
    }
    tok.add_special_tokens(&special);
    tok.add_tokens(&plain);
    let mut single: Vec<String> = Vec::new();
    let mut pair: Vec<String> = Vec::new();
    let mut tokens: Vec<(String, u32)> = Vec::new();
    if let Some(b) = sp.bos {
        single.push(name(b));
        tokens.push((name(b), b));
    }
    single.push("$A".into());
    pair.extend(single.iter().cloned());
    for id in [sp.eos, sp.sep].into_iter().flatten() {
        single.push(name(id));
        pair.push(name(id));
        if !tokens.iter().any(|(_, t)| *t == id) {
            tokens.push((name(id), id));
        }
    }
    if let Some(b) = sp.bos {
        pair.push(name(b));
    }
    pair.push("$B:1".into());
    for id in [sp.eos, sp.sep].into_iter().flatten() {
        pair.push(format!("{}:1", name(id)));
    }
    if !tokens.is_empty() {
        let post = TemplateProcessing::builder()
            .try_single(single)
            .and_then(|b| b.try_pair(pair))
            .map_err(|e| tok_err(format!("building the {what} post-processor: {e}")))?
            .special_tokens(tokens)
            .build()
            .map_err(|e| tok_err(format!("building the {what} post-processor: {e}")))?;
        tok.with_post_processor(Some(post));
    }
    Ok(tok)
}

/// The pre-tokenizer's regex splits (Hugging Face `Split`, isolated matches), applied in turn.
pub(super) fn pre_splits(spec: pre::PreSpec) -> Result<PreTokenizerWrapper> {
    let mut pres = Vec::with_capacity(spec.regexes.len());
    for re in spec.regexes {
        let split = Split::new(
            SplitPattern::Regex(re.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| tok_err(format!("{KEY_PRE}: regex {re:?}: {e}")))?;
        pres.push(PreTokenizerWrapper::Split(split));
    }
    Ok(tokenizers::pre_tokenizers::sequence::Sequence::new(pres).into())
}

/// Byte-level BPE: the pre-tokenizer's regex splits, the GPT-2 byte map, ranked merges.
pub(super) fn bpe(
    vocab: &Vocab,
    rules: &Bpe,
    spec: pre::PreSpec,
    sp: &Specials,
) -> Result<Tokenizer> {
    let merges = rules
        .ranked_pairs()
        .into_iter()
        .map(|(a, b)| (vocab.text(a).to_string(), vocab.text(b).to_string()))
        .collect();
    let model = BPE::builder()
        .vocab_and_merges(hf_vocab(vocab), merges)
        .ignore_merges(rules.ignore_merges)
        .build()
        .map_err(hf("BPE"))?;
    let pres = vec![
        pre_splits(spec)?,
        PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, false)),
    ];
    let mut tok = Tokenizer::new(model);
    tok.with_pre_tokenizer(Some(tokenizers::pre_tokenizers::sequence::Sequence::new(
        pres,
    )));
    tok.with_decoder(Some(ByteLevel::new(false, false, false)));
    finish(tok, vocab, |id| vocab.text(id).to_string(), sp, "BPE")
}

/// SentencePiece approximated as Hugging Face does (`LlamaTokenizerFast`): BPE whose merge ranks follow the
/// merged piece's score, with byte fallback. [`Tokenizer::encode`] does not use it.
pub(super) fn spm(
    vocab: &Vocab,
    unk: Option<u32>,
    add_space_prefix: bool,
    sp: &Specials,
) -> Result<Tokenizer> {
    let mut order: Vec<u32> = (0..vocab.texts.len() as u32)
        .filter(|&i| vocab.attrs[i as usize] & attr::NORMAL != 0)
        .collect();
    order.sort_by(|&a, &b| {
        vocab.scores[b as usize]
            .total_cmp(&vocab.scores[a as usize])
            .then(a.cmp(&b))
    });
    let mut merges = Vec::new();
    for id in order {
        let t = vocab.text(id);
        let mut local: Vec<(u32, u32, usize)> = t
            .char_indices()
            .skip(1)
            .filter_map(|(at, _)| {
                let (l, r) = (vocab.id(&t[..at])?, vocab.id(&t[at..])?);
                Some((l, r, at))
            })
            .collect();
        local.sort_unstable();
        merges.extend(
            local
                .into_iter()
                .map(|(_, _, at)| (t[..at].to_string(), t[at..].to_string())),
        );
    }
    let mut b = BPE::builder()
        .vocab_and_merges(hf_vocab(vocab), merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(u) = unk {
        b = b.unk_token(vocab.text(u).to_string());
    }
    let mut tok = Tokenizer::new(b.build().map_err(hf("SentencePiece"))?);
    let space = Replace::new(" ", "\u{2581}").map_err(hf("SentencePiece"))?;
    let norm: NormalizerWrapper = if add_space_prefix {
        tokenizers::normalizers::Sequence::new(vec![
            Prepend::new("\u{2581}".into()).into(),
            space.into(),
        ])
        .into()
    } else {
        space.into()
    };
    tok.with_normalizer(Some(norm));
    let mut decs: Vec<DecoderWrapper> = vec![
        Replace::new("\u{2581}", " ")
            .map_err(hf("SentencePiece"))?
            .into(),
        tokenizers::decoders::byte_fallback::ByteFallback::new().into(),
        tokenizers::decoders::fuse::Fuse::new().into(),
    ];
    if add_space_prefix {
        decs.push(tokenizers::decoders::strip::Strip::new(' ', 1, 0).into());
    }
    tok.with_decoder(Some(tokenizers::decoders::sequence::Sequence::new(decs)));
    finish(
        tok,
        vocab,
        |id| vocab.text(id).to_string(),
        sp,
        "SentencePiece",
    )
}

/// WordPiece: GGUF spells word starts `▁word` and continuations `piece`; Hugging Face wants `word` and
/// `##piece` (bracketed and control tokens are kept as they are).
pub(super) fn wpm(
    f: &GgufFile,
    vocab: &Vocab,
    unk: Option<u32>,
    sp: &Specials,
) -> Result<Tokenizer> {
    let texts: Vec<String> = (0..vocab.texts.len() as u32)
        .map(|id| (vocab.text(id), vocab.attrs[id as usize]))
        .map(|(t, a)| {
            if a & (attr::CONTROL | attr::UNKNOWN) != 0 || (t.starts_with('[') && t.ends_with(']'))
            {
                t.to_string()
            } else if let Some(w) = t.strip_prefix('\u{2581}') {
                w.to_string()
            } else {
                format!("##{t}")
            }
        })
        .collect();
    let mut hv = HfVocab::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        hv.entry(t.clone()).or_insert(i as u32);
    }
    let unk =
        unk.ok_or_else(|| tok_err("WordPiece vocabulary needs tokenizer.ggml.unknown_token_id"))?;
    let model = WordPiece::builder()
        .vocab(hv)
        .unk_token(texts[unk as usize].clone())
        .continuing_subword_prefix("##".into())
        .max_input_chars_per_word(100)
        .build()
        .map_err(hf("WordPiece"))?;
    let lower = opt_bool(f, "tokenizer.ggml.normalizer.lowercase")?.unwrap_or(true);
    let strip = opt_bool(f, "tokenizer.ggml.normalizer.strip_accents")?.unwrap_or(lower);
    let mut tok = Tokenizer::new(model);
    tok.with_normalizer(Some(BertNormalizer::new(true, true, Some(strip), lower)));
    tok.with_pre_tokenizer(Some(tokenizers::pre_tokenizers::bert::BertPreTokenizer));
    tok.with_decoder(Some(tokenizers::decoders::wordpiece::WordPiece::new(
        "##".into(),
        true,
    )));
    finish(tok, vocab, |id| texts[id as usize].clone(), sp, "WordPiece")
}
