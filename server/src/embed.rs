//! `/v1/embeddings` (OpenAI format) over a sentence-embedding model, served beside the generation
//! engine (`cinder serve LLM --embedding-model MODEL`).
//!
//! Embedding is CPU- (or device-) bound and batched inside the model, so requests run one at a time
//! on a blocking thread; a bounded number may wait, and more get 429 at once (backpressure, as the
//! engine's queue does for generation).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, TryAcquireError};

use crate::AppState;
use crate::error::{ApiError, ServerError};

/// A sentence-embedding model as the server sees it (the binary adapts a backend-specific model).
pub trait TextEmbedder: Send + Sync + 'static {
    /// Embedding width.
    fn dim(&self) -> usize;
    /// Tokens of one text as the model counts them (for `usage`).
    fn count_tokens(&self, text: &str) -> Result<usize, String>;
    /// One vector per text, in order; L2-normalized when `normalize` is set.
    fn embed(&self, texts: &[&str], normalize: bool) -> Result<Vec<Vec<f32>>, String>;
    /// The most tokens of one text the model embeds (what `/v1/models` reports).
    fn max_tokens(&self) -> usize;
}

/// The embedding model and its admission gate.
pub struct EmbeddingService {
    name: String,
    model: Arc<dyn TextEmbedder>,
    /// one permit: the request being embedded
    gate: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_waiting: usize,
    texts_total: AtomicU64,
    tokens_total: AtomicU64,
}

impl std::fmt::Debug for EmbeddingService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingService")
            .field("name", &self.name)
            .field("dim", &self.model.dim())
            .finish()
    }
}

impl EmbeddingService {
    /// Serves `model` under `name`; at most `max_waiting` requests wait behind the running one.
    pub fn new(name: impl Into<String>, model: Arc<dyn TextEmbedder>, max_waiting: usize) -> Self {
        Self {
            name: name.into(),
            model,
            gate: Arc::new(Semaphore::new(1)),
            waiting: AtomicUsize::new(0),
            max_waiting,
            texts_total: AtomicU64::new(0),
            tokens_total: AtomicU64::new(0),
        }
    }

    /// The most tokens of one text the model embeds.
    pub fn max_tokens(&self) -> usize {
        self.model.max_tokens()
    }

    /// The name clients send as `model`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Embedding width.
    pub fn dim(&self) -> usize {
        self.model.dim()
    }

    /// Checks `texts`, waits its turn (or refuses at once when too many wait) and embeds them on a
    /// blocking thread. Returns the vectors and the tokens counted.
    pub async fn run(
        &self,
        texts: Vec<String>,
        normalize: bool,
    ) -> Result<(Vec<Vec<f32>>, usize), ServerError> {
        if texts.is_empty() || texts.len() > MAX_INPUTS {
            return Err(ServerError::EmbedInput(format!(
                "input must hold 1..={MAX_INPUTS} texts, got {}",
                texts.len()
            )));
        }
        if let Some(i) = texts.iter().position(|t| t.trim().is_empty()) {
            return Err(ServerError::EmbedInput(format!("input[{i}] is empty")));
        }
        let permit = match self.gate.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(TryAcquireError::Closed) => return Err(ServerError::EmbedUnavailable),
            Err(TryAcquireError::NoPermits) => {
                if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.max_waiting {
                    self.waiting.fetch_sub(1, Ordering::SeqCst);
                    return Err(ServerError::EmbedBusy);
                }
                // Dropping this future (client gone) releases the waiting slot.
                let _slot = Waiting(&self.waiting);
                self.gate
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| ServerError::EmbedUnavailable)?
            }
        };
        let model = self.model.clone();
        let n = texts.len() as u64;
        // The permit moves into the blocking task: a client that disconnects mid-request does not
        // let the next request start while this one still holds the cores.
        let result = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let tokens = refs
                .iter()
                .map(|t| model.count_tokens(t))
                .sum::<Result<usize, String>>()?;
            model.embed(&refs, normalize).map(|v| (v, tokens))
        })
        .await;
        if let Ok(Ok((_, tokens))) = &result {
            self.texts_total.fetch_add(n, Ordering::Relaxed);
            self.tokens_total
                .fetch_add(*tokens as u64, Ordering::Relaxed);
        }
        match result {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ServerError::EmbedInput(e)),
            Err(_) => Err(ServerError::EmbedUnavailable),
        }
    }
}

impl EmbeddingService {
    /// Prometheus lines for the embedding model (appended to `/metrics`).
    pub fn render_metrics(&self, out: &mut String) {
        let lines: [(&str, &str, &str, f64); 3] = [
            (
                "cinder_embedding_queue_depth",
                "Embedding requests waiting behind the running one.",
                "gauge",
                self.waiting.load(Ordering::Relaxed) as f64,
            ),
            (
                "cinder_embedding_texts_total",
                "Texts embedded.",
                "counter",
                self.texts_total.load(Ordering::Relaxed) as f64,
            ),
            (
                "cinder_embedding_tokens_total",
                "Tokens of the texts embedded (before truncation).",
                "counter",
                self.tokens_total.load(Ordering::Relaxed) as f64,
            ),
        ];
        for (name, help, kind, v) in lines {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        }
    }
}

/// The HTTP form of an embedding failure.
fn api_error(e: ServerError) -> ApiError {
    match e {
        ServerError::EmbedBusy => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "the embedding queue is full; retry later",
        )
        .code("queue_full"),
        ServerError::EmbedInput(m) => ApiError::bad_request(m, "input"),
        other => ApiError::unavailable(&other.to_string()),
    }
}

/// `input`: one text, a list of texts, or token ids (refused: BERT inputs need the model's own
/// special tokens, which raw ids from another tokenizer would not carry).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    /// one text
    One(String),
    /// several texts
    Many(Vec<String>),
    /// token ids (one or several sequences)
    Tokens(Value),
}

/// The request body.
#[derive(Debug, Deserialize)]
pub struct EmbeddingRequest {
    /// the embedding model's name
    pub model: Option<String>,
    /// what to embed
    pub input: EmbeddingInput,
    /// `float` (default) or `base64` (little-endian f32, as OpenAI's clients request by default)
    pub encoding_format: Option<String>,
    /// must equal the model's width when given (no truncation of vectors)
    pub dimensions: Option<usize>,
    /// ignored (accepted for compatibility)
    #[serde(default)]
    pub user: Option<String>,
}

/// Most texts one request may carry (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

/// Releases a waiting slot when dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `POST /v1/embeddings`.
pub async fn embeddings(
    State(s): State<AppState>,
    body: Result<Json<EmbeddingRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Some(svc) = s.embedder.clone() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "this server runs the text-generation model {:?}; no embedding model is loaded \
                 (start it with --embedding-model)",
                s.cfg.model_name
            ),
        )
        .code("model_not_found")
        .param("model"));
    };
    let Json(req) = body.map_err(ApiError::from_rejection)?;
    if let Some(m) = &req.model
        && m != svc.name()
    {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "model {m:?} is not served here; embeddings come from {:?}",
                svc.name()
            ),
        )
        .code("model_not_found")
        .param("model"));
    }
    let texts = match req.input {
        EmbeddingInput::One(t) => vec![t],
        EmbeddingInput::Many(v) => v,
        EmbeddingInput::Tokens(_) => {
            return Err(ApiError::bad_request(
                "token-id input is not supported by this embedding model: send text",
                "input",
            ));
        }
    };
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                format!("encoding_format {other:?} is not float or base64"),
                "encoding_format",
            ));
        }
    };
    let dim = svc.model.dim();
    if let Some(d) = req.dimensions
        && d != dim
    {
        return Err(ApiError::bad_request(
            format!("this model makes {dim}-dimensional vectors; dimensions {d} is not offered"),
            "dimensions",
        ));
    }
    let (vectors, tokens) = svc.run(texts, true).await.map_err(api_error)?;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": svc.name(),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response())
}
