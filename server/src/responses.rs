//! OpenAI's Responses API: `POST /v1/responses` (whole or streamed with its typed events),
//! `GET /v1/responses/{id}` and `DELETE /v1/responses/{id}`, field names as in OpenAI's API
//! reference so the official clients work unchanged. A translation layer only: `input` items and
//! `instructions` become a conversation for the shared chat path (`turn.rs`); its steps
//! become output items (`reasoning`, `message`, `function_call`). Stored responses (`store`,
//! default true) carry their conversation, so a request with `previous_response_id` continues it
//! ([`crate::store`]).

use std::convert::Infallible;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use cinder_runtime::engine::FinishReason;
use cinder_runtime::tokenizer::ChatMessage;
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;
use crate::openai::Common;
use crate::respond::unix_now;
use crate::store::Stored;
use crate::tools;
use crate::turn::{self, Ending, Render, Step, Turn};

/// `POST /v1/responses`
#[derive(Debug, Clone, Deserialize)]
pub struct ResponsesRequest {
    /// the model name (must be the served one)
    pub model: Option<String>,
    /// a string (one user message) or a list of items
    pub input: Option<Value>,
    /// a system message for this request (not inherited by follow-ups)
    pub instructions: Option<String>,
    /// function tools: `{"type": "function", "name", "description", "parameters"}`
    pub tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required` or `{"type": "function", "name"}`
    pub tool_choice: Option<Value>,
    /// whether several calls may come in one answer (default true)
    pub parallel_tool_calls: Option<bool>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", …}}`
    pub text: Option<Value>,
    /// most new tokens
    pub max_output_tokens: Option<i64>,
    /// 0 = greedy
    pub temperature: Option<f64>,
    /// nucleus sampling
    pub top_p: Option<f64>,
    /// extension: keep the k most likely tokens
    pub top_k: Option<i64>,
    /// stream the typed events
    #[serde(default)]
    pub stream: bool,
    /// keep the response for `GET` and follow-ups (default true)
    pub store: Option<bool>,
    /// continue the conversation of this stored response
    pub previous_response_id: Option<String>,
    /// `{"effort": "none"}` turns the model's thinking off where the template allows it
    pub reasoning: Option<Value>,
    /// returned as given
    pub metadata: Option<Value>,
    /// extension: seconds before the request ends, incomplete
    pub timeout: Option<f64>,
    /// extension (as vLLM): the answer must match this regular expression
    pub guided_regex: Option<String>,
    /// extension (as vLLM): the answer must follow this Lark grammar
    pub guided_grammar: Option<String>,
}

fn bad(message: impl Into<String>, field: &str) -> ApiError {
    ApiError::bad_request(message, field)
}

/// An id with `prefix` (unique per process run and time).
fn new_id(prefix: &str) -> String {
    tools::call_id().replacen("call_", prefix, 1)
}

/// The text of a message's `content`: a string or a list of `input_text` / `output_text` parts.
fn content_text(v: &Value, at: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut out = String::new();
            for (k, p) in parts.iter().enumerate() {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("input_text" | "output_text" | "text"), Some(Value::String(t))) => {
                        out.push_str(t)
                    }
                    (ty, _) => {
                        return Err(bad(
                            format!(
                                "{at}.content[{k}]: parts of type {} are not supported (input_text, \
                                 output_text)",
                                ty.unwrap_or("?")
                            ),
                            "input",
                        ));
                    }
                }
            }
            Ok(out)
        }
        _ => Err(bad(
            format!("{at}.content must be a string or a list of text parts"),
            "input",
        )),
    }
}

/// Appends `input` (a string or items) to `conv`: messages, an assistant's `function_call`s
/// (joined into one assistant turn) and `function_call_output`s as `tool` messages; `reasoning`
/// items are dropped (templates render past turns without reasoning).
fn append_input(conv: &mut Vec<ChatMessage>, input: &Value) -> Result<(), ApiError> {
    let items = match input {
        Value::String(s) => {
            conv.push(ChatMessage::new("user", s.clone()));
            return Ok(());
        }
        Value::Array(items) => items,
        _ => return Err(bad("input must be a string or a list of items", "input")),
    };
    // call id -> function name, for the outputs that answer them
    let mut names: std::collections::HashMap<String, String> = conv
        .iter()
        .flat_map(|m| m.tool_calls.iter().flatten())
        .filter_map(|c| {
            Some((
                c.get("id")?.as_str()?.to_string(),
                c.get("function")?.get("name")?.as_str()?.to_string(),
            ))
        })
        .collect();
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let ty = item.get("type").and_then(Value::as_str);
        match ty {
            None | Some("message") => {
                let role = item.get("role").and_then(Value::as_str).unwrap_or("");
                let role = match role {
                    "user" | "assistant" | "system" => role,
                    "developer" => "system",
                    other => {
                        return Err(bad(
                            format!(
                                "{at}.role must be user, assistant, system or developer (got {other:?})"
                            ),
                            "input",
                        ));
                    }
                };
                let text = content_text(item.get("content").unwrap_or(&Value::Null), &at)?;
                conv.push(ChatMessage::new(role, text));
            }
            Some("function_call") => {
                let (Some(id), Some(name)) = (
                    item.get("call_id").and_then(Value::as_str),
                    item.get("name").and_then(Value::as_str),
                ) else {
                    return Err(bad(
                        format!("{at}: a function_call item needs call_id and name"),
                        "input",
                    ));
                };
                let args = match item.get("arguments") {
                    Some(Value::String(s)) => serde_json::from_str(s)
                        .map_err(|e| bad(format!("{at}.arguments is not JSON: {e}"), "input"))?,
                    Some(v @ Value::Object(_)) => v.clone(),
                    _ => json!({}),
                };
                names.insert(id.to_string(), name.to_string());
                let call = json!({"id": id, "type": "function",
                                  "function": {"name": name, "arguments": args}});
                match conv.last_mut() {
                    Some(m) if m.role == "assistant" => {
                        m.tool_calls.get_or_insert_with(Vec::new).push(call)
                    }
                    _ => {
                        let mut m = ChatMessage::new("assistant", "");
                        m.tool_calls = Some(vec![call]);
                        conv.push(m);
                    }
                }
            }
            Some("function_call_output") => {
                let Some(id) = item.get("call_id").and_then(Value::as_str) else {
                    return Err(bad(
                        format!("{at}: a function_call_output item needs call_id"),
                        "input",
                    ));
                };
                let out = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Array(_)) => content_text(v, &at)?,
                    _ => {
                        return Err(bad(format!("{at}.output must be a string"), "input"));
                    }
                };
                let mut m = ChatMessage::new("tool", out);
                m.tool_call_id = Some(id.to_string());
                m.name = names.get(id).cloned();
                conv.push(m);
            }
            Some("reasoning") => {}
            Some(other) => {
                return Err(bad(
                    format!(
                        "{at}: items of type {other:?} are not supported (message, function_call, \
                         function_call_output, reasoning)"
                    ),
                    "input",
                ));
            }
        }
    }
    Ok(())
}

/// `tools` and `tool_choice` in the chat API's shape, checked by the shared tool checks.
fn tools_of(req: &ResponsesRequest) -> Result<Option<tools::Tools>, ApiError> {
    let entries = match &req.tools {
        None => None,
        Some(list) => {
            let mut v = Vec::with_capacity(list.len());
            for (i, t) in list.iter().enumerate() {
                if t.get("type").and_then(Value::as_str) != Some("function") {
                    return Err(bad(
                        format!(
                            "tools[{i}]: only function tools are available (got type {})",
                            t.get("type").unwrap_or(&Value::Null)
                        ),
                        "tools",
                    ));
                }
                let mut f = json!({"name": t.get("name").cloned().unwrap_or(Value::Null)});
                for k in ["description", "parameters"] {
                    if let Some(x) = t.get(k) {
                        f[k] = x.clone();
                    }
                }
                v.push(json!({"type": "function", "function": f}));
            }
            Some(Value::Array(v))
        }
    };
    let choice = match &req.tool_choice {
        Some(c @ Value::Object(_)) => {
            match (
                c.get("type").and_then(Value::as_str),
                c.get("name").and_then(Value::as_str),
            ) {
                (Some("function"), Some(n)) => {
                    Some(json!({"type": "function", "function": {"name": n}}))
                }
                _ => {
                    return Err(bad(
                        "tool_choice must be none, auto, required or {\"type\": \"function\", \"name\"}",
                        "tool_choice",
                    ));
                }
            }
        }
        other => other.clone(),
    };
    tools::parse(entries.as_ref(), choice.as_ref(), req.parallel_tool_calls)
}

/// The shared sampling fields; `text.format` as the chat API's `response_format`.
fn common_of(req: &ResponsesRequest) -> Result<Common, ApiError> {
    let response_format = match req.text.as_ref().and_then(|t| t.get("format")) {
        None | Some(Value::Null) => None,
        Some(f) => match f.get("type").and_then(Value::as_str) {
            Some("json_schema") => {
                let mut js = json!({});
                for k in ["name", "schema", "strict", "description"] {
                    if let Some(x) = f.get(k) {
                        js[k] = x.clone();
                    }
                }
                Some(json!({"type": "json_schema", "json_schema": js}))
            }
            Some(_) => Some(f.clone()),
            None => return Err(bad("text.format needs a `type`", "text")),
        },
    };
    Ok(Common {
        model: req.model.clone(),
        max_tokens: req.max_output_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        stream: req.stream,
        timeout: req.timeout,
        response_format,
        guided_regex: req.guided_regex.clone(),
        guided_grammar: req.guided_grammar.clone(),
        ..Common::default()
    })
}

/// `reasoning.effort: "none"` turns thinking off.
fn render_of(req: &ResponsesRequest) -> Render {
    let off = req
        .reasoning
        .as_ref()
        .and_then(|r| r.get("effort"))
        .and_then(Value::as_str)
        == Some("none");
    Render {
        thinking: off.then_some(false),
    }
}

/// `POST /v1/responses`.
pub async fn create(
    State(s): State<AppState>,
    body: Result<Json<ResponsesRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(req) = body.map_err(ApiError::from_rejection)?;
    let Some(input) = &req.input else {
        return Err(bad("input is required", "input"));
    };
    let mut conv = match &req.previous_response_id {
        Some(id) => s
            .responses
            .get(id)
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    "invalid_request_error",
                    format!("previous response {id:?} is not stored (unknown, expired or made with store: false)"),
                )
                .code("previous_response_not_found")
                .param("previous_response_id")
            })?
            .conversation,
        None => Vec::new(),
    };
    append_input(&mut conv, input)?;
    if conv.is_empty() {
        return Err(bad("input must hold at least one item", "input"));
    }
    let tools = tools_of(&req)?;
    let c = common_of(&req)?;
    let mut msgs = conv.clone();
    if let Some(i) = req.instructions.as_ref().filter(|i| !i.is_empty()) {
        msgs.insert(0, ChatMessage::new("system", i.clone()));
    }
    let p = turn::prepare(&s, msgs, tools.as_ref(), render_of(&req), &c, "input").map_err(|e| {
        e.renamed("response_format", "text.format")
            .renamed("max_tokens", "max_output_tokens")
    })?;
    let stream = turn::submit(&s, p.request, "input")?;
    let turn = Turn::new(s.clone(), stream, p.parse, p.reasoning);
    let mut b = Builder {
        id: new_id("resp_"),
        model: s.cfg.model_name.clone(),
        created: unix_now(),
        req,
        conv,
        items: Vec::new(),
        open: None,
        events: Vec::new(),
        seq: 0,
        streaming: false,
    };
    if b.req.stream {
        b.streaming = true;
        return Ok(sse(s, turn, b).into_response());
    }
    let mut turn = turn;
    while let Some(step) = turn.next().await {
        if let Some(done) = b.on(&s, step?) {
            return Ok(Json(done).into_response());
        }
    }
    Err(ApiError::internal("the engine stopped"))
}

/// The item being streamed.
struct Open {
    kind: &'static str,
    id: String,
    text: String,
}

/// Output items from the answer's steps, and (streaming) the events that announce them.
struct Builder {
    id: String,
    model: String,
    created: u64,
    req: ResponsesRequest,
    /// the conversation without instructions (what a follow-up continues)
    conv: Vec<ChatMessage>,
    items: Vec<Value>,
    open: Option<Open>,
    events: Vec<Value>,
    seq: u64,
    streaming: bool,
}

impl Builder {
    fn emit(&mut self, mut e: Value) {
        if self.streaming {
            e["sequence_number"] = json!(self.seq);
            self.seq += 1;
            self.events.push(e);
        }
    }

    /// The response object with the items so far.
    fn response(&self, status: &str, end: Option<&Ending>) -> Value {
        let r = &self.req;
        let incomplete = end.and_then(|e| match e.reason {
            FinishReason::Length => Some("max_output_tokens"),
            FinishReason::Timeout => Some("timeout"),
            _ => None,
        });
        let usage = end.map(|e| {
            let u = &e.usage;
            json!({"input_tokens": u.prompt_tokens,
                   "input_tokens_details": {"cached_tokens": u.cached_tokens},
                   "output_tokens": u.completion_tokens,
                   "output_tokens_details": {"reasoning_tokens": 0},
                   "total_tokens": u.prompt_tokens + u.completion_tokens})
        });
        json!({
            "id": self.id, "object": "response", "created_at": self.created,
            "status": status, "model": self.model,
            "output": self.items, "error": null,
            "incomplete_details": incomplete.map(|x| json!({"reason": x})),
            "instructions": r.instructions, "max_output_tokens": r.max_output_tokens,
            "previous_response_id": r.previous_response_id,
            "parallel_tool_calls": r.parallel_tool_calls.unwrap_or(true),
            "tool_choice": r.tool_choice.clone().unwrap_or(json!("auto")),
            "tools": r.tools.clone().unwrap_or_default(),
            "temperature": r.temperature, "top_p": r.top_p,
            "text": r.text.clone().unwrap_or(json!({"format": {"type": "text"}})),
            "reasoning": r.reasoning.clone().unwrap_or(json!({"effort": null, "summary": null})),
            "store": r.store.unwrap_or(true), "metadata": r.metadata.clone().unwrap_or(json!({})),
            "truncation": "disabled", "usage": usage,
        })
    }

    /// Opens an item of `kind` ("reasoning" or "message") unless one is open.
    fn open(&mut self, kind: &'static str) {
        if self.open.as_ref().is_some_and(|o| o.kind == kind) {
            return;
        }
        self.close();
        let index = self.items.len();
        let id = new_id(if kind == "reasoning" { "rs_" } else { "msg_" });
        let item = if kind == "reasoning" {
            json!({"type": "reasoning", "id": id, "summary": [], "content": [],
                   "status": "in_progress"})
        } else {
            json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant",
                   "content": []})
        };
        self.emit(
            json!({"type": "response.output_item.added", "output_index": index,
                         "item": item}),
        );
        let part = if kind == "reasoning" {
            json!({"type": "reasoning_text", "text": ""})
        } else {
            json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []})
        };
        self.emit(json!({"type": "response.content_part.added", "item_id": id,
            "output_index": index, "content_index": 0, "part": part}));
        self.open = Some(Open {
            kind,
            id,
            text: String::new(),
        });
    }

    /// Adds text to the open item.
    fn delta(&mut self, t: &str) {
        let Some(o) = &mut self.open else { return };
        o.text.push_str(t);
        let ty = if o.kind == "reasoning" {
            "response.reasoning_text.delta"
        } else {
            "response.output_text.delta"
        };
        let mut e = json!({"type": ty, "item_id": o.id, "output_index": self.items.len(),
                           "content_index": 0, "delta": t});
        if o.kind == "message" {
            e["logprobs"] = json!([]);
        }
        self.emit(e);
    }

    /// Closes the open item (its `done` events) and keeps it in `items`.
    fn close(&mut self) {
        let Some(o) = self.open.take() else { return };
        let index = self.items.len();
        let (part, done) = if o.kind == "reasoning" {
            (
                json!({"type": "reasoning_text", "text": o.text}),
                "response.reasoning_text.done",
            )
        } else {
            (
                json!({"type": "output_text", "text": o.text, "annotations": [], "logprobs": []}),
                "response.output_text.done",
            )
        };
        let mut e = json!({"type": done, "item_id": o.id, "output_index": index,
                           "content_index": 0, "text": o.text});
        if o.kind == "message" {
            e["logprobs"] = json!([]);
        }
        self.emit(e);
        self.emit(
            json!({"type": "response.content_part.done", "item_id": o.id,
            "output_index": index, "content_index": 0, "part": part}),
        );
        let item = if o.kind == "reasoning" {
            json!({"type": "reasoning", "id": o.id, "summary": [], "content": [part],
                   "status": "completed"})
        } else {
            json!({"type": "message", "id": o.id, "status": "completed", "role": "assistant",
                   "content": [part]})
        };
        self.emit(
            json!({"type": "response.output_item.done", "output_index": index,
                         "item": item}),
        );
        self.items.push(item);
    }

    /// Takes one step; returns the finished response at the end (stored unless `store: false`).
    fn on(&mut self, s: &AppState, step: Step) -> Option<Value> {
        match step {
            Step::Reasoning(t) => {
                self.open("reasoning");
                self.delta(&t);
            }
            Step::Text(t) => {
                // whitespace between or after calls is not an answer of its own
                if self.open.is_none() && t.trim().is_empty() {
                    return None;
                }
                self.open("message");
                self.delta(&t);
            }
            Step::Call(c) => {
                self.close();
                let index = self.items.len();
                let (id, call_id) = (new_id("fc_"), tools::call_id());
                let mut item = json!({"type": "function_call", "id": id, "call_id": call_id,
                    "name": c.name, "arguments": "", "status": "in_progress"});
                self.emit(
                    json!({"type": "response.output_item.added", "output_index": index,
                                 "item": item}),
                );
                self.emit(json!({"type": "response.function_call_arguments.delta",
                    "item_id": id, "output_index": index, "delta": c.arguments}));
                self.emit(json!({"type": "response.function_call_arguments.done",
                    "item_id": id, "output_index": index, "name": c.name,
                    "arguments": c.arguments}));
                item["arguments"] = json!(c.arguments);
                item["status"] = json!("completed");
                self.emit(
                    json!({"type": "response.output_item.done", "output_index": index,
                                 "item": item}),
                );
                self.items.push(item);
            }
            Step::End(e) => {
                self.close();
                let status = match e.reason {
                    FinishReason::Length | FinishReason::Timeout => "incomplete",
                    _ => "completed",
                };
                let r = self.response(status, Some(&e));
                if self.req.store.unwrap_or(true) {
                    let mut conv = std::mem::take(&mut self.conv);
                    conv.push(self.as_message());
                    s.responses.put(
                        self.id.clone(),
                        Stored {
                            response: r.clone(),
                            conversation: conv,
                        },
                    );
                }
                let ty = if status == "completed" {
                    "response.completed"
                } else {
                    "response.incomplete"
                };
                self.emit(json!({"type": ty, "response": r}));
                return Some(r);
            }
        }
        None
    }

    /// The output as one assistant turn of the conversation (reasoning left out).
    fn as_message(&self) -> ChatMessage {
        let mut text = String::new();
        let mut calls = Vec::new();
        for it in &self.items {
            match it["type"].as_str() {
                Some("message") => {
                    text.push_str(it["content"][0]["text"].as_str().unwrap_or(""));
                }
                Some("function_call") => {
                    let args = it["arguments"]
                        .as_str()
                        .and_then(|a| serde_json::from_str::<Value>(a).ok())
                        .unwrap_or_else(|| json!({}));
                    calls.push(json!({"id": it["call_id"], "type": "function",
                        "function": {"name": it["name"], "arguments": args}}));
                }
                _ => {}
            }
        }
        let mut m = ChatMessage::new("assistant", text);
        m.tool_calls = (!calls.is_empty()).then_some(calls);
        m
    }
}

/// The response's typed events: `response.created`, `response.in_progress`, per item
/// `response.output_item.added`, its deltas and `done` events, then `response.completed` (or
/// `response.incomplete`); an `error` event if the engine fails. Dropping it (client gone)
/// cancels.
fn sse(
    s: AppState,
    turn: Turn,
    mut b: Builder,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let r = b.response("in_progress", None);
    b.emit(json!({"type": "response.created", "response": r}));
    b.emit(json!({"type": "response.in_progress", "response": r}));
    let st = (s, turn, b, false);
    let events = stream::unfold(st, |(s, mut turn, mut b, mut done)| async move {
        loop {
            if !b.events.is_empty() {
                let e = b.events.remove(0);
                let ty = e["type"].as_str().unwrap_or("").to_string();
                let ev = SseEvent::default().event(ty).data(e.to_string());
                return Some((Ok(ev), (s, turn, b, done)));
            }
            if done {
                return None;
            }
            match turn.next().await {
                Some(Ok(step)) => {
                    done = b.on(&s, step).is_some();
                }
                Some(Err(e)) => {
                    b.emit(json!({"type": "error", "code": "server_error",
                                  "message": e.message(), "param": null}));
                    done = true;
                }
                None => done = true,
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

fn not_stored(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("no stored response {id:?} (unknown, expired, deleted or made with store: false)"),
    )
    .code("not_found")
}

/// `GET /v1/responses/{id}`: a stored response.
pub async fn get(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    s.responses
        .get(&id)
        .map(|st| Json(st.response))
        .ok_or_else(|| not_stored(&id))
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if s.responses.delete(&id) {
        Ok(Json(
            json!({"id": id, "object": "response.deleted", "deleted": true}),
        ))
    } else {
        Err(not_stored(&id))
    }
}
