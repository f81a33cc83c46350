//! The OpenAI-compatible HTTP API (axum): chat and text completions (JSON or Server-Sent Events),
//! models, health, readiness and Prometheus metrics, behind API keys, body limits and a bounded
//! engine queue.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Request as HttpRequest, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cinder_runtime::engine::FinishReason;
use cinder_runtime::engine::{Event, EventStream, Request};
use cinder_runtime::sampler::SamplingParams;
use cinder_runtime::tokenizer::{
    ChatMessage, apply_chat_template_with_tools, template_has_tool_calls,
};
use futures_util::stream::{self, Stream};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;
use crate::openai::{ChatRequest, Common, CompletionRequest, Prompt, Usage};
use crate::structured;
use crate::tools::{self, Choice, Tools};

/// The router with every route and layer.
pub fn router(state: AppState) -> Router {
    let limit = state.cfg.max_body_bytes;
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(crate::embed::embeddings))
        .route("/v1/models", get(models))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .merge(v1)
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// Counts every response by route and status, and stamps the replica id on it.
async fn observe(State(s): State<AppState>, req: HttpRequest, next: Next) -> Response {
    let path = req.uri().path();
    let endpoint = match path {
        "/v1/chat/completions"
        | "/v1/completions"
        | "/v1/embeddings"
        | "/v1/models"
        | "/health"
        | "/ready"
        | "/metrics" => path.to_string(),
        _ => "other".to_string(),
    };
    let mut resp = next.run(req).await;
    s.metrics.count_request(&endpoint, resp.status().as_u16());
    if let Ok(v) = HeaderValue::from_str(&s.cfg.replica_id) {
        resp.headers_mut().insert("x-cinder-replica", v);
    }
    resp
}

/// Bearer API keys on /v1 routes, when any are configured; refuses new work while draining.
async fn auth(State(s): State<AppState>, req: HttpRequest, next: Next) -> Response {
    if s.draining.load(Ordering::SeqCst) {
        return ApiError::unavailable("the server is shutting down").into_response();
    }
    if !s.cfg.api_keys.is_empty() {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let ok = given.is_some_and(|g| s.cfg.api_keys.iter().any(|k| ct_eq(k, g)));
        if !ok {
            return ApiError::unauthorized(given.is_none()).into_response();
        }
    }
    next.run(req).await
}

/// Constant-time comparison (no early exit on the first differing byte).
fn ct_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "no such route",
    )
    .code("not_found")
}

/// Liveness: 200 while the engine thread runs; 503 once it has died (restart the process).
async fn health(State(s): State<AppState>) -> Response {
    if !s.engine.is_alive() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "engine stopped"})),
        )
            .into_response();
    }
    Json(json!({"status": "ok"})).into_response()
}

async fn ready(State(s): State<AppState>) -> Response {
    if s.draining.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "draining"})),
        )
            .into_response();
    }
    if !s.engine.is_alive() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "engine stopped"})),
        )
            .into_response();
    }
    if !s.engine.has_capacity() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "queue full"})),
        )
            .into_response();
    }
    Json(json!({"status": "ready", "model": s.cfg.model_name})).into_response()
}

async fn metrics(State(s): State<AppState>) -> Response {
    let mut text = s.metrics.render(&s.engine.stats(), &s.cfg.replica_id);
    if let Some(e) = &s.embedder {
        e.render_metrics(&mut text);
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn models(State(s): State<AppState>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": std::iter::once(s.cfg.model_name.as_str())
            .chain(s.embedder.as_ref().map(|e| e.name()))
            .map(|id| json!({"id": id, "object": "model", "created": s.created, "owned_by": "cinder"}))
            .collect::<Vec<_>>(),
    }))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Turns the shared fields into an engine request for `prompt` (`field`: the request field that
/// holds the prompt, named in errors).
fn build_request(
    s: &AppState,
    prompt: Vec<u32>,
    c: &Common,
    field: &str,
) -> Result<Request, ApiError> {
    if let Some(m) = &c.model
        && m != &s.cfg.model_name
    {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "the model {m:?} does not exist; this server serves {:?}",
                s.cfg.model_name
            ),
        )
        .code("model_not_found")
        .param("model"));
    }
    if c.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request("only n = 1 is supported", "n"));
    }
    let limit = s.engine.max_request_tokens();
    if prompt.len() >= limit {
        return Err(ApiError::bad_request(
            format!(
                "the {field} is {} tokens; this model's context (and KV budget) holds {limit}",
                prompt.len()
            ),
            field,
        )
        .code("context_length_exceeded"));
    }
    let (max_field, max) = match (c.max_completion_tokens, c.max_tokens) {
        (Some(m), _) => ("max_completion_tokens", Some(m)),
        (None, m) => ("max_tokens", m),
    };
    let max_tokens = match max {
        None => limit - prompt.len(),
        Some(m) if m < 1 => {
            return Err(ApiError::bad_request(
                format!("{max_field} must be at least 1 (got {m})"),
                max_field,
            ));
        }
        Some(m) => m as usize,
    };
    if prompt.len() + max_tokens > limit {
        return Err(ApiError::bad_request(
            format!(
                "the {field} ({} tokens) plus {max_field} ({max_tokens}) exceeds the context of {limit} tokens",
                prompt.len()
            ),
            max_field,
        )
        .code("context_length_exceeded"));
    }
    let temperature = c.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::bad_request(
            format!("temperature must be in [0, 2] (got {temperature})"),
            "temperature",
        ));
    }
    let top_p = c.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad_request(
            format!("top_p must be in (0, 1] (got {top_p})"),
            "top_p",
        ));
    }
    let top_k = c.top_k.unwrap_or(0);
    if top_k < 0 {
        return Err(ApiError::bad_request("top_k must be >= 0", "top_k"));
    }
    let stop = c.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
    if stop.len() > 16 {
        return Err(ApiError::bad_request("at most 16 stop strings", "stop"));
    }
    let timeout = match c.timeout {
        Some(t) if !(t > 0.0 && t.is_finite()) => {
            return Err(ApiError::bad_request(
                "timeout must be > 0 seconds",
                "timeout",
            ));
        }
        Some(t) => Duration::from_secs_f64(t),
        None => s.cfg.request_timeout,
    };
    let seed = match c.seed {
        Some(x) => x as u64,
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    };
    Ok(Request {
        prompt,
        max_tokens,
        sampling: SamplingParams {
            temperature: temperature as f32,
            top_k: top_k as usize,
            top_p: top_p as f32,
            min_p: c.min_p.unwrap_or(0.0) as f32,
            repeat_penalty: c.repetition_penalty.unwrap_or(1.0) as f32,
            repeat_last_n: 64,
            seed,
        },
        stop_strings: stop,
        stop_on_eos: !c.ignore_eos,
        timeout: Some(timeout),
        constraint: match structured::constraint_of(c)? {
            Some(k) => Some(structured::compile(s, &k)?),
            None => None,
        },
        logprobs: None,
    })
}

/// OpenAI's `finish_reason` for an engine finish (`timeout`, `error` are Cinder's own).
pub fn finish_reason(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Length => "length",
        FinishReason::Eos | FinishReason::Stop => "stop",
        FinishReason::Timeout => "timeout",
        FinishReason::Cancelled => "cancelled",
        FinishReason::Error => "error",
    }
}

async fn chat(
    State(s): State<AppState>,
    body: Result<Json<ChatRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(req) = body.map_err(ApiError::from_rejection)?;
    if req.messages.is_empty() {
        return Err(ApiError::bad_request(
            "messages must not be empty",
            "messages",
        ));
    }
    let tools = tools::parse(
        req.tools.as_ref(),
        req.tool_choice.as_ref(),
        req.parallel_tool_calls,
    )?;
    // The template's own tool syntax, or Cinder's instructions in a system message where a
    // grammar forces the call anyway.
    let native = template_has_tool_calls(&s.tok);
    if tools.as_ref().is_some_and(|t| t.choice == Choice::Auto) && !native {
        return Err(ApiError::bad_request(
            "this model's chat template has no tool-call syntax, so it cannot choose to call a \
             function; use tool_choice \"required\" or name a function (a grammar then forces the call)",
            "tool_choice",
        ));
    }
    let mut msgs = Vec::with_capacity(req.messages.len() + 1);
    for (i, m) in req.messages.iter().enumerate() {
        msgs.push(
            m.to_chat()
                .map_err(|e| ApiError::bad_request(format!("messages[{i}]: {e}"), "messages"))?,
        );
    }
    let rendered = tools.as_ref().and_then(Tools::rendered);
    if let (Some(t), false, true) = (&tools, native, rendered.is_some()) {
        match msgs.first_mut().filter(|m| m.role == "system") {
            Some(sys) => sys.content = format!("{}\n\n{}", sys.content, t.system_prompt()),
            None => msgs.insert(0, ChatMessage::new("system", t.system_prompt())),
        }
    }
    let shown = rendered.as_deref().filter(|_| native);
    let text = apply_chat_template_with_tools(&s.tok, &msgs, shown, true)
        .map_err(|e| ApiError::bad_request(e.to_string(), "messages"))?;
    let ids = s
        .tok
        .tokenize(&text, false, true)
        .map_err(|e| ApiError::bad_request(e.to_string(), "messages"))?;
    let mut r = build_request(&s, ids, &req.common, "messages")?;
    r.logprobs = structured::chat_logprobs(&req.common)?;
    if let Some(c) = tools.as_ref().and_then(|t| t.forced(&s.tok)) {
        if r.constraint.is_some() {
            return Err(ApiError::bad_request(
                "a required tool call cannot be combined with response_format or a guided constraint",
                "tool_choice",
            ));
        }
        r.constraint = Some(structured::compile_raw(&s, &c).map_err(|e| match e {
            Ok(bad) => ApiError::bad_request(bad, "tools"),
            Err(internal) => ApiError::internal(&internal),
        })?);
    }
    let stream = s
        .engine
        .submit(r)
        .map_err(|e| ApiError::from_engine(e, "messages"))?;
    let id = format!("chatcmpl-{}", stream.id());
    let parse = tools
        .as_ref()
        .filter(|t| t.parses())
        .map(|t| t.functions.iter().map(|f| f.name.clone()).collect());
    respond(s, stream, id, Kind::Chat, &req.common, parse).await
}

async fn completions(
    State(s): State<AppState>,
    body: Result<Json<CompletionRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(req) = body.map_err(ApiError::from_rejection)?;
    let prompt = match req.prompt {
        Prompt::Text(t) => t,
        Prompt::List(mut v) if v.len() == 1 => v.remove(0),
        Prompt::List(_) => {
            return Err(ApiError::bad_request(
                "prompt must be a string or a list of exactly one string",
                "prompt",
            ));
        }
    };
    if prompt.is_empty() {
        return Err(ApiError::bad_request("prompt must not be empty", "prompt"));
    }
    let ids = s
        .tok
        .encode(&prompt, true)
        .map_err(|e| ApiError::bad_request(e.to_string(), "prompt"))?;
    let mut r = build_request(&s, ids, &req.common, "prompt")?;
    r.logprobs = structured::completion_logprobs(&req.common)?;
    let stream = s
        .engine
        .submit(r)
        .map_err(|e| ApiError::from_engine(e, "prompt"))?;
    let id = format!("cmpl-{}", stream.id());
    respond(s, stream, id, Kind::Completion, &req.common, None).await
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
}

/// Latency bookkeeping for one stream.
struct Clock {
    start: Instant,
    last: Option<Instant>,
}

impl Clock {
    fn tick(&mut self, s: &AppState) {
        let now = Instant::now();
        match self.last {
            None => s.metrics.ttft.observe((now - self.start).as_secs_f64()),
            Some(l) => s.metrics.itl.observe((now - l).as_secs_f64()),
        }
        self.last = Some(now);
    }
}

fn count_usage(s: &AppState, u: &cinder_runtime::engine::Usage) {
    s.metrics
        .prompt_tokens
        .fetch_add(u.prompt_tokens as u64, Ordering::Relaxed);
    s.metrics
        .generation_tokens
        .fetch_add(u.completion_tokens as u64, Ordering::Relaxed);
}

async fn respond(
    s: AppState,
    stream: EventStream,
    id: String,
    kind: Kind,
    c: &Common,
    parse_tools: Option<Vec<String>>,
) -> Result<Response, ApiError> {
    let created = unix_now();
    if c.stream {
        let usage = c.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let parser = parse_tools.map(tools::Parser::new);
        return Ok(sse(s, stream, id, kind, created, usage, parser).into_response());
    }
    let mut stream = stream;
    let mut text = String::new();
    let mut lps = Vec::new();
    let mut clock = Clock {
        start: Instant::now(),
        last: None,
    };
    loop {
        match stream.next().await {
            Some(Event::Token {
                id: tok,
                text: t,
                logprob,
            }) => {
                clock.tick(&s);
                text.push_str(&t);
                if let Some(lp) = logprob {
                    lps.push((tok, lp));
                }
            }
            Some(Event::Finished {
                reason,
                text: t,
                usage,
            }) => {
                text.push_str(&t);
                count_usage(&s, &usage);
                if reason == FinishReason::Error {
                    return Err(ApiError::internal("generation failed in the engine"));
                }
                let mut fr = finish_reason(reason);
                let asked = !lps.is_empty() || logprobs_asked(c, kind);
                let (content, calls) = match &parse_tools {
                    Some(names) => tools::split(&text, names.clone()),
                    None => (Some(text.clone()), Vec::new()),
                };
                let mut message = json!({"role": "assistant", "content": content});
                if !calls.is_empty() {
                    let list: Vec<Value> = calls
                        .iter()
                        .map(|c| tools::call_json(c, &tools::call_id()))
                        .collect();
                    message["tool_calls"] = json!(list);
                    fr = "tool_calls";
                }
                let body = match kind {
                    Kind::Chat => {
                        let lp = asked.then(|| {
                            let content: Vec<Value> = lps
                                .iter()
                                .map(|(t, lp)| structured::chat_entry(&s.tok, *t, lp))
                                .collect();
                            json!({"content": content, "refusal": null})
                        });
                        json!({
                            "id": id, "object": "chat.completion", "created": created,
                            "model": s.cfg.model_name,
                            "choices": [{"index": 0, "message": message,
                                         "logprobs": lp, "finish_reason": fr}],
                            "usage": Usage::from(usage),
                        })
                    }
                    Kind::Completion => {
                        let lp = asked.then(|| structured::completion_block(&s.tok, &lps, 0));
                        json!({
                            "id": id, "object": "text_completion", "created": created,
                            "model": s.cfg.model_name,
                            "choices": [{"index": 0, "text": text, "logprobs": lp, "finish_reason": fr}],
                            "usage": Usage::from(usage),
                        })
                    }
                };
                return Ok(Json(body).into_response());
            }
            None => return Err(ApiError::internal("the engine stopped")),
        }
    }
}

/// Whether the request asked for log-probabilities (`logprobs` true or a number).
fn logprobs_asked(c: &Common, kind: Kind) -> bool {
    match kind {
        Kind::Chat => c.logprobs == Some(Value::Bool(true)),
        Kind::Completion => c.logprobs.as_ref().is_some_and(Value::is_number),
    }
}

/// One chunk of a stream.
fn chunk(
    s: &AppState,
    id: &str,
    kind: Kind,
    created: u64,
    text: Option<&str>,
    first: bool,
    finish: Option<&str>,
) -> Value {
    match kind {
        Kind::Chat => {
            let mut delta = json!({});
            if first {
                delta["role"] = json!("assistant");
            }
            if let Some(t) = text {
                delta["content"] = json!(t);
            }
            json!({"id": id, "object": "chat.completion.chunk", "created": created,
                   "model": s.cfg.model_name,
                   "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
        }
        Kind::Completion => json!({"id": id, "object": "text_completion", "created": created,
                   "model": s.cfg.model_name,
                   "choices": [{"index": 0, "text": text.unwrap_or(""), "logprobs": null,
                                "finish_reason": finish}]}),
    }
}

struct SseState {
    s: AppState,
    stream: EventStream,
    id: String,
    kind: Kind,
    created: u64,
    include_usage: bool,
    pending: std::collections::VecDeque<SseEvent>,
    first: bool,
    done: bool,
    clock: Clock,
    /// bytes of text sent so far (completions' `text_offset`)
    offset: usize,
    /// splits content from function calls when the request has tools
    parser: Option<tools::Parser>,
    /// calls parsed and not yet sent
    new_calls: Vec<tools::Call>,
    /// calls sent so far (the next call's `index`)
    calls: usize,
}

impl SseState {
    /// The content part of `text` (all of it without tools); calls found go to `new_calls`.
    /// `end`: the text is the last, so nothing is held back.
    fn content_of(&mut self, text: &str, end: bool) -> String {
        let Some(p) = &mut self.parser else {
            return text.to_string();
        };
        let mut pieces = p.feed(text);
        if end {
            pieces.extend(p.finish());
        }
        let mut content = String::new();
        for piece in pieces {
            match piece {
                tools::Piece::Content(c) => content.push_str(&c),
                tools::Piece::Call(c) => self.new_calls.push(c),
            }
        }
        content
    }

    /// One chunk per parsed call: `delta.tool_calls` with its index, id, name and arguments.
    fn push_calls(&mut self) {
        for c in std::mem::take(&mut self.new_calls) {
            let mut call = tools::call_json(&c, &tools::call_id());
            call["index"] = json!(self.calls);
            self.calls += 1;
            let mut ch = chunk(
                &self.s,
                &self.id,
                self.kind,
                self.created,
                None,
                false,
                None,
            );
            ch["choices"][0]["delta"] = json!({"tool_calls": [call]});
            self.pending.push_back(data(&ch));
        }
    }
}

fn data(v: &Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

/// Server-Sent Events in OpenAI's chunk format, ending with `data: [DONE]`. Dropping the response
/// (client gone) drops the engine stream, which cancels the sequence.
fn sse(
    s: AppState,
    stream: EventStream,
    id: String,
    kind: Kind,
    created: u64,
    include_usage: bool,
    parser: Option<tools::Parser>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let mut st = SseState {
        s,
        stream,
        id,
        kind,
        created,
        include_usage,
        pending: Default::default(),
        first: true,
        done: false,
        offset: 0,
        parser,
        new_calls: Vec::new(),
        calls: 0,
        clock: Clock {
            start: Instant::now(),
            last: None,
        },
    };
    if kind == Kind::Chat {
        // The role comes first, as OpenAI's streams do.
        let c = chunk(&st.s, &st.id, kind, created, Some(""), true, None);
        st.pending.push_back(data(&c));
        st.first = false;
    }
    let events = stream::unfold(st, |mut st| async move {
        loop {
            if let Some(e) = st.pending.pop_front() {
                return Some((Ok(e), st));
            }
            if st.done {
                return None;
            }
            match st.stream.next().await {
                Some(Event::Token { id, text, logprob }) => {
                    st.clock.tick(&st.s);
                    let text = st.content_of(&text, false);
                    if !text.is_empty() || logprob.is_some() {
                        let mut c = chunk(
                            &st.s,
                            &st.id,
                            st.kind,
                            st.created,
                            Some(&text),
                            st.first,
                            None,
                        );
                        if let Some(lp) = logprob {
                            c["choices"][0]["logprobs"] = match st.kind {
                                Kind::Chat => {
                                    json!({"content": [structured::chat_entry(&st.s.tok, id, &lp)]})
                                }
                                Kind::Completion => {
                                    structured::completion_block(&st.s.tok, &[(id, lp)], st.offset)
                                }
                            };
                        }
                        st.offset += text.len();
                        st.first = false;
                        st.pending.push_back(data(&c));
                    }
                    st.push_calls();
                }
                Some(Event::Finished {
                    reason,
                    text,
                    usage,
                }) => {
                    count_usage(&st.s, &usage);
                    let text = st.content_of(&text, true);
                    if !text.is_empty() {
                        let c = chunk(
                            &st.s,
                            &st.id,
                            st.kind,
                            st.created,
                            Some(&text),
                            st.first,
                            None,
                        );
                        st.pending.push_back(data(&c));
                    }
                    st.push_calls();
                    let fr = if st.calls > 0 {
                        "tool_calls"
                    } else {
                        finish_reason(reason)
                    };
                    let mut last = chunk(&st.s, &st.id, st.kind, st.created, None, false, Some(fr));
                    if st.kind == Kind::Completion {
                        last["choices"][0]["text"] = json!("");
                    }
                    st.pending.push_back(data(&last));
                    if st.include_usage {
                        let obj = if st.kind == Kind::Chat {
                            "chat.completion.chunk"
                        } else {
                            "text_completion"
                        };
                        let u = json!({"id": st.id, "object": obj, "created": st.created,
                                       "model": st.s.cfg.model_name, "choices": [],
                                       "usage": Usage::from(usage)});
                        st.pending.push_back(data(&u));
                    }
                    st.pending.push_back(SseEvent::default().data("[DONE]"));
                    st.done = true;
                }
                None => {
                    let e = json!({"error": {"message": "the engine stopped", "type": "server_error",
                                             "param": null, "code": null}});
                    st.pending.push_back(data(&e));
                    st.done = true;
                }
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
