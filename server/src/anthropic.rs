//! Anthropic's Messages API: `POST /v1/messages` (whole or streamed with Anthropic's event
//! sequence) and `POST /v1/messages/count_tokens`, field names as in Anthropic's API reference so
//! the official `anthropic` clients work unchanged. A translation layer only: the conversation goes
//! through the shared chat path (`turn.rs`) — template, tools, forced-call grammar, the
//! engine, the call parser and the reasoning splitter — and errors come back in Anthropic's shape
//! (`{"type": "error", "error": {"type", "message"}}`; a full queue is `529 overloaded_error`).

use std::convert::Infallible;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use cinder_runtime::engine::FinishReason;
use cinder_runtime::tokenizer::ChatMessage;
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;
use crate::openai::{Common, Stop};
use crate::tools;
use crate::turn::{self, Ending, Render, Step, Turn};

/// `POST /v1/messages` (and, without `max_tokens`, `/v1/messages/count_tokens`).
#[derive(Debug, Clone, Deserialize)]
pub struct MessagesRequest {
    /// the model name (must be the served one)
    pub model: String,
    /// the conversation: `user` and `assistant` turns
    pub messages: Vec<InputMessage>,
    /// the system prompt: a string or text blocks
    #[serde(default)]
    pub system: Option<Value>,
    /// most new tokens (required by `/v1/messages`)
    pub max_tokens: Option<i64>,
    /// strings that end the answer
    pub stop_sequences: Option<Vec<String>>,
    /// stream with server-sent events
    #[serde(default)]
    pub stream: bool,
    /// 0 = greedy; Anthropic's range is [0, 1]
    pub temperature: Option<f64>,
    /// nucleus sampling
    pub top_p: Option<f64>,
    /// keep the k most likely tokens
    pub top_k: Option<i64>,
    /// client tools: `{"name", "description", "input_schema"}`
    pub tools: Option<Vec<Value>>,
    /// `{"type": "auto" | "any" | "tool" | "none", "name", "disable_parallel_tool_use"}`
    pub tool_choice: Option<Value>,
    /// `{"type": "enabled" | "adaptive" | "between_tools" | "disabled", …}`
    pub thinking: Option<Value>,
    /// `{"format": {"type": "json_schema", "schema"}, "effort"}`: the schema constrains the
    /// answer (the shared structured-output path); `effort` is accepted and has no effect
    pub output_config: Option<Value>,
    /// `{"user_id"}`: accepted and logged
    pub metadata: Option<Value>,
    /// extension (as vLLM): the answer must match this regular expression
    pub guided_regex: Option<String>,
    /// extension (as vLLM): the answer must follow this Lark grammar
    pub guided_grammar: Option<String>,
}

/// One turn: `content` is a string or a list of blocks.
#[derive(Debug, Clone, Deserialize)]
pub struct InputMessage {
    /// `user` or `assistant`
    pub role: String,
    /// a string or blocks (`text`, `tool_use`, `tool_result`, `thinking`)
    pub content: Value,
}

fn bad(message: impl Into<String>, field: &str) -> ApiError {
    ApiError::bad_request(message, field)
}

/// The text of a string or of a list of `text` blocks (`what` names it in errors).
fn text_of(v: &Value, what: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(blocks) => {
            let mut out = Vec::with_capacity(blocks.len());
            for (j, b) in blocks.iter().enumerate() {
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => out.push(t.as_str()),
                    (ty, _) => {
                        return Err(bad(
                            format!(
                                "{what}[{j}]: a block of type {} where text is expected",
                                ty.unwrap_or("?")
                            ),
                            what,
                        ));
                    }
                }
            }
            Ok(out.join("\n"))
        }
        _ => Err(bad(
            format!("{what} must be a string or a list of text blocks"),
            what,
        )),
    }
}

/// The conversation as the chat template reads it: the system prompt first; an assistant's
/// `tool_use` blocks as its tool calls; a user's `tool_result` blocks as `tool` messages before
/// the user's text; `thinking` blocks dropped (templates render past turns without reasoning).
pub fn to_chat(req: &MessagesRequest) -> Result<Vec<ChatMessage>, ApiError> {
    let mut out = Vec::with_capacity(req.messages.len() + 1);
    if let Some(sys) = &req.system {
        let text = text_of(sys, "system")?;
        if !text.is_empty() {
            out.push(ChatMessage::new("system", text));
        }
    }
    if req.messages.is_empty() {
        return Err(bad("messages must not be empty", "messages"));
    }
    // tool_use id -> function name, for the tool messages that answer them
    let mut names = std::collections::HashMap::new();
    for (i, m) in req.messages.iter().enumerate() {
        let at = |j: usize| format!("messages[{i}].content[{j}]");
        if m.role != "user" && m.role != "assistant" {
            return Err(bad(
                format!(
                    "messages[{i}].role must be \"user\" or \"assistant\" (got {:?}); the system \
                     prompt goes in `system`",
                    m.role
                ),
                "messages",
            ));
        }
        let blocks = match &m.content {
            Value::String(s) => {
                out.push(ChatMessage::new(m.role.clone(), s.clone()));
                continue;
            }
            Value::Array(b) => b,
            _ => {
                return Err(bad(
                    format!("messages[{i}].content must be a string or a list of blocks"),
                    "messages",
                ));
            }
        };
        let (mut text, mut calls, mut results) = (Vec::new(), Vec::new(), Vec::new());
        for (j, b) in blocks.iter().enumerate() {
            match b.get("type").and_then(Value::as_str).unwrap_or("") {
                "text" => match b.get("text") {
                    Some(Value::String(t)) => text.push(t.clone()),
                    _ => return Err(bad(format!("{}.text must be a string", at(j)), "messages")),
                },
                "tool_use" if m.role == "assistant" => {
                    let (Some(id), Some(name)) = (
                        b.get("id").and_then(Value::as_str),
                        b.get("name").and_then(Value::as_str),
                    ) else {
                        return Err(bad(
                            format!("{}: a tool_use block needs `id` and `name`", at(j)),
                            "messages",
                        ));
                    };
                    let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                    names.insert(id.to_string(), name.to_string());
                    calls.push(json!({"id": id, "type": "function",
                                      "function": {"name": name, "arguments": input}}));
                }
                "tool_result" if m.role == "user" => {
                    let Some(id) = b.get("tool_use_id").and_then(Value::as_str) else {
                        return Err(bad(
                            format!("{}: a tool_result block needs `tool_use_id`", at(j)),
                            "messages",
                        ));
                    };
                    let content = text_of(
                        b.get("content").unwrap_or(&Value::Null),
                        &format!("{}.content", at(j)),
                    )?;
                    let mut r = ChatMessage::new("tool", content);
                    r.tool_call_id = Some(id.to_string());
                    r.name = names.get(id).cloned();
                    results.push(r);
                }
                "thinking" | "redacted_thinking" if m.role == "assistant" => {}
                other => {
                    return Err(bad(
                        format!(
                            "{}: blocks of type {other:?} are not supported in a {} turn (text, \
                             tool_use from the assistant, tool_result from the user)",
                            at(j),
                            m.role
                        ),
                        "messages",
                    ));
                }
            }
        }
        out.extend(results);
        if !calls.is_empty() || !text.is_empty() {
            let mut msg = ChatMessage::new(m.role.clone(), text.join("\n"));
            msg.tool_calls = (!calls.is_empty()).then_some(calls);
            out.push(msg);
        }
    }
    Ok(out)
}

/// `tools` and `tool_choice` checked through the shared tool checks.
fn tools_of(req: &MessagesRequest) -> Result<Option<tools::Tools>, ApiError> {
    let entries = match &req.tools {
        None => None,
        Some(list) => {
            let mut v = Vec::with_capacity(list.len());
            for (i, t) in list.iter().enumerate() {
                match t.get("type").and_then(Value::as_str) {
                    None | Some("custom") => {}
                    Some(other) => {
                        return Err(bad(
                            format!(
                                "tools[{i}]: server tools ({other:?}) are not available; give \
                                 client tools with name and input_schema"
                            ),
                            "tools",
                        ));
                    }
                }
                let mut f = json!({"name": t.get("name").cloned().unwrap_or(Value::Null)});
                if let Some(d) = t.get("description") {
                    f["description"] = d.clone();
                }
                match t.get("input_schema") {
                    Some(s @ Value::Object(_)) => f["parameters"] = s.clone(),
                    _ => {
                        return Err(bad(
                            format!("tools[{i}].input_schema must be a JSON schema object"),
                            "tools",
                        ));
                    }
                }
                v.push(json!({"type": "function", "function": f}));
            }
            Some(Value::Array(v))
        }
    };
    let (choice, parallel) = match &req.tool_choice {
        None => (None, None),
        Some(c) => {
            let parallel = c
                .get("disable_parallel_tool_use")
                .and_then(Value::as_bool)
                .map(|d| !d);
            let choice = match c.get("type").and_then(Value::as_str) {
                Some("auto") => json!("auto"),
                Some("any") => json!("required"),
                Some("none") => json!("none"),
                Some("tool") => match c.get("name").and_then(Value::as_str) {
                    Some(n) => json!({"type": "function", "function": {"name": n}}),
                    None => {
                        return Err(bad("tool_choice of type tool needs `name`", "tool_choice"));
                    }
                },
                _ => {
                    return Err(bad(
                        "tool_choice.type must be auto, any, tool or none",
                        "tool_choice",
                    ));
                }
            };
            (Some(choice), parallel)
        }
    };
    tools::parse(entries.as_ref(), choice.as_ref(), parallel)
}

/// Whether the request turns the model's thinking off (`thinking: {"type": "disabled"}`).
fn render_of(req: &MessagesRequest) -> Result<Render, ApiError> {
    let thinking = match &req.thinking {
        None => None,
        Some(t) => match t.get("type").and_then(Value::as_str) {
            Some("enabled" | "between_tools") => Some(true),
            // the template's own default
            Some("adaptive") => None,
            Some("disabled") => Some(false),
            _ => {
                return Err(bad(
                    "thinking.type must be enabled, adaptive, between_tools or disabled",
                    "thinking",
                ));
            }
        },
    };
    Ok(Render { thinking })
}

/// The shared sampling fields of the request.
fn common_of(req: &MessagesRequest) -> Result<Common, ApiError> {
    let Some(max) = req.max_tokens else {
        return Err(bad("max_tokens is required", "max_tokens"));
    };
    if let Some(t) = req.temperature
        && !(0.0..=1.0).contains(&t)
    {
        return Err(bad(
            format!("temperature must be in [0, 1] (got {t})"),
            "temperature",
        ));
    }
    let response_format = match req.output_config.as_ref().and_then(|o| o.get("format")) {
        None | Some(Value::Null) => None,
        Some(f) => match (f.get("type").and_then(Value::as_str), f.get("schema")) {
            (Some("json_schema"), Some(schema @ Value::Object(_))) => Some(json!({
                "type": "json_schema", "json_schema": {"name": "output", "schema": schema}})),
            _ => {
                return Err(bad(
                    "output_config.format must be {\"type\": \"json_schema\", \"schema\": {...}}",
                    "output_config",
                ));
            }
        },
    };
    Ok(Common {
        model: Some(req.model.clone()),
        response_format,
        max_tokens: Some(max),
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        stop: req.stop_sequences.clone().map(Stop::Many),
        stream: req.stream,
        guided_regex: req.guided_regex.clone(),
        guided_grammar: req.guided_grammar.clone(),
        ..Common::default()
    })
}

/// `POST /v1/messages`.
pub async fn messages(
    State(s): State<AppState>,
    body: Result<Json<MessagesRequest>, JsonRejection>,
) -> Response {
    match messages_inner(s, body).await {
        Ok(r) => r,
        Err(e) => e.into_anthropic(),
    }
}

async fn messages_inner(
    s: AppState,
    body: Result<Json<MessagesRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(req) = body.map_err(ApiError::from_rejection)?;
    let c = common_of(&req)?;
    let tools = tools_of(&req)?;
    let msgs = to_chat(&req)?;
    if let Some(m) = &req.metadata {
        tracing::debug!(metadata = %m, "messages request");
    }
    let p =
        turn::prepare(&s, msgs, tools.as_ref(), render_of(&req)?, &c, "messages").map_err(|e| {
            e.renamed("response_format", "output_config.format")
                .renamed("stop", "stop_sequences")
        })?;
    let input_tokens = p.request.prompt.len();
    let stream = turn::submit(&s, p.request, "messages")?;
    let turn = Turn::new(s.clone(), stream, p.parse, p.reasoning);
    let id = tools::call_id().replacen("call_", "msg_", 1);
    if req.stream {
        return Ok(sse(s, turn, id, input_tokens).into_response());
    }
    let a = turn::collect(turn).await?;
    let mut content = Vec::new();
    if !a.reasoning.is_empty() {
        content.push(json!({"type": "thinking", "thinking": a.reasoning, "signature": ""}));
    }
    if !a.text.is_empty() {
        content.push(json!({"type": "text", "text": a.text}));
    }
    for c in &a.calls {
        content.push(tool_use(c));
    }
    let (reason, seq) = stop_reason(&a.end, !a.calls.is_empty());
    Ok(Json(json!({
        "id": id, "type": "message", "role": "assistant", "model": s.cfg.model_name,
        "content": content, "stop_reason": reason, "stop_sequence": seq,
        "usage": usage(&a.end.usage),
    }))
    .into_response())
}

/// A `tool_use` block (its `input` the call's arguments as an object).
fn tool_use(c: &tools::Call) -> Value {
    let input = serde_json::from_str::<Value>(&c.arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let id = tools::call_id().replacen("call_", "toolu_", 1);
    json!({"type": "tool_use", "id": id, "name": c.name, "input": input})
}

/// Anthropic's `stop_reason` and `stop_sequence` (`timeout`, `cancelled`, `error` are Cinder's).
fn stop_reason(e: &Ending, calls: bool) -> (&'static str, Option<String>) {
    if calls {
        return ("tool_use", None);
    }
    match (e.reason, &e.stop) {
        (FinishReason::Stop, Some(s)) => ("stop_sequence", Some(s.clone())),
        (FinishReason::Eos | FinishReason::Stop, _) => ("end_turn", None),
        (FinishReason::Length, _) => ("max_tokens", None),
        (FinishReason::Timeout, _) => ("timeout", None),
        (FinishReason::Cancelled, _) => ("cancelled", None),
        (FinishReason::Error, _) => ("error", None),
    }
}

/// `usage`: `input_tokens` are the prompt tokens not read from the prefix cache (Anthropic counts
/// cache reads apart).
fn usage(u: &cinder_runtime::engine::Usage) -> Value {
    json!({"input_tokens": u.prompt_tokens - u.cached_tokens.min(u.prompt_tokens),
           "output_tokens": u.completion_tokens,
           "cache_read_input_tokens": u.cached_tokens,
           "cache_creation_input_tokens": 0})
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens"}`, the prompt the conversation renders to.
pub async fn count_tokens(
    State(s): State<AppState>,
    body: Result<Json<MessagesRequest>, JsonRejection>,
) -> Response {
    let run = || -> Result<Response, ApiError> {
        let Json(req) = body.map_err(ApiError::from_rejection)?;
        if req.model != s.cfg.model_name {
            return Err(crate::http::no_such_model(&s, &req.model));
        }
        let tools = tools_of(&req)?;
        let msgs = to_chat(&req)?;
        let (ids, _) = turn::render(&s, msgs, tools.as_ref(), render_of(&req)?, "messages")?;
        Ok(Json(json!({"input_tokens": ids.len()})).into_response())
    };
    run().unwrap_or_else(ApiError::into_anthropic)
}

fn event(kind: &str, v: Value) -> SseEvent {
    SseEvent::default().event(kind).data(v.to_string())
}

/// Where a stream stands: the open content block, if any, and the next block's index.
struct Streaming {
    turn: Turn,
    open: Option<&'static str>,
    index: usize,
    calls: bool,
    pending: std::collections::VecDeque<SseEvent>,
    done: bool,
}

impl Streaming {
    /// Closes the open block unless it is of `kind`; opens one of `kind` (with `start`) if none is.
    fn block(&mut self, kind: &'static str, start: Value) {
        if self.open == Some(kind) {
            return;
        }
        self.close();
        self.pending.push_back(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": self.index, "content_block": start}),
        ));
        self.open = Some(kind);
    }

    fn close(&mut self) {
        if self.open.take().is_some() {
            self.pending.push_back(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.index}),
            ));
            self.index += 1;
        }
    }

    fn delta(&mut self, delta: Value) {
        self.pending.push_back(event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.index, "delta": delta}),
        ));
    }

    fn on(&mut self, step: Step) {
        match step {
            Step::Reasoning(t) => {
                self.block(
                    "thinking",
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                );
                self.delta(json!({"type": "thinking_delta", "thinking": t}));
            }
            Step::Text(t) => {
                // Text after a call (whitespace between calls) would open a block of nothing.
                if self.calls && t.trim().is_empty() {
                    return;
                }
                self.block("text", json!({"type": "text", "text": ""}));
                self.delta(json!({"type": "text_delta", "text": t}));
            }
            Step::Call(c) => {
                self.close();
                let mut start = tool_use(&c);
                let input = std::mem::replace(&mut start["input"], json!({}));
                self.block("tool_use", start);
                self.delta(json!({"type": "input_json_delta", "partial_json": input.to_string()}));
                self.close();
                self.calls = true;
            }
            Step::End(e) => {
                self.close();
                let (reason, seq) = stop_reason(&e, self.calls);
                let mut u = usage(&e.usage);
                u["output_tokens"] = json!(e.usage.completion_tokens);
                self.pending.push_back(event(
                    "message_delta",
                    json!({"type": "message_delta",
                           "delta": {"stop_reason": reason, "stop_sequence": seq}, "usage": u}),
                ));
                self.pending
                    .push_back(event("message_stop", json!({"type": "message_stop"})));
                self.done = true;
            }
        }
    }
}

/// The answer as Anthropic's event stream: `message_start`, `ping`, per block
/// `content_block_start` / `content_block_delta`s / `content_block_stop`, `message_delta`,
/// `message_stop`; an `error` event if the engine fails. Dropping it (client gone) cancels.
fn sse(
    s: AppState,
    turn: Turn,
    id: String,
    input_tokens: usize,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let mut st = Streaming {
        turn,
        open: None,
        index: 0,
        calls: false,
        pending: Default::default(),
        done: false,
    };
    st.pending.push_back(event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": s.cfg.model_name,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0}}}),
    ));
    st.pending.push_back(event("ping", json!({"type": "ping"})));
    let events = stream::unfold(st, |mut st| async move {
        loop {
            if let Some(e) = st.pending.pop_front() {
                return Some((Ok(e), st));
            }
            if st.done {
                return None;
            }
            match st.turn.next().await {
                Some(Ok(step)) => st.on(step),
                Some(Err(e)) => {
                    st.pending.push_back(event(
                        "error",
                        json!({"type": "error", "error": {"type": "api_error",
                                                         "message": e.message()}}),
                    ));
                    st.done = true;
                }
                None => st.done = true,
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
