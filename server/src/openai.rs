//! The OpenAI API's request and response bodies (the subset Cinder serves), field names as in
//! OpenAI's API reference so the official clients work unchanged. Extension fields (`top_k`, `min_p`,
//! `repetition_penalty`, `timeout`) follow vLLM's and llama-server's names.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// one stop string
    One(String),
    /// several
    Many(Vec<String>),
}

impl Stop {
    /// As a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// send a last chunk with `usage`
    #[serde(default)]
    pub include_usage: bool,
}

/// Sampling and length fields shared by both endpoints.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Common {
    /// the model name (must be the served one)
    pub model: Option<String>,
    /// most new tokens
    pub max_tokens: Option<i64>,
    /// newer name of `max_tokens` (chat)
    pub max_completion_tokens: Option<i64>,
    /// 0 = greedy
    pub temperature: Option<f64>,
    /// nucleus sampling
    pub top_p: Option<f64>,
    /// extension: keep the k most likely tokens
    pub top_k: Option<i64>,
    /// extension: min-p sampling
    pub min_p: Option<f64>,
    /// extension: repetition penalty
    pub repetition_penalty: Option<f64>,
    /// RNG seed
    pub seed: Option<i64>,
    /// stop strings
    pub stop: Option<Stop>,
    /// stream with Server-Sent Events
    #[serde(default)]
    pub stream: bool,
    /// streaming options
    pub stream_options: Option<StreamOptions>,
    /// extension: seconds before the request ends with finish_reason `timeout`
    pub timeout: Option<f64>,
    /// extension (as vLLM and llama-server): generate past end-of-text tokens, up to `max_tokens`
    #[serde(default)]
    pub ignore_eos: bool,
    /// number of choices (only 1 is served)
    pub n: Option<i64>,
    /// `{"type": "text" | "json_object" | "json_schema", "json_schema": {...}}`
    pub response_format: Option<Value>,
    /// extension (as vLLM): the text must match this regular expression
    pub guided_regex: Option<String>,
    /// extension (as vLLM): the text must follow this Lark grammar
    pub guided_grammar: Option<String>,
    /// chat: `true` to return each token's log-probability; completions: how many alternatives
    pub logprobs: Option<Value>,
    /// chat: alternatives per token (0–20, with `logprobs: true`)
    pub top_logprobs: Option<i64>,
}

/// One chat message. `content` is a string or a list of content parts (text parts are joined).
#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    /// system, user, assistant, tool, …
    pub role: String,
    /// the text
    #[serde(default)]
    pub content: Value,
    /// an assistant's function calls
    pub tool_calls: Option<Vec<Value>>,
    /// a tool message's call id
    pub tool_call_id: Option<String>,
    /// a tool message's function name
    pub name: Option<String>,
}

impl Message {
    /// The text of the message.
    pub fn text(&self) -> Result<String, String> {
        match &self.content {
            Value::String(s) => Ok(s.clone()),
            Value::Null => Ok(String::new()),
            Value::Array(parts) => {
                let mut out = String::new();
                for p in parts {
                    match (p.get("type").and_then(Value::as_str), p.get("text")) {
                        (Some("text"), Some(Value::String(t))) => out.push_str(t),
                        (ty, _) => {
                            return Err(format!(
                                "content part of type {} is not supported (text only)",
                                ty.unwrap_or("?")
                            ));
                        }
                    }
                }
                Ok(out)
            }
            _ => Err("content must be a string or a list of text parts".into()),
        }
    }
}

impl Message {
    /// The message as the chat template reads it: an assistant's calls with their `arguments`
    /// parsed into objects (Hugging Face templates render them with `tojson`).
    pub fn to_chat(&self) -> Result<cinder_runtime::tokenizer::ChatMessage, String> {
        let mut m = cinder_runtime::tokenizer::ChatMessage::new(self.role.clone(), self.text()?);
        if let Some(calls) = &self.tool_calls {
            if self.role != "assistant" {
                return Err("only assistant messages carry tool_calls".into());
            }
            let mut out = Vec::with_capacity(calls.len());
            for (j, c) in calls.iter().enumerate() {
                let f = c
                    .get("function")
                    .filter(|f| f.get("name").is_some_and(Value::is_string))
                    .ok_or_else(|| format!("tool_calls[{j}] needs function.name"))?;
                let args = match f.get("arguments") {
                    Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| {
                        format!("tool_calls[{j}].function.arguments is not JSON: {e}")
                    })?,
                    Some(v) => v.clone(),
                    None => Value::Object(Default::default()),
                };
                let mut c = c.clone();
                c["function"]["arguments"] = args;
                out.push(c);
            }
            m.tool_calls = Some(out);
        }
        if self.role == "tool" && self.tool_call_id.is_none() {
            return Err("a tool message needs tool_call_id".into());
        }
        m.tool_call_id = self.tool_call_id.clone();
        m.name = self.name.clone();
        Ok(m)
    }
}

/// `POST /v1/chat/completions`
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// the conversation
    pub messages: Vec<Message>,
    /// functions the model may call
    pub tools: Option<Value>,
    /// `none`, `auto`, `required` or `{"type": "function", "function": {"name"}}`
    pub tool_choice: Option<Value>,
    /// whether several calls may come in one answer (default true)
    pub parallel_tool_calls: Option<bool>,
    /// extension (as vLLM and llama-server): `{"enable_thinking": false}` asks the template to
    /// skip the model's reasoning
    pub chat_template_kwargs: Option<Value>,
    /// shared fields
    #[serde(flatten)]
    pub common: Common,
}

/// `prompt`: a string or a list holding one string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// text
    Text(String),
    /// `["text"]`
    List(Vec<String>),
}

/// `POST /v1/completions`
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// the prompt
    pub prompt: Prompt,
    /// shared fields
    #[serde(flatten)]
    pub common: Common,
}

/// `usage`
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Usage {
    /// prompt tokens
    pub prompt_tokens: usize,
    /// generated tokens
    pub completion_tokens: usize,
    /// their sum
    pub total_tokens: usize,
    /// cached prompt tokens
    pub prompt_tokens_details: CachedTokens,
}

/// `usage.prompt_tokens_details`
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CachedTokens {
    /// prompt tokens served from the prefix cache
    pub cached_tokens: usize,
}

impl From<cinder_runtime::engine::Usage> for Usage {
    fn from(u: cinder_runtime::engine::Usage) -> Self {
        Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.prompt_tokens + u.completion_tokens,
            prompt_tokens_details: CachedTokens {
                cached_tokens: u.cached_tokens,
            },
        }
    }
}

/// The error body: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorBody {
    /// the error
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorDetail {
    /// human-readable, names the field
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// the request field at fault, if one is
    pub param: Option<String>,
    /// machine-readable code
    pub code: Option<String>,
}
