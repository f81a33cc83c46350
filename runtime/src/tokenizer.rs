//! The tokenizer as generation sees it: encoding with the model's special-token rules, chat templates,
//! and incremental detokenization that never splits a UTF-8 character.

use serde::Serialize;

use crate::error::{Result, RuntimeError};

pub use cinder_tokenizer::Tokenizer;

/// One chat message.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`
    pub role: String,
    /// the text
    pub content: String,
}

impl ChatMessage {
    /// A message.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Renders `messages` with the model's Jinja chat template (as the GGUF's `tokenizer.chat_template`
/// stores it), with `add_generation_prompt` set so the text ends where the assistant's answer starts.
pub fn apply_chat_template(
    tok: &Tokenizer,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Result<String> {
    let template = match tok.chat_template.as_deref() {
        Some(t) => t,
        None => fallback_template(tok).ok_or_else(|| {
            RuntimeError::Template(
                "the model has no tokenizer.chat_template and its vocabulary matches no built-in \
                 chat format (Gemma turns, ChatML)"
                    .into(),
            )
        })?,
    };
    let mut env = minijinja::Environment::new();
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                msg,
            ))
        },
    );
    env.add_template("chat", template)
        .map_err(|e| RuntimeError::Template(e.to_string()))?;
    let tmpl = env
        .get_template("chat")
        .map_err(|e| RuntimeError::Template(e.to_string()))?;
    let token_text = |id: Option<u32>| {
        id.and_then(|i| tok.decode(&[i], false).ok())
            .unwrap_or_default()
    };
    tmpl.render(minijinja::context! {
        messages => messages,
        add_generation_prompt => add_generation_prompt,
        bos_token => token_text(tok.bos_id),
        eos_token => token_text(tok.eos_id),
    })
    .map_err(|e| RuntimeError::Template(e.to_string()))
}

/// Gemma's turn format (`<start_of_turn>user … <end_of_turn>`; system text is folded into the first
/// user turn, as Gemma's own template does).
const GEMMA_TEMPLATE: &str = "{{ bos_token }}{% if messages and messages[0].role == 'system' %}\
{% set sys = messages[0].content ~ '\n\n' %}{% set turns = messages[1:] %}\
{% else %}{% set sys = '' %}{% set turns = messages %}{% endif %}\
{% for m in turns %}<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}\n\
{% if loop.first %}{{ sys }}{% endif %}{{ m.content | trim }}<end_of_turn>\n{% endfor %}\
{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

/// ChatML (`<|im_start|>role … <|im_end|>`).
const CHATML_TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A built-in template for files that carry none, chosen by the special tokens the vocabulary has
/// (as llama.cpp falls back to known formats).
fn fallback_template(tok: &Tokenizer) -> Option<&'static str> {
    if tok.token_id("<start_of_turn>").is_some() {
        Some(GEMMA_TEMPLATE)
    } else if tok.token_id("<|im_start|>").is_some() {
        Some(CHATML_TEMPLATE)
    } else {
        None
    }
}

/// Turns a growing token sequence into text pieces, holding back bytes until they form whole UTF-8
/// characters. Works with any decoder by diffing decodes of a short window (as TGI does), so merges that
/// change earlier characters (SentencePiece's leading space) come out right.
#[derive(Debug, Default)]
pub struct Detokenizer {
    ids: Vec<u32>,
    /// start of the window whose decode has been partly emitted
    prefix: usize,
    /// end of what has been emitted, in tokens
    read: usize,
}

impl Detokenizer {
    /// A detokenizer for a fresh generation. `context` are tokens before the generated ones (e.g. the
    /// last prompt token) used only to decode the first pieces correctly.
    pub fn new(context: &[u32]) -> Self {
        let tail = &context[context.len().saturating_sub(4)..];
        Self {
            ids: tail.to_vec(),
            prefix: 0,
            read: tail.len(),
        }
    }

    /// Adds a token; returns the new text it completes (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let before = tok
            .decode(&self.ids[self.prefix..self.read], false)
            .map_err(|e| RuntimeError::Tokenizer(e.to_string()))?;
        let after = tok
            .decode(&self.ids[self.prefix..], false)
            .map_err(|e| RuntimeError::Tokenizer(e.to_string()))?;
        match after.get(before.len()..) {
            Some(piece) if after.len() > before.len() && !after.ends_with('\u{FFFD}') => {
                let piece = piece.to_string();
                self.prefix = self.read;
                self.read = self.ids.len();
                Ok(piece)
            }
            _ => Ok(String::new()),
        }
    }

    /// Whatever is still held back (an incomplete character at the very end is emitted as decoded).
    pub fn flush(&mut self, tok: &Tokenizer) -> Result<String> {
        let before = tok
            .decode(&self.ids[self.prefix..self.read], false)
            .map_err(|e| RuntimeError::Tokenizer(e.to_string()))?;
        let after = tok
            .decode(&self.ids[self.prefix..], false)
            .map_err(|e| RuntimeError::Tokenizer(e.to_string()))?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(after.get(before.len()..).unwrap_or("").to_string())
    }
}
