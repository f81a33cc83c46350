//! The tokenizer as generation sees it: encoding with the model's special-token rules, chat templates,
//! and incremental detokenization that never splits a UTF-8 character.

use cinder_gguf::tokenizer::GgufTokenizer;
use serde::Serialize;

use crate::error::{Result, RuntimeError};

pub use cinder_gguf::tokenizer::GgufTokenizer as Tokenizer;

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
    tok: &GgufTokenizer,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Result<String> {
    let template = tok
        .chat_template
        .as_deref()
        .ok_or_else(|| RuntimeError::Template("the model has no tokenizer.chat_template".into()))?;
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
    pub fn push(&mut self, tok: &GgufTokenizer, id: u32) -> Result<String> {
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
    pub fn flush(&mut self, tok: &GgufTokenizer) -> Result<String> {
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
