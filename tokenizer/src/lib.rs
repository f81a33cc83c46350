//! # cinder-tokenizer
//!
//! Tokenizers built from GGUF `tokenizer.ggml.*` metadata (or a Hugging Face `tokenizer.json`), matching
//! llama.cpp's tokenization exactly.
//!
//! Reference: llama.cpp `src/llama-vocab.cpp` (vocabulary loading, `tokenizer_st_partition`, the SPM, BPE
//! and WPM sessions, `token_to_piece`, `detokenize`) and its test vectors `models/ggml-vocab-*.gguf.{inp,out}`
//! made by `tests/test-tokenizer-0` with `add_special = false, parse_special = false`.
//!
//! How a text becomes ids, as in llama.cpp:
//! 1. *Partition*: the special tokens (control, unknown and user-defined; control and unknown only when
//!    `parse_special`) are cut out of the raw text, longest first, honouring their lstrip/rstrip attributes.
//! 2. Each remaining text fragment is tokenized by the model kind:
//!    - [`TokenizerKind::SentencePiece`] (`llama`): spaces become `▁` (a leading one is added when
//!      `add_space_prefix` and the fragment starts the text or follows a special token), then the
//!      highest-scoring adjacent pair that forms a vocabulary token is merged until none is left; pieces that
//!      are not tokens fall back to `<0xNN>` byte tokens. This is Cinder's own code (`spm.rs`), because
//!      the Hugging Face BPE model ranks merges, not token scores.
//!    - [`TokenizerKind::Bpe`] (`gpt2`): the pre-tokenizer regexes chosen by `tokenizer.ggml.pre` split
//!      the fragment (Hugging Face `Split`s), then BPE merges apply by rank on each piece's bytes
//!      (Cinder's own code, `bpe.rs`, over the pooled vocabulary: the Hugging Face model would hold two
//!      more copies of it).
//!    - [`TokenizerKind::WordPiece`] (`bert`): BERT normalization (lowercase, accents stripped, CJK
//!      isolated), whitespace/punctuation split and greedy longest-match WordPiece, through the Hugging
//!      Face pipeline (GGUF stores word starts as `▁word`; they are mapped back to `word` / `##piece`).
//! 3. BOS/EOS (and SEP for WordPiece) are added when asked and the vocabulary says so.
//!
//! [`Tokenizer::hf_tokenizer`] writes any of them out as an equivalent Hugging Face tokenizer.
//!
//! Decoding concatenates each token's bytes ([`Tokenizer::token_bytes`]) like llama.cpp's
//! `token_to_piece`, then applies llama.cpp's `clean_spaces` rules where the vocabulary enables them.

#![warn(missing_docs)]

mod bpe;
mod error;
mod gguf;
mod hf;
mod json;
mod pre;
mod spm;
mod vocab;

use std::sync::OnceLock;

use tokenizers::pre_tokenizers::PreTokenizerWrapper;

pub use error::{Result, TokenizerError};
use vocab::{Fragment, Vocab};

/// Token attributes, as llama.cpp's `llama_token_attr` bits.
pub(crate) mod attr {
    /// `LLAMA_TOKEN_ATTR_UNKNOWN`
    pub const UNKNOWN: u16 = 1 << 0;
    /// `LLAMA_TOKEN_ATTR_UNUSED`
    pub const UNUSED: u16 = 1 << 1;
    /// `LLAMA_TOKEN_ATTR_NORMAL`
    pub const NORMAL: u16 = 1 << 2;
    /// `LLAMA_TOKEN_ATTR_CONTROL`
    pub const CONTROL: u16 = 1 << 3;
    /// `LLAMA_TOKEN_ATTR_USER_DEFINED`
    pub const USER_DEFINED: u16 = 1 << 4;
    /// `LLAMA_TOKEN_ATTR_BYTE`
    pub const BYTE: u16 = 1 << 5;
    /// `LLAMA_TOKEN_ATTR_LSTRIP`
    pub const LSTRIP: u16 = 1 << 7;
    /// `LLAMA_TOKEN_ATTR_RSTRIP`
    pub const RSTRIP: u16 = 1 << 8;
}

/// The tokenization algorithm of a vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerKind {
    /// Byte-level BPE with ranked merges (`tokenizer.ggml.model = "gpt2"`; GPT-2, Llama 3, Qwen2, SmolLM).
    Bpe,
    /// SentencePiece (`"llama"`; Llama 2, Gemma, Phi-3): score-driven merges, `▁` for spaces, byte fallback.
    SentencePiece,
    /// WordPiece (`"bert"`): BERT normalization and greedy longest-match pieces.
    WordPiece,
}

/// A vocabulary and its tokenizer, built from GGUF metadata ([`Tokenizer::from_gguf`]) or from a
/// Hugging Face `tokenizer.json` ([`Tokenizer::from_tokenizer_json`]).
pub struct Tokenizer {
    /// The tokenization algorithm.
    pub kind: TokenizerKind,
    /// `tokenizer.ggml.pre` (the pre-tokenizer name), empty when absent or not applicable.
    pub pre: String,
    /// Beginning-of-sequence token.
    pub bos_id: Option<u32>,
    /// End-of-sequence token.
    pub eos_id: Option<u32>,
    /// Tokens that end generation: EOS, EOT/EOM and turn-end tokens such as `<|im_end|>`, `<end_of_turn>`,
    /// `<|eot_id|>` (llama.cpp's `special_eog_ids`), sorted.
    pub eot_ids: Vec<u32>,
    /// Whether `encode(.., add_special = true)` prepends BOS.
    pub add_bos: bool,
    /// Whether `encode(.., add_special = true)` appends EOS.
    pub add_eos: bool,
    /// Number of tokens in the vocabulary.
    pub vocab_size: usize,
    /// `tokenizer.chat_template` (Jinja), if the file has one.
    pub chat_template: Option<String>,
    /// Control tokens (BOS, EOS, `<|im_start|>`, ...), sorted.
    pub special_ids: Vec<u32>,
    /// Separator token (WordPiece `[SEP]`).
    pub sep_id: Option<u32>,
    /// Whether `encode(.., add_special = true)` appends SEP (WordPiece).
    pub add_sep: bool,
    /// Unknown-token id.
    pub unk_id: Option<u32>,
    /// Padding token id.
    pub pad_id: Option<u32>,
    /// SentencePiece: a space is prepended to the text (and to text after a special token).
    pub add_space_prefix: bool,
    /// Decoding applies llama.cpp's `clean_spaces` (drops the space before `? ! . ,` and some contractions).
    pub clean_spaces: bool,
    vocab: Vocab,
    engine: Engine,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind)
            .field("pre", &self.pre)
            .field("vocab_size", &self.vocab_size)
            .field("bos_id", &self.bos_id)
            .field("eos_id", &self.eos_id)
            .field("eot_ids", &self.eot_ids)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .finish_non_exhaustive()
    }
}

/// How text fragments are turned into ids.
enum Engine {
    /// Cinder's SentencePiece code over [`Vocab`].
    Spm,
    /// Cinder's byte-level BPE over [`Vocab`], after the pre-tokenizer's regex splits.
    Bpe {
        /// The `Split` regexes of `tokenizer.ggml.pre`, applied in turn.
        pre: Box<PreTokenizerWrapper>,
        /// Which pre-tokenizer that is (to write it out in [`Tokenizer::hf_tokenizer`]).
        spec: pre::PreSpec,
        merges: Box<bpe::Bpe>,
    },
    /// WordPiece: the Hugging Face normalizer, pre-tokenizer and model of this tokenizer, applied per
    /// fragment.
    WordPiece(Box<tokenizers::Tokenizer>),
    /// A `tokenizer.json`: the Hugging Face tokenizer end to end. `plain` is a copy that does not match
    /// special tokens in the input (built on first use of `parse_special = false`).
    HfJson {
        tok: Box<tokenizers::Tokenizer>,
        plain: Box<OnceLock<tokenizers::Tokenizer>>,
    },
}

pub(crate) fn tok_err(msg: impl Into<String>) -> TokenizerError {
    TokenizerError::Invalid(msg.into())
}

impl Tokenizer {
    /// Builds the tokenizer from a GGUF file's `tokenizer.ggml.*` metadata. Every missing or ill-typed key,
    /// length mismatch, bad merge line or out-of-range special id is a [`TokenizerError::Invalid`] naming it.
    pub fn from_gguf(file: &cinder_gguf::GgufFile) -> Result<Self> {
        gguf::build(file)
    }

    /// Loads a Hugging Face `tokenizer.json`. BOS/EOS/SEP and whether they are added come from its
    /// post-processor; a `tokenizer_config.json` beside it, when present, supplies the BOS/EOS tokens and
    /// the chat template.
    pub fn from_tokenizer_json(path: impl AsRef<std::path::Path>) -> Result<Self> {
        json::build(path.as_ref())
    }

    /// Tokenizes like llama.cpp's `llama_tokenize(text, add_special, parse_special = false)`: special tokens
    /// written in the text are not recognised (user-defined tokens are), as in llama.cpp's test vectors.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        self.tokenize(text, add_special, false)
    }

    /// Tokenizes like llama.cpp's `llama_tokenize`. `add_special` adds BOS/EOS/SEP as the vocabulary says;
    /// `parse_special` also recognises control tokens written in the text (e.g. `<|im_start|>` in a
    /// rendered chat template).
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        if let Engine::HfJson { tok, plain } = &self.engine {
            return encode_json(tok, plain, text, add_special, parse_special);
        }
        let mut out = Vec::new();
        let (first, last) = if add_special {
            self.special_ends()?
        } else {
            (None, None)
        };
        out.extend(first);
        let mut prev_special = true;
        for frag in self.vocab.partition(text, parse_special) {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(t) => {
                    match &self.engine {
                        Engine::Spm => {
                            let mut s = String::with_capacity(t.len() + 4);
                            if self.add_space_prefix && prev_special {
                                s.push('\u{2581}');
                            }
                            s.push_str(&t.replace(' ', "\u{2581}"));
                            spm::tokenize(&self.vocab, &s, &mut out)?;
                        }
                        Engine::Bpe { pre, merges, .. } => {
                            bpe_fragment(pre, merges, &self.vocab, t, &mut out)?
                        }
                        Engine::WordPiece(tok) => hf_fragment(tok, t, &mut out)?,
                        Engine::HfJson { .. } => {} // encoded whole above
                    }
                    prev_special = false;
                }
            }
        }
        out.extend(last);
        Ok(out)
    }

    /// The tokens `add_special` puts around a text: BOS before when the vocabulary adds it, and after
    /// it EOS, or SEP for WordPiece.
    fn special_ends(&self) -> Result<(Option<u32>, Option<u32>)> {
        let first = match self.add_bos {
            true => Some(
                self.bos_id
                    .ok_or_else(|| tok_err("add_bos is set but there is no BOS token"))?,
            ),
            false => None,
        };
        let last = match self.kind {
            TokenizerKind::WordPiece if self.add_sep => Some(
                self.sep_id
                    .ok_or_else(|| tok_err("add_sep is set but there is no SEP token"))?,
            ),
            TokenizerKind::WordPiece => None,
            _ if self.add_eos => Some(
                self.eos_id
                    .ok_or_else(|| tok_err("add_eos is set but there is no EOS token"))?,
            ),
            _ => None,
        };
        Ok((first, last))
    }

    /// Tokenizes one input of an encoder (a sentence embedder): special tokens written in the text
    /// are recognised, the special tokens are added, and a text too long keeps its first tokens —
    /// the text's own tokens are cut so that, with the specials around them (`[CLS]` … `[SEP]`,
    /// `<bos>` … `<eos>`), at most `max_tokens` ids remain. This is Hugging Face's right truncation
    /// of a single sequence, so an encoder sees what sentence-transformers feeds it.
    ///
    /// # Examples
    /// ```no_run
    /// # fn main() -> cinder_tokenizer::Result<()> {
    /// let tok = cinder_tokenizer::Tokenizer::from_tokenizer_json("all-MiniLM-L6-v2/tokenizer.json")?;
    /// let ids = tok.encode_truncated("a very long document ...", 128)?;
    /// assert!(ids.len() <= 128);
    /// # Ok(())
    /// # }
    /// ```
    pub fn encode_truncated(&self, text: &str, max_tokens: usize) -> Result<Vec<u32>> {
        if let Engine::HfJson { tok, .. } = &self.engine {
            return truncate_json(tok, text, max_tokens);
        }
        let (first, last) = self.special_ends()?;
        let mut ids = self.tokenize(text, false, true)?;
        let added = usize::from(first.is_some()) + usize::from(last.is_some());
        ids.truncate(max_tokens.saturating_sub(added));
        Ok(first.into_iter().chain(ids).chain(last).collect())
    }

    /// A Hugging Face tokenizer equivalent to this one (added tokens, post-processor and decoder set
    /// up as llama.cpp would), e.g. to write a `tokenizer.json`. For BPE and WordPiece it tokenizes
    /// exactly as [`Tokenizer::tokenize`] with `parse_special`; for SentencePiece it is Hugging
    /// Face's approximation (BPE whose merges follow the scores, as `LlamaTokenizerFast`). Built on
    /// each call from the vocabulary, so the tokenizer does not hold a second copy of it.
    pub fn hf_tokenizer(&self) -> Result<tokenizers::Tokenizer> {
        let specials = hf::Specials {
            bos: self.bos_id.filter(|_| self.add_bos),
            eos: self.eos_id.filter(|_| self.add_eos),
            sep: self.sep_id.filter(|_| self.add_sep),
        };
        match &self.engine {
            Engine::Spm => hf::spm(&self.vocab, self.unk_id, self.add_space_prefix, &specials),
            Engine::Bpe { spec, merges, .. } => hf::bpe(&self.vocab, merges, *spec, &specials),
            Engine::WordPiece(tok) | Engine::HfJson { tok, .. } => Ok(tok.as_ref().clone()),
        }
    }

    /// Decodes ids to text like llama.cpp's `detokenize`: the tokens' bytes concatenated (control and unknown
    /// tokens left out when `skip_special`), the space added by `add_space_prefix` removed from the first
    /// token, `clean_spaces` applied where the vocabulary enables it, invalid UTF-8 replaced by U+FFFD.
    /// Unlike llama.cpp, a skipped BOS does not keep that first space. A `tokenizer.json` decodes through
    /// its own decoder.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        if let Engine::HfJson { tok, .. } = &self.engine {
            return tok
                .decode(ids, skip_special)
                .map_err(|e| tok_err(format!("decoding: {e}")));
        }
        let mut bytes = Vec::new();
        let mut strip_space = self.add_space_prefix || self.kind == TokenizerKind::WordPiece;
        for &id in ids {
            let piece = self.token_bytes(id)?;
            let a = self.vocab.attrs[id as usize];
            if skip_special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
                continue;
            }
            let piece = match piece {
                [b' ', rest @ ..] if strip_space => rest,
                p => p,
            };
            strip_space = false;
            bytes.extend_from_slice(piece);
        }
        if self.clean_spaces {
            clean_spaces(&mut bytes);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The raw bytes token `id` stands for (llama.cpp `token_to_piece` with specials shown): byte-level BPE
    /// characters mapped back to bytes, SentencePiece `▁` as a space and `<0xNN>` as the byte, control and
    /// user-defined tokens as their text. One token may hold part of a UTF-8 character; concatenate bytes
    /// before converting to text.
    pub fn token_bytes(&self, id: u32) -> Result<&[u8]> {
        self.vocab.pieces.bytes(id as usize).ok_or_else(|| {
            tok_err(format!(
                "token id {id} is outside the vocabulary of {}",
                self.vocab_size
            ))
        })
    }

    /// The stored text of token `id` (e.g. `Ġthe`, `▁the`, `<|im_end|>`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.texts.str(id as usize)
    }

    /// The id of the token whose stored text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    /// Whether `id` is a control token (rendered only when specials are shown).
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab
            .attrs
            .get(id as usize)
            .is_some_and(|a| a & attr::CONTROL != 0)
    }

    /// Whether generating `id` ends generation (see [`Tokenizer::eot_ids`]).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eot_ids.binary_search(&id).is_ok()
    }

    /// Checks the vocabulary against a model's token embedding: the row count must equal the vocabulary
    /// size and every special id must index a row.
    pub fn validate_against_model(&self, n_embd_rows: usize) -> Result<()> {
        if self.vocab_size != n_embd_rows {
            return Err(tok_err(format!(
                "the vocabulary has {} tokens but the token embedding has {n_embd_rows} rows",
                self.vocab_size
            )));
        }
        let named = [
            ("BOS", self.bos_id),
            ("EOS", self.eos_id),
            ("SEP", self.sep_id),
            ("UNK", self.unk_id),
            ("PAD", self.pad_id),
        ];
        let listed = self
            .eot_ids
            .iter()
            .chain(&self.special_ids)
            .map(|&id| ("special", Some(id)));
        for (what, id) in named.into_iter().chain(listed) {
            if let Some(id) = id
                && id as usize >= n_embd_rows
            {
                return Err(tok_err(format!(
                    "{what} token id {id} is outside the token embedding's {n_embd_rows} rows"
                )));
            }
        }
        Ok(())
    }
}

/// Byte-level BPE on one text fragment: split by the pre-tokenizer's regexes, each piece merged.
fn bpe_fragment(
    pre: &PreTokenizerWrapper,
    merges: &bpe::Bpe,
    vocab: &Vocab,
    text: &str,
    out: &mut Vec<u32>,
) -> Result<()> {
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
    let mut pts = PreTokenizedString::from(text);
    pre.pre_tokenize(&mut pts)
        .map_err(|e| tok_err(format!("pre-tokenizing {text:?}: {e}")))?;
    for (word, _, _) in pts.get_splits(OffsetReferential::Original, OffsetType::None) {
        merges.word(vocab, word.as_bytes(), out);
    }
    Ok(())
}

/// Runs a Hugging Face tokenizer's normalizer, pre-tokenizer and model on one text fragment (no added
/// tokens).
fn hf_fragment(tok: &tokenizers::Tokenizer, text: &str, out: &mut Vec<u32>) -> Result<()> {
    use tokenizers::{
        Model, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
    };
    let hf = |e: tokenizers::Error| tok_err(format!("tokenizing {text:?}: {e}"));
    let mut pts = PreTokenizedString::from(text);
    if let Some(n) = tok.get_normalizer() {
        pts.normalize(|s| n.normalize(s)).map_err(hf)?;
    }
    if let Some(p) = tok.get_pre_tokenizer() {
        p.pre_tokenize(&mut pts).map_err(hf)?;
    }
    let model = tok.get_model();
    pts.tokenize(|s| model.tokenize(s.get())).map_err(hf)?;
    for (_, _, toks) in pts.get_splits(OffsetReferential::Original, OffsetType::None) {
        if let Some(toks) = toks {
            out.extend(toks.iter().map(|t| t.id));
        }
    }
    Ok(())
}

/// Tokenizes with a `tokenizer.json` end to end; without `parse_special`, through the copy that does
/// not match special tokens in the text.
fn encode_json(
    tok: &tokenizers::Tokenizer,
    plain: &OnceLock<tokenizers::Tokenizer>,
    text: &str,
    add_special: bool,
    parse_special: bool,
) -> Result<Vec<u32>> {
    let tok = if parse_special {
        tok
    } else {
        plain.get_or_init(|| {
            let mut t = tok.clone();
            t.set_encode_special_tokens(true);
            t
        })
    };
    let enc = tok
        .encode(text, add_special)
        .map_err(|e| tok_err(format!("tokenizing {text:?}: {e}")))?;
    Ok(enc.get_ids().to_vec())
}

/// [`Tokenizer::encode_truncated`] through a `tokenizer.json`: its own encoding of the text alone,
/// cut to leave room for the post-processor's special tokens, then post-processed, as Hugging Face
/// does with a truncation length set.
fn truncate_json(tok: &tokenizers::Tokenizer, text: &str, max_tokens: usize) -> Result<Vec<u32>> {
    use tokenizers::{PostProcessor, TruncationDirection};
    let hf = |e: tokenizers::Error| tok_err(format!("tokenizing {text:?}: {e}"));
    let mut enc = tok.encode(text, false).map_err(hf)?;
    let added = tok
        .get_post_processor()
        .map_or(0, |p| p.added_tokens(false));
    enc.truncate(
        max_tokens.saturating_sub(added),
        0,
        TruncationDirection::Right,
    );
    let enc = tok.post_process(enc, None, true).map_err(hf)?;
    Ok(enc.get_ids().to_vec())
}

/// llama.cpp's `clean_spaces` passes (Hugging Face `clean_up_tokenization_spaces`), ported literally
/// (in place, as llama.cpp does, so that its corner cases match too).
fn clean_spaces(text: &mut Vec<u8>) {
    // " ?", " !", " .", " ," lose the space
    let n = text.len();
    if n == 0 {
        return;
    }
    let mut total = 1;
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
    // " ' " loses both spaces
    let n = text.len();
    let mut total = 1;
    let mut i = 1;
    while i < n {
        let x = text[i];
        if x == b'\'' && i + 1 < n && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);
    // " 's", " 'm", " 're", " 've" lose the space
    let n = text.len();
    let mut total = 1;
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = text[i + 1];
            if matches!(x1, b's' | b'm')
                || (i + 2 < n && matches!((x1, text[i + 2]), (b'r' | b'v', b'e')))
            {
                total -= 1;
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

/// GPT-2's byte-to-character map: printable Latin-1 bytes stand for themselves, the other 68 bytes
/// for U+0100.. in byte order. `GPT2_BYTE_CHAR[b]` is the code point of byte `b`'s character.
const GPT2_BYTE_CHAR: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut n = 0;
    let mut b = 0;
    while b < 256 {
        let keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        table[b] = if keep { b as u16 } else { 256 + n };
        n += !keep as u16;
        b += 1;
    }
    table
};

/// [`GPT2_BYTE_CHAR`] inverted: `GPT2_CHAR_BYTE[c]` is the byte of char `c`, or -1.
const GPT2_CHAR_BYTE: [i16; 324] = {
    let mut table = [-1i16; 324];
    let mut b = 0;
    while b < 256 {
        table[GPT2_BYTE_CHAR[b] as usize] = b as i16;
        b += 1;
    }
    table
};

/// The byte a GPT-2 byte-level character stands for.
pub(crate) fn gpt2_char_byte(c: char) -> Option<u8> {
    let b = *GPT2_CHAR_BYTE.get(c as usize)?;
    u8::try_from(b).ok()
}

/// The GPT-2 byte-level character that stands for byte `b` (the inverse of [`gpt2_char_byte`]).
pub(crate) fn gpt2_byte_char(b: u8) -> char {
    // every entry is below U+0144, a valid scalar value
    char::from_u32(u32::from(GPT2_BYTE_CHAR[b as usize])).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// Parses a `<0xNN>` byte-token text.
pub(crate) fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_table_round_trips() {
        assert_eq!(gpt2_char_byte('Ġ'), Some(b' '));
        assert_eq!(gpt2_char_byte('Ċ'), Some(b'\n'));
        assert_eq!(gpt2_char_byte('ĉ'), Some(b'\t'));
        assert_eq!(gpt2_char_byte('a'), Some(b'a'));
        assert_eq!(gpt2_char_byte('\u{00AD}'), None);
        assert_eq!(gpt2_char_byte('\u{2581}'), None);
        for b in 0..=255u8 {
            assert_eq!(gpt2_char_byte(gpt2_byte_char(b)), Some(b));
        }
        let mut seen = [false; 256];
        for c in (0..324u32).filter_map(char::from_u32) {
            if let Some(b) = gpt2_char_byte(c) {
                assert!(!seen[b as usize], "byte {b} twice");
                seen[b as usize] = true;
            }
        }
        assert!(seen.iter().all(|&x| x));
    }

    #[test]
    fn tokenizer_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Tokenizer>();
    }

    #[test]
    fn byte_tokens_parse() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(parse_byte_token("<0xff>"), Some(255));
        assert_eq!(parse_byte_token("<0x1>"), None);
        assert_eq!(parse_byte_token("0x0A"), None);
    }

    #[test]
    fn clean_spaces_as_llama_cpp() {
        let mut t = b"Hello , world ! it 's a ' b I 'd".to_vec();
        clean_spaces(&mut t);
        assert_eq!(String::from_utf8(t).unwrap(), "Hello, world! it's a'b I 'd");
    }
}
