//! `cinder serve`: the OpenAI-compatible HTTP server (and gRPC) over the continuous-batching engine.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use cinder::prelude::*;
use cinder::runtime::engine::Engine;
use cinder::server::{ServerConfig, serve, state};
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
    #[command(flatten)]
    pub engine: EngineFlags,
}

/// Runs `cinder serve` on backend `B`.
pub struct ServeTask(pub ServeArgs);

impl BackendTask for ServeTask {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let a = self.0;
        if !(a.request_timeout > 0.0 && a.request_timeout.is_finite()) {
            anyhow::bail!("--request-timeout must be a positive number of seconds");
        }
        let m = crate::load_model::<B>(&a.model, &device)?;
        let engine =
            Engine::start::<B, _>(m.model.clone(), m.tokenizer.clone(), a.engine.config()?)
                .context("starting the engine")?;
        let name = a.model_name.clone().unwrap_or_else(|| {
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
        if let Some(r) = &a.replica_id {
            cfg.replica_id = r.clone();
        }
        let st = state(engine.handle(), m.tokenizer.clone(), cfg);
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
