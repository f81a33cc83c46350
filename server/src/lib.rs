//! # cinder-server
//!
//! Serving over the engine: an OpenAI-compatible HTTP API with Server-Sent Events streaming (axum), a
//! gRPC API (tonic, `proto/cinder/v1/cinder.proto`), Prometheus metrics, API keys, request
//! deadlines, bounded queues (429 / `RESOURCE_EXHAUSTED`) and graceful shutdown. The server only
//! holds an [`EngineHandle`] and the tokenizer: it is independent of the backend the engine runs on.
#![warn(missing_docs)]

pub mod anthropic;
pub mod embed;
mod error;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod openai;
mod respond;
pub mod responses;
pub mod store;
pub mod structured;
pub mod tokenize;
pub mod tools;
mod turn;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use cinder_runtime::engine::EngineHandle;
use cinder_runtime::tokenizer::Tokenizer;
pub use error::{ApiError, ServerError};
use tokio::net::TcpListener;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The `model` name clients must send (and `/v1/models` lists).
    pub model_name: String,
    /// Accepted bearer keys; empty: no authentication.
    pub api_keys: Vec<String>,
    /// Deadline of a request that sets none.
    pub request_timeout: Duration,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// This replica's name (`X-Cinder-Replica` header, metrics).
    pub replica_id: String,
    /// Most responses the Responses API keeps for `GET` and `previous_response_id` (0: none).
    pub responses_store: usize,
    /// How long a stored response is kept.
    pub responses_retention: Duration,
}

impl ServerConfig {
    /// Defaults for `model_name`: no keys, 10-minute deadline, 2 MiB bodies, replica = hostname,
    /// 1,000 stored responses kept for an hour.
    pub fn new(model_name: impl Into<String>) -> Self {
        Self {
            model_name: model_name.into(),
            api_keys: Vec::new(),
            request_timeout: Duration::from_secs(600),
            max_body_bytes: 2 << 20,
            replica_id: hostname(),
            responses_store: 1000,
            responses_retention: Duration::from_secs(3600),
        }
    }
}

/// This machine's host name (`/etc/hostname`, `$HOSTNAME`, else "cinder").
pub fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "cinder".into())
}

/// What every handler shares.
#[derive(Debug)]
pub struct Inner {
    engine: EngineHandle,
    tok: Arc<Tokenizer>,
    cfg: ServerConfig,
    metrics: metrics::Metrics,
    draining: AtomicBool,
    created: u64,
    embedder: Option<Arc<embed::EmbeddingService>>,
    /// The grammar compiler of the served vocabulary, built by the first constrained request.
    grammars: std::sync::OnceLock<Result<cinder_runtime::constraint::Grammars, String>>,
    /// The Responses API's past responses.
    responses: store::ResponseStore,
}

/// The handlers' state (cheap to clone).
pub type AppState = Arc<Inner>;

/// Builds the shared state.
pub fn state(engine: EngineHandle, tok: Arc<Tokenizer>, cfg: ServerConfig) -> AppState {
    state_with_embedder(engine, tok, cfg, None)
}

/// Builds the shared state with a sentence-embedding model behind `/v1/embeddings` and gRPC `Embed`.
pub fn state_with_embedder(
    engine: EngineHandle,
    tok: Arc<Tokenizer>,
    cfg: ServerConfig,
    embedder: Option<embed::EmbeddingService>,
) -> AppState {
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let responses = store::ResponseStore::new(cfg.responses_store, cfg.responses_retention);
    Arc::new(Inner {
        responses,
        engine,
        tok,
        cfg,
        metrics: metrics::Metrics::default(),
        draining: AtomicBool::new(false),
        created,
        embedder: embedder.map(Arc::new),
        grammars: std::sync::OnceLock::new(),
    })
}

/// Serves HTTP on `http` (and gRPC on `grpc`, if given) until `shutdown` resolves; then stops
/// admitting (new requests get 503, `/ready` turns 503) and waits for streams in flight to finish.
pub async fn serve(
    state: AppState,
    http: TcpListener,
    grpc: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let st = state.clone();
    tokio::spawn(async move {
        shutdown.await;
        st.draining.store(true, Ordering::SeqCst);
        tracing::info!("shutdown requested: draining");
        let _ = tx.send(true);
    });
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        while !*rx.borrow() {
            if rx.changed().await.is_err() {
                break;
            }
        }
    };
    let grpc_task = grpc.map(|l| {
        let st = state.clone();
        let rx = rx.clone();
        tokio::spawn(async move { grpc::serve(st, l, wait(rx)).await })
    });
    let app = http::router(state);
    axum::serve(
        http,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(wait(rx))
    .await
    .map_err(|e| ServerError::Io {
        what: "HTTP server".into(),
        source: e,
    })?;
    if let Some(t) = grpc_task {
        match t.await {
            Ok(r) => r?,
            Err(e) => return Err(ServerError::Grpc(e.to_string())),
        }
    }
    Ok(())
}
