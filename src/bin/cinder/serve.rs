//! `cinder serve`: the OpenAI-compatible HTTP server (and gRPC) over the continuous-batching engine.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use cinder::models::decoder_embed::Embedder;
use cinder::prelude::*;
use cinder::runtime::engine::Engine;
use cinder::server::embed::{EmbeddingService, TextEmbedder};
use cinder::server::{ServerConfig, serve, state_with_embedder};
use clap::Args;

use crate::engine_flags::EngineFlags;

/// `cinder serve MODEL`
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Catalog name or path to a GGUF file.
    pub model: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// HTTP port (0: any free port; the chosen one is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// gRPC port (0: any free port).
    #[arg(long, default_value_t = 50051)]
    pub grpc_port: u16,
    /// Do not serve gRPC.
    #[arg(long)]
    pub no_grpc: bool,
    /// Accepted bearer API key (repeatable; also CINDER_API_KEY). None: no authentication.
    #[arg(long)]
    pub api_key: Vec<String>,
    /// Default request deadline in seconds (a request's `timeout` field overrides it).
    #[arg(long, default_value_t = 600.0)]
    pub request_timeout: f64,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 2 << 20)]
    pub max_body_bytes: usize,
    /// The model name clients send (default: the MODEL argument's catalog name or file stem).
    #[arg(long)]
    pub model_name: Option<String>,
    /// This replica's id, sent as `X-Cinder-Replica` (default: the host name).
    #[arg(long)]
    pub replica_id: Option<String>,
    /// Also serve `/v1/embeddings` (and gRPC `Embed`) with this sentence-embedding model (catalog
    /// name or path, e.g. all-minilm-l6-v2); clients send its name as `model`.
    #[arg(long)]
    pub embedding_model: Option<String>,
    /// Embedding requests that may wait behind the running one before new ones get 429.
    #[arg(long, default_value_t = 16)]
    pub embedding_queue: usize,
    /// A Jinja chat template file to use instead of the model's own (as llama-server's
    /// `--chat-template-file`).
    #[arg(long)]
    pub chat_template_file: Option<std::path::PathBuf>,
    /// Most responses the Responses API keeps for `GET /v1/responses/{id}` and
    /// `previous_response_id` (0: none; the oldest goes first).
    #[arg(long, default_value_t = 1000)]
    pub responses_store: usize,
    /// Seconds a stored response is kept.
    #[arg(long, default_value_t = 3600)]
    pub responses_retention: u64,
    #[command(flatten)]
    pub engine: EngineFlags,
}

/// Runs `cinder serve` on backend `B`.
pub struct ServeTask(pub ServeArgs, pub crate::Loader);

impl BackendTask for ServeTask {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let (a, loader) = (self.0, self.1);
        if !(a.request_timeout > 0.0 && a.request_timeout.is_finite()) {
            anyhow::bail!("--request-timeout must be a positive number of seconds");
        }
        let mut m = loader.load::<B>(&a.model, &device)?;
        if let Some(path) = &a.chat_template_file {
            let t = std::fs::read_to_string(path)
                .with_context(|| format!("reading the chat template {}", path.display()))?;
            match std::sync::Arc::get_mut(&mut m.tokenizer) {
                Some(tok) => tok.chat_template = Some(t),
                None => anyhow::bail!("the tokenizer is shared; cannot replace its chat template"),
            }
        }
        let draft = a.engine.spec.load_draft(&loader, &m, &device)?;
        let engine = Engine::start_with_draft::<B, _>(
            m.model.clone(),
            draft.map(|d| Box::new(d.model) as Box<dyn CausalLm<B> + Send + Sync>),
            m.tokenizer.clone(),
            a.engine.config()?,
        )
        .context("starting the engine")?;
        // A catalog name is the model's name as it is (`qwen2.5-coder-1.5b` has dots); a path
        // gives its file stem.
        let name = a.model_name.clone().unwrap_or_else(|| {
            if cinder::catalog::lookup(&a.model).is_some() {
                return a.model.clone();
            }
            std::path::Path::new(&a.model)
                .file_stem()
                .map_or(a.model.clone(), |s| s.to_string_lossy().into_owned())
        });
        let mut cfg = ServerConfig::new(name);
        cfg.api_keys = a.api_key.clone();
        if let Ok(k) = std::env::var("CINDER_API_KEY")
            && !k.trim().is_empty()
        {
            cfg.api_keys.push(k.trim().to_string());
        }
        cfg.request_timeout = Duration::from_secs_f64(a.request_timeout);
        cfg.max_body_bytes = a.max_body_bytes;
        cfg.responses_store = a.responses_store;
        cfg.responses_retention = Duration::from_secs(a.responses_retention);
        if let Some(r) = &a.replica_id {
            cfg.replica_id = r.clone();
        }
        let embedder = match &a.embedding_model {
            Some(name) => {
                let e = crate::embed_cmd::load_embedder::<B>(name, &device)?;
                Some(EmbeddingService::new(
                    name.clone(),
                    Arc::new(ServedEmbedder::new(e)),
                    a.embedding_queue,
                ))
            }
            None => None,
        };
        let st = state_with_embedder(engine.handle(), m.tokenizer.clone(), cfg, embedder);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        rt.block_on(async move {
            let http = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
                .await
                .with_context(|| format!("binding {}:{}", a.host, a.port))?;
            let grpc = if a.no_grpc {
                None
            } else {
                Some(
                    tokio::net::TcpListener::bind((a.host.as_str(), a.grpc_port))
                        .await
                        .with_context(|| format!("binding {}:{} for gRPC", a.host, a.grpc_port))?,
                )
            };
            {
                // The addresses on stdout (tests and scripts read them); logs go to stderr.
                let mut out = std::io::stdout().lock();
                writeln!(out, "listening on http://{}", http.local_addr()?)?;
                if let Some(g) = &grpc {
                    writeln!(out, "grpc listening on {}", g.local_addr()?)?;
                }
                out.flush()?;
            }
            serve(st, http, grpc, shutdown_signal()).await?;
            anyhow::Ok(())
        })?;
        engine.shutdown();
        Ok(())
    }
}

/// A text embedder (sentence encoder or pooled decoder) on backend `B`, as the server's
/// [`TextEmbedder`]. The mutex makes it `Sync`
/// whatever the backend's tensors are; the service runs one request at a time anyway.
struct ServedEmbedder<B: InferenceBackend> {
    model: std::sync::Mutex<Embedder<B>>,
    dim: usize,
}

impl<B: InferenceBackend> ServedEmbedder<B> {
    fn new(model: Embedder<B>) -> Self {
        let dim = model.dim();
        Self {
            model: std::sync::Mutex::new(model),
            dim,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&Embedder<B>) -> T) -> T {
        // A poisoned lock only means an earlier request panicked; the model itself is unchanged.
        let guard = self
            .model
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&guard)
    }
}

impl<B: InferenceBackend> TextEmbedder for ServedEmbedder<B> {
    fn dim(&self) -> usize {
        self.dim
    }

    fn count_tokens(&self, text: &str) -> Result<usize, String> {
        self.with(|m| {
            m.token_ids(text)
                .map(|ids| ids.len())
                .map_err(|e| e.to_string())
        })
    }

    fn embed(&self, texts: &[&str], normalize: bool) -> Result<Vec<Vec<f32>>, String> {
        self.with(|m| m.embed(texts, normalize).map_err(|e| e.to_string()))
    }

    fn max_tokens(&self) -> usize {
        self.with(|m| m.max_tokens())
    }
}

/// SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
