//! The tokenizer as generation sees it: encoding with the model's special-token rules, chat templates,
//! and incremental detokenization that never splits a UTF-8 character.

use serde::Serialize;

use crate::error::{Result, RuntimeError};

pub use cinder_tokenizer::Tokenizer;

/// One chat message, in the shape Hugging Face chat templates read.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`
    pub role: String,
    /// the text
    pub content: String,
    /// An assistant's function calls: `{"id", "type": "function", "function": {"name",
    /// "arguments"}}`, with `arguments` as a JSON object (templates render it with `tojson`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A tool message's answer to this call id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A tool message's function name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    /// A message.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }
    }
}

/// Whether the model's chat template renders `tools` (the variable Hugging Face templates read)
/// and writes calls in a syntax Cinder parses back ([`crate::tools::ToolFormat`]: Hermes tags,
/// Llama 3.x JSON, Mistral `[TOOL_CALLS]`).
pub fn template_has_tool_calls(tok: &Tokenizer) -> bool {
    crate::tools::ToolFormat::of(tok).is_some()
}

/// Renders `messages` with the model's Jinja chat template (as the GGUF's `tokenizer.chat_template`
/// stores it), with `add_generation_prompt` set so the text ends where the assistant's answer starts.
pub fn apply_chat_template(
    tok: &Tokenizer,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Result<String> {
    apply_chat_template_with_tools(tok, messages, None, add_generation_prompt)
}

/// [`apply_chat_template`] with the function definitions `tools` (OpenAI's `{"type": "function",
/// "function": {...}}` objects) passed to the template as `tools`.
pub fn apply_chat_template_with_tools(
    tok: &Tokenizer,
    messages: &[ChatMessage],
    tools: Option<&[serde_json::Value]>,
    add_generation_prompt: bool,
) -> Result<String> {
    apply_chat_template_opts(tok, messages, tools, add_generation_prompt, None)
}

/// [`apply_chat_template_with_tools`] with `enable_thinking` passed to the template when given
/// (Qwen3's templates close an empty `<think></think>` block for `false`, so the model answers
/// without reasoning; templates that do not read it ignore it).
///
/// ```no_run
/// # fn f(tok: &cinder_tokenizer::Tokenizer) -> cinder_runtime::Result<()> {
/// use cinder_runtime::tokenizer::{ChatMessage, apply_chat_template_opts};
/// let msgs = [ChatMessage::new("user", "2 + 2?")];
/// let prompt = apply_chat_template_opts(tok, &msgs, None, true, Some(false))?;
/// # Ok(()) }
/// ```
pub fn apply_chat_template_opts(
    tok: &Tokenizer,
    messages: &[ChatMessage],
    tools: Option<&[serde_json::Value]>,
    add_generation_prompt: bool,
    enable_thinking: Option<bool>,
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
    // Mistral's templates refuse call ids that are not 9 characters: give them 9-character ids
    // derived from the client's (the same id always maps to the same one).
    let remapped;
    let messages = if crate::tools::ToolFormat::of_template(template)
        == Some(crate::tools::ToolFormat::Mistral)
    {
        remapped = messages.iter().map(nine_char_ids).collect::<Vec<_>>();
        &remapped[..]
    } else {
        messages
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
    env.add_filter("tojson", tojson);
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
        tools => tools,
        add_generation_prompt => add_generation_prompt,
        bos_token => token_text(tok.bos_id),
        eos_token => token_text(tok.eos_id),
        // undefined unless asked, so `enable_thinking is defined` reads false as in Python
        enable_thinking => enable_thinking.map_or(minijinja::Value::UNDEFINED, minijinja::Value::from),
    })
    .map_err(|e| RuntimeError::Template(e.to_string()))
}

/// `m` with each call id (and a tool message's `tool_call_id`) as 9 letters and digits: kept where
/// it is already, else derived from its FNV-1a hash.
fn nine_char_ids(m: &ChatMessage) -> ChatMessage {
    fn nine(id: &str) -> String {
        if id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return id.to_string();
        }
        const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in id.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        (0..9)
            .map(|_| {
                let c = DIGITS[(h % 62) as usize] as char;
                h /= 62;
                c
            })
            .collect()
    }
    let mut m = m.clone();
    if let Some(calls) = &mut m.tool_calls {
        for c in calls {
            if let Some(id) = c.get("id").and_then(|v| v.as_str()).map(nine) {
                c["id"] = serde_json::Value::String(id);
            }
        }
    }
    m.tool_call_id = m.tool_call_id.as_deref().map(nine);
    m
}

/// Jinja's `tojson` as Hugging Face's chat templates run it (Python's `json.dumps` with
/// `ensure_ascii=False`): `", "` and `": "` between items, keys in their order, no HTML escaping,
/// `indent=N` for one item per line.
fn tojson(
    v: minijinja::Value,
    kwargs: minijinja::value::Kwargs,
) -> std::result::Result<minijinja::Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&v).map_err(|e| {
        minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string())
    })?;
    let mut out = String::new();
    py_json(&json, indent, 0, &mut out);
    Ok(minijinja::Value::from_safe_string(out))
}

fn py_json(v: &serde_json::Value, indent: Option<usize>, depth: usize, out: &mut String) {
    use serde_json::Value as J;
    let open = |out: &mut String, d: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * d));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Array(a) if !a.is_empty() => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                open(out, depth + 1);
                py_json(x, indent, depth + 1, out);
            }
            open(out, depth);
            out.push(']');
        }
        J::Object(m) if !m.is_empty() => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                open(out, depth + 1);
                out.push_str(&J::String(k.clone()).to_string());
                out.push_str(": ");
                py_json(x, indent, depth + 1, out);
            }
            open(out, depth);
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tojson_writes_python_json_dumps() {
        let v: serde_json::Value =
            serde_json::from_str(r#"{"b": [1, "x<y"], "a": {"c": null}, "e": {}}"#).expect("json");
        let mut out = String::new();
        py_json(&v, None, 0, &mut out);
        assert_eq!(out, r#"{"b": [1, "x<y"], "a": {"c": null}, "e": {}}"#);
        let mut out = String::new();
        py_json(&serde_json::json!({"a": [1]}), Some(2), 0, &mut out);
        assert_eq!(out, "{\n  \"a\": [\n    1\n  ]\n}");
    }
}
