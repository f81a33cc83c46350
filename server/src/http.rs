//! The OpenAI-compatible HTTP API (axum): chat and text completions (JSON or Server-Sent Events),
//! models, health, readiness and Prometheus metrics, behind API keys, body limits and a bounded
//! engine queue.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Request as HttpRequest, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cinder_runtime::engine::{EventStream, Request};
use cinder_runtime::sampler::SamplingParams;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;
use crate::openai::{ChatRequest, Common, CompletionRequest, Prompt};
use crate::respond::{Kind, respond};
use crate::structured;
use crate::tools;

/// The most choices one request may ask for (`n`).
pub const MAX_CHOICES: usize = 8;

/// Submits `r` as `c.n` choices, each with its own seed (the request's seed + its index). The first
/// runs its prompt alone; the others are submitted once it has started, so they find the prompt's
/// full KV blocks in the prefix cache instead of computing them again.
async fn submit_choices(
    s: &AppState,
    r: Request,
    c: &Common,
    field: &str,
) -> Result<Vec<EventStream>, ApiError> {
    let n = c.n.map_or(1, |n| n.max(1) as usize);
    let mut first = s
        .engine
        .submit(r.clone())
        .map_err(|e| ApiError::from_engine(e, field))?;
    if n == 1 {
        return Ok(vec![first]);
    }
    first.started().await;
    let mut out = vec![first];
    for i in 1..n {
        let mut ri = r.clone();
        ri.sampling.seed = r.sampling.seed.wrapping_add(i as u64);
        out.push(
            s.engine
                .submit(ri)
                .map_err(|e| ApiError::from_engine(e, field))?,
        );
    }
    Ok(out)
}

/// The router with every route and layer.
pub fn router(state: AppState) -> Router {
    let limit = state.cfg.max_body_bytes;
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/messages", post(crate::anthropic::messages))
        .route("/v1/responses", post(crate::responses::create))
        .route(
            "/v1/responses/{id}",
            get(crate::responses::get).delete(crate::responses::delete),
        )
        .route(
            "/v1/messages/count_tokens",
            post(crate::anthropic::count_tokens),
        )
        .route("/v1/embeddings", post(crate::embed::embeddings))
        .route("/v1/models", get(models))
        .route("/tokenize", post(crate::tokenize::tokenize))
        .route("/detokenize", post(crate::tokenize::detokenize))
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
        | "/v1/messages"
        | "/v1/messages/count_tokens"
        | "/v1/embeddings"
        | "/v1/models"
        | "/tokenize"
        | "/detokenize"
        | "/health"
        | "/ready"
        | "/metrics"
        | "/v1/responses" => path.to_string(),
        p if p.starts_with("/v1/responses/") => "/v1/responses/{id}".to_string(),
        _ => "other".to_string(),
    };
    let mut resp = next.run(req).await;
    s.metrics.count_request(&endpoint, resp.status().as_u16());
    if let Ok(v) = HeaderValue::from_str(&s.cfg.replica_id) {
        resp.headers_mut().insert("x-cinder-replica", v);
    }
    resp
}

/// API keys on the API routes (bearer or `x-api-key`), when any are configured; refuses new work
/// while draining.
async fn auth(State(s): State<AppState>, req: HttpRequest, next: Next) -> Response {
    // The Messages API answers in Anthropic's error shape.
    let shape = if req.uri().path().starts_with("/v1/messages") {
        ApiError::into_anthropic
    } else {
        <ApiError as IntoResponse>::into_response
    };
    if s.draining.load(Ordering::SeqCst) {
        return shape(ApiError::unavailable("the server is shutting down"));
    }
    if !s.cfg.api_keys.is_empty() {
        // `Authorization: Bearer KEY` (OpenAI's clients) or `x-api-key: KEY` (Anthropic's).
        let headers = req.headers();
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
            .map(str::trim);
        let ok = given.is_some_and(|g| s.cfg.api_keys.iter().any(|k| ct_eq(k, g)));
        if !ok {
            return shape(ApiError::unauthorized(given.is_none()));
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

/// Each served model with its context: `max_model_len` (vLLM's name) is the most tokens a request
/// may hold, prompt and completion together (the model's context, capped by the KV budget); an
/// embedding model's is the most tokens of one text it embeds.
async fn models(State(s): State<AppState>) -> Json<Value> {
    let entry = |id: &str, len: usize| {
        json!({"id": id, "object": "model", "created": s.created, "owned_by": "cinder",
               "max_model_len": len})
    };
    Json(json!({
        "object": "list",
        "data": std::iter::once(entry(&s.cfg.model_name, s.engine.max_request_tokens()))
            .chain(s.embedder.as_ref().map(|e| entry(e.name(), e.max_tokens())))
            .collect::<Vec<_>>(),
    }))
}

/// 404 for a `model` that is not the served one.
pub(crate) fn no_such_model(s: &AppState, m: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!(
            "the model {m:?} does not exist; this server serves {:?}",
            s.cfg.model_name
        ),
    )
    .code("model_not_found")
    .param("model")
}

/// Turns the shared fields into an engine request for `prompt` (`field`: the request field that
/// holds the prompt, named in errors).
pub(crate) fn build_request(
    s: &AppState,
    prompt: Vec<u32>,
    c: &Common,
    field: &str,
) -> Result<Request, ApiError> {
    if let Some(m) = &c.model
        && m != &s.cfg.model_name
    {
        return Err(no_such_model(s, m));
    }
    if c.n.is_some_and(|n| !(1..=MAX_CHOICES as i64).contains(&n)) {
        return Err(ApiError::bad_request(
            format!("n must be in [1, {MAX_CHOICES}]"),
            "n",
        ));
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
    let mut msgs = Vec::with_capacity(req.messages.len() + 1);
    for (i, m) in req.messages.iter().enumerate() {
        msgs.push(
            m.to_chat()
                .map_err(|e| ApiError::bad_request(format!("messages[{i}]: {e}"), "messages"))?,
        );
    }
    let p = crate::turn::prepare(
        &s,
        msgs,
        tools.as_ref(),
        render_of(&req)?,
        &req.common,
        "messages",
    )?;
    let mut r = p.request;
    r.logprobs = structured::chat_logprobs(&req.common)?;
    let streams = submit_choices(&s, r, &req.common, "messages").await?;
    let id = format!("chatcmpl-{}", streams[0].id());
    let parse = crate::respond::Parsing {
        tools: p.parse,
        reasoning: p.reasoning,
    };
    respond(s, streams, id, Kind::Chat, &req.common, parse).await
}

/// `chat_template_kwargs`: only `enable_thinking` (a boolean) is read.
fn render_of(req: &ChatRequest) -> Result<crate::turn::Render, ApiError> {
    let mut r = crate::turn::Render::default();
    let Some(kw) = &req.chat_template_kwargs else {
        return Ok(r);
    };
    let bad = |m: String| ApiError::bad_request(m, "chat_template_kwargs");
    let map = kw
        .as_object()
        .ok_or_else(|| bad("chat_template_kwargs must be an object".into()))?;
    for (k, v) in map {
        match (k.as_str(), v) {
            ("enable_thinking", Value::Bool(b)) => r.thinking = Some(*b),
            ("enable_thinking", _) => {
                return Err(bad(
                    "chat_template_kwargs.enable_thinking must be true or false".into(),
                ));
            }
            (other, _) => {
                return Err(bad(format!(
                    "chat_template_kwargs.{other} is not read (only enable_thinking is)"
                )));
            }
        }
    }
    Ok(r)
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
    let streams = submit_choices(&s, r, &req.common, "prompt").await?;
    let id = format!("cmpl-{}", streams[0].id());
    respond(
        s,
        streams,
        id,
        Kind::Completion,
        &req.common,
        Default::default(),
    )
    .await
}
